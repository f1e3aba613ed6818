"""Scrape /metrics in the background while something else runs (bench, explain experiments).

::

    async with MetricsSampler(url, interval_s=1.0) as sampler:
        ...                                # run the load
    sampler.summary()                      # server-side view over the whole run (None if no metrics)
    sampler.rows                           # one summary dict per scrape, with "t_s" since start

A server without metrics (llama.cpp without ``--metrics``, SGLang without ``--enable-metrics``)
does not fail the caller: ``available`` is False and ``error`` says why. Scrapes never overlap;
each takes one HTTP GET, so the load on the server is negligible.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any

from phasescope.apis import Session
from phasescope.errors import PhasescopeError
from phasescope.measure.clock import now_ns
from phasescope.metrics.scrape import Scraper
from phasescope.metrics.timeline import Timeline


class MetricsSampler:
    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 1.0,
        engine: str = "auto",
        session: Session | None = None,
        api_key: str | None = None,
        timeout_s: float = 5.0,
        window_s: float = 60.0,
    ) -> None:
        self.interval_s = interval_s
        self._scraper = Scraper(url, engine=engine, session=session, api_key=api_key, timeout_s=timeout_s)
        #: every snapshot of the run (for the whole-run summary)
        self.run = Timeline(window_s=10**9)
        #: the sliding window (for live values)
        self.window = Timeline(window_s=window_s)
        self.rows: list[dict[str, Any]] = []
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._t0 = now_ns()

    @property
    def available(self) -> bool:
        return len(self.run) > 0

    async def _scrape(self) -> None:
        snap = await self._scraper.scrape()
        self.run.add(snap)
        self.window.add(snap)
        row = self.window.summary()
        row["t_s"] = (snap.t_ns - self._t0) / 1e9
        self.rows.append(row)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._scrape()
            except PhasescopeError as exc:
                self.error = str(exc)

    async def __aenter__(self) -> MetricsSampler:
        await self._scraper.__aenter__()
        self._t0 = now_ns()
        try:
            await self._scrape()
        except PhasescopeError as exc:
            self.error = str(exc)
            return self
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            with contextlib.suppress(PhasescopeError):
                await self._scrape()  # a final scrape so the run's window ends with the load
        await self._scraper.close()

    def summary(self) -> dict[str, Any] | None:
        """The whole run's summary (rates and quantiles from the first to the last scrape)."""
        if not self.available:
            return None
        out = self.run.summary()
        out["engine"] = self.run.engine
        out["window_s"] = self.run.span_s
        out["notes"] = self.run.notes()
        return out
