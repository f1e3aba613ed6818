"""Window quantiles vs hand-computed values from bucket deltas; counter resets; grouping."""

from __future__ import annotations

import math

import pytest

from phasescope.metrics import Hist, Timeline, counter_delta, hist_delta, histogram_quantile, parse_snapshot
from phasescope.testing.metrics_fake import VllmMetricsState

INF = math.inf


def vllm_text(ttft_cum: list[float], ttft_sum: float, gen: float, prompt: float, running: float = 1.0,
              kv: float = 0.5, waiting: float = 0.0) -> str:
    """A vLLM-format exposition with a 3-bound TTFT histogram (0.1, 0.2, 0.4, +Inf)."""
    lab = 'engine="0",model_name="m"'
    lines = [
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
        "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{lab}}} {gen}",
        "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lab}}} {prompt}",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le, c in zip(("0.1", "0.2", "0.4", "+Inf"), ttft_cum):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}')
    lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {ttft_cum[-1]}")
    lines.append(f"vllm:time_to_first_token_seconds_sum{{{lab}}} {ttft_sum}")
    return "\n".join(lines) + "\n"


def snap(text: str, t_s: float):
    return parse_snapshot(text, t_ns=int(t_s * 1e9))


def test_window_quantiles_match_hand_computed_bucket_deltas():
    tl = Timeline(window_s=60)
    tl.add(snap(vllm_text([2, 5, 6, 6], 1.0, gen=100, prompt=1000), 0.0))
    tl.add(snap(vllm_text([4, 13, 16, 17], 3.2, gen=400, prompt=3000), 10.0))
    # window delta (cumulative): [2, 8, 10, 11]; N = 11
    # p50: rank 5.5 → bucket (0.1, 0.2], 6 obs, rank inside 3.5 → 0.1 + 0.1·3.5/6
    assert tl.quantile("ttft", 0.5) == pytest.approx(0.1 + 0.1 * 3.5 / 6)
    # p90: rank 9.9 → bucket (0.2, 0.4], 2 obs, rank inside 1.9 → 0.2 + 0.2·1.9/2 = 0.39
    assert tl.quantile("ttft", 0.9) == pytest.approx(0.39)
    # p99: rank 10.89 > 10 → +Inf bucket → highest finite bound 0.4
    assert tl.quantile("ttft", 0.99) == pytest.approx(0.4)
    # p10: rank 1.1 → first bucket, lower bound 0 → 0.1·1.1/2
    assert tl.quantile("ttft", 0.1) == pytest.approx(0.055)
    # mean = Δsum/Δcount = 2.2/11
    assert tl.hist_mean("ttft") == pytest.approx(0.2)
    assert tl.rate("generation_tokens") == pytest.approx(30.0)
    s = tl.summary()
    assert s["ttft_p50_s"] == pytest.approx(0.1 + 0.1 * 3.5 / 6)
    assert s["ttft_observations"] == 11
    assert s["generation_tok_s"] == pytest.approx(30.0)
    assert s["prompt_tok_s"] == pytest.approx(200.0)


def test_quantile_over_three_snapshots_sums_pair_deltas():
    tl = Timeline(window_s=60)
    tl.add(snap(vllm_text([0, 0, 0, 0], 0.0, 0, 0), 0.0))
    tl.add(snap(vllm_text([4, 4, 4, 4], 0.2, 0, 0), 1.0))
    tl.add(snap(vllm_text([4, 8, 8, 8], 0.8, 0, 0), 2.0))
    # window: 4 obs in (0, 0.1], 4 in (0.1, 0.2]; p50 rank 4 → first bucket end = 0.1; p75 rank 6 → 0.15
    assert tl.quantile("ttft", 0.5) == pytest.approx(0.1)
    assert tl.quantile("ttft", 0.75) == pytest.approx(0.15)


def test_window_drops_old_snapshots_and_keeps_a_base():
    tl = Timeline(window_s=15)
    for t, gen in ((0, 0), (10, 100), (20, 300), (30, 600)):
        tl.add(snap(vllm_text([0, 0, 0, 0], 0, gen, 0), t))
    # base = newest snapshot at or before 30 − 15: t=10
    assert tl.span_s == pytest.approx(20)
    assert tl.rate("generation_tokens") == pytest.approx(500 / 20)


