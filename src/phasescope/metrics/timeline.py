"""A sliding window of snapshots: rates, window quantiles, and the one-line summary ``watch`` shows.

Feed snapshots in time order (``add``); the window keeps every snapshot newer than
``window_s`` plus the newest one older than that (the window's base). Over the window:

* counter increase = Σ over consecutive snapshot pairs of the reset-aware delta (see
  :mod:`phasescope.metrics.promql`), summed over the selected series; rate = increase / Δt where
  Δt = t_last − t_base (monotonic ns);
* a histogram over the window = bucket-wise Σ of pair deltas, then ``histogram_quantile`` on it —
  the equivalent of ``histogram_quantile(φ, sum by (le) (increase(x_bucket[window])))``;
* gauges are the newest snapshot's values, summed over series (``kv_usage``: max, so one full
  engine of several shows).

Series are summed by default; ``select={"model_name": "m"}`` keeps only matching series (series that
lack the label are kept: llama.cpp and TGI carry no labels), and ``group_by=("model_name",)``
keeps groups apart (:meth:`Timeline.summary_by`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from phasescope.metrics.engines import PROFILES
from phasescope.metrics.parse import SeriesKey, Snapshot
from phasescope.metrics.promql import Hist, counter_delta, hist_add, hist_delta, histogram_quantile

GroupKey = tuple[tuple[str, str], ...]

#: how a gauge is combined over series; default "sum"
GAUGE_AGG: dict[str, str] = {
    "kv_usage": "max",
    "prefix_cache_hit_rate_gauge": "mean",
    "prompt_tok_s_gauge": "sum",
    "generation_tok_s_gauge": "sum",
    "spec_accept_length": "mean",
    "spec_accept_rate": "mean",
}

#: the keys of :meth:`Timeline.summary` in display order (the ``--json`` / CSV contract)
SUMMARY_KEYS: tuple[str, ...] = (
    "running",
    "waiting",
    "kv_usage",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "ttft_mean_s",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "itl_mean_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "queue_mean_s",
    "prefill_mean_s",
    "decode_mean_s",
    "prompt_tok_s",
    "generation_tok_s",
    "prefix_cache_hit_rate",
    "prefill_speed_tok_s",
    "preemptions",
    "requests_per_s",
    "ttft_observations",
    "itl_observations",
    "spec_acceptance_rate",
    "spec_tokens_per_step",
)


def _selected(key: SeriesKey, select: Mapping[str, str] | None) -> bool:
    if not select:
        return True
    d = dict(key)
    return all(d.get(k, v) == v for k, v in select.items())


def _group(key: SeriesKey, group_by: tuple[str, ...] | None) -> GroupKey:
    if not group_by:
        return ()
    d = dict(key)
    return tuple((g, d.get(g, "")) for g in group_by)


class Timeline:
    """Sliding window of :class:`Snapshot` s with Prometheus-style window arithmetic."""

    def __init__(self, window_s: float = 60.0) -> None:
        if not window_s > 0:
            raise ValueError("window_s must be > 0")
        self.window_s = float(window_s)
        self.snaps: deque[Snapshot] = deque()

    # -- feeding ------------------------------------------------------------------------------
    def add(self, snap: Snapshot) -> None:
        """Append a snapshot (time order) and drop those no longer needed as the window base."""
        if self.snaps and snap.t_ns < self.snaps[-1].t_ns:
            raise ValueError("snapshots must be added in time order")
        self.snaps.append(snap)
        horizon = snap.t_ns - int(self.window_s * 1e9)
        while len(self.snaps) >= 2 and self.snaps[1].t_ns <= horizon:
            self.snaps.popleft()

    def __len__(self) -> int:
        return len(self.snaps)

    @property
    def latest(self) -> Snapshot | None:
        return self.snaps[-1] if self.snaps else None

    @property
    def span_s(self) -> float:
        """Seconds between the window's base and its newest snapshot (0 with < 2 snapshots)."""
        if len(self.snaps) < 2:
            return 0.0
        return (self.snaps[-1].t_ns - self.snaps[0].t_ns) / 1e9

    @property
    def engine(self) -> str | None:
        return self.snaps[-1].engine if self.snaps else None

    # -- raw window arithmetic ----------------------------------------------------------------
    def increase(
        self, name: str, *, select: Mapping[str, str] | None = None, group_by: tuple[str, ...] | None = None
    ) -> dict[GroupKey, float] | None:
        """Counter increase over the window per group; ``None`` if < 2 snapshots or not exported."""
        if len(self.snaps) < 2 or name not in self.snaps[-1].counters:
            return None
        out: dict[GroupKey, float] = {}
        snaps = list(self.snaps)
        for prev, cur in zip(snaps, snaps[1:]):
            pv = prev.counters.get(name, {})
            for key, v in cur.counters.get(name, {}).items():
                if not _selected(key, select):
                    continue
                g = _group(key, group_by)
                out[g] = out.get(g, 0.0) + counter_delta(pv.get(key), v)
        return out

    def rate(self, name: str, *, select: Mapping[str, str] | None = None) -> float | None:
        """Per-second increase of a counter over the window, all selected series summed."""
        inc = self.increase(name, select=select)
        if inc is None or self.span_s <= 0:
            return None
        return sum(inc.values()) / self.span_s

    def total_increase(self, name: str, *, select: Mapping[str, str] | None = None) -> float | None:
        inc = self.increase(name, select=select)
        return None if inc is None else sum(inc.values())

    def window_hist(
        self, name: str, *, select: Mapping[str, str] | None = None, group_by: tuple[str, ...] | None = None
    ) -> dict[GroupKey, Hist] | None:
        """Histogram of the observations made inside the window, per group."""
        if len(self.snaps) < 2 or name not in self.snaps[-1].hists:
            return None
        out: dict[GroupKey, Hist] = {}
        snaps = list(self.snaps)
        for prev, cur in zip(snaps, snaps[1:]):
            ph = prev.hists.get(name, {})
            for key, h in cur.hists.get(name, {}).items():
                if not _selected(key, select):
                    continue
                g = _group(key, group_by)
                out[g] = hist_add(out.get(g), hist_delta(ph.get(key), h))
        return out

    def quantile(self, name: str, q: float, *, select: Mapping[str, str] | None = None) -> float | None:
        """``histogram_quantile(q, sum by (le)(increase(name_bucket[window])))``; ``None`` if no data."""
        h = self.window_hist(name, select=select)
        if not h:
            return None
        return histogram_quantile(q, h.get(()))

    def hist_mean(self, name: str, *, select: Mapping[str, str] | None = None) -> float | None:
        """Δsum / Δcount over the window (``None`` without observations)."""
        h = self.window_hist(name, select=select)
        if not h or () not in h:
            return None
        m = h[()].mean
        return None if m is None or math.isnan(m) else m

    def hist_count(self, name: str, *, select: Mapping[str, str] | None = None) -> float | None:
        h = self.window_hist(name, select=select)
        if not h or () not in h:
            return None
        return h[()].count

    def gauge(self, name: str, *, select: Mapping[str, str] | None = None) -> float | None:
        """Newest value of a gauge over the selected series (sum, or max/mean per :data:`GAUGE_AGG`)."""
        if not self.snaps or name not in self.snaps[-1].gauges:
            return None
        vals = [v for k, v in self.snaps[-1].gauges[name].items() if _selected(k, select) and not math.isnan(v)]
        if not vals:
            return None
        agg = GAUGE_AGG.get(name, "sum")
        if agg == "max":
            return max(vals)
        if agg == "mean":
            return sum(vals) / len(vals)
        return sum(vals)

    def label_values(self, label: str) -> list[str]:
        return sorted(self.snaps[-1].label_values(label)) if self.snaps else []

    # -- the summary --------------------------------------------------------------------------
    def summary(self, *, select: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The watch snapshot: every key of :data:`SUMMARY_KEYS` (``None`` where not exported/no data).

        Definitions (window = base … newest snapshot):
        prompt_tok_s = Δprompt_tokens / Δt (all prompt tokens, cached included; llama.cpp:
        Δ(prompt_tokens_total + prompt_tokens_cached_total)); generation_tok_s = Δgeneration_tokens / Δt;
        prefix_cache_hit_rate = Δhits / Δqueries (vLLM), else Δcached / Δprompt tokens, else the
        engine's own gauge; prefill_speed_tok_s = Δprefilled tokens / Δprefill seconds (vLLM:
        kv-computed tokens over prefill time; llama.cpp: prompt_tokens over prompt_seconds);
        itl_mean_s = Δitl_sum / Δitl_count (llama.cpp: Δtokens_predicted_seconds / Δtokens_predicted).
        Speculative decoding (None when the server does not speculate): spec_acceptance_rate = Δaccepted /
        Δdrafted tokens and spec_tokens_per_step = (Δaccepted + Δdrafts) / Δdrafts over the window (vLLM, llama.cpp
        ``spec_decode_num_*`` counters; a step is one that drafted), else SGLang's own gauges as they stand
        (``spec_accept_rate``, ``spec_accept_length``: tokens per verify step, the bonus token included).
        """
        s: dict[str, Any] = {k: None for k in SUMMARY_KEYS}
        snap = self.latest
        if snap is None:
            return s
        sel = select
        s["running"] = self.gauge("running", select=sel)
        s["waiting"] = self.gauge("waiting", select=sel)
        s["kv_usage"] = self.gauge("kv_usage", select=sel)
        for name in ("ttft", "itl", "tpot", "e2e"):
            qs = (0.5, 0.9, 0.99) if name in ("ttft", "itl") else (0.5, 0.99)
            for q in qs:
                key = f"{name}_p{int(round(q * 100))}_s"
                if key in s:
                    s[key] = self.quantile(name, q, select=sel)
        s["ttft_mean_s"] = self.hist_mean("ttft", select=sel)
        s["itl_mean_s"] = self.hist_mean("itl", select=sel)
        s["queue_mean_s"] = self.hist_mean("queue_time", select=sel)
        s["prefill_mean_s"] = self.hist_mean("prefill_time", select=sel)
        s["decode_mean_s"] = self.hist_mean("decode_time", select=sel)
        s["ttft_observations"] = self.hist_count("ttft", select=sel)
        s["itl_observations"] = self.hist_count("itl", select=sel)

        span = self.span_s
        rate = (lambda n: self.rate(n, select=sel)) if span > 0 else (lambda n: None)
        inc = lambda n: self.total_increase(n, select=sel)  # noqa: E731

        # prompt tokens per second: the engine's total, else computed + cached
        prompt = rate("prompt_tokens")
        if prompt is None:
            comp, cached = rate("prompt_tokens_computed"), rate("prompt_tokens_cached")
            if comp is not None:
                prompt = comp + (cached or 0.0)
        s["prompt_tok_s"] = prompt if prompt is not None else self.gauge("prompt_tok_s_gauge", select=sel) if len(self) >= 2 else None
        gen = rate("generation_tokens")
        s["generation_tok_s"] = gen if gen is not None else self.gauge("generation_tok_s_gauge", select=sel) if len(self) >= 2 else None

        # prefix-cache hit rate over the window
        hits, queries = inc("prefix_cache_hits"), inc("prefix_cache_queries")
        hit_rate: float | None = None
        if hits is not None and queries is not None:
            hit_rate = hits / queries if queries > 0 else None
        else:
            cached = inc("prompt_tokens_cached")
            total = inc("prompt_tokens")
            if total is None:
                comp_i = inc("prompt_tokens_computed")
                total = None if comp_i is None or cached is None else comp_i + cached
            if cached is not None and total is not None:
                hit_rate = cached / total if total > 0 else None
        if hit_rate is None and "prefix_cache_queries" not in snap.counters and "prompt_tokens_cached" not in snap.counters:
            hit_rate = self.gauge("prefix_cache_hit_rate_gauge", select=sel)
        s["prefix_cache_hit_rate"] = hit_rate

        tok, sec = inc("prefill_tokens_timed"), inc("prefill_seconds")
        s["prefill_speed_tok_s"] = tok / sec if tok is not None and sec else None
        if s["itl_mean_s"] is None and snap.engine == "llamacpp":
            dt, dn = inc("decode_seconds"), inc("decode_tokens_timed")
            s["itl_mean_s"] = dt / dn if dt is not None and dn else None
        s["preemptions"] = inc("preemptions")
        s["requests_per_s"] = rate("requests_finished")
        s["spec_acceptance_rate"], s["spec_tokens_per_step"] = self._spec(inc, sel)
        return s

    def _spec(self, inc: Any, sel: Mapping[str, str] | None) -> tuple[float | None, float | None]:
        """(acceptance rate, tokens per verified step) over the window (:meth:`summary`)."""
        steps, drafted, accepted = inc("spec_drafts"), inc("spec_draft_tokens"), inc("spec_accepted_tokens")
        if accepted is not None and (drafted or steps):
            return (accepted / drafted if drafted else None,
                    (accepted + steps) / steps if steps else None)
        length = self.gauge("spec_accept_length", select=sel)
        rate = self.gauge("spec_accept_rate", select=sel)
        return (rate if rate is not None and rate > 0 else None,
                length if length is not None and length > 0 else None)

    def summary_by(self, label: str, *, select: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
        """One summary per value of ``label`` (e.g. per ``model_name`` or per vLLM ``engine``)."""
        out: dict[str, dict[str, Any]] = {}
        for value in self.label_values(label):
            sel = dict(select or {})
            sel[label] = value
            out[value] = self.summary(select=sel)
        return out

    def notes(self) -> list[str]:
        """What the engine cannot tell us and how the derived numbers are made (for null values)."""
        snap = self.latest
        if snap is None:
            return []
        out = list(PROFILES[snap.engine].notes)
        for canonical, name in sorted(snap.sources.items()):
            for src in PROFILES[snap.engine].table.get(canonical, ()):
                if src.name == name and src.note and "reset" not in src.note:
                    out.append(f"{canonical} read from {name} ({src.note})")
        if snap.imprecise:
            out.append(
                "counters printed with 6 significant digits (" + ", ".join(sorted(snap.imprecise)) + "): rates are coarse"
            )
        return out


def feed(timeline: Timeline, snaps: Iterable[Snapshot]) -> Timeline:
    """Add several snapshots (convenience for tests and replays)."""
    for s in snaps:
        timeline.add(s)
    return timeline
