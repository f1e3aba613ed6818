"""Inputs → the documented ``--json`` bodies of ``ceiling``, ``kv``, ``devices`` and ``models``.

This is where the CLI's flags are resolved (which model, which devices) and the pure roofline results are
assembled into plain dicts; the command module only parses and prints. Schemas: docs/commands/*.md.
"""

from __future__ import annotations

from typing import Any

from phasescope.errors import InputError
from phasescope.theory import parallel
from phasescope.theory import roofline as R
from phasescope.theory.devices import Device, custom_device, default_devices, get_device, list_devices
from phasescope.theory.models import ModelSpec, load_model_spec, spec_from_config_file, spec_from_gguf, spec_from_weights
from phasescope.theory.quant import get_quant, kv_bytes_per_element
from phasescope.theory.rows import ceiling_row
from phasescope.theory.rows import kv_report as kv_sizes

SCHEMA_VERSION = 1


def resolve_model(
    *,
    model: str | None = None,
    config: str | None = None,
    gguf: str | None = None,
    weights_gb: float | None = None,
    dtype: str | None = None,
    required: bool = True,
) -> ModelSpec | None:
    """Exactly one of ``--model`` (catalog id or path), ``--config``, ``--gguf``, ``--weights-gb``."""
    given = [n for n, v in (("--model", model), ("--config", config), ("--gguf", gguf), ("--weights-gb", weights_gb)) if v is not None]
    if len(given) > 1:
        raise InputError(f"give only one of --model, --config, --gguf, --weights-gb (got {' and '.join(given)})")
    if dtype is not None:
        get_quant(dtype)  # unknown quant → exit 2 before anything else
    if not given:
        if required:
            raise InputError("no model given", hint="use --model ID|PATH, --config config.json, --gguf FILE or --weights-gb N")
        return None
    if weights_gb is not None:
        return spec_from_weights(weights_gb, dtype=dtype or "bf16")
    if config is not None:
        return spec_from_config_file(config)
    if gguf is not None:
        return spec_from_gguf(gguf)
    return load_model_spec(model)  # type: ignore[arg-type]


def resolve_devices(device_ids: list[str] | None, bandwidth_gb_s: float | None = None) -> list[Device]:
    """``--device`` values (repeatable; ``all``; ``local``) plus ``--bandwidth-gb-s``; none → the seed's six."""
    out: list[Device] = []
    for d in device_ids or []:
        if d.strip().lower() == "all":
            out.extend(list_devices())
        else:
            out.append(get_device(d))
    if bandwidth_gb_s is not None:
        out.append(custom_device(bandwidth_gb_s))
    if not out:
        out = default_devices()
    seen: set[str] = set()
    unique = []
    for d in out:
        if d.id not in seen:
            seen.add(d.id)
            unique.append(d)
    return unique


def _check_tp(tp: int) -> None:
    if tp < 1:
        raise InputError(f"--tp/--gpus must be >= 1, got {tp}")


def _tp_notes(spec: ModelSpec, devices: list[Device], tp: int) -> list[str]:
    if tp <= 1:
        return []
    out = []
    for d in devices:
        link = parallel.link_bytes_s(d)
        ar = parallel.allreduce_s(spec, 1, tp, link)
        head = f"tp {tp}: {tp}× {d.id}, each reads 1/{tp} of the weights at its own {d.mem_bandwidth_gb_s:,.0f} GB/s; "
        if not (spec.n_layers and spec.hidden_size):
            out.append(head + "all-reduce time not counted (layer shapes unknown): the ceiling is an upper bound")
            continue
        link_name = d.interconnect if d.interconnect_gb_s else f"{d.interconnect or 'no link'}: none quoted, 100 GbE assumed"
        out.append(head + f"2×{spec.n_layers} ring all-reduces cost {ar * 1e6:,.0f} µs per decode step over "
                          f"{link / 1e9:,.1f} GB/s one way ({link_name})")
    split = parallel.kv_split(spec, tp)
    if split < tp:
        out.append(f"{spec.n_kv_heads} KV head(s) on {tp} ranks: each token's KV is replicated {tp // split}× (kv_split {split})")
    return out


