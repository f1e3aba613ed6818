"""Issue #15: findings are generated from the data (levels actually run, bounds actually known,
effects the experiment caused itself), and advice is set against the server's current settings.

Each test here failed on the code before #15 (template sentences, fixed advice)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from rich.console import Console

from phasescope.diagnose import diagnose
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.context_fill import ContextFillResult, ContextPoint
from phasescope.experiments.queue import QueueResult, QueueSample
from phasescope.experiments.render import render_experiments
from phasescope.jsonutil import to_jsonable

from explain_synth import bt, lv

sys.path.insert(0, str(Path(__file__).parent))


# -- wording follows what was tested -----------------------------------------------------------------
def test_batching_scales_does_not_claim_a_knee_beyond_a_bound_it_never_reached():
    # only levels 1 and 2 ran (budget), the server has 4 slots
    d = diagnose({"batching": bt([lv(1, 40), lv(2, 78)], 4, "llama.cpp /props total_slots")})
    f = d.get("batching-scales")
    assert f is not None
    assert "further out than" not in f.cause
    assert "were not run" in f.cause and "4" in f.cause


def test_batching_bound_default_is_said_in_words_not_nested_parentheses():
    from phasescope.experiments import batching

    levels = [lv(c, 40 * c) for c in batching.levels_for(16)]
    d = diagnose({"batching": bt(levels, 16, "default (the server does not report its slots)")})
    cause = d.get("batching-scales").cause
    assert "(default (" not in cause
    assert "does not report" in cause and "above 16" in cause


def test_batching_at_the_servers_own_slots_says_more_slots_would_help():
    d = diagnose({"batching": bt([lv(1, 40), lv(2, 78), lv(4, 150)], 4, "llama.cpp /props total_slots")})
    assert "more slots" in d.get("batching-scales").cause


def q(concurrency, slots, queue_share, waiting_share, running=None):
    samples = [QueueSample(i * 0.2, 3.0 if i < waiting_share * 10 else 0.0, running, None) for i in range(10)]
    return QueueResult(ExperimentInfo(name="queue"), concurrency=concurrency, metrics_available=True,
                       metrics_source="llamacpp", samples=samples, waiting_max=3.0, waiting_share=waiting_share,
                       running_max=running, ttft_p99_s=0.5, ttft_queue_share=queue_share,
                       ttft_queue_share_total=queue_share, queueing=True,
                       reason="waiting > 0", slots=slots, slots_source="llama.cpp /props total_slots" if slots else None)


def test_a_queue_the_experiment_made_itself_is_information_not_a_problem():
    # 2 × slots requests on purpose; 2 % of TTFT was waiting
    d = diagnose({"queue": q(8, 4, 0.02, 0.8)}, engine="llamacpp")
    f = d.get("ttft-queueing")
    assert f is not None and f.severity == "info"
    assert "on purpose" in f.cause and "2%" in f.cause
    assert not f.advice  # nothing to change for an effect the experiment caused


def test_queueing_headline_agrees_with_its_evidence():
    d = diagnose({"queue": q(8, 4, 0.02, 0.8)}, engine="llamacpp")
    f = d.get("ttft-queueing")
    share = next(e for e in f.evidence if e.what.startswith("share of TTFT not spent in prefill"))
    assert f"{share.value:.0f}%" in f.cause


def test_few_slots_that_cap_a_still_growing_batch_are_a_problem():
    levels = [lv(1, 40), lv(2, 80), lv(4, 81), lv(8, 80), lv(16, 81)]
    b = bt(levels, 16, "phasescope's cap: the server does not report how many requests it runs at once",
           knee=2, reached=True)
    d = diagnose({"queue": q(16, None, None, 0.9, running=2.0), "batching": b}, engine="vllm")
    f = d.get("ttft-queueing")
    assert f.severity == "problem" and "at most 2" in f.cause


def cf_pts(rates, spread=0.01):
    pts = [ContextPoint(80 * 3 ** i, 64 * 3 ** i, 2, r, None, 1 / r, spread=spread) for i, r in enumerate(rates)]
    return pts


def test_context_fill_never_prints_a_rate_falling_more_than_100_percent():
    from phasescope.experiments.context_fill import analyze  # noqa: F401 - the fields below are its output

    res = ContextFillResult(ExperimentInfo(name="context-fill"), points=cf_pts([15.1, 4.3, 10.2, 14.2, 73.1]),
                            slowdown_pct=100 * (15.1 - 73.1) / 15.1, slows=None)
    buf = io.StringIO()
    render_experiments({"context-fill": to_jsonable(res)}, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "-384" not in text and "−384" not in text
    assert "4.84× as fast" in text
    d = diagnose({"context-fill": res})
    why = next(u.reason for u in d.undecided if u.id == "long-context-decode-penalty")
    assert "4.84× as fast" in why and "-384" not in why and "384%" not in why




def test_decode_ceiling_is_cannot_tell_when_its_two_measurements_disagree():
    # #14: explain said "65 % of the ceiling" while its own batching table had single-stream decode at 15 tok/s
    from phasescope.diagnose import Ceilings
    from phasescope.experiments.prompt_scaling import PromptScalingResult, ScalingPoint

    ps = PromptScalingResult(ExperimentInfo(name="prompt-scaling"),
                             points=[ScalingPoint(32, 1, 0.1, 0.1, None, None, 40.0, None, decode_step_s=1 / 89.0)])
    b = bt([lv(1, 15.0), lv(2, 29.0)], 4, "slots")
    b.levels[0].per_user_decode_tok_s = 15.0
    d = diagnose({"prompt-scaling": ps, "batching": b}, ceilings=Ceilings(137.0, "theory"))
    assert not [i for i in d.ids() if i.startswith("decode-")]
    why = next(u.reason for u in d.undecided if u.id == "decode-ceiling")
    assert "89.0" in why and "15.0" in why


def test_waiting_for_the_next_scheduler_step_is_not_a_queue():
    from phasescope.experiments.queue import analyze
    from explain_synth import rec

    recs = [rec("queue", "measure", ttft=0.05, concurrency=16) for _ in range(16)]
    # a sample caught arrivals before the scheduler's next step; all 16 ran at once a moment later
    samples = [QueueSample(0.0, 16.0, 0.0, 0.1), QueueSample(0.2, 0.0, 16.0, 0.2), QueueSample(0.4, 0.0, 16.0, 0.2)]
    r = analyze(recs, samples)
    assert r.queueing is False and "ran at once" in r.reason
    queued = [QueueSample(0.0, 14.0, 2.0, 0.1), QueueSample(0.2, 12.0, 2.0, 0.2), QueueSample(0.4, 10.0, 2.0, 0.2)]
    assert analyze(recs, queued).queueing is True


def test_prompt_cost_does_not_split_a_fit_that_explains_little():
    # the embedded engine on a loaded box: R² 0.30, "quadratic (attention) share 100 %" was noise
    from phasescope.experiments.prompt_scaling import PromptScalingResult, QuadraticFit, ScalingPoint

    pts = [ScalingPoint(n, 1, t, t, None, None, 3.0, None) for n, t in ((32, 2.1), (50, 1.0), (104, 6.7))]
    ps = PromptScalingResult(ExperimentInfo(name="prompt-scaling"), points=pts, fit=QuadraticFit(0.0, 0.0, 6e-4, 0.30, 3),
                             fixed_overhead_s=0.0, prefill_tok_s=25.0, quadratic_share=1.0, ttft_growth_x=3.2,
                             ttft_grows=True)
    f = diagnose({"prompt-scaling": ps}).get("prompt-cost")
    assert not any(e.what.startswith("quadratic") for e in f.evidence)
    assert any("R² 0.30" in str(e.value) for e in f.evidence)


def test_tail_latency_advice_does_not_name_a_knee_that_was_not_found():
    b = bt([lv(1, 36, itl99=0.054), lv(2, 71, itl99=0.058), lv(4, 120, itl99=0.15), lv(8, 191, itl99=0.22)], 16,
           "phasescope's cap: the server does not report how many requests it runs at once")
    f = diagnose({"batching": b}, engine="vllm").get("batching-tail-latency")
    assert f is not None and f.advice
    assert not any("knee" in a.change for a in f.advice)
    assert "no knee" in f.advice[0].why


def test_one_gap_holding_most_of_the_prefill_is_a_stall_even_with_tokens_at_the_edges():
    # the embedded engine on a loaded box: a 3.7 s gap covered 79 % of a 4.7 s prefill, while the
    # prefill window (TTFT − overhead) also caught 3 tokens per stream before the prefill began
    from explain_synth import rec

    from phasescope.experiments import prefill_interference as pi_mod

    base = 0.32
    streams = []
    for i in range(3):
        gaps = [base] * 20 + [0.2, 0.2, 0.2, 3.7] + [base] * 10  # the injected request arrives at t≈6.7 s
        streams.append(rec(pi_mod.NAME, "stream", ttft=0.3, t0=0.0, gaps=gaps, stream=i))
    t_inj0 = 0.3 + 20 * base + 0.05  # sent after the streams' 21st token
    t_first = 0.3 + 20 * base + 0.6 + 3.7 + 0.01
    inj = rec(pi_mod.NAME, "inject", ttft=t_first - t_inj0, t0=t_inj0, n_out=4, prompt=297)
    r = pi_mod.analyze(streams + [inj], overhead_s=0.1)
    assert r.tokens_during_prefill >= 3
    assert r.interference is True and r.chunked_prefill_likely is False, r.reason


def test_throughput_that_halves_with_a_second_stream_is_noise_not_no_gain():
    # the embedded engine on a loaded box: 17.0 tok/s at 1 stream, 8.9 at 2 → was "batching-no-gain"
    b = bt([lv(1, 17.0), lv(2, 8.9)], 4, "llama.cpp /props total_slots", knee=1, reached=True)
    d = diagnose({"batching": b}, engine="llamacpp")
    assert "batching-no-gain" not in d.ids()
    assert "fell from 17.0" in next(u.reason for u in d.undecided if u.id == "batching")
    flat = bt([lv(1, 17.0), lv(2, 16.5), lv(4, 17.2)], 4, "llama.cpp /props total_slots", knee=1, reached=True)
    assert "batching-no-gain" in diagnose({"batching": flat}).ids()
