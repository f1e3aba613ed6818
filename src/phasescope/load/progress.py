"""Running numbers for the live progress bar: counts and rolling p50 TTFT / per-token ITL.

Fed with records (single process) or worker progress tuples ``(ok, ttft_s, itl_mean_s, error_kind)``.
Medians are over the last ``window`` successful requests so the bar shows the *current* state.
"""

from __future__ import annotations

import statistics
import threading
from collections import Counter, deque
from typing import Any

from phasescope.measure.records import RequestRecord


class LiveStats:
    def __init__(self, total: int | None, window: int = 200) -> None:
        self.total = total
        self.done = 0
        self.ok = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self._ttft: deque[float] = deque(maxlen=window)
        self._itl: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        # imported here, before the run: importing it at the first record was a one-time stall of
        # ~25 ms on the loop reading events, inside the measured window (issue 22's profile)
        from phasescope.load.workers import progress_of

        self._progress_of = progress_of

    def add(self, item: RequestRecord | tuple[Any, ...]) -> None:
        if isinstance(item, RequestRecord):
            item = self._progress_of(item)
        ok, ttft, itl, kind = item
        with self._lock:
            self.done += 1
            if ok:
                self.ok += 1
                if ttft is not None:
                    self._ttft.append(ttft)
                if itl is not None:
                    self._itl.append(itl)
            else:
                self.failed += 1
                self.errors[kind or "unknown"] += 1

    @property
    def p50_ttft_ms(self) -> float | None:
        with self._lock:
            return statistics.median(self._ttft) * 1000 if self._ttft else None

    @property
    def p50_itl_ms(self) -> float | None:
        with self._lock:
            return statistics.median(self._itl) * 1000 if self._itl else None

    def line(self) -> str:
        t = self.p50_ttft_ms
        i = self.p50_itl_ms
        return (f"ok {self.ok}  failed {self.failed}  p50 TTFT {'-' if t is None else f'{t:.1f}'} ms  "
                f"p50 ITL {'-' if i is None else f'{i:.2f}'} ms")
