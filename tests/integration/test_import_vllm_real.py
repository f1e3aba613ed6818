"""issue 34: `compare` of a stored phasescope run against REAL `vllm bench serve --save-result` files (with and
without --save-detailed) from the same fake prints per-metric verdicts whose values match the file, and `report`
draws both.

``tests/data/imports/vllm_real_save_result.json`` (and ``…_summary.json``, the same command without
--save-detailed) was written by vLLM 0.33.0's own benchmark client against
``python -m phasescope.testing --flavor vllm --ttft-ms 20 --itl-ms 5`` (tests/data/imports/README.md gives the
command line). Here the same fake, with the same settings, serves `phasescope bench` with the same workload (64-token
random prompts, 16 output tokens, 20 prompts, 2 in flight); vLLM itself is not needed. Timing verdicts are not
asserted (two runs on a noisy machine): the imported side's values, every row's structure, the stated definitions,
and what the report draws are."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from phasescope.report.compare import VERDICTS
from phasescope.testing.fakeserver import FakeServer
from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
REAL = DATA / "vllm_real_save_result.json"  # --save-result --save-detailed
REAL_SUMMARY = DATA / "vllm_real_save_result_summary.json"  # --save-result alone, the same command otherwise


def _file_values(doc: dict[str, Any]) -> dict[str, float]:
    """Each phasescope metric as the file has it: vLLM's own aggregates where it wrote one, else computed from its
    per-request lists by the metric's definition (docs/commands/import.md)."""
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    ttft, lat = [doc["ttfts"][i] for i in ok], [doc["latencies"][i] for i in ok]
    ins, outs, starts = ([doc[k][i] for i in ok] for k in ("input_lens", "output_lens", "start_times"))
    span = max(s + x for s, x in zip(starts, lat)) - min(starts)
    return {
        "ttft_s": doc["median_ttft_ms"] / 1000, "ttft_p99_s": doc["p99_ttft_ms"] / 1000,
        "tpot_s": doc["median_tpot_ms"] / 1000, "itl_p50_s": doc["median_itl_ms"] / 1000,
        "itl_p99_s": doc["p99_itl_ms"] / 1000,
        # not among vLLM's default --percentile-metrics (ttft,tpot,itl): its per-request latencies
        "e2e_s": statistics.median(lat),
        "prefill_tok_s": statistics.median(n / t for n, t in zip(ins, ttft)),
        "decode_tok_s": statistics.median((o - 1) / (x - t) for o, x, t in zip(outs, lat, ttft)),
        "throughput_tok_s": sum(outs) / span,
    }


def _specs(html: str) -> dict[str, list[dict[str, Any]]]:
    m = re.search(r'<script id="ps-specs" type="application/json">(.*?)</script>', html, re.S)
    assert m, "the report holds no plot specs"
    return {s["id"]: s["data"] for s in json.loads(m.group(1))}


