"""Build a :class:`~phasescope.planning.costmodel.CostModel` from the theory catalogs (a ModelSpec and a Device).

Every physical number comes from :mod:`phasescope.theory` (theory.md §1–§4, §6); only the
efficiencies and the per-step overhead are planning defaults here, overridable by flags and replaced
by measured values when calibrating (:mod:`phasescope.planning.calibrate`):

* GPUs: η_bw = 0.8 (NVIDIA aiconfigurator ``mem_bw_empirical_scaling_factor``; theory.md §5 finds
  70–82 % for ≥7B 16-bit models), η_f = 0.6 (a typical prefill MFU), 1.5 ms per step (scheduler,
  sampling and launch work outside the kernels), roofline ``max``.
* CPUs and ``local``: llama.cpp's terms of :mod:`phasescope.planning.cpu` (fitted on the synthetic grid:
  η_bw = 0.49, prefill η_f by the weights' storage types, attention at its own rates, a fixed cost per
  prompt, 60 µs per layer per step, Q5_0's dequantize math), additive ``sum`` (llama.cpp on a few cores does
  not overlap memory traffic with the dequantize-and-dot work; engine.md §6–§7).
* Apple GPUs: η_bw = 0.65, η_f = 0.5, 1 ms, ``max``.

Interconnect (disaggregation's KV transfer and tensor parallelism's all-reduces): the device's first
quoted link figure, which the catalog states as bidirectional, halved to one direction (NVLink 4 900 →
450 GB/s; PCIe Gen4 x16 64 → 32 GB/s); without one, 100 GbE (12.5 GB/s).

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the cost model describes the replica of ``tp``
devices — the whole model's weight bytes at ``tp ×`` one device's bandwidth (each device reads 1/tp at its
own), ``tp ×`` the FLOP/s, the KV heads split over the ranks (replicated beyond the KV-head count), and
``2·L`` ring all-reduces of ``hidden × tokens × 2`` bytes per step over the link. The KV pool is per
device: ``(memory·util − weights/tp) ÷ (KV bytes per token / kv_split)`` tokens.
"""

from __future__ import annotations

from typing import Any

from phasescope.errors import InputError
from phasescope.planning.costmodel import CostModel, min_tp
from phasescope.planning.cpu import DECODE_BW_ETA, PREFILL_ETA, cpu_terms
from phasescope.theory import parallel, roofline
from phasescope.theory.devices import Device, get_device
from phasescope.theory.models import ModelSpec, load_model_spec

#: (bw_eff, flops_eff, step_overhead_s, overlap) by device kind
DEFAULTS: dict[str, tuple[float, float, float, str]] = {
    "gpu": (0.8, 0.6, 0.0015, "max"),
    "accelerator": (0.8, 0.6, 0.0015, "max"),
    "apple": (0.65, 0.5, 0.001, "max"),
    # CPUs: only the overlap is read here; the efficiencies and the overhead are planning.cpu's (cpu_terms)
    "cpu": (DECODE_BW_ETA, PREFILL_ETA["q8"], 0.0, "sum"),
    "local": (DECODE_BW_ETA, PREFILL_ETA["q8"], 0.0, "sum"),
    "custom": (0.8, 0.6, 0.0015, "max"),
}
NETWORK_FALLBACK_BYTES_S = parallel.NETWORK_FALLBACK_BYTES_S  # 100 GbE, one direction
NO_MEMORY_POOL_TOKENS = 1_000_000  # CPUs: memory is system-dependent; a pool that never binds


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model_spec(model)


def resolve_device(device: str | Device) -> Device:
    return device if isinstance(device, Device) else get_device(device)


