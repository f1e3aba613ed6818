"""How ``bench`` sends a workload: one :class:`Driver` per way of running, chosen once per run by :func:`driver_for`.

* :class:`SingleProcess` — the async runner in this process (:func:`phasescope.load.runner.run_load`);
* :class:`Workers` — ``--workers N`` processes (:mod:`phasescope.load.workers`);
* :class:`RayActors` — ``--ray`` actors (:mod:`phasescope.load.ray`);
* :class:`Conversations` — sessions of dependent turns (:mod:`phasescope.load.conversation`);
* :class:`Agentic` — agentic sessions with forked sub-agents, or a replayed agent trace (:mod:`phasescope.load.agentic`).

Every driver's :meth:`~Driver.run` takes one :class:`Drive` (the config, the workload, the schedule and
items, the target, where records go, the stop event, the /metrics recorder) and returns the
:class:`~phasescope.load.runner.RunResult`; every record goes to ``drive.sink`` as it completes. While
it runs, Ctrl-C sets the stop event (:func:`phasescope.signals.on_sigint`), so what finished is kept.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from phasescope.load.runner import RunResult, prewarm_count, run_load
from phasescope.load.schedule import Schedule
from phasescope.load.workload import WorkItem
from phasescope.signals import on_sigint


def say_nothing(_msg: str) -> None:
    """The status callback of a caller that wants none."""


@dataclass
class Drive:
    """One run (one trial) as a driver gets it."""

    cfg: Any
    workload: Any  # phasescope.load.datasets.Workload
    sched: Schedule
    items: list[WorkItem]
    target: Any
    out: Any  # the run's output (lifecycle.RunOutput, or a trial's view of it): .sink, .out_dir
    on_record: Callable[[Any], None] | None
    stop: threading.Event
    run_id: str
    recorder: Any  # the /metrics recorder (None: not scraped)
    run_salt: str | None
    status: Callable[[str], None] = say_nothing

    @property
    def sink(self) -> Any:
        return self.out.sink


class Driver(Protocol):
    name: ClassVar[str]

    def run(self, d: Drive) -> RunResult: ...


class _Paced:
    """Drivers that send the schedule's items (all but conversations): they say how many first."""

    name: ClassVar[str] = ""

    def run(self, d: Drive) -> RunResult:
        total, cfg = d.sched.total, d.cfg
        d.status(f"sending {'up to ' if cfg.duration_s else ''}{f'{total:,}' if total is not None else '∞'} requests")
        return self._run(d)

    def _run(self, d: Drive) -> RunResult:
        raise NotImplementedError


def _stop_watch(stop: threading.Event, astop: asyncio.Event) -> Any:
    """A task turning the caller's threading.Event into this loop's asyncio.Event."""

    async def watch() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.05)
        astop.set()

    return asyncio.get_running_loop().create_task(watch())


def _gate(recorder: Any) -> Callable[[], Any]:
    """The runner's start gate: start /metrics after the warm-ups (their tokens are not counted), then t0."""

    async def gate() -> int:
        from phasescope.measure.clock import now_ns

        if recorder is not None:
            await asyncio.get_running_loop().run_in_executor(None, recorder.start)
        t0 = now_ns()
        if recorder is not None:
            recorder.t0_ns = t0
        return t0

    return gate


class SingleProcess(_Paced):
    """The async runner in this process, on uvloop when installed (load.loop.loop_factory)."""

    name = "single"

    def _run(self, d: Drive) -> RunResult:
        from phasescope.load.loop import run_async
        from phasescope.load.routing import send_for

        cfg = d.cfg

        async def main() -> RunResult:
            loop = asyncio.get_running_loop()
            astop = asyncio.Event()
            watcher = _stop_watch(d.stop, astop)
            try:
                with on_sigint(lambda: (d.stop.set(), loop.call_soon_threadsafe(astop.set))):  # type: ignore[func-returns-value]
                    return await run_load(d.sched, d.items, d.target, send=send_for(d.target),
                                          max_concurrency=cfg.max_concurrency, writer=d.sink,
                                          on_record=d.on_record, stop=astop, run_id=d.run_id, start_gate=_gate(d.recorder),
                                          abort_after_errors=cfg.abort_after_errors,
                                          drain_timeout_s=cfg.drain_timeout_s, ignore_eos=cfg.ignore_eos,
                                          prewarm_connections=prewarm_count(d.sched, cfg.max_concurrency)
                                          if cfg.prewarm else 0)
            finally:
                watcher.cancel()

        return run_async(main())


