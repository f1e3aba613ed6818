"""Prometheus arithmetic on scraped values: counter increases with resets, histogram deltas, quantiles.

Definitions follow Prometheus so that a number here equals the PromQL query an operator would write:

* ``increase(c)`` over consecutive samples v0..vn = Σ_i d_i with d_i = v_i − v_{i−1} when
  v_i ≥ v_{i−1}, else d_i = v_i (a drop means the process restarted and the counter started again
  from 0 — Prometheus ``promql/functions.go`` ``extrapolatedRate`` counter-reset handling). We do not
  extrapolate to the window edges: our samples are the window edges.
* histogram deltas are taken bucket by bucket with the same reset rule (a reset is detected when the
  count or any cumulative bucket drops, or the bucket bounds change).
* ``histogram_quantile(φ, buckets)`` is Prometheus ``promql/quantile.go`` ``bucketQuantile``:
  rank = φ · N (N = count of the +Inf bucket); b = first bucket with cumulative count ≥ rank;
  if b is the +Inf bucket → the highest finite upper bound; else linear interpolation inside
  bucket b: lower + (upper − lower) · (rank − C[b−1]) / (C[b] − C[b−1]), with lower = 0 for the
  first bucket (or its upper bound if that is ≤ 0). No +Inf bucket, fewer than 2 buckets or N = 0
  → NaN (we return ``None``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Hist:
    """One histogram series: sorted upper bounds (the last is +Inf) with cumulative counts."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float

    @property
    def mean(self) -> float | None:
        """Mean observation = sum / count (``None`` with no observations)."""
        return self.sum / self.count if self.count > 0 else None


def counter_delta(prev: float | None, cur: float) -> float:
    """Increase of a counter between two samples; a drop is a restart, so the increase is ``cur``.

    A series absent from the previous scrape started from 0 in between (``prev is None`` → ``cur``).
    """
    if prev is None or math.isnan(prev):
        return cur
    if cur >= prev:
        return cur - prev
    return cur


def hist_delta(prev: Hist | None, cur: Hist) -> Hist:
    """Bucket-wise increase of a histogram between two scrapes, with counter-reset handling."""
    if prev is None or prev.bounds != cur.bounds:
        return cur
    reset = cur.count < prev.count or any(c < p for c, p in zip(cur.counts, prev.counts))
    if reset:
        return cur
    return Hist(
        bounds=cur.bounds,
        counts=tuple(c - p for c, p in zip(cur.counts, prev.counts)),
        sum=cur.sum - prev.sum if cur.sum >= prev.sum else cur.sum,
        count=cur.count - prev.count,
    )


def hist_add(a: Hist | None, b: Hist) -> Hist:
    """Sum of two histograms with the same bounds (PromQL ``sum by (le)``); ``a`` may be None."""
    if a is None:
        return b
    if a.bounds != b.bounds:
        # different bucket layouts cannot be added bucket by bucket; keep the larger population
        return a if a.count >= b.count else b
    return Hist(
        bounds=a.bounds,
        counts=tuple(x + y for x, y in zip(a.counts, b.counts)),
        sum=a.sum + b.sum,
        count=a.count + b.count,
    )


def histogram_quantile(q: float, hist: Hist | None) -> float | None:
    """φ-quantile of a (delta) histogram exactly as Prometheus ``histogram_quantile`` computes it.

    Returns ``None`` where Prometheus returns NaN (no +Inf bucket, < 2 buckets, no observations).
    """
    if hist is None or math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    # coalesce duplicate bounds (quantile.go coalesceBuckets) and sort
    pairs: dict[float, float] = {}
    for ub, c in zip(hist.bounds, hist.counts):
        pairs[ub] = pairs.get(ub, 0.0) + c
    bounds = sorted(pairs)
    if not bounds or not math.isinf(bounds[-1]) or bounds[-1] < 0:
        return None
    counts = [pairs[b] for b in bounds]
    # ensureMonotonic: cumulative counts must not decrease (floating-point noise, racing scrapes)
    for i in range(1, len(counts)):
        if counts[i] < counts[i - 1]:
            counts[i] = counts[i - 1]
    if len(bounds) < 2:
        return None
    observations = counts[-1]
    if observations == 0:
        return None
    rank = q * observations
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0
    end = bounds[b]
    count = counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:  # only reachable for φ = 0 on an empty first bucket (Prometheus: NaN)
        return start
    return start + (end - start) * (rank / count)
