"""llama.cpp on a few CPU cores: the step-time terms a roofline from ``hw`` alone misses (issue 36).

``plan`` from the device alone predicted 1.2–3.4× the rates the embedded engine reached over a grid of
synthetic shapes (``benchmarks/synthetic_grid.py``, docs/commands/engine.md). The misses were systematic,
and each has a term here, fitted once on that grid's 18 cells (smollm2-135m, qwen2.5-0.5b, llama-3.2-1b;
Q8_0 and Q4_K_M; prompts 128/512/1024; a 2-vCPU Xeon, stop 41) and checked on shapes it never saw:

* **Prefill GEMMs run at a rate set by the weights' storage type**, not one efficiency for every file.
  llama.cpp multiplies quantized weights by quantized activations with a kernel per type; relative to the
  device's compute peak: Q8_0 0.25, Q5_0/Q5_1 0.20, the K-quants (Q2_K … Q6_K) 0.42. A "Q4_K_M" file is not
  all K-quants: a tensor whose input width is not a multiple of 256 falls back to Q5_0 (Q6_K to Q8_0)
  (``llama-quantize``: "not divisible by 256 … falling back"), which is why qwen2.5-0.5b Q4_K_M (hidden 896)
  prefills no faster than its Q8_0 while llama-3.2-1b Q4_K_M (hidden 2048) runs 1.5× faster.
* **A prompt's attention runs at its own, lower rate** (0.08 of the peak), apart from the GEMMs: per-head
  KQ, softmax and V products (``CostModel.attn_flops_eff``).
* **Each prompt pays a fixed 42 ms** (graph build, the first ubatch's weight reads, the output's logits),
  and **each step 60 µs per layer** (the thread barriers between a layer's graph ops).
* **Decode streams the weights at 0.49 of ``hw``'s read bandwidth** (two threads of dequantize-and-dot
  do not reach a streaming kernel's rate), plus the matrix-vector math at 0.5 of the peak as before.
* **Q5_0/Q5_1 weights cost extra math per decoded token** (unpacking the fifth bit: 0.086 of the peak
  per weight's two FLOPs), which the bandwidth term alone does not see.
* **Decode attention is compute-bound and slow, and costs the same per (layer, query head, context token)
  whatever the head width**: 41,500 FLOP-equivalents of the peak (~62 ns here) for heads of 64 and of 128
  (fitted on 64-wide heads only, it predicted qwen2.5-1.5b's and llama-3.2-3b's 128-wide heads within
  13 %; a FLOP rate overpredicted their attention 2×). smollm2 loses 48 % of its decode rate from 128 to
  1,024 tokens of context, where the KV bytes alone predicted 12 %.

Types without a measured class (F16, BF16, F32, Q4_0, IQ*, MXFP4, …) take the Q8_0 figures and are named in
the cost model's ``source``. GPUs keep the roofline of :mod:`.build` unchanged.
"""

from __future__ import annotations

from typing import Any

from phasescope.theory.models import ModelSpec

#: prefill GEMM efficiency (share of the device's compute peak) by weight-type class
PREFILL_ETA: dict[str, float] = {"q8": 0.254, "q5": 0.200, "k": 0.415}
PREFILL_ATTN_ETA = 0.079
PREFILL_OVERHEAD_S = 0.042
DECODE_BW_ETA = 0.49
DECODE_MATH_ETA = 0.5
#: decode attention: FLOP-equivalents of the peak per (layer, query head, context token), whatever the head
#: width (64 or 128: the same ~62 ns on the grid's machine)
DECODE_ATTN_FLOP_EQ = 41_500.0
#: extra math per decoded token for each weight of the class (share of the peak, per 2 FLOPs per weight)
DEQUANT_ETA: dict[str, float] = {"q5": 0.086}
#: a step's fixed cost per layer (thread barriers between a layer's ~20 graph ops)
LAYER_OVERHEAD_S = 60e-6

