"""Engine-install test helpers shared by both tiers: a scratch engine cache and tiny shell scripts
standing in for llama.cpp's binaries (written by both tiers, run only by the integration tier)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHASESCOPE_ENGINE_DIR", str(tmp_path / "eng"))
    monkeypatch.delenv("PHASESCOPE_LLAMA_SERVER", raising=False)
    return tmp_path / "eng"
