"""Ceilings from first principles — pure arithmetic on a ModelSpec and a Device (no I/O).

Every function names its formula and where it comes from (the "theory.md §N" sections are the team's
formula notes, which cite Kaplan et al. arXiv:2001.08361, Hoffmann et al. arXiv:2203.15556 App. F,
Pope et al. arXiv:2211.05102 and DeepSeek-V2 arXiv:2405.04434 §2.1).
Units: bytes, seconds, FLOP, FLOP/s; GB = 1e9 bytes.

Decode (memory-bound at small batch, §2)::

    bytes_step(B, s) = W_read(B)·b_w + B·s·KV_token
    per-sequence tok/s ≤ min(BW / bytes_step,  F / FLOPs_token)        (bandwidth roof, compute roof)
    aggregate tok/s   ≤ B · min(BW / bytes_step,  F / (B·FLOPs_token))

Prefill (compute-bound, §1)::

    F_prefill(S) ≈ 2·N·S + 2·L·S²·n_q·d_h (+ 2·d·V for the last token's logits);  t ≥ F_prefill / F_dense

Tensor parallelism over ``tp`` devices (:mod:`phasescope.theory.parallel`): each device reads ``bytes/tp``
at its *own* bandwidth, so a step takes ``bytes/(tp·BW)`` seconds — never ``bytes/(tp²·BW)`` — plus two
all-reduces per layer on the critical path (the next layer needs the sum):
``t_step = max(t_bw, t_compute) + t_allreduce``. The assembled rows of ``phasescope ceiling`` and
``phasescope kv`` are :mod:`phasescope.theory.rows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from phasescope.theory.devices import Device
from phasescope.theory.models import ModelSpec
from phasescope.theory.parallel import allreduce_s, kv_split, link_bytes_s
from phasescope.theory.quant import get_quant, kv_bytes_per_element

__all__ = [
    "expected_experts_touched",
    "weight_bytes_total",
    "weight_bytes_read",
    "kv_bytes_per_layer_token",
    "kv_bytes_per_token",
    "kv_bytes_per_token_global",
    "kv_window_bytes",
    "kv_bytes_per_sequence",
    "decode_attention_flops",
    "decode_flops_per_token",
    "prefill_flops",
    "compute_path",
    "decode_roofs",
    "DecodeRoofs",
    "decode_ceiling",
    "ridge_batch",
    "ridge_batch_weights_only",
    "prefill_floor_s",
    "pool_capacity",
    "PoolCapacity",
    "fits_in_memory",
]



# --- weights -----------------------------------------------------------------------------------------------


def expected_experts_touched(n_experts: int, top_k: int, batch: float) -> float:
    """Distinct experts loaded per MoE layer when ``batch`` tokens each pick ``top_k`` of ``n_experts``
    uniformly: ``E·(1 − (1 − k/E)^B)`` (theory.md §6, occupancy expectation; derived).

    DeepSeek-V3 (256, 8): B=1 → 8, B=8 → 57, B=32 → 163, B=128 → 252.
    """
    if n_experts <= 0 or top_k <= 0:
        return 0.0
    if batch <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** batch)


def _bits(spec: ModelSpec, quant: str | None, expert: bool) -> float:
    if quant is not None:
        return get_quant(quant).bits_per_weight
    if expert and spec.expert_dtype:
        return get_quant(spec.expert_dtype).bits_per_weight
    return get_quant(spec.dtype or "bf16").bits_per_weight


def _use_file_bytes(spec: ModelSpec, quant: str | None) -> bool:
    if spec.file_weight_bytes is None:
        return False
    if quant is None:
        return True
    return spec.dtype is not None and get_quant(quant).name == get_quant(spec.dtype).name and spec.origin == "weights"


def weight_bytes_total(spec: ModelSpec, quant: str | None = None) -> float:
    """All stored weight bytes (what must fit in memory): ``P·b_w`` (theory.md §4 "model size ≈ Σ params·bits/8").

    Exact file bytes (GGUF tensor table, ``--weights-gb``) win when no other ``quant`` is asked for.
    """
    if _use_file_bytes(spec, quant):
        return float(spec.file_weight_bytes)  # type: ignore[arg-type]
    if spec.total_params is None:
        raise ValueError(f"{spec.id}: parameter count unknown")
    routed = spec.routed_expert_params if spec.is_moe else 0
    return (spec.total_params - routed) * _bits(spec, quant, False) / 8 + routed * _bits(spec, quant, True) / 8


def weight_bytes_read(spec: ModelSpec, quant: str | None = None, batch: float = 1) -> float:
    """Weight bytes streamed per decode step at batch ``B`` (theory.md §2 ``W_read(B)·b_w``, §6 for MoE):

        [P_read_nonexpert + (E_touched(B)/E)·P_routed]·b_w

    where ``P_read_nonexpert`` = decode_read_params − (k/E)·P_routed (the input-embedding table is not read
    unless tied to the LM head). Dense models: ``decode_read_params·b_w`` at any batch.
    """
    frac_b = expected_experts_touched(spec.n_experts, spec.n_experts_per_tok, batch) / spec.n_experts if spec.is_moe else 0.0
    frac_1 = spec.n_experts_per_tok / spec.n_experts if spec.is_moe else 0.0
    if _use_file_bytes(spec, quant) and spec.file_read_bytes_batch1 is not None:
        routed_b = spec.file_routed_expert_bytes or 0.0
        nonexpert = spec.file_read_bytes_batch1 - frac_1 * routed_b
        return nonexpert + frac_b * routed_b
    if spec.decode_read_params is None:
        raise ValueError(f"{spec.id}: decode-read parameter count unknown")
    routed = spec.routed_expert_params if spec.is_moe else 0
    nonexpert_params = spec.decode_read_params - frac_1 * routed
    return nonexpert_params * _bits(spec, quant, False) / 8 + frac_b * routed * _bits(spec, quant, True) / 8


# --- KV cache ----------------------------------------------------------------------------------------------


def kv_bytes_per_layer_token(spec: ModelSpec, kv_dtype: str = "fp16") -> float:
    """KV bytes one token adds in one layer: GQA ``2·n_kv·d_h·b_kv`` (theory.md §2);
    MLA ``(kv_lora_rank + qk_rope_head_dim)·b_kv`` (§7). 0 when the shapes are unknown."""
    b = kv_bytes_per_element(kv_dtype)
    if spec.is_mla:
        return (spec.kv_lora_rank + (spec.qk_rope_head_dim or 0)) * b  # type: ignore[operator]
    if not (spec.n_kv_heads and spec.head_dim):
        return 0.0
    return 2 * spec.n_kv_heads * spec.head_dim * b


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "fp16") -> float:
    """``KV_token = 2·L·n_kv·d_h·b_kv`` over all layers (theory.md §2; MLA §7: ``L·(r_kv + d_rope)·b_kv``).

    Llama-3.1-8B fp16: 2·32·8·128·2 = 131,072 B; DeepSeek-V3 bf16: 61·576·2 = 70,272 B. For sliding-window
    models this is the rate while the context is shorter than the window.
    """
    return (spec.n_layers or 0) * kv_bytes_per_layer_token(spec, kv_dtype)


def kv_bytes_per_token_global(spec: ModelSpec, kv_dtype: str = "fp16") -> float:
    """The long-context growth rate: global (full-attention) layers only (theory.md §2, sliding windows;
    ``models.csv:kv_bytes_per_token_fp16_global_layers_only``). Gemma-3-270M: 2·3·1·256·2 = 3,072 B."""
    return (spec.n_global_layers or 0) * kv_bytes_per_layer_token(spec, kv_dtype)


def kv_window_bytes(spec: ModelSpec, kv_dtype: str = "fp16") -> float:
    """The fixed part of a long sequence's cache: ``window·(local layers)·2·n_kv·d_h·b_kv`` (theory.md §2)."""
    if not spec.sliding_window or not spec.n_sliding_layers:
        return 0.0
    return spec.sliding_window * spec.n_sliding_layers * kv_bytes_per_layer_token(spec, kv_dtype)


