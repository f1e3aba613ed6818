"""llama.cpp ``llama-server`` native ``POST /completion`` (api ``llamacpp``).

Request: ``prompt`` (text, or a list of token ids — then the prompt length is exact),
``n_predict``, ``ignore_eos`` (fixed output length), ``cache_prompt`` (default true on the
server), ``temperature``, ``stream``. Streamed events are ``data: {...}`` with ``content``,
``tokens`` (the token ids of this event, so per-event token counts are exact), ``stop``; the last
event has ``stop: true``, ``timings`` (``prompt_n``, ``prompt_ms``, ``predicted_n``,
``predicted_ms``, ``cache_n``), ``tokens_evaluated``, ``tokens_cached`` and ``stop_type``. There is
no ``[DONE]``. ``return_progress`` events (``prompt_progress``, ``tokens: [0]``, empty content) are
prompt-processing progress, not tokens. Mid-stream errors: ``data: {"error": {...}}`` and the
stream ends. Source: reference/server-apis.md §4, engine-samples ``c_completion_*``.

Counts: ``prompt_tokens`` = ``tokens_evaluated`` (full prompt, cached included; source
``server``), ``output_tokens`` = ``timings.predicted_n`` (``server``), cached = ``cache_n``.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._http import (
    Protocol,
    add_event,
    error_message_of,
    exchange,
    fill_fallback_counts,
    llamacpp_timings,
    new_record,
    set_count,
)
from phasescope.apis.base import GenRequest, Target
from phasescope.measure.records import RequestRecord


class _Native(Protocol):
    path = "/completion"
    framing = "sse"

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
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (not an object)")
        if "error" in obj:
            raise E.ServerStreamError(f"{self.target.display_url}{self.path}: server error mid-stream: {error_message_of(obj)}")
        if obj.get("stop"):
            self._final(obj)
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
            add_event(self.rec, t_ns, "content", n, len(content))
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
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed response (not an object)")
        if "error" in obj:
            raise E.ServerStreamError(f"{self.target.display_url}{self.path}: server error: {error_message_of(obj)}")
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
    try:
        async with session.get(target.base_url + "/props", headers=target.headers(),
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            if r.status != 200:
                return None
            d = await r.json(content_type=None)
            return d if isinstance(d, dict) else None
    except (aiohttp.ClientError, ValueError, TimeoutError):
        return None
