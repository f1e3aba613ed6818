"""explain's "batch too large for speculation" on the llama.cpp fake, which speculates by design (4 tokens drafted
per verified step, 3, 1, 2, 3 of them kept in turn: 3.25 tokens per step, truth in its timings.draft_n /
draft_n_accepted) and serves 4 slots, so explain's batching runs concurrency 1, 2 and 4.

The verdict is predicted from the roofs of a device this test defines (``local``, saved where ``phasescope hw``
saves it) and Llama-3.1-8B's shape, with the fake's measured tokens per step — so what decides it is counters
and constants, never the fake's speed:

* 100 GB/s and 0.2 TFLOP/s: a plain step reads 15 GB (150 ms) and a token costs 15 GFLOP (75 ms), so a verify
  pass of 2 × 5 tokens takes 750 ms against a plain step's 150 ms: 3.25 tokens per step lose from concurrency 2
  (predicted 0.65×) → ``speculation-batch-too-large``;
* the same bandwidth with 1,000 TFLOP/s: every verify pass stays memory-bound and speculation pays → nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import phasescope
from phasescope.testing.fakeserver import FakeServer
from phasescope.theory.devices import Device

DRAFT, ACCEPTED = 4, (3, 1, 2, 3)


def _local_device(home: Path, tflops: float) -> None:
    dev = Device(id="local", name="test device", vendor="test", kind="local", memory_gb=None, mem_bandwidth_gb_s=100.0,
                 dense_bf16_tflops=tflops, dense_fp8_tflops=None, dense_int8_tops=None, fp32_tflops=tflops,
                 interconnect=None, interconnect_gb_s=None, tdp_w=None, source="test")
    home.mkdir(parents=True, exist_ok=True)
    (home / "local_device.json").write_text(json.dumps({"device": dev.to_dict(), "measurement": {}}), encoding="utf-8")


def _explain(tmp_path: Path, tflops: float) -> dict[str, Any]:
    home = tmp_path / f"home-{tflops:g}"
    _local_device(home, tflops)
    # the subprocess imports this checkout's phasescope, whatever the working directory
    src = str(Path(phasescope.__file__).resolve().parents[1])
    env = {**os.environ, "PHASESCOPE_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])}
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.004, spec_draft=DRAFT, spec_accepted=ACCEPTED).running() as srv:
        out = subprocess.run([sys.executable, "-m", "phasescope", "explain", srv.url, "--only", "batching", "--budget", "12s",
                              "--model-spec", "llama-3.1-8b", "--device", "local", "--json", "--no-save"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        truth_d = sum(g.spec_drafted for g in srv.log)
        truth_a = sum(g.spec_accepted for g in srv.log)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert truth_d > 0 and 0 < truth_a < truth_d
    return doc


def _ids(doc: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    diag = doc.get("diagnosis") or doc
    found = [f["id"] for f in diag.get("findings", [])]
    undecided = {u["id"]: u["reason"] for u in diag.get("undecided", [])}
    return found, undecided


@pytest.mark.timeout(240)
def test_explain_names_the_batch_too_large_for_speculation_when_the_roofs_say_so(tmp_path: Path) -> None:
    doc = _explain(tmp_path, tflops=0.2)
    found, undecided = _ids(doc)
    assert "speculation-batch-too-large" in found, (found, undecided)
    diag = doc.get("diagnosis") or doc
    f = next(x for x in diag["findings"] if x["id"] == "speculation-batch-too-large")
    assert "At 2 concurrent streams" in f["cause"]
    advice = " ".join(a["change"] for a in f["advice"])
    assert "--spec-type none" in advice and "--spec-draft-n-max" in advice  # llama.cpp's own flags only
    assert "--speculative-config" not in advice


@pytest.mark.timeout(240)
def test_explain_says_nothing_of_it_while_the_verify_pass_stays_memory_bound(tmp_path: Path) -> None:
    doc = _explain(tmp_path, tflops=1000.0)
    found, undecided = _ids(doc)
    assert "speculation-batch-too-large" not in found
    assert "speculation-batch" not in undecided, undecided


def test_probe_ceiling_per_step_pays_for_the_named_draft_model(tmp_path: Path) -> None:
    """probe on the speculating fake with --model-spec / --device: the per-step ceiling of the speculating size
    counts the draft's reads (k × its bytes per token, k from the fake's own draft counts) only when
    --draft-model-spec names one, and says the draft was counted as 0 when none is named."""
    from phasescope.probing import probe
    from phasescope.theory import roofline as R
    from phasescope.theory.devices import get_device
    from phasescope.theory.models import load_model_spec
    from phasescope.theory.speculation import draft_model_of

    runs = {}
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.002, spec_draft=DRAFT, spec_accepted=ACCEPTED).running() as srv:
        for name, draft in (("ngram", None), ("draft", "llama-3.2-1b")):
            runs[name] = probe(srv.url, api="openai", sizes=[50], max_tokens=33, repeat=2, warmup=False, save=False,
                               out_dir=tmp_path / name, model_spec="llama-3.1-8b", device="h100-sxm",
                               draft_model_spec=draft)
    for res in runs.values():
        assert res["spec_decode"]["source"] == "llamacpp_timings"
    sd = runs["draft"]["spec_decode"]
    k = sd["drafted"] / sd["steps"]
    n = runs["draft"]["ceilings"]["sizes"][0]["prompt_tokens"]
    ngram, drafted = runs["ngram"]["ceilings"], runs["draft"]["ceilings"]
    assert ngram["sizes"][0]["draft_bytes_per_step"] == 0.0 and "no draft model named" in ngram["draft_note"]
    d = draft_model_of(load_model_spec("llama-3.2-1b"), n)
    assert drafted["sizes"][0]["draft_bytes_per_step"] == pytest.approx(k * (d.weight_bytes + d.kv_bytes_per_seq))
    assert drafted["draft_model_spec"]["id"] == "llama-3.2-1b"
    step = R.decode_ceiling(load_model_spec("llama-3.1-8b"), get_device("h100-sxm"), context=n).step_bytes
    plain = drafted["sizes"][0]["decode_ceiling_tok_s"]
    assert drafted["sizes"][0]["decode_ceiling_per_step_tok_s"] == pytest.approx(
        plain * step / (step + drafted["sizes"][0]["draft_bytes_per_step"]) * sd["tokens_per_step"])
    assert drafted["sizes"][0]["decode_ceiling_per_step_tok_s"] < ngram["sizes"][0]["decode_ceiling_per_step_tok_s"]
