"""Issue 31: a server that takes the connection and never answers costs one timeout, not two or eight.

A real 127.0.0.1 socket server (:class:`~phasescope.testing.hostile_fake.HostileServer`) answers the
discovery GETs and then reads every POST without sending a byte back (``post_silent``: ``/tokenize``
too; ``gen_silent``: its ``/tokenize`` answers, generation never does). ``bench`` used to wait out six
``/tokenize`` probes, the prompt calibration and the run (about 8 timeouts); ``probe`` and ``explain``
three probes and the calibration. Now the first request that runs out of the user's timeouts ends the
command: exit 3, one line, and — counted on the server, so a loaded machine cannot turn it red — no
second request waits after it. A run that was opened keeps what it has and is stored ``failed``
(nothing succeeded); bench, which builds its prompts before it opens a run, stores none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phasescope.testing.hostile_fake import HostileServer

T = 2.0  # every user timeout (s)
TIMEOUTS = ["--connect-timeout", str(T), "--ttft-timeout", str(T), "--itl-timeout", str(T)]
ARGS = {
    "bench": ["-n", "3", "--input-len", "8", "--output-len", "4", "--no-server-metrics"],
    "probe": ["-p", "16", "-n", "4", "-r", "1"],
    "explain": ["--budget", "60s", "--no-nvml"],
}


def _run(command: str, url: str, tmp_path: Path) -> tuple[int, str, float]:
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "store"), PHASESCOPE_RUNS_DIR=str(tmp_path / "runs"),
               PHASESCOPE_HOME=str(tmp_path / "home"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "phasescope", command, url, *TIMEOUTS, *ARGS[command]], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr, time.monotonic() - t0


def _runs(tmp_path: Path) -> list[dict]:
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "store"), PHASESCOPE_HOME=str(tmp_path / "home"))
    p = subprocess.run([sys.executable, "-m", "phasescope", "runs", "--json"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    return d["runs"] if isinstance(d, dict) else d


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["post_silent", "gen_silent"])
@pytest.mark.parametrize("command", ["bench", "probe", "explain"])
def test_a_server_that_never_answers_ends_the_command_at_its_first_timeout(command: str, mode: str,
                                                                            tmp_path: Path) -> None:
    with HostileServer(mode=mode).running() as srv:
        code, err, took = _run(command, srv.url, tmp_path)
        posts = [r for r in srv.requests if r[0] == "POST"]
        gen = [r for r in posts if r[1].endswith("completions")]
    assert code == 3, (code, err)
    assert "Traceback" not in err and "phasescope bug" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")]
    assert len(lines) == 1, err
    assert f"{T:g} s" in lines[0], lines[0]  # it names the timeout that ran out
    if mode == "post_silent":  # the first /tokenize probe is the one unanswered request
        assert len(posts) == 1 and posts[0][1] == "/tokenize", posts
        assert "/tokenize" in lines[0], lines[0]
    else:  # every /tokenize answered; the first generation request is the one that was not
        assert len(gen) == 1, posts
    runs = _runs(tmp_path)
    if command == "bench":  # its prompts are built before a run is opened: nothing is stored
        assert runs == [], runs
    else:  # the run was open: kept, with what it holds, as failed (no request succeeded)
        assert [r["status"] for r in runs] == ["failed"], runs
        assert runs[0]["error"], runs
