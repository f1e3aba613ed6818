"""The one clock every duration is measured on.

``time.perf_counter_ns`` is monotonic (CLOCK_MONOTONIC on Linux), nanosecond-resolution and never
jumps with NTP; ``time.time_ns`` is taken once per record only to place runs on a wall calendar
and to align processes. Durations are always differences of ``now_ns()`` readings from one process.
"""

from __future__ import annotations

import time

now_ns = time.perf_counter_ns
wall_ns = time.time_ns


def ns_to_s(ns: int | float) -> float:
    return ns / 1e9
