"""The run store: round trip, filters, baselines, credentials, interruption, concurrency, migration."""

from __future__ import annotations

import sqlite3
import sys
import threading
from pathlib import Path

import pytest

from phasescope.apis.base import Target
from phasescope.errors import InputError
import phasescope.store as store_mod
from phasescope.store import SCHEMA_VERSION, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from store_synth import rec, thread_writer  # noqa: E402


def test_round_trip(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    assert s.db_path == tmp_path / "runs.db"
    t = Target("http://127.0.0.1:8080/v1", api="chat", model="gemma", engine="llamacpp", engine_version="b6000")
    with s.recording("probe", t, {"prompt_lengths": [128, 512]}, device="local") as run:
        assert run.records_path == tmp_path / "records" / f"{run.id}.jsonl"
        for i in range(5):
            run.add(rec(i))
        run.finish({"ttft_s": 0.05, "bad": float("nan")})
    info = s.get(run.id)
    assert info.status == "complete"
    assert (info.kind, info.api, info.model, info.engine, info.engine_version, info.device) == (
        "probe", "chat", "gemma", "llamacpp", "b6000", "local")
    assert info.target == "http://127.0.0.1:8080/v1"
    assert info.params == {"prompt_lengths": [128, 512]}
    assert info.summary == {"ttft_s": 0.05, "bad": None}
    assert info.n_records == 5 and info.ended_at is not None and info.ended_at >= info.started_at
    assert [r.id for r in s.load_records(run.id)] == [f"q{i}" for i in range(5)]
    assert s.get(run.id[:14]).id == run.id and s.get("latest").id == run.id
    assert s.schema_version() == SCHEMA_VERSION


def test_device_from_summary_when_not_given(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    with s.recording("probe") as run:
        run.finish({"ceilings": {"device": {"id": "h100-sxm", "name": "H100"}}})
    assert s.get(run.id).device == "h100-sxm"
    with s.recording("probe", device="local") as run:
        run.finish({"ceilings": {"device": {"id": "h100-sxm"}}})
    assert s.get(run.id).device == "local"  # what the caller said wins


def test_ids_unique_and_filters(tmp_path: Path) -> None:
    s = open_store(tmp_path / "x.db")
    ids = []
    for kind, model, url in [("probe", "a", "http://h1:1"), ("bench", "a", "http://h2:2"), ("probe", "b", "http://h2:2")]:
        with s.recording(kind, url, model=model) as run:
            run.finish({})
        ids.append(run.id)
    assert len(set(ids)) == 3
    assert [r.id for r in s.list_runs()] == ids[::-1]
    assert {r.id for r in s.list_runs(kind="probe")} == {ids[0], ids[2]}
    assert {r.id for r in s.list_runs(model="a")} == {ids[0], ids[1]}
    assert {r.id for r in s.list_runs(target="h2:2")} == {ids[1], ids[2]}
    assert {r.id for r in s.list_runs(target="http://user:pw@h1:1/")} == {ids[0]}
    assert len(s.list_runs(limit=1)) == 1
    with pytest.raises(InputError, match="no run"):
        s.get("r1999")
    with pytest.raises(InputError, match="ambiguous"):
        s.get("r")


def test_baselines(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    with s.recording("probe") as a:
        a.finish({})
    with s.recording("probe") as b:
        b.finish({})
    assert s.get_baseline("main") is None
    s.set_baseline("main", a.id)
    assert s.get_baseline("main").id == a.id  # type: ignore[union-attr]
    s.set_baseline("main", b.id)  # replaces
    assert s.get_baseline("main").id == b.id  # type: ignore[union-attr]
    assert s.baselines() == {"main": b.id}
    with pytest.raises(InputError):
        s.set_baseline("x", "nope")
    s.delete(b.id)
    assert s.get_baseline("main") is None and not b.records_path.exists()


def _all_bytes(d: Path) -> bytes:
    return b"".join(p.read_bytes() for p in d.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "url,key",
    [
        ("http://127.0.0.1:8000/v1", "sk-TOPSECRET-1234"),
        ("http://alice:sk-TOPSECRET-1234@127.0.0.1:8000/v1", None),
        ("http://127.0.0.1:8000/v1?api_key=sk-TOPSECRET-1234", None),
        ("https://bob:hunter2pass@example.test/v1?token=sk-TOPSECRET-1234", "sk-TOPSECRET-1234"),
    ],
)
def test_credentials_never_stored(tmp_path: Path, url: str, key: str | None) -> None:
    s = open_store(tmp_path)
    t = Target(url, api_key=key)
    params = {"api_key": "sk-TOPSECRET-1234", "headers": {"Authorization": "Bearer sk-TOPSECRET-1234"},
              "url": url, "note": "used sk-TOPSECRET-1234", "n": 1, "token": "sk-TOPSECRET-1234",
              "access_token": "sk-TOPSECRET-1234", "prompt_tokens": [200, 2000], "max_tokens": 128}
    with s.recording("probe", t, params) as run:
        run.add(rec(1, target=url, error_message="401 for key sk-TOPSECRET-1234"))
        run.add(rec(2, target=url))
        run.update(params=params, target=url)
        run.finish({"echo": "sk-TOPSECRET-1234", "url": url})
    with s.recording("bench", t) as run2:  # the partial path too (no finish)
        run2.add(rec(3, target=url))
    # force a checkpoint so the WAL content is in the main file as well; check every file anyway
    with sqlite3.connect(s.db_path) as con:
        con.execute("PRAGMA wal_checkpoint(FULL)")
    blob = _all_bytes(tmp_path)
    for secret in (b"sk-TOPSECRET-1234", b"hunter2pass", b"alice:", b"bob:"):
        assert secret not in blob
    info = s.get(run.id)
    assert info.target is not None and "@" not in info.target and "?" not in info.target
    assert info.params["n"] == 1 and "api_key" not in info.params and "headers" in info.params
    assert info.params["prompt_tokens"] == [200, 2000] and info.params["max_tokens"] == 128  # not mistaken for keys
    assert "Authorization" not in info.params["headers"]
    recs = s.load_records(run.id)
    assert recs[0].error_message == "401 for key ***"


def test_exception_and_ctrl_c_leave_partial(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    with pytest.raises(RuntimeError):
        with s.recording("bench") as run:
            run.add(rec(1))
            run.add(rec(2))
            raise RuntimeError("server died")
    info = s.get(run.id)
    assert info.status == "partial" and info.n_records == 2 and "server died" in (info.error or "")
    assert len(s.load_records(run.id)) == 2
    with pytest.raises(KeyboardInterrupt):
        with s.recording("bench") as run:
            run.add(rec(1))
            raise KeyboardInterrupt
    assert s.get(run.id).status == "partial" and s.get(run.id).error == "interrupted"
    with s.recording("probe") as run:
        run.finish({"n": 1}, status="partial")
    assert s.get(run.id).status == "partial" and s.get(run.id).summary == {"n": 1}


def test_concurrent_threads(tmp_path: Path) -> None:
    out: list[str] = []
    ts = [threading.Thread(target=thread_writer, args=(tmp_path, k, out)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = open_store(tmp_path)
    runs = s.list_runs(limit=None)
    assert len(runs) == 24 and len(set(out)) == 24
    assert all(r.status == "complete" and r.n_records == 10 for r in runs)
    assert all(len(s.load_records(r.id)) == 10 for r in runs)
    assert sorted((r.params["k"], r.params["j"]) for r in runs) == [(k, j) for k in range(8) for j in range(3)]


def test_migrates_v1_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "r1.jsonl").write_text(rec(7).to_json() + "\n")
    con = sqlite3.connect(db)
    for stmt in store_mod._MIGRATIONS[1]:
        con.execute(stmt)
    con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    con.execute("INSERT INTO schema_version VALUES (1)")
    con.execute(
        "INSERT INTO runs (id, kind, target, model, params, started_at, ended_at, status, summary, records_path, "
        "n_records) VALUES ('r1', 'probe', 'http://h:1', 'm', '{\"a\": 1}', 100.0, 101.0, 'complete', "
        "'{\"ttft_s\": 0.1}', 'records/r1.jsonl', 1)"
    )
    con.commit()
    con.close()
    s = open_store(db)
    assert s.schema_version() == SCHEMA_VERSION
    info = s.get("r1")
    assert info.n_warmup is None and info.n_measured == 1  # an old run: warm-ups were not counted apart
    assert (info.kind, info.model, info.params, info.summary, info.status) == ("probe", "m", {"a": 1}, {"ttft_s": 0.1}, "complete")
    assert info.engine is None and info.engine_version is None
    assert [r.id for r in s.load_records("r1")] == ["q7"]
    s.set_baseline("old", "r1")  # the v2 table exists
    with s.recording("probe", engine="vllm", engine_version="0.11") as run:
        run.finish({})
    assert s.get(run.id).engine_version == "0.11"
    open_store(db)  # idempotent


def test_newer_schema_refused(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    with sqlite3.connect(s.db_path) as con:
        con.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(InputError, match="newer"):
        open_store(tmp_path)


def test_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASESCOPE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store_mod.default_store_path() == tmp_path / "xdg" / "phasescope" / "runs.db"
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "custom.db"))
    assert open_store().db_path == tmp_path / "custom.db"
    d = tmp_path / "dir"
    d.mkdir()
    monkeypatch.setenv("PHASESCOPE_STORE", str(d))
    assert open_store().db_path == d / "runs.db"


def test_unwritable_location_is_input_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="cannot create"):
        open_store(f / "sub" / "runs.db")
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"not a database" * 100)
    with pytest.raises(InputError):
        open_store(bad)
