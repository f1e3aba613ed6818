"""Bad input through the installed entry point (``python -m phasescope`` in a fresh interpreter): one
line on stderr, exit 2, no traceback, before any request. Moved from the unit tier (they start
processes): test_theory_cli, test_i15_advice, test_i21_validation and test_probe_intervals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLAN = ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--no-save"]


def test_bad_files_via_subprocess(tmp_path: Path) -> None:
    """The installed entry point: malformed JSON, a config lacking keys, a non-GGUF file."""
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"hidden_size": 4096,')
    lacking = tmp_path / "config.json"
    lacking.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32}))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"\x00" * 64)
    env = {**os.environ, "PHASESCOPE_HOME": str(tmp_path / "cfg")}
    for argv, msg in [
        (["ceiling", "--config", str(bad_json)], "malformed JSON"),
        (["kv", "--config", str(lacking)], "lacks num_hidden_layers"),
        (["ceiling", "--gguf", str(fake)], "not a GGUF file"),
        (["ceiling", "--model", str(lacking)], "lacks"),
    ]:
        p = subprocess.run([sys.executable, "-m", "phasescope", *argv], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 2, (argv, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("phasescope: error:") and msg in lines[0], p.stderr
        assert p.stdout == ""


def test_bad_server_flags_are_one_error_line_before_anything_starts():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "phasescope", "explain", "http://127.0.0.1:9", "--server-flags", "-b lots",
                          "--no-save"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "phasescope: error: --server-flags: -b 'lots' is not a number" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(120)
def test_plan_huge_input_len_does_not_spin() -> None:
    """`plan --input-len 1000000000000` used to spin at 100 % CPU; now a clear error, fast."""
    p = subprocess.run([sys.executable, "-m", "phasescope", *PLAN, "--input-len", "1000000000000"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--input-len" in p.stderr


@pytest.mark.parametrize("args", [["--repeat", "often"], ["--repeat", "0"], ["--max-repeat", "1"]])
def test_bad_repeat_flags_are_one_line_before_any_request(args: list[str]) -> None:
    import subprocess
    import sys

    # port 9 (discard): nothing listens; the flags are refused before the probe tries to connect
    p = subprocess.run([sys.executable, "-m", "phasescope", "probe", "http://127.0.0.1:9", *args, "--no-save"],
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("phasescope: error: ") and ("--repeat" in lines[0] or "--max-repeat" in lines[0])
    assert "Traceback" not in p.stderr
