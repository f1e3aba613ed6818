"""Compare two runs metric by metric, with a noise-aware verdict, and the CI gate built on it.

For each phase metric (see :mod:`phasescope.measure.aggregate`) and each measurement point both runs
share — A and B are the numbers ``show`` prints for each run (:func:`~phasescope.measure.aggregate.point_value`)
— the change is B relative to A, and the verdict comes from a confidence interval (default 95 %) of
the difference B − A. Which interval depends on what the runs hold:

* **run-level** (``method: "trials"``), when both runs are ``bench --trials N`` runs with at least two
  complete trials each: every trial gives one value of the metric (its own median TTFT, ITL p99, …;
  the records carry ``tags.trial``), A and B are the means across trials, and the interval of B − A is
  Welch's t interval of the difference of the two means. This is the interval that sees run-to-run
  noise (a machine whose load drifts between runs), which no resampling of one run's requests can.
* **request-level bootstrap** (``method: "bootstrap"``) otherwise, over the raw per-request values:

  - per-request metrics (TTFT, decode tok/s, TPOT, E2E, prefill tok/s): the median difference,
    :func:`phasescope.measure.stats.bootstrap_median_diff`;
  - ITL p50/p99: the pooled-percentile difference, bootstrapped by resampling whole requests
    (cluster bootstrap: a request's tokens are not independent of each other);
  - output throughput: the median difference of per-window token rates (the run cut into 10 windows).

Verdict: ``better`` / ``worse`` when the interval excludes zero *and* the change is at least the
metric's **minimum effect** (:data:`MIN_EFFECT`: 5 % for medians and rates, 10 % for p99 tails;
``--min-change`` sets one value for every metric) — a statistically clear but smaller shift stays
``within noise``; ``too few samples`` below :data:`MIN_SAMPLES` per side. A row is ``unstable`` when
a run-level interval of either run is wider than ±:data:`UNSTABLE_REL` of its mean (its trials
disagree), or when a run carries an ``unstable`` warning naming the metric (or naming none).

What else differs between the runs, and when that makes a verdict ``not comparable``, is
:mod:`phasescope.report.comparability`; the verdict the numbers alone gave is kept as ``raw_verdict``.

:func:`phasescope.report.gate.decide` is ``compare --fail-on worse``: ``worse`` (exit 5) when a gated
metric is worse in a comparable row; else ``inconclusive`` (exit 6) when a gated metric is not comparable or unstable
(unless ``allow_incomparable``: then those rows are judged by their raw verdict) or when no gated
metric could be judged at all; else ``pass``. :func:`to_markdown` renders the table for a
pull-request comment.

A run imported from another tool (``kind: import``, :mod:`phasescope.report.imported`) that carries
only the tool's summary numbers has no requests to resample: its rows (``method: "summary"``) show the
two values and the change, read ``too few samples`` (no interval, no verdict), and ``not comparable``
where the tool defines the metric otherwise.

One job: two runs' numbers side by side with a verdict each — the intervals behind the verdicts and
the rows the gate reads; what else differs between the runs is :mod:`phasescope.report.comparability`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from phasescope.measure.records import RequestRecord
from phasescope.measure.stats import bootstrap_median_diff
from phasescope.measure.warnings import MeasurementWarning, to_json, warn
from phasescope.measure.aggregate import (
    METRICS,
    Group,
    MetricDef,
    Samples,
    group_label,
    measured,
    point_value,
    run_samples,
    samples_of,
)
from phasescope.report.runlevel import by_trial, complete_trials, run_level as run_level_of
from phasescope.report.comparability import ALL_METRICS, nc_warning, comparability, environment_warnings, param_changes
from phasescope.store import RunInfo

if TYPE_CHECKING:
    from phasescope.report.gate import GateResult

MIN_SAMPLES = 3
#: a tail percentile (TTFT p99) needs this many requests per side
MIN_TAIL_SAMPLES = 20
VERDICTS = ("better", "worse", "within noise", "too few samples", "not comparable")
#: the smallest relative change (of A) a verdict calls better/worse, per metric, unless --min-change sets
#: one for all: below it a shift is not worth failing a build over, however clear. Tails (p99) move more
#: between two runs of the same server than medians do, so theirs is larger.
MIN_EFFECT: dict[str, float] = {
    "ttft_s": 0.05, "ttft_p99_s": 0.10, "prefill_tok_s": 0.05, "decode_tok_s": 0.05, "tpot_s": 0.05,
    "itl_p50_s": 0.05, "itl_p99_s": 0.10, "e2e_s": 0.05, "throughput_tok_s": 0.05,
}
#: a run-level interval (across trials) wider than ±this of its mean: the trials disagree, the metric is unstable
UNSTABLE_REL = 0.25
#: the gate's three answers (``compare --fail-on worse``), and their exit codes (phasescope.errors)
GATE_VERDICTS = ("pass", "worse", "inconclusive")
#: what users type for --metrics → the metric key
METRIC_ALIASES = {
    "ttft": "ttft_s", "ttft_p50": "ttft_s", "ttft_median": "ttft_s", "ttft_p99": "ttft_p99_s",
    "prefill": "prefill_tok_s", "prefill_tok_s": "prefill_tok_s", "decode": "decode_tok_s",
    "decode_tok_s": "decode_tok_s", "tpot": "tpot_s", "itl": "itl_p50_s", "itl_p50": "itl_p50_s",
    "itl_p99": "itl_p99_s", "e2e": "e2e_s", "e2el": "e2e_s", "throughput": "throughput_tok_s",
}
#: a token-metric bootstrap pools at most this many ITL samples per resample (thinned evenly)
MAX_POOLED = 20_000


@dataclass
class MetricComparison:
    metric: str
    label: str
    unit: str
    group: str
    higher_is_better: bool
    a: float | None
    b: float | None
    n_a: int
    n_b: int
    change: float | None  # (b − a) / a
    diff: float | None  # b − a
    ci_low: float | None
    ci_high: float | None
    verdict: str
    why: str | None = None  # for "not comparable": what differs between the runs
    #: "trials" (run-level: one value per trial, Welch's interval of the means) or "bootstrap" (over requests)
    method: str = "bootstrap"
    trials_a: int | None = None  # complete trials behind a run-level A (None: request-level)
    trials_b: int | None = None
    a_ci: list[float] | None = None  # run-level interval of A's mean across trials
    b_ci: list[float] | None = None
    min_effect: float = 0.0  # the smallest relative change this row's verdict counts
    unstable: bool = False
    unstable_why: str | None = None
    raw_verdict: str | None = None  # the verdict from the numbers alone (before "not comparable")


@dataclass
class Comparison:
    a: RunInfo
    b: RunInfo
    metrics: list[MetricComparison]
    warnings: list[MeasurementWarning] = field(default_factory=list)
    param_changes: dict[str, list[Any]] = field(default_factory=dict)
    confidence: float = 0.95
    min_change: float | None = None  # --min-change (one value for every metric), None: MIN_EFFECT per metric
    not_comparable: dict[str, list[str]] = field(default_factory=dict)  # metric → why
    #: how the intervals were computed: {"method": "trials"|"bootstrap", "a": trials, "b": trials, "why": …}
    run_level: dict[str, Any] = field(default_factory=dict)

    @property
    def min_effect(self) -> dict[str, float]:
        """The minimum effect each metric's verdict used."""
        return {k: min_effect_of(k, self.min_change) for k in MIN_EFFECT}

    def to_dict(self) -> dict[str, Any]:
        def run(i: RunInfo) -> dict[str, Any]:
            d = i.to_dict()
            d.pop("summary", None)
            return d

        return {
            "a": run(self.a),
            "b": run(self.b),
            "confidence": self.confidence,
            "min_change": self.min_change,
            "min_effect": self.min_effect,
            "run_level": self.run_level,
            "param_changes": self.param_changes,
            "warnings": to_json(self.warnings),
            "not_comparable": self.not_comparable,
            "metrics": [m.__dict__ for m in self.metrics],
        }


