"""The Ray driver's bookkeeping without a cluster: clock alignment of records, worker_lost records for a
dead actor's unfinished requests, per-actor health warnings and the merged result."""

from __future__ import annotations

import threading
from dataclasses import asdict

from phasescope.apis.base import Target
from phasescope.load.ray import LOST, ActorState, ClockOffset, RayRunResult, align, lost_records, merge
from phasescope.load.health import RunnerHealth
from phasescope.load.schedule import build_schedule
from phasescope.load.summary import summarize
from phasescope.measure.records import RequestRecord

TGT = Target(base_url="http://127.0.0.1:8000", api="openai", model="m")


def _actor(idx: int, sched_parts: list, off_ns: int = 0) -> ActorState:
    a = ActorState(idx, f"a{idx}", None, sched_parts[idx], info={"node_ip": "127.0.0.1", "pid": 100 + idx})
    a.clock = ClockOffset(offset_ns=off_ns, uncertainty_ns=200_000, rtt_ns=400_000, samples=15)
    return a


def test_align_places_wall_start_on_the_driver_clock_and_keeps_raw_readings() -> None:
    sched = build_schedule(4, rate=10.0, seed=1)
    a = _actor(0, sched.partition(1), off_ns=5_000_000_000)  # actor clock 5 s ahead of the driver's
    rec = RequestRecord(id="x", api="openai", target="t", t_start_ns=5_000_000_000 + 1_000, wall_start_ns=42,
                        t_scheduled_ns=5_000_000_000)
    align(rec, a.off, a.name, d_mono0=0, d_wall0=1_700_000_000_000_000_000)
    assert rec.wall_start_ns == 1_700_000_000_000_000_000 + 1_000
    assert rec.tags["actor_wall_start_ns"] == 42 and rec.t_start_ns == 5_000_001_000 and rec.worker == "a0"


def test_dead_actor_requests_become_worker_lost_and_the_run_is_partial() -> None:
    sched = build_schedule(10, rate=10.0, seed=2)
    parts = sched.partition(2)
    a0, a1 = _actor(0, parts), _actor(1, parts, off_ns=300)
    t0 = 10_000_000_000
    res = RayRunResult()
    for a, k in ((a0, 5), (a1, 2)):
        for sr in a.part.requests[:k]:  # a0 returned all its requests, a1 its first two
            a.received.add(sr.index)
            a.n_received += 1
            res.records.append(RequestRecord(id=f"{a.name}-{sr.index}", api="openai", target="t", ok=True,
                                             t_start_ns=t0 + a.off + int(sr.offset_s * 1e9), worker=a.name,
                                             wall_start_ns=t0 + int(sr.offset_s * 1e9), tags={"index": sr.index}))
    h = asdict(RunnerHealth(cpu_percent=97.0, loop_lag_ms_p99=1.0, send_lag_ms_p99=0.5, loop_samples=10))
    a0.meta = {"health": h, "scheduled": 5, "sent": 5, "cancelled": 0, "aborted": None, "interrupted": False,
               "hit_duration": False, "t0_ns": t0}
    a1.dead, a1.died_at_ns, a1.in_flight = "ActorDiedError: killed", t0 + 500_000_000, [a1.part.requests[2].index]
    a1.lost = lost_records(a1, sched, TGT, "run", t0, 0, 0)
    res.records.extend(a1.lost)
    out = merge(res, [a0, a1], sched, t0, 0, 0, "local", True, 1.0, threading.Event())
    # a1 owned 5, returned 2: 3 worker_lost records, one in flight, two never sent
    assert sorted(r.tags["index"] for r in out.records) == list(range(10))
    lost = [r for r in out.records if r.error_kind == LOST]
    assert len(lost) == 3 and {r.tags["lost"] for r in lost} == {"in_flight", "unsent"}
    assert sum(r.tags["lost"] == "in_flight" for r in lost) == 1
    assert all(r.worker == "a1" and "a1" in (r.error_message or "") for r in lost)
    # a request scheduled after the death starts (and ends) at the death, so it cannot stretch the run
    died_a1 = a1.died_at_ns + a1.off
    assert all(r.t_start_ns <= died_a1 for r in lost)
    assert out.partial and "a1" in (out.aborted or "") and "3 unfinished" in (out.aborted or "")
    rows = {r["name"]: r for r in out.ray["actors"]}
    assert rows["a1"]["status"] == "died" and rows["a1"]["lost"] == 3 and rows["a1"]["requests_owned"] == 5
    assert rows["a0"]["status"] == "ok" and out.ray["clock_alignment_uncertainty_ms"] == 0.2
    # the saturated actor is named in a warning
    assert any(w.message.startswith("Ray actor a0") and "CPU" in w.message and w.kind == "client_saturated"
               for w in out.actor_warnings)
    s = summarize(out.records)
    assert s["failed"] == 3 and s["errors_by_kind"] == {LOST: 3} and s["completed"] == 7


def test_endless_closed_loop_only_marks_what_was_in_flight() -> None:
    sched = build_schedule(None, duration_s=5.0, max_concurrency=4)
    assert sched.repeat
    a = _actor(0, sched.partition(1))
    a.dead, a.died_at_ns, a.in_flight, a.received = "gone", 1_000, [7, 8], {8}
    lost = lost_records(a, sched, TGT, "run", 0, 0, 0)
    assert [r.tags["index"] for r in lost] == [7] and lost[0].tags["lost"] == "in_flight"
