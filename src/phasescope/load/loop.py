"""The event loop a load run runs on: uvloop's when installed, and the cyclic GC paused while it measures.

Both serve one purpose: nothing but the server's own lateness may delay the reading of a token event.
A full collection at 1,024 streams took 116 ms (issue 22's profile), a stall of the loop that stamps
every event; uvloop's loop trims the per-event overhead. Timestamps are ``perf_counter_ns`` either way.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any, Awaitable, Callable

__all__ = ["QuietGC", "loop_factory", "run_async", "run_boxed"]


class QuietGC:
    """Pause the cyclic GC from t0 to the end of a run: everything alive at t0 is frozen (never
    scanned again during the run), automatic collections are off, and :meth:`valve` — called by
    the health monitor every 10 ms — collects the young generation only when more than
    ``valve_objects`` tracked objects piled up since (a long run's cycles stay bounded). ``stop``
    restores the collector as it was."""

    def __init__(self, valve_objects: int = 1_000_000) -> None:
        self.valve_objects = valve_objects
        self.was_enabled: bool | None = None

    def start(self) -> None:
        if self.was_enabled is not None:
            return
        self.was_enabled = gc.isenabled()
        gc.freeze()
        gc.disable()

    def valve(self) -> None:
        if self.was_enabled is not None and gc.get_count()[0] > self.valve_objects:
            gc.collect(0)

    def stop(self) -> None:
        if self.was_enabled is None:
            return
        gc.unfreeze()
        if self.was_enabled:
            gc.enable()
        self.was_enabled = None


def uvloop_enabled() -> bool:
    """Do load runs use uvloop: installed (a dependency wherever it installs: CPython, not Windows)
    and ``PHASESCOPE_UVLOOP`` not ``0``? (Looked up, not imported.)"""
    import importlib.util
    import os

    return os.environ.get("PHASESCOPE_UVLOOP", "1") != "0" and importlib.util.find_spec("uvloop") is not None


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop a load run uses: uvloop's when :func:`uvloop_enabled` (imported only here),
    the stdlib's otherwise. Timestamps are the same ``perf_counter_ns`` either way."""
    if uvloop_enabled():
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop  # type: ignore[no-any-return]
    return asyncio.new_event_loop


def run_boxed(coro: Awaitable[Any], factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> Any:
    """``asyncio.run(coro)`` (on ``factory``'s loop), its result handed back through a box, not as
    the main task's result: when a run ends, ``asyncio.Runner.run`` compares and restores its SIGINT
    handler (a partial holding the main task), and on Python 3.11 each ``signal.getsignal`` /
    ``signal.signal`` turns that handler into an Enum, fails, and formats ``repr(task)`` for the
    error it discards — result included, i.e. every record of a load run: twice ~0.17 s after a
    4,096-request run here (py-spy: 5.5 % of a 2,048-stream bench's samples), seconds after 100,000."""
    box: list[Any] = []

    async def main() -> None:
        box.append(await coro)

    with asyncio.Runner(loop_factory=factory) as r:
        r.run(main())
    return box[0]


def run_async(coro: Awaitable[Any]) -> Any:
    """:func:`run_boxed` on :func:`loop_factory`'s loop (the entry point of every load run)."""
    return run_boxed(coro, loop_factory())
