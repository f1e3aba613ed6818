"""Tensor parallelism over ``tp`` devices: what it costs (the all-reduces) and how it splits the KV cache.

Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053 §3): each device holds and reads 1/tp of every weight
matrix and its share of the K/V heads. The price is two all-reduces per layer (after the attention output
projection and after the MLP down projection, the ``g`` operators of Megatron's Fig. 3), each of the
layer's activations, ``hidden × tokens × 2`` bytes (bf16)::

    t_allreduce(tokens) = 2·L · [ 2(tp−1)·α  +  2(tp−1)/tp · hidden·tokens·b_act / β ]

the ring all-reduce cost (reduce-scatter then all-gather, each tp−1 steps moving 1/tp of the buffer; Thakur,
Rabenseifner & Gropp 2005, "Optimization of collective communication operations in MPICH"), with β the
device's one-direction link bandwidth (``devices.csv`` ``interconnect_gb_s`` is bidirectional: halved) and α
= :data:`ALLREDUCE_STEP_LATENCY_S` per ring step.
"""

from __future__ import annotations

from phasescope.theory.devices import Device
from phasescope.theory.models import ModelSpec

#: α of the ring all-reduce: seconds per ring step (one hop + a synchronisation) [assumption: NCCL's
#: small-message all-reduce on NVLink takes some µs; 1 µs per step gives 14 µs at tp 8]
ALLREDUCE_STEP_LATENCY_S = 1e-6
#: bytes per activation element on the wire (bf16/fp16 activations, whatever the weight format)
ACTIVATION_BYTES = 2.0
#: a device without a quoted link: 100 GbE, one direction
NETWORK_FALLBACK_BYTES_S = 12.5e9


def link_bytes_s(device: Device) -> float:
    """One-direction link bandwidth for tensor-parallel traffic: the catalog's ``interconnect_gb_s`` (quoted
    bidirectional, e.g. NVLink 4 900 GB/s → 450 GB/s) halved; none quoted → 100 GbE (12.5 GB/s)."""
    if device.interconnect_gb_s:
        return device.interconnect_gb_s * 1e9 / 2.0
    return NETWORK_FALLBACK_BYTES_S


def allreduce_s(
    spec: ModelSpec,
    tokens: float,
    tp: int,
    link: float,
    *,
    latency_s: float = ALLREDUCE_STEP_LATENCY_S,
) -> float:
    """Megatron TP communication of one forward step over ``tokens`` tokens (module docstring):
    ``2·L·[2(tp−1)·α + 2(tp−1)/tp·hidden·tokens·b_act/β]``; 0 at tp 1 (Shoeybi et al. 2019 §3)."""
    if tp <= 1 or tokens <= 0:
        return 0.0
    layers = spec.n_layers or 0
    hidden = spec.hidden_size or 0
    return allreduce_time_s(2 * layers, hidden * ACTIVATION_BYTES, tokens, tp, link, latency_s=latency_s)


def allreduce_time_s(
    n_allreduce: int,
    bytes_per_token: float,
    tokens: float,
    tp: int,
    link: float,
    *,
    latency_s: float = ALLREDUCE_STEP_LATENCY_S,
) -> float:
    """``n_allreduce`` ring all-reduces of ``bytes_per_token·tokens`` bytes over ``tp`` devices:
    each ``2(tp−1)·α + 2(tp−1)/tp·bytes/β`` (Thakur et al. 2005, ring)."""
    if tp <= 1 or tokens <= 0 or n_allreduce <= 0:
        return 0.0
    per = 2 * (tp - 1) * latency_s + 2.0 * (tp - 1) / tp * bytes_per_token * tokens / link
    return n_allreduce * per


def kv_split(spec: ModelSpec, tp: int) -> int:
    """Over how many devices one token's KV is spread: K/V heads split across ranks, replicated once tp
    exceeds the KV-head count (vLLM: ``num_kv_heads // tp`` → at least 1 head per rank); MLA's latent is
    one vector per token, replicated on every rank (theory.md §7)."""
    if tp <= 1 or spec.is_mla:
        return 1
    if not spec.n_kv_heads:  # shapes unknown (a size only): no KV is counted, nothing to replicate
        return tp
    return max(1, min(tp, spec.n_kv_heads))
