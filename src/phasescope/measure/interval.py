"""Every figure with its interval: one small type, and the rules that turn intervals into sentences.

An :class:`Interval` is a point value with a 95 % interval around it, the number of samples it came
from, and how it was computed. Every reported figure of probe, bench (trials), explain evidence, hw and
tune carries one, so a sentence can be drawn from the intervals rather than from two point values:
"cannot tell" is what :func:`compare` says when they overlap.

How each interval is computed (``method``):

- ``order-stat``: the distribution-free interval of the median from order statistics (the binomial
  rank pair with coverage ≥ the confidence). Used for n ≥ 6, where such a pair exists at 95 %.
- ``log-t``: for 2 ≤ n < 6, a Student-t interval on the logarithms of the samples, i.e. the interval
  of the geometric mean (the median of a log-normal sample). Timing noise is multiplicative and
  one-sided (load only slows), and order statistics of 3 samples can promise only 75 %.
- ``mean-t``: a Student-t interval of the mean, for figures that are means across run-level trials
  (``bench --trials``), as AIPerf's multi-run confidence reports.
- ``bootstrap``: a percentile bootstrap (see :func:`bootstrap_interval`).
- ``single``: one sample; no spread is known (``low``/``high`` equal the value, ``n`` = 1).
- ``exact``: arithmetic on exact inputs (a formula), no sampling error.

Pure: numpy only, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

#: an interval within ±10 % of its value is "tight": the console prints the plain value
STABLE_REL = 0.10
CONFIDENCE = 0.95

# Student-t 97.5 % quantiles for df = 1..30 (two-sided 95 %); beyond 30 a normal-like tail is used.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t975(df: int) -> float:
    """The two-sided 95 % Student-t quantile for ``df`` degrees of freedom (df ≥ 1)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    # Cornish-Fisher style expansion around the normal quantile; exact to 3 decimals for df > 30
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


@dataclass(frozen=True)
class Interval:
    """``value`` with a ``confidence`` interval ``[low, high]`` from ``n`` samples by ``method``."""

    value: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = CONFIDENCE
    #: smallest and largest sample, where the interval came from samples (for "248–3,414, 3 runs")
    min: float | None = None
    max: float | None = None

    # -- reading it -------------------------------------------------------------------------------
    @property
    def known(self) -> bool:
        """True when the interval says something about spread (more than one sample, or exact)."""
        return self.method == "exact" or self.n >= 2

    @property
    def rel_halfwidth(self) -> float:
        """The larger distance from value to an end, relative to |value| (inf when value is 0)."""
        if not self.known:
            return math.inf
        half = max(self.value - self.low, self.high - self.value)
        if self.value == 0:
            return 0.0 if half == 0 else math.inf
        return half / abs(self.value)

    def tight(self, rel: float = STABLE_REL) -> bool:
        """Within ±``rel`` of the value (and the spread is known)."""
        return self.known and self.rel_halfwidth <= rel

    @property
    def spread(self) -> float | None:
        """(max − min) ÷ value of the samples, the "195 % spread" of a measurement; None if unknown."""
        if self.min is None or self.max is None or self.n < 2 or self.value == 0:
            return None
        return (self.max - self.min) / abs(self.value)

    @property
    def ci(self) -> list[float]:
        return [self.low, self.high]

    def overlaps(self, other: "Interval") -> bool:
        return not (self.high < other.low or other.high < self.low)

    def scale(self, k: float) -> "Interval":
        """The same interval in other units (k > 0), e.g. seconds → milliseconds."""
        if k <= 0:
            raise ValueError("scale must be positive")
        return Interval(self.value * k, self.low * k, self.high * k, self.n, self.method, self.confidence,
                        None if self.min is None else self.min * k, None if self.max is None else self.max * k)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"value": self.value, "ci": [self.low, self.high], "n": self.n,
                             "method": self.method, "confidence": self.confidence}
        if self.min is not None:
            d["min"], d["max"] = self.min, self.max
        return {k: _finite(v) for k, v in d.items()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Interval":
        ci = d.get("ci") or [d.get("value"), d.get("value")]
        return cls(float(d["value"]), float(ci[0]), float(ci[1]), int(d.get("n") or 1),
                   str(d.get("method") or "single"), float(d.get("confidence") or CONFIDENCE),
                   d.get("min"), d.get("max"))

    def fmt(self, fmt_value: Callable[[float], str] = lambda v: f"{v:.3g}", *, unit_of_n: str = "runs",
            rel: float = STABLE_REL) -> str:
        """The console form: the plain value where the interval is tight, else the value with the
        range of its samples and their count: ``"953 ms (248–3,414 ms, 3 runs)"``."""
        if self.method == "exact" or self.tight(rel):
            return fmt_value(self.value)
        if self.n < 2:
            return f"{fmt_value(self.value)} (1 {unit_of_n[:-1] if unit_of_n.endswith('s') else unit_of_n})"
        lo = self.min if self.min is not None else self.low
        hi = self.max if self.max is not None else self.high
        return f"{fmt_value(self.value)} ({fmt_value(lo)}–{fmt_value(hi)}, {self.n} {unit_of_n})"


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _clean(xs: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(x) for x in xs if x is not None and math.isfinite(float(x))], dtype=float)


