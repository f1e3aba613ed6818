"""Running the CLI in process for unit tests: ``run`` (exit code, stdout, stderr) and the autouse
``_home`` fixture (imported into a test module, it applies to every test there) so a test never reads or writes the user's saved ``local`` device;
``wait_for_records`` for tests that act on a CLI run in a subprocess once it has measured something."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from phasescope.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["phasescope", *argv])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True, name="_home")
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    return tmp_path / "cfg"


def wait_for_records(path: Path, n: int, timeout_s: float = 90.0) -> None:
    """Until a run has written ``n`` records to ``path`` (the warm-up's among them): a loaded host can take longer
    than a fixed sleep to start the CLI (a busy clean-clone run killed the server before one request finished)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path}: fewer than {n} records after {timeout_s:g} s")
