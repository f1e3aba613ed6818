"""RequestRecord serialisation and the JSONL writer's durability contract."""

from __future__ import annotations

import os
from pathlib import Path

from phasescope.measure import derive
from phasescope.measure.records import Event, RecordWriter, RequestRecord, read_records


def _record(i: int) -> RequestRecord:
    return RequestRecord(
        id=f"r{i}",
        api="openai",
        target="http://127.0.0.1:1",
        t_start_ns=1_000,
        t_conn_ready_ns=2_000,
        events=[Event(1_000_000, "role"), Event(5_000_000, "content", 1, 3), Event(7_000_000, "content", 2, 5)],
        output_tokens=3,
        output_tokens_source="usage",
        ok=True,
        tags={"size": 200},
    )


def test_roundtrip_keeps_every_field_and_event() -> None:
    r = _record(1)
    back = RequestRecord.from_dict(r.to_dict())
    assert back == r
    # derived metrics come out the same from the copy
    assert derive.ttft_s(back) == derive.ttft_s(r) == (5_000_000 - 1_000) / 1e9


def test_unknown_keys_from_newer_schema_are_ignored() -> None:
    d = _record(2).to_dict()
    d["some_future_field"] = 1
    assert RequestRecord.from_dict(d).id == "r2"


def test_truncated_last_line_is_skipped(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    with RecordWriter(p) as w:
        w.write(_record(1))
        w.write(_record(2))
    with open(p, "a") as fh:
        fh.write(_record(3).to_json()[:40])  # a writer killed mid-line
    assert [r.id for r in read_records(p)] == ["r1", "r2"]


def test_fsync_is_rate_limited_not_skipped(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    w = RecordWriter(tmp_path / "f.jsonl", fsync_interval_s=3600)
    for i in range(100):
        w.write(_record(i))
    assert calls == []  # within the interval: flushed, not fsync'd
    w.close()
    assert len(calls) == 1  # close always syncs
    w2 = RecordWriter(tmp_path / "g.jsonl", fsync_interval_s=0)
    calls.clear()
    for i in range(5):
        w2.write(_record(i))
    w2.close()
    assert len(calls) == 6
