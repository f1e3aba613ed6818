"""llama.cpp ``llama-server`` native ``POST /completion`` (api ``llamacpp``).

Request: ``prompt`` (text, or a list of token ids — then the prompt length is exact),
``n_predict``, ``ignore_eos`` (fixed output length), ``cache_prompt`` (default true on the
server), ``temperature``, ``stream``. Streamed events are ``data: {...}`` with ``content``,
``tokens`` (the token ids of this event, so per-event token counts are exact), ``stop``; the last
event has ``stop: true``, ``timings`` (``prompt_n``, ``prompt_ms``, ``predicted_n``,
``predicted_ms``, ``cache_n``), ``tokens_evaluated``, ``tokens_cached`` and ``stop_type``. There is
no ``[DONE]``. ``return_progress`` events (``prompt_progress``, ``tokens: [0]``, empty content) are
prompt-processing progress, not tokens. Mid-stream errors: ``data: {"error": {...}}`` and the
stream ends. Text between ``<think>`` and ``</think>`` is recorded as reasoning events
(:mod:`phasescope.apis._think`: this endpoint never applies ``--reasoning-format``). Source: llama.cpp ``tools/server/README.md`` and ``tools/server/server-task.cpp`` at 0c1e57098,
and the streams recorded from the embedded engine (tests/data).

Counts: ``prompt_tokens`` = ``tokens_evaluated`` (full prompt, cached included; source
``server``), ``output_tokens`` = ``timings.predicted_n`` (``server``), cached = ``cache_n``.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope.apis._errors import TRANSPORT, error_message_of
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._json import auth_headers, fetch_json_sync, try_json
from phasescope.apis._records import add_event, fill_fallback_counts, llamacpp_timings, new_record, set_count
from phasescope.apis._think import ThinkSpans
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.spec import ApiSpec, Detected, Prober
from phasescope.measure.records import RequestRecord


class _Native(Protocol):
    path = "/completion"
    framing = "sse"

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        super().__init__(target, req, rec)
        self._think = ThinkSpans()  # /completion never splits reasoning out: <think> spans are in content

    def body(self) -> dict[str, Any]:
        req = self.req
        b: dict[str, Any] = {
            "prompt": req.prompt_token_ids if req.prompt_token_ids is not None else req.prompt,
            "n_predict": req.max_tokens,
            "temperature": req.temperature,
            "stream": req.stream,
        }
        if req.ignore_eos:
            b["ignore_eos"] = True
        if req.cache_prompt is not None:
            b["cache_prompt"] = req.cache_prompt
        b.update(req.extra_body)
        return b

    def on_message(self, obj: Any, t_ns: int) -> None:
        obj = self.message(obj, "event")
        if obj.get("stop"):
            self._final(obj)
            n_pred = obj.get("tokens_predicted")
            if isinstance(n_pred, int) and n_pred > 0 and not self.rec.token_events():
                # llama-server streams a token only once its text is whole UTF-8: output that never formed a
                # character (byte tokens of synthetic weights) first reaches the client here, all at once
                add_event(self.rec, t_ns, "content", n_pred, len(obj.get("content") or ""))
            add_event(self.rec, t_ns, "usage", None, 0)
            self.done = True
            return
        if "prompt_progress" in obj:
            add_event(self.rec, t_ns, "empty", None, 0)
            return
        content = obj.get("content") or ""
        toks = obj.get("tokens")
        n = len(toks) if isinstance(toks, list) else None
        if content or n:
            kind = self._think.kind(content, self.rec.events) if isinstance(content, str) and content else "content"
            add_event(self.rec, t_ns, kind, n, len(content))
        else:
            add_event(self.rec, t_ns, "empty", None, 0)

    def _final(self, obj: dict[str, Any]) -> None:
        rec = self.rec
        if isinstance(obj.get("timings"), dict):
            rec.server = llamacpp_timings(obj["timings"])
            set_count(rec, "output_tokens", obj["timings"].get("predicted_n"), "server")
            if isinstance(obj["timings"].get("cache_n"), int):
                rec.cached_prompt_tokens = obj["timings"]["cache_n"]
        set_count(rec, "prompt_tokens", obj.get("tokens_evaluated"), "server")
        set_count(rec, "output_tokens", obj.get("tokens_predicted"), "server")
        st = obj.get("stop_type")
        if st:
            rec.finish_reason = {"limit": "length", "eos": "stop", "word": "stop"}.get(str(st), str(st))

    def on_body(self, obj: Any) -> None:
        obj = self.message(obj, "response")
        self._final(obj)

    def finish(self) -> None:
        fill_fallback_counts(self.rec, self.req)


async def send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """One ``/completion`` request; never raises for server-side failures."""
    rec = new_record(target, req)
    return await exchange(session, _Native(target, req, rec))


async def get_props(session: aiohttp.ClientSession, target: Target, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """llama-server ``GET /props`` (slots, ``n_ctx``, ``model_ftype``, ``model_path``, and on builds
    that report them ``n_batch``/``n_ubatch``); ``None`` when it does not answer with an object."""
    return await fetch_props(session, target.base_url, timeout_s=timeout_s, api_key=target.api_key)


# --- monitoring endpoints: GET /slots and GET /props (watch) ------------------------------------------
#: how to turn /slots on, said when it is off (llama-server: "--slots, --no-slots  expose slots
#: monitoring endpoint (default: enabled)" at the pinned build 0c1e570; off answers HTTP 501)
SLOTS_HOW_TO_ENABLE = "llama-server serves /slots by default; it was started with --no-slots: restart it without it (or with --slots)"


def _base(url: str) -> str:
    u = url.rstrip("/")
    for tail in ("/metrics", "/v1"):
        if u.endswith(tail):
            u = u[: -len(tail)]
    return u


async def fetch_slots(session: aiohttp.ClientSession, url: str, *, timeout_s: float = 5.0,
                      api_key: str | None = None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """``GET /slots`` of a llama-server (base URL, or its /metrics or /v1 URL): (the slot objects,
    None), or (None, why not) — disabled (HTTP 501 "This server does not support slots endpoint"),
    refused, or not answering. Never raises for the server's failures."""
    status, obj, err = await try_json(session, _base(url) + "/slots", headers=auth_headers(api_key), timeout_s=timeout_s)
    if status == 200 and isinstance(obj, list) and all(isinstance(s, dict) for s in obj):
        return obj, None
    msg = error_message_of(obj) if isinstance(obj, dict) else err
    if status == 501:
        return None, f"/slots is disabled (HTTP 501{': ' + msg if msg else ''}); {SLOTS_HOW_TO_ENABLE}"
    if status == 404:
        return None, ("no /slots here (HTTP 404: an older llama-server, or a proxy in front of it that does not pass "
                      "/slots on); llama-server serves /slots by default (--slots)")
    if status in (401, 403):
        return None, f"/slots refused (HTTP {status}); pass --api-key"
    if status is None:
        return None, f"/slots did not answer: {err}"
    return None, f"/slots answered HTTP {status}" + (f": {msg}" if msg else " with no slot list")


