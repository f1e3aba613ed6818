"""A synthetic GGUF on the real engine: a tiny Llama shape (2 layers, 256 wide) with the pinned Llama-3
tokenizer loads in llama-server, generates tokens, requantizes with llama-quantize, and a probe on it
says "synthetic weights". Small on purpose: a few seconds."""

from __future__ import annotations

import json
import math
import urllib.request
from dataclasses import replace
from typing import Any

import pytest

from phasescope.engine import synth as S
from phasescope.lifecycle import use_synthetic
from phasescope.theory.models import load_model_spec

pytestmark = pytest.mark.engine

TINY = replace(load_model_spec("llama-3.2-1b"), id="tiny-llama-test", n_layers=2, hidden_size=256, n_heads=4,
               n_kv_heads=2, head_dim=64, intermediate_size=512, total_params=None, active_params=None,
               decode_read_params=None)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read().decode())


def test_a_synthetic_llama_shape_serves_tokens_and_probes_as_synthetic() -> None:
    from phasescope.engine import running_engine
    from phasescope.probing import probe
    from phasescope.probing.card import render
    from rich.console import Console

    res = S.synthesize(TINY, "q8_0")  # the real llama-bpe vocabulary: 128,256 tokens
    with use_synthetic(res):
        with running_engine(parallel=1, ctx_size=2048) as eng:  # no model path: the synthetic file
            assert eng.model_path == res.path and eng.model_alias == "synthetic-tiny-llama-test-q8_0"
            out = _post(eng.url + "/completion", {"prompt": "The capital of France is", "n_predict": 8,
                                                  "temperature": 0, "ignore_eos": True, "cache_prompt": False})
            assert out["tokens_predicted"] == 8 and out["timings"]["prompt_n"] > 3  # a real tokenizer split it
            assert math.isfinite(out["timings"]["predicted_per_second"])
            assert isinstance(out["content"], str)
        result = probe(None, sizes=[64], max_tokens=8, repeat=1, warmup=False, save=False)
    assert result["synthetic"]["weights"] == "synthetic weights" and result["synthetic"]["shape"] == "tiny-llama-test"
    assert result["sizes"][0]["decode_tok_s"] > 0
    assert result["ceilings"] is None or result["ceilings"]["model_spec"]["origin"] == "gguf"  # the file's own shapes
    con = Console(width=200, record=True)
    con.print(render(result))
    assert "synthetic weights" in con.export_text()


def test_llama_quantize_makes_other_types_and_keeps_the_synthetic_header() -> None:
    from phasescope.theory.gguf_header import read_gguf_header

    res = S.synthesize(TINY, "q4_k_m")
    md = read_gguf_header(res.path).metadata
    assert md["general.file_type"] == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert S.synthetic_info(res.path) is not None and md[S.KEY_SHAPE] == "tiny-llama-test"
    assert md["general.name"] == "synthetic tiny-llama-test Q4_K_M"
    assert res.size_bytes < S.plan_synth(TINY, "q8_0").native_path.stat().st_size


def test_bench_synthetic_stores_a_run_that_says_synthetic_weights(tmp_path: Any, capsys: Any) -> None:
    from phasescope.cli import run
    from phasescope.store import open_store

    d = tmp_path / "tiny-llama-cfg"  # the shape's id: the folder's name (a stable cache key)
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 128256,
        "tie_word_embeddings": True, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
    assert run(["bench", "--synthetic", str(d / "config.json"), "-n", "2", "--input-len", "16", "--output-len", "4",
                "--json"]) == 0
    info = open_store(None).list_runs(kind="bench", limit=1)[0]
    assert info.params["synthetic"]["weights"] == "synthetic weights"
    assert info.params["synthetic"]["shape"] == "tiny-llama-cfg" and info.model == "synthetic-tiny-llama-cfg-q8_0"
