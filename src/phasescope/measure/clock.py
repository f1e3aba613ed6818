"""The one clock every duration is measured on.

``time.perf_counter_ns`` is monotonic (CLOCK_MONOTONIC on Linux), nanosecond-resolution and never
jumps with NTP; ``time.time_ns`` is taken once per record only to place runs on a wall calendar
and to align processes. Durations are always differences of ``now_ns()`` readings from one process.
"""

from __future__ import annotations

import time
from typing import Iterable

now_ns = time.perf_counter_ns
wall_ns = time.time_ns


def ns_to_s(ns: int | float) -> float:
    return ns / 1e9


def union_s(intervals: Iterable[tuple[int, int]]) -> float:
    """Seconds covered by the union of ``(start_ns, end_ns)`` intervals (overlaps counted once)."""
    total, cur_a, cur_b = 0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None and cur_a is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_a is not None and cur_b is not None:
        total += cur_b - cur_a
    return total / 1e9
