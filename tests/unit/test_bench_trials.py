"""bench --trials (run-level intervals across trials) and --steady-state (the window between the ramp-up and
the drain), as pure functions over synthetic summaries and records: no server, no measured duration."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import NS, make_record  # noqa: E402

from phasescope.load.summary import STEADY_RULE, steady_summary, steady_window, summarize  # noqa: E402
from phasescope.load.trials import TRIAL_UNSTABLE_REL, combine_trials, headline_keys  # noqa: E402
from phasescope.measure.interval import mean_interval  # noqa: E402
from phasescope.measure.records import RequestRecord  # noqa: E402


def trial(i: int, ttft: float, itl: float = 10.0, status: str = "complete", **kw: object) -> dict:
    s = {"trial": i, "status": status, "partial": status != "complete", "completed": 40, "failed": 0,
         "num_requests": 40, "duration": 2.0, "total_output_tokens": 640, "request_throughput": 20.0 + i,
         "output_throughput": 320.0, "median_ttft_ms": ttft, "p99_ttft_ms": ttft * 1.5, "mean_ttft_ms": ttft,
         "std_ttft_ms": 1.0, "median_itl_ms": itl, "p99_itl_ms": itl * 1.3, "p99.9_itl_ms": itl * 2,
         "median_event_gap_ms": itl, "errors_by_kind": {}, "max_concurrent_requests": 4, "warnings": [],
         "host": {"during": {"other_cpu_share": 0.01 * i}}, "prefix_cache_hit_rate": 0.0}
    s.update(kw)
    return s


def test_trials_report_mean_and_interval_per_headline_metric() -> None:
    ts = [trial(1, 20.0), trial(2, 22.0), trial(3, 21.0)]
    s = combine_trials(3, ts)
    iv = mean_interval([20.0, 22.0, 21.0])
    assert s["median_ttft_ms"] == pytest.approx(21.0) and s["median_ttft_ms_ci"] == pytest.approx(iv.ci)
    assert s["intervals"]["median_ttft_ms"]["method"] == "mean-t" and s["intervals"]["median_ttft_ms"]["n"] == 3
    for k in ("request_throughput", "output_throughput", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "p99.9_itl_ms"):
        assert f"{k}_ci" in s, k
    assert s["trials"] == ts and s["num_trials"] == 3 and s["trials_complete"] == 3
    assert s["completed"] == 120 and s["duration"] == pytest.approx(6.0)  # counts add up
    assert s["host"]["during"]["other_cpu_share"] == pytest.approx(0.03)  # the busiest trial's host
    assert not [w for w in s["warnings"] if w["kind"] == "unstable"]


def test_partial_trial_is_kept_but_left_out_of_the_interval() -> None:
    ts = [trial(1, 20.0), trial(2, 90.0, status="partial", completed=5)]
    s = combine_trials(3, ts)
    assert len(s["trials"]) == 2 and s["trials"][1]["status"] == "partial"
    assert s["median_ttft_ms"] == pytest.approx(20.0) and s["intervals"]["median_ttft_ms"]["n"] == 1
    assert s["completed"] == 45 and s["trials_complete"] == 1
    assert any(w["kind"] == "too_few_samples" and "1 of 3 trials" in w["message"] for w in s["warnings"])


def test_trials_that_disagree_are_flagged_unstable() -> None:
    s = combine_trials(3, [trial(1, 20.0), trial(2, 20.0), trial(3, 60.0)])
    unst = [w for w in s["warnings"] if w["kind"] == "unstable"]
    assert len(unst) == 1  # one warning naming every figure that disagrees
    figures = set(unst[0]["evidence"]["figures"])
    assert {"median_ttft_ms", "p99_ttft_ms"} <= figures and "median_itl_ms" not in figures
    assert unst[0]["evidence"]["rel_halfwidth"]["median_ttft_ms"] > TRIAL_UNSTABLE_REL
    assert "median_ttft_ms 20–60" in unst[0]["message"]


def test_trial_warnings_are_merged_and_say_which_trial() -> None:
    hb = {"kind": "host_busy", "message": "other work took 60 %", "evidence": {}}
    s = combine_trials(2, [trial(1, 20.0, warnings=[hb]), trial(2, 20.0, warnings=[hb])])
    hosts = [w for w in s["warnings"] if w["kind"] == "host_busy"]
    assert len(hosts) == 1 and hosts[0]["message"].startswith("trials 1, 2:")
    assert hosts[0]["evidence"]["trials"] == [1, 2]


def test_headline_keys_are_rates_and_latency_statistics() -> None:
    keys = headline_keys(trial(1, 20.0))
    assert {"request_throughput", "median_ttft_ms", "p99.9_itl_ms", "std_ttft_ms", "median_event_gap_ms"} <= set(keys)
    assert "completed" not in keys and "duration" not in keys


# --- steady state -------------------------------------------------------------------------------------
def closed_loop(n: int, c: int, *, burst_ttft: float = 0.5, ttft: float = 0.02, seed: int = 1) -> list[RequestRecord]:
    """A closed loop of ``n`` requests, ``c`` in flight: the first wave of ``c`` starts together and is a
    warm-up burst (TTFT ``burst_ttft``); each later request starts when one finishes (TTFT ``ttft``)."""
    rng = random.Random(seed)
    free = [10 * NS + k * 1000 for k in range(c)]  # when each slot is free
    out = []
    for i in range(n):
        k = min(range(c), key=lambda j: free[j])
        r = make_record(i, rng, t_start_ns=free[k], ttft_s=burst_ttft if i < c else ttft, itl_s=0.01,
                        output_tokens=8, jitter=0.05)
        r.tags["index"] = i
        out.append(r)
        free[k] = (r.t_done_ns or free[k]) + 1000
    return out


def test_steady_window_is_ramp_up_end_to_drain_start() -> None:
    recs = closed_loop(40, 4)
    w = steady_window(recs, target_concurrency=4)
    starts = sorted(r.t_start_ns for r in recs)
    assert w["rule"] == STEADY_RULE and w["target_concurrency"] == 4
    assert w["start_s"] == pytest.approx((starts[3] - starts[0]) / 1e9)  # the 4th start reaches 4 in flight
    assert w["end_s"] == pytest.approx((starts[-1] - starts[0]) / 1e9)  # the last start begins the drain
    inside = {r.id for r in recs if r.id in set(w["ids"])}
    assert all(r.t_start_ns > starts[3] and r.t_done_ns <= starts[-1] for r in recs if r.id in inside)
    assert w["excluded_ramp"] == 4 and w["excluded_drain"] >= 1
    assert w["requests_in_window"] + w["excluded_ramp"] + w["excluded_drain"] == 40


def test_warm_up_burst_no_longer_inflates_p99() -> None:
    recs = closed_loop(60, 4, burst_ttft=0.5, ttft=0.02)
    full = summarize(recs)
    w = steady_window(recs, target_concurrency=4)
    steady = steady_summary(recs, w)
    assert full["p99_ttft_ms"] > 400  # the first wave's 500 ms TTFTs set the whole run's p99
    assert steady["p99_ttft_ms"] < 30 and steady["completed"] == w["requests_in_window"]
    assert steady["duration"] == pytest.approx(w["duration_s"])
    # the rates are taken over the window: tokens streamed in it ÷ its length
    assert 0 < steady["output_throughput"] < 2 * full["output_throughput"] + 1


def test_open_loop_target_is_the_typical_concurrency() -> None:
    recs = closed_loop(30, 3)
    w = steady_window(recs)  # no --max-concurrency given: the median in flight at each start
    assert w["target_concurrency"] == 3 and "median" in w["target_from"]


def test_too_short_a_run_has_an_empty_window_and_says_why() -> None:
    recs = closed_loop(5, 4)
    w = steady_window(recs, target_concurrency=4)
    assert w["empty"] and "send more requests" in w["reason"]
    assert steady_window(recs[:1])["empty"]


def test_a_wild_trial_does_not_give_a_negative_time() -> None:
    # TTFT 0.2 / 0.2 / 4 s (a real 3-trial engine run beside two CPU spinners): mean-t reaches below 0
    s = combine_trials(3, [trial(1, 200.0), trial(2, 210.0), trial(3, 4000.0)])
    lo, hi = s["median_ttft_ms_ci"]
    assert lo == 0.0 and hi > 4000 and mean_interval([200.0, 210.0, 4000.0]).low < 0