def _check_counts(context: int, batch: int, prompt: int) -> None:
    if context < 0:
        raise InputError(f"--context must be >= 0, got {context}")
    if batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    if prompt < 0:
        raise InputError(f"--prompt must be >= 0, got {prompt}")


def model_summary(spec: ModelSpec, quant: str | None = None) -> dict[str, Any]:
    """The ``model`` object of the JSON outputs."""
    q = get_quant(quant).name if quant else None
    weights = R.weight_bytes_total(spec, quant) if (spec.total_params or spec.file_weight_bytes) else None
    read1 = R.weight_bytes_read(spec, quant, 1) if (spec.decode_read_params or spec.file_read_bytes_batch1) else None
    return {
        "id": spec.id,
        "name": spec.name,
        "origin": spec.origin,
        "source": spec.source,
        "architecture": spec.architecture,
        "weight_format": q or spec.dtype,
        "expert_weight_format": None if q else spec.expert_dtype,
        "bits_per_weight": (weights * 8 / spec.total_params) if (weights and spec.total_params) else None,
        "total_params": spec.total_params,
        "active_params": spec.active_params,
        "decode_read_params": spec.decode_read_params,
        "weight_bytes": weights,
        "weight_bytes_read_batch1": read1,
        "n_layers": spec.n_layers,
        "hidden_size": spec.hidden_size,
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "n_experts": spec.n_experts,
        "n_experts_per_tok": spec.n_experts_per_tok,
        "sliding_window": spec.sliding_window,
        "n_sliding_layers": spec.n_sliding_layers,
        "kv_lora_rank": spec.kv_lora_rank,
        "notes": list(spec.notes),
        "chosen_by": spec.chosen_by,
    }


def ceiling_report(
    spec: ModelSpec,
    devices: list[Device],
    *,
    quant: str | None = None,
    context: int = 0,
    batch: int = 1,
    prompt_tokens: int = 2000,
    kv_dtype: str = "fp16",
    tp: int = 1,
) -> dict[str, Any]:
    """The ``phasescope ceiling --json`` object: ``model``, the inputs, and one ``devices`` item per device
    (with ``tp`` > 1 each item is a tensor-parallel group of ``tp`` such devices)."""
    _check_counts(context, batch, prompt_tokens)
    _check_tp(tp)
    kv_bytes_per_element(kv_dtype)
    if quant is not None and spec.origin == "weights":
        quant = None  # --weights-gb: the size is given; --dtype only set the parameter count
    if quant is not None:
        get_quant(quant)
    if context > 0 and not spec.shape_known:
        notes = ["layer shapes unknown: the KV cache at --context is not counted"]
    else:
        notes = []
    if spec.max_position_embeddings and context > spec.max_position_embeddings:
        notes.append(f"--context {context} exceeds the model's max_position_embeddings {spec.max_position_embeddings}")
    rows = [ceiling_row(spec, d, quant=quant, context=context, batch=batch, prompt_tokens=prompt_tokens,
                          kv_dtype=kv_dtype, tp=tp).to_dict() for d in devices]
    notes += _tp_notes(spec, devices, tp)
    return {
        "schema": SCHEMA_VERSION,
        "model": model_summary(spec, quant),
        "tp": tp,
        "context": context,
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "kv_dtype": kv_dtype,
        "devices": rows,
        "notes": notes,
    }


