"""llama.cpp's decode step is not smooth in the batch size (engine.md §6: 2 streams often no faster than 1):
calibration fits a per-batch-size scale from clean batches, so B = 2 and B = 4 are both right (issue #13)."""

from __future__ import annotations

import pytest

from phasescope.planning.calibrate import calibrate
from phasescope.planning.costmodel import CostModel
from phasescope.planning.metrics import to_records
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload

from plan_synth import on_one_clock

BASE = CostModel(name="cpu", weight_bytes=0.25e9, kv_bytes_per_token=18432.0, flops_per_token=2 * 0.1e9,
                 attn_flops_per_pair=4 * 4 * 256 * 18, lm_head_flops=2 * 640 * 262144, bandwidth_bytes_s=40e9,
                 peak_flops=600e9, overlap="sum", kv_pool_tokens=16384, bw_eff=0.6, flops_eff=0.5,
                 step_overhead_s=0.001)
#: the engine: B = 2 costs 1.5× what a smooth model says, B = 4 is smooth
TRUTH = BASE.with_(bw_eff=2.0, flops_eff=0.3, decode_flops_eff=0.1, decode_batch_scale=[[1, 1.0], [2, 1.5], [4, 1.0]])
SCHED = SchedulerConfig(policy="llamacpp", max_num_seqs=4, max_num_batched_tokens=2048)


def _records(batches: tuple[int, ...]) -> list:
    groups = []
    for L in (128, 512):
        for _ in range(2):
            groups.append(list(to_records(simulate(TRUTH, Workload(num_requests=1, concurrency=1, input_len=L, output_len=32), SCHED), model="m")))
    for b in batches:
        groups.append(list(to_records(simulate(TRUTH, Workload(num_requests=b, concurrency=b, input_len=64, output_len=48), SCHED), model="m")))
    return on_one_clock(groups)


def test_batch_scale_makes_two_and_four_streams_right() -> None:
    cal = calibrate(_records((2, 4)), BASE)
    pts = cal.fitted["decode_batch_scale"]
    assert pts is not None and pts[0] == [1.0, 1.0]
    assert {int(b) for b, _ in pts} >= {2, 4}
    for B in (1, 2, 4):
        assert cal.cost.decode_step_s(B, 200) == pytest.approx(TRUTH.decode_step_s(B, 200), rel=0.05), B
    assert cal.residuals["batched_decode_rel_err_median"] < cal.residuals["batched_decode_rel_err_median_smooth"]


def test_without_the_batch_of_two_the_smooth_model_misses_it() -> None:
    cal = calibrate(_records((4,)), BASE)
    err2 = cal.cost.decode_step_s(2, 200) / TRUTH.decode_step_s(2, 200) - 1
    assert err2 < -0.15  # under-predicts the bimodal 2-stream step, as plan_validation saw (−18 %)


def test_scale_applies_to_decode_only_steps_and_is_held_beyond_the_last_size() -> None:
    c = BASE.with_(decode_batch_scale=[[1, 1.0], [2, 1.5], [4, 1.2]])
    smooth = BASE
    assert c.decode_step_s(2, 100) == pytest.approx(1.5 * smooth.decode_step_s(2, 100))
    assert c.decode_step_s(3, 100) == pytest.approx(1.35 * smooth.decode_step_s(3, 100))
    assert c.decode_step_s(8, 100) == pytest.approx(1.2 * smooth.decode_step_s(8, 100))
    assert c.step_time_s(2, 200, prefill_tokens=64, prefill_pairs=2080, prefill_kv_tokens=64, n_prefill_chunks=1) == \
        pytest.approx(smooth.step_time_s(2, 200, prefill_tokens=64, prefill_pairs=2080, prefill_kv_tokens=64, n_prefill_chunks=1))


def test_requests_sent_at_the_same_instant_are_batched_together() -> None:
    """Two users starting together: llama-server's update_slots takes both queued prompts in one batch,
    and equal requests then stay in lockstep; the simulator used to start a step with the first alone
    (TTFTs alternating 1× and 2× a prefill, a median in between that no real run shows)."""
    c = BASE.with_(bw_eff=2.0, flops_eff=0.3, decode_flops_eff=0.1)
    res = simulate(c, Workload(concurrency=2, num_requests=8, input_len=256, output_len=16), SCHED)
    both = c.step_time_s(0, 0.0, prefill_tokens=512, prefill_pairs=2 * (256 * 257 / 2), prefill_kv_tokens=512,
                         n_prefill_chunks=2, n_sampled=2)
    assert list(res.ttft_s) == pytest.approx([both] * 8, rel=1e-12)


def test_a_disturbed_batch_cannot_scale_beyond_b_serial_steps() -> None:
    """A batch measured while other work hogged the CPU (8× slow) must not become an 8× batch scale:
    B decode rows in one step never cost more than B single steps."""
    from phasescope.planning.calibrate import batch_scale_points

    c = BASE
    pts = batch_scale_points(c, [(100.0, 2.0, 8 * c.decode_step_s(2, 100)), (100.0, 2.0, 8 * c.decode_step_s(2, 100))])
    (b1, s1), (b2, s2) = pts
    assert (b1, s1) == (1.0, 1.0) and b2 == 2.0
    assert s2 * c.decode_step_s(2, 100) == pytest.approx(1.25 * 2 * c.decode_step_s(1, 100))
