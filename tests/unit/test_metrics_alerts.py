"""Alerts in words from summaries."""

from __future__ import annotations

from phasescope.metrics.alerts import evaluate
from phasescope.metrics.dashboard import sparkline


def base(**kw):
    d = {"running": 8.0, "waiting": 0.0, "kv_usage": 0.5, "ttft_p99_s": 0.2, "itl_p50_s": 0.02, "itl_p99_s": 0.03,
         "preemptions": 0.0}
    d.update(kw)
    return d


def codes(history, engine="vllm"):
    return [a.code for a in evaluate(history, engine)]


def test_quiet_server_no_alerts():
    assert codes([base(), base()]) == []


def test_queue_with_full_kv_is_capacity_bound_and_says_what_to_change():
    alerts = evaluate([base(waiting=2, kv_usage=0.97), base(waiting=5, kv_usage=0.96)], "vllm")
    assert [a.code for a in alerts] == ["capacity"]
    assert "capacity-bound" in alerts[0].message and "--gpu-memory-utilization" in alerts[0].message


def test_single_sample_of_waiting_is_not_a_queue():
    assert codes([base(), base(waiting=3, kv_usage=0.99)]) == []


def test_queue_below_full_kv_points_at_the_concurrency_limit():
    a = evaluate([base(waiting=1, kv_usage=None), base(waiting=2, kv_usage=None)], "llamacpp")
    assert [x.code for x in a] == ["queue"] and "--parallel" in a[0].message


def test_ttft_rising_while_itl_flat():
    h = [base(ttft_p99_s=0.2), base(ttft_p99_s=0.25), base(ttft_p99_s=0.6, itl_p50_s=0.021)]
    assert codes(h) == ["prefill"]
    # ITL rising as well: not a prefill-only problem
    assert codes([base(ttft_p99_s=0.2), base(ttft_p99_s=0.6, itl_p50_s=0.04)]) == []


def test_itl_spikes_and_preemptions():
    assert codes([base(itl_p99_s=0.3)]) == ["interference"]
    assert codes([base(itl_p50_s=0.002, itl_p99_s=0.009)]) == []  # tiny absolute tail is noise
    assert codes([base(preemptions=3.0)]) == ["preemption"]


def test_sparkline():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([None, 1.0, 1.0]) == "·▄▄"
    assert sparkline([]) == ""
