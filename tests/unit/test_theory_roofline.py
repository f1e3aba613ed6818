"""Every roofline formula pinned against hand-computed values (theory.md §1–§7)."""

from __future__ import annotations

import math

import pytest

from phasescope.theory import roofline as R
from phasescope.theory import rows
from phasescope.theory.devices import custom_device, default_devices, get_device
from phasescope.theory.models import get_catalog_model, spec_from_weights

SEED = {  # seed article table: bandwidth GB/s -> printed ceiling for 16 GB of weights
    "cpu-ddr5-5600-2ch": (90, 6),
    "a10g": (600, 38),
    "l40s": (864, 54),
    "rtx-4090": (1008, 63),
    "a100-80gb-sxm": (2039, 127),
    "h100-sxm": (3350, 209),
}


def test_seed_six_ceilings() -> None:
    spec = spec_from_weights(16)
    devs = default_devices()
    assert [d.id for d in devs] == list(SEED)
    for d in devs:
        bw, printed = SEED[d.id]
        assert d.mem_bandwidth_gb_s == bw
        row = rows.ceiling_row(spec, d)
        assert row.bandwidth_roof_tok_s == pytest.approx(bw / 16)  # BW / 16 GB, by hand
        assert row.binding_roof == "bandwidth"
        assert round(row.decode_ceiling_tok_s) == printed


def test_halving_bytes_per_weight_doubles_the_ceiling() -> None:
    llama = get_catalog_model("llama-3.1-8b")
    h100 = get_device("h100-sxm")
    bf16 = R.decode_ceiling(llama, h100, quant="bf16").bandwidth_tok_s
    fp8 = R.decode_ceiling(llama, h100, quant="fp8").bandwidth_tok_s
    assert fp8 == pytest.approx(2 * bf16)
    # theory.md §2: 15.01 GB read per token at BF16 (7,504,924,672 params x 2 B)
    assert R.weight_bytes_read(llama, "bf16") == 7_504_924_672 * 2


