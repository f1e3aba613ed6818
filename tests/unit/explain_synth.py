"""Synthetic request records with chosen timings, for the explain analysis and rule tests."""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.experiments.batching import BatchingResult, BatchLevel
from phasescope.experiments.common import ExperimentInfo
from phasescope.measure.records import Event, RequestRecord

S = 1_000_000_000  # ns per second
_N = [0]


def rec(experiment: str, phase: str, *, ttft: float, t0: float = 0.0, n_out: int = 10, gap: float = 0.01,
        gaps: Sequence[float] | None = None, prompt: int = 100, server: dict[str, Any] | None = None,
        cached: int | None = None, ok: bool = True, max_tokens: int | None = None, **tags: Any) -> RequestRecord:
    """A streamed request that started at ``t0`` s, first token after ``ttft`` s, then ``n_out − 1``
    tokens separated by ``gap`` s (or the explicit ``gaps``)."""
    _N[0] += 1
    start = int(t0 * S)
    t = start + int(ttft * S)
    events = [Event(t, "content", 1, 3)]
    gs = list(gaps) if gaps is not None else [gap] * (n_out - 1)
    for g in gs:
        t += int(g * S)
        events.append(Event(t, "content", 1, 3))
    return RequestRecord(
        id=f"r{_N[0]}", api="openai", target="http://127.0.0.1:1", model="m", prompt_tokens=prompt,
        prompt_tokens_source="usage", prompt_tokens_requested=prompt, output_tokens=len(events),
        output_tokens_source="usage", max_tokens=max_tokens or len(events), t_start_ns=start, events=events,
        t_done_ns=t + 1000, ok=ok, server=server, cached_prompt_tokens=cached,
        tags={"experiment": experiment, "phase": phase, **tags},
    )


def lv(c: int, tput: float, itl99: float = 0.02) -> BatchLevel:
    """One level of the batching experiment: ``c`` streams, ``tput`` output tok/s, p99 ITL ``itl99`` s."""
    return BatchLevel(concurrency=c, n=c, n_failed=0, output_tok_s=tput, per_user_decode_tok_s=tput / c,
                      itl_p50_s=0.015, itl_p99_s=itl99, ttft_p50_s=0.1, ttft_p99_s=0.15, queue_p50_s=None, wall_s=1.0,
                      output_tok_s_ci=[tput * 0.98, tput * 1.02], output_tok_s_n=max(3, 2 * c))  # a clear case


def bt(levels: list[BatchLevel], bound: int | None, src: str, knee: int | None = None, reached: bool = False) -> BatchingResult:
    """A batching result over ``levels`` with its concurrency bound (``src``: where it came from)."""
    r = BatchingResult(ExperimentInfo(name="batching"), levels=levels, knee_concurrency=knee, knee_reached=reached,
                       max_concurrency_bound=bound, bound_source=src)
    r.throughput_gain_x = max(x.output_tok_s for x in levels) / levels[0].output_tok_s
    r.itl_p99_growth_x = levels[-1].itl_p99_s / levels[0].itl_p99_s
    return r
