"""Statistics on measured samples: percentiles, summaries, fits and bootstrap intervals.

Pure functions over sequences of floats (numpy inside). Percentiles use linear interpolation
(numpy's default, the same as ``vllm bench serve``'s ``np.percentile``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


def _arr(xs: Sequence[float | None]) -> np.ndarray:
    return np.asarray([x for x in xs if x is not None and math.isfinite(x)], dtype=float)


def percentile(xs: Sequence[float | None], q: float) -> float | None:
    """q in [0, 100]; ``None`` for an empty sample."""
    a = _arr(xs)
    if a.size == 0:
        return None
    return float(np.percentile(a, q))


def median(xs: Sequence[float | None]) -> float | None:
    return percentile(xs, 50)


def describe(xs: Sequence[float | None], percentiles: Sequence[float] = (50, 90, 95, 99)) -> dict[str, float | None]:
    """``{"n", "mean", "median", "std", "min", "max", "p50", "p90", ...}`` (std is population std,
    as vLLM's ``np.std``)."""
    a = _arr(xs)
    out: dict[str, float | None] = {"n": float(a.size)}
    if a.size == 0:
        out.update({"mean": None, "median": None, "std": None, "min": None, "max": None})
        out.update({f"p{_pname(q)}": None for q in percentiles})
        return out
    out.update(
        {
            "mean": float(a.mean()),
            "median": float(np.median(a)),
            "std": float(a.std()),
            "min": float(a.min()),
            "max": float(a.max()),
        }
    )
    for q in percentiles:
        out[f"p{_pname(q)}"] = float(np.percentile(a, q))
    return out


def _pname(q: float) -> str:
    return str(int(q)) if float(q).is_integer() else str(q).replace(".", "_")


@dataclass
class QuadFit:
    """y ≈ a + b·x + c·x² with a, b, c ≥ 0 (seconds, seconds/token, seconds/token²)."""

    a: float
    b: float
    c: float
    r2: float

    def __call__(self, x: float) -> float:
        return self.a + self.b * x + self.c * x * x


def fit_quadratic_nonneg(
    xs: Sequence[float], ys: Sequence[float], *, weights: Sequence[float] | np.ndarray | None = None
) -> QuadFit:
    """Least squares for y = a + b x + c x² with every coefficient ≥ 0.

    Exact active-set search over the 7 non-empty subsets of {a, b, c} (tiny problem): fit each
    subset by ordinary least squares, keep those with all coefficients ≥ 0, take the smallest
    residual. Needs at least one point. ``weights`` minimises Σ(w·(y − f(x)))² instead (e.g.
    w = 1/y for relative errors); if no subset fits non-negatively with weights, the unweighted
    fit is used. ``r2`` is always the unweighted coefficient of determination.
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size == 0:
        raise ValueError("need at least one point")
    c = None
    if weights is not None:
        c = _nonneg_quad_coefs(x, y, np.asarray(weights, dtype=float))
    if c is None:
        c = _nonneg_quad_coefs(x, y, np.ones_like(x))
    if c is None:  # every subset had a negative coefficient: fall back to the mean
        c = np.array([max(y.mean(), 0.0), 0.0, 0.0])
    resid = float(np.sum((y - (c[0] + c[1] * x + c[2] * x * x)) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - resid / ss_tot if ss_tot > 0 else 1.0
    return QuadFit(float(c[0]), float(c[1]), float(c[2]), r2)


def _nonneg_quad_coefs(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """[a, b, c] of the best weighted non-negative subset fit, or None when no subset qualifies."""
    cols = [np.ones_like(x), x, x * x]
    best: tuple[float, np.ndarray] | None = None
    for mask in range(1, 8):
        idx = [i for i in range(3) if mask >> i & 1]
        if len(idx) > x.size:
            continue
        A = np.stack([cols[i] * w for i in idx], axis=1)
        coef, *_ = np.linalg.lstsq(A, y * w, rcond=None)
        if np.any(coef < -1e-15):
            continue
        full = np.zeros(3)
        full[idx] = np.clip(coef, 0, None)
        resid = float(np.sum(((y - (full[0] + full[1] * x + full[2] * x * x)) * w) ** 2))
        if best is None or resid < best[0] - 1e-18:
            best = (resid, full)
    return None if best is None else best[1]


@dataclass
class LinFit:
    intercept: float
    slope: float
    r2: float

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_linear(xs: Sequence[float], ys: Sequence[float]) -> LinFit:
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size < 2 or np.all(x == x[0]):
        return LinFit(float(y.mean()) if y.size else 0.0, 0.0, 0.0)
    slope, intercept = np.polyfit(x, y, 1)
    pred = intercept + slope * x
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    return LinFit(float(intercept), float(slope), r2)


@dataclass
class DiffCI:
    """Bootstrap confidence interval of median(b) − median(a)."""

    diff: float
    low: float
    high: float
    confidence: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def bootstrap_median_diff(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> DiffCI:
    """Percentile bootstrap of median(b) − median(a), resampling each sample independently."""
    xa, xb = _arr(a), _arr(b)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("both samples need at least one value")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, xa.size, size=(n_boot, xa.size))
    ib = rng.integers(0, xb.size, size=(n_boot, xb.size))
    diffs = np.median(xb[ib], axis=1) - np.median(xa[ia], axis=1)
    alpha = (1 - confidence) / 2
    return DiffCI(
        diff=float(np.median(xb) - np.median(xa)),
        low=float(np.quantile(diffs, alpha)),
        high=float(np.quantile(diffs, 1 - alpha)),
        confidence=confidence,
    )
