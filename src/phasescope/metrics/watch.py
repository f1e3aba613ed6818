"""The ``watch`` loop: scrape every interval, keep a window, evaluate alerts, log CSV rows.

``watch_once`` takes two scrapes ``interval_s`` apart (rates and window quantiles need two) and
returns one JSON-ready snapshot. ``watch_loop`` scrapes until ``count`` refreshes or ``duration_s``
elapsed (or forever), calling ``on_update(state)`` after each scrape; a failed scrape after the first
is shown and retried (a restarting server must not end the watch), the first failure is raised.
A server that stays gone ends the watch: after at least :data:`GONE_SCRAPES` failed scrapes in a row
spanning :func:`gone_after_s` (derived from ``--interval`` and the scrape timeout: 10 s by default),
:class:`ServerGone` (exit 3) says since when and why; until then each failed refresh says how long
the server has not answered and when the watch will end.

On llama.cpp each refresh also reads ``GET /slots`` (and ``/props`` once) —
:mod:`phasescope.metrics.slots`: per-slot state, prompt and decoded tokens, context fill, each new
task's prompt-cache reuse, busy vs idle slots; ``--json`` carries them as ``slots``. Where /slots is
disabled the watch goes on from /metrics alone and says how to enable it.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime as _dt
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from phasescope.errors import InputError, PhasescopeError, TargetError
from phasescope.measure.clock import now_ns
from phasescope.metrics.alerts import Alert, evaluate
from phasescope.metrics.engines import PROFILES
from phasescope.metrics.scrape import Scraper
from phasescope.metrics.slots import SlotTracker
from phasescope.metrics.timeline import SUMMARY_KEYS, Timeline

HISTORY = 60  # summaries kept for trend lines
#: failed scrapes in a row before a server counts as gone (one refused connection is a restart's blink)
GONE_SCRAPES = 3


def gone_after_s(interval_s: float, timeout_s: float) -> float:
    """How long scrapes may fail in a row before the watch ends: three intervals, or two scrape
    timeouts when those are longer (a slow scrape must get its own chances)."""
    return max(3.0 * interval_s, 2.0 * timeout_s)


class ServerGone(TargetError):
    """The watched server stopped answering for longer than :func:`gone_after_s` (exit 3)."""


@dataclass
class WatchState:
    """Everything the dashboard shows after a refresh."""

    url: str
    interval_s: float
    window_s: float
    timeline: Timeline
    summary: dict[str, Any] = field(default_factory=dict)
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    alerts: list[Alert] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    refreshes: int = 0
    by: str | None = None
    last_error: str | None = None
    failing_since_ns: int | None = None  # the first of the failed scrapes in a row
    failures: int = 0  # failed scrapes in a row
    started_ns: int = field(default_factory=now_ns)
    slots: SlotTracker | None = None  # llama.cpp only

    @property
    def engine(self) -> str | None:
        return self.timeline.engine

    @property
    def engine_title(self) -> str:
        return PROFILES[self.engine].title if self.engine else "?"

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` document: meta, every :data:`SUMMARY_KEYS` key, alerts, notes, sources."""
        snap = self.timeline.latest
        out: dict[str, Any] = {
            "url": self.url,
            "engine": self.engine,
            "time": _iso(snap.wall_s) if snap else None,
            "window_s": round(self.timeline.span_s, 3),
            "scrapes": len(self.timeline),
        }
        out.update({k: self.summary.get(k) for k in SUMMARY_KEYS})
        out["alerts"] = [{"code": a.code, "level": a.level, "message": a.message} for a in self.alerts]
        out["notes"] = self.timeline.notes()
        out["sources"] = dict(sorted(snap.sources.items())) if snap else {}
        if self.groups:
            out["groups"] = self.groups
        if self.slots is not None:
            out.update(self.slots.to_json(self.summary.get("waiting")))
        out["warnings"] = self.warnings()
        return out

    def warnings(self) -> list[dict[str, Any]]:
        """Measurement warnings (not alerts about the server): rates need two scrapes."""
        from phasescope.measure.warnings import to_json, warn

        out = []
        if len(self.timeline) < 2:
            out.append(warn("too_few_samples", "scrapes", {"scrapes": len(self.timeline)}, scrapes=len(self.timeline)))
        return to_json(out)


def _iso(wall_s: float) -> str:
    return _dt.datetime.fromtimestamp(wall_s, tz=_dt.timezone.utc).isoformat(timespec="milliseconds")


