"""Issue #16 item 1: one run lifecycle. Every kind of run — bench, probe, explain, plan (a calibrated
plan too), bench's ``--workers`` processes — writes through one RecordSink and one run output
(``phasescope.lifecycle.run_output``): the same fallback folder rule, the same partial run when it
is interrupted. Runners never import ``phasescope.report``; SIGINT is handled in one module.

The fakes are real HTTP servers on 127.0.0.1 (phasescope.testing.fakeserver); runs are a few
requests long."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from phasescope.measure.records import RequestRecord, read_records
from phasescope.testing.fakeserver import FakeServer

SRC = Path(__file__).resolve().parents[2] / "src" / "phasescope"
KINDS = ("bench", "probe", "explain", "plan")


def test_sigint_is_handled_in_one_module() -> None:
    """Only phasescope.signals touches SIGINT (testing/ holds the fake servers, processes of their own)."""
    where = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                   if "signal.SIGINT" in p.read_text(encoding="utf-8") and p.parts[len(SRC.parts)] != "testing")
    assert where == ["signals.py"]


def test_one_sink_protocol_and_the_old_adapters_are_gone(tmp_path: Path) -> None:
    from phasescope.measure.records import FanoutSink, QueueSink, RecordSink, RecordWriter, ThreadedSink
    from phasescope.store import open_store

    text = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    for old in ("class _Fanout", "class BackgroundWriter", "class BackgroundSink", "class _QueueSink"):
        assert old not in text
    rec = open_store(tmp_path / "s").recording("bench", "http://127.0.0.1:1", {})
    w = RecordWriter(tmp_path / "r.jsonl")
    for s in (w, rec, FanoutSink([]), ThreadedSink(None), QueueSink(None)):
        assert isinstance(s, RecordSink)
    w.close()
    rec.finish({})


def test_threaded_sink_reports_the_first_failure_once_and_the_healthy_sink_keeps_every_record(tmp_path: Path) -> None:
    from phasescope.errors import OutputError
    from phasescope.measure.records import FanoutSink, RecordWriter, ThreadedSink

    class Full:
        path = tmp_path / "full.jsonl"

        def write(self, rec: RequestRecord) -> None:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    ok = RecordWriter(tmp_path / "ok.jsonl")
    errors: list[str] = []
    t = ThreadedSink(FanoutSink([ok, Full()]), on_error=errors.append)
    for i in range(3):
        t.write(RequestRecord(id=f"r{i}", api="openai", target="http://127.0.0.1:1"))
    t.close()
    ok.close()
    assert errors == [t.error] and "full.jsonl" in t.error and "No space left" in t.error
    # issue 31: disk full on one sink never empties another: the healthy sink keeps every record
    assert [r.id for r in read_records(ok.path)] == ["r0", "r1", "r2"]
    with pytest.raises(OutputError):
        RecordWriter(tmp_path / "ok.jsonl" / "x")  # a file in the way is one OutputError


# --- one fallback rule, one partial run, for every kind ------------------------------------------
@pytest.fixture(scope="module")
def srv() -> Iterator[FakeServer]:
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as s:
        yield s


def _run(kind: str, url: str, mp: pytest.MonkeyPatch, on_record: Any = None, save: bool = True,
         **kw: Any) -> dict[str, Any]:
    """One short run of ``kind``; its JSON result. ``on_record``: called with each record the run
    writes, right after it was handed to the run's sink."""
    if kind == "bench":
        from phasescope.load.bench import BenchConfig, run_bench

        cfg = BenchConfig(url=url, num_prompts=6, input_len=8, output_len=4, max_concurrency=1, store=save,
                          server_metrics=False, nvml=False, **kw)
        return run_bench(cfg, on_record=on_record).summary
    if kind == "probe":
        import phasescope.probing.runner as pr
        from phasescope.probing import probe

        if on_record is not None:
            orig = pr.run_probe
            hook = on_record

            async def spy(target: Any, plan: Any, *, on_record: Any = None, **k: Any) -> Any:
                def both(rec: RequestRecord) -> None:
                    on_record(rec)
                    hook(rec)
                return await orig(target, plan, on_record=both, **k)

            mp.setattr("phasescope.probing.run_probe", spy)
        return probe(url, sizes=[8, 16], max_tokens=4, repeat=2, save=save, nvml=False, **kw)
    if kind == "explain":
        import phasescope.experiments.suite as suite
        from phasescope.experiments.context import RunContext
        from phasescope.experiments.suite import run_explain

        if on_record is not None:
            def ctx(**k: Any) -> RunContext:
                inner = k["sink"]

                def both(rec: RequestRecord) -> None:
                    inner(rec)
                    on_record(rec)
                return RunContext(**{**k, "sink": both})

            mp.setattr(suite, "RunContext", ctx)
        return run_explain(url, budget_s=4.0, names=["prompt-scaling"], save=save, nvml=False).to_json()
    if kind == "plan":
        import phasescope.planning.api as api

        if on_record is not None:
            orig_to = api.to_records

            def spy_to(*a: Any, **k: Any) -> Iterator[RequestRecord]:
                for rec in orig_to(*a, **k):
                    yield rec
                    on_record(rec)

            mp.setattr(api, "to_records", spy_to)
        # a calibrated plan: the cost model fitted to a measured run's records (plan --calibrate-from)
        cal = _calibration_records()
        return api.run_plan(api.PlanOptions(model="llama-3.1-8b", device="l40s", num_requests=12,
                                            calibrate_from=str(cal), save=save, records_limit=20))
    raise AssertionError(kind)


