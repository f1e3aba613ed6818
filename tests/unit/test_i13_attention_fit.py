"""Calibration separates a prompt's attention from its GEMMs (issue #13, plan validation).

Measured on the embedded engine (plan_validation, 2 Dec 2026, quiet): one 512-token prompt prefilled in
650-730 ms, two 256-token prompts sent together (the same 512 tokens, half the query-key pairs) in 570 ms,
so a prompt's cost is not a function of its tokens alone. With one efficiency for all prefill FLOPs the fit
through 128- and 512-token probes over-predicted the 2-user TTFT by 13 %. Here an engine whose attention
runs at 1/10 of its GEMM rate is probed as the benchmark probes (lone prompts of two lengths, batches of
2, 3, 4 short prompts sent together); the fit must price a batch of prompts it never saw."""

from __future__ import annotations

import pytest

from phasescope.measure.records import RequestRecord
from phasescope.planning.build import cost_from_theory
from phasescope.planning.calibrate import calibrate
from phasescope.planning.costmodel import chunk_pairs
from phasescope.planning.metrics import to_records
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload
from phasescope.theory.devices import custom_device

from plan_synth import on_one_clock

DEV = custom_device(40.0, name="x", dense_bf16_tflops=0.665)
TRUTH = cost_from_theory("gemma-3-270m", DEV, kv_pool_tokens=16384).with_(
    bw_eff=0.6, flops_eff=0.3, attn_flops_eff=0.03, step_overhead_s=0.004)
SCHED = SchedulerConfig(policy="llamacpp", max_num_seqs=4, max_num_batched_tokens=2048, api_overhead_s=0.004)


def _probe() -> list[RequestRecord]:
    def recs(w: Workload) -> list[RequestRecord]:
        return list(to_records(simulate(TRUTH, w, SCHED), model="m"))

    groups = [recs(Workload(num_requests=1, concurrency=1, input_len=L, output_len=16)) for L in (128,) * 3 + (512,) * 3]
    groups += [recs(Workload(num_requests=b, concurrency=b, input_len=64, output_len=32)) for b in (2, 3, 4) for _ in range(2)]
    return on_one_clock(groups)


def _batch_prefill(cost, n_prompts: int, n: int) -> float:
    return cost.step_time_s(0, 0.0, n_prompts * n, n_prompts * chunk_pairs(0, n), n_prompts * n, n_prompts, n_prompts)


def test_attention_is_fitted_apart_and_prices_an_unseen_batch_of_prompts() -> None:
    base = TRUTH.with_(flops_eff=0.5, attn_flops_eff=None, bw_eff=0.8)
    cal = calibrate(_probe(), base, tail_breaks=SCHED.tail_breaks(base))
    cm = cal.cost
    assert cm.attn_flops_eff == pytest.approx(0.03, rel=0.1)
    assert cm.flops_eff == pytest.approx(0.3, rel=0.1)
    # two and four 256-token prompts batched, and one 1024-token prompt: never probed
    for k, n in ((2, 252), (4, 252), (1, 1020)):
        assert _batch_prefill(cm, k, n) == pytest.approx(_batch_prefill(TRUTH, k, n), rel=0.05), (k, n)


def test_a_separate_attention_rate_never_beats_the_compute_ceiling() -> None:
    # η ≤ 1 (calibrate rejects a faster fit): a prefill is never below its FLOPs at the peak rate
    for eta in (1.0, 0.5, 0.03):
        cm = TRUTH.with_(attn_flops_eff=eta, flops_eff=1.0, step_overhead_s=0.0)
        for n in (1, 16, 256, 1024, 4096):
            flops = TRUTH.flops_per_token * n + TRUTH.attn_flops_per_pair * chunk_pairs(0, n) + TRUTH.lm_head_flops
            assert cm.prefill_time_s(n) >= flops / TRUTH.peak_flops * (1 - 1e-12), (eta, n)
