"""Issue 31: ``runs`` on a read-only store exited 2 ("unable to open database file" from the schema
step). A store that cannot be written is still read by ``runs``, ``show``, ``compare`` and ``report``;
a write says one line naming the store (exit 3: a result could not be written).

The read-only file system is simulated by a ``sqlite3.connect`` whose connections refuse every write the
way SQLite does on one ("attempt to write a readonly database"); a real read-only tmpfs mount is used
as well where this process may mount one (root), and skipped otherwise."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from phasescope.measure.records import RequestRecord

from cli_helpers import run as cli

_WRITES = ("PRAGMA JOURNAL_MODE", "INSERT", "UPDATE", "DELETE", "CREATE", "BEGIN", "REPLACE", "DROP", "ALTER")


class _ReadOnlyConnection:
    def __init__(self, con: sqlite3.Connection) -> None:
        self._con = con

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(_WRITES):
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _read_only_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sqlite3.connect

    def connect(*a: Any, **kw: Any) -> Any:
        con = real(*a, **kw)
        return con if kw.get("uri") else _ReadOnlyConnection(con)  # immutable/ro URIs write nothing anyway

    monkeypatch.setattr(sqlite3, "connect", connect)


def _store_with_runs(tmp_path: Path) -> list[str]:
    from phasescope.store import open_store

    st = open_store(tmp_path / "store")
    ids = []
    for i in (1, 2):
        with st.recording("bench", "http://127.0.0.1:1", {"x": i}) as run:
            run.add(RequestRecord(id=f"r{i}", api="openai", target="http://h", ok=True, output_tokens=4))
            run.finish({"completed": 1, "status": "complete", "num_requests": 1})
        ids.append(run.id)
    return ids


def test_a_read_only_store_is_read_and_a_write_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _store_with_runs(tmp_path)
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    _read_only_sqlite(monkeypatch)
    code, out, err = cli(["runs"], capsys, monkeypatch)
    assert code == 0, err
    assert a in out and b in out
    code, out, err = cli(["runs", "--json"], capsys, monkeypatch)
    assert code == 0 and a in out, err
    code, out, err = cli(["show", a], capsys, monkeypatch)
    assert code == 0 and a in out, err
    code, out, err = cli(["compare", a, b], capsys, monkeypatch)
    assert code == 0, err
    code, out, err = cli(["report", a, "-o", str(tmp_path / "r.html")], capsys, monkeypatch)
    assert code == 0 and (tmp_path / "r.html").exists(), err
    # a write: one line naming the store and saying why, exit 3 (a result could not be written)
    code, out, err = cli(["compare", "--baseline", "main", "--set", a], capsys, monkeypatch)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 3, (code, err)
    assert "Traceback" not in err and "phasescope bug" not in err
    assert lines[0].startswith("phasescope: error:") and str(tmp_path / "store") in lines[0], err
    assert "read-only" in lines[0], err


@contextlib.contextmanager
def _ro_mount(where: Path) -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(where)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_runs_on_a_real_read_only_mount(tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    with _ro_mount(mnt):
        ids = _store_with_runs(mnt)
        if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        env = dict(os.environ, PHASESCOPE_STORE=str(mnt / "store"))
        p = subprocess.run([sys.executable, "-m", "phasescope", "runs"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert all(i in p.stdout for i in ids), p.stdout
        p = subprocess.run([sys.executable, "-m", "phasescope", "show", ids[0]], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and ids[0] in p.stdout, p.stderr
