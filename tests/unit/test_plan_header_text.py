"""plan's header names how a step's time is formed, not a bare "max" that reads like a truncated line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from phasescope.cli import app


def test_cost_model_line_says_what_max_means() -> None:
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "h100-sxm", "-n", "20", "--no-save"],
                           env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("cost model:"))
    assert not line.rstrip().endswith(", max"), line
    assert "max(memory, math)" in line, line
    js = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "h100-sxm", "-n", "20", "--no-save",
                                  "--json"])
    assert json.loads(js.output)["cost_model"]["params"]["overlap"] == "max"  # the JSON key keeps its value


def test_the_header_counts_cpus_as_cpus() -> None:
    for device, unit, kind in (("cpu", "1 CPU(s)", "cpu"), ("h100-sxm", "1 GPU(s)", "gpu")):
        r = CliRunner().invoke(app, ["plan", "--model", "qwen2.5-0.5b", "--device", device, "-n", "10", "--no-save"],
                               env={"COLUMNS": "300"})
        assert r.exit_code == 0, r.output
        assert f"· {unit}, tp 1" in r.output.splitlines()[0], r.output.splitlines()[0]
        js = CliRunner().invoke(app, ["plan", "--model", "qwen2.5-0.5b", "--device", device, "-n", "10", "--no-save", "--json"])
        assert json.loads(js.output)["device_kind"] == kind