#: the grid cells the terms were fitted on (shape, weight type, prompt tokens); every other cell is held out
FITTED_ON: frozenset[tuple[str, str, int]] = frozenset(
    (shape, qt, p) for shape in ("smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b") for qt in ("Q8_0", "Q4_K_M")
    for p in (128, 512, 1024))

#: the machine's typical state when the terms were fitted (stop 41's `hw` profile): the bandwidth kernel's median
#: pass over its best (27.2 / 30.42 GB/s) and the FP32 GEMM's median over the BF16 peak the terms are shares of
#: (297.8 / 665.6 GFLOP/s). A profile with its own medians rescales the terms by how far it sits from these
#: (:func:`machine_factors`); one without (a catalog CPU, an older profile) uses them as they are.
FIT_BW_MEDIAN_OVER_BEST = 27.2 / 30.42
FIT_GEMM_MEDIAN_OVER_PEAK = 297.8 / 665.6

_CLASS = {"Q8_0": "q8", "Q5_0": "q5", "Q5_1": "q5", "Q2_K": "k", "Q3_K": "k", "Q4_K": "k", "Q5_K": "k", "Q6_K": "k"}
#: a quant name's nominal (body, LM head) types, and the type each falls back to on a width not divisible
#: by 256 (llama.cpp src/llama-quant.cpp, ``tensor_type_fallback``)
_NOMINAL = {
    "q8_0": ("Q8_0", "Q8_0"), "q5_0": ("Q5_0", "Q8_0"), "q5_1": ("Q5_1", "Q8_0"),
    "q2_k": ("Q2_K", "Q6_K"), "q3_k_m": ("Q3_K", "Q6_K"), "q3_k_s": ("Q3_K", "Q6_K"), "q3_k_l": ("Q3_K", "Q6_K"),
    "q4_k_m": ("Q4_K", "Q6_K"), "q4_k_s": ("Q4_K", "Q6_K"), "q5_k_m": ("Q5_K", "Q6_K"), "q5_k_s": ("Q5_K", "Q6_K"),
    "q6_k": ("Q6_K", "Q6_K"),
}
_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def type_class(ggml_type: str) -> str:
    """``q8`` | ``q5`` | ``k`` for a calibrated GGML type, else ``other``."""
    return _CLASS.get(ggml_type.upper(), "other")


def _dense_widths(spec: ModelSpec) -> list[tuple[int, float]]:
    """(input width, parameters) of one dense layer's matrices: q, k, v, o, gate, up, down."""
    d, nq, nkv, dh, ff = (spec.hidden_size or 0, spec.n_heads or 0, spec.n_kv_heads or 0, spec.head_dim or 0,
                          spec.intermediate_size or 0)
    return [(d, d * nq * dh), (d, 2.0 * d * nkv * dh), (nq * dh, nq * dh * d), (d, 2.0 * d * ff), (ff, ff * d)]


def type_mix(spec: ModelSpec, quant: str | None = None) -> tuple[dict[str, float], dict[str, float], str]:
    """(body params by type, LM-head params by type, how it was found) for ``spec`` stored as ``quant``.

    A GGUF file's tensor table when the spec comes from one and no other quant is asked for; else the
    quant's nominal types with llama-quantize's fallback where a width is not a multiple of 256."""
    head_n = float(spec.embedding_params or 0)
    if spec.matmul_types and (quant is None or (spec.dtype or "").lower() == quant.lower()):
        body: dict[str, float] = {}
        head: dict[str, float] = {}
        for t, nb, nh in spec.matmul_types:
            body[t] = body.get(t, 0.0) + nb
            head[t] = head.get(t, 0.0) + nh
        return body, head, "the file's tensor types"
    name = (quant or spec.dtype or "bf16").lower()
    n_body = float(spec.nonembedding_active_params or 0)
    if name not in _NOMINAL:
        return {name.upper(): n_body}, {name.upper(): head_n}, f"{name} throughout"
    t_body, t_head = _NOMINAL[name]
    widths = _dense_widths(spec)
    total = sum(n for _, n in widths)
    fall = sum(n for w, n in widths if w % 256) / total if total and t_body in _FALLBACK else 0.0
    body = {t_body: n_body * (1 - fall)}
    if fall:
        body[_FALLBACK[t_body]] = body.get(_FALLBACK[t_body], 0.0) + n_body * fall
    h = _FALLBACK.get(t_head, t_head) if (spec.hidden_size or 0) % 256 and t_head in _FALLBACK else t_head
    note = f"{name}'s nominal types" + (f", {fall:.0%} of the body falling back (width not a multiple of 256)"
                                        if fall else "")
    return body, {h: head_n}, note


