"""Issue #15: advice set against the server's current settings (llama.cpp /props, vLLM /metrics
info and /v1/models, Ollama /api/show, ``--server-flags``): a change equal to the current value, or
one that would not act on this workload, is never advised; the rest name the current value."""

from __future__ import annotations

import pytest

from phasescope.diagnose import Ceilings, diagnose
from phasescope.diagnose.settings import ServerSettings, canonical_quant, next_smaller_quant, parse_server_flags
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.prefill_interference import InterferenceResult

from explain_synth import bt, lv


# -- advice knows the current settings -----------------------------------------------------------------
def pi(prompt):
    return InterferenceResult(ExperimentInfo(name="prefill-interference"), n_streams=3, injected_prompt_tokens=prompt,
                              injected_ttft_s=0.5, injected_prefill_s=0.49, itl_baseline_s=0.02,
                              itl_max_during_s=0.5, spike_x=25.0, stall_s=0.48, spike_duration_s=0.5,
                              interference=True, chunked_prefill_likely=False, reason="r",
                              itl_baseline_s_ci=[0.019, 0.021], itl_baseline_n=40, spike_x_ci=[23.8, 26.3])


def test_no_batch_size_advice_that_would_not_split_the_prompt():
    s = ServerSettings(n_batch=512, n_ubatch=512, sources={"n_batch": "--server-flags", "n_ubatch": "--server-flags"})
    f = diagnose({"prefill-interference": pi(372)}, engine="llamacpp", settings=s).get("prefill-interference")
    lc = [a.change for a in f.advice if a.engine == "llamacpp"]
    advised = [c.split(" (now")[0] for c in lc]
    assert lc and not any("-b 512" in c for c in advised), lc
    n = int(lc[0].split()[1])
    assert n < 372 and "(now -b 512 -ub 512, --server-flags)" in lc[0]


def test_default_batch_is_named_as_the_default():
    from phasescope.diagnose.settings import with_defaults

    s = with_defaults(ServerSettings(), "llamacpp")
    f = diagnose({"prefill-interference": pi(372)}, engine="llamacpp", settings=s).get("prefill-interference")
    lc = next(a.change for a in f.advice if a.engine == "llamacpp")
    assert "(now -b 2048 -ub 512, llama.cpp default)" in lc


def test_quant_advice_steps_down_from_the_current_type_with_the_bandwidth_speedup():
    s = ServerSettings(model_file_type="q4_k_m", sources={"model_file_type": "llama.cpp /props model_ftype"})
    b = bt([lv(1, 90), lv(2, 170)], 4, "slots")
    d = diagnose({"batching": b}, engine="llamacpp", ceilings=Ceilings(100.0, "theory"), settings=s)
    f = d.get("decode-at-ceiling")
    text = " ".join(a.change + " " + a.why for a in f.advice)
    assert "Q4_K_M)" not in text.replace("instead of Q4_K_M", "")  # never suggested as the target
    step = next(a for a in f.advice if a.engine == "llamacpp")
    assert step.change.startswith("Q3_K_M instead of Q4_K_M")
    assert "1.22×" in step.why  # 4.89 → 4.00 bits per weight


def test_quant_at_the_bottom_suggests_a_smaller_model():
    s = ServerSettings(model_file_type="q2_k", sources={"model_file_type": "--server-flags"})
    d = diagnose({"batching": bt([lv(1, 90), lv(2, 170)], 4, "slots")}, engine="llamacpp",
                 ceilings=Ceilings(100.0, "theory"), settings=s)
    assert any("smaller model" in a.change for a in d.get("decode-at-ceiling").advice if a.engine == "llamacpp")


def test_parallel_advice_is_left_out_when_already_at_the_knee():
    s = ServerSettings(n_parallel=4, sources={"n_parallel": "llama.cpp /props total_slots"})
    b = bt([lv(1, 40), lv(2, 78), lv(4, 150), lv(8, 152)], 8, "--max-concurrency", knee=4, reached=True)
    f = diagnose({"batching": b}, engine="llamacpp", settings=s).get("batching-knee")
    assert not any("--parallel" in a.change for a in f.advice)
    s2 = ServerSettings(n_parallel=8, sources={"n_parallel": "--server-flags"})
    f2 = diagnose({"batching": b}, engine="llamacpp", settings=s2).get("batching-knee")
    assert any(a.change.startswith("--parallel 4 (now 8") for a in f2.advice)


# -- reading the settings ------------------------------------------------------------------------------------
def test_server_flags_parse_llamacpp_vllm_and_ollama_spellings():
    s = parse_server_flags("-m /m/gemma-3-270m-Q4_K_M.gguf -b 256 --ubatch-size=128 -np 4 "
                           "--max-num-batched-tokens 2048 --no-enable-chunked-prefill OLLAMA_NUM_PARALLEL=2")
    assert (s.n_batch, s.n_ubatch, s.n_parallel, s.model_file_type) == (256, 128, 4, "q4_k_m")
    assert s.max_num_batched_tokens == 2048 and s.chunked_prefill is False
    assert s.sources["n_batch"] == "--server-flags"
    from phasescope.errors import InputError

    with pytest.raises(InputError, match="-b"):
        parse_server_flags("-b lots")


@pytest.mark.parametrize("text,want", [("Q4_K - Medium", "q4_k_m"), ("Q8_0", "q8_0"), ("q4_K_M", "q4_k_m"),
                                       ("models/gemma-3-270m-q4_k_m.gguf", "q4_k_m"), ("F16", "f16"), ("", None)])
def test_canonical_quant(text, want):
    assert canonical_quant(text) == want


def test_quant_ladder_only_goes_down():
    from phasescope.theory.quant import bits_per_weight

    for q in ("fp16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m"):
        n = next_smaller_quant(q)
        assert n is not None and bits_per_weight(n) < bits_per_weight(q)
    assert next_smaller_quant("q2_k") is None
