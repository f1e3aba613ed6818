"""Pieces every experiment shares: the result header, record selection by tags, robust spread.

Every request an experiment sends carries ``tags = {"experiment": NAME, "phase": ..., ...}``, so
the analysis of a saved JSONL file needs nothing but the records themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from phasescope.measure import aggregate, derive
from phasescope.measure.records import RequestRecord


@dataclass
class ExperimentInfo:
    """Where and how an experiment ran. ``records_path``: the JSONL file with every raw record."""

    name: str
    target: str | None = None
    engine: str | None = None
    model: str | None = None
    api: str | None = None
    started_unix_s: float | None = None
    duration_s: float | None = None
    n_requests: int = 0
    n_failed: int = 0
    records_path: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    #: MeasurementWarning objects (legacy strings are read as kind ``note``)
    warnings: list[Any] = field(default_factory=list)
    #: set when the experiment could not run at all (e.g. no /metrics for ``queue``)
    skipped: str | None = None


def select(records: Iterable[RequestRecord], experiment: str, **tags: Any) -> list[RequestRecord]:
    """Records of ``experiment`` whose tags match every ``tags`` item (ok or not)."""
    out = []
    for r in records:
        t = r.tags or {}
        if t.get("experiment") != experiment:
            continue
        if all(t.get(k) == v for k, v in tags.items()):
            out.append(r)
    return out


def ok(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def finite(xs: Iterable[float | None]) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(float(x))]


def med(xs: Iterable[float | None]) -> float | None:
    """The median of the finite values (:func:`phasescope.measure.aggregate.median`, the one every output uses)."""
    return aggregate.median(finite(xs))


def pct(xs: Iterable[float | None], q: float) -> float | None:
    return aggregate.percentile(finite(xs), q)


def mad_sigma(xs: Sequence[float]) -> float:
    """Robust standard deviation: 1.4826 × median absolute deviation (0 for < 2 values)."""
    v = finite(xs)
    if len(v) < 2:
        return 0.0
    a = np.asarray(v)
    return float(1.4826 * np.median(np.abs(a - np.median(a))))


def group_by(records: Iterable[RequestRecord], key: Callable[[RequestRecord], Any]) -> dict[Any, list[RequestRecord]]:
    out: dict[Any, list[RequestRecord]] = {}
    for r in records:
        out.setdefault(key(r), []).append(r)
    return out


def prompt_tokens_of(r: RequestRecord) -> int | None:
    """The prompt length the server reported, else the one we asked for."""
    if r.prompt_tokens is not None:
        return int(r.prompt_tokens)
    if r.prompt_tokens_requested is not None:
        return int(r.prompt_tokens_requested)
    return None


def output_tokens_of(r: RequestRecord) -> int | None:
    """The request's output tokens, by :func:`phasescope.measure.derive.output_tokens`' one rule."""
    n = derive.output_tokens(r)
    return int(n) if n is not None else None


def server_prefill_s(r: RequestRecord) -> float | None:
    s = r.server or {}
    v = s.get("prefill_s")
    return float(v) if v is not None else None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def round_or_none(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


class ClientStalls:
    """The intervals in which this client's own event loop could not run (a GC pause, the process or
    the whole VM descheduled, the loop blocked): a token that arrived then was read late, so a gap
    between two token stamps that spans such an interval is partly the client's, not the server's.

    A task sleeps ``period_s`` at a time; a wake-up later than ``threshold_s`` past its due time
    (beyond the selector's rounding of timeouts up to a whole millisecond) records the interval
    (due + 1 ms, woke) on the records' clock. ``async with ClientStalls() as s: ...; s.intervals_ns``."""

    def __init__(self, period_s: float = 0.002, threshold_s: float = 0.003) -> None:
        self.period_s = period_s
        self.threshold_ns = int(threshold_s * 1e9)
        self.intervals_ns: list[tuple[int, int]] = []
        self._task: Any = None

    async def _run(self) -> None:
        import asyncio

        from phasescope.load.health import TIMER_ROUNDING_NS
        from phasescope.measure.clock import now_ns

        iv = int(self.period_s * 1e9)
        while True:
            t = now_ns()
            await asyncio.sleep(self.period_s)
            woke = now_ns()
            due = t + iv + TIMER_ROUNDING_NS
            if woke - due > self.threshold_ns:
                self.intervals_ns.append((due, woke))

    async def __aenter__(self) -> "ClientStalls":
        import asyncio

        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        import asyncio

        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


#: how soon after a stall ends the client has read what arrived during it (one loop iteration or two)
RESUME_SLACK_NS = 3_000_000


def read_late_ns(a: int, b: int, stalls: Sequence[Sequence[int]], slack_ns: int = RESUME_SLACK_NS) -> int:
    """How much of the gap between two reads at ``a`` and ``b`` (ns) may be the client's own stall
    (see :class:`ClientStalls`). Only a stall the read at ``b`` came out of counts: a token read as the
    client resumed may have arrived at any time in the stall, so the server's gap is only known to be
    at least ``max(a, s) − a``. A stall followed by ready time before the token came cost nothing: the
    client was waiting when it arrived, so that whole gap is the server's."""
    late = 0
    for s, e in stalls:
        s, e = int(s), int(e)
        if s < b <= e + slack_ns:
            late = max(late, b - max(a, s))
    return late
