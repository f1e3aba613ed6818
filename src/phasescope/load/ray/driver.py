"""The Ray driver: :func:`run_ray` runs one schedule over N :class:`~phasescope.load.ray.actor.LoadActor`.

Steps (the package docstring, :mod:`phasescope.load.ray`, says why): connect (a running connection,
``ADDRESS``, or a loopback cluster started for the run), place the actors (``SPREAD``,
``num_cpus=--ray-actor-cpus``), measure each clock offset (:mod:`phasescope.load.ray.clock`), hand
each its part of the schedule, start them together, poll records as they complete and write each to
the run's sink (on a :class:`~phasescope.measure.records.ThreadedSink`), record a dead actor's
unfinished requests as ``worker_lost`` (:func:`lost_records`), and merge (:func:`merge`). Ray is
imported lazily (:func:`import_ray`): without it ``--ray`` is one line saying how to install it.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from phasescope.apis.base import Target
from phasescope.errors import InputError, RayError
from phasescope.load.ray.actor import LoadActor
from phasescope.load.ray.clock import START_LEAD_S, ClockOffset, align, measure_offset
from phasescope.load.health import RunnerHealth, health_warnings
from phasescope.load.runner import RunResult
from phasescope.load.schedule import Schedule, ScheduledRequest
from phasescope.load.workers import split_concurrency
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import RecordSink, RequestRecord, ThreadedSink
from phasescope.measure.warnings import MeasurementWarning, warn

LOST = "worker_lost"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
INSTALL_HINT = "--ray needs Ray: pip install 'phasescope[ray]'"


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
    writer: RecordSink | None = None,
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

    ``writer``: the run's :class:`~phasescope.measure.records.RecordSink`; gets every record (warm-ups
    included) as it arrives, on a background thread; a failure there stops the run (``write_error``). ``on_record``: every measured record, on the driver thread (progress).
    ``on_start(t0_ns)``: called with t0 on the driver's clock when the measured part starts.
    ``on_actors(handles)``: the actor handles once created (tests use it to kill one).
    ``kw`` goes to :func:`phasescope.load.runner.run_load` (``abort_after_errors``, ``drain_timeout_s``, ``ignore_eos``,
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
    bw = ThreadedSink(writer, on_error=lambda _why: stop.set())  # a full disk stops the run there
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
        res.actor_warnings.extend(warn(
            "version_mismatch", "ray_actor", {"actor": name, "node_ip": ip, "actor_version": ver,
                                              "driver_version": _version()},
            actor=name, node_ip=ip, actor_version=ver, driver_version=_version())
            for name, ip, ver in sorted(warn_versions, key=str))
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
                    align(rec, a.off, a.name, d_mono0, d_wall0)
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
            a.lost = lost_records(a, schedule, target, run_id, t0_d, d_mono0, d_wall0)
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
        if bw.error is not None:
            res.write_error = bw.error
        for a in actors:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:
                pass
        if started:
            ray.shutdown()
    return merge(res, actors, schedule, t0_d, d_mono0, d_wall0, where, started, actor_cpus, stop)


def _version() -> str:
    from phasescope._version import __version__

    return __version__


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


def lost_records(a: ActorState, schedule: Schedule, target: Target, run_id: str, t0_d: int | None,
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


def merge(res: RayRunResult, actors: list[ActorState], schedule: Schedule, t0_d: int | None, d_mono0: int,
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
                res.actor_warnings.append(w.prefixed(f"Ray actor {a.name} ({a.info.get('node_ip')}): "))
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
    if res.write_error is not None:
        res.aborted = res.aborted or f"stopped: {res.write_error}"
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
