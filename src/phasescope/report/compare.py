"""Compare two runs metric by metric, with a noise-aware verdict.

For each phase metric (see :mod:`phasescope.report.samples`) and each measurement point both runs
share, the change is B relative to A, and the verdict comes from a bootstrap confidence interval
(default 95 %) of the difference B − A:

* per-request metrics (TTFT, decode tok/s, TPOT, E2E, prefill tok/s): the median difference,
  :func:`phasescope.measure.stats.bootstrap_median_diff` over the raw per-request values;
* ITL p50/p99: the pooled-percentile difference, bootstrapped by resampling whole requests
  (cluster bootstrap: a request's tokens are not independent of each other);
* output throughput: the median difference of per-window token rates (the run cut into 10 windows).

Verdict: ``better`` / ``worse`` when the interval excludes zero *and* the change is at least
``min_change`` (default 1 %) of A — a statistically clear but negligible shift stays
``within noise``; otherwise ``within noise``. ``too few samples`` below :data:`MIN_SAMPLES` per side.

The comparison warns when the runs differ in something other than the parameter under test:
model, engine or its version, device, API, target, kind, requested prompt/output lengths, several
parameters at once, or when a run is partial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phasescope.measure.records import RequestRecord
from phasescope.measure.stats import bootstrap_median_diff, median
from phasescope.report.samples import (
    METRICS,
    Group,
    MetricDef,
    Samples,
    group_label,
    point_value,
    run_samples,
    samples_of,
    usable,
)
from phasescope.report.store import RunInfo

MIN_SAMPLES = 3
VERDICTS = ("better", "worse", "within noise", "too few samples")
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


@dataclass
class Comparison:
    a: RunInfo
    b: RunInfo
    metrics: list[MetricComparison]
    warnings: list[str] = field(default_factory=list)
    param_changes: dict[str, list[Any]] = field(default_factory=dict)
    confidence: float = 0.95
    min_change: float = 0.01

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
            "param_changes": self.param_changes,
            "warnings": self.warnings,
            "metrics": [m.__dict__ for m in self.metrics],
        }


def compare_runs(
    a: RunInfo,
    records_a: list[RequestRecord],
    b: RunInfo,
    records_b: list[RequestRecord],
    *,
    confidence: float = 0.95,
    min_change: float = 0.01,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare run B against run A (A is the reference)."""
    warnings = environment_warnings(a, records_a, b, records_b)
    changes = param_changes(a.params, b.params)
    if len(changes) > 1:
        warnings.append(
            f"the runs differ in {len(changes)} parameters ({', '.join(sorted(changes))}); "
            "a change cannot be pinned on one of them"
        )
    ga, gb = run_samples(records_a), run_samples(records_b)
    pairs: list[tuple[Group, Samples, Samples]] = [(g, ga[g], gb[g]) for g in ga if g in gb]
    if not pairs and ga and gb:
        if len(ga) == 1 and len(gb) == 1:
            (g1, s1), (g2, s2) = next(iter(ga.items())), next(iter(gb.items()))
            warnings.append(f"different measurement points: {group_label(g1) or 'untagged'} → {group_label(g2) or 'untagged'}")
            pairs = [((), s1, s2)]
        else:
            warnings.append("the runs share no measurement point (prompt size, concurrency...); comparing all requests pooled")
            pairs = [((), samples_of(usable(records_a)), samples_of(usable(records_b)))]
    only = [group_label(g) for g in list(ga) + list(gb) if g and (g not in ga or g not in gb)]
    if only and any(g in gb for g in ga):
        warnings.append(f"measured in one run only (not compared): {', '.join(dict.fromkeys(only))}")
    rows: list[MetricComparison] = []
    for g, sa, sb in pairs:
        for m in METRICS:
            row = _compare_metric(m, group_label(g), sa, sb, confidence, min_change, n_boot, seed)
            if row is not None:
                rows.append(row)
    return Comparison(a, b, rows, warnings, changes, confidence, min_change)


def _n(s: Samples, m: MetricDef) -> int:
    if m.kind == "request":
        return len(s.values(m.key))
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
    if va is None or vb is None or na < MIN_SAMPLES or nb < MIN_SAMPLES:
        verdict = "too few samples"
    else:
        if m.kind == "request":
            # bootstrap_median_diff holds n_boot × n indices: cap that at ~4M per side for huge runs
            nb_eff = min(n_boot, max(400, int(4_000_000 / max(na, nb))))
            ci = bootstrap_median_diff(sa.values(m.key), sb.values(m.key), n_boot=nb_eff, confidence=confidence, seed=seed)
            lo, hi = ci.low, ci.high
        elif m.kind == "token":
            lo, hi = _cluster_percentile_ci(sa.itl_by_request, sb.itl_by_request, m.q, min(n_boot, 1000), confidence, seed)
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


# --- what else differs ------------------------------------------------------------------------
_ENV_FIELDS = (
    ("model", "model"),
    ("engine", "engine"),
    ("engine_version", "engine version"),
    ("device", "device"),
    ("api", "API"),
    ("kind", "run kind"),
)


