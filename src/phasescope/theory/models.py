"""ModelSpec: the shapes a ceiling needs, from whatever the user has.

:func:`load_model_spec` accepts

* a catalog id (``phasescope models``; package data ``phasescope/data/models.csv`` with a source per row),
* a local Hugging Face ``config.json`` (or the directory holding one): GQA, explicit ``head_dim``
  (Qwen3, Gemma 2/3, gpt-oss have ``n_q·d_h ≠ d``), MoE (Mixtral, Qwen-MoE, DeepSeek, gpt-oss, Llama 4),
  MLA (DeepSeek ``kv_lora_rank``), sliding windows (``layer_types``, ``sliding_window_pattern``, Gemma 2
  alternation, Llama 4 chunked attention) and a nested ``text_config``,
* a local ``.gguf`` file: the header only (:mod:`phasescope.theory.gguf_header`), with exact tensor sizes,

and :func:`from_ollama_show` / :func:`from_llamacpp_meta` turn what a running server says into a spec.
Anything else raises :class:`~phasescope.errors.InputError` / :class:`~phasescope.errors.UnknownModelError`
with one clear sentence.

Parameter counts from shapes (:func:`estimate_params`) follow theory.md §1/§6: per layer attention
``d·n_q·d_h + 2·d·n_kv·d_h + n_q·d_h·d`` (MLA: the low-rank projections), gated FFN ``3·d·ff``, MoE
``E·3·d·ff_e`` routed + shared experts + router ``d·E``, RMSNorm vectors, embedding ``V·d`` (+ ``V·d`` LM head
when untied). ``decode_read_params`` = weights read per token at batch 1 = active params minus the
input-embedding table unless it is tied to the LM head (theory.md §2).
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from phasescope.errors import InputError, UnknownModelError
from phasescope.theory.quant import get_quant, gguf_file_type_name

__all__ = [
    "ModelSpec",
    "load_model_spec",
    "get_catalog_model",
    "get_catalog_ids_match",
    "list_models",
    "spec_from_config",
    "spec_from_config_file",
    "spec_from_gguf",
    "spec_from_weights",
    "from_ollama_show",
    "from_llamacpp_meta",
    "from_llamacpp_props",
    "estimate_params",
]


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
    notes: tuple[str, ...] = field(default_factory=tuple)

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


# --- parameter counting ---------------------------------------------------------------------------------

_NON_GATED = {"gpt2", "gpt_neox", "phi", "falcon", "opt", "bloom", "gptj", "starcoder2", "gpt_bigcode"}


def estimate_params(
    *,
    n_layers: int,
    hidden_size: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    vocab_size: int,
    intermediate_size: int,
    tie_word_embeddings: bool,
    gated: bool = True,
    n_experts: int = 0,
    n_experts_per_tok: int = 0,
    n_shared_experts: int = 0,
    moe_intermediate_size: int | None = None,
    shared_intermediate_size: int | None = None,
    n_moe_layers: int = 0,
    kv_lora_rank: int | None = None,
    q_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    qk_nope_head_dim: int | None = None,
    v_head_dim: int | None = None,
    norms_per_layer: int = 2,
    qk_norm: bool = False,
) -> dict[str, int]:
    """Parameter counts from shapes (theory.md §1, §6). Returns total, active, decode_read, routed_experts.

    Attention: GQA ``d·n_q·d_h + 2·d·n_kv·d_h + n_q·d_h·d``; MLA ``d·r_q + r_q·n_q·(d_nope+d_rope)
    + d·(r_kv+d_rope) + r_kv·n_q·(d_nope+d_v) + n_q·d_v·d``. FFN gated ``3·d·ff`` (else ``2·d·ff``);
    MoE layer ``E·3·d·ff_e + S·3·d·ff_s + d·E``. Biases are ignored (≪ 0.1 %).
    """
    d = hidden_size
    mats = 3 if gated else 2
    if kv_lora_rank:
        rope = qk_rope_head_dim or 0
        nope = qk_nope_head_dim or max(head_dim - rope, 0)
        vd = v_head_dim or nope
        q = (d * q_lora_rank + q_lora_rank * n_heads * (nope + rope) + q_lora_rank) if q_lora_rank else d * n_heads * (nope + rope)
        attn = q + d * (kv_lora_rank + rope) + kv_lora_rank + kv_lora_rank * n_heads * (nope + vd) + n_heads * vd * d
    else:
        attn = d * n_heads * head_dim + 2 * d * n_kv_heads * head_dim + n_heads * head_dim * d
    norms = norms_per_layer * d + (2 * head_dim if qk_norm else 0)
    dense_ffn = mats * d * intermediate_size
    routed_per_layer = 0
    moe_other = 0
    if n_experts and n_moe_layers:
        ff_e = moe_intermediate_size or intermediate_size
        ff_s = shared_intermediate_size or ff_e
        routed_per_layer = n_experts * mats * d * ff_e
        moe_other = n_shared_experts * mats * d * ff_s + d * n_experts
    n_dense = n_layers - n_moe_layers
    emb = vocab_size * d
    total = (
        n_layers * (attn + norms)
        + n_dense * dense_ffn
        + n_moe_layers * (routed_per_layer + moe_other)
        + d
        + emb * (1 if tie_word_embeddings else 2)
    )
    routed = n_moe_layers * routed_per_layer
    active = total - routed + (routed * n_experts_per_tok // n_experts if n_experts else 0)
    decode_read = active - (0 if tie_word_embeddings else emb)
    return {"total": total, "active": active, "decode_read": decode_read, "routed_experts": routed}


def _routed_fraction_read(spec: ModelSpec) -> float:
    return spec.n_experts_per_tok / spec.n_experts if spec.is_moe else 0.0


# --- HF config.json ------------------------------------------------------------------------------------

_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
_ALT_KEYS = {
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "hidden_size": ("n_embd", "d_model", "dim"),
    "num_attention_heads": ("n_head", "num_heads", "n_heads"),
    "num_key_value_heads": ("num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "intermediate_size": ("ffn_dim", "n_inner", "ffn_hidden_size"),
}


def _get(cfg: dict[str, Any], key: str) -> Any:
    if cfg.get(key) is not None:
        return cfg[key]
    for alt in _ALT_KEYS.get(key, ()):
        if cfg.get(alt) is not None:
            return cfg[alt]
    return None


def _flatten_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the decoder in ``text_config`` (Gemma 3, Llama 4, Qwen-VL): merge it over the top."""
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(text)
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in cfg:
            merged["tie_word_embeddings"] = cfg["tie_word_embeddings"]
        return merged
    return dict(cfg)


