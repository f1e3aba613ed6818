"""Model names as servers report them (issue 34): served names read as catalog shapes, the weight
format read from the name, near misses, and the served model's config.json from the local HF cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phasescope.errors import InputError
from phasescope.theory.models import find_cached_config, load_model_spec, resolve_served_name, spec_for_served_name

from tests.cli_helpers import isolated_home as _home  # noqa: F401  (autouse: no saved `local` device)
from tests.cli_helpers import run


@pytest.mark.parametrize(
    "served, cid, quant",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", None),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b", None),
        ("google/gemma-3-27b-it", "gemma-3-27b", None),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b", "awq"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b", "gptq"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "qwen2.5-7b", "int8"),
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", "fp8"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b", "fp8"),
        ("bartowski/Llama-3.2-3B-Instruct-GGUF", "llama-3.2-3b", None),
        ("qwen2.5:7b-instruct-q4_K_M", "qwen2.5-7b", "q4_k_m"),
        ("Qwen/Qwen3-4B-Instruct-2507", "qwen3-4b", None),
        ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k", None),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1", None),
        ("unsloth/Llama-3.2-1B-Instruct-bnb-4bit", "llama-3.2-1b", "nf4"),
        ("TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ", "mixtral-8x7b", "gptq"),
        ("meta-llama/Llama-2-7b-chat-hf", None, None),  # no Llama 2 in the catalog: no guess
        ("llama3.1:8b", "llama-3.1-8b", None),
    ],
)
def test_served_names_read_as_catalog_shapes(served: str, cid: str | None, quant: str | None) -> None:
    m = resolve_served_name(served)
    if cid is None:
        assert m is None
        return
    assert m is not None and m.catalog_id == cid, m
    assert m.quant == quant
    if quant:
        assert m.spec.dtype == quant and "from the name" in m.how
    assert served in m.how  # the card says which name was read


def test_shape_fields_survive_normalisation() -> None:
    base = load_model_spec("llama-3.1-8b")
    m = resolve_served_name("Qwen/Qwen2.5-7B-Instruct-AWQ")
    q = load_model_spec("qwen2.5-7b")
    assert (m.spec.n_layers, m.spec.n_kv_heads, m.spec.head_dim) == (q.n_layers, q.n_kv_heads, q.head_dim)
    assert m.spec.bits_per_weight < q.bits_per_weight / 3  # awq ≈ 4 bits vs bf16
    assert base.chosen_by is None  # an exact catalog id needs no explanation


def test_ceiling_takes_the_instruct_name(capsys, monkeypatch) -> None:
    code, out, err = run(["ceiling", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--device", "h100-sxm", "--json"],
                         capsys, monkeypatch)
    assert code == 0, err
    d = json.loads(out)
    assert d["model"]["chosen_by"].startswith("served name 'meta-llama/Llama-3.1-8B-Instruct' read as catalog llama-3.1-8b")
    exact = json.loads(run(["ceiling", "-m", "llama-3.1-8b", "--device", "h100-sxm", "--json"], capsys, monkeypatch)[1])
    assert d["devices"] == exact["devices"]  # the same shape gives the same ceilings


def test_unknown_name_says_what_to_pass_and_near_misses(capsys, monkeypatch) -> None:
    code, out, err = run(["ceiling", "-m", "acme/Llama-3.9-8B-Instruct", "--device", "h100-sxm"], capsys, monkeypatch)
    assert code == 2
    assert "no shape for acme/Llama-3.9-8B-Instruct: pass --model-spec config.json|.gguf|catalog-id" in err
    assert "did you mean" in err and "Traceback" not in err
    with pytest.raises(InputError, match="file not found"):
        load_model_spec("./missing/config.json")


def _cache(root: Path, repo: str, cfg: dict, rev: str = "0123abcd", ref: bool = True) -> Path:
    d = root / ("models--" + repo.replace("/", "--"))
    (d / "snapshots" / rev).mkdir(parents=True)
    (d / "snapshots" / rev / "config.json").write_text(json.dumps(cfg))
    if ref:
        (d / "refs").mkdir()
        (d / "refs" / "main").write_text(rev)
    return d / "snapshots" / rev / "config.json"


TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096,
        "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 12, "vocab_size": 32000,
        "torch_dtype": "bfloat16"}


def test_cached_config_wins_over_the_catalog_and_is_named(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    # the served repo's own config, different from the catalog's llama-3.1-8b shape
    path = _cache(tmp_path / "hub", "meta-llama/Llama-3.1-8B-Instruct", TINY)
    assert find_cached_config("meta-llama/Llama-3.1-8B-Instruct") == path
    assert find_cached_config("META-LLAMA/llama-3.1-8b-instruct") == path  # the hub folder's case is not the name's
    spec = spec_for_served_name("meta-llama/Llama-3.1-8B-Instruct")
    assert spec.n_layers == 12 and spec.origin == "config" and str(path) in spec.chosen_by
    # HF_HUB_CACHE wins over HF_HOME, as in huggingface_hub
    other = tmp_path / "other"
    p2 = _cache(other, "meta-llama/Llama-3.1-8B-Instruct", dict(TINY, num_hidden_layers=7))
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert find_cached_config("meta-llama/Llama-3.1-8B-Instruct") == p2


def test_cache_without_ref_takes_newest_snapshot_and_ignores_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    p = _cache(tmp_path, "acme/m", TINY, rev="aaaa", ref=False)
    assert find_cached_config("acme/m") == p
    assert find_cached_config("../acme/m") is None and find_cached_config("/etc/passwd") is None
    assert find_cached_config("a/b/c") is None
