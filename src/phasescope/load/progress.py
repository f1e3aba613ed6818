"""Running numbers for the live progress bar: counts and rolling p50 TTFT / per-token ITL.

Fed with records (single process) or worker progress tuples ``(ok, ttft_s, itl_mean_s, error_kind)``.
Medians are over the last ``window`` successful requests so the bar shows the *current* state.

``add`` runs on the loop that reads token events, once per finished request, and in a closed loop a
whole wave finishes within milliseconds (2,048 requests in ~30 ms at 2,048 streams): so it only
counts and keeps the record; its TTFT and ITL are derived when the bar reads the medians (a few
times a second, the last ``window`` records at most), not per record on that loop.
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
        self.window = window
        self._ttft: deque[float] = deque(maxlen=window)
        self._itl: deque[float] = deque(maxlen=window)
        #: successful records not yet derived (only the newest can reach the medians)
        self._pending: deque[RequestRecord] = deque(maxlen=8 * window)
        self._lock = threading.Lock()
        # imported here, before the run: importing it at the first record was a one-time stall of
        # ~25 ms on the loop reading events, inside the measured window (issue 22's profile)
        from phasescope.load.workers import progress_of

        self._progress_of = progress_of

    def add(self, item: RequestRecord | tuple[Any, ...]) -> None:
        if isinstance(item, RequestRecord):
            if item.ok:
                with self._lock:
                    self.done += 1
                    self.ok += 1
                    self._pending.append(item)
                return
            item = (False, None, None, item.error_kind)
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

    def _derive_pending(self) -> None:
        """Derive the newest pending records (newest first, until both windows are full), then
        append their values in arrival order: the same windows as deriving every record at once."""
        with self._lock:
            pend, self._pending = self._pending, deque(maxlen=self._pending.maxlen)
        tt: list[float] = []
        it: list[float] = []
        w = self.window
        for rec in reversed(pend):
            if len(tt) >= w and len(it) >= w:
                break
            _, ttft, itl, _ = self._progress_of(rec)
            if ttft is not None and len(tt) < w:
                tt.append(ttft)
            if itl is not None and len(it) < w:
                it.append(itl)
        with self._lock:
            self._ttft.extend(reversed(tt))
            self._itl.extend(reversed(it))

    @property
    def p50_ttft_ms(self) -> float | None:
        self._derive_pending()
        with self._lock:
            return statistics.median(self._ttft) * 1000 if self._ttft else None

    @property
    def p50_itl_ms(self) -> float | None:
        self._derive_pending()
        with self._lock:
            return statistics.median(self._itl) * 1000 if self._itl else None

    def line(self) -> str:
        t = self.p50_ttft_ms
        i = self.p50_itl_ms
        return (f"ok {self.ok}  failed {self.failed}  p50 TTFT {'-' if t is None else f'{t:.1f}'} ms  "
                f"p50 ITL {'-' if i is None else f'{i:.2f}'} ms")
