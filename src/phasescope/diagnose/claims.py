"""When a finding may claim a difference, a scaling or a cause: only when the intervals support it.

A rule that would say "TTFT grows with the prompt", "decode slows as the context grows", "repeats are
served from the cache" compares two measured figures. Each figure carries its 95 % interval (the
experiments store ``<figure>_ci`` beside the value, with the sample count); :func:`differ` asks
:func:`phasescope.measure.interval.compare`, and the rule claims the difference only on ``higher`` /
``lower``. On ``cannot tell`` it says so, with both spreads (:func:`overlap_reason`).

A figure whose repeats disagree by more than a factor :data:`UNSTABLE_RATIO` is ``unstable``
(:func:`unstable`): no finding may rest on it, whatever its interval says.

Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from phasescope.measure.interval import CANNOT_TELL, HIGHER, LOWER, Interval, compare, median_interval

__all__ = ["CANNOT_TELL", "HIGHER", "LOWER", "differ", "overlap_reason", "rate_of_step", "step_interval",
           "step_rate", "stored", "unstable", "s_fmt", "rate_fmt", "UNSTABLE_RATIO", "sample_ratio",
           "unstable_warning"]

#: a figure whose slowest sample took more than this multiple of its fastest is unstable (issue 29:
#: 3,414 / 248 / 953 ms of one prompt length is 13.8×). Timing noise is multiplicative and one-sided
#: (load only slows), so a ratio, not a share of the median: 66 / 104 ms repeats beside a 775 ms cold
#: request are 1.6× apart and still tell a cache hit
UNSTABLE_RATIO = 2.0


def stored(value: Any, ci: Any, n: Any, lo_hi: Sequence[float] | None = None) -> Interval | None:
    """The interval an experiment stored: ``value`` with ``ci`` = [low, high] from ``n`` samples
    (``lo_hi``: the samples' min and max, when stored). None when the value or its interval is missing."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
        return None
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or any(not isinstance(x, (int, float)) for x in ci):
        return None
    lo, hi = float(ci[0]), float(ci[1])
    v = float(value)
    k = int(n) if isinstance(n, int) else 1
    mn, mx = (float(lo_hi[0]), float(lo_hi[1])) if lo_hi else (None, None)
    return Interval(v, min(lo, v), max(hi, v), k, "stored" if k >= 2 else "single", min=mn, max=mx)


def rate_of_step(step: Interval | None) -> Interval | None:
    """1 / a time interval (a token gap → a rate): the ends swap."""
    if step is None or step.low <= 0:
        return None
    mn = None if step.max is None or step.max <= 0 else 1.0 / step.max
    mx = None if step.min is None or step.min <= 0 else 1.0 / step.min
    return Interval(1.0 / step.value, 1.0 / step.high, 1.0 / step.low, step.n, step.method, step.confidence, mn, mx)


def step_rate(p: Any) -> Interval | None:
    """A point's decode rate, 1 / its typical step (``decode_step_s``), with the interval of that step
    (``decode_step_s_ci`` over ``decode_step_n`` gaps) inverted."""
    return rate_of_step(stored(getattr(p, "decode_step_s", None), getattr(p, "decode_step_s_ci", None),
                               getattr(p, "decode_step_n", 0)))


def step_interval(gaps: Sequence[float]) -> Interval | None:
    """The typical token gap of one request (the median of its gaps) with its interval."""
    return median_interval([g for g in gaps if g and g > 0])


def sample_ratio(iv: Interval | None) -> float | None:
    """The slowest sample over the fastest (None when the samples' range is unknown or not positive)."""
    if iv is None or iv.n < 2 or iv.min is None or iv.max is None or iv.min <= 0:
        return None
    return iv.max / iv.min


def unstable(iv: Interval | None) -> bool:
    """The samples behind the figure are more than :data:`UNSTABLE_RATIO` apart (fastest to slowest)."""
    r = sample_ratio(iv)
    return r is not None and r > UNSTABLE_RATIO


def differ(a: Interval | None, b: Interval | None, *, min_rel: float = 0.0) -> str:
    """``higher`` / ``lower`` (is b above or below a?) only when both intervals are known, neither figure
    is unstable and the intervals do not overlap; else ``cannot tell``."""
    if a is None or b is None or unstable(a) or unstable(b):
        return CANNOT_TELL
    return compare(a, b, min_rel=min_rel)


def _fmt_iv(iv: Interval, f: Callable[[float], str]) -> str:
    if iv.n < 2:
        return f"{f(iv.value)} (1 sample: no spread known)"
    if unstable(iv) and iv.min is not None and iv.max is not None:
        # the interval of a few samples this far apart is unbounded (two samples 30× apart give a log-t
        # interval from 1e-10 ms to 1e10 s); the range a reader can check is the samples'
        return f"{f(iv.value)} ({iv.n} samples spread {f(iv.min)}–{f(iv.max)})"
    return f"{f(iv.value)} ({f(iv.low)}–{f(iv.high)}, {iv.n} samples)"


def overlap_reason(what: str, a_label: str, a: Interval | None, b_label: str, b: Interval | None,
                   f: Callable[[float], str]) -> str:
    """Why a difference is not claimed: the two figures with their spreads, and which test failed."""
    parts = []
    for lab, iv in ((a_label, a), (b_label, b)):
        parts.append(f"{lab} {'not measured' if iv is None else _fmt_iv(iv, f)}")
    if a is None or b is None:
        why = "one end has no interval"
    elif unstable(a) or unstable(b):
        bad = [lab for lab, iv in ((a_label, a), (b_label, b)) if unstable(iv)]
        why = (f"the repeats of {' and of '.join(bad)} are more than {UNSTABLE_RATIO:g}× apart (unstable): no "
               f"finding rests on them")
    elif a.n < 2 or b.n < 2:
        why = "one request per point gives no spread (a longer --budget repeats them)"
    else:
        why = "the 95 % intervals overlap"
    return f"cannot tell whether {what}: {'; '.join(parts)} — {why}"


def unstable_warning(experiment: str, figure: str, iv: Interval, f: Callable[[float], str]) -> Any:
    """The ``unstable`` MeasurementWarning for a figure whose repeats disagree (see :func:`unstable`)."""
    from phasescope.measure.warnings import MeasurementWarning

    lo = iv.min if iv.min is not None else iv.low
    hi = iv.max if iv.max is not None else iv.high
    return MeasurementWarning(
        "unstable", f"{figure}: its {iv.n} repeats spread {f(lo)}–{f(hi)} ({hi / lo if lo else math.inf:.1f}× apart, "
                    f"median {f(iv.value)}); no finding rests on it",
        {"experiment": experiment, "figure": figure, "value": iv.value, "min": lo, "max": hi, "n": iv.n,
         "spread": iv.spread}, "rerun on a quieter machine, or with a longer --budget (more repeats)")


def s_fmt(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if abs(x) < 1 else f"{x:.2f} s"


def rate_fmt(x: float) -> str:
    return f"{x:.1f} tok/s"
