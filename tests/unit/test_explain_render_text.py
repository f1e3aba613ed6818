"""explain's printed sentences: no doubled "cannot tell", no "+-" signs, one number for the conversation fit."""

from __future__ import annotations

import io

from rich.console import Console

from phasescope.experiments import render
from phasescope.experiments.conversation import growth_text


def _out(fn, *a) -> str:
    buf = io.StringIO()
    fn(*a, Console(file=buf, width=300))
    return buf.getvalue()


def test_undecided_line_says_cannot_tell_once() -> None:
    doc = {"findings": [], "undecided": [{"id": "ttft-queueing",
                                         "reason": "no /metrics queue gauge and no server-timed prefill: cannot tell"}]}
    out = _out(render.render_findings, doc)
    assert out.count("cannot tell") == 1, out
    assert "ttft-queueing: no /metrics queue gauge and no server-timed prefill" in out, out


def test_context_fill_fit_has_one_sign() -> None:
    e = {"points": [], "slowdown_pct": 0.0, "noise_pct": 16.0, "slows": None, "reason": "",
         "per_token_s_per_ctx_token": -2.9e-9}
    cap = str(render._cf(e).caption)
    assert "+-" not in cap and "-0.0029 µs" in cap, cap
    e["per_token_s_per_ctx_token"] = 2.9e-9
    assert "+0.0029 µs" in str(render._cf(e).caption)


def test_conversation_growth_text_matches_the_fit_sign() -> None:
    # the evidence says "-38%"; the sentence said "TTFT grew 0% as fast": one number, and no growth claimed
    t = growth_text(-0.38)
    assert "-38%" in t and "did not grow" in t, t
    assert growth_text(0.04) == "TTFT grew 4% as fast as a full prefill of the history"


def test_prompt_cost_headline_does_not_state_a_rate_from_a_poor_fit() -> None:
    # embedded engine on a loaded box: R² 0.63 over 32…99 tokens; "Every 1000 prompt tokens add about 23.87 s"
    # stated as fact (beside evidence saying the fit is noise)
    from phasescope.diagnose import diagnose
    from phasescope.experiments.common import ExperimentInfo
    from phasescope.experiments.prompt_scaling import PromptScalingResult, QuadraticFit, ScalingPoint

    def finding(r2: float):
        pts = [ScalingPoint(n, 1, t, t, None, None, 25.0, None) for n, t in ((32, 0.187), (56, 1.78), (99, 3.11))]
        ps = PromptScalingResult(ExperimentInfo(name="prompt-scaling"), points=pts,
                                 fit=QuadraticFit(0.0, 0.0, 2.41e-4, r2, 3), fixed_overhead_s=0.0, prefill_tok_s=41.9,
                                 quadratic_share=1.0, ttft_growth_x=16.6, ttft_grows=True)
        return diagnose({"prompt-scaling": ps}).get("prompt-cost")

    noisy = finding(0.63)
    assert noisy is not None and "Every 1000 prompt tokens" not in noisy.cause, noisy.cause
    assert "R² 0.63" in noisy.cause and "0.187" in noisy.cause and "3.11" in noisy.cause, noisy.cause
    assert "Every 1000 prompt tokens add about" in finding(0.99).cause


def test_counts_in_evidence_print_as_counts() -> None:
    # "requests waiting (max): 2.00", "tokens each stream received …: 21.00 tokens" — counts have no decimals
    from phasescope.diagnose import Evidence

    assert Evidence("requests waiting (max)", 2.0, "", "m").text() == "requests waiting (max): 2 (m)"
    assert Evidence("tokens per stream", 21.0, "tokens", "m").text() == "tokens per stream: 21 tokens (m)"
    assert Evidence("mean waiting", 1.25, "", "m").text() == "mean waiting: 1.25 (m)"  # a mean keeps its decimals
    assert Evidence("TTFT", 2.0, "s", "m").text() == "TTFT: 2.00 s (m)"  # a time keeps its precision


def test_budget_skip_reason_never_says_negative_seconds_left() -> None:
    # README showed "budget exhausted (-15 s left)"
    from phasescope.experiments.suite import budget_skip_reason

    assert "-" not in budget_skip_reason(-15.2) and "15 s over" in budget_skip_reason(-15.2)
    assert budget_skip_reason(4.0).startswith("budget exhausted (4 s left")


def test_budget_skip_reason_does_not_call_5_s_under_2_s() -> None:
    # the held-out matrix printed "budget exhausted (5 s left, under the 2 s an experiment needs)": the 5 s
    # were split among the experiments still to run, and this one's share was under 2 s
    from phasescope.experiments.suite import budget_skip_reason

    why = budget_skip_reason(5.2, 1.3)
    assert "5 s left" in why and "share, 1.30 s, is under the 2 s" in why, why
    assert budget_skip_reason(1.5, 1.5) == "budget exhausted (1.5 s left, under the 2 s an experiment needs)"


def test_interference_table_says_when_the_client_itself_stalled() -> None:
    e = {"n_streams": 3, "itl_baseline_s": 0.02, "itl_max_during_s": 0.021, "spike_x": 1.05, "reason": "r"}
    quiet = _out(render.render_experiments, {"prefill-interference": {**e, "client_stall_s": 0.0}})
    assert "own stalls" not in quiet
    out = _out(render.render_experiments, {"prefill-interference": {**e, "client_stall_s": 0.08, "client_stall_max_s": 0.07}})
    assert "this client's own stalls ms (longest)" in out and "80 (70)" in out, out