def test_llama_kv_and_decode_with_context() -> None:
    llama = get_catalog_model("llama-3.1-8b")
    assert R.kv_bytes_per_token(llama, "fp16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert R.kv_bytes_per_sequence(llama, 8000, "fp16") == 8000 * 131_072  # 1.05 GB
    assert R.kv_bytes_per_sequence(llama, 8000) / 1e9 == pytest.approx(1.05, abs=0.005)
    assert R.kv_bytes_per_token(llama, "fp8") == 65_536
    assert R.kv_bytes_per_token(llama, "q8_0") == pytest.approx(131_072 / 2 * 34 / 32)
    # theory.md §2: BF16, s=4096, B=1: 15.01 + 0.54 GB -> <= 215 tok/s on H100, <= 65 on RTX 4090
    h100 = R.decode_ceiling(llama, get_device("h100-sxm"), context=4096)
    assert h100.step_bytes == pytest.approx(15.0098e9 + 0.5369e9, rel=1e-4)
    assert round(h100.ceiling_tok_s) == 215
    assert round(R.decode_ceiling(llama, get_device("rtx-4090"), context=4096).ceiling_tok_s) == 65


def test_deepseek_mla_kv() -> None:
    ds = get_catalog_model("deepseek-v3")
    assert ds.is_mla
    assert R.kv_bytes_per_token(ds, "bf16") == 61 * (512 + 64) * 2 == 70_272
    assert R.kv_bytes_per_token(ds, "fp8") == 35_136
    # the GQA formula with the config's 128 kv heads would be 71x larger; make sure it is not used
    assert R.kv_bytes_per_token(ds, "bf16") < 61 * 128 * 320 * 2 / 70


def test_explicit_head_dim_kv() -> None:
    qwen = get_catalog_model("qwen3-0.6b")  # hidden 1024 / 16 heads = 64, but head_dim = 128
    assert qwen.head_dim == 128
    assert R.kv_bytes_per_token(qwen) == 2 * 28 * 8 * 128 * 2 == 114_688
    gemma = get_catalog_model("gemma-2-9b")  # 3584 / 16 = 224, head_dim 256
    assert R.kv_bytes_per_token(gemma) == 2 * 42 * 8 * 256 * 2 == 344_064


def test_gemma3_sliding_window_kv() -> None:
    g = get_catalog_model("gemma-3-270m")  # 18 layers, 15 local (window 512) : 3 global, 1 kv head, d_h 256
    per_layer = 2 * 1 * 256 * 2
    assert R.kv_bytes_per_token(g) == 18 * per_layer == 18_432
    assert R.kv_bytes_per_token_global(g) == 3 * per_layer == 3_072
    assert R.kv_window_bytes(g) == 512 * 15 * per_layer
    # below the window every layer grows; beyond it only the global layers do
    assert R.kv_bytes_per_sequence(g, 400) == 400 * 18 * per_layer
    assert R.kv_bytes_per_sequence(g, 32_768) == (3 * 32_768 + 15 * 512) * per_layer
    growth = R.kv_bytes_per_sequence(g, 10_001) - R.kv_bytes_per_sequence(g, 10_000)
    assert growth == R.kv_bytes_per_token_global(g)


def test_expected_experts_touched_matches_theory() -> None:
    # theory.md §6: DeepSeek-V3 (256, 8): 8, 57, 163, 252; Mixtral (8, 2): 5.5 at B=4, 7.9 at B=16
    got = [R.expected_experts_touched(256, 8, b) for b in (1, 8, 32, 128)]
    assert [round(x) for x in got] == [8, 57, 163, 252]
    assert R.expected_experts_touched(8, 2, 4) == pytest.approx(8 * (1 - 0.75**4))
    assert round(R.expected_experts_touched(8, 2, 4), 1) == 5.5
    assert round(R.expected_experts_touched(8, 2, 16), 1) == 7.9
    assert R.expected_experts_touched(0, 0, 10) == 0


def test_moe_active_bytes() -> None:
    mix = get_catalog_model("mixtral-8x7b")
    routed = 32 * 8 * 3 * 4096 * 14336  # all routed expert weights
    assert mix.routed_expert_params == routed
    # batch 1 reads decode_read_params: non-expert (minus input embedding) + 2/8 of the experts
    nonexpert = 46_702_792_704 - routed - 32_000 * 4096
    assert nonexpert + routed // 4 == 12_748_853_248 == mix.decode_read_params
    assert R.weight_bytes_read(mix, "bf16", 1) == 12_748_853_248 * 2
    # batch 16 touches 7.9 of 8 experts per layer
    b16 = R.weight_bytes_read(mix, "bf16", 16)
    assert b16 == pytest.approx((nonexpert + routed * (1 - 0.75**16)) * 2)
    q = get_catalog_model("qwen3-30b-a3b")  # 128 experts top-8, 3.04 B read of 30.5 B
    assert R.weight_bytes_read(q, "bf16") == 3_041_867_776 * 2
    assert R.weight_bytes_total(q, "bf16") == 30_532_122_624 * 2
    # DeepSeek-V3 at FP8: 37 -> 163 -> 433 -> 659 GB per step (theory.md §6)
    ds = get_catalog_model("deepseek-v3")
    gb = [R.weight_bytes_read(ds, "fp8", b) / 1e9 for b in (1, 8, 32, 128)]
    assert [round(x) for x in gb] == [37, 163, 433, 659]


def test_gpt_oss_mixed_storage() -> None:
    g = get_catalog_model("gpt-oss-20b")
    assert g.expert_dtype == "mxfp4" and g.dtype == "bf16"
    expect = (g.total_params - g.routed_expert_params) * 2 + g.routed_expert_params * 4.25 / 8
    assert R.weight_bytes_total(g) == pytest.approx(expect)
    # all in one format when asked
    assert R.weight_bytes_total(g, "bf16") == g.total_params * 2


def test_prefill_flops_worked_example() -> None:
    llama = get_catalog_model("llama-3.1-8b")
    n = 8_030_261_248 - 2 * 128_256 * 4096
    linear = 2 * n * 4096
    attn = 2 * 32 * 4096 * 4096 * 4096
    head = 2 * 4096 * 128_256
    assert R.prefill_flops(llama, 4096) == pytest.approx(linear + attn + head)
    assert R.prefill_flops(llama, 4096) / 1e12 == pytest.approx(61.6, abs=0.05)
    assert round(R.prefill_floor_s(llama, get_device("h100-sxm"), 4096) * 1e3) == 62
    assert round(R.prefill_floor_s(llama, get_device("rtx-4090"), 4096) * 1e3) == 373
    assert R.prefill_flops(llama, 0) == 0


def test_prefill_sliding_window_caps_attention() -> None:
    g = get_catalog_model("gemma-3-270m")
    S, w = 8192, 512
    n = g.decode_read_params - 262_144 * 640
    pair = 4 * 4 * 256
    expect = 2 * n * S + pair * (3 * S * S / 2 + 15 * (w * w / 2 + (S - w) * w)) + 2 * 640 * 262_144
    assert R.prefill_flops(g, S) == pytest.approx(expect)


def test_decode_compute_roof_and_binding() -> None:
    # a small model on a slow-compute, fast-memory device binds on compute at batch 1
    spec = spec_from_weights(1.0)  # 0.5 B params at bf16 -> 1 GFLOP/token
    dev = custom_device(1000.0, dense_bf16_tflops=0.5)  # 0.5 TFLOPS
    r = R.decode_ceiling(spec, dev)
    assert r.bandwidth_tok_s == pytest.approx(1000.0)
    assert r.compute_tok_s == pytest.approx(500.0)
    assert r.ceiling_tok_s == pytest.approx(500.0)
    assert r.binding == "compute"


def test_aggregate_and_ridge_batch() -> None:
    spec = spec_from_weights(16)
    h100 = get_device("h100-sxm")
    # B* = (F/BW) * b_w / 2 = 989.4/3.35 = 295.3 for 16-bit weights (theory.md §3)
    b_star = R.ridge_batch_weights_only(989.4e12, 3350e9, 2)
    assert b_star == pytest.approx(295.34, abs=0.01)
    assert R.ridge_batch(spec, h100) == pytest.approx(b_star, rel=1e-4)
    below = R.decode_ceiling(spec, h100, batch=100)
    assert below.binding == "bandwidth"
    assert below.aggregate_tok_s == pytest.approx(100 * 3350e9 / 16e9)
    above = R.decode_ceiling(spec, h100, batch=1000)
    assert above.binding == "compute"
    assert above.aggregate_tok_s == pytest.approx(989.4e12 / 16e9)  # F / FLOPs per token
    # KV reads at long context push the crossover out to "never" for GQA attention
    llama = get_catalog_model("llama-3.1-8b")
    assert R.ridge_batch(llama, h100, context=4096) is None
    # MoE: experts reach the ridge only at B ~ B* * E / k
    mix = get_catalog_model("mixtral-8x7b")
    assert R.ridge_batch(mix, h100) > R.ridge_batch(llama, h100)


def test_pool_capacity_and_fit() -> None:
    llama = get_catalog_model("llama-3.1-8b")
    w = R.weight_bytes_total(llama, "bf16")
    pool = R.pool_capacity(memory_bytes=80e9, weight_bytes=w, kv_bytes_per_token=131_072,
                           kv_bytes_per_sequence=8000 * 131_072, gpu_memory_utilization=0.9)
    assert pool.pool_bytes == pytest.approx(72e9 - w)
    assert pool.pool_tokens == math.floor((72e9 - w) / 131_072)
    assert pool.max_concurrent_sequences == math.floor((72e9 - w) / (8000 * 131_072))
    assert pool.fits
    small = R.pool_capacity(memory_bytes=16e9, weight_bytes=w, kv_bytes_per_token=131_072)
    assert not small.fits and small.pool_tokens == 0
    assert R.fits_in_memory(w, 24e9) is True
    assert R.fits_in_memory(w, 16e9) is False
    assert R.fits_in_memory(w, None) is None


def test_ceiling_row_fields() -> None:
    row = rows.ceiling_row(get_catalog_model("llama-3.1-70b"), get_device("rtx-4090"), batch=8, context=1000)
    assert row.fits_in_memory is False  # 141 GB of bf16 weights on a 24 GB card
    assert row.bytes_per_token == pytest.approx(R.weight_bytes_read(get_catalog_model("llama-3.1-70b")) + 1000 * 327_680)
    assert row.aggregate_bytes_per_step == pytest.approx(row.weight_bytes_read + 8 * row.kv_bytes_read)
    assert row.aggregate_ceiling_tok_s > row.decode_ceiling_tok_s
