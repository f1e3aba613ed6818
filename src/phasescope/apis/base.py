"""What every API client shares: where to send (:class:`Target`) and what to send (:class:`GenRequest`).

A client module exposes ``async def send(session, target, req) -> RequestRecord`` that never
raises for a server-side failure: the failure is recorded (``ok=False``, ``error_kind``,
``error_message``) so that every request leaves a record. Callers that want an exception (probe's
single requests) raise :func:`phasescope.probing.runner.error_from_record`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL without user:password@ and without query strings (which may hold keys)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if ":" in (parts.hostname or "") and not host.startswith("["):
        host = f"[{parts.hostname}]" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def check_url(value: str, flag: str = "URL") -> None:
    """A server URL that phasescope can send to: http(s), a host, a port 1–65535 (exit 2 otherwise)."""
    from phasescope.errors import InputError

    u = value.strip()
    if not u:
        raise InputError(f"{flag}: empty URL")
    full = u if "://" in u else "http://" + u
    try:
        parts = urlsplit(full)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise InputError(f"{flag}: malformed URL {_shown(full)} ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{flag}: not an http(s) URL: {_shown(full)}")
    if not host:
        raise InputError(f"{flag}: no host in URL {_shown(full)}")
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"{flag}: port {port} out of range 1-65535")
    try:
        if len(host) > 253 or any(len(lbl) > 63 for lbl in host.split(".")) or not host.strip("."):
            raise UnicodeError("label too long")
        host.encode("idna")
    except UnicodeError:
        raise InputError(f"{flag}: {host[:60]!r} is not a valid host name") from None
    try:
        redact_url(full)
    except ValueError as exc:
        raise InputError(f"{flag}: malformed URL ({exc})") from None


def _shown(u: str) -> str:
    # never echo credentials: drop anything before an @ and the query
    head, _, rest = u.partition("://")
    rest = rest.rsplit("@", 1)[-1].split("?", 1)[0]
    return f"{head}://{rest}"


@dataclass
class Timeouts:
    """Seconds; ``None`` disables. Each maps to its own error class in :mod:`phasescope.errors`."""

    connect_s: float | None = 10.0
    first_token_s: float | None = 300.0
    between_tokens_s: float | None = 60.0


@dataclass
class Target:
    """A server to measure. ``base_url`` has no trailing slash; ``api_key`` never leaves memory."""

    base_url: str = field(repr=False)
    api: str = "openai"  # a registered API name (phasescope.apis.registry), resolved, never "auto"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    engine: str | None = None  # vllm | sglang | tgi | llamacpp | ollama | unknown (from detection)
    engine_version: str | None = None

    @property
    def display_url(self) -> str:
        return redact_url(self.base_url)

    def __repr__(self) -> str:  # the URL may hold user:password@ or ?key=: show it redacted
        return f"Target(url={self.display_url!r}, api={self.api!r}, model={self.model!r}, engine={self.engine!r})"

    def __post_init__(self) -> None:
        from phasescope.redact import register, register_url

        register(self.api_key)  # masked in every text that leaves the process from now on
        register_url(self.base_url)

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


@dataclass
class GenRequest:
    """One generation request, API-neutral.

    ``prompt`` is text; ``prompt_token_ids`` (when set and the API accepts token ids) is sent
    instead so the length is exact. ``ignore_eos`` asks for exactly ``max_tokens`` tokens where the
    server supports it (vLLM/SGLang ``ignore_eos``+``min_tokens``, llama.cpp ``ignore_eos``/``n_predict``,
    Ollama ``num_predict`` only caps). ``cache_prompt`` None = server default.

    ``messages`` (chat APIs: ``/v1/chat/completions``, Ollama ``/api/chat``): the whole history to
    send, as the chat API expects it (a conversation resends every earlier turn); ``None`` = one
    user message holding ``prompt``. ``keep_text``: keep the reply's text (content, not reasoning)
    in ``record.tags["reply_text"]`` so the caller can append it to the next turn's history — the
    caller removes it before the record is written (:mod:`phasescope.load.conversation`).
    """

    prompt: str
    max_tokens: int = 128
    prompt_token_ids: list[int] | None = None
    prompt_tokens_expected: int | None = None
    stream: bool = True
    ignore_eos: bool = True
    temperature: float = 0.0
    cache_prompt: bool | None = None
    id: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    keep_text: bool = False


def take_reply(rec: Any) -> str:
    """The reply text a ``keep_text`` request kept, taken out of its record's tags (so it is never written)
    and trimmed as it is resent: chat templates such as llama.cpp's built-in Gemma one and Llama 3's trim each
    message's content, so a reply that began or ended with a newline, counted untrimmed, was one token longer
    than the server then tokenized it."""
    return str((rec.tags or {}).pop("reply_text", "") or "").strip()


def add_engine_fields(body: dict[str, Any], req: "GenRequest", tgt: "Target", *, ignore_eos: bool = True) -> None:
    """The engines' own request extensions, one rule for every OpenAI-shaped body: ``ignore_eos`` (with
    vLLM/SGLang's ``min_tokens``) when the request asks for it and ``ignore_eos`` says the endpoint reads
    it, llama.cpp's ``cache_prompt``, then the caller's ``extra_body``."""
    if req.ignore_eos and ignore_eos:
        body["ignore_eos"] = True
        if tgt.engine in ("vllm", "sglang"):
            body["min_tokens"] = req.max_tokens
    if req.cache_prompt is not None and tgt.engine == "llamacpp":
        body["cache_prompt"] = req.cache_prompt
    body.update(req.extra_body)
