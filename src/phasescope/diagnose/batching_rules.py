"""When the batching experiment may claim a knee, no gain or scaling: only where the levels' intervals part.

Each concurrency level's aggregate throughput carries a 95 % interval from its per-request samples
(``output_tok_s_ci`` over ``output_tok_s_n`` requests, :mod:`phasescope.experiments.batching`). The
point-value verdict of :func:`~phasescope.experiments.batching.find_knee` becomes a finding only when:

* ``batching-no-gain`` (knee at the first level): the highest level's interval lies wholly below the first's
  raised by the gain that would count there (``KNEE_GAIN`` per doubling) — "no gain" is proven, not just
  unseen. The highest level is tested because it is fixed before the data (no picking of the level that
  happens to part) and holds the most requests, so it is the sharpest test of a closed loop's gain;
* ``batching-knee`` at c > first: the knee's interval lies wholly above the first level's (there was a
  gain up to it) and the next level's wholly below the knee's raised by that gain;
* ``batching-scales``: the highest level's interval lies wholly above the one before it.

Otherwise :func:`batching_gate` returns the "cannot tell" sentence with both spreads, worded as
:func:`phasescope.diagnose.claims.overlap_reason` words every other such sentence. Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from phasescope.diagnose.claims import HIGHER, LOWER, differ, overlap_reason, rate_fmt, stored
from phasescope.measure.interval import Interval

__all__ = ["level_interval", "batching_gate"]


def level_interval(x: Any) -> Interval | None:
    """A level's aggregate throughput with its stored interval (None when none was stored)."""
    return stored(x.output_tok_s, getattr(x, "output_tok_s_ci", None), getattr(x, "output_tok_s_n", 0))


def batching_gate(kind: str, levels: Sequence[Any], knee: int | None, gain: float) -> str | None:
    """None when the intervals support the ``kind`` ("no-gain", "knee", "scales") finding; else why not."""
    first = levels[0]
    ivs = {x.concurrency: level_interval(x) for x in levels}

    def lab(x: Any) -> str:
        return f"throughput at concurrency {x.concurrency}"

    def per_doubling(a: Any, b: Any) -> float:
        return gain ** math.log2(b.concurrency / a.concurrency)

    if kind == "no-gain":
        nxt = levels[-1]
        a, b = ivs[first.concurrency], ivs[nxt.concurrency]
        k = per_doubling(first, nxt)
        if a is not None and differ(a.scale(k), b) == LOWER:
            return None
        return overlap_reason(f"{nxt.concurrency} streams gain {k - 1:.0%} or more over {first.concurrency}",
                              lab(first), a, lab(nxt), b, rate_fmt)
    if kind == "knee":
        at = next((x for x in levels if x.concurrency == knee), None)
        if at is None:
            return "the knee's level has no throughput"
        a, kv = ivs[first.concurrency], ivs[at.concurrency]
        if differ(a, kv) != HIGHER:
            return overlap_reason(f"throughput grows from {first.concurrency} to {at.concurrency} streams",
                                  lab(first), a, lab(at), kv, rate_fmt)
        above = [x for x in levels if x.concurrency > at.concurrency]
        if above:
            nxt = above[0]
            b = ivs[nxt.concurrency]
            k = per_doubling(at, nxt)
            if kv is None or differ(kv.scale(k), b) != LOWER:
                return overlap_reason(f"throughput stops growing past {at.concurrency} streams (no {k - 1:.0%} "
                                      f"gain at {nxt.concurrency})", lab(at), kv, lab(nxt), b, rate_fmt)
        return None
    if kind == "scales":
        prev, last = levels[-2], levels[-1]
        a, b = ivs[prev.concurrency], ivs[last.concurrency]
        if differ(a, b) == HIGHER:
            return None
        return overlap_reason(f"throughput still grows from {prev.concurrency} to {last.concurrency} streams",
                              lab(prev), a, lab(last), b, rate_fmt)
    raise ValueError(kind)
