"""Records and the run store across processes: a killed writer loses nothing it wrote, its run is
``interrupted`` with its owner, and fresh interpreters race on one database. Moved from the unit
tier (they start processes): test_store, test_records and test_i31_store_truth."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from phasescope.measure.records import read_records
from phasescope.store import SCHEMA_VERSION, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from store_synth import thread_writer  # noqa: E402


def test_killed_process_leaves_interrupted_with_records(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from store_synth import rec
        from phasescope.store import open_store
        s = open_store({str(tmp_path)!r})
        with s.recording("bench", "http://127.0.0.1:9") as run:
            print(run.id, flush=True)
            for i in range(10_000):
                run.add(rec(i))
                print(i + 1, flush=True)
                time.sleep(0.01)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    run_id = p.stdout.readline().strip()
    n = 0
    while n < 5:
        n = int(p.stdout.readline())
    s = open_store(tmp_path)
    assert s.get(run_id).status == "running"  # alive: not mistaken for dead
    p.send_signal(signal.SIGKILL)
    p.wait()
    info = s.get(run_id)
    # issue 31: a run whose process is gone is `interrupted`, with which process it was
    assert info.status == "interrupted" and f"pid {p.pid}" in (info.error or "")
    assert info.n_records >= n
    assert len(s.load_records(run_id)) == info.n_records
    assert [r.status for r in s.list_runs(status="interrupted")] == ["interrupted"]


def _proc_writer(path: str, k: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    thread_writer(Path(path), k, [])


def test_concurrent_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")  # fresh interpreters racing on a fresh database (and its migration)
    ps = [ctx.Process(target=_proc_writer, args=(str(tmp_path), k)) for k in range(4)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
    assert [p.exitcode for p in ps] == [0] * 4
    s = open_store(tmp_path)
    runs = s.list_runs(limit=None)
    assert len(runs) == 12 and all(r.status == "complete" and r.n_records == 10 for r in runs)
    assert s.schema_version() == SCHEMA_VERSION


def test_records_survive_a_killed_writer(tmp_path: Path) -> None:
    """SIGKILL right after write() returns: every record written so far is on disk."""
    p = tmp_path / "k.jsonl"
    code = textwrap.dedent(
        f"""
        import sys, time
        from phasescope.measure.records import RecordWriter, RequestRecord
        w = RecordWriter({str(p)!r}, fsync_interval_s=3600)
        for i in range(50):
            w.write(RequestRecord(id=f"k{{i}}", api="openai", target="t", ok=True))
        print("written", flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "written"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [r.id for r in read_records(p)] == [f"k{i}" for i in range(50)]


def test_a_run_whose_process_is_gone_is_interrupted_with_its_owner(tmp_path: Path) -> None:
    from phasescope.store import open_store

    st = open_store(tmp_path / "store")
    code = ("import sys, os, time; from phasescope.store import open_store; "
            "from phasescope.measure.records import RequestRecord as R; "
            f"st = open_store({str(tmp_path / 'store')!r}); run = st.recording('bench', 'http://h', {{}}); "
            "run.add(R(id='a', api='openai', target='http://h', ok=True)); print(run.id, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    rid = p.stdout.readline().strip()  # type: ignore[union-attr]
    assert st.get(rid).status == "running"
    p.kill()
    time.sleep(0.2)  # killed, not yet reaped (a zombie): gone all the same
    info = st.get(rid)
    p.wait()
    assert info.status == "interrupted" and info.n_records == 1
    assert f"pid {p.pid}" in (info.error or "") and "started" in (info.error or "")
