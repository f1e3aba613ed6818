"""Issue 31: records written whole or not at all, one sink's full disk never empties another, and a store
that tells the truth after a crash and about hostile rows (one line, never a traceback)."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from phasescope.measure.records import FanoutSink, RecordWriter, RequestRecord, ThreadedSink, read_records

from cli_helpers import run as cli


def _rec(i: int) -> RequestRecord:
    return RequestRecord(id=f"r{i}", api="openai", target="http://h", ok=True, output_tokens=i)


def test_a_write_that_fails_part_way_leaves_no_torn_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "records.jsonl"
    w = RecordWriter(path, fsync=False)
    w.write(_rec(1))
    real = os.write
    calls = {"n": 0}

    def half_then_enospc(fd: int, data: bytes) -> int:  # a full disk: half the line goes out, then ENOSPC
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(Exception) as ei:
        w.write(_rec(2))
    monkeypatch.setattr(os, "write", real)
    w.close()
    assert str(path) in str(ei.value) and "1 records written before it are kept" in str(ei.value)
    data = path.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert [r.id for r in read_records(path)] == ["r1"]


def test_a_torn_tail_left_by_an_older_writer_is_cut_before_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(_rec(1).to_json().encode() + b"\n" + b'{"id": "r2", "api": "op')
    with RecordWriter(path, fsync=False) as w:
        w.write(_rec(3))
    assert [r.id for r in read_records(path)] == ["r1", "r3"]


class _Full:
    path = "/full/records.jsonl"

    def write(self, record: RequestRecord) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        pass


class _Keep:
    def __init__(self) -> None:
        self.got: list[str] = []

    def write(self, record: RequestRecord) -> None:
        self.got.append(record.id)

    def close(self) -> None:
        pass


def test_a_full_disk_on_one_sink_never_empties_the_other() -> None:
    keep = _Keep()
    errors: list[str] = []
    t = ThreadedSink(FanoutSink([_Full(), keep]), on_error=errors.append)
    for i in range(5):
        t.put(_rec(i))
    t.close()
    assert keep.got == [f"r{i}" for i in range(5)]
    assert len(errors) == 1 and "/full/records.jsonl" in errors[0] and "No space left" in errors[0]


def _store_with_run(tmp_path: Path) -> tuple[Path, str]:
    from phasescope.store import open_store

    st = open_store(tmp_path / "store")
    with st.recording("bench", "http://127.0.0.1:1", {"x": 1}) as run:
        run.add(_rec(1))
        run.finish({"completed": 1, "status": "complete"})
    return st.db_path, run.id


def test_hostile_rows_are_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    db, rid = _store_with_run(tmp_path)
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET summary = ? WHERE id = ?",
                (json.dumps({"completed": "many", "warnings": 5, "host": [1], "ceilings": "x", "sizes": 3}), rid))
    con.commit()
    for args in (["show", rid], ["show", rid, "--json"], ["compare", rid, rid], ["runs"]):
        code, out, err = cli(args, capsys, monkeypatch)
        assert code in (0, 2) and "Traceback" not in err and "phasescope bug" not in err, (args, err)
    con.execute("UPDATE runs SET started_at = 'yesterday' WHERE id = ?", (rid,))
    con.commit()
    code, out, err = cli(["runs"], capsys, monkeypatch)
    assert code == 0 and "started_at 'yesterday' is not a time" in err
    code, out, err = cli(["show", rid], capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is not a time" in err
    code, out, err = cli(["plan", "--calibrate-from", rid, "--model-spec", "llama-3.1-8b", "--device", "h100-sxm"],
                         capsys, monkeypatch)
    assert code == 2 and "phasescope bug" not in err, err
    con.execute("UPDATE runs SET started_at = 1.0 WHERE id = ?", (rid,))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    con.execute("UPDATE runs SET records_path = ? WHERE id = ?", (str(fifo), rid))
    con.commit()
    t0 = time.monotonic()
    code, out, err = cli(["show", rid], capsys, monkeypatch)
    assert time.monotonic() - t0 < 10 and code == 2 and "not a regular file" in err


def test_report_on_a_full_disk_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _, rid = _store_with_run(tmp_path)
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))

    def full(self: Path, *a: object, **k: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    code, out, err = cli(["report", rid, "-o", str(tmp_path / "r.html")], capsys, monkeypatch)
    assert code == 3 and "No space left on device" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("r.html*"))


def test_watch_csv_on_a_full_disk_is_one_output_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.errors import OutputError
    from phasescope.metrics.watch import CsvLog

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError) as ei:
        CsvLog(tmp_path / "w.csv")
    assert "w.csv" in str(ei.value) and "No space left" in str(ei.value) and ei.value.exit_code == 3
