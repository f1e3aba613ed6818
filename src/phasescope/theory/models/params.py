"""Parameter counts from shapes (theory.md §1, §6).

Per layer attention ``d·n_q·d_h + 2·d·n_kv·d_h + n_q·d_h·d`` (MLA: the low-rank projections), gated FFN
``3·d·ff``, MoE ``E·3·d·ff_e`` routed + shared experts + router ``d·E``, RMSNorm vectors, embedding ``V·d``
(+ ``V·d`` LM head when untied). ``decode_read`` = weights read per token at batch 1 = active params minus
the input-embedding table unless it is tied to the LM head (theory.md §2).
"""

from __future__ import annotations

#: architectures whose FFN is two matrices (up, down) instead of the gated three
NON_GATED = {"gpt2", "gpt_neox", "phi", "falcon", "opt", "bloom", "gptj", "starcoder2", "gpt_bigcode"}


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