def kv_bytes_per_sequence(spec: ModelSpec, context: int, kv_dtype: str = "fp16") -> float:
    """KV bytes of one sequence holding ``context`` tokens:
    ``(L_global·s + L_local·min(s, window))·KV_layer_token`` (theory.md §2). Llama-3.1-8B, 8,000 tokens:
    1.05 GB at fp16."""
    if context <= 0:
        return 0.0
    per = kv_bytes_per_layer_token(spec, kv_dtype)
    n_local = spec.n_sliding_layers if spec.sliding_window else 0
    n_global = (spec.n_layers or 0) - n_local
    local_tokens = min(context, spec.sliding_window) if spec.sliding_window else 0
    return (n_global * context + n_local * local_tokens) * per


# --- FLOPs -------------------------------------------------------------------------------------------------


def _attn_pair_flops(spec: ModelSpec, decode: bool) -> float:
    """FLOPs per (query token, cached key) pair per layer: ``2·n_q·(d_qk + d_v)`` — GQA ``4·n_q·d_h``
    (theory.md §1, Chinchilla App. F counts QKᵀ and softmax·V); MLA absorbed decode ``n_q·(2·576 + 2·512)``
    (§7), MLA prefill ``2·n_q·(d_nope + d_rope + d_v)``."""
    if not spec.n_heads:
        return 0.0
    if spec.is_mla:
        rope = spec.qk_rope_head_dim or 0
        if decode:
            return spec.n_heads * (2 * (spec.kv_lora_rank + rope) + 2 * spec.kv_lora_rank)  # type: ignore[operator]
        return 2 * spec.n_heads * ((spec.qk_nope_head_dim or 0) + rope + (spec.v_head_dim or 0))
    if not spec.head_dim:
        return 0.0
    return 4 * spec.n_heads * spec.head_dim


