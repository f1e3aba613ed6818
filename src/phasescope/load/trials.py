"""Run-level trials (``bench --trials N``): one summary across the N summaries of the same workload.

Each trial is one load run with prompts of its own (:func:`phasescope.load.bench.run_bench` salts
them per trial, so no trial is a prefix-cache hit of another); its summary is an ordinary bench
summary. Across the complete trials every headline figure (:func:`headline_keys`) is reported as its
**mean** with a Student-t 95 % interval (:func:`phasescope.measure.interval.mean_interval`, method
``mean-t``), as AIPerf's multi-run confidence does: the interval sees run-to-run noise, which no
resampling of one run's requests can. A trial cut short (Ctrl-C, a dead server) is kept in
``trials`` but left out of the means.

Pure: summaries in, a summary out.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Sequence

from phasescope.load.summary import METRICS
from phasescope.measure.interval import Interval, mean_interval
from phasescope.measure.warnings import MeasurementWarning, to_json
from phasescope.measure.warnings import warn as make_warning

#: a headline figure whose 95 % interval across trials is wider than ±this of its mean: its trials
#: disagree (an ``unstable`` warning; ``compare`` will not let a gate pass on it)
TRIAL_UNSTABLE_REL = 0.25
#: per-run rates that get a run-level interval, besides every ``{stat}_{metric}_ms`` latency
TRIAL_RATES = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
               "max_output_tokens_per_s")
#: counts that add up over trials
TRIAL_SUMS = ("completed", "failed", "num_requests", "total_input_tokens", "total_output_tokens", "duration",
              "warmup_requests", "sent", "cancelled", "goodput_completed", "reasoning_tokens", "answer_tokens")


_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(" + "|".join(METRICS) + r")_ms$")


def headline_keys(summary: dict[str, Any]) -> list[str]:
    """The figures of one trial's summary that get a mean and a ``<key>_ci`` across trials: the
    rates (:data:`TRIAL_RATES`) and every latency statistic ``{mean,median,std,pXX}_{metric}_ms``."""
    return [k for k in TRIAL_RATES if k in summary] + [k for k in summary if _STAT_KEY.match(k)]


def trial_intervals(trials: Sequence[dict[str, Any]]) -> dict[str, Interval]:
    """Each headline figure across ``trials`` (the summaries of the complete trials): ``{key:
    Interval}`` of the mean with its Student-t 95 % interval (:func:`phasescope.measure.interval.mean_interval`),
    its low end clipped at 0 (every headline figure is a time or a rate)."""
    if not trials:
        return {}
    keys = list(dict.fromkeys(k for t in trials for k in headline_keys(t)))
    out: dict[str, Any] = {}
    for k in keys:
        vals = [t.get(k) for t in trials]
        nums = [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(float(v))]
        iv = mean_interval(nums)
        if iv is not None and iv.low < 0 <= min(nums):  # a time or a rate is never negative: the t interval
            iv = dataclasses.replace(iv, low=0.0)  # of a wild trial reaches below 0, the figure cannot
        if iv is not None:
            out[k] = iv
    return out


def combine_trials(n_trials: int, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The run-level summary of ``trials`` (the per-trial summaries, in order; ``n_trials`` were asked
    for): the last complete trial's sections (server /metrics, client health, GPU…, named by
    ``sections_from_trial``), every
    headline figure replaced by its **mean across the complete trials** with ``<key>_ci`` its 95 %
    interval (Student t, :func:`phasescope.measure.interval.mean_interval`) and ``intervals[key]`` the
    whole interval; counts summed; ``trials`` the per-trial summaries (request-level, as one run's);
    the warnings of every trial (prefixed with it) plus ``unstable`` for a figure whose trials disagree
    (interval wider than ±:data:`TRIAL_UNSTABLE_REL`)."""
    done = [t for t in trials if t.get("status") == "complete" and not t.get("partial")]
    base = dict(done[-1] if done else trials[-1])
    out: dict[str, Any] = {k: v for k, v in base.items() if k not in ("trial", "status", "records_path", "out_dir")}
    out["sections_from_trial"] = base.get("trial")
    for k in TRIAL_SUMS:
        vals = [t.get(k) for t in trials if isinstance(t.get(k), (int, float))]
        if vals:
            out[k] = sum(vals)
    errs: dict[str, int] = {}
    for t in trials:
        for kind, n in (t.get("errors_by_kind") or {}).items():
            errs[kind] = errs.get(kind, 0) + n
    out["errors_by_kind"] = errs
    out["max_concurrent_requests"] = max((t.get("max_concurrent_requests") or 0) for t in trials)
    ivs = trial_intervals(done)
    for k, iv in ivs.items():
        out[k] = iv.value
        out[f"{k}_ci"] = iv.ci
    out["intervals"] = {k: iv.to_json() for k, iv in ivs.items()}
    out["num_trials"] = n_trials
    out["trials_complete"] = len(done)
    out["trials"] = trials
    # the host of the busiest trial: compare's contention check must see the worst of them
    hosts = [t.get("host") for t in trials if isinstance(t.get("host"), dict)]
    if hosts:
        out["host"] = max(hosts, key=lambda h: ((h.get("during") or {}).get("other_cpu_share") or 0.0))
    hits = [t.get("prefix_cache_hit_rate") for t in trials if isinstance(t.get("prefix_cache_hit_rate"), (int, float))]
    out["prefix_cache_hit_rate"] = max(hits) if hits else base.get("prefix_cache_hit_rate")
    warn: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for t in trials:
        for w in t.get("warnings") or []:
            key = (w.get("kind"), w.get("message"))
            if key in seen:
                seen[key]["evidence"].setdefault("trials", []).append(t.get("trial"))
                continue
            w2 = dict(w, evidence=dict(w.get("evidence") or {}, trials=[t.get("trial")]))
            seen[key] = w2
            warn.append(w2)
    for w in warn:
        ts = w["evidence"]["trials"]
        w["message"] = f"trial{'s' if len(ts) > 1 else ''} {', '.join(str(x) for x in ts)}: {w['message']}"
    extra: list[MeasurementWarning] = []
    reasoned = any(t.get("reasoning_tokens") for t in done)  # without reasoning TTFO is TTFT: named once
    wide = {k: iv for k, iv in ivs.items()
            if not k.startswith("std_") and iv.n >= 2 and iv.rel_halfwidth > TRIAL_UNSTABLE_REL
            and (reasoned or "_ttfo_" not in k)}
    if wide:  # one warning naming every figure whose trials disagree
        named = ", ".join(f"{k} {iv.min:.4g}–{iv.max:.4g} (±{iv.rel_halfwidth * 100:.0f} %)"
                          for k, iv in list(wide.items())[:6]) + (f" and {len(wide) - 6} more" if len(wide) > 6 else "")
        extra.append(make_warning(
            "unstable", "trials",
            {"figure": next(iter(wide)), "figures": list(wide),
             "values": {k: [t.get(k) for t in done] for k in wide},
             "rel_halfwidth": {k: iv.rel_halfwidth for k, iv in wide.items()}, "threshold": TRIAL_UNSTABLE_REL},
            n=len(wide), plural="s" if len(wide) > 1 else "", trials=len(done),
            threshold_pct=TRIAL_UNSTABLE_REL * 100, named=named))
    if len(done) < 2:
        extra.append(make_warning("too_few_samples", "trials_complete", {"trials_complete": len(done), "trials": n_trials},
                                  done=len(done), trials=n_trials))
    out["warnings"] = warn + to_json(extra)
    return out


class TrialSink:
    """The run's sink, with every record tagged ``tags.trial`` (1-based) on its way in: one stored
    run holds all trials' records, and ``compare`` splits them again."""

    def __init__(self, sink: Any, trial: int) -> None:
        self.sink, self.trial = sink, trial

    def write(self, record: Any) -> None:
        record.tags["trial"] = self.trial
        self.sink.write(record)

    def close(self) -> None:  # the run's sink stays open for the next trial
        pass


class TrialOut:
    """The run's output as one trial sees it: its sink tags records with the trial; the rest is the run's."""

    def __init__(self, out: Any, trial: int) -> None:
        self._out = out
        self.sink = TrialSink(out.sink, trial)
        self.records_subdir = f"records/trial-{trial}"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)