class CsvLog:
    """One CSV row per scrape: time, seconds since start, engine, then :data:`SUMMARY_KEYS` (empty = null).

    Each row is flushed and fsync'd as it is written, so an interrupted watch leaves a usable file.
    """

    COLUMNS = ("time", "t_s", "engine", *SUMMARY_KEYS)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        if p.parent and not p.parent.exists():
            raise InputError(f"cannot write {p}: folder {p.parent} does not exist")
        try:
            self._fh: IO[str] = open(p, "w", newline="", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"cannot write {p}: {exc.strerror}") from None
        self.path = p
        self._w = csv.writer(self._fh)
        self._w.writerow(self.COLUMNS)
        self._sync()

    def _sync(self) -> None:
        """Flush and fsync; a full disk (or a size limit) is one OutputError naming the file (exit 3)."""
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            from phasescope.errors import OutputError
            from phasescope.safeio import os_cause

            with contextlib.suppress(OSError):
                self._fh.close()
            raise OutputError(f"cannot write the CSV {self.path}: {os_cause(exc)} "
                              "(the rows written before it are kept)") from None

    def write(self, state: WatchState) -> None:
        snap = state.timeline.latest
        if snap is None:
            return
        row: list[Any] = [_iso(snap.wall_s), f"{(snap.t_ns - state.started_ns) / 1e9:.3f}", snap.engine]
        for k in SUMMARY_KEYS:
            v = state.summary.get(k)
            row.append("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v))
        from phasescope.redact import clean  # the write boundary: no secret, encodable

        row = [clean(c) if isinstance(c, str) else c for c in row]
        if self._fh.closed:
            return
        self._w.writerow(row)
        self._sync()

    def close(self) -> None:
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self._fh.close()


async def _poll_slots(scraper: Scraper, state: WatchState, api_key: str | None, timeout_s: float) -> None:
    """llama.cpp: read /slots (and /props the first time) into ``state.slots``."""
    if state.engine != "llamacpp":
        return
    from phasescope.apis.llamacpp import fetch_props, fetch_slots

    session = scraper._session
    if session is None:
        return
    if state.slots is None:
        state.slots = SlotTracker(props=await fetch_props(session, scraper.url, timeout_s=timeout_s, api_key=api_key))
    raw, why = await fetch_slots(session, scraper.url, timeout_s=timeout_s, api_key=api_key)
    state.slots.update(raw, why)


def _refresh(state: WatchState, select: Mapping[str, str] | None, by: str | None) -> None:
    state.summary = state.timeline.summary(select=select)
    state.history.append(state.summary)
    state.alerts = evaluate(list(state.history), state.engine)
    if state.slots is not None:
        slot_alerts = state.slots.alerts(state.summary.get("waiting"))
        if any(a.code == "slots_full" for a in slot_alerts):  # the same queue, said with the slots' numbers
            state.alerts = [a for a in state.alerts if a.code != "queue"]
        state.alerts += slot_alerts
    state.by = by
    state.groups = state.timeline.summary_by(by, select=select) if by else {}
    state.refreshes += 1


async def watch_once(
    url: str,
    *,
    interval_s: float = 2.0,
    engine: str = "auto",
    select: Mapping[str, str] | None = None,
    by: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 5.0,
) -> WatchState:
    """Two scrapes ``interval_s`` apart → one :class:`WatchState` (rates/quantiles over that gap)."""
    if not interval_s > 0:
        raise InputError("--interval must be > 0")
    async with Scraper(url, engine=engine, timeout_s=timeout_s, api_key=api_key) as scraper:
        tl = Timeline(window_s=max(interval_s * 4, 1.0))
        state = WatchState(url=scraper.url, interval_s=interval_s, window_s=interval_s, timeline=tl)
        tl.add(await scraper.scrape())
        await asyncio.sleep(interval_s)
        tl.add(await scraper.scrape())
        await _poll_slots(scraper, state, api_key, timeout_s)
        _refresh(state, select, by)
        return state


def _failed(state: WatchState, exc: PhasescopeError, gone_s: float) -> None:
    """Note one failed scrape; :class:`ServerGone` once the server has been gone for ``gone_s``."""
    t = now_ns()
    if state.failing_since_ns is None:
        state.failing_since_ns = t
    state.failures += 1
    state.refreshes += 1
    down_s = (t - state.failing_since_ns) / 1e9
    if state.failures >= GONE_SCRAPES and down_s >= gone_s - 1e-9:
        raise ServerGone(f"{state.url} stopped answering: {state.failures} scrapes in a row failed over "
                         f"{down_s:.0f} s ({exc}); watch ended",
                         hint="restart the server, then run watch again") from None
    state.last_error = (f"{exc} — the server has not answered for {down_s:.0f} s "
                        f"({state.failures} failed scrape{'s' if state.failures != 1 else ''}); "
                        f"the watch ends if it stays gone for {gone_s:.0f} s")


async def watch_loop(
    url: str,
    *,
    interval_s: float = 2.0,
    window_s: float = 60.0,
    count: int | None = None,
    duration_s: float | None = None,
    engine: str = "auto",
    select: Mapping[str, str] | None = None,
    by: str | None = None,
    csv_path: str | os.PathLike[str] | None = None,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    on_update: Callable[[WatchState], None] | None = None,
) -> WatchState:
    """Scrape every ``interval_s`` until ``count`` refreshes (scrapes) or ``duration_s`` pass.

    The first scrape shows gauges only; rates and window quantiles appear from the second on.
    """
    if not interval_s > 0:
        raise InputError("--interval must be > 0")
    if not window_s > 0:
        raise InputError("--window must be > 0")
    if count is not None and count < 1:
        raise InputError("--count must be ≥ 1")
    log = CsvLog(csv_path) if csv_path else None
    try:
        async with Scraper(url, engine=engine, timeout_s=timeout_s, api_key=api_key) as scraper:
            state = WatchState(url=scraper.url, interval_s=interval_s, window_s=window_s, timeline=Timeline(window_s))
            t0 = now_ns()
            n = 0
            while True:
                t_tick = now_ns()
                try:
                    state.timeline.add(await scraper.scrape())
                    state.last_error, state.failing_since_ns, state.failures = None, None, 0
                    await _poll_slots(scraper, state, api_key, timeout_s)
                    _refresh(state, select, by)
                    if log:
                        log.write(state)
                except PhasescopeError as exc:
                    if not len(state.timeline):
                        raise
                    _failed(state, exc, gone_after_s(interval_s, timeout_s))
                n += 1
                if on_update:
                    on_update(state)
                if count is not None and n >= count:
                    break
                elapsed = (now_ns() - t0) / 1e9
                if duration_s is not None and elapsed + interval_s > duration_s + 1e-9:
                    break
                # absolute schedule: the next scrape is interval_s after this one started
                await asyncio.sleep(max(0.0, interval_s - (now_ns() - t_tick) / 1e9))
            return state
    finally:
        if log:
            log.close()
