"""Bad flags are bad input like any other: one line on stderr, exit code 2, no panel, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["kv", "--bogus"], "No such option: --bogus", "phasescope kv --help"),
    (["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--rate", "x"], "'--rate'", "phasescope plan --help"),
    (["nosuch"], "No such command 'nosuch'", "phasescope --help"),
    (["ceiling", "--batch"], "requires an argument", "--help`"),
]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "phasescope", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "what", "hint"), CASES)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], what: str, hint: str) -> None:
    p = _run(args)
    assert p.returncode == 2, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("phasescope: error: ") and what in lines[0] and hint in lines[0]
    assert "Traceback" not in p.stderr and "╭" not in p.stderr


def test_bare_command_prints_help_and_help_exits_0() -> None:
    p = _run([])
    assert p.returncode == 0 and "Usage" in p.stdout and "probe" in p.stdout
    p = _run(["probe", "--help"])
    assert p.returncode == 0 and "--prompt-tokens" in p.stdout
