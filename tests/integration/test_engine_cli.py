"""The engine commands as a user runs them: ``phasescope serve`` / ``engine status|install|quantize``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from phasescope.engine.binary import find_llama_server

pytestmark = pytest.mark.engine

PS = [sys.executable, "-m", "phasescope"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a reaped child of a dead parent can linger as a zombie briefly; treat Z as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_url_serves_and_stops_cleanly(sig: int) -> None:
    proc = subprocess.Popen([*PS, "serve", "--json", "--parallel", "2", "--ctx-size", "1024"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(_read_json(proc))
        assert info["url"].startswith("http://127.0.0.1:") and info["parallel"] == 2
        assert urllib.request.urlopen(info["url"] + "/health", timeout=10).status == 200
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0  # the CLI turns SIGTERM into the Ctrl-C path: serve stops the engine and exits 0
    assert _wait_gone(info["pid"]), "llama-server left behind"
    assert "Traceback" not in proc.stderr.read()


def _read_json(proc: subprocess.Popen[str]) -> str:
    """``print_json`` writes an indented document; read lines until it parses."""
    assert proc.stdout is not None
    buf = ""
    for _ in range(200):
        line = proc.stdout.readline()
        if not line:
            break
        buf += line
        try:
            json.loads(buf)
            return buf
        except ValueError:
            continue
    raise AssertionError(f"no JSON from serve; got {buf!r}")


def test_serve_without_binary_is_one_line_exit_4(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PHASESCOPE_LLAMA_SERVER"}
    env["PHASESCOPE_ENGINE_DIR"] = str(tmp_path)
    r = subprocess.run([*PS, "serve"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 4
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("phasescope: error: llama-server is not built")
    assert "phasescope engine install" in lines[0]


def test_serve_port_in_use_exit_4() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run([*PS, "serve", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 4
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "Traceback" not in r.stderr


def test_status_json_reports_the_cache_and_an_empty_one(tmp_path: Path) -> None:
    r = subprocess.run([*PS, "engine", "status", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["ready"] is True
    assert st["llama_server"]["version"] and Path(st["llama_server"]["path"]).exists()
    assert st["model"]["verified"] is True
    env = {k: v for k, v in os.environ.items() if k != "PHASESCOPE_LLAMA_SERVER"}
    env["PHASESCOPE_ENGINE_DIR"] = str(tmp_path)
    r = subprocess.run([*PS, "engine", "status", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    st = json.loads(r.stdout)
    assert st["ready"] is False and "phasescope engine install" in st["llama_server"]["error"]
    assert st["build"]["binaries"]["llama-server"]["exists"] is False


def test_install_is_a_cached_no_op_and_accepts_an_existing_binary() -> None:
    r = subprocess.run([*PS, "engine", "install", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cached"] is True and out["build_s"] is None and Path(out["model_path"]).exists()
    binary = find_llama_server()
    r = subprocess.run([*PS, "engine", "install", "--llama-server", str(binary), "--no-model", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["external"] is True and out["llama_server"] == str(binary) and out["model_path"] is None


def test_quantize_makes_a_smaller_file_that_the_engine_serves(tmp_path: Path) -> None:
    r = subprocess.run([*PS, "engine", "quantize", "Q4_0", "--pure", "--force"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert "--allow-requantize" in r.stderr
    r = subprocess.run([*PS, "engine", "quantize", "Q4_0", "--pure", "--allow-requantize", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)
    out = Path(res["path"])
    assert res["type"] == "Q4_0" and out.exists() and out.name.endswith("-Q4_0-pure.gguf")
    from phasescope.engine import bundled_model_path, running_engine

    assert res["size_bytes"] < bundled_model_path().stat().st_size  # pure Q4_0 also shrinks the Q8_0 embedding
    with running_engine(model_path=out, parallel=1, ctx_size=512) as eng:
        props = json.loads(urllib.request.urlopen(eng.url + "/props", timeout=10).read())
        assert props["model_path"] == str(out)
    r = subprocess.run([*PS, "engine", "quantize", "Q9_9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown quantization type" in r.stderr
