"""``bench --ray [ADDRESS]``: one arrival schedule, partitioned over Ray actors, records merged exactly.

Why Ray: past one machine a load generator needs a distributed runtime; Ray is what LLMPerf uses,
runs on a laptop as well as a cluster, and schedules actors by declared resources. Ray is an
optional extra (``pip install 'phasescope[ray]'``) imported only here, lazily.

Design (the driver is the process running ``phasescope bench``):

1. The driver computes the schedule once (:func:`phasescope.load.schedule.build_schedule`) and the
   workload, then splits the schedule with :meth:`Schedule.partition` (request ``i`` → actor
   ``i mod N``, offsets unchanged, so the union of all sends *is* the schedule) and a
   ``--max-concurrency`` cap with :func:`phasescope.load.workers.split_concurrency`.
2. ``N`` actors (:class:`LoadActor`, ``num_cpus=--ray-actor-cpus`` each, ``SPREAD`` over nodes) each
   run the ordinary async runner (:func:`phasescope.load.runner.run_load`) on their own event loop
   in their own thread, with their own aiohttp session — exactly the single-process code path.
3. Each actor queues every record the moment its request completes; the driver keeps one
   ``poll()`` call in flight per actor (a batch of records, at most ``POLL_S`` old), writes each
   record to the run's JSONL and the run store as it arrives, and feeds the live progress bar.
4. Merge: the measured records of all actors, sorted by (aligned) start time. Nothing is
   recomputed per actor: the summary is :func:`phasescope.load.summary.summarize` of the merged
   records, as for one process.

Clocks (stated, because timing is the product):

* Every duration (TTFT, ITL, E2EL, queue, send lag) is a difference of two readings of **one
  actor's** ``perf_counter_ns`` — never across processes or machines. Records keep those raw
  readings unchanged.
* Cross-actor alignment (start together, one timeline, the run's duration and peaks) uses a
  **measured offset** per actor: the driver pings the actor ``k`` times; with driver readings
  ``a`` (send) and ``c`` (reply) around the actor's reading ``b``,
  ``offset = b − (a + c)/2`` (actor clock − driver clock) from the ping with the smallest round
  trip, and the uncertainty is ``(c − a)/2`` of that ping (the actor read its clock somewhere in
  ``[a, c]``). Measured before the run and again after it (``drift_ns``).
* Start: after every actor finished its warm-ups the driver picks ``t0`` on its own clock
  (``now + START_LEAD_S``) and sends each actor ``t0 + offset``; so all actors share one t0 to
  within the offset uncertainty.
* ``wall_start_ns`` of a Ray record is placed on the **driver's** wall clock through the offset
  (``driver_wall_t0 + (t_start − offset − driver_mono_t0)``); the actor's own wall reading is
  kept in ``tags["actor_wall_start_ns"]``. Summaries across actors use ``wall_start_ns``
  (:func:`summarize`), so no NTP agreement between machines is assumed.

Honesty at scale: each actor reports its own :class:`~phasescope.load.runner.RunnerHealth`
(event-loop lag, CPU of its process, send lag = achieved vs scheduled send time); the driver turns
each into warnings naming the actor, and while the run goes it watches every actor's rolling send
lag and says so the moment one falls behind. An actor that dies (node lost, OOM, ``ray.kill``) is
reported: each request it owned that never completed gets a record with ``ok=False`` and
``error_kind="worker_lost"`` (``tags["lost"]`` = ``"in_flight"`` or ``"unsent"``), and the run is
marked partial — never silently dropped. (For an endless closed loop only the requests in flight
at its last report are known.)
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from phasescope.apis.base import Target
from phasescope.errors import InputError, PhasescopeError
from phasescope.load.bench import _Fanout, _install_sigint, _restore_sigint
from phasescope.measure.warnings import MeasurementWarning
from phasescope.load.runner import BackgroundWriter, RunnerHealth, RunResult, health_warnings, run_load
from phasescope.load.schedule import Schedule, ScheduledRequest
from phasescope.load.workers import _result_meta, resolve_send, split_concurrency
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import RecordWriter, RequestRecord

POLL_S = 0.1  #: longest an actor holds a completed record before the driver has it
START_LEAD_S = 0.2  #: t0 is this far ahead of the driver's "go", so every actor hears it in time
PING_SAMPLES = 15
LOST = "worker_lost"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
INSTALL_HINT = "--ray needs Ray: pip install 'phasescope[ray]'"


class RayError(PhasescopeError):
    """Ray could not run the load (cluster unreachable, no room for the actors, actor start failed)."""

    exit_code = 3


def import_ray(local: bool = False) -> Any:
    """``import ray`` or one clear line saying how to install it.

    ``local``: this process will start a loopback cluster. Ray rewrites ``127.0.0.1`` to the
    machine's routable address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before Ray is
    imported (then GCS, raylet and workers all bind 127.0.0.1; see ``ray._private.services``)."""
    if local and "ray" not in __import__("sys").modules:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise InputError(INSTALL_HINT) from None
    return ray


# ------------------------------------------------------------------------------------------------
# the actor (a plain class; ray.remote() wraps it at run time so importing this module needs no Ray)


class _QueueSink:
    """The runner's record writer inside an actor: hands every record (warm-ups too) to the queue."""

    def __init__(self, q: "queue.SimpleQueue[RequestRecord]") -> None:
        self.q = q

    def write(self, rec: RequestRecord) -> None:
        self.q.put(rec)


