"""A ModelSpec from GGUF metadata: a local ``.gguf`` file's header (:mod:`phasescope.theory.gguf_header`
reads the bytes; exact tensor sizes come from its tensor table) or the same keys as a server reports them
(Ollama's ``/api/show`` ``model_info``, see :mod:`phasescope.theory.models.servers`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from phasescope.errors import UnknownModelError
from phasescope.theory.models.params import estimate_params
from phasescope.theory.models.spec import ModelSpec
from phasescope.theory.quant import gguf_file_type_name



def _scalar(v: Any) -> Any:
    """GGUF per-layer arrays (e.g. head_count_kv per layer) → their maximum; scalars unchanged."""
    vals = getattr(v, "values", None)
    if vals is not None:
        nums = [x for x in vals if isinstance(x, (int, float))]
        return max(nums) if nums else None
    return v


def spec_from_gguf_metadata(
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
    mm_types: tuple[tuple[str, float, float], ...] | None = None
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
        mm_types = _matmul_types(tensors, tie, frac)
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
        matmul_types=mm_types,
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


def _matmul_types(tensors: list[Any], tie: bool, expert_frac: float) -> tuple[tuple[str, float, float], ...]:
    """(type, active body params, LM-head params) of the matrices a token multiplies, by GGML type: every
    tensor of two or more dimensions but the input embedding (the LM head: ``output.weight``, or the embedding
    when tied); routed experts count at the share a token activates."""
    head_name = "token_embd.weight" if tie else "output.weight"
    acc: dict[str, list[float]] = {}
    for t in tensors:
        if len(t.shape) < 2 or (t.name == "token_embd.weight" and not tie):
            continue
        row = acc.setdefault(t.type_name, [0.0, 0.0])
        if t.name == head_name:
            row[1] += t.n_elements
        else:
            row[0] += t.n_elements * (expert_frac if "_exps" in t.name else 1.0)
    return tuple((k, v[0], v[1]) for k, v in sorted(acc.items()))


def spec_from_gguf(path: str | Path) -> ModelSpec:
    """A ModelSpec from a local GGUF file's header, with exact stored bytes from the tensor table."""
    from phasescope.theory.gguf_header import read_gguf_header

    p = Path(path).expanduser()
    header = read_gguf_header(p)
    spec = spec_from_gguf_metadata(
        header.metadata, name=p.stem, source=f"GGUF header of {p}", origin="gguf", tensors=header.tensors
    )
    return spec

