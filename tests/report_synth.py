"""Synthetic request records with known distributions, for the store/compare/report tests.

Not part of the package: tests build runs from here so that every expected verdict follows from
the distribution parameters (seeded), not from hard-coded results.
"""

from __future__ import annotations

import random
from typing import Any

from phasescope.measure.records import Event, RequestRecord

NS = 1_000_000_000


def make_record(
    i: int,
    rng: random.Random,
    *,
    t_start_ns: int,
    prompt_tokens: int = 256,
    output_tokens: int = 32,
    ttft_s: float = 0.05,
    itl_s: float = 0.01,
    jitter: float = 0.1,
    tags: dict[str, Any] | None = None,
    model: str = "synthetic-model",
    target: str = "http://127.0.0.1:9",
    ok: bool = True,
) -> RequestRecord:
    """One streamed request: TTFT ~ ttft_s·LogNormal(0, jitter), then output_tokens−1 gaps of
    itl_s·LogNormal(0, jitter), one token per event."""
    t = t_start_ns
    first = t + int(ttft_s * rng.lognormvariate(0, jitter) * NS)
    events = [Event(first, "content", 1, 4)]
    cur = first
    for _ in range(output_tokens - 1):
        cur += int(itl_s * rng.lognormvariate(0, jitter) * NS)
        events.append(Event(cur, "content", 1, 4))
    r = RequestRecord(
        id=f"req-{i}",
        api="openai",
        target=target,
        model=model,
        prompt_tokens_requested=prompt_tokens,
        max_tokens=output_tokens,
        tags=dict(tags or {}),
        wall_start_ns=1_700_000_000 * NS + t_start_ns,
        t_start_ns=t_start_ns,
        t_conn_ready_ns=t_start_ns + 200_000,
        t_headers_ns=first - 1000,
        events=events if ok else [],
        t_done_ns=cur + 100_000,
        prompt_tokens=prompt_tokens,
        prompt_tokens_source="usage",
        output_tokens=output_tokens if ok else None,
        output_tokens_source="usage",
        server={"prompt_n": prompt_tokens, "prefill_s": ttft_s * 0.9, "predicted_n": output_tokens,
                "decode_s": itl_s * (output_tokens - 1)} if ok else None,
        ok=ok,
        http_status=200 if ok else 500,
        error_kind=None if ok else "http",
        error_message=None if ok else "boom",
    )
    return r


def sequential_run(
    n: int, seed: int, *, ttft_s: float = 0.05, itl_s: float = 0.01, sizes: tuple[int, ...] = (256,),
    ttft_per_token_s: float = 0.0, output_tokens: int = 32, jitter: float = 0.1, model: str = "synthetic-model",
    warmup: int = 0, errors: int = 0,
) -> list[RequestRecord]:
    """A probe-like run: ``n`` requests per prompt size, one at a time. TTFT grows linearly with
    the prompt (ttft_s + ttft_per_token_s·size)."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    t = 10 * NS
    i = 0
    for _ in range(warmup):
        r = make_record(i, rng, t_start_ns=t, ttft_s=ttft_s * 5, itl_s=itl_s, tags={"warmup": True}, model=model)
        out.append(r)
        t = (r.t_done_ns or t) + NS // 100
        i += 1
    for size in sizes:
        for _ in range(n):
            r = make_record(i, rng, t_start_ns=t, prompt_tokens=size, output_tokens=output_tokens,
                            ttft_s=ttft_s + ttft_per_token_s * size, itl_s=itl_s, jitter=jitter,
                            tags={"prompt_tokens": size} if len(sizes) > 1 else {}, model=model)
            out.append(r)
            t = (r.t_done_ns or t) + NS // 100
            i += 1
    for _ in range(errors):
        out.append(make_record(i, rng, t_start_ns=t, ok=False, model=model))
        i += 1
    return out


def concurrent_run(
    levels: tuple[int, ...], per_level: int, seed: int, *, ttft_s: float = 0.05, itl_s: float = 0.01,
    output_tokens: int = 32, model: str = "synthetic-model",
) -> list[RequestRecord]:
    """A bench-like sweep: at each concurrency c, ``per_level`` requests in waves of c; ITL grows
    with c (itl_s·(1 + 0.15·(c−1))), so throughput rises and p99 ITL too."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    t = 10 * NS
    i = 0
    for c in levels:
        itl = itl_s * (1 + 0.15 * (c - 1))
        for wave in range(0, per_level, c):
            end = t
            for k in range(min(c, per_level - wave)):
                r = make_record(i, rng, t_start_ns=t + k * 1000, output_tokens=output_tokens, ttft_s=ttft_s * (1 + 0.1 * c),
                                itl_s=itl, tags={"concurrency": c}, model=model)
                out.append(r)
                end = max(end, r.t_done_ns or end)
                i += 1
            t = end + NS // 1000
    return out