def test_prometheus_histogram_quantile_edge_cases():
    h = Hist(bounds=(0.1, 0.2, INF), counts=(0.0, 0.0, 0.0), sum=0.0, count=0.0)
    assert histogram_quantile(0.5, h) is None  # no observations → NaN in Prometheus
    no_inf = Hist(bounds=(0.1, 0.2), counts=(1.0, 2.0), sum=0.2, count=2.0)
    assert histogram_quantile(0.5, no_inf) is None
    all_inf = Hist(bounds=(0.1, 0.2, INF), counts=(0.0, 0.0, 5.0), sum=10.0, count=5.0)
    assert histogram_quantile(0.5, all_inf) == 0.2
    assert histogram_quantile(1.5, all_inf) == INF and histogram_quantile(-1, all_inf) == -INF
    # non-monotonic cumulative counts (racing scrape) are forced monotonic
    bumpy = Hist(bounds=(0.1, 0.2, INF), counts=(4.0, 3.0, 4.0), sum=0.2, count=4.0)
    assert histogram_quantile(0.5, bumpy) == pytest.approx(0.05)


def test_fake_vllm_histogram_observations_give_expected_quantile():
    st = VllmMetricsState(model="m")
    tl = Timeline(60)
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=0))
    st.finish_requests([], [0.03] * 100)  # every observation in the (0.025, 0.05] ITL bucket
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=10**9))
    assert tl.quantile("itl", 0.5) == pytest.approx(0.025 + 0.025 * 50 / 100)
    assert tl.quantile("itl", 0.99) == pytest.approx(0.025 + 0.025 * 99 / 100)
    assert tl.hist_mean("itl") == pytest.approx(0.03)


def test_counter_delta_reset_rules():
    assert counter_delta(100, 150) == 50
    assert counter_delta(150, 20) == 20  # restart: the counter began again from 0
    assert counter_delta(None, 7) == 7  # new series
    a = Hist((0.1, INF), (5.0, 8.0), 1.0, 8.0)
    b = Hist((0.1, INF), (1.0, 2.0), 0.2, 2.0)  # after a restart
    assert hist_delta(a, b) == b
    c = Hist((0.1, INF), (7.0, 11.0), 1.6, 11.0)
    assert hist_delta(a, c) == Hist((0.1, INF), (2.0, 3.0), pytest.approx(0.6), 3.0)


def test_counter_reset_mid_window_gives_no_negative_rates():
    tl = Timeline(window_s=60)
    tl.add(snap(vllm_text([10, 20, 30, 30], 5.0, gen=1000, prompt=5000), 0))
    tl.add(snap(vllm_text([12, 24, 34, 34], 5.6, gen=1100, prompt=5500), 5))
    # server restarted: everything starts again from 0
    tl.add(snap(vllm_text([1, 2, 2, 2], 0.3, gen=40, prompt=300), 10))
    tl.add(snap(vllm_text([3, 4, 4, 4], 0.6, gen=70, prompt=500), 15))
    assert tl.total_increase("generation_tokens") == pytest.approx(100 + 40 + 30)
    s = tl.summary()
    for k in ("generation_tok_s", "prompt_tok_s", "ttft_p50_s", "ttft_p99_s", "ttft_mean_s"):
        assert s[k] is not None and s[k] >= 0, k
    # TTFT window: (4 obs) + (2 obs after restart, counted from 0) + (2) → 8 observations
    assert s["ttft_observations"] == 8


