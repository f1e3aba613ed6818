"""``batching``: aggregate throughput and per-user latency as concurrency grows.

At each level c (1, 2, 4, 8, …, bounded by the server's slots/pool) c streams run at once (closed
loop: each worker sends its next request when the previous finishes). Per level:

* ``output_tok_s`` — all output tokens ÷ (last token of the level − first request start): the
  aggregate, prefill included, as ``vllm bench serve``'s output throughput.
* ``itl_p50_s`` / ``itl_p99_s`` — per-token inter-token latency over every stream
  (``measure.derive.itl_s``), ``ttft_p50_s`` / ``ttft_p99_s`` — time to first token.
* ``queue_p50_s`` — median of TTFT − server-timed prefill, when the server times its prefill
  (llama.cpp ``prompt_ms``): time spent waiting for a slot plus transport; ``queue_share_total`` =
  Σ (TTFT − server prefill) ÷ Σ TTFT over the level's requests, the share of all TTFT spent waiting
  (a ratio of sums: the median of per-request shares hides the few requests that waited longest).
  That difference also holds what every request spends outside prefill on an idle server (the
  network, HTTP, tokenization): ``unloaded_overhead_s`` is its median at the lowest level, and
  ``wait_share_total`` = Σ max(0, TTFT − server prefill − unloaded_overhead_s) ÷ Σ TTFT is the share
  spent waiting — what the queueing rule decides by (a 120 ms network is no queue).

The knee: the lowest level after which no higher level adds ``KNEE_GAIN`` (15 %) aggregate
throughput per doubling of concurrency. ``knee_concurrency`` is ``None`` with ``knee_reached = False`` when throughput
was still rising at the highest level tested. A knee at 1 means batching gave nothing at all.

Each level's figures carry a 95 % interval (issue 29), stored beside them: ``output_tok_s_ci`` from the
requests' step times (:func:`aggregate_rate_interval`, over ``output_tok_s_n`` requests — never
per-request durations, which count a queued request's wait as slow decode), ``per_user_decode_tok_s_ci`` and ``ttft_p50_s_ci`` (intervals of the medians). The explain rules claim a
knee, no gain or scaling only where these intervals part (:mod:`phasescope.diagnose.batching_rules`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from phasescope.diagnose.thresholds import KNEE_GAIN  # per doubling (the rule gates on it too)
from phasescope.experiments.common import ExperimentInfo, finite, med, ok, output_tokens_of, pct, select, server_prefill_s
from phasescope.measure import derive
from phasescope.measure.interval import Interval, median_interval, t_quantile, to_ci
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "batching"


@dataclass
class BatchLevel:
    concurrency: int
    n: int
    n_failed: int
    output_tok_s: float | None
    per_user_decode_tok_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    queue_p50_s: float | None
    wall_s: float | None
    #: Σ (TTFT − server prefill) ÷ Σ TTFT over the level's server-timed requests
    queue_share_total: float | None = None
    #: Σ max(0, TTFT − server prefill − the unloaded overhead) ÷ Σ TTFT: the share spent waiting
    wait_share_total: float | None = None
    #: 95 % intervals from the level's per-request samples (see the module docstring)
    output_tok_s_ci: list[float] | None = None
    output_tok_s_n: int = 0
    per_user_decode_tok_s_ci: list[float] | None = None
    ttft_p50_s_ci: list[float] | None = None


@dataclass
class BatchingResult:
    info: ExperimentInfo
    levels: list[BatchLevel] = field(default_factory=list)
    max_concurrency_bound: int | None = None
    bound_source: str | None = None
    knee_concurrency: int | None = None
    knee_reached: bool | None = None
    throughput_gain_x: float | None = None
    itl_p99_growth_x: float | None = None
    ttft_p99_growth_x: float | None = None
    #: median TTFT − server prefill at the lowest level: outside prefill even with no queue (transport)
    unloaded_overhead_s: float | None = None
    notes: list[str] = field(default_factory=list)

    name: str = NAME


def aggregate_rate_interval(good: Sequence[RequestRecord], agg: float | None, *, n_boot: int = 2000,
                            seed: int = 0) -> Interval | None:
    """The level's aggregate rate ``agg`` (tokens ÷ wall) with a 95 % interval as wide as its step times wandered.

    Each request contributes its mean inter-token gap (``derive.itl_s``): its own steps, never its wait
    for a slot (a per-request duration counts a queued request's wait as slow decode, so a one-slot
    server's clear "no gain" would read "cannot tell"). Host load slows whole requests, so requests, not
    tokens, are the samples. Two intervals, and the union of both is kept:

    * a log-t interval of the requests' mean step time (timing noise is multiplicative), scaled onto
      ``agg`` — honest with few requests;
    * a bootstrap of the level's wall: each request's steps are redrawn from the observed step times,
      each worker's busy time moves by its requests' redrawn decode, and the wall is the slowest worker's
      end — the closed loop ends when the last stream does, so the drain's spread counts too.

    None with fewer than two requests that decoded two tokens."""
    if not agg or agg <= 0:
        return None
    rows = []  # (worker, mean gap, gaps, end offset)
    for r in good:
        g = [x for x in derive.itl_s(r) if x > 0]
        end = derive.last_token_ns(r) or r.t_done_ns
        if g and end:
            rows.append((r.tags.get("worker", r.id), sum(g) / len(g), len(g), end))
    n = len(rows)
    if n < 2:
        return None
    means = np.asarray([m for _, m, _, _ in rows])
    logs = np.log(means)
    half = t_quantile(n - 1) * float(logs.std(ddof=1)) / math.sqrt(n)
    lo, hi = agg * math.exp(-half), agg * math.exp(half)
    t0 = min(r.t_start_ns for r in good)
    workers: dict[Any, list[int]] = {}
    for i, (w, _, _, _) in enumerate(rows):
        workers.setdefault(w, []).append(i)
    busy = {w: (max(rows[i][3] for i in ix) - t0) / 1e9 for w, ix in workers.items()}
    wall = max(busy.values())
    if wall > 0:
        rng = np.random.default_rng(seed)
        draws = means[rng.integers(0, n, size=(n_boot, n))]  # each request's redrawn mean step time
        shift = (draws - means[None, :]) * np.asarray([k for _, _, k, _ in rows], dtype=float)[None, :]
        walls = np.full(n_boot, -np.inf)
        for w, ix in workers.items():
            walls = np.maximum(walls, busy[w] + shift[:, ix].sum(axis=1))
        walls = walls[walls > 0]
        if walls.size:
            rates = agg * wall / walls
            lo = min(lo, float(np.quantile(rates, 0.025)))
            hi = max(hi, float(np.quantile(rates, 0.975)))
    # min/max: the aggregate each request's own step time would give (its mean gap against their geometric mean)
    gm = float(np.exp(logs.mean()))
    return Interval(agg, min(lo, agg), max(hi, agg), n, "log-t+bootstrap", 0.95, agg * gm / float(means.max()),
                    agg * gm / float(means.min()))


def _outside_prefill(rs: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """(TTFT − server prefill, TTFT) of every request the server timed."""
    out = []
    for r in ok(rs):
        t, p = derive.ttft_s(r), server_prefill_s(r)
        if t is not None and p is not None:
            out.append((max(0.0, t - p), t))
    return out


def level_stats(c: int, rs: Sequence[RequestRecord], overhead_s: float | None = None) -> BatchLevel:
    """One level's figures; ``overhead_s``: the time outside prefill with no queue (the lowest level's),
    taken off each request's before its wait counts in ``wait_share_total``."""
    good = ok(rs)
    starts = [r.t_start_ns for r in good]
    ends = [derive.last_token_ns(r) or r.t_done_ns for r in good]
    ends_f = [e for e in ends if e]
    wall = (max(ends_f) - min(starts)) / 1e9 if good and ends_f else None
    out_total = sum(output_tokens_of(r) or 0 for r in good)
    itls: list[float] = []
    for r in good:
        itls.extend(derive.itl_s(r))
    ttfts = [derive.ttft_s(r) for r in good]
    pairs = _outside_prefill(good)
    queues, timed = [q for q, _ in pairs], [t for _, t in pairs]
    waits = [max(0.0, q - (overhead_s or 0.0)) for q in queues]
    agg = (out_total / wall) if wall and wall > 0 else None
    tput = aggregate_rate_interval(good, agg)
    tput_ci = to_ci(tput)
    return BatchLevel(
        concurrency=c, n=len(good), n_failed=len(rs) - len(good),
        output_tok_s=agg,
        per_user_decode_tok_s=med(derive.decode_tok_s(r) for r in good),
        itl_p50_s=pct(itls, 50), itl_p99_s=pct(itls, 99),
        ttft_p50_s=pct(ttfts, 50), ttft_p99_s=pct(ttfts, 99),
        queue_p50_s=med(queues) if queues else None, wall_s=wall,
        queue_share_total=(sum(queues) / sum(timed)) if timed and sum(timed) > 0 else None,
        wait_share_total=(sum(waits) / sum(timed)) if timed and sum(timed) > 0 else None,
        output_tok_s_ci=tput_ci, output_tok_s_n=tput.n if tput else 0,
        per_user_decode_tok_s_ci=to_ci(median_interval([derive.decode_tok_s(r) for r in good])),
        ttft_p50_s_ci=to_ci(median_interval(ttfts)),
    )


