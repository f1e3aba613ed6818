"""Issue 34 on a real loopback vLLM fake: a probe of a server that reports the Instruct name prints
ceilings with no flag, and says when the shape came from the served model's config.json in the local
Hugging Face cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from phasescope.testing.fakeserver import FakeServer

SERVED = "meta-llama/Llama-3.1-8B-Instruct"


def _probe(url: str, env: dict[str, str]) -> dict:
    p = subprocess.run([sys.executable, "-m", "phasescope", "probe", url, "-p", "16", "-n", "4", "-r", "1",
                        "--device", "h100-sxm", "--no-save", "--json"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_probe_of_an_instruct_name_gets_ceilings_and_names_the_cached_config(tmp_path: Path) -> None:
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), PHASESCOPE_HOME=str(tmp_path / "cfg"))
    env.pop("HF_HUB_CACHE", None)
    with FakeServer(flavor="vllm", model=SERVED, ttft_s=0.002, itl_s=0.001).running() as srv:
        plain = _probe(srv.url, env)
        ce = plain["ceilings"]
        assert ce and ce["model_spec"]["id"] == "llama-3.1-8b", plain.get("ceilings_note")
        assert "read as catalog llama-3.1-8b" in ce["model_spec"]["chosen_by"]
        assert ce["sizes"][0]["decode_ceiling_tok_s"] > 0
        # the served model's own config.json in a fake hub cache under $HF_HOME: it is used, and named
        snap = tmp_path / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct" / "snapshots" / "abc"
        snap.mkdir(parents=True)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
               "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_hidden_layers": 30, "vocab_size": 128256, "torch_dtype": "bfloat16"}
        (snap / "config.json").write_text(json.dumps(cfg))
        cached = _probe(srv.url, env)
    ms = cached["ceilings"]["model_spec"]
    assert ms["origin"] == "config" and "Hugging Face cache" in ms["chosen_by"] and str(snap) in ms["chosen_by"]
    # 30 layers instead of the catalog's 32: fewer bytes per token, so a higher ceiling
    assert cached["ceilings"]["sizes"][0]["decode_ceiling_tok_s"] > ce["sizes"][0]["decode_ceiling_tok_s"]