def test_models_kept_apart_or_summed():
    st = VllmMetricsState(models=("a", "b"), engines=("0", "1"))
    tl = Timeline(60)
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=0))
    st.set_load(2, 0, 0.4, model="a", engine="0")
    st.set_load(3, 1, 0.9, model="b", engine="1")
    st.finish_requests([0.05] * 10, [0.02] * 10, gen_tokens=100, model="a", engine="0")
    st.finish_requests([0.5] * 10, [0.02] * 10, gen_tokens=300, model="b", engine="1")
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=2 * 10**9))
    total = tl.summary()
    assert total["running"] == 5 and total["waiting"] == 1
    assert total["generation_tok_s"] == pytest.approx(200.0)
    assert total["ttft_observations"] == 20
    by = tl.summary_by("model_name")
    assert set(by) == {"a", "b"}
    assert by["a"]["generation_tok_s"] == pytest.approx(50.0)
    assert by["b"]["generation_tok_s"] == pytest.approx(150.0)
    assert by["a"]["ttft_p50_s"] < 0.06 < 0.25 < by["b"]["ttft_p50_s"]
    assert by["b"]["kv_usage"] == pytest.approx(0.9)
    only_a = tl.summary(select={"model_name": "a"})
    assert only_a["running"] == 2 and only_a["ttft_observations"] == 10


def test_llamacpp_summary_derives_rates_and_leaves_histograms_null():
    def text(prompt: float, cached: float, gen: float, psec: float, gsec: float, running: float) -> str:
        rows = [("prompt_tokens_total", "counter", prompt), ("prompt_tokens_cached_total", "counter", cached),
                ("prompt_seconds_total", "counter", psec), ("tokens_predicted_total", "counter", gen),
                ("tokens_predicted_seconds_total", "counter", gsec), ("requests_processing", "gauge", running),
                ("requests_deferred", "gauge", 0)]
        return "".join(f"# TYPE llamacpp:{n} {t}\nllamacpp:{n} {v:g}\n" for n, t, v in rows)

    tl = Timeline(60)
    tl.add(snap(text(100, 0, 50, 0.5, 1.0, 0), 0))
    tl.add(snap(text(300, 100, 250, 1.5, 5.0, 3), 2))
    s = tl.summary()
    assert s["running"] == 3
    assert s["prompt_tok_s"] == pytest.approx((200 + 100) / 2)  # cached prompt tokens included
    assert s["generation_tok_s"] == pytest.approx(100.0)
    assert s["prefix_cache_hit_rate"] == pytest.approx(100 / 300)
    assert s["prefill_speed_tok_s"] == pytest.approx(200 / 1.0)
    assert s["itl_mean_s"] == pytest.approx(4.0 / 200)
    for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "kv_usage", "preemptions"):
        assert s[k] is None, k
    assert any("no TTFT/ITL histograms" in n for n in tl.notes())


def test_first_snapshot_alone_has_gauges_but_no_rates():
    tl = Timeline(60)
    tl.add(snap(vllm_text([1, 1, 1, 1], 0.05, 10, 10, running=4), 0))
    s = tl.summary()
    assert s["running"] == 4
    assert s["generation_tok_s"] is None and s["ttft_p50_s"] is None


def test_vllm_prefill_speed_decode_and_tpot_from_fake_render():
    st = VllmMetricsState(model="m")
    tl = Timeline(60)
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=0))
    # 4 requests: TTFT 0.05 s each (all prefill here), 1000 prompt tokens of which 200 cached; 10 outputs of 0.02 s
    st.finish_requests([0.05] * 4, [0.02] * 40, prompt_tokens=1000, cached_tokens=200, gen_tokens=44)
    tl.add(parse_snapshot(st.render()[0].decode(), t_ns=10**9))
    s = tl.summary()
    # Δkv_computed_tokens_sum / Δprefill_time_sum = 800 / 0.2
    assert s["prefill_speed_tok_s"] == pytest.approx(4000.0)
    assert s["decode_mean_s"] == pytest.approx(0.2)
    assert s["prefill_mean_s"] == pytest.approx(0.05)
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.2)
    # per-request TPOT 0.02 s in (0.01, 0.025]: p50 = 0.01 + 0.015·2/4
    assert s["tpot_p50_s"] == pytest.approx(0.0175)


@pytest.mark.parametrize(
    "given,expected",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/metrics"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080/metrics"),
        ("http://h:9000/metrics", "http://h:9000/metrics"),
        ("http://h:8080/metrics?model=gemma", "http://h:8080/metrics?model=gemma"),
    ],
)
def test_metrics_url(given, expected):
    from phasescope.metrics import metrics_url

    assert metrics_url(given) == expected