def decode_attention_flops(spec: ModelSpec, context: int) -> float:
    """Attention FLOPs for one new token attending to ``context`` cached tokens:
    ``4·n_q·d_h·Σ_layers min(s, window_l)`` (theory.md §1 with t = s; sliding layers capped at the window)."""
    if context <= 0:
        return 0.0
    pair = _attn_pair_flops(spec, decode=True)
    n_local = spec.n_sliding_layers if spec.sliding_window else 0
    n_global = (spec.n_layers or 0) - n_local
    local = min(context, spec.sliding_window) if spec.sliding_window else 0
    return pair * (n_global * context + n_local * local)


def decode_flops_per_token(spec: ModelSpec, context: int = 0) -> float:
    """Forward FLOPs per decoded token: ``2·W_read(1) + attention(s)`` (theory.md §1 ``C_token ≈ 2·N + 4·L·t·n_q·d_h
    + 2·d·V``; ``W_read(1)`` = active non-embedding params + the LM head, so ``2·W_read(1) = 2·N + 2·d·V``)."""
    if spec.decode_read_params is None:
        raise ValueError(f"{spec.id}: parameter count unknown")
    return 2.0 * spec.decode_read_params + decode_attention_flops(spec, context)


def prefill_flops(spec: ModelSpec, prompt_tokens: int) -> float:
    """``F_prefill(S) ≈ 2·N·S + 2·L·S²·n_q·d_h + 2·d·V`` (theory.md §1; Kaplan Table 1, Chinchilla App. F).

    N = active non-embedding params (MoE: routed top-k only). The quadratic term is ``4·n_q·d_h·Σ_t t`` with
    Σ_t t ≈ S²/2; sliding-window layers cap ``t`` at the window: Σ_t min(t, w) ≈ w²/2 + (S − w)·w.
    Only the last token's logits are counted (``2·d·V``). Llama-3.1-8B, S=4096: 57.2 + 4.4 = 61.6 TFLOP.
    """
    S = max(int(prompt_tokens), 0)
    if S == 0:
        return 0.0
    n = spec.nonembedding_active_params
    if n is None:
        raise ValueError(f"{spec.id}: parameter count unknown")
    lm_head = 2.0 * (spec.embedding_params or 0)
    pair = _attn_pair_flops(spec, decode=False)
    n_local = spec.n_sliding_layers if spec.sliding_window else 0
    n_global = (spec.n_layers or 0) - n_local
    full = S * S / 2.0
    if spec.sliding_window and S > spec.sliding_window:
        w = spec.sliding_window
        local = w * w / 2.0 + (S - w) * w
    else:
        local = full
    return 2.0 * n * S + pair * (n_global * full + n_local * local) + lm_head


# --- roofs -------------------------------------------------------------------------------------------------


def compute_path(spec: ModelSpec, quant: str | None = None) -> str:
    """The math path whose peak bounds the matmuls: ``fp8``/``int8`` when the tensor cores take the format,
    else ``bf16`` (weight-only formats such as GGUF or INT4 dequantize to 16-bit; theory.md §3)."""
    name = quant or spec.dtype or "bf16"
    return get_quant(name).compute


@dataclass(frozen=True)
class DecodeRoofs:
    """Both roofs of one decode step at batch ``B`` (theory.md §2–§3)."""

    batch: float
    step_bytes: float
    step_flops: float
    bandwidth_step_s: float
    compute_step_s: float | None
    bandwidth_tok_s: float  # per sequence, bandwidth roof
    compute_tok_s: float | None  # per sequence, compute roof
    ceiling_tok_s: float  # per sequence: min of both
    aggregate_tok_s: float  # B · ceiling
    binding: str  # "bandwidth" | "compute"


