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


def test_a_cpu_plan_names_llamacpps_terms_and_what_they_do_not_cover() -> None:
    """On a CPU the cost-model line names the terms fitted on the synthetic grid, where the weight types come
    from, and a type the grid never measured; a GPU line has none of it."""
    def line(*args: str) -> str:
        r = CliRunner().invoke(app, ["plan", "--no-save", "-n", "4", *args], env={"COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        return next(ln for ln in r.output.splitlines() if ln.startswith("cost model:"))
    q4 = line("--model", "qwen2.5-0.5b", "--device", "cpu", "--quant", "q4_k_m")
    assert "42 ms per prompt" in q4 and "fitted on the synthetic grid" in q4, q4
    assert "falling back" in q4 and "not calibrated" not in q4, q4  # hidden 896: Q5_0 fallback, 8.8 ms of unpacking
    assert "0.0 ms dequantize" not in q4, q4
    f16 = line("--model", "llama-3.2-1b", "--device", "cpu", "--quant", "f16")
    assert "not calibrated for F16" in f16 and "0.0 ms dequantize" in f16, f16
    assert "per prompt" not in line("--model", "llama-3.2-1b", "--device", "h100-sxm")
