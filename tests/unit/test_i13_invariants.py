"""Physics never loses: property tests of every number the theory and the simulator print (issue #13).

For catalog model × device × tensor-parallel degree × batch × context (sampled by hypothesis with a fixed
seed, so the run is reproducible and takes a few seconds):

* theory: the decode step is at least bytes read ÷ (tp × bandwidth), the prefill floor at least
  FLOPs ÷ (tp × peak), and the aggregate at batch B at most B × the single-stream ceiling;
* the cost model and the simulator built from the same catalogs obey the same bounds (the old cost
  model broke them by tp²: it divided the bytes per GPU by tp *and* multiplied the bandwidth by tp);
* a single request in the simulator is exactly the cost model (TTFT = prefill alone, every gap = one
  decode step);
* the KV the simulator admits at once (sequences × context × KV bytes per token) never exceeds the pool
  the device's memory holds after its share of the weights.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasescope.errors import InputError
from phasescope.planning.build import cost_from_theory
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload
from phasescope.theory import parallel, rows
from phasescope.theory import roofline as R
from phasescope.theory.devices import list_devices
from phasescope.theory.models import list_models

MODELS = [m for m in list_models() if m.shape_known and m.nonembedding_active_params]
DEVICES = [d for d in list_devices() if d.peak_flops("bf16")]
GPU_DEVICES = [d for d in DEVICES if d.memory_bytes and d.kind != "cpu"]
TPS = [1, 2, 4, 8]
QUANTS = [None, "fp8", "int4"]
REL = 1 + 1e-9  # float slack only

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
SIM = settings(max_examples=80, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

models = st.sampled_from(MODELS)
devices = st.sampled_from(DEVICES)
gpus = st.sampled_from(GPU_DEVICES)
tps = st.sampled_from(TPS)
quants = st.sampled_from(QUANTS)
batches = st.sampled_from([1, 2, 3, 8, 32, 128])
contexts = st.sampled_from([0, 1, 500, 4096, 32768])


def _bw(dev, tp: int) -> float:
    return tp * dev.mem_bandwidth_bytes_s


def _cost(spec, dev, tp, quant, **kw):
    try:
        return cost_from_theory(spec, dev, tp=tp, quant=quant, **kw)
    except InputError:
        return None  # the weights do not fit this many devices: nothing to check


# --- theory ------------------------------------------------------------------------------------------------


@FAST
@given(models, devices, tps, quants, batches, contexts)
def test_theory_ceiling_never_beats_bandwidth_or_compute(spec, dev, tp, quant, batch, ctx) -> None:
    row = rows.ceiling_row(spec, dev, quant=quant, context=ctx, batch=batch, tp=tp)
    kv_seq = R.kv_bytes_per_sequence(spec, ctx)
    step1_floor = (R.weight_bytes_read(spec, quant, 1) + kv_seq) / _bw(dev, tp)
    assert 1.0 / row.decode_ceiling_tok_s >= step1_floor / REL
    stepb_floor = (R.weight_bytes_read(spec, quant, batch) + batch * kv_seq) / _bw(dev, tp)
    assert batch / row.aggregate_ceiling_tok_s >= stepb_floor / REL
    # the aggregate at batch B never exceeds B single streams
    assert row.aggregate_ceiling_tok_s <= batch * row.decode_ceiling_tok_s * REL
    peak = dev.peak_flops(R.compute_path(spec, quant))
    assert row.prefill_floor_s >= R.prefill_flops(spec, row.prompt_tokens) / (tp * peak) / REL
    assert row.tp == tp


# --- cost model ---------------------------------------------------------------------------------------------


@FAST
@given(models, devices, tps, quants, batches, contexts)
def test_cost_model_decode_and_prefill_never_beat_physics(spec, dev, tp, quant, batch, ctx) -> None:
    c = _cost(spec, dev, tp, quant, kv_pool_tokens=10**9)
    if c is None:
        return
    kv_seq = R.kv_bytes_per_sequence(spec, ctx)
    floor = (R.weight_bytes_read(spec, quant, batch) + batch * kv_seq) / _bw(dev, tp)
    assert c.decode_step_s(batch, ctx) >= floor / REL
    # aggregate decode throughput ≤ batch × the single-stream bandwidth ceiling
    single = _bw(dev, tp) / (R.weight_bytes_read(spec, quant, 1) + kv_seq)
    assert batch / c.decode_step_s(batch, ctx) <= batch * single * REL
    prompt = max(ctx, 1)
    peak = dev.peak_flops(R.compute_path(spec, quant))
    assert c.prefill_time_s(prompt) >= R.prefill_flops(spec, prompt) / (tp * peak) / REL


def test_tensor_parallel_step_scales_as_one_over_tp_not_tp_squared() -> None:
    """Issue #13's reproduction: fp8 70B on H100, tp 1/2/4 went 27.6 → 8.0 → 3.1 ms (∝ 1/tp²)."""
    steps = {}
    for tp in (1, 2, 4):
        c = cost_from_theory("llama-3.3-70b", "h100-sxm", quant="fp8", tp=tp, kv_pool_tokens=100_000)
        steps[tp] = c.decode_step_s(1, 1000) - c.step_overhead_s
    assert steps[1] / steps[2] < 2.05
    assert steps[1] / steps[4] < 4.1
    # bf16 on 4 H100: at or below 4 × 3,350 GB/s ÷ 141 GB ≈ 95 tok/s
    c4 = cost_from_theory("llama-3.3-70b", "h100-sxm", tp=4, kv_pool_tokens=100_000)
    assert 1.0 / c4.decode_step_s(1, 0) <= 95.0


