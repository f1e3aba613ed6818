"""A 429/503 hint names only what the command printing it has, and says what was already tried.

bench has no ``--retries`` (its lever is the load it puts on the server); probe has one, and once
it retried, telling the user to "pass --retries N" misreads what happened.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import typer

from phasescope.cli import app
from phasescope.testing import FakeServer

PS = [sys.executable, "-m", "phasescope"]


def _options(command: str) -> set[str]:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in p.opts if o.startswith("--")}


def _error_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("phasescope: error:")]
    assert p.returncode == 3 and len(lines) == 1, (p.returncode, p.stdout, p.stderr)
    return lines[0]


def _run(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PHASESCOPE_API_KEY")}
    return subprocess.run([*PS, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def _flags_named(line: str) -> set[str]:
    return set(re.findall(r"--[a-z][a-z-]*", line))


def test_bench_overload_hint_names_only_bench_flags(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, fault="overloaded").running() as srv:
        p = _run(["bench", srv.url, "-n", "4", "-c", "2", "--input-len", "8", "--output-len", "4", "--no-store",
                  "--no-server-metrics", "--out", str(tmp_path / "o")], str(tmp_path))
    line = _error_line(p)
    assert "overloaded (429)" in line
    named = _flags_named(line)
    assert named and named <= _options("bench"), (named, line)


def test_probe_overload_hint_after_retries_says_they_were_used() -> None:
    small = ["--prompt-tokens", "20,40", "--max-tokens", "4", "--repeat", "1", "--no-save"]
    with tempfile.TemporaryDirectory() as cwd, \
            FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, fault="overloaded", retry_after=0.05).running() as srv:
        no_retry = _error_line(_run(["probe", srv.url, *small], cwd))
        retried = _error_line(_run(["probe", srv.url, *small, "--retries", "2"], cwd))
    assert "pass --retries N" in no_retry and _flags_named(no_retry) <= _options("probe")
    assert "after 2 retries" in retried and "pass --retries N" not in retried, retried
    assert _flags_named(retried) <= _options("probe")
