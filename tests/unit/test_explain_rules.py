"""Diagnosis rules: each fires on the data that calls for it, stays silent (or says "cannot tell")
otherwise, carries evidence, and maps its advice to the engine's own knobs."""

from __future__ import annotations

import pytest

from phasescope.diagnose import Ceilings, Evidence, Finding, diagnose
from phasescope.diagnose.knobs import KNOBS, advice_for
from phasescope.experiments.batching import BatchingResult, BatchLevel
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.context_fill import ContextFillResult, ContextPoint, Prediction
from phasescope.experiments.prefill_interference import InterferenceResult
from phasescope.experiments.prefix_cache import PrefixCacheResult, ServerCacheView
from phasescope.experiments.prompt_scaling import PromptScalingResult, QuadraticFit, ScalingPoint
from phasescope.experiments.queue import QueueResult, QueueSample
from phasescope.measure.records import RequestRecord


def info(name: str) -> ExperimentInfo:
    return ExperimentInfo(name=name)


def pc(detected, first=1.0, repeat=0.1, short=0.05, says=None, reason="r"):
    return PrefixCacheResult(info("prefix-cache"), system_prompt_tokens=1000, n_cold=2, n_repeat=6,
                             ttft_first_s=first, ttft_repeat_s=repeat, ttft_short_s=short,
                             expected_saving_s=first - short, saved_s=first - repeat,
                             saved_fraction=(first - repeat) / first, cache_detected=detected, reason=reason,
                             server=ServerCacheView(says_cached=says, source="usage" if says is not None else None),
                             agrees_with_server=None if says is None or detected is None else detected == says)


def lv(c, tput, itl99=0.02, itl50=0.015, decode=50.0, ttft50=0.1, queue50=None):
    return BatchLevel(concurrency=c, n=c, n_failed=0, output_tok_s=tput, per_user_decode_tok_s=decode,
                      itl_p50_s=itl50, itl_p99_s=itl99, ttft_p50_s=ttft50, ttft_p99_s=ttft50 * 1.5,
                      queue_p50_s=queue50, wall_s=1.0,
                      queue_share_total=None if queue50 is None else queue50 / ttft50,
                      # a tight interval from the level's requests (issue 29): these levels are clear cases
                      output_tok_s_ci=[tput * 0.98, tput * 1.02], output_tok_s_n=max(3, 2 * c))


def bt(levels, knee, reached):
    r = BatchingResult(info("batching"), levels=levels, knee_concurrency=knee, knee_reached=reached,
                       max_concurrency_bound=levels[-1].concurrency, bound_source="slots")
    ok = [x for x in levels if x.output_tok_s]
    if len(ok) >= 2:
        r.throughput_gain_x = max(x.output_tok_s for x in ok) / ok[0].output_tok_s
        r.itl_p99_growth_x = ok[-1].itl_p99_s / ok[0].itl_p99_s
    return r


def cf(slowdown, slows, pred=None, ratio=None):
    pts = [ContextPoint(80, 64, 2, 50.0, None, 0.02), ContextPoint(4000, 3984, 2, 50.0 * (1 - slowdown / 100), None, 0.03)]
    return ContextFillResult(info("context-fill"), points=pts, slowdown_pct=slowdown, slows=slows,
                             per_token_s_per_ctx_token=2e-6,
                             prediction=Prediction(250e6, 3072, "theory", pred) if pred is not None else None,
                             measured_over_predicted=ratio)


def ids(d):
    return set(d.ids())


# -- prefix cache ----------------------------------------------------------------------------------
def test_prefix_cache_absent_only_when_detected_false():
    d = diagnose({"prefix-cache": pc(False, repeat=0.98)}, engine="vllm")
    f = d.get("prefix-cache-absent")
    assert f is not None and f.severity == "problem"
    assert any("--enable-prefix-caching" in a.change for a in f.advice)
    assert all(a.engine in ("any", "vllm") for a in f.advice)
    on = diagnose({"prefix-cache": pc(True)}, engine="vllm")
    assert "prefix-cache-absent" not in ids(on) and "prefix-cache-working" in ids(on)
    unsure = diagnose({"prefix-cache": pc(None, reason="within the noise")})
    assert not ids(unsure) and "prefix-cache" in unsure.undecided_ids()