def decode_roofs(
    *,
    weight_bytes: float,
    kv_bytes_per_sequence: float,
    flops_per_token: float,
    batch: float,
    bandwidth_bytes_s: float,
    peak_flops: float | None,
    comm_s: float = 0.0,
) -> DecodeRoofs:
    """One decode step: ``t_bw = (W + B·KV_seq)/BW``, ``t_compute = B·FLOPs_token/F``; the step takes
    ``max(t_bw, t_compute) + comm_s`` and produces one token per sequence (Pope et al. §2–3; theory.md §2–§3).

    ``comm_s``: tensor-parallel all-reduce time of the step (serial with the math; 0 on one device). Both
    roofs include it, so ``ceiling = min(roofs)`` still holds."""
    if bandwidth_bytes_s <= 0:
        raise ValueError("bandwidth must be > 0")
    step_bytes = weight_bytes + batch * kv_bytes_per_sequence
    step_flops = batch * flops_per_token
    t_bw = step_bytes / bandwidth_bytes_s + comm_s
    t_c = step_flops / peak_flops + comm_s if peak_flops else None
    t = max(t_bw, t_c or 0.0)
    binding = "compute" if (t_c is not None and t_c > t_bw) else "bandwidth"
    return DecodeRoofs(
        batch=batch,
        step_bytes=step_bytes,
        step_flops=step_flops,
        bandwidth_step_s=t_bw,
        compute_step_s=t_c,
        bandwidth_tok_s=1.0 / t_bw if t_bw > 0 else math.inf,
        compute_tok_s=(1.0 / t_c if t_c else None),
        ceiling_tok_s=1.0 / t if t > 0 else math.inf,
        aggregate_tok_s=batch / t if t > 0 else math.inf,
        binding=binding,
    )


def decode_ceiling(
    spec: ModelSpec,
    device: Device,
    *,
    quant: str | None = None,
    context: int = 0,
    batch: float = 1,
    kv_dtype: str = "fp16",
    tp: int = 1,
) -> DecodeRoofs:
    """Decode roofs of ``spec`` on ``device`` at ``context`` tokens and batch ``B`` (theory.md §2, §3, §6).

    Seed check: 16 GB of weights, context 0, batch 1 → BW/16e9: 90 → 5.6, 3,350 → 209.4 tok/s.
    ``tp`` devices (module docstring): ``tp × BW`` and ``tp × F`` over the replica's bytes and FLOPs (KV
    replicated beyond the KV-head count), plus the all-reduces of B tokens. Llama-3.3-70B on 4 H100 SXM:
    4 × 3,350 GB/s ÷ 141 GB → ≤ 95 tok/s.
    """
    if tp < 1:
        raise ValueError("tensor-parallel degree must be >= 1")
    peak = device.peak_flops(compute_path(spec, quant))
    return decode_roofs(
        weight_bytes=weight_bytes_read(spec, quant, batch),
        kv_bytes_per_sequence=kv_bytes_per_sequence(spec, context, kv_dtype) * tp / kv_split(spec, tp),
        flops_per_token=decode_flops_per_token(spec, context),
        batch=batch,
        bandwidth_bytes_s=device.mem_bandwidth_bytes_s * tp,
        peak_flops=None if peak is None else peak * tp,
        comm_s=allreduce_s(spec, batch, tp, link_bytes_s(device)),
    )


def ridge_batch_weights_only(peak_flops: float, bandwidth_bytes_s: float, bytes_per_weight: float) -> float:
    """``B* ≈ (F/BW)·b_w/2`` — the batch where the weight matmuls turn compute-bound (theory.md §3).
    H100 SXM bf16: 989.4e12/3.35e12 ≈ 295; 4-bit weights computed in bf16: ≈ 74."""
    return peak_flops / bandwidth_bytes_s * bytes_per_weight / 2.0


