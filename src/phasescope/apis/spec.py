"""What a wire protocol is, as data: one :class:`ApiSpec` per ``--api`` name, declared in its module.

The ``--api`` choices and help, detection's probes and their order, the client lookup
(:func:`phasescope.apis.get_client`), the warm-up GET, the chat endpoint a conversation takes, whether
prompts may be token ids and whether the server may tokenize for us are all read from the specs that
:mod:`phasescope.apis.registry` holds — a protocol is one module (its ``SPECS``) and one name there.

Detection (:mod:`phasescope.apis.detect`) asks each spec's ``probe`` in ``probe_rank`` order with one
:class:`Prober` for the URL; the first that returns a :class:`Detected` decides. The prober keeps every
GET's answer, so two probes reading the same path (llama.cpp's and the OpenAI-compatible one both read
``/v1/models``) send it once, and maps the first GET's connection failure to one clear error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import NOT_LISTENING_HINT, TRANSPORT, error_message_of, nothing_listening, transport_kind
from phasescope.apis._json import auth_headers, fetch_json
from phasescope.apis.base import Target, redact_url

if TYPE_CHECKING:
    from phasescope.apis.base import GenRequest
    from phasescope.measure.records import RequestRecord

SendFn = Callable[[aiohttp.ClientSession, Target, "GenRequest"], Awaitable["RequestRecord"]]
ProbeFn = Callable[["Prober"], Awaitable["Detected | None"]]


def _never(_target: Target) -> bool:
    return False


@dataclass(frozen=True)
class ApiSpec:
    """One ``--api`` name and everything phasescope needs to speak it.

    ``send(session, target, req)`` makes one request and returns its record, never raising for the
    server's failures (:mod:`phasescope.apis.base`). ``endpoint``: the generation path, shown after the
    name in ``--api`` help. ``warm_path``: the cheap GET that opens pooled connections before a run
    (:func:`phasescope.apis.warm_up`). ``framing``: ``sse`` streams may take the raw path
    (:mod:`phasescope.apis._fast`), ``ndjson`` streams take aiohttp's. ``chat_api``: the ``--api`` name
    that speaks this server's chat endpoint (None: this one), with ``chat_tags`` on each such request
    (Ollama's ``/api/chat`` is its own api with ``ollama_chat``). ``takes_token_ids(target)``: whether a
    list of token ids may be the prompt (exact lengths). ``tokenizer``: whether the server may have
    ``/tokenize`` (:mod:`phasescope.apis.tokenize`). ``probe``: detection for ``auto`` (None: never
    detected, only forced), asked in ``probe_rank`` order; ``probe_label`` names what it looks for in
    the "not an LLM server" message. ``engine``: forcing this API on a server detected as another
    engine is a :class:`~phasescope.errors.WrongApiError` saying ``is not {engine_label}``.
    ``url_suffixes``: endpoint paths a user may paste after the base URL (cut off).
    """

    name: str
    endpoint: str
    send: SendFn
    warm_path: str = "/v1/models"
    framing: str = "sse"
    chat_api: str | None = None
    chat_tags: Mapping[str, Any] = field(default_factory=dict)
    takes_token_ids: Callable[[Target], bool] = _never
    tokenizer: bool = True
    probe: ProbeFn | None = None
    probe_rank: int = 100
    probe_label: str = ""
    engine: str | None = None
    engine_label: str = ""
    url_suffixes: tuple[str, ...] = ()

    @property
    def help(self) -> str:
        """``name (endpoint)``: how ``--api`` help lists it."""
        return f"{self.name} ({self.endpoint})" if self.endpoint else self.name


@dataclass
class Detected:
    engine: str  # vllm | sglang | tgi | llamacpp | ollama | openai (unknown OpenAI-compatible)
    api: str  # the API probe should speak by default
    models: list[str] = field(default_factory=list)
    version: str | None = None
    props: dict[str, Any] | None = None  # llama.cpp /props
    model_meta: dict[str, Any] | None = None  # llama.cpp /v1/models meta (n_params, size, ...)
    has_tokenize: bool = False


@dataclass
class ModelListing:
    """``GET /v1/models``: ``ok`` when it answered a ``data`` list; the ids, the first ``meta`` and ``owned_by``."""

    status: int
    ok: bool
    models: list[str] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    owned_by: Any = None


#: what makes an optional GET "not here": a transport failure, or a stall (named by :meth:`Prober.get`)
_OPTIONAL_MISS: tuple[type[BaseException], ...] = (*TRANSPORT, E.TargetError)


class Prober:
    """The GETs detection sends to one URL, each at most once (answers are kept by path).

    The first GET maps a connection failure to one clear error (nothing listening →
    :class:`~phasescope.errors.ConnectError`, no answer → :class:`~phasescope.errors.ConnectTimeout`);
    a later GET that stalls is the server's failure, named with its path
    (:class:`~phasescope.errors.TargetError`); other aiohttp errors of a later GET reach the probe,
    which decides whether the GET was optional."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, api_key: str | None = None,
                 connect_timeout_s: float = 10.0) -> None:
        self.session = session
        self.base = base_url.rstrip("/")
        self.shown = redact_url(self.base)
        self.api_key = api_key
        self.headers = auth_headers(api_key)
        if api_key:  # Anthropic's API reads the key from x-api-key (llama-server and vLLM read either)
            self.headers["x-api-key"] = api_key
        self.timeout_s = max(2.0, connect_timeout_s)
        self._answers: dict[str, tuple[int, Any, str]] = {}
        self._listing: ModelListing | None = None
        #: (path, HTTP status) of the latest GET that answered: what "not an LLM server" quotes
        self.last: tuple[str, int] | None = None

    async def get(self, path: str) -> tuple[int, Any, str]:
        """(status, parsed JSON or None, text) of ``GET path``, sent once per prober."""
        if path in self._answers:
            return self._answers[path]
        first = not self._answers and self.last is None
        t = self.timeout_s
        try:
            got = await fetch_json(self.session, self.base + path, headers=self.headers, timeout_s=t)
        except TRANSPORT as exc:  # the one table's kinds (apis/_errors.py)
            kind = transport_kind(exc)
            if kind == "not_listening":
                assert isinstance(exc, aiohttp.ClientConnectorError)
                if first:
                    raise nothing_listening(self.shown, exc.os_error) from None
                raise
            if kind in ("timeout", "connect_timeout"):
                if first:
                    raise E.ConnectTimeout(f"{self.shown} did not answer within {t:g} s",
                                           hint="check the URL and raise --connect-timeout") from None
                raise E.TargetError(f"{self.shown}{path} did not answer within {t:g} s (headers and body)",
                                    hint="the server stalls; check it, or raise --connect-timeout") from None
            if first:
                raise E.ConnectError(f"cannot talk HTTP to {self.shown}: {type(exc).__name__}: {exc}",
                                     hint=NOT_LISTENING_HINT) from None
            raise
        self._answers[path] = got
        self.last = (path, got[0])
        return got

    async def optional(self, path: str) -> tuple[int | None, Any, str]:
        """``GET path`` where no answer only means "not here": a stall costs its timeout, never the run."""
        try:
            return await self.get(path)
        except _OPTIONAL_MISS:
            return None, None, ""

    async def models(self) -> ModelListing:
        """``GET /v1/models``: 401/403 are an :class:`~phasescope.errors.AuthError`; every model id is
        registered for redaction (an id holding the key is masked whole, everywhere)."""
        if self._listing is not None:
            return self._listing
        st, obj, text = await self.get("/v1/models")
        if st in (401, 403):
            what = "unauthorized (401)" if st == 401 else "forbidden (403)"
            raise E.AuthError(f"{self.shown}/v1/models: {what}: {error_message_of(obj) or text[:200]}",
                              hint="pass --api-key or set PHASESCOPE_API_KEY (or OPENAI_API_KEY)"
                              if not self.api_key else "check the API key")
        out = ModelListing(st, False)
        if st == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list):
            from phasescope.redact import register_tainted

            out.ok = True
            for m in obj["data"]:
                if isinstance(m, dict) and m.get("id"):
                    out.models.append(str(m["id"]))
                    register_tainted(out.models[-1])
                    out.owned_by = out.owned_by or m.get("owned_by")
                    if out.meta is None and isinstance(m.get("meta"), dict):
                        out.meta = m["meta"]
        self._listing = out
        return out


def engine_from_metrics(text: str) -> str | None:
    """The engine a ``/metrics`` exposition comes from, by the one Prometheus-prefix table
    (:func:`phasescope.apis.engines.detect_engine`: the prefix most sample names carry)."""
    from phasescope.apis.engines import detect_engine

    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return detect_engine(names)