def test_all_reduce_cost_is_megatron_ring() -> None:
    """Two all-reduces per layer of hidden × tokens × 2 B; a ring moves 2(tp−1)/tp of the buffer."""
    c1 = cost_from_theory("llama-3.3-70b", "h100-sxm", tp=1, kv_pool_tokens=100_000)
    c4 = cost_from_theory("llama-3.3-70b", "h100-sxm", tp=4, kv_pool_tokens=100_000)
    assert c1.allreduce_s(1) == 0.0
    t1, t1000 = c4.allreduce_s(1), c4.allreduce_s(1000)
    assert t1 > 0
    buf = 8192 * 1000 * 2.0  # hidden × tokens × bf16
    per_layer_bw = 2 * (2 * 3 / 4) * buf / c4.interconnect_bytes_s
    assert t1000 - t1 == pytest.approx(80 * per_layer_bw * (999 / 1000), rel=1e-9)


# --- simulator ----------------------------------------------------------------------------------------------


@SIM
@given(models, gpus, tps, st.sampled_from([1, 2, 4, 8]), st.sampled_from([16, 300, 2000]))
def test_simulated_decode_never_beats_physics(spec, dev, tp, users, prompt) -> None:
    c = _cost(spec, dev, tp, None, kv_pool_tokens=10**7)
    if c is None:
        return
    out = 6
    res = simulate(c, Workload(concurrency=users, num_requests=users, input_len=prompt, output_len=out),
                   SchedulerConfig(max_num_batched_tokens=max(8192, users * prompt), max_num_seqs=256))
    assert res.ok.all()
    kv_seq = R.kv_bytes_per_sequence(spec, prompt)
    for w in res.workers:
        for dur, n in zip(w.step_dur, w.itl_weight):
            if n:  # a step with n continuing decodes reads the weights and n contexts ≥ prompt
                floor = (R.weight_bytes_read(spec, None, n) + n * kv_seq) / _bw(dev, tp)
                assert dur >= floor / REL
    # aggregate output throughput ≤ users × single-stream ceiling (decode-only window of the run)
    single = _bw(dev, tp) / (R.weight_bytes_read(spec, None, 1) + kv_seq)
    t_dec = float(np.nanmax(res.t_last) - np.nanmax(res.t_first))
    if t_dec > 0:
        assert users * (out - 1) / t_dec <= users * single * REL


@SIM
@given(models, gpus, tps, st.sampled_from([1, 700, 3000]), st.sampled_from([2, 9]), st.sampled_from([512, 8192]))
def test_single_request_equals_cost_model_exactly(spec, dev, tp, prompt, out, budget) -> None:
    c = _cost(spec, dev, tp, None, kv_pool_tokens=10**7)
    if c is None:
        return
    res = simulate(c, Workload(num_requests=1, rate=1.0, input_len=prompt, output_len=out),
                   SchedulerConfig(max_num_batched_tokens=budget))
    assert res.ttft_s[0] == pytest.approx(c.prefill_time_s(prompt, chunk=budget), rel=1e-12)
    peak = dev.peak_flops(R.compute_path(spec, None))
    assert res.ttft_s[0] >= R.prefill_flops(spec, prompt) / (tp * peak) / REL
    gaps = np.diff(res.token_times(0))
    assert np.allclose(gaps, [c.decode_step_s(1, prompt + i) for i in range(1, out)], rtol=1e-12)


@SIM
@given(models, gpus, tps, st.sampled_from([512, 4096, 30000]), st.sampled_from([0.5, 0.9]))
def test_admitted_kv_never_exceeds_the_pool_memory_holds(spec, dev, tp, ctx, util) -> None:
    c = _cost(spec, dev, tp, None, gpu_memory_utilization=util)
    if c is None:
        return
    # physics: per device, memory × util − its share of the weights holds the pool
    per_dev_pool = dev.memory_bytes * util - R.weight_bytes_total(spec) / tp
    kv_per_dev = R.kv_bytes_per_token(spec) / parallel.kv_split(spec, tp)  # K/V heads split, or replicated
    assert c.kv_pool_tokens * kv_per_dev <= per_dev_pool * REL
    out = 4
    n = min(int(c.kv_pool_tokens // (ctx + out)) + 3, 400)
    if n < 1:
        return
    res = simulate(c, Workload(num_requests=n, input_len=ctx, output_len=out),
                   SchedulerConfig(max_num_batched_tokens=max(8192, ctx), max_num_seqs=512))
    for w in res.workers:
        running_max = max(w.ts_running) if w.ts_running else 0
        assert running_max * (ctx + out) <= w.kv_cap
        assert max(w.ts_kv, default=0) <= w.kv_cap
        assert running_max * (ctx + out) * R.kv_bytes_per_token(spec) <= tp * per_dev_pool * REL