def kv_report(
    spec: ModelSpec,
    *,
    context: int,
    kv_dtype: str = "fp16",
    device: Device | None = None,
    gpu_mem_gb: float | None = None,
    gpu_memory_utilization: float = 0.9,
    weights_gb: float | None = None,
    quant: str | None = None,
    tp: int = 1,
) -> dict[str, Any]:
    """The ``phasescope kv --json`` object (per token, per sequence, and the pool when memory is known;
    ``tp`` devices: N × memory, weights and KV split over them, see :func:`phasescope.theory.roofline.pool_capacity`)."""
    _check_tp(tp)
    if context < 0:
        raise InputError(f"--context must be >= 0, got {context}")
    if not 0 < gpu_memory_utilization <= 1:
        raise InputError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    if gpu_mem_gb is not None and gpu_mem_gb <= 0:
        raise InputError(f"--gpu-mem-gb must be > 0, got {gpu_mem_gb}")
    if weights_gb is not None and weights_gb <= 0:
        raise InputError(f"--weights-gb must be > 0, got {weights_gb}")
    if quant is not None:
        get_quant(quant)
    kv_bytes_per_element(kv_dtype)
    if not spec.shape_known:
        raise InputError(f"{spec.id}: layer shapes unknown, cannot size the KV cache",
                         hint="use --model, --config or --gguf")
    memory = None
    if gpu_mem_gb is not None:
        memory = gpu_mem_gb * 1e9
    elif device is not None:
        if device.memory_bytes is None:
            raise InputError(f"device {device.id} has no fixed memory size", hint="pass --gpu-mem-gb")
        memory = device.memory_bytes
    weights = None
    if memory is not None:
        weights = weights_gb * 1e9 if weights_gb is not None else R.weight_bytes_total(spec, quant)
    per_device = memory
    if memory is not None:
        memory = memory * tp
    rep = kv_sizes(spec, context=context, kv_dtype=kv_dtype, memory_bytes=memory, weight_bytes=weights,
                      gpu_memory_utilization=gpu_memory_utilization, tp=tp)
    body = rep.to_dict()
    pool = body.pop("pool")
    notes = []
    if spec.sliding_window and spec.n_sliding_layers:
        notes.append(
            f"{spec.n_sliding_layers} of {spec.n_layers} layers keep at most {spec.sliding_window} tokens: "
            "per token = all layers (while context <= window); long contexts grow at kv_bytes_per_token_global"
        )
    if spec.is_mla:
        notes.append("MLA: one latent (kv_lora_rank + qk_rope_head_dim) per layer and token, not per-head K and V")
    if pool is not None:
        notes.append("pool = memory x gpu_memory_utilization - weights (activations not subtracted)")
        if tp > 1:
            notes.append(f"tp {tp}: each device holds 1/{tp} of the weights and pools memory x utilization - weights/{tp}; "
                         f"memory_gb and pool_bytes are the {tp} devices together")
    split = parallel.kv_split(spec, tp)
    if tp > 1 and split < tp:
        why = "MLA's latent is one vector per token" if spec.is_mla else f"{spec.n_kv_heads} KV head(s) on {tp} ranks"
        notes.append(f"{why}: each token's KV is replicated on {tp // split} ranks (pool_tokens counts one copy)")
    return {
        "schema": SCHEMA_VERSION,
        "model": model_summary(spec, quant),
        "device": device.id if device is not None else None,
        "tp": tp,
        "memory_gb_per_device": per_device / 1e9 if per_device is not None else None,
        "memory_gb": memory / 1e9 if memory is not None else None,
        "gpu_memory_utilization": gpu_memory_utilization if memory is not None else None,
        **body,
        "pool": pool,
        "notes": notes,
    }


def devices_report(devices: list[Device]) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "devices": [d.to_dict() for d in devices]}


def models_report(specs: list[ModelSpec]) -> dict[str, Any]:
    out = []
    for s in specs:
        item = model_summary(s)
        item["kv_bytes_per_token_fp16"] = R.kv_bytes_per_token(s, "fp16")
        item["kv_bytes_per_token_fp16_global"] = R.kv_bytes_per_token_global(s, "fp16")
        item["max_position_embeddings"] = s.max_position_embeddings
        out.append(item)
    return {"schema": SCHEMA_VERSION, "models": out}


__all__ = [
    "resolve_model",
    "resolve_devices",
    "ceiling_report",
    "kv_report",
    "devices_report",
    "models_report",
    "model_summary",
]