def test_prefix_cache_server_evidence_is_shown():
    d = diagnose({"prefix-cache": pc(True, says=True)})
    f = d.get("prefix-cache-working")
    assert any(e.what == "server reports the prefix cached" and e.value is True for e in f.evidence)


# -- decode vs ceiling -----------------------------------------------------------------------------
@pytest.mark.parametrize("measured,expected", [(90.0, "decode-at-ceiling"), (80.0, "decode-at-ceiling"),
                                               (79.0, "decode-near-ceiling"), (49.0, "decode-below-ceiling")])
def test_decode_ceiling_bands(measured, expected):
    b = bt([lv(1, measured, decode=measured), lv(2, measured * 1.9, decode=measured * 0.95)], None, False)
    d = diagnose({"batching": b}, engine="llamacpp", ceilings=Ceilings(100.0, "theory: test"))
    got = {i for i in ids(d) if i.startswith("decode-")}
    assert got == {expected}
    f = d.get(expected)
    assert any(e.value == pytest.approx(measured) for e in f.evidence)
    if expected == "decode-at-ceiling":
        assert f.severity == "limit"
        assert any("quant" in a.change.lower() for a in f.advice)


def test_decode_ceiling_unknown_is_undecided_not_guessed():
    b = bt([lv(1, 50.0), lv(2, 95.0)], None, False)
    d = diagnose({"batching": b}, ceilings=None)
    assert not {i for i in ids(d) if i.startswith("decode-")}
    assert "decode-ceiling" in d.undecided_ids()


# -- long context ------------------------------------------------------------------------------------
def test_long_context_penalty_severity_and_model_comparison():
    big = diagnose({"context-fill": cf(40.0, True, pred=5.0, ratio=8.0)}, engine="llamacpp")
    f = big.get("long-context-decode-penalty")
    assert f is not None and f.severity == "problem" and "attention itself is slow" in f.cause
    assert any("-ctk q8_0" in a.change for a in f.advice)
    small = diagnose({"context-fill": cf(12.0, True, pred=10.0, ratio=1.2)})
    f2 = small.get("long-context-decode-penalty")
    assert f2 is not None and f2.severity == "info" and "attention itself" not in f2.cause
    assert "long-context-decode-penalty" not in ids(diagnose({"context-fill": cf(2.0, False)}))
    und = diagnose({"context-fill": cf(7.0, None)})
    assert not ids(und) and "long-context-decode-penalty" in und.undecided_ids()


# -- batching ---------------------------------------------------------------------------------------------
def test_batching_knee_no_gain_scales_and_tail():
    knee = diagnose({"batching": bt([lv(1, 50), lv(2, 95), lv(4, 180), lv(8, 190, itl99=0.08)], 4, True)},
                    engine="vllm")
    assert "batching-knee" in ids(knee) and "batching-no-gain" not in ids(knee)
    assert any("--max-num-seqs" in a.change for a in knee.get("batching-knee").advice)
    assert "batching-tail-latency" in ids(knee)  # p99 ITL 4×
    none = diagnose({"batching": bt([lv(1, 50), lv(2, 51), lv(4, 52)], 1, True)}, engine="ollama")
    assert "batching-no-gain" in ids(none) and "batching-knee" not in ids(none)
    assert any("OLLAMA_NUM_PARALLEL" in a.change for a in none.get("batching-no-gain").advice)
    up = diagnose({"batching": bt([lv(1, 50), lv(2, 98), lv(4, 190, itl99=0.025)], None, False)})
    assert ids(up) == {"batching-scales"}  # no knee, tail grew only 1.25×
    one = diagnose({"batching": bt([lv(1, 50)], None, None)})
    assert not ids(one) and "batching" in one.undecided_ids()


