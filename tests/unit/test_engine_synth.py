"""engine.synth: the synthetic GGUF's plan (tensor names, shapes and types per architecture, metadata,
size estimate, refusals) and the writer on a small made-up vocabulary — no engine, no llama-quantize."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from phasescope.engine import synth as S
from phasescope.lifecycle import use_synthetic
from phasescope.errors import EngineError, InputError
from phasescope.theory.models import load_model_spec, spec_from_gguf


def names(plan: S.SynthPlan) -> dict[str, S.TensorPlan]:
    return {t.name: t for t in plan.tensors}


# --- the plan: exact shapes ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["llama-3.2-1b", "llama-3.1-8b", "mistral-7b-v0.3", "mixtral-8x7b", "qwen2.5-0.5b",
                                   "qwen2.5-7b", "qwen3-0.6b", "qwen3-30b-a3b", "gemma-3-1b", "smollm2-135m"])
def test_the_plan_has_exactly_the_catalog_parameter_count(shape: str) -> None:
    # the catalog's counts come from the published configs: a tensor table with one wrong shape misses them
    plan = S.plan_synth(shape, "q8_0")
    assert plan.n_params == load_model_spec(shape).total_params


def test_llama_3_2_1b_tied_gqa_tensors() -> None:
    plan = S.plan_synth("llama-3.2-1b", "q8_0")
    t = names(plan)
    assert plan.arch == "llama" and plan.vocab == "llama-bpe"
    assert "output.weight" not in t  # tied embeddings: llama.cpp reuses token_embd
    assert t["token_embd.weight"].shape == (128256, 2048)
    assert t["blk.0.attn_q.weight"].shape == (32 * 64, 2048)
    assert t["blk.0.attn_k.weight"].shape == t["blk.0.attn_v.weight"].shape == (8 * 64, 2048)  # GQA 32q/8kv
    assert t["blk.15.ffn_down.weight"].shape == (2048, 8192)
    assert "blk.16.attn_norm.weight" not in t
    assert len(plan.tensors) == 2 + 16 * 9
    assert t["blk.0.attn_q.weight"].type == "Q8_0" and t["blk.0.attn_norm.weight"].type == "F32"


def test_untied_model_has_an_lm_head() -> None:
    t = names(S.plan_synth("llama-3.1-8b", "f16"))
    assert t["output.weight"].shape == (128256, 4096) and t["output.weight"].type == "F16"


def test_qwen_extras_and_moe_experts() -> None:
    q2 = names(S.plan_synth("qwen2.5-0.5b", "q8_0"))
    assert q2["blk.0.attn_q.bias"].shape == (14 * 64,) and q2["blk.0.attn_k.bias"].shape == (2 * 64,)
    q3 = names(S.plan_synth("qwen3-0.6b", "q8_0"))
    assert q3["blk.0.attn_q_norm.weight"].shape == (128,)
    assert q3["blk.0.attn_q.weight"].shape == (16 * 128, 1024)  # head_dim 128 ≠ 1024/16
    moe = S.plan_synth("qwen3-30b-a3b", "q8_0")
    t = names(moe)
    assert moe.arch == "qwen3moe"
    assert t["blk.0.ffn_gate_exps.weight"].shape == (128, 768, 2048)
    assert t["blk.0.ffn_down_exps.weight"].shape == (128, 2048, 768)
    assert t["blk.0.ffn_gate_inp.weight"].shape == (128, 2048) and t["blk.0.ffn_gate_inp.weight"].type == "F32"
    assert "blk.0.ffn_gate.weight" not in t
    assert moe.metadata["qwen3moe.expert_count"] == 128 and moe.metadata["qwen3moe.expert_used_count"] == 8
    assert moe.metadata["qwen3moe.expert_feed_forward_length"] == 768
    mix = S.plan_synth("mixtral-8x7b", "q8_0")
    assert mix.arch == "llama" and names(mix)["blk.0.ffn_up_exps.weight"].shape == (8, 14336, 4096)


def test_gemma3_norms_window_and_padded_tokenizer() -> None:
    plan = S.plan_synth("gemma-3-4b", "q8_0")
    t = names(plan)
    assert "blk.0.post_attention_norm.weight" in t and "blk.0.post_ffw_norm.weight" in t
    assert plan.metadata["gemma3.attention.sliding_window"] == 1024
    assert plan.vocab == "gemma-4" and "padded" in plan.notes[0]  # 262,144 tokens padded to 262,208


def test_rows_not_in_whole_q8_0_blocks_stay_f16() -> None:
    spec = replace(load_model_spec("llama-3.2-1b"), id="odd", hidden_size=80, n_heads=2, n_kv_heads=1, head_dim=40,
                   intermediate_size=96)
    t = names(S.plan_synth(spec, "q8_0"))
    assert t["blk.0.attn_q.weight"].type == "F16"  # rows of 80: not whole 32-blocks
    assert t["blk.0.ffn_down.weight"].type == "Q8_0"  # rows of 96


def test_metadata_marks_the_file_synthetic() -> None:
    plan = S.plan_synth("llama-3.2-1b", "q4_k_m")
    md = plan.metadata
    assert md["general.name"] == "synthetic llama-3.2-1b Q8_0"  # the native file; llama-quantize renames its output
    assert md[S.KEY_SYNTHETIC] is True and md[S.KEY_SHAPE] == "llama-3.2-1b" and md[S.KEY_VOCAB] == "llama-bpe"
    assert md["llama.block_count"] == 16 and md["llama.attention.head_count_kv"] == 8
    assert md["llama.attention.key_length"] == 64 and md["llama.vocab_size"] == 128256
    assert md["general.file_type"] == 7  # the native file is Q8_0; llama-quantize sets Q4_K_M's


def test_cache_key_follows_shape_type_and_vocab() -> None:
    a = S.plan_synth("llama-3.2-1b", "q8_0")
    assert a.path().name.startswith("synthetic-llama-3.2-1b-llama-bpe-") and a.path().name.endswith("-Q8_0.gguf")
    assert S.plan_synth("llama-3.2-1b", "f16").key == a.key != S.plan_synth("llama-3.2-3b", "q8_0").key
    other = replace(load_model_spec("llama-3.2-1b"), n_layers=2)
    assert S.plan_synth(other, "q8_0").key != a.key  # same id, another shape: another file
    assert S.plan_synth("llama-3.2-1b", "q8_0", vocab="llama-spm").key != a.key


# --- sizes and refusals ---------------------------------------------------------------------------------
def test_size_estimate_native_exact_and_quantized_by_bits_per_weight() -> None:
    q8 = S.plan_synth("llama-3.2-1b", "q8_0")
    mats = sum(t.n_elements for t in q8.tensors if t.type != "F32")
    vecs = sum(t.n_elements for t in q8.tensors if t.type == "F32")
    assert q8.native_bytes == q8.final_bytes == mats * 34 // 32 + 4 * vecs
    f16 = S.plan_synth("llama-3.2-1b", "f16")
    assert f16.final_bytes == 2 * mats + 4 * vecs and not f16.needs_quantize
    q4 = S.plan_synth("llama-3.2-1b", "q4_k_m")
    assert q4.needs_quantize and q4.native_type == "Q8_0" and q4.native_bytes == q8.native_bytes
    assert q4.final_bytes == int(mats * 4.8944 / 8) + 4 * vecs


def test_refuses_when_the_disk_or_the_memory_is_too_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASESCOPE_ENGINE_DIR", str(tmp_path))
    plan = S.plan_synth("llama-3.1-8b", "q4_k_m")
    with pytest.raises(InputError, match=r"needs about 13\.\d GB on disk .* has 5\.0 GB free"):
        S.check_room(plan, free_disk=5_000_000_000, free_memory=10**12)
    with pytest.raises(InputError, match=r"about 4\.9 GB of weights but this machine has 4\.0 GB"):
        S.check_room(plan, free_disk=10**12, free_memory=4_000_000_000)
    S.check_room(plan, free_disk=10**12, free_memory=10**12)  # room enough: no error


def test_refusals_for_unsupported_shapes_and_tokenizers() -> None:
    with pytest.raises(InputError, match="DeepseekV3ForCausalLM"):
        S.plan_synth("deepseek-v3")
    with pytest.raises(InputError, match="unknown quantization type"):
        S.plan_synth("llama-3.2-1b", "q9_z")
    with pytest.raises(InputError, match="more than the shape's vocabulary"):
        S.plan_synth("mixtral-8x7b", vocab="llama-bpe")  # 128k tokens into a 32k vocabulary
    with pytest.raises(InputError, match="unknown --vocab"):
        S.plan_synth("llama-3.2-1b", vocab="klingon")


# --- the writer, on a made-up vocabulary -------------------------------------------------------------------
def _tiny_vocab(engine_dir: Path, n: int = 300) -> None:
    import gguf

    d = engine_dir / "llama-cpp-python-0.3.36" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "models"
    d.mkdir(parents=True)
    w = gguf.GGUFWriter(str(d / "ggml-vocab-tiny.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(n)])
    w.add_token_types([1] * n)
    w.add_token_merges(["t 1", "t 2"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


TINY = replace(load_model_spec("llama-3.2-1b"), id="tiny", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2,
               head_dim=16, intermediate_size=128, vocab_size=320, total_params=None, active_params=None,
               decode_read_params=None)


@pytest.fixture()
def tiny_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHASESCOPE_ENGINE_DIR", str(tmp_path))
    monkeypatch.setitem(S.VOCABS, "tiny", 300)
    _tiny_vocab(tmp_path)
    return tmp_path


def test_writes_a_gguf_the_header_reader_and_gguf_py_read_back(tiny_env: Path) -> None:
    import gguf

    res = S.synthesize(TINY, "q8_0", vocab="tiny", free_disk=10**12, free_memory=10**12)
    assert not res.cached and res.path.parent == tiny_env / "models" / "synthetic"
    r = gguf.GGUFReader(str(res.path))
    got = {t.name: t for t in r.tensors}
    assert list(got) == [t.name for t in res.plan.tensors]
    for t in res.plan.tensors:
        assert tuple(int(x) for x in got[t.name].shape) == tuple(reversed(t.shape))  # GGUF ne order
        assert got[t.name].tensor_type.name == t.type
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    assert len(toks) == 320 and toks[299] == "t299" and toks[300] == "[PAD300]"  # padded to the shape's vocabulary
    assert r.fields["tokenizer.ggml.token_type"].contents()[300] == int(gguf.TokenType.UNUSED)
    assert r.fields["tokenizer.ggml.bos_token_id"].types == [gguf.GGUFValueType.UINT32]  # types kept
    assert r.fields[S.KEY_SYNTHETIC].contents() is True
    # the weights are sane: finite, small, not all alike; norms at 1
    w = gguf.quants.dequantize(got["blk.1.ffn_up.weight"].data, gguf.GGMLQuantizationType.Q8_0)
    assert np.isfinite(w).all() and 0.01 < float(w.std()) < 0.03 and len(np.unique(w)) > 100
    assert (got["blk.0.attn_norm.weight"].data == 1.0).all()
    # the theory's reader sees the same shapes, and the header says synthetic
    spec = spec_from_gguf(res.path)
    assert (spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.vocab_size,
            spec.intermediate_size, spec.tie_word_embeddings, spec.dtype) == (2, 64, 4, 2, 16, 320, 128, True, "q8_0")
    assert spec.total_params == res.plan.n_params
    assert S.synthetic_info(res.path) == {"synthetic": True, "weights": "synthetic weights", "shape": "tiny",
                                          "vocab": "tiny", "name": "synthetic tiny Q8_0"}
    again = S.synthesize(TINY, "q8_0", vocab="tiny")
    assert again.cached and again.path == res.path


def test_f16_and_bf16_are_written_directly(tiny_env: Path) -> None:
    import gguf

    for q in ("f16", "bf16"):
        res = S.synthesize(TINY, q, vocab="tiny", free_disk=10**12, free_memory=10**12)
        t = {x.name: x for x in gguf.GGUFReader(str(res.path)).tensors}["token_embd.weight"]
        assert t.tensor_type.name == q.upper()


def test_a_quantized_type_needs_llama_quantize_and_says_so(tiny_env: Path) -> None:
    with pytest.raises(EngineError, match="llama-quantize is not built"):
        S.synthesize(TINY, "q4_k_m", vocab="tiny", free_disk=10**12, free_memory=10**12)
    assert S.plan_synth(TINY, "q4_k_m", vocab="tiny").native_path.exists()  # the Q8_0 source is kept (cached)
    assert not S.plan_synth(TINY, "q4_k_m", vocab="tiny").path().exists()


def test_the_tokenizer_reader_matches_gguf_py(tiny_env: Path) -> None:
    import gguf

    path = S.vocab_dir() / "ggml-vocab-tiny.gguf"
    fast = {k: v for k, v, _, _ in S.read_tokenizer_kv(path)}
    slow = {k: f.contents() for k, f in gguf.GGUFReader(str(path)).fields.items() if k.startswith("tokenizer.")}
    assert fast == slow


def test_use_synthetic_tags_runs_and_names_the_engine_model(tiny_env: Path) -> None:
    from phasescope.lifecycle import _TAGS

    res = S.synthesize(TINY, "q8_0", vocab="tiny", free_disk=10**12, free_memory=10**12)
    assert S.active() is None
    with use_synthetic(res) as tag:
        assert S.active() is res and S.alias_of(res) == "synthetic-tiny-q8_0"
        assert (_TAGS.get() or {})["synthetic"] == tag and tag["weights"] == "synthetic weights"
    assert S.active() is None and not (_TAGS.get() or {}).get("synthetic")


def test_cli_refuses_synthetic_with_a_url_and_engine_synth_dry_run(tiny_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phasescope.cli import run

    assert run(["probe", "http://127.0.0.1:9", "--synthetic", "llama-3.2-1b"]) == 2
    assert "takes no server URL" in capsys.readouterr().err
    assert run(["tune", "--serve", "x {port}", "--param", "a=1", "--synthetic", "llama-3.2-1b"]) == 2
    assert run(["bench", "--quant", "q4_k_m"]) == 2  # --quant alone would be silently ignored
    assert "give --synthetic SHAPE with it" in capsys.readouterr().err
    assert run(["engine", "synth", "llama-3.2-1b", "--quant", "q4_k_m", "--dry-run"]) == 0
    assert "Q8_0 file 1.31 GB, Q4_K_M about 0.76 GB" in capsys.readouterr().out
    assert run(["engine", "synth", "deepseek-v3"]) == 2
    assert "cannot be written for DeepseekV3ForCausalLM" in capsys.readouterr().err


def test_a_tune_made_with_synthetic_keeps_it_in_its_id_and_spec(tiny_env: Path) -> None:
    from phasescope.tuning.spec import TuneSpec, tune_id

    plain = TuneSpec(params=[("ub", ["32", "512"])])
    assert plain.synthetic is None and "synthetic" not in plain.to_dict()  # ids of ordinary tunes unchanged
    res = S.synthesize(TINY, "q8_0", vocab="tiny", free_disk=10**12, free_memory=10**12)
    with use_synthetic(res):
        syn = TuneSpec(params=[("ub", ["32", "512"])])
    assert syn.synthetic == {"shape": "tiny", "quant": "Q8_0", "vocab": "tiny"}
    assert tune_id(syn) != tune_id(plain)
    back = TuneSpec.from_dict(syn.to_dict())
    assert back.synthetic == syn.synthetic and tune_id(back) == tune_id(syn)  # --resume keeps the model
