"""run_load() with an injected send function: caps, warm-ups, records on disk, failures, stops."""

from __future__ import annotations

import asyncio
from pathlib import Path

from phasescope.apis.base import GenRequest, Target
from phasescope.load.health import RunnerHealth, health_warnings
from phasescope.load.runner import run_load
from phasescope.load.schedule import build_schedule
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import Event, RecordWriter, RequestRecord, read_records

TARGET = Target(base_url="http://127.0.0.1:9", api="openai", model="m")
ITEMS = [WorkItem(prompt=" the" * 4, output_len=3, input_len=4)]


class FakeSend:
    """Counts requests in flight; optionally fails or raises."""

    def __init__(self, delay_s: float = 0.0, fail_kind: str | None = None, raise_on: int | None = None) -> None:
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.order: list[str] = []
        self.fail_kind = fail_kind
        self.raise_on = raise_on
        self.calls = 0

    async def __call__(self, session, target: Target, req: GenRequest) -> RequestRecord:  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.raise_on is not None and self.calls == self.raise_on:
            raise ValueError("client bug")
        rec = RequestRecord(id=req.id or "", api=target.api, target=target.base_url, tags=dict(req.tags),
                            max_tokens=req.max_tokens)
        rec.wall_start_ns = wall_ns()
        rec.t_start_ns = now_ns()
        self.order.append(rec.id)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail_kind:
                rec.ok = False
                rec.error_kind = self.fail_kind
                rec.error_message = "refused"
                return rec
            for _ in range(req.max_tokens):
                rec.events.append(Event(now_ns(), "content", None, 4))
            rec.t_done_ns = now_ns()
            rec.output_tokens, rec.output_tokens_source = req.max_tokens, "usage"
            rec.ok = True
            return rec
        finally:
            self.in_flight -= 1


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_cap_and_every_request_recorded(tmp_path: Path) -> None:
    send = FakeSend(delay_s=0.01)
    sched = build_schedule(25, max_concurrency=3)
    with RecordWriter(tmp_path / "r.jsonl") as w:
        res = run(run_load(sched, ITEMS, TARGET, send=send, max_concurrency=3, writer=w, session=object()))  # type: ignore[arg-type]
    assert send.max_in_flight == 3
    assert len(res.records) == 25 and res.sent == 25
    on_disk = read_records(tmp_path / "r.jsonl")
    assert sorted(r.id for r in on_disk) == sorted(r.id for r in res.records)
    assert len({r.id for r in on_disk}) == 25
    for r in res.records:
        assert r.t_scheduled_ns is not None and r.tags["t_slot_ns"] >= r.t_scheduled_ns
        assert r.max_tokens == 3


def test_warmups_first_and_excluded() -> None:
    send = FakeSend()
    sched = build_schedule(4, warmup=2)
    res = run(run_load(sched, ITEMS, TARGET, send=send, session=object()))  # type: ignore[arg-type]
    assert send.order[:2] == ["run-w0", "run-w1"]
    assert len(res.warmup_records) == 2 and all(r.tags.get("warmup") for r in res.warmup_records)
    assert len(res.records) == 4 and not any(r.tags.get("warmup") for r in res.records)


def test_client_exception_becomes_failed_record() -> None:
    send = FakeSend(raise_on=2)
    res = run(run_load(build_schedule(3), ITEMS, TARGET, send=send, session=object()))  # type: ignore[arg-type]
    bad = [r for r in res.records if not r.ok]
    assert len(bad) == 1 and bad[0].error_kind == "client" and "client bug" in (bad[0].error_message or "")
    assert len(res.records) == 3


def test_dead_server_aborts_with_reason() -> None:
    send = FakeSend(fail_kind="connect")
    sched = build_schedule(100, rate=1000.0)
    res = run(run_load(sched, ITEMS, TARGET, send=send, session=object(), abort_after_errors=5))  # type: ignore[arg-type]
    assert res.aborted is not None and "failed 5 requests in a row (connect: refused)" in res.aborted
    assert res.partial and len(res.records) < 100


def test_stop_event_interrupts() -> None:
    async def go():  # type: ignore[no-untyped-def]
        stop = asyncio.Event()
        send = FakeSend(delay_s=0.05)
        sched = build_schedule(1000, rate=200.0)
        asyncio.get_running_loop().call_later(0.2, stop.set)
        return await run_load(sched, ITEMS, TARGET, send=send, stop=stop, session=object())  # type: ignore[arg-type]

    res = run(go())
    assert res.interrupted and res.partial and res.aborted is None
    assert 0 < len(res.records) < 1000


def test_closed_loop_duration_stops_repeating() -> None:
    send = FakeSend(delay_s=0.01)
    sched = build_schedule(None, duration_s=0.3, max_concurrency=2)
    res = run(run_load(sched, ITEMS, TARGET, send=send, max_concurrency=2, session=object()))  # type: ignore[arg-type]
    assert res.hit_duration and not res.partial
    assert len(res.records) > 4 and send.max_in_flight == 2


def test_health_warnings_name_the_fix() -> None:
    h = RunnerHealth(loop_lag_ms_p99=20.0, loop_lag_ms_max=40.0, cpu_percent=97.0, send_lag_ms_p99=30.0, send_lag_ms_max=50.0)
    w = health_warnings(h, workers=1, achieved_rate=5.0, requested_rate=10.0)
    assert len(w) == 4 and all(x.message and x.fix for x in w)
    assert [x.kind for x in w] == ["client_saturated"] * 3 + ["rate_not_reached"]
    assert any("--workers" in x.fix for x in w)
    assert health_warnings(RunnerHealth(loop_lag_ms_p99=0.5, cpu_percent=10.0, send_lag_ms_p99=0.2)) == []


def test_the_end_of_a_run_never_formats_its_result() -> None:
    """``asyncio.Runner.run`` checks and restores its SIGINT handler when the run ends; on Python
    3.11 each check turns the handler (a partial holding the main task) into an Enum and fails,
    formatting ``repr(task)`` — and with it the task's result, here every record of the run (py-spy:
    5.5 % of a 2,048-stream bench's samples went there, after its last request; seconds after a
    100,000-request run). ``run_async`` keeps the result out of the task."""
    import signal

    import pytest

    from phasescope.load.loop import run_async

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("the runner installs its SIGINT handler only over Python's default one")
    calls = []

    class Big:
        def __repr__(self) -> str:
            calls.append(1)
            return "Big(...)"

    async def main() -> Big:
        await asyncio.sleep(0)
        return Big()

    got = run_async(main())
    assert isinstance(got, Big)
    assert calls == []

    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_async(fails())