# -- prefill interference ---------------------------------------------------------------------------------
def pi(interference, chunked=None, spike=25.0):
    return InterferenceResult(info("prefill-interference"), n_streams=3, injected_prompt_tokens=2000,
                              injected_ttft_s=0.5, itl_baseline_s=0.02, itl_max_during_s=0.02 * spike,
                              spike_x=spike, stall_s=0.02 * spike - 0.02, spike_duration_s=0.5,
                              interference=interference, chunked_prefill_likely=chunked, reason="because",
                              # a tight baseline interval (issue 29): a clear case
                              itl_baseline_s_ci=[0.019, 0.021], itl_baseline_n=40,
                              spike_x_ci=[0.02 * spike / 0.021, 0.02 * spike / 0.019])


def test_interference_rule():
    d = diagnose({"prefill-interference": pi(True, chunked=False)}, engine="llamacpp")
    f = d.get("prefill-interference")
    assert f is not None and "not chunked" in f.cause
    assert any("-b 512" in a.change for a in f.advice)
    v = diagnose({"prefill-interference": pi(True, chunked=False)}, engine="vllm").get("prefill-interference")
    assert any("--max-num-batched-tokens" in a.change for a in v.advice)
    assert "prefill-interference" not in ids(diagnose({"prefill-interference": pi(False, spike=1.1)}))
    und = diagnose({"prefill-interference": pi(None, spike=2.0)})
    assert not ids(und) and "prefill-interference" in und.undecided_ids()


# -- queueing --------------------------------------------------------------------------------------------
def q(queueing, waiting_max=0.0, share=0.0, kv=None, qshare=None):
    n = 10
    samples = [QueueSample(i * 0.2, waiting_max if i < share * n else 0.0, 4.0, kv) for i in range(n)]
    return QueueResult(info("queue"), concurrency=8, metrics_available=True, metrics_source="vllm", samples=samples,
                       waiting_max=waiting_max, waiting_share=share, kv_usage_max=kv,
                       kv_pool_full=None if kv is None else kv >= 0.95, ttft_p99_s=2.0, ttft_queue_share=qshare,
                       queueing=queueing, reason="r")


def test_queue_rules():
    d = diagnose({"queue": q(True, waiting_max=5, share=0.8, kv=0.99)}, engine="vllm")
    f = d.get("ttft-queueing")
    assert f is not None and f.severity == "problem"
    assert "kv-pool-full" in ids(d)
    assert any("--gpu-memory-utilization" in a.change for a in d.get("kv-pool-full").advice)
    light = diagnose({"queue": q(True, waiting_max=1, share=0.2, kv=0.5)})
    assert light.get("ttft-queueing").severity == "info" and "kv-pool-full" not in ids(light)
    # a full pool without anyone waiting is not a finding
    assert "kv-pool-full" not in ids(diagnose({"queue": q(False, kv=0.99)}))
    assert not ids(diagnose({"queue": q(False)}))
    und = diagnose({"queue": q(None)})
    assert "ttft-queueing" in und.undecided_ids()


def test_queueing_from_batching_server_timings_when_no_queue_experiment():
    b = bt([lv(1, 50, ttft50=0.2, queue50=0.01), lv(4, 150, ttft50=2.0, queue50=1.5)], None, False)
    assert "ttft-queueing" in ids(diagnose({"batching": b}))
    b2 = bt([lv(1, 50, ttft50=0.2, queue50=0.01), lv(4, 150, ttft50=0.4, queue50=0.05)], None, False)
    assert "ttft-queueing" not in ids(diagnose({"batching": b2}))