def exact(value: float) -> Interval:
    """A figure computed from exact inputs (a formula): no sampling error."""
    return Interval(float(value), float(value), float(value), 1, "exact")


def single(value: float) -> Interval:
    """One measurement: the value, with no known spread."""
    v = float(value)
    return Interval(v, v, v, 1, "single", min=v, max=v)


def _binom_cdf(k: int, n: int) -> float:
    """P(X ≤ k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(0, k + 1)) / 2.0**n


def order_stat_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int, float] | None:
    """The 0-based ranks (lo, hi) of the distribution-free interval of the median and its exact
    coverage, choosing the narrowest symmetric pair with coverage ≥ ``confidence``; None when even
    (min, max) covers less (n < 6 at 95 %)."""
    best = None
    for k in range(0, (n - 1) // 2):  # 0-based ranks k and n-1-k; coverage = 1 − 2·P(X ≤ k)
        cov = 1.0 - 2.0 * _binom_cdf(k, n)
        if cov >= confidence:
            best = (k, n - 1 - k, cov)
        else:
            break
    return best


def median_interval(samples: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval | None:
    """The median of ``samples`` with its interval (see the module docstring for the method by n).

    None for an empty sample; ``single`` for one. The log-t method needs positive samples (times,
    rates); with a zero or negative sample at n < 6 it falls back to a t-interval on the raw values.
    """
    a = np.sort(_clean(samples))
    n = int(a.size)
    if n == 0:
        return None
    med = float(np.median(a))
    lo_s, hi_s = float(a[0]), float(a[-1])
    if n == 1:
        return single(med)
    ranks = order_stat_ranks(n, confidence)
    if ranks is not None:
        lo_i, hi_i, cov = ranks
        return Interval(med, float(a[lo_i]), float(a[hi_i]), n, "order-stat", cov, lo_s, hi_s)
    t = t975(n - 1) if confidence == CONFIDENCE else _t_any(n - 1, confidence)
    if np.all(a > 0):
        la = np.log(a)
        m, s = float(la.mean()), float(la.std(ddof=1))
        half = t * s / math.sqrt(n)
        low, high = math.exp(m - half), math.exp(m + half)
    else:
        m, s = float(a.mean()), float(a.std(ddof=1))
        half = t * s / math.sqrt(n)
        low, high = m - half, m + half
    # the interval always contains the reported value (the sample median)
    return Interval(med, min(low, med), max(high, med), n, "log-t" if np.all(a > 0) else "t",
                    confidence, lo_s, hi_s)


def mean_interval(samples: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval | None:
    """The mean with a Student-t interval (run-level trials: one value per trial)."""
    a = _clean(samples)
    n = int(a.size)
    if n == 0:
        return None
    m = float(a.mean())
    if n == 1:
        return single(m)
    t = t975(n - 1) if confidence == CONFIDENCE else _t_any(n - 1, confidence)
    half = t * float(a.std(ddof=1)) / math.sqrt(n)
    return Interval(m, m - half, m + half, n, "mean-t", confidence, float(a.min()), float(a.max()))


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile for ``df`` degrees of freedom at ``confidence`` (df ≥ 1)."""
    return t975(df) if confidence == CONFIDENCE else _t_any(df, confidence)