def find_knee(levels: Sequence[BatchLevel]) -> tuple[int | None, bool | None]:
    """(knee concurrency, reached?) — (None, None) with < 2 levels.

    The knee is the lowest level c_k that no higher level beats by ``KNEE_GAIN`` per doubling:
    tput(c) < tput(c_k) · KNEE_GAIN^log2(c / c_k) for every tested c > c_k. Looking past the next
    level matters on CPUs, where 2 streams can gain nothing while 4 gain 2× (engine.md §6)."""
    lv = [x for x in levels if x.output_tok_s]
    if len(lv) < 2:
        return None, None
    for i, a in enumerate(lv[:-1]):
        beaten = any(
            b.output_tok_s >= a.output_tok_s * KNEE_GAIN ** math.log2(b.concurrency / a.concurrency)  # type: ignore[operator]
            for b in lv[i + 1:] if b.concurrency > a.concurrency)
        if not beaten:
            return a.concurrency, True
    return None, False


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None,
            bound: int | None = None, bound_source: str | None = None) -> BatchingResult:
    info = info or ExperimentInfo(name=NAME)
    res = BatchingResult(info=info, max_concurrency_bound=bound, bound_source=bound_source)
    rs = select(records, NAME, phase="measure")
    by_c: dict[int, list[RequestRecord]] = {}
    for r in rs:
        by_c.setdefault(int(r.tags.get("concurrency") or 1), []).append(r)
    low = _outside_prefill(by_c[min(by_c)]) if by_c else []
    res.unloaded_overhead_s = med(q for q, _ in low) if low else None
    res.levels = [level_stats(c, by_c[c], res.unloaded_overhead_s) for c in sorted(by_c)]
    res.knee_concurrency, res.knee_reached = find_knee(res.levels)
    lv = [x for x in res.levels if x.output_tok_s]
    if len(lv) >= 2:
        first, top = lv[0], max(lv, key=lambda x: x.output_tok_s or 0)
        res.throughput_gain_x = top.output_tok_s / first.output_tok_s  # type: ignore[operator]
        last = lv[-1]
        if first.itl_p99_s and last.itl_p99_s:
            res.itl_p99_growth_x = last.itl_p99_s / first.itl_p99_s
        if first.ttft_p99_s and last.ttft_p99_s:
            res.ttft_p99_growth_x = last.ttft_p99_s / first.ttft_p99_s
    if not finite(x.output_tok_s for x in res.levels):
        res.notes.append("no level completed a request")
    return res


