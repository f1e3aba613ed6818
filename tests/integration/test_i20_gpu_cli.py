"""GPU telemetry end to end (issue 20): bench / probe / watch / report against a fake LLM server and
a fake dcgm-exporter that follows the server's own activity (real loopback HTTP servers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phasescope.testing import FakeServer
from phasescope.testing.gpu_fake import FakeDcgmExporter, server_activity

PS = [sys.executable, "-m", "phasescope"]


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*PS, *args], capture_output=True, text=True, timeout=timeout, env=e)


def _bench(url: str, extra: list[str], tmp: Path, name: str) -> dict[str, Any]:
    p = _run(["bench", url, "-n", "6", "-c", "1", "--input-len", "64", "--output-len", "40",
              "--metrics-interval", "0.1", "--warmup", "0", "--no-store", "--out", str(tmp / name), "--json", *extra])
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture()
def servers():  # type: ignore[no-untyped-def]
    with FakeServer(flavor="vllm", ttft_s=0.25, itl_s=0.01).running() as llm:
        act = server_activity(llm)
        with FakeDcgmExporter(act, collect_interval_s=0.1).running() as dcgm:
            yield llm, dcgm


def test_bench_gpu_section_per_phase(servers: Any, tmp_path: Path) -> None:
    llm, dcgm = servers
    s = _bench(llm.url, ["--gpu-metrics", dcgm.url], tmp_path, "gpu")
    g = s["gpu"]
    assert g["available"] and g["device_id"] == "h100-sxm"
    pre, dec = g["phases"]["prefill"], g["phases"]["decode"]
    assert pre["windows"] >= 3 and dec["windows"] >= 3
    # the hardware's view of the phases: prefill busies the tensor pipes, decode the DRAM
    assert dec["dram_active"] > pre["dram_active"] and pre["tensor_active"] > dec["tensor_active"]
    assert dec["dram_active"] > 0.6 and dec["tensor_active"] < 0.3
    for k in ("power_w", "energy_j"):
        assert pre[k] > 0 and dec[k] > 0
    assert dec["j_per_output_token"] > 0 and pre["j_per_prompt_token"] > 0
    assert g["run"]["output_tokens"] == pytest.approx(s["total_output_tokens"], abs=1)
    assert g["bandwidth"]["decode_achieved_gb_s"] == pytest.approx(dec["dram_active"] * 3350, rel=1e-6)
    assert any("bandwidth-bound" in e for e in g["evidence"])
    # the timeline is on the run's clock, like the server's
    t_srv = [r["t_s"] for r in s["server_metrics"]["timeline"]]
    t_gpu = [r["t_s"] for r in g["timeline"] if r["in_run"]]
    assert t_gpu and min(t_gpu) < max(t_srv) and max(t_gpu) > min(t_srv)
    assert (tmp_path / "gpu" / "summary.json").exists() and "gpu" in json.loads((tmp_path / "gpu" / "summary.json").read_text())


def test_bench_without_gpu_source_is_unchanged(servers: Any, tmp_path: Path) -> None:
    llm, dcgm = servers
    plain = _bench(llm.url, [], tmp_path, "plain")
    with_gpu = _bench(llm.url, ["--gpu-metrics", dcgm.url], tmp_path, "with")
    assert "gpu" not in plain
    assert set(with_gpu) - set(plain) == {"gpu"} and set(plain) <= set(with_gpu)
    # and the console shows no GPU block
    p = _run(["bench", llm.url, "-n", "2", "--no-store", "--out", str(tmp_path / "c")])
    assert p.returncode == 0 and "GPU" not in p.stdout


@pytest.mark.parametrize("bad", ["llm", "closed"])
def test_bench_with_a_wrong_gpu_url_still_measures(servers: Any, tmp_path: Path, bad: str) -> None:
    llm, _ = servers
    url = llm.url if bad == "llm" else "http://127.0.0.1:9"  # the LLM's own /metrics; nothing listening
    s = _bench(llm.url, ["--gpu-metrics", url], tmp_path, bad)
    assert s["completed"] == 6
    g = s["gpu"]
    assert g["available"] is False and g["sources"][0]["ok"] is False
    assert ("not a dcgm-exporter" if bad == "llm" else "nothing is listening") in g["sources"][0]["reason"]
    assert any(w["kind"] == "gpu_telemetry" for w in g["warnings"])


def test_probe_learns_the_device_from_telemetry(tmp_path: Path) -> None:
    env = {"PHASESCOPE_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}  # no `hw` device
    with FakeServer(flavor="vllm", ttft_s=0.05, prefill_tok_s=4000, itl_s=0.005).running() as llm:
        with FakeDcgmExporter(server_activity(llm), collect_interval_s=0.1).running() as dcgm:
            base = ["probe", llm.url, "-p", "200", "-n", "30", "-r", "2", "--model-spec", "llama-3.1-8b",
                    "--no-save", "--json", "--out", str(tmp_path / "p")]
            without = _run(base, env)
            with_gpu = _run([*base, "--gpu-metrics", dcgm.url], env)
    assert without.returncode == 0 and with_gpu.returncode == 0, with_gpu.stderr
    a, b = json.loads(without.stdout), json.loads(with_gpu.stdout)
    assert a["ceilings"] is None and "gpu" not in a
    assert b["ceilings"]["device"]["id"] == "h100-sxm"
    assert set(b) - set(a) == {"gpu"}
    assert b["gpu"]["bandwidth"]["decode_ceiling_tok_s"] == pytest.approx(b["ceilings"]["sizes"][0]["decode_ceiling_tok_s"])
    assert b["gpu"]["bandwidth"]["decode_efficiency"] is not None


def test_watch_shows_gpu_rows_only_with_a_gpu_source(servers: Any) -> None:
    llm, dcgm = servers
    p = _run(["watch", llm.url, "--once", "-i", "0.3", "--json", "--gpu-metrics", dcgm.url])
    q = _run(["watch", llm.url, "--once", "-i", "0.3", "--json"])
    assert p.returncode == 0 and q.returncode == 0, p.stderr
    a, b = json.loads(p.stdout), json.loads(q.stdout)
    assert "gpu" not in b and set(a) - set(b) == {"gpu"}
    (row,) = a["gpu"]["gpus"]
    assert row["model_name"] == "NVIDIA H100 80GB HBM3" and row["power_w"] > 0
    t = _run(["watch", llm.url, "--once", "-i", "0.3", "--gpu-metrics", dcgm.url])
    assert "H100 80GB HBM3" in t.stdout and "DRAM" in t.stdout


def test_report_draws_the_gpu_timeline_under_the_server_timeline(servers: Any, tmp_path: Path) -> None:
    llm, dcgm = servers
    env = {"PHASESCOPE_STORE": str(tmp_path / "runs.db")}
    ids = []
    for extra in (["--gpu-metrics", dcgm.url], []):
        p = _run(["bench", llm.url, "-n", "4", "-c", "1", "--output-len", "30", "--metrics-interval", "0.1",
                  "--json", *extra], env)
        assert p.returncode == 0, p.stderr
        ids.append(json.loads(p.stdout)["run_id"])
    out = tmp_path / "r.html"
    p = _run(["report", ids[0], "--out", str(out)], env)
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "GPU activity during the run" in page and "dram_active" in page
    assert page.index("Server queue, KV cache") < page.index("GPU activity during the run")
    out2 = tmp_path / "r2.html"
    assert _run(["report", ids[1], "--out", str(out2)], env).returncode == 0
    assert "GPU activity" not in out2.read_text() and "gpu_timeline" not in out2.read_text()


@pytest.mark.slow
def test_explain_gains_gpu_evidence_findings(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.03, prefill_tok_s=8000, itl_s=0.005).running() as llm:
        with FakeDcgmExporter(server_activity(llm), collect_interval_s=0.1).running() as dcgm:
            p = _run(["experiment", "prompt-scaling", llm.url, "--budget", "10s", "--model-spec", "llama-3.1-8b",
                      "--gpu-metrics", dcgm.url, "--no-save", "--json"], timeout=240)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["gpu"]["available"] and doc["gpu"]["device_id"] == "h100-sxm"
    gpu_f = [f for f in doc["findings"] if f["id"].startswith("gpu-")]
    assert gpu_f, doc["findings"]
    for f in gpu_f:  # each sentence is backed by the numbers of the gpu section it came from
        assert f["evidence"] and all("dcgm-exporter" in e["source"] for e in f["evidence"])
        phase = "decode" if "decode" in f["id"] else "prefill"
        ev = {e["what"]: e["value"] for e in f["evidence"]}
        assert ev[f"{phase} tensor active"] == pytest.approx(doc["gpu"]["phases"][phase]["tensor_active"])


def test_bench_reads_local_gpus_through_nvml_when_present(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from phasescope.load.bench import BenchConfig, run_bench
    from phasescope.metrics import gpu as G
    from phasescope.testing.nvml_stub import NvmlStub

    with FakeServer(flavor="vllm", ttft_s=0.25, itl_s=0.01).running() as llm:
        monkeypatch.setattr(G, "NVML_OVERRIDE", NvmlStub(server_activity(llm)))
        cfg = dict(url=llm.url, num_prompts=5, max_concurrency=1, input_len=32, output_len=40, warmup=0,
                   metrics_interval_s=0.1, store=False)
        on = run_bench(BenchConfig(**cfg, out_dir=str(tmp_path / "on"))).summary
        off = run_bench(BenchConfig(**cfg, nvml=False, out_dir=str(tmp_path / "off"))).summary
    assert "gpu" not in off and set(on) - set(off) == {"gpu"}
    g = on["gpu"]
    assert [s["kind"] for s in g["sources"]] == ["nvml"] and g["sources"][0]["ok"]
    pre, dec = g["phases"]["prefill"], g["phases"]["decode"]
    assert dec["dram_active"] > pre["dram_active"] and pre["tensor_active"] > dec["tensor_active"]
    assert dec["j_per_output_token"] > 0


def test_frozen_exporter_values_are_called_out(tmp_path: Path) -> None:
    """dcgm-exporter's default 30 s collect interval seen through 0.1 s scrapes: a warning with the fix."""
    with FakeServer(flavor="vllm", ttft_s=0.25, itl_s=0.01).running() as llm:
        with FakeDcgmExporter(server_activity(llm), mode="frozen").running() as dcgm:
            s = _bench(llm.url, ["--gpu-metrics", dcgm.url], tmp_path, "frozen")
    ws = s["gpu"]["warnings"]
    assert any("did not change" in w["message"] and "-c 1000" in (w["fix"] or "") for w in ws), ws


def test_exporter_credentials_stay_out_of_the_stored_params() -> None:
    from phasescope.load.bench import BenchConfig

    p = BenchConfig(gpu_metrics=["http://admin:s3cret@gpu:9400/metrics"]).params()
    assert "s3cret" not in json.dumps(p)


@pytest.mark.parametrize("cmd", [["bench", "http://127.0.0.1:9"], ["probe", "http://127.0.0.1:9"],
                                 ["watch", "http://127.0.0.1:9", "--once"]])
def test_a_malformed_exporter_url_is_one_line_of_bad_input(cmd: list[str]) -> None:
    p = _run([*cmd, "--gpu-metrics", "http://"])
    # checked at the CLI boundary like every URL flag, before any connection
    assert p.returncode == 2 and p.stderr.strip() == "phasescope: error: --gpu-metrics: no host in URL http://"
