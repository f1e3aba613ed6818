"""Running the CLI in process for unit tests: ``run`` (exit code, stdout, stderr) and the autouse
``_home`` fixture (imported into a test module, it applies to every test there) so a test never reads or writes the user's saved ``local`` device."""

from __future__ import annotations

import sys
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