def levels_for(bound: int) -> list[int]:
    """1, 2, 4, … up to ``bound`` (the bound itself included when it is not a power of two)."""
    out, c = [], 1
    while c <= bound:
        out.append(c)
        c *= 2
    if out[-1] != bound:
        out.append(bound)
    return out


async def run(ctx: RunContext, budget_s: float, *, prompt_tokens: int = 64, output_tokens: int | None = None,
              per_worker: int = 2, max_concurrency: int | None = None) -> BatchingResult:
    """Closed-loop levels 1, 2, 4, … bounded by the server's slots (llama.cpp) or 16, and by the
    budget (each level's cost estimated as if batching gave nothing)."""
    import asyncio
    import time

    from phasescope.experiments.context import request_time_s

    started = time.time()
    ctx.start_clock(budget_s)
    c = ctx.calib
    assert c is not None, "calibrate first"
    if max_concurrency is not None:
        bound, src = max_concurrency, "--max-concurrency"
    elif ctx.facts.slots:
        bound, src = ctx.facts.slots, ctx.facts.slots_source
    else:
        bound, src = 16, "phasescope's cap: the server does not report how many requests it runs at once"
    if output_tokens is None:  # level 1 (per_worker + 1 requests) takes at most a fifth of the budget
        output_tokens = int(max(12, min(48, 0.2 * budget_s * c.decode_tok_s / (per_worker + 1))))
    t1 = request_time_s(c, prompt_tokens, output_tokens)
    planned = levels_for(max(1, bound))
    ctx.say(f"{NAME}: concurrency {', '.join(map(str, planned))} while the budget lasts (bound {bound}: {src}), "
            f"{prompt_tokens}-token prompts, {output_tokens} output tokens")
    levels: list[int] = []
    t_start = time.monotonic()
    last_wall: float | None = None
    for lv in planned:
        if ctx.over():
            break
        # the next level's cost: the calibrated worst case (no batching gain) before anything ran,
        # then from the last level measured (twice the streams cost at most twice its time)
        k = per_worker + 1 if lv == 1 else per_worker
        est = (k * lv * t1) if last_wall is None else last_wall * 2 * k / (per_worker + 1 if levels[-1] == 1 else per_worker)
        spent = time.monotonic() - t_start
        if len(levels) >= 2 and spent + est > 0.95 * budget_s:
            break
        prompts = [[await ctx.prompt(prompt_tokens) for _ in range(k)] for _ in range(lv)]

        async def worker(w: int, lv: int = lv, prompts: list = prompts) -> None:
            for i, p in enumerate(prompts[w]):
                if i and ctx.over():
                    break
                await ctx.send(p.request(output_tokens), NAME, phase="measure", concurrency=lv, worker=w, i=i)

        t_lv = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(lv)))
        last_wall = time.monotonic() - t_lv
        levels.append(lv)
        ctx.say(f"{NAME}: concurrency {lv} done ({last_wall:.1f} s)")
    params = {"levels": levels, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
              "per_worker": per_worker, "budget_s": budget_s}
    return analyze(ctx.records, ctx.info(NAME, started, params), bound=bound, bound_source=src)


#: explain's batching (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.20, run=lambda ctx, budget_s, suite: run(ctx, budget_s),
                      analyze=analyze, view=view.batching, rule=rules.BATCHING)
