"""Faults around the embedded engine give one clear error, and no llama-server is ever left behind.

These start their own short-lived engines (1–2 s each) or none at all; the happy path shares the
session ``engine`` fixture in test_engine.py."""

from __future__ import annotations

import os
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from phasescope.engine import running_engine
from phasescope.engine.model import ensure_bundled_model
from phasescope.errors import EngineError, InputError

pytestmark = pytest.mark.engine


def _gone(pid: int) -> bool:
    """True when no process has this pid any more (running_engine reaps its child, so no zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_stops_the_server_after_the_block_and_on_exceptions() -> None:
    with running_engine(parallel=1, ctx_size=512) as eng:
        assert urllib.request.urlopen(eng.url + "/health", timeout=10).status == 200
        pid = eng.pid
    assert _gone(pid)
    with pytest.raises(RuntimeError, match="boom"):
        with running_engine(parallel=1, ctx_size=512) as eng:
            pid = eng.pid
            raise RuntimeError("boom")
    assert _gone(pid)
    with pytest.raises(KeyboardInterrupt):
        with running_engine(parallel=1, ctx_size=512) as eng:
            pid = eng.pid
            raise KeyboardInterrupt
    assert _gone(pid)


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(EngineError, match=rf"port {port} on 127.0.0.1 is already in use"):
            with running_engine(port=port, parallel=1, ctx_size=512):
                pass


def test_explicit_free_port_is_used() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with running_engine(port=port, parallel=1, ctx_size=512) as eng:
        assert eng.url == f"http://127.0.0.1:{port}"


def test_corrupt_gguf_shows_the_servers_last_error_line(tmp_path: Path) -> None:
    good = ensure_bundled_model()
    bad = tmp_path / "truncated.gguf"
    with good.open("rb") as f:
        bad.write_bytes(f.read(2_000_000))  # a real header, then the file ends mid-tensor-data
    with pytest.raises(EngineError) as ei:
        with running_engine(model_path=bad, parallel=1, ctx_size=512):
            pass
    msg = str(ei.value)
    assert "exited during startup" in msg and str(bad) in msg
    assert "log: " in msg and Path(msg.rsplit("log: ", 1)[1]).exists()
    assert "failed" in msg.lower() or "error" in msg.lower()


def test_non_gguf_model_is_an_input_error(tmp_path: Path) -> None:
    p = tmp_path / "notes.gguf"
    p.write_text("not a model")
    with pytest.raises(InputError, match="not a GGUF file"):
        with running_engine(model_path=p):
            pass
    with pytest.raises(InputError, match="model file not found"):
        with running_engine(model_path=tmp_path / "missing.gguf"):
            pass


def test_missing_binary_says_to_run_engine_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHASESCOPE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PHASESCOPE_ENGINE_DIR", str(tmp_path / "empty"))
    with pytest.raises(EngineError, match=r"phasescope engine install"):
        with running_engine():
            pass
    monkeypatch.setenv("PHASESCOPE_LLAMA_SERVER", str(tmp_path / "nope" / "llama-server"))
    with pytest.raises(EngineError, match="PHASESCOPE_LLAMA_SERVER .*no executable llama-server"):
        with running_engine():
            pass


def test_killed_engine_is_detected_and_named() -> None:
    with pytest.raises(EngineError, match=r"stopped unexpectedly \(killed by SIGKILL\)") as ei:
        with running_engine(parallel=1, ctx_size=512) as eng:
            pid = eng.pid
            os.kill(eng.pid, signal.SIGKILL)
            eng.process.wait(timeout=10)
            with pytest.raises(EngineError, match="stopped unexpectedly"):
                eng.check()
            urllib.request.urlopen(eng.url + "/health", timeout=5)  # the user's code fails...
    assert isinstance(ei.value.__cause__, (urllib.error.URLError, ConnectionError))  # ...and is explained
    assert _gone(pid)


def test_engine_dying_under_a_block_that_swallows_errors_still_raises() -> None:
    """Clients record failures instead of raising; the run must still not end as a success."""
    with pytest.raises(EngineError, match=r"stopped unexpectedly \(exit status 0\)"):  # llama-server exits 0 on SIGTERM
        with running_engine(parallel=1, ctx_size=512) as eng:
            os.kill(eng.pid, signal.SIGTERM)
            eng.process.wait(timeout=10)


def test_server_dies_with_a_sigkilled_parent() -> None:
    """Even phasescope killed with SIGKILL (no cleanup possible) leaves no llama-server behind (Linux)."""
    import subprocess
    import sys
    import time

    code = ("from phasescope.engine import running_engine\nimport time\n"
            "with running_engine(parallel=1, ctx_size=512) as e:\n    print(e.pid, flush=True)\n    time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not _gone(pid):
        time.sleep(0.1)
    assert _gone(pid)
