"""``queue``: does a queue form under load, and is the KV pool what fills up?

Runs the batching load at a concurrency above the server's slots (or the highest batching level)
while sampling ``/metrics`` every ``interval``: waiting requests (vLLM ``num_requests_waiting``,
SGLang ``num_queue_reqs``, TGI ``tgi_queue_size``, llama.cpp ``requests_deferred``), running
requests and KV-cache usage (vLLM ``kv_cache_usage_perc``, SGLang ``token_usage``; llama.cpp has
none since #13660). The seed's sign of a full pool: waiting > 0 while KV usage ≈ 1.

Client side, on every request: TTFT and, when the server times its prefill, the share of TTFT that
was not prefill, weighted by the time spent: ``ttft_queue_share_total`` = Σ (TTFT − server prefill) ÷
Σ TTFT over the measured requests (with a bootstrap interval over requests,
``ttft_queue_share_total_ci``). Beside it, the per-request distribution: ``ttft_queue_shares`` (each
request's (TTFT − prefill) / TTFT) and their median ``ttft_queue_share``. The sentences use the total:
two requests that waited 37 s of 37.7 s beside four that waited 15 ms of 1.5 s spent 92 % of all their
TTFT waiting, although the median request waited 1 %.

TTFT − server prefill also holds what every request spends outside prefill on an idle server (the
network, HTTP, tokenization: the calibration's fixed overhead, ``unloaded_overhead_s`` in the params);
``ttft_wait_share_total`` = Σ max(0, TTFT − server prefill − that overhead) ÷ Σ TTFT is the share spent
waiting, and the client's channel decides by it (a 120 ms network is no queue).

``queueing`` is ``True`` when waiting > 0 in at least ``WAIT_SHARE_MIN`` of the samples or the
time-weighted wait share of TTFT ≥ 0.5; ``False`` when /metrics was read and waiting stayed 0 (and no queue share
says otherwise); ``None`` when neither channel is available.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import dataclass, field
from typing import Sequence

from phasescope.measure.interval import Interval

from phasescope.experiments.common import ExperimentInfo, med, ok, pct, select, server_prefill_s
from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "queue"
WAIT_SHARE_MIN = 0.1
KV_FULL = 0.95
QUEUE_SHARE_MIN = 0.5
#: with the server's slots unknown, no queue at fewer concurrent requests than this says little
UNKNOWN_SLOTS_MIN = 8


@dataclass
class QueueSample:
    t_s: float
    waiting: float | None
    running: float | None
    kv_usage: float | None


@dataclass
class QueueResult:
    info: ExperimentInfo
    concurrency: int | None = None
    metrics_available: bool = False
    metrics_source: str | None = None
    samples: list[QueueSample] = field(default_factory=list)
    waiting_max: float | None = None
    waiting_mean: float | None = None
    waiting_share: float | None = None
    running_max: float | None = None
    kv_usage_max: float | None = None
    kv_pool_full: bool | None = None
    preemptions: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    #: median of the per-request shares (TTFT − server prefill) / TTFT: what the typical request saw
    ttft_queue_share: float | None = None
    #: Σ (TTFT − server prefill) ÷ Σ TTFT: the share of all time-to-first-token spent waiting (the sentences use it)
    ttft_queue_share_total: float | None = None
    ttft_queue_share_total_ci: list[float] | None = None
    #: Σ max(0, TTFT − server prefill − the unloaded overhead) ÷ Σ TTFT: the share spent waiting (decides)
    ttft_wait_share_total: float | None = None
    #: each measured request's share, in the order sent (the distribution beside the two summaries)
    ttft_queue_shares: list[float] = field(default_factory=list)
    queueing: bool | None = None
    reason: str = ""
    #: the server's reported slots (llama.cpp /props); None when it does not say
    slots: int | None = None
    slots_source: str | None = None

    name: str = NAME


def analyze(records: Sequence[RequestRecord], samples: Sequence[QueueSample] = (),
            info: ExperimentInfo | None = None, metrics_source: str | None = None,
            preemptions: float | None = None, overhead_s: float | None = None) -> QueueResult:
    """``overhead_s``: what a request spends outside prefill on an idle server (default: the params'
    ``unloaded_overhead_s``, where :func:`run` keeps the calibration's, else 0)."""
    info = info or ExperimentInfo(name=NAME)
    if overhead_s is None:
        overhead_s = float(info.params.get("unloaded_overhead_s") or 0.0)
    res = QueueResult(info=info, samples=list(samples), metrics_source=metrics_source, preemptions=preemptions)
    rs = ok(select(records, NAME, phase="measure"))
    cs = [r.tags.get("concurrency") for r in rs if r.tags.get("concurrency")]
    res.concurrency = int(cs[0]) if cs else None
    ttfts = [derive.ttft_s(r) for r in rs]
    res.ttft_p50_s, res.ttft_p99_s = pct(ttfts, 50), pct(ttfts, 99)
    pairs = []
    for r in rs:
        t, p = derive.ttft_s(r), server_prefill_s(r)
        if t and p is not None and t > 0:
            pairs.append((max(0.0, t - p), t))
    res.ttft_queue_shares = [round(w / t, 6) for w, t in pairs]
    res.ttft_queue_share = med(w / t for w, t in pairs) if pairs else None
    total = share_total(pairs)
    if total is not None:
        res.ttft_queue_share_total, res.ttft_queue_share_total_ci = total.value, total.ci
        res.ttft_wait_share_total = sum(max(0.0, w - overhead_s) for w, _ in pairs) / sum(t for _, t in pairs)
    beyond = (f", {res.ttft_wait_share_total:.0%} beyond the {overhead_s * 1e3:.0f} ms every request spends outside "
              f"prefill on an idle server" if overhead_s > 0 and res.ttft_wait_share_total is not None else "")
    w = [s.waiting for s in samples if s.waiting is not None]
    res.metrics_available = bool(w)
    if w:
        res.waiting_max = max(w)
        res.waiting_mean = sum(w) / len(w)
        res.waiting_share = sum(1 for x in w if x > 0) / len(w)
    run = [s.running for s in samples if s.running is not None]
    res.running_max = max(run) if run else None
    kv = [s.kv_usage for s in samples if s.kv_usage is not None]
    if kv:
        res.kv_usage_max = max(kv)
        res.kv_pool_full = res.kv_usage_max >= KV_FULL
    by_metrics = None if not w else (res.waiting_share or 0) >= WAIT_SHARE_MIN
    if by_metrics is False and not res.running_max:
        # the samples never saw a request running: they missed the load, so their zeros say nothing
        by_metrics = None
    all_ran = (by_metrics and res.running_max is not None and res.concurrency is not None
               and res.running_max >= res.concurrency)
    if all_ran:  # every request ran at once at some point: they waited for a scheduler step, not for room
        by_metrics = False
    by_client = None if res.ttft_wait_share_total is None else res.ttft_wait_share_total >= QUEUE_SHARE_MIN
    if by_metrics or by_client:
        res.queueing = True
        parts = []
        if by_metrics:
            parts.append(f"waiting > 0 in {res.waiting_share:.0%} of /metrics samples (max {res.waiting_max:.0f})")
        if by_client:
            parts.append(f"{res.ttft_queue_share_total:.0%} of all TTFT was not prefill (Σ waiting ÷ Σ TTFT; "
                         f"the median request: {res.ttft_queue_share:.0%}){beyond}")
        res.reason = "; ".join(parts)
    elif by_metrics is False:
        res.queueing = False
        res.reason = (f"all {res.concurrency} requests ran at once (running max {res.running_max:.0f} in /metrics); "
                      f"waiting was > 0 only between an arrival and the next scheduler step"
                      if all_ran else "waiting stayed at 0 in /metrics")
    elif by_client is False:
        res.queueing = False
        res.reason = (f"only {res.ttft_wait_share_total:.0%} of all TTFT was waiting: {res.ttft_queue_share_total:.0%} "
                      f"was outside the server's prefill, {overhead_s * 1e3:.0f} ms of each request's on an idle server "
                      f"too" if beyond else f"only {res.ttft_queue_share_total:.0%} of all TTFT was outside the server's prefill")
    elif not rs:
        sent = len(select(records, NAME, phase="measure"))
        res.reason = (f"none of the {sent} requests finished within the experiment's time, and /metrics never "
                      f"showed one running: cannot tell")
    elif w:
        res.reason = "/metrics never showed a request running while the load ran (its samples missed it): cannot tell"
    else:
        res.reason = "no /metrics queue gauge and no server-timed prefill: cannot tell"
    return res


def share_total(pairs: Sequence[tuple[float, float]], *, n_boot: int = 2000, seed: int = 0) -> Interval | None:
    """Σ part ÷ Σ whole over ``(part, whole)`` pairs (e.g. (TTFT − prefill, TTFT) per request), with a
    percentile-bootstrap interval over the pairs: the share of the time spent, not of the requests."""
    import numpy as np

    from phasescope.measure.interval import CONFIDENCE, single

    a = np.asarray([(float(w), float(t)) for w, t in pairs if t and t > 0], dtype=float)
    if a.size == 0:
        return None
    v = float(a[:, 0].sum() / a[:, 1].sum())
    n = len(a)
    if n == 1:
        return single(v)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    boots = a[idx, 0].sum(axis=1) / a[idx, 1].sum(axis=1)
    lo, hi = float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))
    shares = a[:, 0] / a[:, 1]
    return Interval(v, min(lo, v), max(hi, v), n, "bootstrap", CONFIDENCE, float(shares.min()), float(shares.max()))