def test_compare_and_report_a_phasescope_run_beside_a_real_vllm_result(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(REAL.read_text())
    store = tmp_path / "runs"
    monkeypatch.setenv("PHASESCOPE_STORE", str(store))
    monkeypatch.setenv("COLUMNS", "200")
    # the workload the file records (its numbers say it: 20 prompts of 64 tokens, 16 out, 2 in flight)
    assert (doc["num_prompts"], doc["max_concurrency"], doc["completed"]) == (20, 2, 20)
    assert set(doc["input_lens"]) == {64} and set(doc["output_lens"]) == {16} and doc["model_id"] == "fake-model"
    with FakeServer(flavor="vllm", model="fake-model", ttft_s=0.020, itl_s=0.005).running() as srv:
        code, out, err = run(["bench", srv.url, "--api", "openai", "-n", "20", "-c", "2", "--input-len", "64",
                              "--output-len", "16", "--json", "--metrics-interval", "0.2"], capsys, monkeypatch)
    assert code == 0, err
    rid = json.loads(out)["run_id"]

    # import it (stored, source named) and compare: the imported side's value of every metric is the file's
    code, out, err = run(["import", str(REAL), "--json"], capsys, monkeypatch)
    assert code == 0, err
    imp = json.loads(out)
    assert imp["kind"] == "import" and imp["source"]["tool"] == "vllm bench serve" and imp["n_records"] == 20
    assert imp["model"] == "fake-model"
    code, out, err = run(["compare", rid, imp["id"], "--json"], capsys, monkeypatch)
    assert code == 0, err
    cmp = json.loads(out)
    assert (cmp["a"]["id"], cmp["b"]["id"]) == (rid, imp["id"])
    rows = {m["metric"]: m for m in cmp["metrics"]}
    want = _file_values(doc)
    assert set(want) <= set(rows), sorted(rows)
    itl_n = sum(len(x) for x in doc["itls"])
    for key, value in want.items():
        row = rows[key]
        assert row["b"] == pytest.approx(value, rel=1e-6), (key, row["b"], value)
        assert row["verdict"] in VERDICTS, row
        # per-request data on both sides: a bootstrap interval, not the summary-only fallback
        assert row["method"] == "bootstrap" and row["verdict"] != "too few samples", row
        assert row["ci_low"] is not None and row["ci_high"] is not None and row["ci_low"] <= row["ci_high"], row
        # resampled by request (ITL included), throughput by its 10 windows
        n = 10 if key == "throughput_tok_s" else doc["completed"]
        assert (row["n_a"], row["n_b"]) == (n, n), row
        assert row["verdict"] != "not comparable" or row["why"], row  # a row not compared says why
    assert cmp["run_level"]["method"] == "bootstrap"
    # the definitions, stated where the docs say: ITL is per event in vLLM, and this file shows one token per
    # event, so it is compared; throughput is rebuilt by span and the file's own (duration-based) number is named
    defs = imp["summary"]["definitions"]
    for key in ("itl_p50_s", "itl_p99_s"):
        assert defs[key]["comparable"] is True and "one token per event" in defs[key]["why"]
        assert not any(key in w["message"] and "defines" in w["message"] for w in cmp["warnings"])
    assert defs["tpot_s"]["comparable"] is True and "(E2EL − TTFT)/(out − 1)" in defs["tpot_s"]["why"]
    assert defs["throughput_tok_s"]["comparable"] is True
    assert f"{doc['output_throughput']:.1f} tok/s" in defs["throughput_tok_s"]["why"]
    assert f"{want['throughput_tok_s']:.1f} tok/s" in defs["throughput_tok_s"]["why"]
    # the file's own aggregates, kept in the stored summary as written
    for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "output_throughput"):
        assert imp["summary"][k] == doc[k], k

    # the file named directly (read on the fly, not stored) gives the same B values; the table prints them
    code, out, err = run(["compare", rid, str(REAL), "--json"], capsys, monkeypatch)
    assert code == 0, err
    direct = {m["metric"]: m for m in json.loads(out)["metrics"]}
    for key in want:
        assert direct[key]["b"] == pytest.approx(rows[key]["b"], rel=1e-12), key
    code, out, err = run(["compare", rid, str(REAL)], capsys, monkeypatch)
    assert code == 0, err
    assert f"{doc['median_ttft_ms']:.1f} ms" in out and f"{doc['median_itl_ms']:.2f} ms" in out, out

    # the same client without --save-detailed: summary numbers only, each row the file's number, no interval;
    # vLLM's per-event ITL cannot be shown to be per token there, so those rows are not compared, and say why
    summ = json.loads(REAL_SUMMARY.read_text())
    assert "ttfts" not in summ and "median_e2el_ms" not in summ and summ["completed"] == 20
    code, out, err = run(["compare", rid, str(REAL_SUMMARY), "--json"], capsys, monkeypatch)
    assert code == 0, err
    cmp_s = json.loads(out)
    assert cmp_s["run_level"]["method"] == "summary"
    srows = {m["metric"]: m for m in cmp_s["metrics"]}
    swant = {"ttft_s": summ["median_ttft_ms"] / 1000, "ttft_p99_s": summ["p99_ttft_ms"] / 1000,
             "tpot_s": summ["median_tpot_ms"] / 1000, "itl_p50_s": summ["median_itl_ms"] / 1000,
             "itl_p99_s": summ["p99_itl_ms"] / 1000, "e2e_s": statistics.median(summ["latencies"]),
             "throughput_tok_s": summ["output_throughput"]}
    assert srows["prefill_tok_s"]["b"] is None and srows["decode_tok_s"]["b"] is None  # not in a summary
    for key, value in swant.items():
        row = srows[key]
        assert row["b"] == pytest.approx(value, rel=1e-12), (key, row["b"], value)
        assert row["verdict"] in VERDICTS and row["ci_low"] is None and row["ci_high"] is None, row
        if key.startswith("itl_"):
            assert row["verdict"] == "not comparable" and "per chunk" in row["why"], row
        else:  # (a busy host may also make a row not comparable: the reason is added to the same line)
            assert row["verdict"] in ("too few samples", "not comparable"), row
            assert "summary numbers only (no per-request data): no interval, so no verdict" in row["why"], row
    assert any(w["kind"] == "runs_not_comparable" and "itl_p50_s" in w["message"] and "vllm bench serve" in w["message"]
               for w in cmp_s["warnings"]), cmp_s["warnings"]

    # report draws both: each run's TTFT and ITL series, the file's built from its own numbers
    html = tmp_path / "r.html"
    code, out, err = run(["report", rid, str(REAL), str(REAL_SUMMARY), "-o", str(html), "--json"], capsys,
                         monkeypatch)
    assert code == 0, err
    res = json.loads(out)
    assert res["compared"] == [f"file:{REAL.name} vs {rid}", f"file:{REAL_SUMMARY.name} vs {rid}"]
    specs = _specs(html.read_text())
    for plot in ("plot-ttft_distribution", "plot-itl_cdf"):
        names = [t.get("name") or "" for t in specs[plot]]
        assert any(n.startswith(rid) for n in names) and any(n.startswith(f"file:{REAL.name}") for n in names), names
    hist = [t for t in specs["plot-ttft_distribution"]
            if t.get("type") == "histogram" and t["name"].startswith(f"file:{REAL.name}")]
    assert len(hist) == 1
    np.testing.assert_allclose(sorted(hist[0]["x"]), sorted(x * 1000 for x in doc["ttfts"]), atol=1e-3)
    cdf = [t for t in specs["plot-itl_cdf"] if t["name"].startswith(f"file:{REAL.name}")]
    assert len(cdf) == 1 and f"n={itl_n} tokens" in cdf[0]["name"]
    assert max(cdf[0]["x"]) == pytest.approx(max(g for x in doc["itls"] for g in x) * 1000, abs=1e-3)
