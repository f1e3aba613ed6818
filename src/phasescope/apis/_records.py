"""What a client writes into its :class:`~phasescope.measure.records.RequestRecord`: a new record
per request, its events, its token counts (each with its source, the better source winning) and
llama.cpp's ``timings`` in the normalised ``server`` dict.
"""

from __future__ import annotations

import uuid
from typing import Any

from phasescope.apis.base import GenRequest, Target
from phasescope.measure.records import Event, RequestRecord


def new_record(target: Target, req: GenRequest) -> RequestRecord:
    return RequestRecord(
        id=req.id or uuid.uuid4().hex[:16],
        api=target.api,
        target=target.display_url,
        model=target.model,
        stream=req.stream,
        prompt_tokens_requested=req.prompt_tokens_expected,
        max_tokens=req.max_tokens,
        tags=dict(req.tags),
    )


def add_event(rec: RequestRecord, t_ns: int, kind: str, n_tokens: int | None, n_chars: int) -> None:
    rec.events.append(Event(t_ns, kind, n_tokens, n_chars))


def set_count(rec: RequestRecord, which: str, value: Any, source: str) -> None:
    """Set ``prompt_tokens``/``output_tokens`` unless a better source already set it."""
    if value is None:
        return
    try:
        v = int(value)
    except (TypeError, ValueError):
        return
    from phasescope.measure.records import COUNT_SOURCES

    cur_src = getattr(rec, f"{which}_source")
    rank = {s: i for i, s in enumerate(COUNT_SOURCES)}
    if cur_src is None or rank.get(source, 99) <= rank.get(cur_src, 99):
        setattr(rec, which, v)
        setattr(rec, f"{which}_source", source)


def fill_fallback_counts(rec: RequestRecord, req: GenRequest) -> None:
    """Counts when the server reported none: events for output, the prompt builder for input."""
    if rec.output_tokens is None:
        tok = rec.token_events()
        if tok:
            if all(e.n_tokens is not None for e in tok):
                set_count(rec, "output_tokens", sum(int(e.n_tokens or 0) for e in tok), "events")
            else:
                set_count(rec, "output_tokens", len(tok), "events")
    if rec.prompt_tokens is None and req.prompt_tokens_expected is not None:
        src = "tokenizer" if req.prompt_token_ids is not None or req.tags.get("prompt_source") == "tokenizer" else "requested"
        set_count(rec, "prompt_tokens", req.prompt_tokens_expected, src)
    if rec.output_tokens is not None and req.max_tokens:
        rec.stopped_early = rec.output_tokens < req.max_tokens


def llamacpp_timings(t: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp ``timings`` → normalised server dict (seconds).

    ``prompt_ms`` = slot start → end of prompt processing (includes sampling the first token), so
    it is the server-side TTFT; ``predicted_ms`` = end of prompt → last token, which covers
    ``predicted_n − 1`` decode steps (the first token is free). Source: llama.cpp
    ``tools/server/server-common.h`` at 0c1e57098.
    """
    def num(k: str) -> float | None:
        v = t.get(k)
        return float(v) if isinstance(v, (int, float)) else None

    pm, gm = num("prompt_ms"), num("predicted_ms")
    out: dict[str, Any] = {
        "source": "llamacpp_timings",
        "prefill_s": pm / 1000 if pm is not None else None,
        "decode_s": gm / 1000 if gm is not None else None,
        "ttft_s": pm / 1000 if pm is not None else None,
        "prompt_n": t.get("prompt_n"),
        "predicted_n": t.get("predicted_n"),
        "cache_n": t.get("cache_n"),
        "raw": dict(t),
    }
    return out