async def fetch_props(session: aiohttp.ClientSession, url: str, *, timeout_s: float = 5.0,
                      api_key: str | None = None) -> dict[str, Any] | None:
    """``GET /props`` (``total_slots``, ``default_generation_settings.n_ctx``, ``build_info``,
    ``endpoint_slots``...), or None when it is not there."""
    status, obj, _ = await try_json(session, _base(url) + "/props", headers=auth_headers(api_key), timeout_s=timeout_s)
    return obj if status == 200 and isinstance(obj, dict) else None


# --- health: GET /health ------------------------------------------------------------------------------
#: llama-server's health endpoint: 200 ``{"status": "ok"}`` once the model is loaded, 503 while it loads;
#: also the cheap GET that opens pooled connections before a run (:func:`phasescope.apis.warm_up`)
HEALTH_PATH = "/health"


def health_status_sync(base_url: str, timeout_s: float = 2.0) -> int | None:
    """``GET /health`` without an event loop (the embedded engine's supervisor waits on its child
    with it): the HTTP status (200 ready, 503 loading), or None when nothing answers."""
    try:
        return fetch_json_sync(base_url.rstrip("/") + HEALTH_PATH, timeout_s=timeout_s)[0]
    except (OSError, ValueError):  # URLError is an OSError
        return None


def props_sync(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """``GET /props`` without an event loop; raises ``OSError`` (``urllib.error.URLError``) when
    nothing answers and ``ValueError`` when the answer is not a 200 JSON object."""
    status, obj = fetch_json_sync(base_url.rstrip("/") + "/props", timeout_s=timeout_s)
    if status != 200 or not isinstance(obj, dict):
        raise ValueError(f"/props answered HTTP {status}" + ("" if isinstance(obj, dict) else " without a JSON object"))
    return obj


async def probe(p: Prober) -> Detected | None:
    """``GET /props`` → has ``default_generation_settings`` or ``build_info``: llama.cpp ``llama-server``
    (the model from ``GET /v1/models``, else ``model_alias``)."""
    try:
        st, props, _ = await p.get("/props")
    except TRANSPORT:  # not this server; a stall (TargetError) is the server's failure
        return None
    if not (st == 200 and isinstance(props, dict) and ("default_generation_settings" in props or "build_info" in props)):
        return None
    listing = await p.models()
    models = listing.models
    if not models and props.get("model_alias"):
        models = [str(props["model_alias"])]
    return Detected("llamacpp", "llamacpp", models, version=str(props.get("build_info") or "") or None,
                    props=props, model_meta=listing.meta, has_tokenize=True)


#: ``--api llamacpp``: the native ``/completion`` (token-id prompts, ``timings``)
SPECS = (
    ApiSpec("llamacpp", "/completion", send, warm_path=HEALTH_PATH, chat_api="chat",
            takes_token_ids=lambda t: True, probe=probe, probe_rank=20, probe_label="/props (llama.cpp)",
            engine="llamacpp", engine_label="llama.cpp llama-server (no /props)", url_suffixes=("/completion",)),
)
