"""Issue 31: ``--out DIR`` on a full disk while the run store has room.

The full disk is simulated for DIR alone: ``os.write`` to a file under DIR raises ENOSPC (how a full
file system answers a write), from the start or after the first record, while the store in another
folder writes as usual — in process, no root, no tmpfs.

Before: with DIR full from the start the warm-up record reached the store, the run stopped at the
folder's first write, and the store kept a ``failed`` run (a claim that the server failed) holding one
warm-up record and no error. Now a folder that cannot take a record is found before the run starts: one
line naming the file and that no record was kept, exit 3, no request sent to measure and no run in
the store. A disk that fills during the run stops it there as before, and the store says ``partial``
with why (the file, the records it kept), not ``failed``.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from cli_helpers import isolated_home, run as cli  # noqa: F401  (isolated_home: autouse)
from phasescope.testing.fakeserver import FakeServer

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd to name an fd's file")


def _fill(monkeypatch: pytest.MonkeyPatch, folder: Path, room: int) -> None:
    """A disk of ``room`` bytes under ``folder``: an ``os.write`` into a file there that would take the
    folder's files past ``room`` fails with ENOSPC (what a full file system answers); removing a file
    frees its bytes, as on a disk."""
    real = os.write
    root = str(folder.resolve())

    def used() -> int:
        return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())

    def write(fd: int, data: bytes) -> int:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        if where.startswith(root + os.sep) and used() + len(data) > room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def _bench(url: str, out: Path, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch, n: int = 6) -> tuple[int, str, str]:
    return cli(["bench", url, "-n", str(n), "--max-concurrency", "1", "--input-len", "8", "--output-len", "4",
                "--no-server-metrics", "--out", str(out)], capsys, monkeypatch)


@pytest.mark.timeout(120)
def test_out_on_a_disk_full_from_the_start_is_refused_before_the_run(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.store import open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    out = tmp_path / "out"
    out.mkdir()
    with FakeServer(ttft_s=0.002, itl_s=0.001).running() as srv:
        _fill(monkeypatch, out, room=0)
        code, stdout, err = _bench(srv.url, out, capsys, monkeypatch)
        monkeypatch.undo()
        from phasescope.prompting import OVERHEAD_ID

        sent = [g.id for g in srv.log if not g.id.startswith(OVERHEAD_ID)]  # beside the prompt length check
    assert code == 3, err
    lines = [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(out / "records.jsonl") in lines[0] and "No space left on device" in lines[0], lines[0]
    assert "no record" in lines[0], lines[0]
    assert sent == [], sent  # no warm-up, no measured request
    db = tmp_path / "store" / "runs.db"
    assert not db.exists() or open_store(tmp_path / "store").list_runs() == []  # no run claimed


@pytest.mark.timeout(120)
def test_out_that_fills_during_the_run_is_a_partial_run_that_says_why(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Room for the check before the run and a few records (each 1–2 kB), not for 60."""
    from phasescope.safeio import SPACE_CHECK_BYTES
    from phasescope.store import open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    out = tmp_path / "out"
    out.mkdir()
    with FakeServer(ttft_s=0.002, itl_s=0.001).running() as srv:
        _fill(monkeypatch, out, room=SPACE_CHECK_BYTES + 1024)
        code, stdout, err = _bench(srv.url, out, capsys, monkeypatch, n=60)
        monkeypatch.undo()
    assert code == 3, err
    lines = [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    kept = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines() if ln.strip()]
    assert 1 <= len(kept) < 61, len(kept)
    assert str(out / "records.jsonl") in lines[0], lines[0]
    assert f"{len(kept)} records written before it are kept" in lines[0], lines[0]
    [info] = open_store(tmp_path / "store").list_runs()
    assert info.status == "partial", (info.status, info.error)  # stopped by the disk: not "failed" (the server)
    assert "records.jsonl" in (info.error or "") and "No space left" in (info.error or ""), info.error
    assert info.n_records >= len(kept)  # the store's copy kept at least what the folder did