def ridge_batch(
    spec: ModelSpec,
    device: Device,
    *,
    quant: str | None = None,
    context: int = 0,
    kv_dtype: str = "fp16",
    max_batch: float = 1e7,
) -> float | None:
    """Smallest batch B where ``t_compute(B) ≥ t_bw(B)`` — decode turns compute-bound (theory.md §3).

    Includes KV reads at ``context`` (which push the crossover out, or forever: then None) and MoE expert
    occupancy (§6: B ≈ B*·E/k). Solved by bisection: ``t_compute − t_bw`` is convex in B and negative at 0,
    so it crosses zero at most once.
    """
    peak = device.peak_flops(compute_path(spec, quant))
    if not peak:
        return None
    bw = device.mem_bandwidth_bytes_s
    kv = kv_bytes_per_sequence(spec, context, kv_dtype)
    f_tok = decode_flops_per_token(spec, context)

    def gap(b: float) -> float:
        return b * f_tok / peak - (weight_bytes_read(spec, quant, b) + b * kv) / bw

    if gap(max_batch) < 0:
        return None
    lo, hi = 1e-9, max_batch
    if gap(lo) >= 0:
        return lo
    for _ in range(200):
        mid = math.sqrt(lo * hi) if hi / lo > 4 else (lo + hi) / 2
        if gap(mid) >= 0:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-6 * hi:
            break
    return hi


def prefill_floor_s(spec: ModelSpec, device: Device, prompt_tokens: int, *, quant: str | None = None,
                    tp: int = 1) -> float | None:
    """``t_prefill ≥ F_prefill(S) / (tp·F_dense) + t_allreduce(S)`` (theory.md §1; TP in the module docstring).
    None when the device has no compute figure.
    Llama-3.1-8B, S=4096: ≥ 62 ms on H100 SXM (989.4 TFLOPS), ≥ 373 ms on RTX 4090 (165.2)."""
    peak = device.peak_flops(compute_path(spec, quant))
    if not peak:
        return None
    return prefill_flops(spec, prompt_tokens) / (peak * tp) + allreduce_s(spec, prompt_tokens, tp, link_bytes_s(device))


# --- memory ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolCapacity:
    """The KV pool left after weights (vLLM-style ``gpu_memory_utilization`` budget; activations ignored)."""

    memory_bytes: float
    gpu_memory_utilization: float
    weight_bytes: float
    pool_bytes: float
    pool_tokens: int
    max_concurrent_sequences: int | None
    fits: bool
    tp: int = 1
    memory_bytes_per_device: float = 0.0
    weight_bytes_per_device: float = 0.0
    pool_bytes_per_device: float = 0.0


def pool_capacity(
    *,
    memory_bytes: float,
    weight_bytes: float,
    kv_bytes_per_token: float,
    kv_bytes_per_sequence: float | None = None,
    gpu_memory_utilization: float = 0.9,
    tp: int = 1,
    kv_split: int | None = None,
) -> PoolCapacity:
    """``pool = memory·util − weights``; ``tokens = pool / KV_token``; ``sequences = pool / KV_seq(s)``
    (theory.md §2 sizes; the budget rule is vLLM's ``gpu_memory_utilization``; activation and CUDA-graph
    memory are not subtracted, so real pools are somewhat smaller).

    ``tp`` devices (``memory_bytes`` = all of them): each holds ``memory/tp·util − weights/tp`` of pool and
    ``KV_token / kv_split`` bytes per token (``kv_split`` = tp unless K/V heads are replicated, see
    :func:`kv_split`), so ``tokens = pool_per_device ÷ (KV_token / kv_split)``; fits when every device's
    share of the weights fits. With ``tp = 2``: twice one device's ``memory·util − weights/2``."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization must be in (0, 1]")
    if tp < 1:
        raise ValueError("tensor-parallel degree must be >= 1")
    split = tp if kv_split is None else max(1, min(kv_split, tp))
    per_dev = memory_bytes / tp * gpu_memory_utilization - weight_bytes / tp
    fits = per_dev > 0
    per_dev = max(per_dev, 0.0)
    pool = per_dev * tp
    kv_dev = kv_bytes_per_token / split
    tokens = int(per_dev // kv_dev) if kv_dev > 0 else 0
    seqs = None
    if kv_bytes_per_sequence is not None and kv_bytes_per_sequence > 0:
        seqs = int(per_dev // (kv_bytes_per_sequence / split))
    return PoolCapacity(
        memory_bytes=memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        weight_bytes=weight_bytes,
        pool_bytes=pool,
        pool_tokens=tokens,
        max_concurrent_sequences=seqs,
        fits=fits,
        tp=tp,
        memory_bytes_per_device=memory_bytes / tp,
        weight_bytes_per_device=weight_bytes / tp,
        pool_bytes_per_device=per_dev,
    )


def fits_in_memory(weight_bytes: float, memory_bytes: float | None, kv_bytes: float = 0.0) -> bool | None:
    """Whether weights (+ ``kv_bytes``) fit in ``memory_bytes``; None when the memory size is unknown (CPUs)."""
    if memory_bytes is None:
        return None
    return weight_bytes + kv_bytes <= memory_bytes
