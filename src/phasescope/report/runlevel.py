"""Run-level comparison: ``compare`` of two ``bench --trials N`` runs, one value per trial.

A bootstrap over one run's requests sees the request-to-request noise *within* that run, not the
run-to-run noise between two runs of the same server (the host's load drifting, a cache warming):
two benches of one server a few seconds apart read "+1.8 %, worse" with an interval that excludes
zero. With trials, each trial of a run gives one value of each metric (the same definition
:func:`phasescope.measure.aggregate.point_value` gives for a whole run: its median TTFT, its pooled
ITL p99…); a run's value is the mean across its complete trials (``mean-t`` interval), and the
interval of B − A is Welch's t interval of the difference of the two means (unequal variances,
Welch–Satterthwaite degrees of freedom rounded down — conservative). A metric whose run-level
interval is wider than ±:data:`UNSTABLE_REL` of its mean in either run is ``unstable``: its trials
disagree, and the ``--fail-on`` gate will not pass on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from phasescope.load.trials import TRIAL_UNSTABLE_REL
from phasescope.measure.aggregate import Group, MetricDef, Samples, group_records, point_value, samples_of
from phasescope.measure.interval import mean_interval, t_quantile
from phasescope.measure.records import RequestRecord
from phasescope.store import RunInfo

#: the same threshold as the bench's own ``unstable`` warning (:data:`phasescope.load.trials.TRIAL_UNSTABLE_REL`)
UNSTABLE_REL = TRIAL_UNSTABLE_REL


def complete_trials(info: RunInfo, records: list[RequestRecord]) -> list[int] | None:
    """The trial numbers of a ``bench --trials`` run that finished (``summary.trials[*]`` not partial)
    and whose records carry ``tags.trial``; None for a run without trials."""
    s = info.summary if isinstance(info.summary, dict) else {}
    trials = s.get("trials")
    if not isinstance(trials, list) or not trials:
        return None
    done = [int(t["trial"]) for t in trials if isinstance(t, dict) and t.get("trial") is not None
            and not t.get("partial") and t.get("status", "complete") == "complete"]
    tagged = {r.tags.get("trial") for r in records if r.tags}
    return [t for t in done if t in tagged]


def by_trial(records: list[RequestRecord], trials: list[int]) -> dict[Group, dict[int, Samples]]:
    """Each measurement point's samples, one :class:`Samples` per complete trial."""
    out: dict[Group, dict[int, Samples]] = {}
    keep = set(trials)
    for g, rs in group_records(records).items():
        per: dict[int, list[RequestRecord]] = {}
        for r in rs:
            t = r.tags.get("trial")
            if t in keep:
                per.setdefault(int(t), []).append(r)
        out[g] = {t: samples_of(x) for t, x in sorted(per.items())}
    return out


def welch_interval(xa: list[float], xb: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """mean(xb) − mean(xa) and Welch's t interval of it (two or more values each; the degrees of
    freedom Welch–Satterthwaite's, rounded down)."""
    a, b = np.asarray(xa, dtype=float), np.asarray(xb, dtype=float)
    d = float(b.mean() - a.mean())
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    den = (va * va / (a.size - 1) if va else 0.0) + (vb * vb / (b.size - 1) if vb else 0.0)
    df = (va + vb) ** 2 / den if den else float(a.size + b.size - 2)
    half = t_quantile(max(1, int(df)), confidence) * se
    return d, d - half, d + half


def run_level(m: MetricDef, ta: dict[int, Samples], tb: dict[int, Samples],
              confidence: float = 0.95) -> dict[str, Any] | None:
    """The run-level figures of metric ``m`` from each trial's own point value: A and B (the means),
    their counts and intervals, B − A with Welch's interval (None below two trials a side), and
    ``unstable``: why either run's trials disagree (None when they agree). None when no trial has ``m``."""
    xa = [v for v in (point_value(s, m) for s in ta.values()) if v is not None]
    xb = [v for v in (point_value(s, m) for s in tb.values()) if v is not None]
    if not xa and not xb:
        return None
    ia, ib = mean_interval(xa, confidence), mean_interval(xb, confidence)
    va = ia.value if ia is not None else None
    vb = ib.value if ib is not None else None
    diff = None if va is None or vb is None else vb - va
    lo = hi = None
    if len(xa) >= 2 and len(xb) >= 2:
        _, lo, hi = welch_interval(xa, xb, confidence)
    why = None
    for iv, name in ((ia, "A"), (ib, "B")):
        if iv is not None and iv.n >= 2 and iv.rel_halfwidth > UNSTABLE_REL and why is None:
            why = (f"the trials of run {name} disagree: {m.label} {_short(iv.min)}–{_short(iv.max)} over "
                   f"{iv.n} trials, 95 % interval ±{iv.rel_halfwidth * 100:.0f} % of the mean "
                   f"(> ±{UNSTABLE_REL * 100:.0f} %)")
    return {"a": va, "b": vb, "n_a": len(xa), "n_b": len(xb), "diff": diff,
            "change": None if diff is None or not va else diff / abs(va), "ci_low": lo, "ci_high": hi,
            "a_ci": ia.ci if ia is not None else None, "b_ci": ib.ci if ib is not None else None, "unstable": why}


def _short(v: float | None) -> str:
    return "?" if v is None else f"{v:.4g}"
