"""The ModelSpec type: the shapes a ceiling needs, and the size-only spec of ``--weights-gb``.

Everything else in :mod:`phasescope.theory.models` builds one of these; nothing here parses a file.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from phasescope.errors import InputError
from phasescope.theory.quant import get_quant


@dataclass(frozen=True)
class ModelSpec:
    """What the ceilings need to know about a model. ``None`` = unknown (e.g. a spec given only by size).

    Counts are parameters (not bytes). ``dtype`` is the stored weight format of the checkpoint
    (a :mod:`~phasescope.theory.quant` name); ``expert_dtype`` when routed experts are stored differently
    (gpt-oss: MXFP4 experts, BF16 rest). ``file_*_bytes`` are exact stored sizes when known (GGUF tensors,
    ``--weights-gb``); they win over ``params × bits`` unless another quant is asked for.
    """

    id: str
    name: str
    origin: str  # catalog | config | gguf | weights | ollama | llamacpp
    source: str
    architecture: str | None = None
    n_layers: int | None = None
    hidden_size: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    total_params: int | None = None
    active_params: int | None = None
    decode_read_params: int | None = None
    # MoE (routed experts; 0 = dense)
    n_experts: int = 0
    n_experts_per_tok: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int | None = None
    n_moe_layers: int = 0
    routed_expert_params: int = 0
    # sliding-window / chunked local attention
    sliding_window: int | None = None
    n_sliding_layers: int = 0
    # MLA (DeepSeek V2/V3/R1)
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # storage
    dtype: str | None = None
    expert_dtype: str | None = None
    file_weight_bytes: float | None = None
    file_read_bytes_batch1: float | None = None
    file_routed_expert_bytes: float | None = None
    #: GGUF: (GGML type, active body parameters, LM-head parameters) of the matmul weights, by type
    #: (the CPU cost model's per-type rates, :mod:`phasescope.planning.cpu`)
    matmul_types: tuple[tuple[str, float, float], ...] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: how this spec was chosen for a served name, when it was not named exactly (for the card)
    chosen_by: str | None = None

    def __post_init__(self) -> None:
        check_shapes(self)

    # --- derived views -----------------------------------------------------------------------------
    @property
    def shape_known(self) -> bool:
        """True when layers/heads/head_dim are known (KV and attention FLOPs can be computed)."""
        return bool(self.n_layers and self.n_kv_heads and self.head_dim and self.n_heads) or self.is_mla

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.n_experts_per_tok > 0

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank and self.n_layers)

    @property
    def n_global_layers(self) -> int | None:
        """Layers attending to the whole context (all layers minus sliding-window ones)."""
        return None if self.n_layers is None else self.n_layers - self.n_sliding_layers

    @property
    def embedding_params(self) -> int | None:
        """``V·d``: one embedding table (the LM head has the same size)."""
        if self.vocab_size is None or self.hidden_size is None:
            return None
        return self.vocab_size * self.hidden_size

    @property
    def nonembedding_active_params(self) -> int | None:
        """``N`` of theory.md §1 for FLOPs: active params without the input embedding and the LM head.

        = ``decode_read_params − V·d`` (``decode_read_params`` counts the LM head once, tied or not).
        """
        if self.decode_read_params is None:
            return None
        emb = self.embedding_params or 0
        return max(self.decode_read_params - emb, 0)

    @property
    def bits_per_weight(self) -> float:
        """Average stored bits of the checkpoint as described (exact bytes when known, else its dtype)."""
        if self.file_weight_bytes and self.total_params:
            return self.file_weight_bytes * 8 / self.total_params
        return get_quant(self.dtype or "bf16").bits_per_weight

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["shape_known"] = self.shape_known
        d["is_moe"] = self.is_moe
        d["is_mla"] = self.is_mla
        return d



#: shape fields (whole numbers ≥ 0 or unknown) and the most each may be
_SHAPE_FIELDS = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "intermediate_size",
                 "n_experts", "n_experts_per_tok", "n_shared_experts", "moe_intermediate_size", "n_moe_layers",
                 "sliding_window", "n_sliding_layers", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank",
                 "qk_nope_head_dim", "v_head_dim")
_COUNT_FIELDS = ("total_params", "active_params", "decode_read_params", "routed_expert_params",
                 "max_position_embeddings")
MAX_SHAPE = 2**31
MAX_COUNT = 2**62
_BYTE_FIELDS = ("file_weight_bytes", "file_read_bytes_batch1", "file_routed_expert_bytes")


def check_shapes(spec: "ModelSpec") -> None:
    """The one semantic check of a model's shapes, whatever built it (config.json, GGUF, catalog,
    a server's ``/props``): whole non-negative numbers within bounds, experts ≥ experts per token ≥ 1
    for a MoE, KV heads ≤ heads, sliding and MoE layers ≤ layers. ceiling, kv and plan all get their
    specs through :class:`ModelSpec`, so each refuses the same bad model with the same line (exit 2)."""
    where = spec.source or spec.id

    def bad(msg: str) -> InputError:
        return InputError(f"{where}: {msg}")

    for name, hi in [(f, MAX_SHAPE) for f in _SHAPE_FIELDS] + [(f, MAX_COUNT) for f in _COUNT_FIELDS]:
        v = getattr(spec, name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad(f"{name} must be a whole number, got {v!r:.40}")
        if not 0 <= v <= hi:
            raise bad(f"{name} must be from 0 to {hi:,}, got {v:,}")
    for name in _BYTE_FIELDS:
        v = getattr(spec, name)
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1e18):
            raise bad(f"{name} must be a finite size in bytes, got {v!r:.40}")
    if spec.n_experts or spec.n_experts_per_tok:
        if not 1 <= spec.n_experts_per_tok <= spec.n_experts:
            raise bad(f"experts per token {spec.n_experts_per_tok} must be from 1 to the number of experts "
                      f"{spec.n_experts} (experts ≥ experts per token ≥ 1)")
    if spec.n_heads and spec.n_kv_heads and spec.n_kv_heads > spec.n_heads:
        raise bad(f"KV heads {spec.n_kv_heads} exceed attention heads {spec.n_heads}")
    if spec.n_layers is not None:
        for name in ("n_sliding_layers", "n_moe_layers"):
            if getattr(spec, name) > spec.n_layers:
                raise bad(f"{name} {getattr(spec, name)} exceeds the {spec.n_layers} layers")


def spec_from_weights(weights_gb: float, *, dtype: str = "bf16", name: str | None = None) -> ModelSpec:
    """A size-only spec (``--weights-gb``, as the seed article does: a 16 GB model).

    ``weights_gb`` is the stored size that every decode step reads (GB = 1e9 B); ``dtype`` only sets the
    parameter count ``N = bytes / bytes_per_weight`` used by the compute roof and the prefill floor.
    """
    if not (isinstance(weights_gb, (int, float)) and math.isfinite(weights_gb) and weights_gb > 0):
        raise InputError(f"--weights-gb must be > 0, got {weights_gb}")
    q = get_quant(dtype)
    b = weights_gb * 1e9
    n = int(b * 8 / q.bits_per_weight)
    return ModelSpec(
        id=name or f"{weights_gb:g}GB",
        name=name or f"{weights_gb:g} GB of weights",
        origin="weights",
        source="--weights-gb",
        total_params=n,
        active_params=n,
        decode_read_params=n,
        dtype=q.name,
        file_weight_bytes=b,
        file_read_bytes_batch1=b,
        notes=("size only: KV cache and attention FLOPs omitted (no layer shapes)",),
    )

