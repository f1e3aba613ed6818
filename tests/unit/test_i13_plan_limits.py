"""`plan` explains itself (issue #13): every result names what limited it, shows the longest pause beside
p99 ITL, and a workload that cannot be admitted is one clear error, never a table of dashes."""

from __future__ import annotations


import numpy as np
import pytest

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")
from phasescope.errors import InputError
from phasescope.planning.api import PlanOptions, run_plan
from phasescope.planning.limits import LIMITS
from phasescope.planning.metrics import summarize_sim
from phasescope.planning.build import cost_from_theory
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload




def plan(**kw):
    return run_plan(PlanOptions(model="llama-3.1-8b", device="l40s", save=False, **kw))


@pytest.mark.parametrize("kw, expect", [
    (dict(num_requests=100, input_len=1000, output_len=100, kv_pool_tokens=5000), "kv_pool"),
    (dict(num_requests=100, input_len=200, output_len=100, max_num_seqs=2), "max_num_seqs"),
    (dict(rate=0.05, num_requests=20, input_len=100, output_len=50), "arrival_rate"),
    (dict(concurrency=64, num_requests=128, input_len=16, output_len=500), "bandwidth"),
    (dict(rate=2, num_requests=300, input_len=3000, output_len=200), "prefill_pauses"),
])
def test_each_constraint_is_named_with_a_sentence_that_matches_its_numbers(kw, expect) -> None:
    s = plan(**kw)["summary"]
    assert s["limited_by"] == expect
    why = s["limited_by_reason"]
    ev = s["limits"]
    if expect == "kv_pool":
        assert "5,000 tokens" in why and ev["blocked_share"]["kv_pool"] >= 0.05
        assert f"holds {5000 // 1100} requests" in why
    elif expect == "max_num_seqs":
        assert "all 2 sequence slots" in why and ev["blocked_share"]["max_num_seqs"] >= 0.05
    elif expect == "arrival_rate":
        assert "0.05 req/s" in why and ev["busy_fraction"] < 0.5
    elif expect == "bandwidth":
        assert ev["busy_fraction"] >= 0.9 and f"{ev['decode_only_step_median_ms']:.1f} ms" in why
    else:
        assert f"p99 ITL {s['p99_itl_ms']:,.0f} ms" in why and f"longest pause {s['max_itl_ms']:,.0f} ms" in why
        assert ev["itl_tail_from_prefill_share"] >= 0.5


def test_max_itl_is_the_longest_gap_of_any_request() -> None:
    cost = cost_from_theory("llama-3.1-8b", "l40s")
    res = simulate(cost, Workload(rate=2, num_requests=60, input_len=3000, output_len=50), SchedulerConfig())
    s = summarize_sim(res)
    longest = max(float(np.diff(res.token_times(i)).max()) for i in range(res.n) if len(res.token_times(i)) > 1)
    assert s["max_itl_ms"] == pytest.approx(longest * 1e3, rel=1e-9)
    assert s["max_itl_ms"] >= s["p99_itl_ms"]


def test_every_sweep_and_capacity_row_has_max_itl_and_limited_by() -> None:
    d = plan(rate=2, num_requests=100, input_len=3000, output_len=100, sweep="max_num_batched_tokens=512,8192")
    for r in d["sweep"]["rows"]:
        assert r["limited_by"] in LIMITS and r["limited_by_reason"]
        assert r["max_itl_ms"] >= r["p99_itl_ms"]
    cap = plan(concurrency=1, input_len=1000, output_len=300, slo="ttft:1000,itl:100", capacity=True)["capacity"]
    assert cap["limited_by"] in LIMITS
    n = cap["max_users"]
    assert cap["limited_by_reason"].startswith(f"{n:,} users; at {cap['failed_at']:,} users ")
    assert cap["failed_at"] > n and cap["failed_checks"]
    for r in cap["probes"]:
        assert "max_itl_ms" in r and r["limited_by"] in LIMITS and "_slo" not in r


def test_capacity_console_says_what_bound(capsys, monkeypatch) -> None:
    code, out, _ = run(["plan", "-m", "llama-3.1-8b", "-d", "l40s", "--concurrency", "1", "--input-len", "1000",
                        "--output-len", "300", "--slo", "ttft:1000,itl:100", "--capacity", "--no-save"], capsys, monkeypatch)
    assert code == 0
    assert "ITL max" in out and "limited by" in out
    line = next(x for x in out.splitlines() if x.startswith("limited by"))
    assert "users; at" in line


