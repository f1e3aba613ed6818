"""The engine install against fake llama-server binaries (tiny shell scripts that are run: fault
injection only): cache adoption, a cached binary that does not run, an external binary, version
errors. Moved from tests/unit/test_engine_build.py (they start processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from phasescope.engine import build, paths
from phasescope.engine.binary import binary_version
from phasescope.errors import EngineError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_scripts import script  # noqa: E402  (its `cache` fixture comes through tests/conftest.py)




def test_install_adopts_a_build_made_by_hand_and_is_idempotent(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for t in paths.TARGETS:
        script(paths.bin_dir() / t, 'echo "version: 9.9.9 (build 1, commit abc)" >&2')
    monkeypatch.setattr(build, "find_tools", lambda **k: pytest.fail("must not build when binaries run"))
    res = build.install(with_model=False)
    assert res.cached and res.version == "9.9.9 (build 1, commit abc)"
    stamp = json.loads(paths.stamp_path().read_text())
    assert stamp["sdist_sha256"] == paths.SDIST_SHA256 and stamp["llama_server_version"] == res.version
    mtime = paths.stamp_path().stat().st_mtime_ns
    assert build.install(with_model=False).cached
    assert paths.stamp_path().stat().st_mtime_ns == mtime  # nothing rewritten on a no-op


def test_install_rebuilds_when_the_cached_binary_does_not_run(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for t in paths.TARGETS:
        script(paths.bin_dir() / t, "echo 'Illegal instruction' >&2; exit 132")

    def no_tools(**kw: object) -> build.Tools:
        raise EngineError("cannot build llama-server: missing cmake")

    monkeypatch.setattr(build, "find_tools", no_tools)
    steps: list[str] = []

    class R(build.Reporter):
        def step(self, message: str) -> None:
            steps.append(message)

    with pytest.raises(EngineError, match="missing cmake"):
        build.install(with_model=False, reporter=R())
    assert any("does not run" in s and "Illegal instruction" in s for s in steps)


def test_external_binary_is_used_as_is(cache: Path, tmp_path: Path) -> None:
    exe = script(tmp_path / "bin" / "llama-server", 'echo "version: 1.2.3 (x)"')
    res = build.install(llama_server=exe, with_model=False)
    assert res.external and res.llama_server == exe.resolve() and res.version == "1.2.3 (x)"
    assert not paths.version_dir().exists()  # nothing was built or downloaded


def test_binary_version_errors_carry_the_last_line(tmp_path: Path) -> None:
    exe = script(tmp_path / "llama-server", "echo 'error while loading shared libraries: libgomp.so.1' >&2; exit 127")
    with pytest.raises(EngineError, match="libgomp"):
        binary_version(exe)
