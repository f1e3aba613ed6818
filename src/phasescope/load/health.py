"""How well the client kept up: the runner's self-watch and the warnings it turns into.

:class:`HealthMonitor` samples the event loop's lag every 10 ms during the measured phase (and works
the :class:`~phasescope.load.loop.QuietGC` valve); :class:`RunnerHealth` is what it found, with the
send lag and CPU share; :func:`health_warnings` says what happened, why it matters and what to change
(``client_saturated``, ``rate_not_reached``), in the spirit of hyperfine's warnings.

A lagging loop is the client's fault only when the client's own work explains it (:func:`lag_cause`):
a client at 2 % of a core whose loop lagged while other work took 74 % of the host waited for a CPU,
and "spread the load with --workers 2" would only add processes competing for the same cores. Then
the lag is reported as ``host_busy`` (with its fix, and the lag in its evidence); when the cores were
full of the server on this machine, as ``client_saturated`` whose fix is to separate their cores.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


from phasescope.load.loop import QuietGC
from phasescope.measure.clock import now_ns
from phasescope.measure.warnings import MeasurementWarning, warn

__all__ = ["HealthMonitor", "RunnerHealth", "health_warnings", "lag_cause", "LOOP_LAG_MEDIAN_MS",
           "LOOP_LAG_P99_MS", "SEND_LAG_MEDIAN_MS", "SEND_LAG_P99_MS"]


@dataclass
class RunnerHealth:
    """How well the client kept up. Milliseconds; ``cpu_percent`` of one core (process time / wall)."""

    loop_lag_ms_p50: float | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    cpu_percent: float | None = None
    send_lag_ms_p50: float | None = None
    send_lag_ms_p99: float | None = None
    send_lag_ms_max: float | None = None
    loop_samples: int = 0
    #: the wall seconds ``cpu_percent`` was measured over (None: not known, e.g. an older worker's report)
    wall_s: float | None = None
    #: how the client read its streams: ``raw`` (httptools, :mod:`phasescope.apis._fast`) or ``aiohttp``
    receive_path: str | None = None
    #: the event loop it ran on: ``uvloop`` or ``asyncio``
    event_loop: str | None = None

    @classmethod
    def merge(cls, parts: Sequence["RunnerHealth"]) -> "RunnerHealth":
        """Worst case over processes (each process is its own client)."""
        def mx(name: str) -> float | None:
            vals = [getattr(p, name) for p in parts if getattr(p, name) is not None]
            return max(vals) if vals else None
        return cls(**{n: mx(n) for n in ("loop_lag_ms_p50", "loop_lag_ms_p99", "loop_lag_ms_max", "cpu_percent",
                                          "send_lag_ms_p50", "send_lag_ms_p99", "send_lag_ms_max")},
                   loop_samples=sum(p.loop_samples for p in parts),
                   wall_s=min((p.wall_s for p in parts if p.wall_s is not None), default=None),
                   receive_path=",".join(sorted({p.receive_path for p in parts if p.receive_path})) or None,
                   event_loop=",".join(sorted({p.event_loop for p in parts if p.event_loop})) or None)


#: the selector rounds a timer's timeout up to whole milliseconds: this much of a sleep's overshoot is not lag
TIMER_ROUNDING_NS = 1_000_000


def _stamp(fut: "asyncio.Future[int]") -> None:
    if not fut.done():
        fut.set_result(now_ns())


class HealthMonitor:
    """Samples event-loop lag every 10 ms (see :meth:`_run`) and CPU use."""

    def __init__(self, interval_s: float = 0.01, quiet_gc: QuietGC | None = None) -> None:
        self.interval_s = interval_s
        self.quiet_gc = quiet_gc
        self.lags_ns: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0

    async def _run(self) -> None:
        """Each sample is the worse of two delays the loop put on work that was ready: how late the
        10 ms sleep woke, less the selector's rounding of its timeout up to a whole millisecond
        (epoll and libuv time out in ms, so an idle loop's sleep overshoots by up to 1 ms that
        delays no socket event), and how long a callback queued right after waking waited to run
        (the backlog of ready callbacks, which a token event waits behind)."""
        iv = int(self.interval_s * 1e9)
        loop = asyncio.get_running_loop()
        valve = self.quiet_gc.valve if self.quiet_gc is not None else None
        while True:
            t = now_ns()
            await asyncio.sleep(self.interval_s)
            woke = now_ns()
            ran = loop.create_future()
            loop.call_soon(_stamp, ran)
            queued = await ran - woke
            self.lags_ns.append(max(0, woke - t - iv - TIMER_ROUNDING_NS, queued))
            if valve is not None:
                valve()

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = now_ns()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, send_lags_ns: Sequence[int]) -> RunnerHealth:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        wall = (now_ns() - self._wall0) / 1e9
        cpu = time.process_time() - self._cpu0
        import numpy as np

        loop_mod = type(asyncio.get_running_loop()).__module__
        h = RunnerHealth(cpu_percent=100.0 * cpu / wall if wall > 0 else None, loop_samples=len(self.lags_ns),
                         wall_s=wall,
                         event_loop="uvloop" if loop_mod.startswith("uvloop") else "asyncio")
        if self.lags_ns:
            a = np.asarray(self.lags_ns, dtype=float) / 1e6
            h.loop_lag_ms_p50, h.loop_lag_ms_p99, h.loop_lag_ms_max = (
                float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max()))
        if send_lags_ns:
            a = np.asarray(send_lags_ns, dtype=float) / 1e6
            h.send_lag_ms_p50, h.send_lag_ms_p99, h.send_lag_ms_max = (
                float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max()))
        return h


#: ``client_saturated`` thresholds (issue 22: the client may add at most 1 ms to a typical event)
LOOP_LAG_MEDIAN_MS = 1.0
LOOP_LAG_P99_MS = 5.0
SEND_LAG_MEDIAN_MS = 1.0
SEND_LAG_P99_MS = 10.0
#: the shortest measured window a CPU share is evidence over. The share is process time ÷ wall time
#: of the measured phase, and that phase carries one-off client work (opening connections, building
#: the first requests, starting tasks) of some milliseconds whatever its length: over 10 ms that
#: alone reads as a whole core, over 1 s it is about 1 % of one, well inside the 85 % threshold's
#: margin. 1 s is also 100 of the monitor's 10 ms loop samples, the fewest that give its p99 a
#: meaning, and above the 15.6 ms tick some platforms count process time in.
MIN_CPU_WINDOW_S = 1.0
CPU_PERCENT_MAX = 85.0
#: below this share of one core the client's own work does not explain its loop or send lag
CLIENT_CPU_CAUSE_PERCENT = 50.0
#: the machine's cores count as full when they were this busy over the run (all work: server, client, others)
CORES_FULL_SHARE = 0.9


def lag_cause(h: RunnerHealth, host: Mapping[str, Any] | None) -> str:
    """Who made the client's loop (or sends) lag: ``client`` (its own CPU: at least
    :data:`CLIENT_CPU_CAUSE_PERCENT` of a core, or nothing else measured explains it), ``host`` (the client
    was mostly idle and other work made the run ``host_busy``), or ``cores_full`` (mostly idle, little other
    work, but the machine's cores were :data:`CORES_FULL_SHARE` busy with the server on this machine).
    Without a host reading, or a CPU share over too short a window, the client is blamed as before."""
    during = (host or {}).get("during") if isinstance(host, Mapping) and host.get("available") else None
    cpu = h.cpu_percent
    if not during or cpu is None or cpu >= CLIENT_CPU_CAUSE_PERCENT:
        return "client"
    if h.wall_s is not None and h.wall_s < MIN_CPU_WINDOW_S:
        return "client"  # a share over a blink is no evidence of idleness either
    from phasescope.measure.host import judge

    if judge(host):
        return "host"
    if host.get("server_local") and (during.get("machine_busy_share") or 0) >= CORES_FULL_SHARE:
        return "cores_full"
    return "client"


def _host_lag_warning(host: Mapping[str, Any], lags: str, h: RunnerHealth) -> MeasurementWarning:
    """host_busy (:func:`phasescope.measure.host.judge`) with the client lag it caused added."""
    from phasescope.measure.host import judge

    (w,) = judge(host)[:1]
    ev = dict(w.evidence)
    ev.update({"lag_cause": "host", "client_cpu_percent": h.cpu_percent,
               "client_loop_lag_ms_p50": h.loop_lag_ms_p50, "client_loop_lag_ms_p99": h.loop_lag_ms_p99,
               "client_send_lag_ms_p50": h.send_lag_ms_p50, "client_send_lag_ms_p99": h.send_lag_ms_p99})
    return warn("host_busy", "client_lag", ev, contention=w.message, lags=lags, cpu_percent=h.cpu_percent)


def missing_fast_parts() -> list[str]:
    """What of the fast client this client runs without: ``uvloop`` (the event loop) and ``httptools``
    (the raw receive path, :mod:`phasescope.apis._fast`) — core dependencies where they install, the
    ``[fast]`` extra's two — installed and not turned off by ``PHASESCOPE_UVLOOP=0`` /
    ``PHASESCOPE_HTTPTOOLS=0``, the same switches the run obeys."""
    from phasescope.apis import raw_path_enabled
    from phasescope.load.loop import uvloop_enabled

    return [name for name, on in (("uvloop", uvloop_enabled()), ("httptools", raw_path_enabled())) if not on]


def health_warnings(h: RunnerHealth, *, workers: int = 1, achieved_rate: float | None = None,
                    requested_rate: float | None = None, burst: bool = False,
                    completed: int | None = None,
                    host: Mapping[str, Any] | None = None) -> list[MeasurementWarning]:
    """Hyperfine-style warnings: what happened, why it matters, what to change. ``burst``: every request
    was scheduled at t0 with no concurrency cap (no --request-rate), so send lag is the time the client
    took to put the burst on the wire, not a schedule it missed. ``completed``: the requests answered
    (None: not known); the CPU share warns only with one, over at least ``MIN_CPU_WINDOW_S``. ``host``: the
    run's ``host`` section (:mod:`phasescope.measure.host`); with it, loop and send lag the client's own CPU
    does not explain are said as ``host_busy`` or as full cores (:func:`lag_cause`), never as --workers.
    The caller adds :func:`~phasescope.measure.host.judge`'s ``host_busy`` only when this list has none."""
    out: list[MeasurementWarning] = []
    cause = lag_cause(h, host)
    host_lags: list[str] = []  # lag the host caused, said once in its host_busy warning
    during = ((host or {}).get("during") or {}) if cause == "cores_full" else {}
    full = (f" while the client used only {h.cpu_percent or 0.0:.0f} % of a core: this machine's cores were "
            f"{(during.get('machine_busy_share') or 0) * 100:.0f} % busy"
            + (f" (the server on it took {during['server_cpu_share'] * 100:.0f} % of them)"
               if isinstance(during.get("server_cpu_share"), (int, float)) else "")
            + ", so the client waited for a core"
            if cause == "cores_full" else "")
    cores_full = "_cores_full" if cause == "cores_full" else ""  # the sentence whose fix frees a core
    more = f"--workers {max(2, workers * 2)}"
    missing = missing_fast_parts()
    if missing:  # a saturated client without its leaner loop or receive path: say how to get them first
        more = (f"{more} (or run with {' and '.join(missing)}: pip install 'phasescope[fast]', less client CPU "
                f"per streamed event)")
    # The client itself adds more than 1 ms to a typical event (median loop lag: a ready event waits
    # that long for the loop) or its tail stalls past 5 ms: either way its timestamps carry its own delay.
    p50, p99 = h.loop_lag_ms_p50, h.loop_lag_ms_p99
    if (p50 is not None and p50 > LOOP_LAG_MEDIAN_MS) or (p99 is not None and p99 > LOOP_LAG_P99_MS):
        lag = (f"The client's event loop lagged {p50 or 0.0:.1f} ms at the median and {p99 or 0.0:.1f} ms at p99 "
               f"(max {h.loop_lag_ms_max or 0.0:.1f} ms)")
        if cause == "host":
            host_lags.append(lag)
        else:
            out.append(warn(
                "client_saturated", "loop_lag" + cores_full,
                {"loop_lag_ms_p50": p50, "loop_lag_ms_p99": p99, "loop_lag_ms_max": h.loop_lag_ms_max,
                 "threshold_ms": LOOP_LAG_P99_MS, "threshold_median_ms": LOOP_LAG_MEDIAN_MS,
                 "cpu_percent": h.cpu_percent, "lag_cause": cause},
                p50=p50 or 0.0, p99=p99 or 0.0, max=h.loop_lag_ms_max or 0.0, full=full, more=more))
    # A CPU share is evidence only over a window long enough to hold it (MIN_CPU_WINDOW_S) and only
    # when some request was answered: with none, there is no latency it could have skewed.
    cpu_measured = (h.wall_s is None or h.wall_s >= MIN_CPU_WINDOW_S) and completed != 0
    if cpu_measured and h.cpu_percent is not None and h.cpu_percent > CPU_PERCENT_MAX:
        out.append(warn("client_saturated", "cpu",
                        {"cpu_percent": h.cpu_percent, "threshold_percent": CPU_PERCENT_MAX, "wall_s": h.wall_s},
                        cpu_percent=h.cpu_percent, more=more))
    sp50, sp99 = h.send_lag_ms_p50, h.send_lag_ms_p99
    if (sp50 is not None and sp50 > SEND_LAG_MEDIAN_MS) or (sp99 is not None and sp99 > SEND_LAG_P99_MS):
        if cause == "host":
            host_lags.append(f"requests left {sp50 or 0.0:.1f} ms late at the median and {sp99 or 0.0:.1f} ms at "
                             "p99" + (" (after t0, sent all at once)" if burst else " versus their schedule"))
        else:
            out.append(warn(
                "client_saturated", ("send_burst" if burst else "send_late") + cores_full,
                {"send_lag_ms_p50": sp50, "send_lag_ms_p99": sp99, "send_lag_ms_max": h.send_lag_ms_max,
                 "threshold_ms": SEND_LAG_P99_MS, "threshold_median_ms": SEND_LAG_MEDIAN_MS,
                 "cpu_percent": h.cpu_percent, "lag_cause": cause},
                p50=sp50 or 0.0, p99=sp99 or 0.0, max=h.send_lag_ms_max or 0.0, full=full, more=more))
    if host_lags and host is not None:
        out.append(_host_lag_warning(host, "; ".join(host_lags), h))
    if (achieved_rate is not None and requested_rate is not None and math.isfinite(requested_rate)
            and requested_rate > 0 and achieved_rate < 0.9 * requested_rate):
        out.append(warn("rate_not_reached", "send_rate", {"achieved_rate": achieved_rate, "requested_rate": requested_rate},
                        achieved=achieved_rate, requested=requested_rate))
    return out