def _used_api(run: RunInfo) -> dict[str, Any]:
    """The run's parameters with ``api: auto`` (bench's default) read as the API it used."""
    p = dict(run.params or {})
    if p.get("api") == "auto" and run.api:
        p["api"] = run.api
    return p


def min_effect_of(metric: str, min_change: float | None) -> float:
    """The smallest relative change a verdict on ``metric`` counts: ``--min-change`` when given,
    else the metric's :data:`MIN_EFFECT` (5 % where a metric is not listed)."""
    return float(min_change) if min_change is not None else MIN_EFFECT.get(metric, 0.05)


#: bench summary figures (``--trials`` names them in its ``unstable`` warnings) → the compare metric they are
FIGURE_METRIC = {"median_ttft_ms": "ttft_s", "p99_ttft_ms": "ttft_p99_s", "median_tpot_ms": "tpot_s",
                 "median_itl_ms": "itl_p50_s", "p99_itl_ms": "itl_p99_s", "median_e2el_ms": "e2e_s",
                 "output_throughput": "throughput_tok_s", "ttft_s": "ttft_s", "decode_tok_s": "decode_tok_s",
                 "prefill_tok_s": "prefill_tok_s"}


def _unstable_warned(info: RunInfo) -> set[str] | None:
    """The metrics a run's own ``unstable`` warnings name (``evidence.metric``/``figure``: a metric key, an
    alias or a bench figure of :data:`FIGURE_METRIC`); every metric when a warning names no figure at all
    (a figure compare has no metric for, such as ``p95_ttft_ms``, names none of them); None when the run
    has no such warning."""
    hit: set[str] = set()
    found = False
    for w in info.warnings:
        if w.get("kind") != "unstable":
            continue
        ev = w.get("evidence") or {}
        names = [ev.get(k) for k in ("metric", "figure", "key") if isinstance(ev.get(k), str)]
        names += [f for f in ev.get("figures") or [] if isinstance(f, str)]
        if not names:
            found = True
            hit |= set(ALL_METRICS)
            continue
        for n in names:
            key = FIGURE_METRIC.get(n, METRIC_ALIASES.get(n.lower(), n))
            if key in ALL_METRICS:
                found = True
                hit.add(key)
    return hit if found else None