class Workers(_Paced):
    """``--workers N``: each worker process keeps its own ``records/worker-<i>.jsonl`` and sends every
    record to this process, which writes it to the run's sink as it arrives (load/workers.py)."""

    name = "workers"

    def _run(self, d: Drive) -> RunResult:
        import tempfile

        from phasescope.load.routing import send_ref_for
        from phasescope.load.workers import run_workers

        cfg, recorder, out = d.cfg, d.recorder, d.out
        sub = getattr(out, "records_subdir", "records")  # a trial's workers keep files of their own
        rdir = (out.out_dir / sub) if out.out_dir is not None else Path(tempfile.mkdtemp(prefix="phasescope-bench-"))
        with on_sigint(d.stop.set):
            return run_workers(d.sched, d.items, d.target, n_workers=cfg.workers, records_dir=rdir, sink=d.sink,
                               on_start=(lambda: recorder.start()) if recorder is not None else None,
                               max_concurrency=cfg.max_concurrency, run_id=d.run_id, on_progress=d.on_record,  # type: ignore[arg-type]
                               send_ref=send_ref_for(d.target),
                               stop=d.stop, abort_after_errors=cfg.abort_after_errors,
                               drain_timeout_s=cfg.drain_timeout_s, ignore_eos=cfg.ignore_eos,
                               prewarm_connections=(-(-prewarm_count(d.sched, cfg.max_concurrency) // cfg.workers)
                                                    if cfg.prewarm else 0))


class RayActors(_Paced):
    """``--ray``: records reach the run's sink as the driver polls them from the actors; the /metrics
    timeline starts at t0 (driver clock). See :mod:`phasescope.load.ray`."""

    name = "ray"

    def _run(self, d: Drive) -> RunResult:
        from phasescope.load.ray import run_ray
        from phasescope.load.routing import send_ref_for

        cfg, recorder = d.cfg, d.recorder
        prewarm = (-(-prewarm_count(d.sched, cfg.max_concurrency) // cfg.ray_workers) if cfg.prewarm else 0)
        with on_sigint(d.stop.set):
            return run_ray(d.sched, d.items, d.target, n_actors=cfg.ray_workers, address=cfg.ray_address,
                           actor_cpus=cfg.ray_actor_cpus, max_concurrency=cfg.max_concurrency, run_id=d.run_id,
                           send_ref=send_ref_for(d.target), writer=d.sink, on_record=d.on_record,
                           on_start=(lambda t0: recorder.start(t0)) if recorder is not None else None,
                           on_status=d.status, stop=d.stop, abort_after_errors=cfg.abort_after_errors,
                           drain_timeout_s=cfg.drain_timeout_s, ignore_eos=cfg.ignore_eos,
                           prewarm_connections=prewarm)


class _Sessions:
    """A session workload in this process (conversations, agentic sessions): the workload builds the sessions
    through the server's tokenizer, then its runner runs them, every request's record going to the run's sink
    as it completes. Ctrl-C → a partial result. Subclasses name the runner and what the status line counts."""

    name: ClassVar[str] = ""

    def runner(self) -> Any:
        raise NotImplementedError

    def status(self, spec: Any, sessions: list[Any]) -> str:
        raise NotImplementedError

    def extra(self, maker: Any) -> dict[str, Any]:
        """Keywords only this runner takes."""
        return {}

    def run(self, d: Drive) -> RunResult:
        from phasescope.load.loop import run_boxed
        from phasescope.load.routing import send_for

        cfg, target, recorder = d.cfg, d.target, d.recorder
        spec = d.workload.spec()
        warm = d.items[: cfg.warmup]
        run_sessions = self.runner()

        async def main() -> Any:
            from phasescope.apis import new_session
            from phasescope.prompting import prompt_maker_for

            s = new_session()  # the tokenizer's session: open for the whole run (conversations count replies)
            try:
                maker = await prompt_maker_for(s, target)
                sessions = await d.workload.sessions(maker, d.run_salt)
                d.status(self.status(spec, sessions))
                astop = asyncio.Event()
                watcher = _stop_watch(d.stop, astop)
                try:
                    return await run_sessions(
                        sessions, spec, target, send=send_for(target), warmups=warm, writer=d.sink,
                        on_record=d.on_record, stop=astop, run_id=d.run_id, start_gate=_gate(recorder),
                        abort_after_errors=cfg.abort_after_errors, duration_s=cfg.duration_s,
                        ignore_eos=cfg.ignore_eos, prewarm_connections=min(spec.users, 64) if cfg.prewarm else 0,
                        drain_timeout_s=cfg.drain_timeout_s, **self.extra(maker))
                finally:
                    watcher.cancel()
            finally:
                await s.close()

        with on_sigint(d.stop.set):  # the watcher turns it into the loop's stop
            return run_boxed(main())


class Conversations(_Sessions):
    """``--dataset conversation``: sessions of dependent turns (:mod:`phasescope.load.conversation`)."""

    name: ClassVar[str] = "conversation"

    def runner(self) -> Any:
        from phasescope.load.conversation import run_sessions

        return run_sessions

    def status(self, spec: Any, sessions: list[Any]) -> str:
        turns = sum(len(sp.turns) for sp in sessions)
        return (f"running {len(sessions)} sessions ({turns} turns) for "
                + (f"{spec.users} users" if not spec.open_loop else f"{spec.session_rate:g} sessions/s"))

    def extra(self, maker: Any) -> dict[str, Any]:
        from phasescope.prompting import TokenizePromptMaker

        # each reply re-counted as the history resends it, where the server has /tokenize
        return {"count": maker.count_part if isinstance(maker, TokenizePromptMaker) else None}


class Agentic(_Sessions):
    """``--dataset agentic``: graphs of dependent chat calls, synthetic or a trace's, ``--users`` at a time
    (:mod:`phasescope.load.agentic`)."""

    name: ClassVar[str] = "agentic"

    def runner(self) -> Any:
        from phasescope.load.agentic import run_agentic

        return run_agentic

    def status(self, spec: Any, sessions: list[Any]) -> str:
        calls = sum(len(sp.calls) for sp in sessions)
        return f"running {len(sessions)} agentic sessions ({calls} calls), {spec.users} at a time"


#: driver name → driver
DRIVERS: dict[str, Driver] = {d.name: d for d in (SingleProcess(), Workers(), RayActors(), Conversations(), Agentic())}


def driver_for(cfg: Any, workload: Any) -> Driver:
    """The run's driver: ``--ray``, else the workload's own (conversations), else one process or ``--workers``."""
    if cfg.ray:
        return DRIVERS["ray"]
    if workload.driver:
        return DRIVERS[workload.driver]
    return DRIVERS["single" if cfg.workers == 1 else "workers"]