def _as_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise InputError(f"{where}: {key} must be a non-negative number, got {value!r}")
    return int(value)


def _sliding_layout(cfg: dict[str, Any], n_layers: int, model_type: str) -> tuple[int | None, int, str | None]:
    """(window, number of sliding/local layers, note) from the config's attention layout."""
    window = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types")
    chunk = cfg.get("attention_chunk_size")
    if isinstance(layer_types, list) and layer_types:
        local = sum(1 for t in layer_types if str(t) in ("sliding_attention", "chunked_attention", "local"))
        if local and not window and chunk:
            window = chunk
        if local and window:
            return int(window), local, f"layer_types: {local} local / {len(layer_types) - local} global"
        return None, 0, None
    pattern = cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern")
    if window and isinstance(pattern, int) and pattern > 1:
        n_global = n_layers // pattern
        return int(window), n_layers - n_global, f"sliding_window_pattern {pattern}: every {pattern}th layer global"
    if window and model_type in ("gemma3_text", "gemma3"):
        n_global = n_layers // 6
        return int(window), n_layers - n_global, "Gemma 3 default: 5 local : 1 global"
    if window and model_type == "gemma2":
        return int(window), (n_layers + 1) // 2, "Gemma 2: alternating local / global layers"
    if chunk and model_type.startswith("llama4"):
        step = 4
        n_global = n_layers // step
        return int(chunk), n_layers - n_global, "Llama 4 iRoPE: 3 of 4 layers chunked (attention_chunk_size)"
    if window and model_type in ("mistral", "mixtral") and cfg.get("use_sliding_window", True):
        return int(window), n_layers, "all layers sliding-window (Mistral v0.1 style)"
    return None, 0, None