def steady_records(info: RunInfo, records: list[RequestRecord]) -> list[RequestRecord]:
    """A ``bench --steady-state`` run's records inside its steady-state window (each trial's own window;
    :func:`phasescope.load.summary.steady_window`, the rule the bench used), so compare reads what the
    bench reported; any other run's records as they are."""
    from phasescope.load.summary import steady_window

    s = info.summary if isinstance(info.summary, dict) else {}
    trials = s.get("trials") if isinstance(s.get("trials"), list) else None
    if not (isinstance(s.get("steady_state"), dict) or (trials and any(isinstance(t, dict) and t.get("steady_state")
                                                                       for t in trials))):
        return records
    cap = s.get("max_concurrency") if isinstance(s.get("max_concurrency"), int) else None
    parts: dict[Any, list[RequestRecord]] = {}
    for r in measured(records):
        parts.setdefault(r.tags.get("trial") if trials else None, []).append(r)
    keep: set[str] = set()
    for rs in parts.values():
        w = steady_window(rs, target_concurrency=cap)
        keep |= set(w["ids"]) if not w["empty"] else {r.id for r in rs}  # an empty window: the bench used all
    return [r for r in records if r.id in keep]


def compare_runs(
    a: RunInfo,
    records_a: list[RequestRecord],
    b: RunInfo,
    records_b: list[RequestRecord],
    *,
    confidence: float = 0.95,
    min_change: float | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare run B against run A (A is the reference). ``min_change``: one minimum effect for
    every metric (None: :data:`MIN_EFFECT` per metric). A ``--steady-state`` run is read inside its
    window (:func:`steady_records`)."""
    records_a, records_b = steady_records(a, records_a), steady_records(b, records_b)
    if _summary_only(a, records_a) or _summary_only(b, records_b):
        return _compare_summaries(a, records_a, b, records_b, confidence, min_change)
    warnings: list[MeasurementWarning] = environment_warnings(a, records_a, b, records_b)
    changes = param_changes(_used_api(a), _used_api(b))
    changes.pop("trials", None)  # trials change the interval, not what each request measures
    if len(changes) > 1:
        warnings.append(nc_warning(
            f"the runs differ in {len(changes)} parameters ({', '.join(sorted(changes))}); "
            "a change cannot be pinned on one of them", {"parameters": sorted(changes)}))
    ga, gb = run_samples(records_a), run_samples(records_b)
    pairs: list[tuple[Group, Samples, Samples]] = [(g, ga[g], gb[g]) for g in ga if g in gb]
    if not pairs and ga and gb:
        if len(ga) == 1 and len(gb) == 1:
            (g1, s1), (g2, s2) = next(iter(ga.items())), next(iter(gb.items()))
            warnings.append(nc_warning(f"different measurement points: {group_label(g1) or 'untagged'} → {group_label(g2) or 'untagged'}"))
            pairs = [((), s1, s2)]
        else:
            warnings.append(nc_warning("the runs share no measurement point (prompt size, concurrency...); comparing all requests pooled"))
            pairs = [((), samples_of(measured(records_a)), samples_of(measured(records_b)))]
    only = [group_label(g) for g in list(ga) + list(gb) if g and (g not in ga or g not in gb)]
    if only and any(g in gb for g in ga):
        warnings.append(nc_warning(f"measured in one run only (not compared): {', '.join(dict.fromkeys(only))}"))
    # run-level intervals when both runs have at least two complete trials
    tr_a, tr_b = complete_trials(a, records_a), complete_trials(b, records_b)
    use_trials = bool(tr_a and tr_b and len(tr_a) >= 2 and len(tr_b) >= 2 and all(g in ga and g in gb
                                                                                   for g, _, _ in pairs))
    run_level: dict[str, Any] = {"method": "trials" if use_trials else "bootstrap",
                                 "a": len(tr_a) if tr_a is not None else None,
                                 "b": len(tr_b) if tr_b is not None else None}
    if not use_trials and (tr_a is not None or tr_b is not None):
        which = ("neither run" if not (tr_a and len(tr_a) >= 2) and not (tr_b and len(tr_b) >= 2)
                 else "only run A" if tr_a and len(tr_a) >= 2 else "only run B")
        run_level["why"] = (f"{which} has two or more complete trials: the intervals resample requests and cannot "
                            "see run-to-run noise (run both with bench --trials N)")
        warnings.append(warn("too_few_samples", "trials", {"trials_a": run_level["a"], "trials_b": run_level["b"]},
                             why=run_level["why"]))
    ta = by_trial(records_a, tr_a or []) if use_trials else {}
    tb = by_trial(records_b, tr_b or []) if use_trials else {}
    # token counts are compared over the measurement points both runs share
    checks = comparability(a, records_a, b, records_b, shared=([r for _, x, _ in pairs for r in x.records],
                                                               [r for _, _, y in pairs for r in y.records]))
    warnings = [w for w, _ in checks] + warnings
    unst_a, unst_b = _unstable_warned(a), _unstable_warned(b)
    rows: list[MetricComparison] = []
    for g, sa, sb in pairs:
        for m in METRICS:
            eff = min_effect_of(m.key, min_change)
            if use_trials:
                row = _compare_trials(m, group_label(g), ta.get(g, {}), tb.get(g, {}), confidence, eff)
            else:
                row = _compare_metric(m, group_label(g), sa, sb, confidence, eff, n_boot, seed)
            if row is None:
                continue
            row.min_effect = eff
            row.raw_verdict = row.verdict
            for warned, name in ((unst_a, "A"), (unst_b, "B")):  # with trials the run-level interval decides
                if warned is not None and m.key in warned and not row.unstable and not use_trials:
                    row.unstable, row.unstable_why = True, f"run {name} carries an 'unstable' warning"
            rows.append(row)
    why: dict[str, list[str]] = {}
    for w, keys in checks:
        for k in keys:
            why.setdefault(k, []).append(w.evidence.get("what", w.message))
    for row in rows:
        if row.metric in why and row.verdict != "too few samples":
            row.verdict = "not comparable"
            row.why = "; ".join(why[row.metric])
    return Comparison(a, b, rows, warnings, changes, confidence, min_change,
                      {k: v for k, v in why.items() if any(r.metric == k for r in rows)}, run_level)


def _summary_only(info: RunInfo, records: list[RequestRecord]) -> bool:
    """An imported run that carries summary numbers and no per-request data."""
    return info.kind == "import" and not measured(records)


def _values(info: RunInfo, records: list[RequestRecord]) -> dict[str, float]:
    """One number per metric: an imported run's summary (:func:`phasescope.report.imported.metric_values`)
    when it has no requests, else every measured request pooled."""
    from phasescope.report.imported import metric_values

    if _summary_only(info, records):
        return metric_values(info.summary if isinstance(info.summary, dict) else {})
    s = samples_of(measured(records))
    return {m.key: v for m in METRICS if (v := point_value(s, m)) is not None}


def _compare_summaries(a: RunInfo, records_a: list[RequestRecord], b: RunInfo, records_b: list[RequestRecord],
                       confidence: float, min_change: float | None) -> Comparison:
    """Rows from one number per side where a run is an imported summary (no requests to resample): the
    values and the change, no interval, so no better/worse (``too few samples``, saying why), and
    ``not comparable`` where a tool defines the metric otherwise."""
    only = [n for n, i, r in (("A", a, records_a), ("B", b, records_b)) if _summary_only(i, r)]
    warnings = [w for w in environment_warnings(a, records_a, b, records_b)  # a summary has no requests to fail
                if not (w.kind == "no_success" and any(f"run {n} " in w.message for n in only))]
    checks = comparability(a, records_a, b, records_b)
    warnings = [w for w, _ in checks] + warnings
    va, vb = _values(a, records_a), _values(b, records_b)
    none = f"run {' and '.join(only)} holds summary numbers only (no per-request data): no interval, so no verdict"
    why: dict[str, list[str]] = {}
    for w, keys in checks:
        for k in keys:
            why.setdefault(k, []).append(w.evidence.get("what", w.message))
    rows: list[MetricComparison] = []
    for m in METRICS:
        x, y = va.get(m.key), vb.get(m.key)
        if x is None and y is None:
            continue
        diff = None if x is None or y is None else y - x
        change = None if diff is None or not x else diff / abs(x)
        row = MetricComparison(m.key, m.label, m.unit, "", m.higher_is_better, x, y,
                               int(x is not None), int(y is not None), change, diff, None, None, "too few samples",
                               why=none, method="summary", min_effect=min_effect_of(m.key, min_change))
        row.raw_verdict = row.verdict
        if m.key in why:
            row.verdict, row.why = "not comparable", "; ".join(why[m.key]) + f" ({none})"
        rows.append(row)
    run_level = {"method": "summary", "a": None, "b": None, "why": none}
    return Comparison(a, b, rows, warnings, param_changes(_used_api(a), _used_api(b)), confidence, min_change,
                      {k: v for k, v in why.items() if any(r.metric == k for r in rows)}, run_level)


def _compare_trials(m: MetricDef, group: str, ta: dict[int, Samples], tb: dict[int, Samples], confidence: float,
                    min_change: float) -> MetricComparison | None:
    """One row from run-level values (:func:`phasescope.report.runlevel.run_level`)."""
    d = run_level_of(m, ta, tb, confidence)
    if d is None:
        return None
    if d["ci_low"] is None:
        verdict = "too few samples"
    else:
        verdict = _verdict(m, d["diff"], d["change"], d["ci_low"], d["ci_high"], min_change)
    return MetricComparison(m.key, m.label, m.unit, group, m.higher_is_better, d["a"], d["b"], d["n_a"], d["n_b"],
                            d["change"], d["diff"], d["ci_low"], d["ci_high"], verdict, method="trials",
                            trials_a=d["n_a"], trials_b=d["n_b"], a_ci=d["a_ci"], b_ci=d["b_ci"],
                            unstable=d["unstable"] is not None, unstable_why=d["unstable"])


def _n(s: Samples, m: MetricDef) -> int:
    if m.kind == "request":
        return len(s.values(m.key))
    if m.kind == "tail":
        return len(s.values(m.source or ""))
    if m.kind == "token":
        return len(s.itl_by_request)
    return len(s.window_tok_s)


def _compare_metric(
    m: MetricDef, group: str, sa: Samples, sb: Samples, confidence: float, min_change: float, n_boot: int, seed: int
) -> MetricComparison | None:
    va, vb = point_value(sa, m), point_value(sb, m)
    if va is None and vb is None:
        return None
    na, nb = _n(sa, m), _n(sb, m)
    diff = None if va is None or vb is None else vb - va
    change = None if diff is None or not va else diff / abs(va)
    lo = hi = None
    least = MIN_TAIL_SAMPLES if m.kind == "tail" else MIN_SAMPLES
    if va is None or vb is None or na < least or nb < least:
        verdict = "too few samples"
    else:
        if m.kind == "request":
            # bootstrap_median_diff holds n_boot × n indices: cap that at ~4M per side for huge runs
            nb_eff = min(n_boot, max(400, int(4_000_000 / max(na, nb))))
            ci = bootstrap_median_diff(sa.values(m.key), sb.values(m.key), n_boot=nb_eff, confidence=confidence, seed=seed)
            lo, hi = ci.low, ci.high
        elif m.kind == "token":
            lo, hi = _cluster_percentile_ci(sa.itl_by_request, sb.itl_by_request, m.q, min(n_boot, 1000), confidence, seed)
        elif m.kind == "tail":  # a percentile of per-request values: each request its own cluster
            src = m.source or ""
            lo, hi = _cluster_percentile_ci([[v] for v in sa.values(src)], [[v] for v in sb.values(src)], m.q,
                                            min(n_boot, 1000), confidence, seed)
        else:
            ci = bootstrap_median_diff(sa.window_tok_s, sb.window_tok_s, n_boot=n_boot, confidence=confidence, seed=seed)
            lo, hi = ci.low, ci.high
        verdict = _verdict(m, diff, change, lo, hi, min_change)
    return MetricComparison(m.key, m.label, m.unit, group, m.higher_is_better, va, vb, na, nb, change, diff, lo, hi, verdict)


def _verdict(m: MetricDef, diff: float | None, change: float | None, lo: float, hi: float, min_change: float) -> str:
    if diff is None or not (lo > 0 or hi < 0):
        return "within noise"
    if change is not None and abs(change) < min_change:
        return "within noise"
    return "better" if (diff > 0) == m.higher_is_better else "worse"


def _thin(clusters: list[list[float]]) -> list[np.ndarray]:
    total = sum(len(c) for c in clusters)
    stride = max(1, math.ceil(total / MAX_POOLED))
    return [np.asarray(c[::stride] if stride > 1 else c, dtype=float) for c in clusters if c]


def _cluster_percentile_ci(
    a: list[list[float]], b: list[list[float]], q: float, n_boot: int, confidence: float, seed: int
) -> tuple[float, float]:
    """Percentile-bootstrap CI of pct_q(pooled B) − pct_q(pooled A), resampling whole requests.

    A resample draws k requests with replacement, i.e. weights each request by how often it was
    drawn; the pooled percentile is then a weighted percentile over the sorted samples (inverted
    CDF), computed for all resamples at once without concatenating arrays."""
    rng = np.random.default_rng(seed)

    def boots(clusters: list[list[float]]) -> np.ndarray:
        cs = _thin(clusters)
        k = len(cs)
        vals = np.concatenate(cs)
        owner = np.repeat(np.arange(k), [len(c) for c in cs])
        order = np.argsort(vals, kind="stable")
        vals, owner = vals[order], owner[order]
        out = np.empty(n_boot)
        step = max(1, 4_000_000 // max(1, vals.size))  # resamples per vectorised batch
        for i in range(0, n_boot, step):
            m = min(step, n_boot - i)
            counts = np.stack([np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(m)])
            w = counts[:, owner].astype(float)  # (m, n) weight of each sorted sample
            cw = np.cumsum(w, axis=1)
            target = cw[:, -1:] * (q / 100.0)
            idx = np.minimum((cw < target).sum(axis=1), vals.size - 1)
            out[i : i + m] = vals[idx]
        return out

    d = boots(b) - boots(a)
    alpha = (1 - confidence) / 2
    return float(np.quantile(d, alpha)), float(np.quantile(d, 1 - alpha))


def gate(cmp: Comparison, metrics: list[str] | None = None) -> list[MetricComparison]:
    """The rows of the chosen metrics (all when None) whose verdict is ``worse``."""
    keys = set(metrics) if metrics else ALL_METRICS
    return [m for m in cmp.metrics if m.metric in keys and m.verdict == "worse"]


def parse_metrics(text: str | None) -> list[str] | None:
    """``--metrics ttft_p99,itl_p99`` → metric keys (aliases in :data:`METRIC_ALIASES`)."""
    from phasescope.errors import InputError

    if not text:
        return None
    out = []
    for part in text.replace(" ", ",").split(","):
        p = part.strip().lower()
        if not p:
            continue
        key = METRIC_ALIASES.get(p, p if p in ALL_METRICS else None)
        if key is None:
            names = ", ".join(sorted(set(METRIC_ALIASES) | ALL_METRICS))
            raise InputError(f"--metrics: unknown metric {part!r} (choose from {names})")
        out.append(key)
    return out


def to_markdown(cmp: Comparison, failed: list[MetricComparison] | None = None,
                decision: GateResult | None = None) -> str:
    """A markdown report for a pull-request comment: the gate's verdict, what makes the runs differ,
    then the table."""
    from phasescope.report.console import fmt_change, fmt_ci, fmt_value, interval_words

    lines = [f"### phasescope compare: `{cmp.b.id}` vs `{cmp.a.id}` (reference)", ""]
    if failed:
        lines += [f"**Regression:** {', '.join(f'{m.label} {fmt_change(m.change)}' for m in failed)} worse beyond noise.", ""]
    if decision is not None and decision.verdict == "inconclusive":
        lines += [f"**Inconclusive:** {decision.reason}.", ""]
    elif decision is not None and decision.verdict == "pass":
        lines += ["**Gate passed:** no gated metric is worse beyond noise and its minimum effect.", ""]
    nc = [w for w in cmp.warnings if w.kind == "runs_not_comparable"]
    other = [w for w in cmp.warnings if w.kind != "runs_not_comparable"]
    for w in nc + other:
        lines.append(f"- ⚠️ **{w.kind}**: {w.message}")
    if cmp.warnings:
        lines.append("")
    lines += ["| group | metric | A | B | change | CI of B − A | verdict |", "|---|---|---:|---:|---:|---:|---|"]
    for m in cmp.metrics:
        v = f"**{m.verdict}**" if m.verdict in ("worse", "not comparable") else m.verdict
        if m.unstable:
            v += " (unstable)"
        lines.append(f"| {m.group or 'all'} | {m.label} {'↑' if m.higher_is_better else '↓'} | {fmt_value(m.a, m.unit)} | "
                     f"{fmt_value(m.b, m.unit)} | {fmt_change(m.change)} | {fmt_ci(m.ci_low, m.ci_high, m.unit, ref=max(abs(m.a or 0.0), abs(m.b or 0.0)) or None)} | {v} |")
    lines += ["", f"_{interval_words(cmp)}; not comparable when the runs differ in more than the change under test._"]
    return "\n".join(lines) + "\n"