_CAL: list[Path] = []


def _calibration_records() -> Path:
    if not _CAL:
        import tempfile

        from phasescope.measure.records import Event, write_records

        p = Path(tempfile.mkdtemp(prefix="i16-cal-")) / "records.jsonl"
        recs = []
        t = 0
        for i, n in enumerate([64, 128, 256, 512] * 2):
            ttft = int((0.002 + n * 2e-5) * 1e9)
            events = [Event(t + ttft + k * 5_000_000, n_tokens=1) for k in range(16)]
            recs.append(RequestRecord(id=f"c{i}", api="openai", target="http://127.0.0.1:1", model="m", ok=True,
                                      t_start_ns=t, events=events, t_done_ns=events[-1].t_ns + 1000,
                                      prompt_tokens=n, output_tokens=16, max_tokens=16))
            t = events[-1].t_ns + 50_000_000  # one at a time: every request ran alone
        write_records(p, recs)
        _CAL.append(p)
    return _CAL[0]


@pytest.fixture
def no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run store cannot be opened (a file where its folder should be); fallback folders go to
    ``tmp_path/runs``."""
    (tmp_path / "blocker").write_text("not a folder")
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "blocker" / "store" / "runs.db"))
    monkeypatch.setenv("PHASESCOPE_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_store_unavailable_every_kind_goes_to_the_same_fallback_folder(kind: str, srv: FakeServer, no_store: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _run(kind, srv.url, monkeypatch)
    folders = sorted(no_store.iterdir())
    assert [f.name.split("-")[0] for f in folders] == [kind]  # <kind>-<UTC second>-<8 hex>
    name = folders[0].name
    stamp, hexpart = name[len(kind) + 1:].rsplit("-", 1)
    assert len(stamp) == len("20261201-123456") and len(hexpart) == 8
    recs = read_records(folders[0] / "records.jsonl")
    assert recs, "every record reaches the fallback folder"
    summary = json.loads((folders[0] / "summary.json").read_text())
    if kind != "plan":
        assert summary.get("records_path") == str(folders[0] / "records.jsonl")
        assert doc["records_path"] == str(folders[0] / "records.jsonl")
    assert doc.get("run_id") in (None, name)  # not in the store: bench names the run after its folder


class _Stop(KeyboardInterrupt):
    """Ctrl-C, arriving in the middle of a run."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_interrupted_run_of_every_kind_is_a_usable_partial_run(kind: str, srv: FakeServer, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after the third record: the stored run is ``partial``, says why, and keeps every record
    written before it (bench turns Ctrl-C into its stop event and still finishes the summary)."""
    from phasescope.store import open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    seen: list[str] = []
    stop_evt: list[Any] = []

    def on_record(rec: RequestRecord) -> None:
        seen.append(rec.id)
        if len(seen) == 3:
            if kind == "bench":
                stop_evt[0].set()  # what bench's SIGINT handler does (phasescope.lifecycle.on_sigint)
            else:
                raise _Stop()

    if kind == "bench":
        import threading

        from phasescope.load.bench import BenchConfig, run_bench

        stop_evt.append(threading.Event())
        cfg = BenchConfig(url=srv.url, num_prompts=40, input_len=8, output_len=4, max_concurrency=1,
                          server_metrics=False, nvml=False)
        doc = run_bench(cfg, on_record=on_record, stop=stop_evt[0]).summary
        assert doc["partial"] and doc["status"] == "partial" and doc["stop_reason"] == "interrupted (Ctrl-C)"
    else:
        with pytest.raises(KeyboardInterrupt):
            _run(kind, srv.url, monkeypatch, on_record=on_record)
    store = open_store()
    [info] = store.list_runs(kind=kind)
    assert info.status == "partial"
    if kind != "bench":
        assert info.error == "interrupted"
    on_disk = [r.id for r in store.load_records(info.id)]
    assert set(seen[:3]) <= set(on_disk), (seen, on_disk)
    assert info.n_records == len(on_disk)


# --- --workers processes: records reach the run's sink as they arrive -----------------------------
class _ListSink:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.closed = False

    def write(self, rec: RequestRecord) -> None:
        self.ids.append(rec.id)

    def close(self) -> None:
        self.closed = True


@pytest.mark.timeout(120)
def test_workers_write_every_record_to_the_run_sink_before_its_progress(srv: FakeServer, tmp_path: Path) -> None:
    from phasescope.apis.base import Target
    from phasescope.load.schedule import build_schedule
    from phasescope.load.workers import run_workers
    from phasescope.load.workload import WorkItem

    sink = _ListSink()
    order: list[bool] = []
    tgt = Target(base_url=srv.url, api="openai", model="fake-model", engine="vllm")
    res = run_workers(build_schedule(12, rate=200.0, warmup=2), [WorkItem(prompt=" the" * 8, output_len=4, input_len=8)],
                      tgt, n_workers=2, records_dir=tmp_path, sink=sink,
                      on_progress=lambda rec: order.append(rec.id in sink.ids))
    assert sorted(sink.ids) == sorted(r.id for r in res.records + res.warmup_records)  # each exactly once
    assert len(order) == 12 and all(order)  # written to the run's sink before the progress bar heard of it


def die_on_fifth(session: Any, target: Any, req: Any) -> Any:
    """A send that kills worker 1 at its fifth measured request, index 9 (a worker killed mid-run)."""
    from phasescope.apis import get_client

    if str(req.id).endswith("-w1-9"):
        os._exit(9)
    return get_client(target.api).send(session, target, req)


@pytest.mark.timeout(180)
def test_a_killed_worker_leaves_a_partial_run_with_everything_it_finished(srv: FakeServer, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.load import bench, routing
    from phasescope.store import open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.setattr(routing, "send_ref_for", lambda target: f"{__name__}:die_on_fifth")  # the workers' send
    cfg = bench.BenchConfig(url=srv.url, num_prompts=20, input_len=8, output_len=4, max_concurrency=2, workers=2,
                            server_metrics=False, nvml=False, out_dir=str(tmp_path / "out"))
    s = bench.run_bench(cfg).summary
    assert s["status"] == "partial" and "died" in (s["stop_reason"] or "")
    [info] = open_store().list_runs(kind="bench")
    assert info.status == "partial"
    stored = {r.id for r in open_store().load_records(info.id)}
    w1 = {r.id for r in read_records(tmp_path / "out" / "records" / "worker-1.jsonl")}
    assert w1 and w1 <= stored  # what the killed worker finished is in the run
    assert stored == {r.id for r in read_records(tmp_path / "out" / "records.jsonl")}


def _report_mask(q: Any) -> None:
    import signal

    q.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_worker_processes_start_with_ctrl_c_blocked_and_the_parent_gets_it_after() -> None:
    """A Ctrl-C while --workers processes boot used to kill one half-started and hang bench in
    Process.start() (seen: a parent blocked writing 64 KB of arguments to a dead child's pipe)."""
    import multiprocessing as mp
    import signal

    from phasescope.lifecycle import children_start_deaf, on_sigint

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    got: list[int] = []
    with on_sigint(lambda: got.append(1)):
        with children_start_deaf():
            p = ctx.Process(target=_report_mask, args=(q,))
            p.start()
            signal.raise_signal(signal.SIGINT)  # arrives while children boot: deferred, not lost
            assert got == []
        assert got == [1]
        assert q.get(timeout=60) is True
        p.join(30)
    assert SIGINT_free()


def SIGINT_free() -> bool:
    import signal

    return signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.timeout(120)
def test_explain_on_a_full_disk_is_a_partial_run_and_says_so(srv: FakeServer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """explain's records used to go through a sink that swallowed every write failure: a full disk
    lost records silently and the run was stored ``complete``."""
    from phasescope.errors import OutputError
    from phasescope.experiments.suite import run_explain
    from phasescope.store import Recording, open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    orig = Recording.add
    n = [0]

    def full_after_two(self: Recording, rec: RequestRecord) -> None:
        n[0] += 1
        if n[0] > 2:
            raise OutputError(f"cannot write records to {self.records_path}: No space left on device")
        orig(self, rec)

    monkeypatch.setattr(Recording, "add", full_after_two)
    monkeypatch.setattr(Recording, "write", full_after_two, raising=False)
    with pytest.raises(OutputError, match="No space left on device"):
        run_explain(srv.url, budget_s=4.0, names=["prompt-scaling"], nvml=False)
    [info] = open_store().list_runs(kind="explain")
    assert info.status == "partial" and info.summary is not None  # the report is kept with the run
    assert len(open_store().load_records(info.id)) == 2
