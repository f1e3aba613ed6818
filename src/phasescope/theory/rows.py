"""The per-device row of ``phasescope ceiling`` and the KV sizes of ``phasescope kv``: the roofs of
:mod:`phasescope.theory.roofline` assembled for one device or one model (:mod:`phasescope.theory.report`
turns them into the documented ``--json`` bodies).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from phasescope.theory.devices import Device
from phasescope.theory.models import ModelSpec
from phasescope.theory.parallel import allreduce_s, kv_split, link_bytes_s
from phasescope.theory.quant import kv_bytes_per_element
from phasescope.theory.roofline import (
    PoolCapacity,
    compute_path,
    decode_ceiling,
    fits_in_memory,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_global,
    kv_window_bytes,
    pool_capacity,
    prefill_flops,
    prefill_floor_s,
    ridge_batch,
    weight_bytes_read,
    weight_bytes_total,
)



@dataclass(frozen=True)
class CeilingRow:
    """Everything ``phasescope ceiling`` shows for one device (the ``--json`` item; see docs/commands/ceiling.md)."""

    device: str
    device_name: str
    mem_bandwidth_gb_s: float
    memory_gb: float | None
    compute_path: str
    peak_tflops: float | None
    weight_bytes: float
    weight_bytes_read: float
    kv_bytes_read: float
    bytes_per_token: float
    flops_per_token: float
    bandwidth_roof_tok_s: float
    compute_roof_tok_s: float | None
    decode_ceiling_tok_s: float
    binding_roof: str
    batch: int
    aggregate_bytes_per_step: float
    aggregate_bandwidth_roof_tok_s: float
    aggregate_compute_roof_tok_s: float | None
    aggregate_ceiling_tok_s: float
    aggregate_binding_roof: str
    ridge_batch: float | None
    ridge_batch_no_kv: float | None
    prompt_tokens: int
    prefill_flops: float
    prefill_floor_s: float | None
    fits_in_memory: bool | None
    tp: int = 1
    weight_bytes_per_device: float = 0.0
    memory_gb_per_device: float | None = None
    allreduce_s_per_token: float = 0.0
    interconnect_gb_s_one_way: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ceiling_row(
    spec: ModelSpec,
    device: Device,
    *,
    quant: str | None = None,
    context: int = 0,
    batch: int = 1,
    prompt_tokens: int = 2000,
    kv_dtype: str = "fp16",
    tp: int = 1,
) -> CeilingRow:
    """Single-stream and batch-``B`` decode roofs, ridge batch, prefill floor and fit for one device
    (``tp`` > 1: a tensor-parallel group of ``tp`` such devices; bandwidth, memory and peak are the
    group's, ``fits_in_memory`` is judged per device: its 1/tp of the weights and its share of the KV)."""
    one = decode_ceiling(spec, device, quant=quant, context=context, batch=1, kv_dtype=kv_dtype, tp=tp)
    agg = decode_ceiling(spec, device, quant=quant, context=context, batch=batch, kv_dtype=kv_dtype, tp=tp)
    path = compute_path(spec, quant)
    peak = device.peak_flops(path)
    w_total = weight_bytes_total(spec, quant)
    w_read = weight_bytes_read(spec, quant, 1)
    kv_seq = kv_bytes_per_sequence(spec, context, kv_dtype) * tp / kv_split(spec, tp)
    return CeilingRow(
        device=device.id,
        device_name=device.name,
        mem_bandwidth_gb_s=device.mem_bandwidth_gb_s * tp,
        memory_gb=None if device.memory_gb is None else device.memory_gb * tp,
        compute_path=path,
        peak_tflops=None if peak is None else peak * tp / 1e12,
        weight_bytes=w_total,
        weight_bytes_read=w_read,
        kv_bytes_read=kv_seq,
        bytes_per_token=one.step_bytes,
        flops_per_token=one.step_flops,
        bandwidth_roof_tok_s=one.bandwidth_tok_s,
        compute_roof_tok_s=one.compute_tok_s,
        decode_ceiling_tok_s=one.ceiling_tok_s,
        binding_roof=one.binding,
        batch=batch,
        aggregate_bytes_per_step=agg.step_bytes,
        aggregate_bandwidth_roof_tok_s=batch * agg.bandwidth_tok_s,
        aggregate_compute_roof_tok_s=None if agg.compute_tok_s is None else batch * agg.compute_tok_s,
        aggregate_ceiling_tok_s=agg.aggregate_tok_s,
        aggregate_binding_roof=agg.binding,
        ridge_batch=ridge_batch(spec, device, quant=quant, context=context, kv_dtype=kv_dtype),
        ridge_batch_no_kv=ridge_batch(spec, device, quant=quant, context=0, kv_dtype=kv_dtype),
        prompt_tokens=prompt_tokens,
        prefill_flops=prefill_flops(spec, prompt_tokens),
        prefill_floor_s=prefill_floor_s(spec, device, prompt_tokens, quant=quant, tp=tp),
        fits_in_memory=fits_in_memory(w_total / tp, device.memory_bytes, batch * kv_seq / tp),
        tp=tp,
        weight_bytes_per_device=w_total / tp,
        memory_gb_per_device=device.memory_gb,
        allreduce_s_per_token=allreduce_s(spec, 1, tp, link_bytes_s(device)),
        interconnect_gb_s_one_way=link_bytes_s(device) / 1e9 if tp > 1 else None,
    )


# --- `phasescope kv` ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvReport:
    """KV sizes for one model (the ``phasescope kv --json`` body; see docs/commands/kv.md)."""

    kv_dtype: str
    kv_bytes_per_element: float
    kind: str  # gqa | mla | unknown
    kv_bytes_per_token: float
    kv_bytes_per_token_global: float
    kv_window_bytes: float
    sliding_window: int | None
    n_sliding_layers: int
    context: int
    kv_bytes_per_sequence: float
    pool: PoolCapacity | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["max_concurrent_sequences"] = self.pool.max_concurrent_sequences if self.pool else None
        d["pool_tokens"] = self.pool.pool_tokens if self.pool else None
        return d


def kv_report(
    spec: ModelSpec,
    *,
    context: int,
    kv_dtype: str = "fp16",
    memory_bytes: float | None = None,
    weight_bytes: float | None = None,
    gpu_memory_utilization: float = 0.9,
    tp: int = 1,
) -> KvReport:
    """Per token, per sequence at ``context``, and — with ``memory_bytes`` (all ``tp`` devices together) — the
    pool (theory.md §2, §7; tensor parallelism as :func:`pool_capacity`)."""
    per_tok = kv_bytes_per_token(spec, kv_dtype)
    per_seq = kv_bytes_per_sequence(spec, context, kv_dtype)
    pool = None
    if memory_bytes is not None:
        w = weight_bytes if weight_bytes is not None else weight_bytes_total(spec)
        pool = pool_capacity(
            memory_bytes=memory_bytes,
            weight_bytes=w,
            kv_bytes_per_token=per_tok,
            kv_bytes_per_sequence=per_seq if context > 0 else None,
            gpu_memory_utilization=gpu_memory_utilization,
            tp=tp,
            kv_split=kv_split(spec, tp),
        )
    return KvReport(
        kv_dtype=kv_dtype,
        kv_bytes_per_element=kv_bytes_per_element(kv_dtype),
        kind="mla" if spec.is_mla else ("gqa" if per_tok > 0 else "unknown"),
        kv_bytes_per_token=per_tok,
        kv_bytes_per_token_global=kv_bytes_per_token_global(spec, kv_dtype),
        kv_window_bytes=kv_window_bytes(spec, kv_dtype),
        sliding_window=spec.sliding_window,
        n_sliding_layers=spec.n_sliding_layers,
        context=context,
        kv_bytes_per_sequence=per_seq,
        pool=pool,
    )