class LoadActor:
    """One async runner in a Ray worker process. Methods are called by the driver (threaded actor)."""

    def __init__(self, idx: int, name: str) -> None:
        self.idx = idx
        self.name = name
        self._q: "queue.SimpleQueue[RequestRecord]" = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._astop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._go = threading.Event()
        self._stop_req = threading.Event()
        self._t0: int | None = None
        self._thread: threading.Thread | None = None
        self._meta: dict[str, Any] | None = None
        self._error: str | None = None
        self._finished = threading.Event()
        self._in_flight: set[int] = set()
        self._sent = 0

    def ping(self) -> int:
        return now_ns()

    def info(self) -> dict[str, Any]:
        import platform

        import phasescope

        try:
            import ray

            ip = ray.util.get_node_ip_address()
            node_id = ray.get_runtime_context().get_node_id()
            ray_version = ray.__version__
        except Exception:  # pragma: no cover - inside an actor ray is importable
            ip, node_id, ray_version = None, None, None
        return {"name": self.name, "node_ip": ip, "node_id": node_id, "hostname": socket.gethostname(), "pid": os.getpid(),
                "phasescope": phasescope.__version__, "ray": ray_version, "python": platform.python_version(),
                "cpu_count": os.cpu_count()}

    def start(self, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None, run_id: str,
              send_ref: str | None, kw: dict[str, Any]) -> None:
        self._thread = threading.Thread(target=self._run, args=(part, items, target, cap, run_id, send_ref, kw),
                                        name=f"phasescope-{self.name}", daemon=True)
        self._thread.start()

    def _run(self, *args: Any) -> None:
        try:
            self._meta = asyncio.run(self._main(*args))
        except BaseException as exc:  # reported through poll(), never lost
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._ready.set()
            self._finished.set()

    async def _main(self, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None, run_id: str,
                    send_ref: str | None, kw: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._astop = asyncio.Event()
        if self._stop_req.is_set():
            self._astop.set()
        base = resolve_send(send_ref, target)

        async def tracked(session: Any, tgt: Target, req: Any) -> RequestRecord:
            idx = (req.tags or {}).get("index")
            measured = idx is not None and not str(req.id or "").endswith(f"-w{idx}")
            if measured:
                self._in_flight.add(int(idx))
                self._sent += 1
            try:
                return await base(session, tgt, req)  # type: ignore[no-any-return]
            finally:
                if measured:
                    self._in_flight.discard(int(idx))

        async def gate() -> int:
            self._ready.set()
            while not await loop.run_in_executor(None, self._go.wait, 0.2):
                pass
            return self._t0 if self._t0 is not None else now_ns()

        res = await run_load(part, items, target, send=tracked, max_concurrency=cap,
                             writer=_QueueSink(self._q), stop=self._astop,  # type: ignore[arg-type]
                             worker=self.name, run_id=run_id, start_gate=gate, **kw)
        return _result_meta(res) | {"t0_ns": res.t0_ns}

    def go(self, t0_ns: int) -> None:
        self._t0 = int(t0_ns)
        self._go.set()

    def stop(self) -> None:
        self._stop_req.set()
        self._go.set()
        if self._loop is not None and self._astop is not None:
            try:
                self._loop.call_soon_threadsafe(self._astop.set)
            except RuntimeError:  # loop already closed
                pass

    def poll(self, timeout_s: float = POLL_S, max_batch: int = 2000) -> dict[str, Any]:
        """Records completed since the last poll (waits up to ``timeout_s`` for the first one).
        ``done`` is the run's metadata once the runner returned and every record was handed over."""
        recs: list[RequestRecord] = []
        finished_before = self._finished.is_set()
        try:
            recs.append(self._q.get(timeout=timeout_s))
        except queue.Empty:
            pass
        while len(recs) < max_batch:
            try:
                recs.append(self._q.get_nowait())
            except queue.Empty:
                break
        done = finished_before and self._q.empty() and len(recs) < max_batch
        return {"records": recs, "ready": self._ready.is_set(), "in_flight": sorted(self._in_flight),
                "sent": self._sent, "done": done, "meta": self._meta if done else None,
                "error": self._error if done else None}


# ------------------------------------------------------------------------------------------------
# the driver


@dataclass
class ClockOffset:
    """Actor clock − driver clock (ns), from the ping with the smallest round trip."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_offset(ray: Any, actor: Any, samples: int = PING_SAMPLES) -> ClockOffset:
    """NTP-style midpoint estimate (module docstring): ``b − (a + c)/2``, ± ``(c − a)/2``."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        a = now_ns()
        b = ray.get(actor.ping.remote())
        c = now_ns()
        if best is None or c - a < best[0]:
            best = (c - a, b - (a + c) // 2)
    assert best is not None
    return ClockOffset(offset_ns=best[1], uncertainty_ns=best[0] // 2, rtt_ns=best[0], samples=samples)


@dataclass
class ActorState:
    idx: int
    name: str
    handle: Any
    part: Schedule
    info: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    clock_end: ClockOffset | None = None
    ref: Any = None
    ready: bool = False
    done: bool = False
    dead: str | None = None
    died_at_ns: int | None = None  # driver clock
    meta: dict[str, Any] | None = None
    error: str | None = None
    received: set[int] = field(default_factory=set)
    n_received: int = 0
    in_flight: list[int] = field(default_factory=list)
    lost: list[RequestRecord] = field(default_factory=list)
    lag_window: list[float] = field(default_factory=list)
    lag_warned: bool = False

    @property
    def off(self) -> int:
        return self.clock.offset_ns if self.clock is not None else 0


@dataclass
class RayRunResult(RunResult):
    """A :class:`RunResult` plus what the Ray layer knows (``ray`` → ``summary["ray"]``)."""

    ray: dict[str, Any] = field(default_factory=dict)
    actor_warnings: list[MeasurementWarning] = field(default_factory=list)


def _connect(ray: Any, address: str | None, cpus_needed: float) -> tuple[bool, str]:
    """Use a running Ray connection, join ``address``, or start a loopback cluster for this run.
    Returns (started_here, where)."""
    if ray.is_initialized():
        return False, "existing connection"
    quiet = dict(logging_level=logging.ERROR, log_to_driver=False, configure_logging=True)
    if address is None or address == "local":
        ncpu = max(os.cpu_count() or 1, int(math.ceil(cpus_needed)))
        try:
            ray.init(address="local", num_cpus=ncpu, include_dashboard=False, _node_ip_address="127.0.0.1", **quiet)
        except Exception as exc:
            raise RayError(f"could not start a local Ray cluster: {type(exc).__name__}: {exc}") from None
        return True, "local (127.0.0.1)"
    try:
        ray.init(address=address, **quiet)
    except Exception as exc:
        raise RayError(f"could not connect to the Ray cluster at {address}: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    return False, address


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((ln.strip() for ln in text if ln.strip()), "")
    return f"{type(exc).__name__}: {first}"[:300]


def run_ray(
    schedule: Schedule,
    items: Sequence[WorkItem],
    target: Target,
    *,
    n_actors: int = 2,
    address: str | None = None,
    actor_cpus: float = 1.0,
    max_concurrency: int | None = None,
    run_id: str = "run",
    send_ref: str | None = None,
    writer: Any = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_status: Callable[[str], None] | None = None,
    on_actors: Callable[[list[Any]], None] | None = None,
    stop: threading.Event | None = None,
    ready_timeout_s: float = 120.0,
    lag_warn_ms: float = 10.0,
    **kw: Any,
) -> RayRunResult:
    """Run ``schedule`` over ``n_actors`` Ray actors; blocks until all finish, die or ``stop``.

    ``writer``: gets every record (warm-ups included) as it arrives, on a background thread
    (``write(rec)``). ``on_record``: every measured record, on the driver thread (progress).
    ``on_start(t0_ns)``: called with t0 on the driver's clock when the measured part starts.
    ``on_actors(handles)``: the actor handles once created (tests use it to kill one).
    ``kw`` goes to :func:`run_load` (``abort_after_errors``, ``drain_timeout_s``, ``ignore_eos``,
    ``extra_body``).
    """
    if n_actors < 1:
        raise InputError("--ray-workers must be at least 1")
    if not actor_cpus > 0:
        raise InputError("--ray-actor-cpus must be positive")
    ray = import_ray(local=address is None or address == "local")
    status = on_status or (lambda s: None)
    stop = stop or threading.Event()
    caps = split_concurrency(max_concurrency, n_actors)
    parts = schedule.partition(n_actors)
    started, where = _connect(ray, address, n_actors * actor_cpus)
    bw = BackgroundWriter(writer)
    actors: list[ActorState] = []
    d_mono0, d_wall0 = now_ns(), wall_ns()
    t0_d: int | None = None
    res = RayRunResult(worker=None)
    try:
        Remote = ray.remote(LoadActor)
        token = secrets.token_hex(3)
        for i in range(n_actors):
            name = f"a{i}"
            h = Remote.options(num_cpus=actor_cpus, max_concurrency=4, max_restarts=0,
                               name=f"phasescope-{run_id}-{name}-{token}", scheduling_strategy="SPREAD").remote(i, name)
            actors.append(ActorState(i, name, h, parts[i]))
        if on_actors is not None:
            on_actors([a.handle for a in actors])
        status(f"starting {n_actors} Ray actor(s) on {where}")
        try:
            infos = ray.get([a.handle.info.remote() for a in actors], timeout=ready_timeout_s)
        except ray.exceptions.GetTimeoutError:
            total = ray.cluster_resources().get("CPU", 0)
            raise RayError(f"Ray could not place {n_actors} actor(s) with {actor_cpus:g} CPU each within "
                           f"{ready_timeout_s:g} s (the cluster has {total:g} CPUs); lower --ray-workers or "
                           "--ray-actor-cpus") from None
        except ray.exceptions.RayError as exc:
            raise RayError(f"a Ray actor could not start ({_short(exc)}); every node needs "
                           f"pip install 'phasescope[ray]=={_version()}'") from None
        warn_versions = set()
        try:  # the address each node registered with (the actor's own guess can be another interface)
            node_ips = {n.get("NodeID"): n.get("NodeManagerAddress") for n in ray.nodes()}
        except Exception:
            node_ips = {}
        for a, info in zip(actors, infos):
            a.info = info
            if node_ips.get(info.get("node_id")):
                info["node_ip"] = node_ips[info["node_id"]]
            if info.get("phasescope") != _version():
                warn_versions.add((a.name, info.get("node_ip"), info.get("phasescope")))
        res.actor_warnings.extend(MeasurementWarning(
            "version_mismatch", f"actor {name} on {ip} runs phasescope {ver} but the driver runs {_version()}",
            {"actor": name, "node_ip": ip, "actor_version": ver, "driver_version": _version()},
            "install the same phasescope version on every node") for name, ip, ver in sorted(warn_versions, key=str))
        for a in actors:
            a.clock = measure_offset(ray, a.handle)
        items_ref = ray.put(list(items))
        for a in actors:
            a.handle.start.remote(a.part, items_ref, target, caps[a.idx], f"{run_id}-{a.name}", send_ref, kw)
            a.ref = a.handle.poll.remote()
        status("warming up" if schedule.warmups else "starting")
        ready_deadline = time.monotonic() + ready_timeout_s
        stop_sent = False
        by_ref: dict[Any, ActorState] = {}
        while True:
            live = [a for a in actors if not a.done and a.dead is None]
            if not live:
                break
            if stop.is_set() and not stop_sent:
                for a in live:
                    a.handle.stop.remote()
                stop_sent = True
            if t0_d is None and (all(a.ready or a.done or a.dead for a in actors) or time.monotonic() > ready_deadline):
                t0_d = now_ns() + int(START_LEAD_S * 1e9)
                for a in live:
                    a.handle.go.remote(t0_d + a.off)
                if on_start is not None:
                    on_start(t0_d)
                status(f"sending over {len(live)} actor(s)")
            by_ref = {a.ref: a for a in live}
            done_refs, _ = ray.wait(list(by_ref), num_returns=1, timeout=0.05)
            for ref in done_refs:
                a = by_ref[ref]
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    a.dead = _short(exc)
                    a.died_at_ns = now_ns()
                    status(f"Ray actor {a.name} died: {a.dead}")
                    continue
                a.ready = a.ready or bool(out["ready"])
                a.in_flight = list(out["in_flight"])
                for rec in out["records"]:
                    _align(rec, a, d_mono0, d_wall0)
                    if (rec.tags or {}).get("warmup"):
                        res.warmup_records.append(rec)
                    else:
                        res.records.append(rec)
                        idx = (rec.tags or {}).get("index")
                        if idx is not None:
                            a.received.add(int(idx))
                        a.n_received += 1
                        _watch_lag(a, rec, lag_warn_ms, status)
                    bw.put(rec)
                    if on_record is not None and not (rec.tags or {}).get("warmup"):
                        on_record(rec)
                if out["done"]:
                    a.done = True
                    a.meta = out["meta"]
                    a.error = out["error"]
                    if a.error:
                        status(f"Ray actor {a.name} failed: {a.error}")
                else:
                    a.ref = a.handle.poll.remote()
        # actors that died: their unfinished requests become worker_lost records
        for a in actors:
            if a.dead is None:
                continue
            a.lost = _lost_records(a, schedule, target, run_id, t0_d, d_mono0, d_wall0)
            for rec in a.lost:
                res.records.append(rec)
                bw.put(rec)
                if on_record is not None:
                    on_record(rec)
        for a in actors:  # clock drift over the run (live actors only)
            if a.dead is None:
                try:
                    a.clock_end = measure_offset(ray, a.handle, samples=5)
                except ray.exceptions.RayError:
                    pass
    finally:
        bw.close()
        for a in actors:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:
                pass
        if started:
            ray.shutdown()
    return _merge(res, actors, schedule, t0_d, d_mono0, d_wall0, where, started, actor_cpus, stop)


def _version() -> str:
    import phasescope

    return phasescope.__version__


def _align(rec: RequestRecord, a: ActorState, d_mono0: int, d_wall0: int) -> None:
    """Place the record on the driver's wall clock through the measured offset (module docstring)."""
    rec.tags = dict(rec.tags or {})
    rec.tags["actor_wall_start_ns"] = rec.wall_start_ns
    rec.wall_start_ns = d_wall0 + (rec.t_start_ns - a.off - d_mono0)
    if rec.worker is None:
        rec.worker = a.name


def _watch_lag(a: ActorState, rec: RequestRecord, lag_warn_ms: float, status: Callable[[str], None]) -> None:
    """Live saturation check: rolling p90 send lag (start − max(scheduled, slot)) over 100 records."""
    slot = (rec.tags or {}).get("t_slot_ns")
    if rec.t_scheduled_ns is None or a.lag_warned:
        return
    ref = max(rec.t_scheduled_ns, int(slot) if slot is not None else rec.t_scheduled_ns)
    a.lag_window.append(max(0, rec.t_start_ns - ref) / 1e6)
    if len(a.lag_window) > 100:
        del a.lag_window[0]
    if len(a.lag_window) >= 50:
        p90 = sorted(a.lag_window)[int(0.9 * (len(a.lag_window) - 1))]
        if p90 > lag_warn_ms:
            a.lag_warned = True
            status(f"warning: Ray actor {a.name} is sending {p90:.1f} ms late at p90: it is saturated "
                   "(add --ray-workers or lower the load)")


def _lost_records(a: ActorState, schedule: Schedule, target: Target, run_id: str, t0_d: int | None,
                  d_mono0: int, d_wall0: int) -> list[RequestRecord]:
    """One ``worker_lost`` record per request the dead actor owned and never returned."""
    died_d = a.died_at_ns or now_ns()
    died_a = died_d + a.off
    if schedule.repeat:
        owned: list[ScheduledRequest] = [ScheduledRequest(i, 0.0, 0) for i in a.in_flight if i not in a.received]
    else:
        owned = [r for r in a.part.requests if r.index not in a.received]
    in_flight = set(a.in_flight)
    out = []
    for sr in owned:
        sched_a = (t0_d + a.off + int(sr.offset_s * 1e9)) if t0_d is not None else None
        start_a = min(sched_a, died_a) if sched_a is not None else died_a
        kind = "in_flight" if sr.index in in_flight else "unsent"
        rec = RequestRecord(
            id=f"{run_id}-{a.name}-{sr.index}", api=target.api, target=target.display_url, model=target.model,
            t_scheduled_ns=sched_a, t_start_ns=start_a, wall_start_ns=d_wall0 + (start_a - a.off - d_mono0),
            ok=False, error_kind=LOST, worker=a.name,
            error_message=(f"Ray actor {a.name} (node {a.info.get('node_ip')}, pid {a.info.get('pid')}) died before "
                           f"this request completed ({'it was in flight' if kind == 'in_flight' else 'not sent yet'}): "
                           f"{a.dead}"),
            tags={"index": sr.index, "item": sr.item, "lost": kind},
        )
        out.append(rec)
    return out


def _merge(res: RayRunResult, actors: list[ActorState], schedule: Schedule, t0_d: int | None, d_mono0: int,
           d_wall0: int, where: str, started: bool, actor_cpus: float, stop: threading.Event) -> RayRunResult:
    res.records.sort(key=lambda r: (r.wall_start_ns, (r.tags or {}).get("index", 0)))
    res.warmup_records.sort(key=lambda r: r.wall_start_ns)
    live = [a for a in actors if a.meta]
    if len(actors) == 1 and live:
        res.t0_ns = int(live[0].meta["t0_ns"])  # type: ignore[index]  # one actor: its own clock
    elif t0_d is not None:
        res.t0_ns = t0_d  # driver clock (summaries across actors use wall_start_ns)
    res.wall_t0_ns = d_wall0 + (t0_d - d_mono0) if t0_d is not None else 0
    healths = []
    rows = []
    problems = []
    for a in actors:
        m = a.meta or {}
        h = RunnerHealth(**m["health"]) if m.get("health") else None
        if h is not None:
            healths.append(h)
            for w in health_warnings(h, workers=len(actors)):
                res.actor_warnings.append(MeasurementWarning(
                    w.kind, f"Ray actor {a.name} ({a.info.get('node_ip')}): {w.message}", w.evidence, w.fix))
        res.scheduled += int(m.get("scheduled", 0))
        res.sent += int(m.get("sent", 0))
        res.cancelled += int(m.get("cancelled", 0))
        res.aborted = res.aborted or m.get("aborted")
        res.interrupted = res.interrupted or bool(m.get("interrupted"))
        res.hit_duration = res.hit_duration or bool(m.get("hit_duration"))
        n_lost = len(a.lost)
        if a.dead is not None:
            n_inf = sum(1 for r in a.lost if r.tags.get("lost") == "in_flight")
            problems.append(f"Ray actor {a.name} (node {a.info.get('node_ip')}) died ({a.dead}); its {n_lost} "
                            f"unfinished request(s) are recorded as {LOST} ({n_inf} in flight, {n_lost - n_inf} not sent)")
        elif a.error:
            problems.append(f"Ray actor {a.name} failed: {a.error}")
        drift = (a.clock_end.offset_ns - a.clock.offset_ns) if (a.clock and a.clock_end) else None
        rows.append({
            "name": a.name, "node_ip": a.info.get("node_ip"), "hostname": a.info.get("hostname"),
            "pid": a.info.get("pid"), "phasescope": a.info.get("phasescope"), "cpus": actor_cpus,
            "status": "died" if a.dead is not None else ("failed" if a.error else "ok"),
            "died_reason": a.dead or a.error,
            "requests_owned": None if schedule.repeat else len(a.part.requests),
            "records_returned": a.n_received, "lost": n_lost,
            "sent": m.get("sent"), "cancelled": m.get("cancelled"),
            "health": asdict(h) if h is not None else None,
            "clock": {**(a.clock.to_dict() if a.clock else {}), "drift_ns": drift},
        })
    res.health = RunnerHealth.merge(healths) if healths else RunnerHealth()
    if problems:
        res.aborted = "; ".join(problems) if res.aborted is None else res.aborted + "; " + "; ".join(problems)
    if stop.is_set() and res.aborted is None:
        res.interrupted = True
    unc = max((a.clock.uncertainty_ns for a in actors if a.clock), default=None)
    res.ray = {
        "cluster": where, "cluster_started_here": started, "actors": rows, "n_actors": len(actors),
        "clock_alignment_uncertainty_ms": None if unc is None else unc / 1e6,
        "clock_note": ("durations are measured on one actor's monotonic clock; actors are aligned to the driver's "
                       "clock by a measured ping offset (± clock_alignment_uncertainty_ms)"),
    }
    if not res.records and not res.warmup_records and problems:
        raise RayError("no Ray actor returned a record: " + "; ".join(problems))
    return res


def add_ray_summary(summary: dict[str, Any], res: RunResult) -> None:
    """Put the Ray section and the per-actor warnings into a bench summary."""
    if not isinstance(res, RayRunResult):
        summary.setdefault("ray", None)
        return
    summary["ray"] = res.ray
    summary["workers"] = res.ray.get("n_actors", summary.get("workers"))
    from phasescope.measure.warnings import to_json

    summary["warnings"] = to_json(list(summary.get("warnings") or []) + res.actor_warnings)


def run_bench_ray(cfg: Any, sched: Schedule, items: list[WorkItem], target: Target, out_dir: Any, recording: Any,
                  on_record: Any, stop: threading.Event, run_id: str, recorder: Any,
                  status: Callable[[str], None] | None = None) -> RayRunResult:
    """:func:`phasescope.load.bench.run_bench`'s Ray branch: records to ``out_dir/records.jsonl`` and the
    run store as they arrive, /metrics timeline started at t0 (driver clock)."""
    from phasescope.load.routing import send_ref_for

    sinks: list[Any] = []
    file_writer = RecordWriter(out_dir / "records.jsonl") if out_dir is not None else None
    if file_writer is not None:
        sinks.append(file_writer)
    if recording is not None:
        sinks.append(recording)
    extra: dict[str, Any] = {}
    if getattr(cfg, "prewarm", False):  # the runner's connection pre-warm, when it has one: split over actors
        import inspect

        from phasescope.load import runner as _runner

        if "prewarm_connections" in inspect.signature(run_load).parameters and hasattr(_runner, "prewarm_count"):
            extra["prewarm_connections"] = -(-_runner.prewarm_count(sched, cfg.max_concurrency) // cfg.ray_workers)
    prev = _install_sigint(stop.set)
    try:
        return run_ray(sched, items, target, n_actors=cfg.ray_workers, address=cfg.ray_address,
                       actor_cpus=cfg.ray_actor_cpus, max_concurrency=cfg.max_concurrency, run_id=run_id,
                       send_ref=send_ref_for(target), writer=_Fanout(sinks) if sinks else None, on_record=on_record,
                       on_start=(lambda t0: recorder.start(t0)) if recorder is not None else None,
                       on_status=status, stop=stop, abort_after_errors=cfg.abort_after_errors,
                       drain_timeout_s=cfg.drain_timeout_s, ignore_eos=cfg.ignore_eos, **extra)
    finally:
        _restore_sigint(prev)
        if file_writer is not None:
            file_writer.close()


def u_is_http(u: str) -> bool:
    return u.lower().startswith(("http://", "https://"))


def check_scale_out_flags(url: str | None, extra: str | None, targets: Sequence[str], route: str, ray: bool, *,
                          sweep: bool = False) -> tuple[str | None, list[str], str, bool, str | None]:
    """Validate ``--target/--route/--ray [ADDRESS]`` and split the positionals.

    ``bench [URL] [ADDRESS] --ray``: a positional starting with ``http://``/``https://`` is the
    target; any other (``host:6379``, ``ray://host:10001``, ``auto``) is the Ray address; two
    scheme-less values are URL then ADDRESS. Returns ``(url, targets, route, ray, ray_address)``
    (address ``None`` = start a local cluster). With ``--ray`` and no Ray installed: one line
    saying ``pip install 'phasescope[ray]'``.
    """
    from phasescope.load.routing import ROUTES

    if route not in ROUTES:
        raise InputError(f"unknown --route {route!r} (choose from {', '.join(ROUTES)})")
    targets = [t for t in targets if t]
    from phasescope.apis.base import redact_url

    seen: set[str] = set()
    for u in ([url] if url and (not ray or u_is_http(url)) else []) + targets:
        key = redact_url(u if "://" in u else "http://" + u).rstrip("/")
        if key in seen:
            raise InputError(f"--target given twice: {u}")
        seen.add(key)
    if sweep and (targets and (url or len(targets) > 1)):
        raise InputError("--sweep runs against one endpoint; pass one URL (several --target are for bench runs)")
    if not ray:
        if extra:
            raise InputError(f"unexpected argument {extra!r} (a second positional is the Ray ADDRESS and needs --ray)")
        return url, targets, route, False, None
    pos = [v for v in (url, extra) if v]
    is_http = [v.lower().startswith(("http://", "https://")) for v in pos]
    address: str | None = None
    if len(pos) == 2:
        if all(is_http):
            raise InputError("two target URLs given: pass the second with --target")
        if is_http[1] and not is_http[0]:
            address, url = pos[0], pos[1]
        else:
            url, address = pos[0], pos[1]
    elif len(pos) == 1:
        if is_http[0]:
            url = pos[0]
        else:
            url, address = None, pos[0]
    if address is not None and address.strip().lower() == "local":
        address = None
    import_ray(local=address is None)
    return url, targets, route, True, address
