"""Typed results (phasescope._results): ``to_json()`` is, key for key, the ``--json`` document the command
printed before results were typed, and a result still reads as the dict the API used to return.

Each command's producer is run on fixed inputs (plan and ceiling as they are: no server; probe and bench with
the library call replaced by a fixed document, since they need a server) and the document the old code
printed — the producer's dict itself — is compared with the new ``--json`` output, the new ``--format json``
output and the Python API's ``to_json()``."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import phasescope
from phasescope import _results as R
from phasescope.cli import run
from phasescope.jsonutil import dumps

PLAN = ["--model", "llama-3.1-8b", "--device", "h100-sxm", "--rate", "4", "--num-requests", "40", "--seed", "3"]

PROBE_DOC: dict[str, Any] = {
    "target": "http://127.0.0.1:9", "api": "openai", "engine": "vllm", "engine_version": "0.9", "model": "m",
    "sizes": [{"prompt_tokens": 200, "repeats": 3, "n": 3, "ttft_s": 0.05, "ttft_s_ci": [0.04, 0.06],
               "prefill_tok_s": 4000.0, "decode_tok_s": 80.0, "decode_tok_s_ci": [78.0, 82.0]}],
    "verdict": {"ttft_claim": "grows", "text": ["TTFT grows with the prompt"]}, "warmup": None, "ceilings": None, "host": None,
    "warnings": [{"kind": "host_busy", "message": "m"}], "run_id": "r-1", "records_path": "/tmp/r-1",
}

BENCH_DOC: dict[str, Any] = {
    "target": "http://127.0.0.1:9", "model_id": "m", "status": "complete", "partial": False, "completed": 8,
    "failed": 0, "duration": 2.5, "request_throughput": 3.2, "output_throughput": 102.4, "median_ttft_ms": 40.0,
    "p99_ttft_ms": 90.0, "median_itl_ms": 9.0, "p99_itl_ms": 20.0, "warnings": [], "run_id": "b-1",
    "records_path": "/tmp/b-1", "percentiles": [50, 99],
}


def _json_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    code = run(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _no_wall(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "sim_wall_s"}  # the simulator's own wall time


def test_plan_json_is_run_plans_document(capsys: pytest.CaptureFixture[str]) -> None:
    from phasescope.planning.api import PlanOptions, run_plan

    old = json.loads(dumps(run_plan(PlanOptions(model="llama-3.1-8b", device="h100-sxm", rate=4, num_requests=40,
                                                seed=3, save=False))))
    assert _no_wall(_json_out(capsys, ["plan", *PLAN, "--no-save", "--json"])) == _no_wall(old)
    assert _no_wall(_json_out(capsys, ["plan", *PLAN, "--no-save", "--format", "json"])) == _no_wall(old)
    res = phasescope.plan(model="llama-3.1-8b", device="h100-sxm", rate=4, num_requests=40, seed=3, save=False)
    assert isinstance(res, R.PlanResult) and res.mode == "single" and res.run_id is None
    assert _no_wall(json.loads(dumps(res.to_json()))) == _no_wall(old)
    assert res.summary["completed"] == old["summary"]["completed"] == 40


def test_ceiling_json_is_ceiling_reports_document(capsys: pytest.CaptureFixture[str]) -> None:
    from phasescope.theory.report import ceiling_report, resolve_devices, resolve_model

    old = ceiling_report(resolve_model(model="llama-3.1-8b", dtype="fp8"), resolve_devices(["h100-sxm", "l40s"], None),
                         quant="fp8", context=4096, tp=2)
    argv = ["ceiling", "--model", "llama-3.1-8b", "--dtype", "fp8", "-d", "h100-sxm", "-d", "l40s", "--context", "4096",
            "--tp", "2", "--json"]
    assert _json_out(capsys, argv) == json.loads(dumps(old))
    res = phasescope.ceiling("llama-3.1-8b", ["h100-sxm", "l40s"], dtype="fp8", context=4096, tp=2)
    assert isinstance(res, R.CeilingReport) and res.to_json() == old and res == old
    assert [d["device"] for d in res.devices] == ["h100-sxm", "l40s"]


@pytest.fixture
def fixed_probe(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake(url: Any, **kw: Any) -> dict[str, Any]:
        calls.append({"url": url, **kw})
        return json.loads(json.dumps(PROBE_DOC))

    import importlib

    monkeypatch.setattr(importlib.import_module("phasescope.probing"), "probe", fake)
    return calls


def test_probe_json_is_the_probe_document(capsys: pytest.CaptureFixture[str], fixed_probe: list[dict[str, Any]]) -> None:
    assert _json_out(capsys, ["probe", "http://127.0.0.1:9", "-p", "200", "--json"]) == PROBE_DOC
    res = phasescope.probe("http://127.0.0.1:9", prompt_tokens=[200], max_tokens=16)
    assert isinstance(res, R.ProbeResult) and res.to_json() == PROBE_DOC
    assert (res.verdict["ttft_claim"], res.run_id, res.engine, res.sizes[0]["ttft_s"]) == ("grows", "r-1", "vllm", 0.05)  # type: ignore[index]
    assert fixed_probe[-1]["sizes"] == [200] and fixed_probe[-1]["max_tokens"] == 16


def test_bench_json_is_the_bench_summary(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import phasescope.load.bench as lb

    seen: list[Any] = []

    def fake(cfg: Any, **kw: Any) -> Any:
        seen.append(cfg)
        return SimpleNamespace(summary=json.loads(json.dumps(BENCH_DOC)), records_path="/tmp/b-1",
                               run=SimpleNamespace(write_error=None, interrupted=False))

    monkeypatch.setattr(lb, "run_bench", fake)
    assert _json_out(capsys, ["bench", "http://127.0.0.1:9", "-n", "8", "--json"]) == BENCH_DOC
    res = phasescope.bench("http://127.0.0.1:9", num_prompts=8, duration_s=30, drain_timeout_s=1.5)
    assert isinstance(res, R.BenchSummary) and res.to_json() == BENCH_DOC
    assert (res.completed, res.partial, res.p99_itl_ms, res.run_id) == (8, False, 20.0, "b-1")
    cfg = seen[-1]  # duration_s (the old keyword) became --duration; drain_timeout_s, no flag's, set as given
    assert (cfg.num_prompts, cfg.duration_s, cfg.drain_timeout_s) == (8, 30.0, 1.5)


def test_experiment_result_is_the_old_single_experiment_document() -> None:
    doc = {"experiments": {"prefix-cache": {"name": "prefix-cache", "fit": {"a": 1}}, "queue": {"name": "queue"}},
           "findings": [{"id": "f"}], "undecided": [], "run_id": "e-1", "host": None, "warnings": [{"kind": "k"}],
           "target": "t", "engine": "vllm", "model": "m", "gpu": {"source": "nvml"}, "budget_s": 60.0}
    report = SimpleNamespace(to_json=lambda: doc)
    # what cmd_explain built inline before results were typed
    old = dict(doc["experiments"].get("prefix-cache", {}))  # type: ignore[attr-defined]
    old.update({"findings": doc["findings"], "undecided": doc["undecided"], "run_id": doc["run_id"],
                "host": doc.get("host"), "warnings": doc.get("warnings", []),
                "target": doc["target"], "engine": doc["engine"], "model": doc["model"]})
    old["gpu"] = doc["gpu"]
    res = R.ExperimentResult.of(report, "prefix-cache")
    assert res.to_json() == old and res.name == "prefix-cache" and res.run_id == "e-1"


def test_a_result_reads_as_the_dict_the_api_returned() -> None:
    res = R.ProbeResult.from_json(dict(PROBE_DOC))
    assert res["sizes"] is res.sizes and res.get("gpu") is None and "verdict" in res
    assert dict(res) == PROBE_DOC and res == PROBE_DOC and len(res) == len(PROBE_DOC)
    assert json.loads(dumps(res.to_json())) == PROBE_DOC
    assert "run_id='r-1'" in repr(res) and "sizes=[1 items]" in repr(res)
    with pytest.raises(KeyError):
        res["no_such_key"]


def test_explain_report_is_a_result() -> None:
    assert issubclass(phasescope.ExplainReport, phasescope.Result)
    assert phasescope.ExplainReport.command == "explain"


def test_the_api_returns_a_failed_runs_result_and_passes_ctrl_c_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import phasescope.cli.cmd_plan as cp
    import phasescope.load.bench as lb

    failed = {**BENCH_DOC, "status": "failed", "completed": 0, "failed": 8, "errors_by_kind": {"http_500": 8}}
    monkeypatch.setattr(lb, "run_bench", lambda cfg, **kw: SimpleNamespace(
        summary=failed, records_path="/tmp/b-1", run=SimpleNamespace(write_error=None, interrupted=False)))
    res = phasescope.bench("http://127.0.0.1:9", num_prompts=8)  # the CLI exits 3 after printing it
    assert res.status == "failed" and res.failed == 8

    def interrupted(*a: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cp, "run_plan", interrupted)
    with pytest.raises(KeyboardInterrupt):
        phasescope.plan(model="llama-3.1-8b", device="h100-sxm", no_save=True)