def cost_from_theory(
    model: str | ModelSpec,
    device: str | Device,
    *,
    quant: str | None = None,
    kv_dtype: str = "fp16",
    tp: int | None = None,
    gpu_memory_utilization: float = 0.9,
    bw_eff: float | None = None,
    flops_eff: float | None = None,
    step_overhead_s: float | None = None,
    overlap: str | None = None,
    kv_pool_tokens: int | None = None,
    interconnect_gb_s: float | None = None,
) -> CostModel:
    """A replica of ``tp`` devices serving ``model`` (see module docstring for the defaults).

    ``tp=None`` picks the smallest power of two whose weight share fits (``costmodel.min_tp``).
    """
    spec = resolve_model(model)
    dev = resolve_device(device)
    if not 0 < gpu_memory_utilization <= 1:
        raise InputError("--gpu-memory-utilization must be in (0, 1]")
    try:
        w_read = roofline.weight_bytes_read(spec, quant, batch=1)
        w_total = roofline.weight_bytes_total(spec, quant)
        n_nonemb = spec.nonembedding_active_params
    except ValueError as exc:
        raise InputError(f"model {spec.id}: {exc}") from None
    if n_nonemb is None:
        raise InputError(f"model {spec.id}: parameter count unknown, cannot time prefill")
    if not spec.shape_known:
        raise InputError(f"model {spec.id}: layer/head shape unknown, cannot size the KV cache")
    kind = dev.kind if dev.kind in DEFAULTS else "gpu"
    d_bw, d_f, d_ov, d_overlap = DEFAULTS[kind]
    if tp is None:
        tp = min_tp(dev.memory_bytes, w_total, gpu_memory_utilization)
    if tp < 1:
        raise InputError("tensor-parallel degree must be ≥ 1")
    split = parallel.kv_split(spec, tp)
    kv_tok = roofline.kv_bytes_per_token(spec, kv_dtype)
    kv_layer = roofline.kv_bytes_per_layer_token(spec, kv_dtype)
    kv_rep = tp / split  # the replica holds each token's KV this many times over (1: heads split evenly)
    n_local = spec.n_sliding_layers if spec.sliding_window else 0
    peak = dev.peak_flops(roofline.compute_path(spec, quant))
    if not peak:
        raise InputError(f"device {dev.id} has no published compute peak; pass a calibrated profile")
    if kv_pool_tokens is None:
        if dev.memory_bytes:
            cap = roofline.pool_capacity(
                memory_bytes=dev.memory_bytes * tp,
                weight_bytes=w_total,
                kv_bytes_per_token=kv_tok,
                gpu_memory_utilization=gpu_memory_utilization,
                tp=tp,
                kv_split=split,
            )
            kv_pool_tokens = cap.pool_tokens
            if kv_pool_tokens <= 0:
                raise InputError(
                    f"{spec.id} ({w_total / 1e9:.1f} GB of weights) does not fit in {tp}× {dev.id} "
                    f"at --gpu-memory-utilization {gpu_memory_utilization}",
                    hint="raise --gpus/--tp or use a smaller quantization",
                )
        else:
            kv_pool_tokens = NO_MEMORY_POOL_TOKENS
    link = interconnect_gb_s * 1e9 if interconnect_gb_s else parallel.link_bytes_s(dev)
    routed = 0.0
    if spec.is_moe:
        w_all = roofline.weight_bytes_read(spec, quant, batch=1e12)  # every expert touched
        routed = (w_all - w_read) / (1.0 - spec.n_experts_per_tok / spec.n_experts)
    # attention FLOPs per (query, key) pair over all layers: decode_attention_flops at context 1
    attn_pair = roofline.decode_attention_flops(spec, 1) if not spec.is_mla else roofline._attn_pair_flops(spec, False) * (spec.n_layers or 0)  # noqa: SLF001
    source: dict[str, Any] = {
        "from": "theory",
        "model": spec.id,
        "device": dev.id,
        "quant": quant or spec.dtype,
        "kv_dtype": kv_dtype,
        "gpu_memory_utilization": gpu_memory_utilization,
        "tp": tp,
        "kv_split": split,
    }
    cpu: dict[str, Any] = {}
    if kind in ("cpu", "local"):
        cpu = cpu_terms(spec, quant, dev, peak, tp)
        source.update(cpu.pop("source"))
        d_bw, d_f, d_ov = cpu.pop("bw_eff"), cpu.pop("flops_eff"), cpu.pop("step_overhead_s")
    return CostModel(
        name=f"{spec.id}@{dev.id}" + (f"×{tp}" if tp > 1 else ""),
        weight_bytes=w_read,
        kv_bytes_per_token=kv_tok * kv_rep,
        flops_per_token=2.0 * n_nonemb,
        attn_flops_per_pair=attn_pair,
        lm_head_flops=2.0 * float(spec.embedding_params or 0),
        bandwidth_bytes_s=dev.mem_bandwidth_bytes_s * tp,
        peak_flops=peak * tp,
        bw_eff=d_bw if bw_eff is None else bw_eff,
        flops_eff=d_f if flops_eff is None else flops_eff,
        step_overhead_s=d_ov if step_overhead_s is None else step_overhead_s,
        kv_pool_tokens=int(kv_pool_tokens),
        overlap=overlap or d_overlap,
        kv_bytes_per_token_local=(kv_layer * n_local) * kv_rep,
        kv_window_tokens=spec.sliding_window if n_local else None,
        interconnect_bytes_s=link,
        tp=tp,
        source=source,
        allreduce_per_step=2 * (spec.n_layers or 0) if tp > 1 else 0,
        allreduce_bytes_per_token=float(spec.hidden_size or 0) * parallel.ACTIVATION_BYTES,
        allreduce_latency_s=parallel.ALLREDUCE_STEP_LATENCY_S,
        routed_expert_bytes=routed,
        n_experts=int(spec.n_experts or 0) if spec.is_moe else 0,
        n_experts_per_tok=int(spec.n_experts_per_tok or 0) if spec.is_moe else 0,
        **cpu,
    )