async def run(ctx: RunContext, budget_s: float, *, concurrency: int | None = None, prompt_tokens: int = 64,
              output_tokens: int | None = None, per_worker: int = 2, interval_s: float = 0.2) -> QueueResult:
    """Load above the server's slots while sampling /metrics (see module docstring)."""
    import asyncio
    import time

    from phasescope.experiments.context import counter, gauge, request_time_s, scrape_snapshot

    started = time.time()
    ctx.start_clock(budget_s)
    c = ctx.calib
    assert c is not None, "calibrate first"
    timed = ctx.target.engine in ("llamacpp", "ollama")  # server-timed prefill in every response
    if not ctx.facts.metrics and not timed:
        res = QueueResult(info=ctx.info(NAME, started, {}))
        res.info.skipped = ("no /metrics and no server-timed prefill: queueing cannot be observed (vLLM, SGLang and "
                            "TGI serve /metrics by default; start llama-server with --metrics)")
        res.reason = res.info.skipped
        return res
    slots = ctx.facts.slots
    cq = concurrency or min(32, 2 * slots if slots else 16)
    if output_tokens is None:  # a slow decoder gets short outputs before it gets fewer requests
        output_tokens = int(max(4, min(32, 0.1 * budget_s * c.decode_tok_s)))
    t1 = request_time_s(c, prompt_tokens, output_tokens)
    # a queue needs more requests than the server runs at once: its slots + 2, or when it does not
    # say, at least UNKNOWN_SLOTS_MIN
    floor = min(cq, slots + 2) if slots else UNKNOWN_SLOTS_MIN

    def est(n: int, k: int) -> float:  # as if batching gave nothing (worst case)
        return k * n * t1 * 1.2

    if concurrency is None:
        if est(cq, per_worker) > 0.85 * budget_s:
            per_worker = 1
        while cq > floor and est(cq, per_worker) > 0.85 * budget_s:
            cq = max(floor, cq * 3 // 4)
    ctx.say(f"{NAME}: {cq} concurrent requests{f' on {slots} slots' if slots else ''}, sampling /metrics every "
            f"{interval_s:g} s" if ctx.facts.metrics else f"{NAME}: {cq} concurrent requests (no /metrics)")
    prompts = [[await ctx.prompt(prompt_tokens) for _ in range(per_worker)] for _ in range(cq)]
    samples: list[QueueSample] = []
    stop = asyncio.Event()
    t0 = time.perf_counter()
    first = await scrape_snapshot(ctx) if ctx.facts.metrics else None

    async def sampler() -> Any:
        last = first
        while not stop.is_set():
            snap = await scrape_snapshot(ctx)
            if snap is not None:
                last = snap
                samples.append(QueueSample(time.perf_counter() - t0, gauge(snap, "waiting"), gauge(snap, "running"),
                                           gauge(snap, "kv_usage")))
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except asyncio.TimeoutError:
                pass
        return last

    async def worker(w: int) -> None:
        for i, p in enumerate(prompts[w]):
            if i and ctx.over():
                break
            await ctx.send(p.request(output_tokens), NAME, phase="measure", concurrency=cq, worker=w, i=i)

    samp = asyncio.create_task(sampler()) if ctx.facts.metrics else None
    try:
        await asyncio.gather(*(worker(w) for w in range(cq)))
    finally:
        stop.set()
        last = await samp if samp is not None else None
    pre = None
    if first is not None and last is not None:
        a, b = counter(first, "preemptions"), counter(last, "preemptions")
        pre = (b - a) if a is not None and b is not None else None
    params = {"concurrency": cq, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
              "per_worker": per_worker, "interval_s": interval_s, "budget_s": budget_s,
              "unloaded_overhead_s": c.overhead_s}
    res = analyze(ctx.records, samples, ctx.info(NAME, started, params),
                  metrics_source=ctx.facts.metrics_engine, preemptions=pre)
    res.slots, res.slots_source = ctx.facts.slots, ctx.facts.slots_source
    if res.queueing is False and not res.slots and cq < UNKNOWN_SLOTS_MIN and concurrency is None:
        res.queueing = None
        res.reason = (f"no queue at {cq} concurrent requests, but the server does not say how many it runs at once "
                      f"and the budget allowed only {cq} (a longer --budget sends more)")
    return res


#: explain's queue (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.13, run=lambda ctx, budget_s, suite: run(ctx, budget_s),
                      analyze=analyze, view=view.queue, rule=rules.QUEUE)