# -- prompt cost / fixed overhead ----------------------------------------------------------------------------
def ps(a, b=1e-3, c=0.0, decode_flat=True, grows=True):
    pts = [ScalingPoint(n, 2, a + b * n + c * n * n, None, None, None, 50.0, None) for n in (32, 256, 2048)]
    return PromptScalingResult(info("prompt-scaling"), points=pts, fit=QuadraticFit(a, b, c, 0.99, 3),
                               fixed_overhead_s=a, prefill_tok_s=(2048 / (b * 2048 + c * 2048 ** 2)) if b or c else None,
                               quadratic_share=0.0, ttft_growth_x=pts[-1].ttft_s / pts[0].ttft_s, ttft_grows=grows,
                               decode_change_pct=-3.0, decode_flat=decode_flat)


def test_fixed_overhead_only_when_large_and_dominant():
    d = diagnose({"prompt-scaling": ps(a=0.4)})
    assert "ttft-fixed-overhead" in ids(d) and "prompt-cost" in ids(d)
    assert "ttft-fixed-overhead" not in ids(diagnose({"prompt-scaling": ps(a=0.01)}))
    flat = diagnose({"prompt-scaling": ps(a=0.3, b=0.0, grows=False)})
    assert "prompt-cost" not in ids(flat) and "prompt-cost" in flat.undecided_ids()
    # the server timed its prefill and it accounts for the TTFT: a slow engine, not an overhead
    inside = ps(a=0.4)
    inside.client_overhead_s = 0.004
    assert "ttft-fixed-overhead" not in ids(diagnose({"prompt-scaling": inside}))
    outside = ps(a=0.01)
    outside.client_overhead_s = 0.3
    assert "ttft-fixed-overhead" in ids(diagnose({"prompt-scaling": outside}))


def test_prompt_cost_states_the_decode_change_it_judges():
    # A 2-core CPU slows decode 12-28 % from 32 to 1024 prompt tokens (attention over the longer
    # context); the sentence must give that number and its cause, not a bare "also changes", and
    # never "hardly moves" beside a -19 % it prints.
    slow = ps(a=0.05)
    slow.decode_change_pct, slow.decode_flat = -28.0, False
    cause = diagnose({"prompt-scaling": slow}).get("prompt-cost").cause
    assert "also slows" in cause and "-28 %" in cause and "32 to 2048" in cause
    assert "context-fill" in cause and "×" in cause  # the cause, and TTFT's growth beside it
    flat = diagnose({"prompt-scaling": ps(a=0.05)}).get("prompt-cost").cause
    assert "hardly moves" in flat and "-3 %" in flat and "context-fill" not in flat
    within = ps(a=0.05)
    within.decode_change_pct = -19.0  # decode_flat (<= 25 %) yet not "hardly"
    cause = diagnose({"prompt-scaling": within}).get("prompt-cost").cause
    assert "hardly" not in cause and "also slows" in cause and "-19 %" in cause
    # decode got faster with a longer prompt: noise, no KV story told
    odd = ps(a=0.05)
    odd.decode_change_pct, odd.decode_flat = 30.0, False
    cause = diagnose({"prompt-scaling": odd}).get("prompt-cost").cause
    assert "+30 %" in cause and "context-fill" not in cause


def test_model_load_rule():
    r = RequestRecord(id="x", api="ollama", target="t", server={"load_s": 3.2})
    d = diagnose({}, engine="ollama", records=[r])
    f = d.get("model-load-on-request")
    assert f is not None and any("keep_alive" in a.change for a in f.advice)
    quick = RequestRecord(id="y", api="ollama", target="t", server={"load_s": 0.01})
    assert not ids(diagnose({}, engine="ollama", records=[quick]))


# -- the contract ------------------------------------------------------------------------------------------------
def test_no_finding_without_evidence():
    with pytest.raises(ValueError):
        Finding("x", "problem", "cause", [])
    with pytest.raises(ValueError):
        Finding("x", "urgent", "cause", [Evidence("a", 1, "s", "src")])