def machine_factors(device: Any, peak_flops: float) -> tuple[float, float]:
    """(bandwidth, compute) factors of this machine's typical state against the one the terms were fitted at:
    the profile's median bandwidth pass over its best, and its median GEMM over the compute peak, each divided
    by the fit's. A shared VM's speed drifts: 1–3 hours after they were measured the same cells ran 13–37 % faster in prefill
    and 9–87 % in decode, and the profile's best pass moved 5 % while its medians moved 18 % and 19 %."""
    bw = gemm = 1.0
    best, med = getattr(device, "mem_bandwidth_gb_s", None), getattr(device, "bw_median_gb_s", None)
    if best and med:
        bw = (med / best) / FIT_BW_MEDIAN_OVER_BEST
    g = getattr(device, "gemm_median_tflops", None)
    if g and peak_flops:
        gemm = (g * 1e12 / peak_flops) / FIT_GEMM_MEDIAN_OVER_PEAK
    return bw, gemm


def cpu_terms(spec: ModelSpec, quant: str | None, device: Any, peak_flops: float, tp: int = 1) -> dict[str, Any]:
    """The CostModel fields of llama.cpp on CPU cores for this model (module docstring) on a replica of ``tp``
    devices of ``peak_flops`` each, rescaled to the device profile's typical state (:func:`machine_factors`)."""
    bwf, cf = machine_factors(device, peak_flops)
    body, head, how = type_mix(spec, quant)
    n_body = sum(body.values())
    other = sorted(t for t in {**body, **head} if type_class(t) == "other" and (body.get(t) or head.get(t)))
    slow = sum(n / PREFILL_ETA.get(type_class(t), PREFILL_ETA["q8"]) for t, n in body.items())
    flops_eff = n_body / slow if slow > 0 else PREFILL_ETA["q8"]
    dequant = 0.0
    for mix in (body, head):
        for t, n in mix.items():
            eta = DEQUANT_ETA.get(type_class(t))
            if eta:
                dequant += 2.0 * n / (peak_flops * tp * eta)
    head_dim = spec.head_dim or 128
    return {
        "flops_eff": flops_eff * cf,
        "attn_flops_eff": PREFILL_ATTN_ETA * cf,
        "prefill_overhead_s": PREFILL_OVERHEAD_S / cf,
        "step_overhead_s": LAYER_OVERHEAD_S * (spec.n_layers or 0) / cf,
        "bw_eff": DECODE_BW_ETA * bwf,
        "decode_flops_eff": DECODE_MATH_ETA * cf,
        # attn_flops_per_pair = 4·L·n_q·d_h: at this efficiency a (layer, head, position) costs FLOP_EQ / peak
        "decode_attn_flops_eff": 4.0 * head_dim / DECODE_ATTN_FLOP_EQ * cf,
        "dequant_s_per_step": dequant / cf,
        "source": {"cpu_model": "llama.cpp on CPU cores (planning.cpu, fitted on the synthetic grid)",
                   "weight_types": {t: round(n / 1e6, 1) for t, n in body.items() if n} | {
                       f"{t} (LM head)": round(n / 1e6, 1) for t, n in head.items() if n},
                   "weight_types_from": how, "uncalibrated_types": other,
                   "machine_factors": {"bandwidth": round(bwf, 3), "compute": round(cf, 3)}},
    }
