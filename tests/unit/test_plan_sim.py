"""The plan simulator on cases with known answers (pure, no server)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from phasescope.errors import InputError
from phasescope.planning.build import cost_from_theory
from phasescope.planning.costmodel import CostModel, chunk_pairs
from phasescope.planning.metrics import summarize_sim, to_records
from phasescope.planning.sim import Deployment, SchedulerConfig, simulate
from phasescope.planning.workload import Workload, build_requests

# an H100-like 8B replica with round numbers; overhead makes step counts visible in times
COST = CostModel(
    name="test",
    weight_bytes=16e9,
    kv_bytes_per_token=131072.0,
    flops_per_token=14e9,
    attn_flops_per_pair=4 * 32 * 32 * 128,
    lm_head_flops=2 * 4096 * 128256,
    bandwidth_bytes_s=3.35e12,
    peak_flops=989e12,
    bw_eff=0.8,
    flops_eff=0.6,
    step_overhead_s=0.002,
    kv_pool_tokens=400_000,
    interconnect_bytes_s=50e9,
)


def test_step_time_is_roofline_max_plus_overhead() -> None:
    c = COST
    t = c.step_time_s(4, 4 * 1000.0)
    mem = (c.weight_bytes + c.kv_bytes_per_token * 4000) / (c.bandwidth_bytes_s * c.bw_eff)
    cmp_ = (4 * (c.flops_per_token + c.lm_head_flops) + c.attn_flops_per_pair * 4000) / (c.peak_flops * c.flops_eff)
    assert t == pytest.approx(c.step_overhead_s + max(mem, cmp_))
    s = c.with_(overlap="sum")
    assert s.step_time_s(4, 4000.0) == pytest.approx(c.step_overhead_s + mem + cmp_)
    assert chunk_pairs(0, 4) == 10 and chunk_pairs(10, 2) == 2 * 10 + 3


def test_one_request_alone_ttft_is_prefill_and_itl_is_step_cost() -> None:
    L, out = 3000, 12
    sched = SchedulerConfig(max_num_batched_tokens=1024)
    res = simulate(COST, Workload(num_requests=1, rate=1.0, input_len=L, output_len=out), sched)
    assert res.ttft_s[0] == pytest.approx(COST.prefill_time_s(L, chunk=1024))
    # 3 chunks of the prompt: a single-chunk prefill would be cheaper (weights read once)
    assert res.ttft_s[0] > COST.prefill_time_s(L)
    gaps = np.diff(res.token_times(0))
    expect = [COST.decode_step_s(1, L + i) for i in range(1, out)]
    assert np.allclose(gaps, expect, rtol=1e-12)
    s = summarize_sim(res)
    assert s["median_itl_ms"] == pytest.approx(float(np.median(expect)) * 1e3)
    assert s["completed"] == 1 and s["total_output_tokens"] == out


def test_api_overhead_adds_to_ttft_only() -> None:
    base = simulate(COST, Workload(num_requests=1, rate=1.0, input_len=500, output_len=5))
    slow = simulate(COST, Workload(num_requests=1, rate=1.0, input_len=500, output_len=5), SchedulerConfig(api_overhead_s=0.05))
    assert slow.ttft_s[0] - base.ttft_s[0] == pytest.approx(0.05)
    assert np.allclose(np.diff(slow.token_times(0)), np.diff(base.token_times(0)))


def test_full_kv_pool_makes_requests_wait() -> None:
    # room for two requests (1,000 prompt + 200 output each) at a time
    small = COST.with_(kv_pool_tokens=2500)
    res = simulate(small, Workload(num_requests=8, input_len=1000, output_len=200))  # all at t = 0
    s = summarize_sim(res)
    assert s["completed"] == 8 and s["preemptions"] == 0
    running = max(max(w.ts_running) for w in res.workers)
    assert running == 2
    assert s["max_kv_usage"] <= 1.0 and s["max_kv_usage"] > 0.9
    assert s["max_waiting"] >= 5
    # the last requests wait for three rounds of earlier ones
    order = np.sort(res.ttft_s)
    assert order[-1] > 3 * (200 * COST.decode_step_s(2, 1100))
    # with a pool that holds everyone nobody waits that long
    big = simulate(COST, Workload(num_requests=8, input_len=1000, output_len=200))
    assert np.max(big.ttft_s) < order[-1] / 5


def test_preempt_mode_evicts_and_recomputes() -> None:
    small = COST.with_(kv_pool_tokens=3000)
    w = Workload(num_requests=6, input_len=400, output_len=600)
    res = simulate(small, w, SchedulerConfig(preempt=True))
    s = summarize_sim(res)
    assert s["completed"] == 6 and s["preemptions"] > 0
    assert all(len(res.token_times(i)) == 600 for i in range(6))
    # a preempted request shows the stall as one long gap
    victim = int(np.argmax(res.preemptions))
    assert np.max(np.diff(res.token_times(victim))) > 10 * COST.decode_step_s(1, 500)
    # reserve mode never preempts
    assert summarize_sim(simulate(small, w))["preemptions"] == 0


def test_request_too_big_for_the_pool_fails_cleanly() -> None:
    res = simulate(COST.with_(kv_pool_tokens=500), Workload(num_requests=2, input_len=1000, output_len=10))
    s = summarize_sim(res)
    assert s["completed"] == 0 and s["failed"] == 2
    recs = list(to_records(res, model="m"))
    assert not recs[0].ok and "KV" in (recs[0].error_message or "")


def _interference(budget: int) -> dict:
    # a steady stream of decoders; long prompts arrive now and then
    w = Workload(num_requests=150, rate=3.0, input_len=4000, output_len=300, seed=7)
    return summarize_sim(simulate(COST, w, SchedulerConfig(max_num_batched_tokens=budget)))


def test_smaller_chunk_budget_lowers_itl_p99_and_raises_ttft() -> None:
    small, large = _interference(512), _interference(8192)
    assert small["p99_itl_ms"] < 0.6 * large["p99_itl_ms"]
    assert small["median_ttft_ms"] > 1.1 * large["median_ttft_ms"]


def test_prefix_cache_hit_removes_its_share_of_prefill() -> None:
    L, P = 2000, 1500
    w = Workload(num_requests=6, concurrency=1, input_len=L, output_len=4, prefix_len=P, prefix_share=1.0)
    res = simulate(COST, w)
    assert res.ttft_s[0] == pytest.approx(COST.prefill_time_s(L))  # cold cache
    for t in res.ttft_s[1:]:
        assert t == pytest.approx(COST.prefill_time_s(L, start=P))
    assert list(res.cached_tokens) == [0] + [P] * 5
    off = simulate(COST, w, SchedulerConfig(prefix_caching=False))
    assert np.allclose(off.ttft_s, COST.prefill_time_s(L))
    # half the requests carry the prefix: about half hit
    half = simulate(COST, replace(w, num_requests=400, prefix_share=0.5, seed=3))
    s = summarize_sim(half)
    assert 0.4 < s["prefix_hit_requests"] / 400 < 0.6
    assert s["prefix_hit_requests"] == s["prefix_requests"] - 1


def test_deterministic_under_a_seed() -> None:
    w = Workload(num_requests=120, rate=5.0, input_len=800, output_len=80, range_ratio=0.5, prefix_len=200,
                 prefix_share=0.3, seed=11)
    a = summarize_sim(simulate(COST, w))
    b = summarize_sim(simulate(COST, w))
    assert a == b
    c = summarize_sim(simulate(COST, replace(w, seed=12)))
    assert c["median_ttft_ms"] != a["median_ttft_ms"]
    ra = [r.to_dict() for r in to_records(simulate(COST, w), model="m")]
    rb = [r.to_dict() for r in to_records(simulate(COST, w), model="m")]
    assert ra == rb


def test_closed_loop_keeps_n_in_flight() -> None:
    res = simulate(COST, Workload(num_requests=40, concurrency=3, input_len=300, output_len=20))
    ev = sorted([(t, 1) for t in res.t_send] + [(t, -1) for t in res.t_last], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, d in ev:
        live += d
        peak = max(peak, live)
    assert peak == 3
    assert np.sum(res.t_send == 0.0) == 3


def test_rate_with_concurrency_cap_delays_sends() -> None:
    w = Workload(num_requests=30, rate=1000.0, concurrency=2, input_len=300, output_len=20, arrival="constant")
    res = simulate(COST, w)
    plan = build_requests(w)
    assert np.all(res.t_send >= plan.arrival_s - 1e-12)
    assert res.t_send[-1] > plan.arrival_s[-1] + 0.1


def test_disaggregation_transfer_time() -> None:
    L = 2000
    w = Workload(num_requests=1, rate=1.0, input_len=L, output_len=5)
    res = simulate(COST, w, deploy=Deployment(prefill_replicas=1, decode_replicas=1))
    xfer = L * COST.kv_bytes_per_token / COST.interconnect_bytes_s
    assert res.xfer_s[0] == pytest.approx(xfer)
    assert COST.kv_transfer_s(L) == pytest.approx(xfer)
    # TTFT = prefill on P + transfer + the decode replica's first step
    assert res.ttft_s[0] == pytest.approx(COST.prefill_time_s(L) + xfer + COST.decode_step_s(1, L))
    assert len(res.token_times(0)) == 5


def test_one_shared_device_disaggregation_does_not_pay() -> None:
    w = Workload(num_requests=200, rate=2.0, input_len=3000, output_len=200, seed=2)
    colo = summarize_sim(simulate(COST, w))
    shared = summarize_sim(simulate(COST, w, deploy=Deployment(prefill_replicas=1, decode_replicas=1, shared_device=True)))
    assert shared["median_ttft_ms"] > colo["median_ttft_ms"]
    assert shared["output_throughput"] <= colo["output_throughput"] * 1.01


def test_llamacpp_policy_uses_slots() -> None:
    sched = SchedulerConfig(policy="llamacpp", max_num_seqs=4, max_num_batched_tokens=2048)
    res = simulate(COST.with_(kv_pool_tokens=16384), Workload(num_requests=12, input_len=500, output_len=50), sched)
    assert max(max(w.ts_running) for w in res.workers) == 4
    assert summarize_sim(res)["completed"] == 12
    # a request longer than one slot's context (16384 / 4) is refused
    big = simulate(COST.with_(kv_pool_tokens=16384), Workload(num_requests=1, input_len=5000, output_len=10), sched)
    assert not big.ok[0]


def test_bad_configs_are_input_errors() -> None:
    with pytest.raises(InputError):
        simulate(COST, Workload(num_requests=1), SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=32))
    with pytest.raises(InputError):
        simulate(COST, Workload(num_requests=1, prefix_len=5000, input_len=100))
    with pytest.raises(InputError):
        simulate(COST, Workload(num_requests=1), deploy=Deployment(prefill_replicas=1, decode_replicas=0))
    with pytest.raises(InputError):
        Workload(duration_s=10).validate()


def test_duration_bounds_closed_loop_and_rate() -> None:
    res = simulate(COST, Workload(duration_s=20.0, concurrency=2, input_len=200, output_len=30))
    assert res.n > 10
    assert np.max(res.t_send) < 20.0
    r2 = simulate(COST, Workload(duration_s=30.0, rate=2.0, input_len=200, output_len=30, seed=1))
    assert 30 < r2.n < 95 and np.max(r2.t_send) < 30.0


def test_arrivals_are_benchs_schedule() -> None:
    from phasescope.load.schedule import build_schedule

    w = Workload(num_requests=50, rate=3.0, arrival="gamma", burstiness=0.5, seed=9)
    sched = build_schedule(50, rate=3.0, burstiness=0.5, seed=9)
    assert np.allclose(build_requests(w).arrival_s, [r.offset_s for r in sched.requests])
    c = build_requests(Workload(num_requests=5, rate=4.0, arrival="constant"))
    assert np.allclose(c.arrival_s, [0, 0.25, 0.5, 0.75, 1.0])


def test_cost_model_from_theory_catalog() -> None:
    c = cost_from_theory("llama-3.1-8b", "h100")
    # Llama-3.1-8B BF16: 128 KiB KV per token, ~15 GB read per decode step (theory.md §2)
    assert c.kv_bytes_per_token == 131072
    assert 14.5e9 < c.weight_bytes < 15.5e9
    assert c.tp == 1 and c.kv_pool_tokens > 100_000
    big = cost_from_theory("llama-3.1-70b", "h100")
    assert big.tp == 4  # 141 GB of weights need 4 × 80 GB


def test_llamacpp_prefill_replica_slot_waits_for_its_kv_transfer() -> None:
    # a llama.cpp prefill replica keeps a prompt's slot until its KV is shipped; admission must wait
    # for a free slot, not only for running < max_num_seqs (it raised IndexError: pop from empty list)
    cost = cost_from_theory("llama-3.1-8b", "h100", kv_pool_tokens=30000)
    sched = SchedulerConfig(policy="llamacpp", max_num_seqs=4, max_num_batched_tokens=2048)
    res = simulate(cost, Workload(num_requests=150, rate=20.0, seed=3), sched, Deployment(prefill_replicas=1, decode_replicas=2))
    s = summarize_sim(res)
    assert s["completed"] == 150 and s["failed"] == 0