def _t_any(df: int, confidence: float) -> float:
    """A t quantile for another confidence: Hill's approximation through the normal quantile."""
    z = _norm_ppf(0.5 + confidence / 2)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def _norm_ppf(p: float) -> float:
    """Acklam's rational approximation of the normal quantile (|error| < 1.2e-9)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    pl = 0.02425
    if p < pl:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - pl:
        return -_norm_ppf(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


def bootstrap_interval(samples: Sequence[float | None], stat: Callable[[np.ndarray], float] = np.median, *,
                       n_boot: int = 2000, confidence: float = CONFIDENCE, seed: int = 0,
                       rows: Callable[[np.ndarray], np.ndarray] | None = None) -> Interval | None:
    """A percentile-bootstrap interval of ``stat`` (e.g. a p99 over requests).

    ``rows``: the same statistic over every resample at once (an ``n_boot × n`` array of resamples in, one
    value per row out), for a ``stat`` too slow to call ``n_boot`` times; same resamples, same interval."""
    a = _clean(samples)
    n = int(a.size)
    if n == 0:
        return None
    v = float(stat(a))
    if n == 1:
        return single(v)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    boots = np.asarray(rows(a[idx]) if rows is not None else [stat(a[i]) for i in idx], dtype=float)
    alpha = (1 - confidence) / 2
    lo, hi = float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))
    return Interval(v, min(lo, v), max(hi, v), n, "bootstrap", confidence, float(a.min()), float(a.max()))


def bootstrap_ratio_of_sums(num: Sequence[float], den: Sequence[float], *, n_boot: int = 2000,
                            confidence: float = CONFIDENCE, seed: int = 0) -> Interval | None:
    """Σ num ÷ Σ den over paired samples (a share of sums: the waterfall's "71 % of p99 TTFT was queue"),
    with a percentile-bootstrap interval resampling the pairs together; None when Σ den is not positive."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.size == 0 or a.size != b.size or not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)) or b.sum() <= 0:
        return None
    v = float(a.sum() / b.sum())
    n = int(a.size)
    if n == 1:
        return single(v)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    sb = b[idx].sum(axis=1)
    keep = sb > 0
    boots = a[idx].sum(axis=1)[keep] / sb[keep]
    alpha = (1 - confidence) / 2
    lo, hi = float(np.quantile(boots, alpha)), float(np.quantile(boots, 1 - alpha))
    return Interval(v, min(lo, v), max(hi, v), n, "bootstrap", confidence)


def ratio(num: Interval, den: Interval) -> Interval:
    """num ÷ den with a conservative interval (ends divided crosswise; both must be positive)."""
    if den.low <= 0 or num.low < 0:
        raise ValueError("ratio of intervals needs a positive denominator and a non-negative numerator")
    method = "exact" if num.method == den.method == "exact" else "ratio"
    return Interval(num.value / den.value, num.low / den.high, num.high / den.low, min(num.n, den.n), method,
                    min(num.confidence, den.confidence))


#: the three answers :func:`compare` gives
HIGHER, LOWER, CANNOT_TELL = "higher", "lower", "cannot tell"


def compare(a: Interval, b: Interval, *, min_rel: float = 0.0) -> str:
    """Is ``b`` higher or lower than ``a``? Only when the intervals do not overlap, both spreads are
    known, and the difference is at least ``min_rel`` of ``a``; otherwise "cannot tell"."""
    if not (a.known and b.known):
        return CANNOT_TELL
    if a.overlaps(b):
        return CANNOT_TELL
    if min_rel and a.value != 0 and abs(b.value - a.value) / abs(a.value) < min_rel:
        return CANNOT_TELL
    return HIGHER if b.value > a.value else LOWER


def to_ci(iv: Interval | None) -> list[float] | None:
    """The ``*_ci`` JSON value: ``[low, high]``, or None when there is no interval."""
    if iv is None:
        return None
    return [_finite(iv.low), _finite(iv.high)]
