"""One run, one number (#16 item 6): ``probe --json``, ``show --json``, ``compare --json`` and the
HTML report's data print the same prefill tok/s, TTFT p50 and ITL p50 for one probe against the embedded engine —
equal to the last digit, because every one of them aggregates the records through
:mod:`phasescope.measure.aggregate` (or reads the summary that module computed).

``--repeat 4`` on purpose: with an even number of requests per size the old probe summary's
median(prompt) / median(TTFT) and ``show``'s median of per-request rates differ, and so do
``statistics.median`` and numpy's interpolated percentile in the last bits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine

KEYS = ("prefill_tok_s", "ttft_s", "itl_p50_s")


def _cli(args: list[str], env: dict[str, str]) -> str:
    p = subprocess.run([sys.executable, "-m", "phasescope", *args], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_probe_show_and_report_agree_to_the_last_digit(engine, tmp_path):
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "runs.db"), PHASESCOPE_HOME=str(tmp_path / "home"))
    probe = json.loads(_cli(["probe", engine.url, "--prompt-tokens", "16,96", "--max-tokens", "8", "--repeat", "4",
                             "--json"], env))
    run_id = probe["run_id"]
    assert run_id and len(probe["sizes"]) == 2
    show = json.loads(_cli(["show", run_id, "--json"], env))
    shown = {(r["group"], r["metric"]): r["value"] for r in show["metrics"]}
    for size in probe["sizes"]:
        group = f"prompt_tokens_target={size['prompt_tokens_target']}"
        for key in KEYS:
            v = size[key]
            assert isinstance(v, float) and v > 0, (group, key, v)
            assert shown[(group, key)] == v, (group, key, "show", shown[(group, key)], "probe", v)
    # compare reads the same aggregates: run A against itself shows A's numbers
    cmp = json.loads(_cli(["compare", run_id, run_id, "--json"], env))
    compared = {(m["group"], m["metric"]): m["a"] for m in cmp["metrics"]}
    for size in probe["sizes"]:
        group = f"prompt_tokens_target={size['prompt_tokens_target']}"
        for key in KEYS:
            assert compared[(group, key)] == size[key], (group, key, "compare", compared[(group, key)], "probe", size[key])
    out = tmp_path / "report.html"
    _cli(["report", run_id, "--out", str(out)], env)
    m = re.search(r'<script id="ps-data" type="application/json">(.*?)</script>', out.read_text(encoding="utf-8"), re.S)
    assert m, "the report embeds the numbers it shows as JSON (ps-data)"
    data = json.loads(m.group(1))
    (rep,) = [r for r in data["runs"] if r["id"] == run_id]
    points = {p["group"]: p for p in rep["points"]}
    for size in probe["sizes"]:
        group = f"prompt_tokens_target={size['prompt_tokens_target']}"
        for key in KEYS:
            assert points[group][key] == size[key], (group, key, "report", points[group][key], "probe", size[key])
        # the same rule counts the same requests: 4 measured per size, the warm-up never
        assert points[group]["n_ok"] == size["ok"] == 4
