"""``queue``: does a queue form under load, and is the KV pool what fills up?

Runs the batching load at a concurrency above the server's slots (or the highest batching level)
while sampling ``/metrics`` every ``interval``: waiting requests (vLLM ``num_requests_waiting``,
SGLang ``num_queue_reqs``, TGI ``tgi_queue_size``, llama.cpp ``requests_deferred``), running
requests and KV-cache usage (vLLM ``kv_cache_usage_perc``, SGLang ``token_usage``; llama.cpp has
none since #13660). The seed's sign of a full pool: waiting > 0 while KV usage ≈ 1.

Client side, on every request: TTFT and, when the server times its prefill, the share of TTFT that
was not prefill (``ttft_queue_share`` = median of (TTFT − server prefill) / TTFT).

``queueing`` is ``True`` when waiting > 0 in at least ``WAIT_SHARE_MIN`` of the samples or the
queue share of TTFT ≥ 0.5; ``False`` when /metrics was read and waiting stayed 0 (and no queue share
says otherwise); ``None`` when neither channel is available.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from phasescope.experiments.common import ExperimentInfo, med, ok, pct, select, server_prefill_s
from phasescope.measure import derive
from phasescope.measure.records import RequestRecord

NAME = "queue"
WAIT_SHARE_MIN = 0.1
KV_FULL = 0.95
QUEUE_SHARE_MIN = 0.5


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
    ttft_queue_share: float | None = None
    queueing: bool | None = None
    reason: str = ""

    name: str = NAME


def analyze(records: Sequence[RequestRecord], samples: Sequence[QueueSample] = (),
            info: ExperimentInfo | None = None, metrics_source: str | None = None,
            preemptions: float | None = None) -> QueueResult:
    info = info or ExperimentInfo(name=NAME)
    res = QueueResult(info=info, samples=list(samples), metrics_source=metrics_source, preemptions=preemptions)
    rs = ok(select(records, NAME, phase="measure"))
    cs = [r.tags.get("concurrency") for r in rs if r.tags.get("concurrency")]
    res.concurrency = int(cs[0]) if cs else None
    ttfts = [derive.ttft_s(r) for r in rs]
    res.ttft_p50_s, res.ttft_p99_s = pct(ttfts, 50), pct(ttfts, 99)
    shares = []
    for r in rs:
        t, p = derive.ttft_s(r), server_prefill_s(r)
        if t and p is not None and t > 0:
            shares.append(max(0.0, (t - p) / t))
    res.ttft_queue_share = med(shares) if shares else None
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
    by_client = None if res.ttft_queue_share is None else res.ttft_queue_share >= QUEUE_SHARE_MIN
    if by_metrics or by_client:
        res.queueing = True
        parts = []
        if by_metrics:
            parts.append(f"waiting > 0 in {res.waiting_share:.0%} of /metrics samples (max {res.waiting_max:.0f})")
        if by_client:
            parts.append(f"{res.ttft_queue_share:.0%} of TTFT was not prefill")
        res.reason = "; ".join(parts)
    elif by_metrics is False:
        res.queueing = False
        res.reason = "waiting stayed at 0 in /metrics"
    elif by_client is False:
        res.queueing = False
        res.reason = f"only {res.ttft_queue_share:.0%} of TTFT was outside the server's prefill"
    else:
        res.reason = "no /metrics queue gauge and no server-timed prefill: cannot tell"
    return res