def test_no_chunked_prefill_with_a_prompt_over_the_budget_is_one_error_line(capsys, monkeypatch) -> None:
    code, out, err = run(["plan", "-m", "llama-3.1-8b", "-d", "l40s", "--rate", "2", "--input-len", "3000",
                          "--max-num-batched-tokens", "2048", "--no-chunked-prefill", "-n", "20", "--no-save"],
                         capsys, monkeypatch)
    assert code == 2 and out == ""
    assert err.startswith("phasescope: error:") and "--no-chunked-prefill" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_requests_that_never_fit_the_pool_are_one_error_line(capsys, monkeypatch) -> None:
    code, out, err = run(["plan", "-m", "llama-3.1-8b", "-d", "l40s", "--kv-pool-tokens", "500", "--input-len", "1000",
                          "-n", "5", "--no-save", "--json"], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "no request could be served" in err and "KV capacity" in err


def test_some_requests_failing_carry_a_failed_reason() -> None:
    s = plan(num_requests=40, input_len=1000, output_len=100, kv_pool_tokens=1500, range_ratio=0.9, seed=1)["summary"]
    assert 0 < s["failed"] < 40
    assert s["failed_reason"].startswith(f"{s['failed']} request(s): ") and "KV capacity" in s["failed_reason"]


def test_simulator_fails_an_unadmittable_prompt_instead_of_blocking_the_queue() -> None:
    """Without chunking, a prompt over the budget used to block the head of the queue forever."""
    cost = cost_from_theory("llama-3.1-8b", "l40s")
    from phasescope.planning.workload import RequestPlan
    w = Workload(num_requests=3, input_len=100, output_len=5)
    reqs = RequestPlan(arrival_s=np.zeros(3), input_tokens=np.array([100, 5000, 100]),
                       output_tokens=np.array([5, 5, 5]), prefix_tokens=np.zeros(3, dtype=np.int64))
    from phasescope.planning.sim import Simulator
    res = Simulator(cost, w, SchedulerConfig(chunked_prefill=False, max_num_batched_tokens=2048, max_num_seqs=4),
                    requests=reqs).run()
    assert list(res.ok) == [True, False, True]
    assert "exceeds --max-num-batched-tokens" in res.sim.seqs[1].failed


def test_plan_gpus_defaults_to_one_replica_of_tp_devices() -> None:
    d = run_plan(PlanOptions(model="llama-3.3-70b", device="h100-sxm", tp=4, save=False, num_requests=20))
    assert d["config"]["gpus"] == 4
    assert d["cost_model"]["decode_tok_s_alone"] <= 95
    with pytest.raises(InputError):
        run_plan(PlanOptions(model="llama-3.3-70b", device="h100-sxm", tp=4, gpus=2, save=False))


def test_shared_device_disaggregation_names_the_prefill_worker_and_shows_max_itl() -> None:
    d = plan(rate=1, num_requests=120, input_len=3000, output_len=100, disaggregate="1:1")
    dz = d["disaggregation"]
    dis = dz["disaggregated"]["summary"]
    assert dz["shared_device"] is True
    assert dis["limited_by"] == "prefill_pauses" and "prefill worker's steps on the same device" in dis["limited_by_reason"]
    assert dis["max_itl_ms"] >= dis["p99_itl_ms"] and "max_itl_ms" in dz["relative_change"]


def test_full_slots_on_a_saturated_device_are_not_blamed_on_max_num_seqs() -> None:
    # qwen2.5-0.5b on a CPU at 5 and 20 req/s: all 256 slots busy, but a step of twice the batch takes
    # about twice as long there, so more slots would not raise throughput — the device is the limit.
    # The same slots on a GPU (2 sequences: a step of 4 costs about the same) are the limit.
    for rate in (5, 20):
        s = run_plan(PlanOptions(model="qwen2.5-0.5b", device="cpu", rate=rate, num_requests=300, save=False))["summary"]
        assert s["limits"]["blocked_share"]["max_num_seqs"] >= 0.05
        assert s["limited_by"] in ("bandwidth", "prefill_pauses"), (s["limited_by"], s["limited_by_reason"])
        assert "more sequence slots would not raise throughput" in s["limited_by_reason"]
    s = plan(num_requests=100, input_len=200, output_len=100, max_num_seqs=2)["summary"]
    assert s["limited_by"] == "max_num_seqs"
