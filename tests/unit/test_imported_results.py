"""Other tools' result files read into phasescope runs (phasescope.report.imported): each mapper's
numbers against the file, the definitions it states, and bad files as one InputError."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from phasescope.errors import InputError
from phasescope.measure import derive
from phasescope.measure.aggregate import METRIC_BY_KEY, point_value, samples_of
from phasescope.report.imported import detect, load_result, metric_values

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"


def _doc(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name,fmt", [
    ("vllm_save_result.json", "vllm"), ("vllm_save_detailed.json", "vllm"), ("guidellm_benchmarks.json", "guidellm"),
    ("aiperf_profile_export_aiperf.json", "aiperf"), ("llmd_br_v0_2.json", "llmd"),
])
def test_each_format_is_detected_from_its_own_keys(name: str, fmt: str) -> None:
    assert detect(_doc(name)) == fmt
    assert load_result(DATA / name).source == fmt


def test_vllm_summary_keys_are_the_files_numbers() -> None:
    doc = _doc("vllm_save_result.json")
    imp = load_result(DATA / "vllm_save_result.json")
    for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms",
              "output_throughput"):
        assert imp.summary[k] == doc[k]
    assert imp.summary["completed"] == doc["completed"] and imp.records == []
    assert imp.model == "fake-model"
    assert metric_values(imp.summary)["ttft_s"] == pytest.approx(doc["median_ttft_ms"] / 1000)
    assert imp.summary["source"]["tool"] == "vllm bench serve"
    # without per-request data the per-event/per-token ITL difference cannot be ruled out
    assert imp.summary["definitions"]["itl_p99_s"]["comparable"] is False


def test_vllm_detailed_rebuilds_requests_whose_aggregates_match_the_file() -> None:
    doc = _doc("vllm_save_detailed.json")
    imp = load_result(DATA / "vllm_save_detailed.json")
    assert len(imp.records) == doc["completed"]
    s = samples_of(imp.records)
    assert point_value(s, METRIC_BY_KEY["ttft_s"]) * 1000 == pytest.approx(doc["median_ttft_ms"])
    assert point_value(s, METRIC_BY_KEY["tpot_s"]) * 1000 == pytest.approx(doc["median_tpot_ms"])
    assert point_value(s, METRIC_BY_KEY["itl_p99_s"]) * 1000 == pytest.approx(doc["p99_itl_ms"])
    assert point_value(s, METRIC_BY_KEY["e2e_s"]) * 1000 == pytest.approx(doc["median_e2el_ms"])
    assert derive.ttft_s(imp.records[0]) == pytest.approx(doc["ttfts"][0])
    # one token per streamed event in this file: vLLM's per-event ITL is phasescope's per-token ITL
    assert imp.summary["definitions"]["itl_p50_s"]["comparable"] is True
    # no request_submit_times: throughput cannot be rebuilt from the requests, and says so
    assert imp.summary["definitions"]["throughput_tok_s"]["comparable"] is False


def test_guidellm_maps_its_itl_to_tpot_and_states_the_weighting() -> None:
    imp = load_result(DATA / "guidellm_benchmarks.json")
    m = _doc("guidellm_benchmarks.json")["benchmarks"][0]["metrics"]
    assert imp.summary["median_ttft_ms"] == m["time_to_first_token_ms"]["successful"]["median"]
    assert imp.summary["p99_ttft_ms"] == m["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
    assert imp.summary["median_tpot_ms"] == m["inter_token_latency_ms"]["successful"]["median"]  # not its TPOT
    assert imp.summary["median_e2el_ms"] == pytest.approx(m["request_latency"]["successful"]["median"] * 1000)
    assert "median_itl_ms" not in imp.summary  # GuideLLM keeps no per-event gaps
    d = imp.summary["definitions"]
    assert d["tpot_s"]["comparable"] is False and "weights" in d["tpot_s"]["why"]
    assert imp.model == "fake-model" and imp.summary["completed"] == 8


def test_guidellm_index_out_of_range_is_one_line() -> None:
    with pytest.raises(InputError, match="--index"):
        load_result(DATA / "guidellm_benchmarks.json", index=3)


def test_aiperf_summary_and_its_itl_is_tpot() -> None:
    doc = _doc("aiperf_profile_export_aiperf.json")
    imp = load_result(DATA / "aiperf_profile_export_aiperf.json")
    assert imp.summary["median_ttft_ms"] == doc["time_to_first_token"]["p50"]
    assert imp.summary["p99_ttft_ms"] == doc["time_to_first_token"]["p99"]
    assert imp.summary["median_tpot_ms"] == doc["inter_token_latency"]["p50"]
    assert imp.summary["output_throughput"] == doc["output_token_throughput"]["avg"]
    assert imp.summary["duration_s"] == doc["benchmark_duration"]["avg"]
    assert "tokenizer" in imp.summary["definitions"]["tpot_s"]["why"]
    assert imp.model == "fake-model"


def test_aiperf_jsonl_builds_records_with_its_timings_and_failures() -> None:
    imp = load_result(DATA / "aiperf_profile_export.jsonl")
    rows = [json.loads(x) for x in (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()]
    assert len(imp.records) == len(rows)
    assert imp.summary["completed"] == 8 and imp.summary["failed"] == 1
    r0 = imp.records[0]
    assert derive.ttft_s(r0) == pytest.approx(rows[0]["metrics"]["time_to_first_token"]["value"] / 1000)
    assert derive.e2e_s(r0) == pytest.approx(rows[0]["metrics"]["request_latency"]["value"] / 1000)
    assert derive.tpot_s(r0) == pytest.approx(rows[0]["metrics"]["inter_token_latency"]["value"] / 1000)
    assert r0.output_tokens_source == "tokenizer"
    assert not imp.records[-1].ok and "cancelled" in (imp.records[-1].error_message or "")


def test_llmd_units_are_converted() -> None:
    imp = load_result(DATA / "llmd_br_v0_2.json")
    assert imp.summary["median_ttft_ms"] == pytest.approx(57.0)
    assert imp.summary["p99_itl_ms"] == pytest.approx(11.0)
    assert imp.summary["median_e2el_ms"] == pytest.approx(214.0)
    assert imp.summary["completed"] == 8 and imp.model == "fake-model"
    assert imp.summary["source"]["harness"] == "inference-perf"
    assert imp.summary["definitions"]["itl_p50_s"]["comparable"] is False


@pytest.mark.parametrize("text,match", [
    ("{not json", "malformed JSON"),
    ('{"hello": 1}', "not a result file"),
    ('[1, 2]', "not a result file"),
    ('{"completed": "x", "median_ttft_ms": 1}', "not a valid vllm result file"),
])
def test_bad_files_are_one_input_error(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "r.json"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        load_result(p)


def test_a_format_that_contradicts_the_file_is_refused() -> None:
    with pytest.raises(InputError, match="reads as vllm"):
        load_result(DATA / "vllm_save_result.json", fmt="aiperf")
    with pytest.raises(InputError, match="--format must be"):
        load_result(DATA / "vllm_save_result.json", fmt="csv")


def test_a_missing_file_is_one_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_result(tmp_path / "nope.json")


def test_vllm_start_times_place_the_requests_and_rebuild_throughput(tmp_path: Path) -> None:
    doc = _doc("vllm_save_detailed.json")
    doc["start_times"] = [1000.0 + 0.06 * i for i in range(len(doc["ttfts"]))]  # perf_counter seconds
    p = tmp_path / "v.json"
    p.write_text(json.dumps(doc))
    imp = load_result(p)
    assert [r.t_start_ns for r in imp.records][:2] == [1000 * 10**9, round(1000.06 * 10**9)]
    assert imp.summary["definitions"]["throughput_tok_s"]["comparable"] is True  # rebuilt; the duration/span difference said
    span = (max(r.events[-1].t_ns for r in imp.records) - imp.records[0].t_start_ns) / 1e9
    tput = point_value(samples_of(imp.records), METRIC_BY_KEY["throughput_tok_s"])
    assert tput == pytest.approx(sum(doc["output_lens"]) / span)


def test_a_real_vllm_detailed_file_reads_every_metric_as_the_file_has_it() -> None:
    """``vllm_real_save_result.json``: written by vLLM 0.33.0's own ``vllm bench serve --save-result
    --save-detailed`` against phasescope's vLLM fake (tests/data/imports/README.md says how). It carries keys the
    hand-built files lack (``latencies``, ``queue_times``, ``start_times`` on perf_counter's clock,
    ``request_rate: "inf"``, no ``*_e2el_ms`` under the default --percentile-metrics)."""
    doc = _doc("vllm_real_save_result.json")
    imp = load_result(DATA / "vllm_real_save_result.json")
    assert imp.source == "vllm" and imp.model == doc["model_id"] == "fake-model"
    for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "output_throughput"):
        assert imp.summary[k] == doc[k], k
    assert "median_e2el_ms" not in doc  # not among the default --percentile-metrics: from the latencies
    assert imp.summary["median_e2el_ms"] == pytest.approx(statistics.median(doc["latencies"]) * 1000, rel=1e-12)
    assert (imp.summary["completed"], imp.summary["failed"], imp.summary["duration_s"]) == (
        doc["completed"], doc["failed"], doc["duration"])
    assert imp.params["max_concurrency"] == 2 and imp.params["request_rate"] == "inf"
    # the rebuilt requests give back the file's own aggregates, and its per-request numbers
    assert len(imp.records) == doc["completed"] == 20
    s = samples_of(imp.records)
    for key, want in (("ttft_s", doc["median_ttft_ms"]), ("ttft_p99_s", doc["p99_ttft_ms"]),
                      ("tpot_s", doc["median_tpot_ms"]), ("itl_p50_s", doc["median_itl_ms"]),
                      ("itl_p99_s", doc["p99_itl_ms"])):
        assert point_value(s, METRIC_BY_KEY[key]) * 1000 == pytest.approx(want, rel=1e-6), key
    assert point_value(s, METRIC_BY_KEY["e2e_s"]) == pytest.approx(statistics.median(doc["latencies"]), rel=1e-6)
    for r, t0, ttft, lat, n_in, n_out in zip(imp.records, doc["start_times"], doc["ttfts"], doc["latencies"],
                                             doc["input_lens"], doc["output_lens"]):
        assert r.t_start_ns == round(t0 * 1e9) and derive.ttft_s(r) == pytest.approx(ttft, abs=1e-8)
        assert derive.e2e_s(r) == pytest.approx(lat, abs=1e-8)
        assert (r.prompt_tokens, r.output_tokens, len(r.events)) == (n_in, n_out, n_out)  # one token per event
    # one token per event in every request: vLLM's per-event ITL is phasescope's per-token ITL, and it says so
    for key in ("itl_p50_s", "itl_p99_s"):
        assert imp.summary["definitions"][key]["comparable"] is True
        assert "one token per event" in imp.summary["definitions"][key]["why"]
    # throughput is rebuilt from the requests' span; the file's own number divides by vLLM's benchmark duration,
    # which also counts the time before the first request and after the last: both numbers are stated
    span = max(t + lat for t, lat in zip(doc["start_times"], doc["latencies"])) - min(doc["start_times"])
    tput = point_value(s, METRIC_BY_KEY["throughput_tok_s"])
    assert tput == pytest.approx(sum(doc["output_lens"]) / span, rel=1e-6)
    assert tput != pytest.approx(doc["output_throughput"], rel=1e-5)  # the two definitions differ here
    d = imp.summary["definitions"]["throughput_tok_s"]
    assert d["comparable"] is True  # compare reads both runs by span
    assert f"{doc['output_throughput']:.1f} tok/s" in d["why"] and f"{tput:.1f} tok/s" in d["why"]
    assert f"{doc['duration']:.3f} s" in d["why"] and f"{span:.3f} s" in d["why"]


def test_a_real_vllm_summary_file_gives_e2e_from_its_latencies(tmp_path: Path) -> None:
    """``vllm_real_save_result_summary.json``: vLLM 0.33.0's ``--save-result`` without ``--save-detailed``. Under
    the default --percentile-metrics (ttft,tpot,itl) it writes no ``*_e2el_ms``, but it keeps every request's
    ``latencies`` (only the detailed lists are dropped): with every request successful their median is vLLM's own
    median E2EL, so it is read; nothing else is rebuilt (no per-request TTFTs)."""
    doc = _doc("vllm_real_save_result_summary.json")
    assert "median_e2el_ms" not in doc and "ttfts" not in doc and len(doc["latencies"]) == doc["completed"] == 20
    imp = load_result(DATA / "vllm_real_save_result_summary.json")
    assert imp.records == []
    for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "output_throughput"):
        assert imp.summary[k] == doc[k], k
    assert imp.summary["median_e2el_ms"] == pytest.approx(statistics.median(doc["latencies"]) * 1000, rel=1e-12)
    assert metric_values(imp.summary)["e2e_s"] == pytest.approx(statistics.median(doc["latencies"]), rel=1e-12)
    d = imp.summary["definitions"]["e2e_s"]
    assert d["comparable"] is True and "latencies" in d["why"]
    # summary only: the per-event ITL cannot be shown to be per token
    assert imp.summary["definitions"]["itl_p50_s"]["comparable"] is False
    # a failed request's latency is in the list too (vLLM keeps every output's), and a summary file does not say
    # which failed: then no median is made up
    doc["completed"], doc["failed"] = 19, 1
    doc["latencies"][3] = 0.0
    p = tmp_path / "v.json"
    p.write_text(json.dumps(doc))
    imp = load_result(p)
    assert "median_e2el_ms" not in imp.summary and "e2e_s" not in imp.summary["definitions"]


def test_an_imported_run_lasts_as_long_as_its_benchmark_not_its_import() -> None:
    # `show` of a stored vllm bench serve file printed "duration 0.0 s": the seconds the import took
    from phasescope.store import RunInfo

    info = RunInfo(id="r", kind="import", status="complete", started_at=1000.0, ended_at=1000.01,
                   summary={"duration_s": 0.996})
    assert info.duration_s == pytest.approx(0.996)
    assert RunInfo(id="r", kind="import", status="complete", started_at=1000.0, ended_at=1000.01,
                   summary={}).duration_s is None  # a file that states none: unknown, not the import's 0.01 s
    assert RunInfo(id="r", kind="bench", status="complete", started_at=1000.0, ended_at=1012.5,
                   summary={"duration_s": 3.0}).duration_s == pytest.approx(12.5)  # a run of ours: its own clock
