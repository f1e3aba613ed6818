"""A ModelSpec from a Hugging Face ``config.json``: GQA, explicit ``head_dim`` (Qwen3, Gemma 2/3, gpt-oss have
``n_q·d_h ≠ d``), MoE (Mixtral, Qwen-MoE, DeepSeek, gpt-oss, Llama 4), MLA (DeepSeek ``kv_lora_rank``), sliding
windows (``layer_types``, ``sliding_window_pattern``, Gemma 2 alternation, Llama 4 chunked attention) and a
nested ``text_config``. Parameter counts come from :func:`~phasescope.theory.models.params.estimate_params`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from phasescope.errors import InputError
from phasescope.theory.models.params import NON_GATED, estimate_params
from phasescope.theory.models.spec import ModelSpec


#: the largest any shape field may be (layers, widths, heads, experts, windows): far above every model,
#: small enough that products of a few of them stay exact and finite
MAX_SHAPE = 2**31
#: the spellings of the routed-expert count and of the experts each token uses
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")

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
    """A shape field: a whole, non-negative, finite number of at most :data:`MAX_SHAPE` (one line, exit 2)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0
            or value > MAX_SHAPE or (isinstance(value, float) and not value.is_integer())):
        raise InputError(f"{where}: {key} must be a non-negative whole number (at most {MAX_SHAPE:,}), "
                         f"got {_shown(value)}")
    return int(value)


def _opt_int(c: dict[str, Any], key: str, where: str, default: int = 0) -> int:
    """``c[key]`` as a shape field, ``default`` when absent or null (0 / false / "" count as absent, as before)."""
    v = c.get(key)
    if v is None or (v == 0 and not isinstance(v, bool)) or v == "":
        return default
    return _as_int(v, key, where)


def _first(c: dict[str, Any], keys: tuple[str, ...], where: str) -> tuple[str, int]:
    """The first of ``keys`` the config sets (any of its spellings), as a shape field; ("", 0) when none."""
    found = [(key, _as_int(c[key], key, where)) for key in keys if c.get(key) is not None]  # every one checked
    return next(((k, v) for k, v in found if v), found[0] if found else ("", 0))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


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

    # MoE: every spelling of the expert counts, checked before any count is derived from them
    exp_key, n_exp = _first(c, EXPERT_KEYS, where)
    k_key, k = _first(c, PER_TOKEN_KEYS, where)
    if n_exp and k and k > n_exp:
        # one alone (a dense config that names one field) stays dense, as transformers reads it
        raise InputError(f"{where}: {k_key} {k} is more than {exp_key} {n_exp} "
                         "(experts ≥ experts per token ≥ 1)")
    n_shared = _opt_int(c, "n_shared_experts", where)
    shared_ff = None
    if c.get("shared_expert_intermediate_size"):
        n_shared = max(n_shared, 1)
        shared_ff = _as_int(c["shared_expert_intermediate_size"], "shared_expert_intermediate_size", where)
    moe_ff = _opt_int(c, "moe_intermediate_size", where) or None
    dense_ff = ff
    n_moe_layers = 0
    if n_exp and k:
        if model_type.startswith("llama4"):
            n_shared = max(n_shared, 1)
            step = _opt_int(c, "interleave_moe_layer_step", where, 1)
            n_moe_layers = L // step
            moe_ff = moe_ff or ff
            dense_ff = _opt_int(c, "intermediate_size_mlp", where, ff)
        elif c.get("first_k_dense_replace") is not None or model_type.startswith("deepseek"):
            first = _opt_int(c, "first_k_dense_replace", where)
            freq = _opt_int(c, "moe_layer_freq", where, 1)
            n_moe_layers = len([i for i in range(first, L) if (i - first) % freq == 0])
        else:
            step = _opt_int(c, "decoder_sparse_step", where, 1)
            dense_raw = c.get("mlp_only_layers") or []
            if not isinstance(dense_raw, list):
                raise InputError(f"{where}: mlp_only_layers must be a list of layer numbers")
            dense_only = {_as_int(i, "mlp_only_layers", where) for i in dense_raw}
            n_moe_layers = len([i for i in range(L) if i not in dense_only and (i + 1) % step == 0])
        moe_ff = int(moe_ff or ff)
    else:
        n_exp = k = 0

    # MLA
    kv_lora = _opt_int(c, "kv_lora_rank", where)
    mla: dict[str, Any] = {}
    if kv_lora:
        mla = dict(
            kv_lora_rank=kv_lora,
            qk_rope_head_dim=_opt_int(c, "qk_rope_head_dim", where, 64),
            q_lora_rank=_opt_int(c, "q_lora_rank", where) or None,
            qk_nope_head_dim=_opt_int(c, "qk_nope_head_dim", where, 128),
            v_head_dim=_opt_int(c, "v_head_dim", where, 128),
        )
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        notes.append("MLA: KV = layers x (kv_lora_rank + qk_rope_head_dim); num_key_value_heads ignored")

    for key in ("sliding_window", "attention_chunk_size", "sliding_window_pattern", "_sliding_window_pattern"):
        if c.get(key) is not None and not isinstance(c[key], bool):
            _as_int(c[key], key, where)
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
        gated=model_type not in NON_GATED,
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
    if isinstance(max_pos, (int, float)) and not isinstance(max_pos, bool):
        max_pos = _as_int(max_pos, "max_position_embeddings", where)
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