def environment_warnings(a: RunInfo, ra: list[RequestRecord], b: RunInfo, rb: list[RequestRecord]) -> list[str]:
    out: list[str] = []
    for attr, name in _ENV_FIELDS:
        x, y = getattr(a, attr), getattr(b, attr)
        if x != y and (x is not None or y is not None):
            out.append(f"{name} differs: {x or '?'} → {y or '?'}")
    if _host(a.target) != _host(b.target):  # a new port alone (e.g. the embedded engine's) is no warning
        out.append(f"target host differs: {a.target or '?'} → {b.target or '?'} (fine if the server is what you compare)")
    pa, pb = _lengths(ra, "prompt"), _lengths(rb, "prompt")
    if pa and pb and pa != pb:
        out.append(f"prompt lengths differ: {_fmt_set(pa)} → {_fmt_set(pb)} tokens")
    oa, ob = _lengths(ra, "output"), _lengths(rb, "output")
    if oa and ob and oa != ob:
        out.append(f"requested output lengths differ: {_fmt_set(oa)} → {_fmt_set(ob)} tokens")
    for i, name in ((a, "A"), (b, "B")):
        if i.status != "complete":
            out.append(f"run {name} ({i.id}) is {i.status}" + (f": {i.error}" if i.error else ""))
    for recs, name in ((ra, "A"), (rb, "B")):
        if not [r for r in recs if r.ok]:
            out.append(f"run {name} has no successful request")
    return out


def _host(url: str | None) -> str | None:
    from urllib.parse import urlsplit

    return None if not url else (urlsplit(url).hostname or url)


def _lengths(recs: list[RequestRecord], which: str) -> frozenset[int]:
    rs = usable(recs)
    if which == "prompt":
        vals = [r.prompt_tokens_requested for r in rs if r.prompt_tokens_requested is not None]
        if not vals:  # fall back to measured prompt sizes, rounded to 2 significant digits
            vals = [_round2(r.prompt_tokens) for r in rs if r.prompt_tokens]
    else:
        vals = [r.max_tokens for r in rs if r.max_tokens is not None]
    return frozenset(int(v) for v in vals if v is not None)


def _round2(n: int | None) -> int | None:
    if not n:
        return n
    mag = 10 ** max(0, len(str(int(n))) - 2)
    return int(round(n / mag) * mag)


def _fmt_set(s: frozenset[int]) -> str:
    v = sorted(s)
    if len(v) > 6:
        return f"{len(v)} lengths {v[0]}–{v[-1]} (median {median([float(x) for x in v]):.0f})"
    return "/".join(str(x) for x in v)


def param_changes(pa: dict[str, Any], pb: dict[str, Any]) -> dict[str, list[Any]]:
    """Parameters both runs recorded whose values differ (flattened with dots), as ``{name: [a, b]}``.
    A parameter only one run recorded (e.g. added by a newer phasescope) is unknown for the other,
    not a difference."""
    fa, fb = _flatten(pa or {}), _flatten(pb or {})
    return {k: [fa[k], fb[k]] for k in sorted(set(fa) & set(fb)) if fa[k] != fb[k]}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


# --- which two runs ---------------------------------------------------------------------------
@dataclass
class Pair:
    """What ``phasescope compare`` resolved: two runs to compare, or only a message (a baseline
    was just marked)."""

    a: RunInfo | None
    b: RunInfo | None
    message: str | None = None


def resolve_pair(store: Any, ids: list[str], baseline: str | None = None, set_baseline: bool = False) -> Pair:
    """``compare A B`` → (A, B). ``compare RUN --baseline NAME`` → (baseline, RUN); when NAME is not
    set yet RUN becomes baseline NAME. ``compare --baseline NAME`` → (baseline, the latest other run
    of its kind). ``--set`` marks RUN as baseline NAME (replacing it)."""
    from phasescope.errors import InputError

    if set_baseline:
        if not baseline or len(ids) != 1:
            raise InputError("--set needs --baseline NAME and exactly one run id")
        info = store.set_baseline(baseline, ids[0])
        return Pair(None, None, f"marked {info.id} as baseline {baseline!r}")
    if baseline is None:
        if len(ids) != 2:
            raise InputError("compare needs two run ids (A B), or one run and --baseline NAME")
        return Pair(store.get(ids[0]), store.get(ids[1]))
    if len(ids) > 1:
        raise InputError("with --baseline NAME give at most one run id (the run to compare against the baseline)")
    base = store.get_baseline(baseline)
    if base is None:
        if not ids:
            known = ", ".join(store.baselines()) or "none"
            raise InputError(f"no baseline named {baseline!r} (known: {known}); mark one with `compare RUN --baseline {baseline}`")
        info = store.set_baseline(baseline, ids[0])
        return Pair(None, None, f"marked {info.id} as baseline {baseline!r}; later runs compare against it with --baseline {baseline}")
    if ids:
        return Pair(base, store.get(ids[0]))
    later = [r for r in store.list_runs(kind=base.kind, limit=2) if r.id != base.id]
    if not later:
        raise InputError(f"no {base.kind} run other than baseline {baseline!r} ({base.id}) to compare")
    return Pair(base, later[0])
