"""Issue 19: `phasescope watch` against the real embedded llama-server under a short bench, in a
pseudo-terminal (the live dashboard, as a user sees it): the slot table shows per-slot decoded
tokens and context fill; `watch --once --json` carries `slots`."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\r")


def start_bench(url: str, tmp: Path, n: int = 12) -> subprocess.Popen[bytes]:
    """A short bounded bench on 127.0.0.1: n requests, 4 in flight, 96 output tokens each."""
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp / "store"))
    return subprocess.Popen([sys.executable, "-m", "phasescope", "bench", url, "-n", str(n), "-c", "4", "--input-len", "64",
                             "--output-len", "96", "--warmup", "0", "--no-server-metrics", "--no-store"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def stop(bench: subprocess.Popen[bytes]) -> None:
    """Seen enough: stop the bench as Ctrl-C would (it keeps a partial result) — no traceback."""
    if bench.poll() is None:
        bench.send_signal(signal.SIGINT)
    try:
        bench.wait(60)
    except subprocess.TimeoutExpired:
        bench.kill()
        bench.wait(30)
    err = bench.stderr.read().decode(errors="replace") if bench.stderr else ""
    assert "Traceback" not in err, err[-2000:]


def wait_busy(url: str, bench: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and bench.poll() is None:
        slots = json.loads(urllib.request.urlopen(url + "/slots", timeout=10).read())
        if any(s.get("is_processing") and (s.get("next_token") or [{}])[0].get("n_decoded", 0) > 0 for s in slots):
            return
        time.sleep(0.2)
    pytest.fail("the bench never had a slot decoding")


def run_in_pty(args: list[str], timeout_s: float) -> str:
    """Run phasescope in a pseudo-terminal (160×60) and return what it drew, escapes stripped."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="160", LINES="60", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    p = subprocess.Popen([sys.executable, "-m", "phasescope", *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                         close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(30)
        os.close(master)
    assert p.returncode == 0, out.decode(errors="replace")[-3000:]
    return ANSI.sub("", out.decode(errors="replace"))


def test_watch_dashboard_shows_slots_under_a_bench(engine, tmp_path: Path) -> None:
    bench = start_bench(engine.url, tmp_path)
    try:
        wait_busy(engine.url, bench)
        text = run_in_pty(["watch", engine.url, "--interval", "1", "--count", "3"], timeout_s=90)
    finally:
        stop(bench)
    assert "Slots (" in text, text[-3000:]
    rows = [line for line in text.splitlines() if re.match(r"^\s*│\s*\d+\s*│\s*(decode|prefill)", line)]
    assert rows, text[-3000:]
    decoding = []
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        slot, state, prompt, decoded, left, ctx = cells[:6]
        m = re.match(r"([\d,]+)/([\d,]+) (\d+) %", ctx)
        assert m, line  # context fill: tokens in the slot / n_ctx and the fill
        used, n_ctx = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
        assert n_ctx == engine.ctx_size // engine.parallel and 0 < used <= n_ctx
        if state == "decode":
            assert int(decoded.replace(",", "")) > 0 and int(prompt.replace(",", "")) > 0
            assert used == int(prompt.replace(",", "")) + int(decoded.replace(",", ""))
            decoding.append(slot)
    assert decoding, rows


def test_watch_once_json_has_slots_under_a_bench(engine, tmp_path: Path) -> None:
    bench = start_bench(engine.url, tmp_path, n=24)
    try:
        wait_busy(engine.url, bench)
        for _attempt in range(3):  # a snapshot can land between two waves of the bench
            r = subprocess.run([sys.executable, "-m", "phasescope", "watch", engine.url, "--once", "--json", "--interval", "1"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            d = json.loads(r.stdout)
            if any(s["state"] == "decode" for s in d["slots"]):
                break
    finally:
        stop(bench)
    assert d["engine"] == "llamacpp" and len(d["slots"]) == engine.parallel
    for s in d["slots"]:
        assert {"id", "state", "prompt_tokens", "decoded", "n_ctx"} <= set(s)
        assert s["n_ctx"] == engine.ctx_size // engine.parallel
    busy = [s for s in d["slots"] if s["state"] != "idle"]
    assert busy and d["slots_queue"]["busy"] == len(busy)
    assert any(s["decoded"] and s["decoded"] > 0 and s["context_fill"] > 0 for s in busy)


def test_watch_without_slots_endpoint_degrades_and_says_how_to_enable() -> None:
    # the real server started with --no-slots: /metrics still works, /slots answers 501
    from phasescope.engine import running_engine

    with running_engine(parallel=2, ctx_size=2048, extra_args=["--no-slots"]) as eng:
        r = subprocess.run([sys.executable, "-m", "phasescope", "watch", eng.url, "--once", "--json", "--interval", "0.5"],
                           capture_output=True, text=True, timeout=120)
        plain = subprocess.run([sys.executable, "-m", "phasescope", "watch", eng.url, "--once", "--interval", "0.5"],
                               capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="150"))
    assert r.returncode == 0 and plain.returncode == 0, r.stderr + plain.stderr
    d = json.loads(r.stdout)
    assert d["engine"] == "llamacpp" and d["running"] is not None
    assert d["slots"] is None
    assert "/slots is disabled (HTTP 501" in d["slots_note"] and "--no-slots" in d["slots_note"]
    assert "slots: /slots is disabled" in plain.stdout
