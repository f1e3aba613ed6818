"""`phasescope ceiling | kv | devices | models | hw` through the real entry point: JSON contracts and
bad input → one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")




def test_ceiling_json_seed_contract(capsys, monkeypatch) -> None:
    code, out, _ = run(["ceiling", "--weights-gb", "16", "--json"], capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    rows = doc["devices"]
    assert [r["device"] for r in rows] == ["cpu-ddr5-5600-2ch", "a10g", "l40s", "rtx-4090", "a100-80gb-sxm", "h100-sxm"]
    assert [r["mem_bandwidth_gb_s"] for r in rows] == [90, 600, 864, 1008, 2039, 3350]
    assert [round(r["decode_ceiling_tok_s"]) for r in rows] == [6, 38, 54, 63, 127, 209]
    for r in rows:
        assert r["prefill_floor_s"] > 0
        assert r["binding_roof"] == "bandwidth" and r["compute_roof_tok_s"] > r["bandwidth_roof_tok_s"]
        assert r["ridge_batch"] > 1


def test_ceiling_table_prints_the_six(capsys, monkeypatch) -> None:
    code, out, _ = run(["ceiling", "--weights-gb", "16"], capsys, monkeypatch)
    assert code == 0
    for dev, ceil in [("cpu-ddr5-5600-2ch", "6"), ("a10g", "38"), ("l40s", "54"), ("rtx-4090", "63"),
                      ("a100-80gb-sxm", "127"), ("h100-sxm", "209")]:
        line = next(ln for ln in out.splitlines() if dev in ln)
        assert f" {ceil} " in line


def test_ceiling_model_quant_devices(capsys, monkeypatch) -> None:
    code, out, _ = run(["ceiling", "-m", "llama-3.1-8b", "--quant", "fp8", "-d", "h100", "-d", "a100-80gb-sxm",
                        "--bandwidth-gb-s", "100", "--context", "4096", "--batch", "32", "--prompt", "4096", "--json"],
                       capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    assert doc["model"]["weight_format"] == "fp8"
    ids = [r["device"] for r in doc["devices"]]
    assert ids == ["h100-sxm", "a100-80gb-sxm", "custom"]
    h100 = doc["devices"][0]
    assert h100["compute_path"] == "fp8" and h100["peak_tflops"] == 1978.9
    assert doc["devices"][1]["compute_path"] == "fp8" and doc["devices"][1]["peak_tflops"] == 312  # no FP8 on A100
    assert h100["kv_bytes_read"] == 4096 * 131_072
    assert h100["aggregate_ceiling_tok_s"] > h100["decode_ceiling_tok_s"]
    code, out, _ = run(["ceiling", "-m", "llama-3.1-8b", "-d", "all", "--json"], capsys, monkeypatch)
    assert code == 0 and len(json.loads(out)["devices"]) >= 35


def test_kv_json(capsys, monkeypatch) -> None:
    code, out, _ = run(["kv", "-m", "llama-3.1-8b", "--context", "8000", "--json"], capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    assert doc["kv_bytes_per_token"] == 131_072
    assert doc["kv_bytes_per_sequence"] == 1_048_576_000
    assert doc["max_concurrent_sequences"] is None and doc["pool"] is None
    code, out, _ = run(["kv", "-m", "llama-3.1-8b", "--context", "8000", "-d", "a100-80gb-sxm", "--json"], capsys, monkeypatch)
    doc = json.loads(out)
    pool = 80e9 * 0.9 - 8_030_261_248 * 2
    assert doc["max_concurrent_sequences"] == int(pool // 1_048_576_000)
    assert doc["pool_tokens"] == int(pool // 131_072)
    code, out, _ = run(["kv", "-m", "deepseek-v3", "--kv-dtype", "bf16", "--gpu-mem-gb", "1128",
                        "--gpu-memory-utilization", "0.95", "--context", "1000", "--json"], capsys, monkeypatch)
    doc = json.loads(out)
    assert doc["kind"] == "mla" and doc["kv_bytes_per_token"] == 70_272
    assert doc["pool"]["gpu_memory_utilization"] == 0.95
    code, out, _ = run(["kv", "-m", "llama-3.1-8b", "--kv-dtype", "q8_0", "--gpu-mem-gb", "24", "--weights-gb", "4.9",
                        "--context", "8000", "--json"], capsys, monkeypatch)
    doc = json.loads(out)
    assert doc["pool"]["weight_bytes"] == 4.9e9 and doc["kv_bytes_per_token"] == 131_072 * 34 / 64


def test_devices_and_models_json(capsys, monkeypatch) -> None:
    code, out, _ = run(["devices", "--json"], capsys, monkeypatch)
    assert code == 0 and len(json.loads(out)["devices"]) >= 35
    code, out, _ = run(["models", "--json"], capsys, monkeypatch)
    models = json.loads(out)["models"]
    assert code == 0 and len(models) >= 30
    assert {m["id"]: m["kv_bytes_per_token_fp16"] for m in models}["llama-3.1-8b"] == 131_072
    code, out, _ = run(["devices"], capsys, monkeypatch)
    assert code == 0 and "h100-sxm" in out


BAD = [
    (["ceiling", "--config", "/nonexistent/config.json"], "not found"),
    (["ceiling", "--gguf", "/nonexistent/m.gguf"], "not found"),
    (["ceiling", "--weights-gb", "16", "-d", "h900"], "unknown device"),
    (["ceiling", "--weights-gb", "16", "--quant", "q9_x"], "unknown quantization"),
    (["ceiling", "-m", "no-such-model"], "no shape for no-such-model"),
    (["ceiling"], "no model given"),
    (["ceiling", "-m", "llama-3.1-8b", "--weights-gb", "3"], "only one of"),
    (["ceiling", "--weights-gb", "-1"], "must be > 0"),
    (["ceiling", "--weights-gb", "16", "--batch", "0"], "--batch"),
    (["kv", "-m", "llama-3.1-8b", "--kv-dtype", "fp7"], "unknown KV-cache dtype"),
    (["kv", "-m", "llama-3.1-8b", "-d", "cpu"], "no fixed memory size"),
    (["kv", "-m", "llama-3.1-8b", "--gpu-mem-gb", "24", "--gpu-memory-utilization", "1.5"], "gpu-memory-utilization"),
    (["ceiling", "-d", "local", "--weights-gb", "1"], "no local device"),
    (["hw", "--rounds", "0"], "--rounds must be >= 1"),
]


@pytest.mark.parametrize("argv,msg", BAD, ids=[" ".join(a[:3]) + f" [{m}]" for a, m in BAD])
def test_bad_input_one_line_exit_2(argv, msg, capsys, monkeypatch) -> None:
    code, out, err = run(argv, capsys, monkeypatch)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("phasescope: error: "), err
    assert msg in lines[0]
    assert "Traceback" not in err and out == ""


def test_derived_cpu_peaks() -> None:
    from phasescope.theory.hw import derived_peaks

    zen5 = derived_peaks(2, 2.6, {"avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}, "x86_64")
    assert zen5.fp32_flop_per_cycle == 64
    assert zen5.fp32_tflops == pytest.approx(2 * 64 * 2.6 / 1000)
    assert zen5.bf16_tflops == pytest.approx(2 * zen5.fp32_tflops)
    assert zen5.int8_tops == pytest.approx(4 * zen5.fp32_tflops)
    # the catalog's DDR5 desktop row: 16 Zen 4 cores x 32 FLOP/cycle x 5.0 GHz = 2.56 TFLOPS FP32
    zen4 = derived_peaks(16, 5.0, {"avx", "avx2", "fma"}, "x86_64")
    assert zen4.fp32_tflops == pytest.approx(2.56)
    assert zen4.int8_tops == pytest.approx(2 * 2.56)
    assert derived_peaks(4, None, set()) is None