def test_every_finding_has_sourced_evidence_in_json():
    d = diagnose({"prefix-cache": pc(False, repeat=0.98), "context-fill": cf(40.0, True),
                  "prefill-interference": pi(True)}, engine="sglang")
    doc = d.to_dict()
    assert doc["findings"]
    for f in doc["findings"]:
        assert set(f) >= {"id", "cause", "evidence", "advice"}
        assert f["evidence"] and all(e["source"] for e in f["evidence"])
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=["problem", "limit", "info"].index)


def test_advice_maps_each_engine_to_its_knobs():
    assert any("--cache-reuse" in a.change for a in advice_for("prefix_cache", "llamacpp"))
    assert any("keep_alive" in a.change for a in advice_for("prefix_cache", "ollama"))
    assert any("radix" in a.change for a in advice_for("prefix_cache", "sglang"))
    assert any("--max-batch-prefill-tokens" in a.change for a in advice_for("interference", "tgi"))
    assert any("--parallel" in a.change for a in advice_for("queueing", "llamacpp"))
    assert len(advice_for("queueing", None)) == len(KNOBS["queueing"])  # unknown engine: everything
    for topic in KNOBS:
        assert not any(a.engine == "vllm" for a in advice_for(topic, "ollama"))


def test_decode_ceiling_prefers_the_typical_gap_over_a_disturbed_mean():
    p = ps(a=0.05)
    p.points[0].decode_step_s = 0.01  # 100 tok/s typical step
    # a mean dragged down by a few stalls (within 1.5×; beyond that the two disagree: "cannot tell",
    # test_i15_findings.test_decode_ceiling_is_cannot_tell_when_its_two_measurements_disagree)
    b = bt([lv(1, 75.0, decode=75.0), lv(2, 140.0)], None, False)
    d = diagnose({"prompt-scaling": p, "batching": b}, ceilings=Ceilings(110.0, "theory: test"))
    f = d.get("decode-at-ceiling")
    assert f is not None and f.evidence[0].value == pytest.approx(100.0)


def test_queue_sentence_uses_the_time_weighted_share():
    # issue 30 item 1: "waiting was 1 % of TTFT" beside "TTFT p99 at concurrency 6: 37.73 s"
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_explain_analysis import _issue30_queue

    from phasescope.experiments import queue

    r = queue.analyze(_issue30_queue())
    f = diagnose({"queue": r}).get("ttft-queueing")
    assert f is not None
    assert "waiting was 92% of TTFT" in f.cause, f.cause
    assert "1% of TTFT" not in f.cause
    ev = {e.what: e for e in f.evidence}
    assert ev["share of TTFT not spent in prefill (Σ waiting ÷ Σ TTFT)"].value == pytest.approx(92.3, abs=0.1)
    assert f.severity == "problem"  # most of the time users spent was waiting


def test_batching_queueing_is_judged_on_the_time_weighted_share():
    # one request of four waited 9.9 s for a slot, three waited 50 ms: the median request's share (12 %) says
    # "no queue", but 90 % of all TTFT at that level was waiting
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from explain_synth import rec

    from phasescope.experiments import batching

    recs = [rec("batching", "measure", ttft=0.2, server={"prefill_s": 0.19}, concurrency=1, worker=0, i=i)
            for i in range(2)]
    recs += [rec("batching", "measure", ttft=10.0, server={"prefill_s": 0.1}, concurrency=4, worker=0, i=0)]
    recs += [rec("batching", "measure", ttft=0.4, server={"prefill_s": 0.35}, concurrency=4, worker=w, i=0)
             for w in (1, 2, 3)]
    b = batching.analyze(recs)
    top = b.levels[-1]
    assert top.queue_share_total == pytest.approx((9.9 + 3 * 0.05) / (10.0 + 3 * 0.4), rel=1e-6)
    f = diagnose({"batching": b}).get("ttft-queueing")
    assert f is not None, "90 % of TTFT was waiting"
    assert any(e.what.startswith("share of TTFT not spent in prefill") and e.value == pytest.approx(89.7, abs=0.1)
               for e in f.evidence)
