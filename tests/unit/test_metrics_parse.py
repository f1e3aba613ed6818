"""Parser tests on exposition samples in each engine's exact format (tests/data/metrics/)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from phasescope.errors import TargetError
from phasescope.metrics import Timeline, parse_snapshot, parse_text
from phasescope.metrics.engines import detect_engine

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def load(name: str, **kw):
    return parse_snapshot((DATA / name).read_text(), **kw)


def one(series: dict) -> float:
    assert len(series) == 1, series
    return next(iter(series.values()))


def test_vllm_033_current_names_labels_and_created_series():
    s = load("vllm_0.33.txt")
    assert s.engine == "vllm"
    key = (("engine", "0"), ("model_name", "Qwen/Qwen3-8B"))
    assert s.gauges["running"] == {key: 3.0}
    assert s.gauges["waiting"] == {key: 1.0}
    assert s.gauges["kv_usage"][key] == pytest.approx(0.0421)
    assert s.counters["prefix_cache_queries"][key] == 18432.0
    assert s.counters["prefix_cache_hits"][key] == 12288.0
    assert s.counters["prompt_tokens"][key] == 18432.0
    assert s.counters["generation_tokens"][key] == 2560.0
    # by-source counter filtered to local_compute only
    assert s.counters["prompt_tokens_computed"][key] == 6144.0
    # request_success summed over finished_reason would be a different series key: labels kept apart
    assert sum(s.counters["requests_finished"].values()) == 10.0
    h = s.hists["ttft"][key]
    assert h.bounds == (0.001, 0.06, 0.1, 0.25, 2560.0, math.inf)
    assert h.counts == (0.0, 1.0, 5.0, 10.0, 10.0, 10.0)
    assert h.count == 10.0 and h.sum == pytest.approx(1.015)
    assert s.sources["itl"] == "vllm:inter_token_latency_seconds"
    assert s.hists["prefill_time"][key].count == 10.0
    # vllm:prefix_cache_queries_created / vllm:time_to_first_token_seconds_created are not values
    raw = parse_text((DATA / "vllm_0.33.txt").read_text())
    assert not any(n.endswith("_created") for n in raw.samples)


def test_vllm_dp2_full_buckets_engines_kept_apart_and_summed():
    s = load("vllm_0.33_dp2_full.txt")
    m = "meta-llama/Llama-3.1-8B-Instruct"
    k0 = (("engine", "0"), ("model_name", m))
    k1 = (("engine", "1"), ("model_name", m))
    assert s.gauges["running"] == {k0: 7.0, k1: 5.0}
    assert len(s.hists["ttft"][k0].bounds) == 23  # 22 bounds + +Inf, every bound listed
    assert s.hists["ttft"][k0].count == 400.0 and s.hists["ttft"][k1].count == 250.0
    assert s.label_values("engine") == {"0", "1"}
    tl = Timeline(60)
    tl.add(s)
    summ = tl.summary()
    assert summ["running"] == 12.0 and summ["waiting"] == 2.0
    assert summ["kv_usage"] == pytest.approx(0.971)  # max over engines: one full engine shows
    assert tl.summary(select={"engine": "1"})["kv_usage"] == pytest.approx(0.62)


def test_vllm_08_removed_names_are_read():
    s = load("vllm_0.8_old_names.txt")
    assert s.engine == "vllm"
    assert s.sources["kv_usage"] == "vllm:gpu_cache_usage_perc"
    assert s.sources["prefix_cache_hits"] == "vllm:gpu_prefix_cache_hits_total"
    assert s.sources["itl"] == "vllm:time_per_output_token_seconds"
    assert one(s.gauges["kv_usage"]) == 0.25
    assert one(s.counters["prefix_cache_queries"]) == 640.0
    assert one(s.hists["itl"]).count == 4000.0
    tl = Timeline(60)
    tl.add(s)
    assert any("pre-0.10 name" in n or "pre-0.11 name" in n for n in tl.notes())


def test_vllm_06_v0_only_model_name_label_and_hit_rate_gauge():
    s = load("vllm_0.6_v0.txt")
    key = (("model_name", "mistralai/Mistral-7B-Instruct-v0.3"),)
    assert s.gauges["kv_usage"] == {key: 0.98}
    assert s.gauges["prefix_cache_hit_rate_gauge"] == {key: 0.42}
    assert s.gauges["generation_tok_s_gauge"] == {key: 456.7}
    assert "prefix_cache_hits" not in s.counters
    assert s.counters["preemptions"] == {key: 2.0}
    tl = Timeline(60)
    tl.add(s)
    assert tl.summary()["prefix_cache_hit_rate"] == 0.42


def test_sglang_sample_multiprocess_sum_first():
    s = load("sglang_0.5.23.txt")
    assert s.engine == "sglang"
    assert one(s.gauges["running"]) == 3.0
    assert one(s.gauges["waiting"]) == 1.0
    assert one(s.gauges["kv_usage"]) == 0.03
    h = one(s.hists["ttft"])
    assert h.bounds == (0.1, 0.2, math.inf) and h.counts == (4.0, 10.0, 10.0) and h.sum == 1.06
    assert one(s.counters["prompt_tokens"]) == 18432.0
    assert one(s.counters["prompt_tokens_cached"]) == 12288.0
    assert one(s.gauges["generation_tok_s_gauge"]) == 228.4


def test_sglang_tp_ranks_are_not_double_counted():
    s = load("sglang_0.5.23_tp2.txt")
    # both TP ranks report the same scheduler state; only tp_rank 0 counts
    assert sum(s.gauges["running"].values()) == 12.0
    assert sum(s.gauges["waiting"].values()) == 4.0
    assert sum(s.counters["preemptions"].values()) == 5.0
    # is_streaming splits the TTFT histogram into two series; summed they are every request
    assert sum(h.count for h in s.hists["ttft"].values()) == 40.0
    assert sum(s.counters["prompt_tokens"].values()) == 40000.0
    assert sum(s.counters["prompt_tokens_cached"].values()) == 20000.0


def test_tgi_bare_counter_names_and_rust_float_buckets():
    s = load("tgi_3.3.txt")
    assert s.engine == "tgi"
    assert one(s.gauges["waiting"]) == 0.0
    assert one(s.gauges["running"]) == 1.0
    q = one(s.hists["queue_time"])
    assert q.bounds[:2] == (0.00015000000000000001, 0.00022500000000000002)
    assert q.count == 2.0
    assert one(s.hists["tpot"]).count == 2.0
    assert "ttft" not in s.hists and "itl" not in s.hists
    # tgi_batch_inference_count{method="decode"} (printed without _total)
    assert one(s.counters["decode_calls"]) == 254.0


def test_tgi_full_tokens_from_histogram_sums_and_method_filter():
    s = load("tgi_3.3_full.txt")
    assert one(s.counters["prompt_tokens"]) == 40 * 512.0
    assert one(s.counters["generation_tokens"]) == 40 * 128.0
    assert one(s.hists["prefill_step"]).count == 40.0
    assert one(s.hists["decode_step"]).count == 5120.0
    assert len(one(s.hists["queue_time"]).bounds) == 36
    assert one(s.counters["requests_finished"]) == 40.0


def test_llamacpp_real_scrape():
    s = load("llamacpp_real.txt")
    assert s.engine == "llamacpp"
    assert s.gauges["running"] == {(): 0.0}
    assert s.counters["prompt_tokens_computed"] == {(): 49.0}
    assert s.counters["prompt_tokens_cached"] == {(): 33.0}
    assert s.counters["generation_tokens"] == {(): 246.0}
    assert s.counters["prefill_seconds"] == {(): 0.297334}
    assert s.gauges["prompt_tok_s_gauge"] == {(): 164.798}
    assert "kv_usage" not in s.gauges and not s.hists
    assert not s.imprecise


def test_llamacpp_rendered_and_old_builds():
    s = load("llamacpp_rendered.txt")
    assert s.gauges["running"] == {(): 1.0}
    assert s.counters["prefill_seconds"] == {(): 1.23457}
    old = load("llamacpp_old_13196.txt")
    assert old.engine == "llamacpp"
    assert old.counters["generation_tokens"] == {(): 673.0}
    assert "running" not in old.gauges


def test_llamacpp_large_counters_in_exponent_form_and_kv_ratio():
    s = load("llamacpp_old_large.txt")
    assert s.counters["prompt_tokens_computed"] == {(): 1234570.0}
    assert s.counters["generation_tokens"] == {(): 2469140.0}
    assert s.counters["decode_calls"] == {(): 2500000.0}
    assert s.gauges["kv_usage"] == {(): 0.97}
    assert s.gauges["waiting"] == {(): 3.0}
    assert {"prompt_tokens_computed", "generation_tokens"} <= s.imprecise
    tl = Timeline(60)
    tl.add(s)
    assert any("6 significant digits" in n for n in tl.notes())


@pytest.mark.parametrize(
    "name,engine",
    [("vllm_0.33.txt", "vllm"), ("sglang_0.5.23.txt", "sglang"), ("tgi_3.3.txt", "tgi"), ("llamacpp_real.txt", "llamacpp")],
)
def test_detect_engine(name, engine):
    assert detect_engine(parse_text((DATA / name).read_text()).names()) == engine


def test_forced_engine_must_match():
    with pytest.raises(TargetError):
        load("tgi_3.3.txt", engine="llamacpp")


def test_openmetrics_answer_is_parsed_too():
    from prometheus_client.openmetrics.exposition import generate_latest

    from phasescope.testing.metrics_fake import VllmMetricsState

    st = VllmMetricsState(model="m")
    st.set_load(2, 1, 0.5)
    st.finish_requests([0.05] * 3, [0.02] * 10, prompt_tokens=100, gen_tokens=30)
    text = generate_latest(st.registry).decode()
    assert text.rstrip().endswith("# EOF")
    s = parse_snapshot(text, content_type="application/openmetrics-text; version=1.0.0; charset=utf-8")
    classic = parse_snapshot(st.render("")[0].decode())
    assert s.gauges == classic.gauges
    assert s.counters == classic.counters
    assert s.hists["ttft"] == classic.hists["ttft"]


def test_json_quoted_exposition_is_unwrapped():
    text = (DATA / "llamacpp_real.txt").read_text()
    s = parse_snapshot(json.dumps(text))
    assert s.counters["generation_tokens"] == {(): 246.0}


@pytest.mark.parametrize(
    "body,words",
    [
        ("<!doctype html><html></html>", "HTML"),
        ('{"status": "ok"}', "JSON"),
        ("", "empty"),
        ("this is not { prometheus", "not the Prometheus text format"),
        ("# HELP myapp_x X\n# TYPE myapp_x counter\nmyapp_x_total 3\n", "no engine phasescope knows"),
    ],
)
def test_bad_bodies_raise_one_clear_error(body, words):
    with pytest.raises(TargetError) as ei:
        parse_snapshot(body)
    assert words in str(ei.value)
    assert "\n" not in str(ei.value)


def test_sglang_old_docs_sample_only_model_name_and_removed_itl_name():
    # shape of the older docs.sglang.io "Production Metrics" sample: model_name only, TTFT buckets from 0.001,
    # sglang:time_per_output_token_seconds (removed by sgl-project/sglang#4914), counters in exponent form
    s = load("sglang_old_docs.txt")
    key = (("model_name", "meta-llama/Llama-3.1-8B-Instruct"),)
    assert s.engine == "sglang"
    assert s.sources["itl"] == "sglang:time_per_output_token_seconds"
    assert s.hists["itl"][key].count == 7400757.0
    assert s.counters["prompt_tokens"] == {key: 8128902.0}
    assert s.gauges["running"] == {key: 460.0} and s.gauges["waiting"] == {key: 2826.0}
    assert s.hists["ttft"][key].bounds[0] == 0.001
    tl = Timeline(60)
    tl.add(s)
    # no cached-token counter in this version: the engine's own gauge (last prefill batch) is the fallback
    assert tl.summary()["prefix_cache_hit_rate"] == pytest.approx(0.007507552643049313)