def _dtype_of_config(cfg: dict[str, Any]) -> tuple[str, str | None]:
    qc = cfg.get("quantization_config") or {}
    method = str(qc.get("quant_method", "")).lower() if isinstance(qc, dict) else ""
    base = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    base_name = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(base, "bf16")
    if method == "mxfp4":
        return base_name, "mxfp4"
    if method == "fp8":
        block = qc.get("weight_block_size")
        return ("fp8_block128" if block else "fp8"), None
    if method in ("awq", "gptq"):
        return method, None
    if method == "bitsandbytes":
        return ("nf4" if qc.get("load_in_4bit") else "int8"), None
    return base_name, None


def spec_from_config(cfg: dict[str, Any], *, name: str = "config.json", source: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a parsed HF ``config.json`` dict (raises InputError on missing keys)."""
    if not isinstance(cfg, dict):
        raise InputError(f"{name}: expected a JSON object, got {type(cfg).__name__}")
    c = _flatten_config(cfg)
    missing = [k for k in _REQUIRED if _get(c, k) is None]
    if missing:
        raise InputError(
            f"{name}: config lacks {', '.join(missing)}",
            hint="need num_hidden_layers, hidden_size, num_attention_heads, vocab_size (HF config.json)",
        )
    where = name
    L = _as_int(_get(c, "num_hidden_layers"), "num_hidden_layers", where)
    d = _as_int(_get(c, "hidden_size"), "hidden_size", where)
    n_q = _as_int(_get(c, "num_attention_heads"), "num_attention_heads", where)
    V = _as_int(_get(c, "vocab_size"), "vocab_size", where)
    if not (L and d and n_q and V):
        raise InputError(f"{where}: layers, hidden_size, heads and vocab_size must be > 0")
    n_kv_raw = _get(c, "num_key_value_heads")
    n_kv = _as_int(n_kv_raw, "num_key_value_heads", where) if n_kv_raw is not None else n_q
    if n_kv < 1 or n_kv > n_q:
        raise InputError(f"{where}: num_key_value_heads {n_kv} must be between 1 and num_attention_heads {n_q}")
    if n_q % n_kv:
        raise InputError(f"{where}: num_attention_heads {n_q} is not a multiple of num_key_value_heads {n_kv}")
    if not c.get("head_dim") and d % n_q:
        raise InputError(f"{where}: hidden_size {d} is not divisible by num_attention_heads {n_q} "
                         "(and no head_dim is given)")
    hd_raw = c.get("head_dim")
    head_dim = _as_int(hd_raw, "head_dim", where) if hd_raw else d // n_q
    ff_raw = _get(c, "intermediate_size")
    ff = _as_int(ff_raw, "intermediate_size", where) if ff_raw is not None else 4 * d
    model_type = str(c.get("model_type") or "")
    # transformers' PretrainedConfig default is True; Llama 4's text config defaults to untied
    tie = bool(c.get("tie_word_embeddings", not model_type.startswith("llama4")))
    arch_list = cfg.get("architectures") or c.get("architectures") or []
    arch = arch_list[0] if isinstance(arch_list, list) and arch_list else (model_type or None)
    notes: list[str] = []
    if ff_raw is None:
        notes.append("intermediate_size missing: assumed 4·hidden")

    # MoE
    n_exp = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0
    k = c.get("num_experts_per_tok") or c.get("experts_per_token") or c.get("moe_topk") or 0
    n_exp, k = int(n_exp or 0), int(k or 0)
    n_shared = int(c.get("n_shared_experts") or 0)
    shared_ff = None
    if c.get("shared_expert_intermediate_size"):
        n_shared = max(n_shared, 1)
        shared_ff = int(c["shared_expert_intermediate_size"])
    moe_ff = c.get("moe_intermediate_size")
    dense_ff = ff
    n_moe_layers = 0
    if n_exp and k:
        if model_type.startswith("llama4"):
            n_shared = max(n_shared, 1)
            step = int(c.get("interleave_moe_layer_step") or 1)
            n_moe_layers = L // step
            moe_ff = moe_ff or ff
            dense_ff = int(c.get("intermediate_size_mlp") or ff)
        elif c.get("first_k_dense_replace") is not None or model_type.startswith("deepseek"):
            first = int(c.get("first_k_dense_replace") or 0)
            freq = int(c.get("moe_layer_freq") or 1)
            n_moe_layers = len([i for i in range(first, L) if (i - first) % freq == 0])
        else:
            step = int(c.get("decoder_sparse_step") or 1)
            dense_only = set(c.get("mlp_only_layers") or [])
            n_moe_layers = len([i for i in range(L) if i not in dense_only and (i + 1) % step == 0])
        moe_ff = int(moe_ff or ff)
    else:
        n_exp = k = 0

    # MLA
    kv_lora = c.get("kv_lora_rank")
    mla: dict[str, Any] = {}
    if kv_lora:
        mla = dict(
            kv_lora_rank=int(kv_lora),
            qk_rope_head_dim=int(c.get("qk_rope_head_dim") or 64),
            q_lora_rank=int(c["q_lora_rank"]) if c.get("q_lora_rank") else None,
            qk_nope_head_dim=int(c.get("qk_nope_head_dim") or 128),
            v_head_dim=int(c.get("v_head_dim") or 128),
        )
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        notes.append("MLA: KV = layers x (kv_lora_rank + qk_rope_head_dim); num_key_value_heads ignored")

    window, n_sliding, swa_note = _sliding_layout(c, L, model_type)
    if swa_note:
        notes.append(swa_note)

    gemma = model_type.startswith("gemma")
    counts = estimate_params(
        n_layers=L,
        hidden_size=d,
        n_heads=n_q,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab_size=V,
        intermediate_size=dense_ff,
        tie_word_embeddings=tie,
        gated=model_type not in _NON_GATED,
        n_experts=n_exp,
        n_experts_per_tok=k,
        n_shared_experts=n_shared,
        moe_intermediate_size=moe_ff if n_exp else None,
        shared_intermediate_size=shared_ff,
        n_moe_layers=n_moe_layers,
        kv_lora_rank=mla.get("kv_lora_rank"),
        q_lora_rank=mla.get("q_lora_rank"),
        qk_rope_head_dim=mla.get("qk_rope_head_dim"),
        qk_nope_head_dim=mla.get("qk_nope_head_dim"),
        v_head_dim=mla.get("v_head_dim"),
        norms_per_layer=4 if gemma else 2,
        qk_norm=model_type.startswith(("qwen3", "gemma3", "olmo2")),
    )
    dtype, expert_dtype = _dtype_of_config(c)
    max_pos = c.get("max_position_embeddings")
    return ModelSpec(
        id=str(c.get("_name_or_path") or name),
        name=str(c.get("_name_or_path") or arch or name),
        origin="config",
        source=source,
        architecture=arch,
        n_layers=L,
        hidden_size=d,
        n_heads=n_q,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab_size=V,
        intermediate_size=ff,
        tie_word_embeddings=tie,
        max_position_embeddings=int(max_pos) if isinstance(max_pos, (int, float)) else None,
        total_params=counts["total"],
        active_params=counts["active"],
        decode_read_params=counts["decode_read"],
        n_experts=n_exp,
        n_experts_per_tok=k,
        n_shared_experts=n_shared,
        moe_intermediate_size=moe_ff if n_exp else None,
        n_moe_layers=n_moe_layers,
        routed_expert_params=counts["routed_experts"],
        sliding_window=window,
        n_sliding_layers=n_sliding,
        dtype=dtype,
        expert_dtype=expert_dtype,
        notes=tuple(notes + ["parameter counts estimated from shapes"]),
        **mla,
    )


def spec_from_config_file(path: str | Path) -> ModelSpec:
    """Read a local HF ``config.json`` (or a directory containing one) into a ModelSpec."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    from phasescope.safeio import read_user_json

    # one reader for user files: size and nesting limits, encoding, wrong top-level type
    cfg = read_user_json(p, what="config file", expect=dict, max_bytes=64 * 1024**2)
    spec = spec_from_config(cfg, name=p.name, source=str(p))
    ident = (p.parent.name if p.name == "config.json" else p.stem) or spec.id
    named = "_name_or_path" in cfg and bool(cfg["_name_or_path"])
    return replace(spec, id=spec.id if named else ident, name=spec.name if named else ident)


# --- GGUF ------------------------------------------------------------------------------------------------


def _scalar(v: Any) -> Any:
    """GGUF per-layer arrays (e.g. head_count_kv per layer) → their maximum; scalars unchanged."""
    vals = getattr(v, "values", None)
    if vals is not None:
        nums = [x for x in vals if isinstance(x, (int, float))]
        return max(nums) if nums else None
    return v


def _spec_from_gguf_metadata(
    md: dict[str, Any], *, name: str, source: str, origin: str, tensors: list[Any] | None = None
) -> ModelSpec:
    arch = md.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UnknownModelError(f"{name}: no general.architecture in the GGUF metadata")

    def g(key: str) -> Any:
        return _scalar(md.get(f"{arch}.{key}"))

    L = g("block_count")
    d = g("embedding_length")
    n_q = g("attention.head_count")
    if not (L and d):
        raise UnknownModelError(f"{name}: GGUF metadata lacks {arch}.block_count / {arch}.embedding_length")
    L, d = int(L), int(d)
    n_q = int(n_q) if n_q else None
    n_kv = g("attention.head_count_kv")
    n_kv = int(n_kv) if n_kv else n_q
    key_len = g("attention.key_length")
    head_dim = int(key_len) if key_len else (d // n_q if n_q else None)
    ff = g("feed_forward_length")
    vocab = g("vocab_size")
    if not vocab:
        toks = md.get("tokenizer.ggml.tokens")
        vocab = getattr(toks, "length", None)
    n_exp = int(g("expert_count") or 0)
    k = int(g("expert_used_count") or 0)
    n_shared = int(g("expert_shared_count") or 0)
    moe_ff = g("expert_feed_forward_length")
    kv_lora = g("attention.kv_lora_rank")
    window = g("attention.sliding_window")
    notes: list[str] = []
    n_sliding = 0
    if window:
        window = int(window)
        # llama.cpp src/llama-model.cpp: gemma3 set_swa_pattern(6), gemma2/gpt-oss/cohere2 pattern 2/2/4
        pattern = _scalar(md.get(f"{arch}.attention.sliding_window_pattern")) or {
            "gemma3": 6, "gemma3n": 5, "gemma2": 2, "gpt-oss": 2, "cohere2": 4, "llama4": 4,
        }.get(arch)
        if pattern:
            n_sliding = L - L // int(pattern)
            notes.append(f"sliding window {window}: {n_sliding} local / {L - n_sliding} global layers")
        else:
            n_sliding = L
            notes.append(f"sliding window {window} on all layers")
    mla: dict[str, Any] = {}
    if kv_lora:
        rope = int(g("rope.dimension_count") or 64)
        mla = dict(
            kv_lora_rank=int(kv_lora),
            qk_rope_head_dim=rope,
            q_lora_rank=int(g("attention.q_lora_rank")) if g("attention.q_lora_rank") else None,
            qk_nope_head_dim=(int(key_len) - rope) if key_len else 128,
            v_head_dim=int(g("attention.value_length") or 128),
        )
    ctx = g("context_length")
    file_type = md.get("general.file_type")
    dtype = gguf_file_type_name(int(file_type)) if isinstance(file_type, int) else None

    total = active = read = routed = None
    w_bytes = read_bytes = routed_bytes = None
    tie = False
    if tensors:
        names = {t.name for t in tensors}
        tie = "output.weight" not in names
        total = sum(t.n_elements for t in tensors)
        w_bytes = float(sum(t.n_bytes for t in tensors))
        routed = sum(t.n_elements for t in tensors if "_exps" in t.name)
        routed_bytes = float(sum(t.n_bytes for t in tensors if "_exps" in t.name))
        emb = [t for t in tensors if t.name == "token_embd.weight"]
        emb_n = emb[0].n_elements if emb else 0
        emb_b = float(emb[0].n_bytes) if emb else 0.0
        if vocab is None and emb and len(emb[0].shape) == 2:
            vocab = emb[0].shape[1]
        frac = k / n_exp if n_exp and k else 0.0
        active = int(total - routed + routed * frac)
        read = active - (0 if tie else emb_n)
        read_bytes = w_bytes - routed_bytes + routed_bytes * frac - (0.0 if tie else emb_b)
    else:
        pc = md.get("general.parameter_count")
        if isinstance(pc, (int, float)) and pc > 0:
            total = int(pc)
            notes.append("parameter count from general.parameter_count")
    if n_exp and k and tensors is None:
        notes.append("MoE active bytes unknown without tensor sizes")
    spec = ModelSpec(
        id=name,
        name=str(md.get("general.name") or name),
        origin=origin,
        source=source,
        architecture=arch,
        n_layers=L,
        hidden_size=d,
        n_heads=n_q,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab_size=int(vocab) if vocab else None,
        intermediate_size=int(ff) if ff else None,
        tie_word_embeddings=tie,
        max_position_embeddings=int(ctx) if ctx else None,
        total_params=total,
        active_params=active,
        decode_read_params=read,
        n_experts=n_exp if k else 0,
        n_experts_per_tok=k if n_exp else 0,
        n_shared_experts=n_shared,
        moe_intermediate_size=int(moe_ff) if moe_ff else None,
        n_moe_layers=(L - int(g("leading_dense_block_count") or 0)) if n_exp and k else 0,
        routed_expert_params=routed or 0,
        sliding_window=window or None,
        n_sliding_layers=n_sliding,
        dtype=dtype,
        file_weight_bytes=w_bytes,
        file_read_bytes_batch1=read_bytes,
        file_routed_expert_bytes=routed_bytes,
        notes=tuple(notes),
        **mla,
    )
    if spec.total_params is None and spec.n_heads and spec.vocab_size and spec.intermediate_size:
        counts = estimate_params(
            n_layers=L, hidden_size=d, n_heads=spec.n_heads, n_kv_heads=n_kv or spec.n_heads,
            head_dim=head_dim or d // spec.n_heads, vocab_size=spec.vocab_size,
            intermediate_size=spec.intermediate_size, tie_word_embeddings=True,
        )
        spec = replace(spec, total_params=counts["total"], active_params=counts["active"],
                       decode_read_params=counts["decode_read"],
                       notes=spec.notes + ("parameter counts estimated from shapes",))
    elif spec.decode_read_params is None and spec.total_params is not None and not spec.is_moe:
        spec = replace(spec, active_params=spec.total_params, decode_read_params=spec.total_params)
    return spec


def spec_from_gguf(path: str | Path) -> ModelSpec:
    """A ModelSpec from a local GGUF file's header, with exact stored bytes from the tensor table."""
    from phasescope.theory.gguf_header import read_gguf_header

    p = Path(path).expanduser()
    header = read_gguf_header(p)
    spec = _spec_from_gguf_metadata(
        header.metadata, name=p.stem, source=f"GGUF header of {p}", origin="gguf", tensors=header.tensors
    )
    return spec


def from_ollama_show(show: dict[str, Any], *, model: str | None = None) -> ModelSpec:
    """A ModelSpec from Ollama's ``POST /api/show`` body (``model_info`` holds GGUF keys; ``details`` the quant)."""
    if not isinstance(show, dict) or not isinstance(show.get("model_info"), dict):
        raise UnknownModelError("Ollama /api/show answer has no model_info")
    md = dict(show["model_info"])
    details = show.get("details") or {}
    qlevel = str(details.get("quantization_level") or "")
    name = model or str(md.get("general.basename") or md.get("general.name") or "ollama-model")
    spec = _spec_from_gguf_metadata(md, name=name, source="Ollama /api/show model_info", origin="ollama")
    if qlevel:
        try:
            spec = replace(spec, dtype=get_quant(qlevel).name)
        except InputError:
            spec = replace(spec, notes=spec.notes + (f"unknown quantization_level {qlevel!r}",))
    if spec.is_moe:
        spec = replace(spec, decode_read_params=None,
                       notes=spec.notes + ("MoE: per-token active weights unknown from /api/show",))
    return spec


_LLAMACPP_FTYPE = re.compile(r"^\s*(\w+?)\s*-\s*(\w+)\s*$")


def _llamacpp_ftype(text: Any) -> str | None:
    """llama.cpp's ``llama_model_ftype_name`` text (``"Q4_K - Medium"``, ``"Q8_0"``, ``"F16"``) → a quant name."""
    if not isinstance(text, str) or not text.strip():
        return None
    m = _LLAMACPP_FTYPE.match(text)
    name = f"{m.group(1)}_{m.group(2)[0]}" if m else text.strip()
    try:
        return get_quant(name).name
    except InputError:
        return None


def from_llamacpp_meta(meta: dict[str, Any], *, model: str = "llama.cpp model") -> ModelSpec:
    """A size-only ModelSpec from llama-server's ``GET /v1/models`` ``data[].meta``
    (``n_params``, ``size`` = tensor bytes, ``n_embd``, ``n_vocab``, ``n_ctx_train``, ``ftype``)."""
    if not isinstance(meta, dict) or not meta.get("size") or not meta.get("n_params"):
        raise UnknownModelError("llama.cpp model meta lacks n_params/size")
    n_params = int(meta["n_params"])
    size = float(meta["size"])
    d = meta.get("n_embd")
    vocab = meta.get("n_vocab")
    return ModelSpec(
        id=model,
        name=model,
        origin="llamacpp",
        source="llama-server /v1/models meta (size = tensor bytes)",
        hidden_size=int(d) if d else None,
        vocab_size=int(vocab) if vocab else None,
        max_position_embeddings=int(meta["n_ctx_train"]) if meta.get("n_ctx_train") else None,
        total_params=n_params,
        active_params=n_params,
        decode_read_params=n_params,
        dtype=_llamacpp_ftype(meta.get("ftype")),
        file_weight_bytes=size,
        file_read_bytes_batch1=size,
        notes=(f"ftype {meta.get('ftype')}", "layer shapes unknown: KV and attention terms omitted"),
    )


def from_llamacpp_props(props: dict[str, Any], *, meta: dict[str, Any] | None = None) -> ModelSpec:
    """From llama-server ``GET /props``: the GGUF at ``model_path`` when it is readable here, else ``meta``."""
    path = props.get("model_path") if isinstance(props, dict) else None
    if path and Path(str(path)).is_file():
        return spec_from_gguf(str(path))
    if meta is not None:
        return from_llamacpp_meta(meta, model=Path(str(path)).stem if path else "llama.cpp model")
    raise UnknownModelError("llama-server /props has no readable model_path and no /v1/models meta was given")


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


# --- the catalog ----------------------------------------------------------------------------------------

_INT_COLS = (
    "num_parameters", "active_parameters", "decode_read_params", "num_hidden_layers", "hidden_size",
    "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
    "max_position_embeddings", "n_routed_experts", "n_experts_per_tok", "n_shared_experts",
    "moe_intermediate_size", "n_moe_layers", "routed_expert_params", "sliding_window", "n_sliding_layers",
    "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim",
    "kv_bytes_per_token_fp16", "kv_bytes_per_token_fp16_global_layers_only",
)


def _i(row: dict[str, str], key: str) -> int | None:
    v = (row.get(key) or "").strip()
    return int(float(v)) if v else None


def _row_to_spec(row: dict[str, str]) -> ModelSpec:
    return ModelSpec(
        id=row["id"],
        name=row.get("hf_repo") or row["id"],
        origin="catalog",
        source=row.get("source") or "",
        architecture=row.get("architecture") or None,
        n_layers=_i(row, "num_hidden_layers"),
        hidden_size=_i(row, "hidden_size"),
        n_heads=_i(row, "num_attention_heads"),
        n_kv_heads=_i(row, "num_key_value_heads"),
        head_dim=_i(row, "head_dim"),
        vocab_size=_i(row, "vocab_size"),
        intermediate_size=_i(row, "intermediate_size"),
        tie_word_embeddings=(row.get("tie_word_embeddings") or "").strip().lower() == "true",
        max_position_embeddings=_i(row, "max_position_embeddings"),
        total_params=_i(row, "num_parameters"),
        active_params=_i(row, "active_parameters"),
        decode_read_params=_i(row, "decode_read_params"),
        n_experts=_i(row, "n_routed_experts") or 0,
        n_experts_per_tok=_i(row, "n_experts_per_tok") or 0,
        n_shared_experts=_i(row, "n_shared_experts") or 0,
        moe_intermediate_size=_i(row, "moe_intermediate_size"),
        n_moe_layers=_i(row, "n_moe_layers") or 0,
        routed_expert_params=_i(row, "routed_expert_params") or 0,
        sliding_window=_i(row, "sliding_window"),
        n_sliding_layers=_i(row, "n_sliding_layers") or 0,
        kv_lora_rank=_i(row, "kv_lora_rank"),
        qk_rope_head_dim=_i(row, "qk_rope_head_dim"),
        q_lora_rank=_i(row, "q_lora_rank"),
        qk_nope_head_dim=_i(row, "qk_nope_head_dim"),
        v_head_dim=_i(row, "v_head_dim"),
        dtype=(row.get("dtype") or "bf16").strip() or "bf16",
        expert_dtype=(row.get("expert_dtype") or "").strip() or None,
        notes=tuple(n for n in [(row.get("attention_notes") or "").strip()] if n),
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, ModelSpec]:
    text = files("phasescope").joinpath("data/models.csv").read_text(encoding="utf-8")
    return {r["id"]: _row_to_spec(r) for r in csv.DictReader(io.StringIO(text))}


def list_models() -> list[ModelSpec]:
    """Every catalog model, in file order."""
    return list(_catalog().values())


def get_catalog_model(model_id: str) -> ModelSpec:
    """A catalog model by id (case-insensitive; the HF repo name works too), else UnknownModelError."""
    cat = _catalog()
    key = model_id.strip().lower()
    if key in cat:
        return cat[key]
    for spec in cat.values():
        if spec.name.lower() == key or spec.name.lower().split("/")[-1] == key:
            return spec
    close = difflib.get_close_matches(key, list(cat), n=3, cutoff=0.5)
    hint = ("did you mean " + ", ".join(close) + "?") if close else "see `phasescope models`, or pass a config.json / .gguf path"
    raise UnknownModelError(f"unknown model {model_id!r}", hint=hint)


def load_model_spec(spec: str) -> ModelSpec:
    """A ModelSpec from a catalog id, a ``config.json`` path (or its directory), or a ``.gguf`` path."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("empty model spec")
    s = spec.strip()
    p = Path(s).expanduser()
    try:
        return _load_model_spec(s, p)
    except OSError as exc:  # a name too long for a path, a file we may not read
        raise InputError(f"cannot read the model spec {s[:80]!r}: {exc.strerror or exc}") from None


def _load_model_spec(s: str, p: Path) -> ModelSpec:
    if s.lower().endswith(".gguf"):
        return spec_from_gguf(p)
    if s.lower().endswith(".json") or p.is_dir():
        return spec_from_config_file(p)
    if p.is_file():
        with p.open("rb") as fh:
            magic = fh.read(4)
        if magic == b"GGUF":
            return spec_from_gguf(p)
        return spec_from_config_file(p)
    if "/" in s and not get_catalog_ids_match(s):
        # looks like a path that does not exist (or an HF repo id we do not have)
        if s.startswith((".", "/", "~")) or Path(s).suffix:
            raise InputError(f"file not found: {s}")
    return get_catalog_model(s)


def get_catalog_ids_match(s: str) -> bool:
    """True when ``s`` is exactly a catalog id or HF repo name (case-insensitive); no fuzzy matching."""
    key = s.strip().lower()
    return any(key in (m.id, m.name.lower()) for m in _catalog().values())
