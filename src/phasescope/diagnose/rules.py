"""Diagnosis rules: experiment results (+ ceilings) → findings with evidence, or "cannot tell".

Each rule reads only the typed results of :mod:`phasescope.experiments`, never raw servers, and
returns findings whose every claim is an :class:`Evidence` number with its source. Thresholds are
module constants, named and documented, so a test can sit on either side of each.

One job: the rule table that turns the experiments' results into one diagnosis; the rules with more than a
few lines of their own (batching, queue, conversation, speculation, spans) live beside it in their modules,
and what stays here is the short rules and the table that orders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from phasescope.diagnose.claims import (CANNOT_TELL, overlap_reason, rate_fmt, s_fmt, step_rate, stored,
                                        unstable)
from phasescope.diagnose.batching_rules import batching_gate, level_interval
from phasescope.diagnose.conversation_rules import rule_conversation
from phasescope.diagnose.queue_rules import rule_queue
from phasescope.diagnose.spec_rules import rule_speculation, rule_speculation_batch
from phasescope.diagnose.span_rules import attribution, prefill_disagreement, span_evidence
from phasescope.diagnose.findings import Advice, Diagnosis, Evidence, Finding, Rule, Undecided
from phasescope.diagnose.knobs import advice_for, tailored
from phasescope.diagnose.tradeoffs import prefill_cost, reconcile
from phasescope.diagnose.thresholds import (  # noqa: F401  (each rule's threshold, one place)
    CEILING_AT,
    CEILING_FAR_BELOW,
    CONVERSATION_DECODE_MIN_PCT,
    DECODE_SOURCES_AGREE_X,
    FIT_R2_FOR_SHAPE,
    KNEE_GAIN,
    LONG_CONTEXT_PROBLEM_PCT,
    LONG_CONTEXT_WORSE_THAN_MODEL_X,
    MODEL_LOAD_MIN_S,
    NO_GAIN_FLOOR_X,
    OVERHEAD_MIN_S,
    OVERHEAD_MIN_SHARE,
    QUEUE_DOMINATES,
    SPIKE_MIN_X,
    TAIL_GROWTH_X,
)


@dataclass
class Ceilings:
    """The physical decode ceiling for this model on this device (``phasescope.theory``)."""

    decode_ceiling_tok_s: float
    source: str
    bandwidth_gb_s: float | None = None
    weight_bytes: float | None = None
    device: str | None = None
    #: the device's peak for the model's math path and the model's FLOPs per decoded token (the compute roof;
    #: rule ``speculation`` weighs a verify pass against it), KV bytes one sequence reads per step
    peak_flops: float | None = None
    flops_per_token: float | None = None
    kv_bytes_per_seq: float | None = None
    #: the draft model's weight bytes, FLOPs per drafted token and KV bytes per sequence (``--draft-model-spec``,
    #: the embedded engine's ``-md``); None: no draft model known (n-gram speculation has none: cost 0)
    draft_weight_bytes: float | None = None
    draft_flops_per_token: float | None = None
    draft_kv_bytes_per_seq: float | None = None
    draft_source: str | None = None


def _ms(x: float) -> float:
    return x * 1e3


def rule_prefix_cache(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    pc = r.get("prefix-cache")
    if pc is None:
        return
    src = f"prefix-cache: client TTFT, {pc.n_cold} cold / {pc.n_repeat} repeat requests"
    if pc.cache_detected is None:
        diag.undecided.append(Undecided("prefix-cache", pc.reason or "prefix caching could not be decided"))
        return
    ev = [
        Evidence(f"TTFT with a new {pc.system_prompt_tokens}-token system prompt", pc.ttft_first_s, "s", src),
        Evidence("TTFT when the system prompt repeats", pc.ttft_repeat_s, "s", src),
        Evidence("TTFT of the user turn alone", pc.ttft_short_s, "s", "prefix-cache: client TTFT, user turn only"),
    ]
    sv = pc.server
    if sv.says_cached is not None:
        ev.append(Evidence("server reports the prefix cached", sv.says_cached, "", sv.source or "server"))
    if sv.cached_tokens_repeat is not None:
        ev.append(Evidence("cached prompt tokens per repeat (median)", sv.cached_tokens_repeat, "tokens",
                           "server responses (usage.cached_tokens / timings.cache_n)"))
    if sv.hit_rate is not None:
        ev.append(Evidence("prefix-cache hit rate", 100 * sv.hit_rate, "%", "/metrics Δhits/Δqueries"))
    if pc.cache_detected is False:
        diag.findings.append(Finding(
            "prefix-cache-absent", "problem",
            f"The shared system prompt is prefilled again on every request: repeats saved "
            f"{max(pc.saved_s or 0, 0) * 1e3:.0f} ms of the {pc.expected_saving_s * 1e3:.0f} ms it costs.",
            ev, tailored("prefix_cache", diag.engine, diag.settings)))
    else:
        diag.findings.append(Finding(
            "prefix-cache-working", "info",
            f"A repeated system prompt is served from the prefix cache: TTFT drops "
            f"{(pc.saved_fraction or 0):.0%} ({pc.ttft_first_s * 1e3:.0f} → {pc.ttft_repeat_s * 1e3:.0f} ms).",
            ev))


#: a decode change smaller than this (either way) between the shortest and longest prompt "hardly moves"
DECODE_HARDLY_PCT = 10.0


def _decode_with_the_prompt(ps: Any, pts: Any) -> str:
    """The decode half of the prompt-cost sentence, with the change it states and, for a slowdown,
    its cause: each step attends over the longer context, so a small CPU (compute-bound decode)
    slows by tens of percent where a GPU hardly moves. ``decode_flat`` (≤ 25 %) is the JSON's
    verdict; the words need the smaller bound, or "hardly moves" would print beside −20 %."""
    chg = ps.decode_change_pct
    if chg is None:
        return "decode speed was not measured (too few output tokens)."
    span = f"{chg:+.0f} % from {pts[0].prompt_tokens} to {pts[-1].prompt_tokens} prompt tokens"
    if abs(chg) < DECODE_HARDLY_PCT:
        return f"decode speed hardly moves with the prompt ({span})."
    if getattr(ps, "decode_change_verdict", None) == CANNOT_TELL:  # a change the intervals do not support
        a, b = step_rate(pts[0]), step_rate(pts[-1])
        return overlap_reason("decode moves with the prompt", f"decode at {pts[0].prompt_tokens} tokens", a,
                              f"decode at {pts[-1].prompt_tokens} tokens", b, rate_fmt) + f" ({span})."
    if chg < 0:
        growth = f", against TTFT ×{ps.ttft_growth_x:.1f}" if ps.ttft_growth_x else ""
        return (f"decode also slows with the prompt ({span}{growth}): every step attends over the longer "
                f"context, which context-fill measures.")
    return (f"decode speed came out {span}: faster with a longer prompt is the machine's noise, "
            f"not physics.")


def rule_prompt_cost(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    ps = r.get("prompt-scaling")
    if ps is None:
        return
    if ps.fit is None or ps.ttft_grows is None:
        diag.undecided.append(Undecided("prompt-cost", "; ".join(ps.notes) or "too few prompt lengths"))
        return
    src = f"prompt-scaling: fit of median TTFT over {ps.fit.n_points} prompt lengths (R² {ps.fit.r2:.2f})"
    pts = [p for p in ps.points if p.ttft_s is not None]
    pa = attribution(diag, "prompt-scaling")  # where its TTFT went by the server's own spans (explain --otlp-listen)
    why_not = prefill_disagreement(f"prefill at {ps.prefill_tok_s:.0f} tok/s" if ps.prefill_tok_s else "TTFT grew", pa)
    if ps.ttft_grows and why_not is not None:
        diag.undecided.append(Undecided("prompt-cost", why_not))
    elif not ps.ttft_grows:
        diag.undecided.append(Undecided(
            "prompt-cost", f"TTFT did not grow with the prompt ({ps.ttft_growth_x:.2f}× from {pts[0].prompt_tokens} "
                           f"to {pts[-1].prompt_tokens} tokens): a cache may have answered, or prefill is hidden by overhead"))
    elif ps.prefill_tok_s:
        ev = [
            Evidence(f"TTFT at {pts[0].prompt_tokens} prompt tokens", pts[0].ttft_s, "s", "prompt-scaling: median client TTFT"),
            Evidence(f"TTFT at {pts[-1].prompt_tokens} prompt tokens", pts[-1].ttft_s, "s", "prompt-scaling: median client TTFT"),
            Evidence("prefill rate at the longest prompt", ps.prefill_tok_s, "tok/s", src),
        ]
        # the split into linear and quadratic terms needs a fit that explains the points
        if ps.fit.r2 >= FIT_R2_FOR_SHAPE:
            ev.append(Evidence("quadratic (attention) share of that prefill", 100 * (ps.quadratic_share or 0), "%", src))
        else:
            ev.append(Evidence("linear vs quadratic split", f"not stated: the fit explains only R² {ps.fit.r2:.2f} of the "
                               f"points (noise)", "", src))
        if ps.decode_change_pct is not None:
            ev.append(Evidence("decode speed change over the same range", ps.decode_change_pct, "%",
                               f"prompt-scaling: decode from {ps.decode_source or 'client'} timing, best repetition"))
        per_k = 1000.0 / ps.prefill_tok_s
        decode = _decode_with_the_prompt(ps, pts)
        if ps.fit.r2 >= FIT_R2_FOR_SHAPE:
            cause = (f"Every 1000 prompt tokens add about {per_k:.2f} s to TTFT (prefill at {ps.prefill_tok_s:.0f} tok/s); "
                     + decode)
        else:  # a rate from a fit that explains little is noise stated as fact: give the points instead
            cause = (f"TTFT grew with the prompt ({pts[0].ttft_s:.3g} s at {pts[0].prompt_tokens} → {pts[-1].ttft_s:.3g} s "
                     f"at {pts[-1].prompt_tokens} tokens), but the fit explains only R² {ps.fit.r2:.2f} of the points: "
                     f"its rate ({ps.prefill_tok_s:.0f} tok/s) is rough (a busy machine?); {decode}")
        diag.findings.append(Finding(
            "prompt-cost", "info", cause,
            ev + span_evidence(pa, "prompt-scaling"), tailored("prefill_slow", diag.engine, diag.settings)))
    # When the server times its own prefill, the overhead is what lies outside it (measured per
    # request); otherwise the fit's intercept a.
    a_iv = None
    if ps.client_overhead_s is not None:
        a, a_ev = ps.client_overhead_s, Evidence("TTFT − server-timed prefill (median)", ps.client_overhead_s, "s",
                                                 "prompt-scaling: client TTFT − server prompt time")
        a_iv = stored(ps.client_overhead_s, getattr(ps, "client_overhead_s_ci", None),
                      getattr(ps, "client_overhead_n", 0), getattr(ps, "client_overhead_range", None))
    else:
        a, a_ev = ps.fixed_overhead_s or 0.0, Evidence("fixed TTFT overhead a", ps.fixed_overhead_s, "s", src)
    big = pts and pts[0].ttft_s and a >= OVERHEAD_MIN_S and a / pts[0].ttft_s >= OVERHEAD_MIN_SHARE
    if big and a_iv is not None and (unstable(a_iv) or a_iv.low < OVERHEAD_MIN_S):
        # the cause is claimed only when the whole interval lies above the threshold, on stable repeats
        diag.undecided.append(Undecided(
            "ttft-fixed-overhead", f"cannot tell whether {a * 1e3:.0f} ms of every TTFT lies outside prefill: "
                                   f"TTFT − server prefill read {a_iv.fmt(s_fmt, unit_of_n='requests', rel=0)}"
                                   + (" (unstable: the requests disagree)" if unstable(a_iv) else
                                      f", an interval reaching below {OVERHEAD_MIN_S * 1e3:.0f} ms")))
    elif big:
        diag.findings.append(Finding(
            "ttft-fixed-overhead", "problem",
            f"{a * 1e3:.0f} ms of every TTFT does not depend on the prompt: it is spent outside prefill.",
            [a_ev, Evidence(f"TTFT at {pts[0].prompt_tokens} prompt tokens", pts[0].ttft_s, "s", "prompt-scaling: median client TTFT")]
            + span_evidence(pa, "prompt-scaling"),  # the spans split "outside prefill" into queue and network
            advice_for("fixed_overhead", diag.engine)))


def _single_stream_decode(r: dict[str, Any]) -> tuple[float | None, str]:
    ps = r.get("prompt-scaling")
    p0 = ps.points[0] if ps is not None and ps.points else None
    if p0 is not None and getattr(p0, "decode_step_s", None):
        return 1.0 / p0.decode_step_s, (f"prompt-scaling: {p0.prompt_tokens}-token prompt, 1 / typical token gap "
                                         f"(median within a request, best of {p0.n})")
    b = r.get("batching")
    if b is not None:
        for lv in b.levels:
            if lv.concurrency == 1 and lv.per_user_decode_tok_s:
                return lv.per_user_decode_tok_s, "batching: concurrency 1, median client decode tok/s"
    ps = r.get("prompt-scaling")
    if ps is not None and ps.points and ps.points[0].decode_tok_s:
        return ps.points[0].decode_tok_s, f"prompt-scaling: {ps.points[0].prompt_tokens}-token prompt, median client decode tok/s"
    return None, ""


def rule_decode_ceiling(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    d, src = _single_stream_decode(r)
    if d is None:
        if r.get("prompt-scaling") is not None or r.get("batching") is not None:
            diag.undecided.append(Undecided("decode-ceiling", "no single-stream decode speed was measured"))
        return
    # the same quantity measured twice: when the two disagree, the machine's noise beats the effect
    b = r.get("batching")
    c1 = next((lv for lv in (b.levels if b is not None else []) if lv.concurrency == 1 and lv.per_user_decode_tok_s), None)
    if c1 is not None and src.startswith("prompt-scaling") and not (
            1 / DECODE_SOURCES_AGREE_X <= c1.per_user_decode_tok_s / d <= DECODE_SOURCES_AGREE_X):
        diag.undecided.append(Undecided(
            "decode-ceiling", f"single-stream decode read {d:.1f} tok/s in prompt-scaling (typical token gap) but "
                              f"{c1.per_user_decode_tok_s:.1f} tok/s in batching at concurrency 1: the two disagree by more "
                              f"than {DECODE_SOURCES_AGREE_X:g}×, so the machine's noise is larger than the question "
                              f"(other work on the host?)"))
        return
    if ceil is None or not ceil.decode_ceiling_tok_s:
        diag.undecided.append(Undecided(
            "decode-ceiling", "the bandwidth ceiling is unknown: pass --model-spec and --device (or run `phasescope hw` "
                              "for the embedded engine) so the decode speed can be set against it"))
        return
    share = d / ceil.decode_ceiling_tok_s
    ps = r.get("prompt-scaling")
    d_iv = step_rate(ps.points[0]) if ps is not None and ps.points and src.startswith("prompt-scaling") else None

    def band(x: float) -> str:
        return "at" if x >= CEILING_AT else ("far below" if x < CEILING_FAR_BELOW else "near")

    if d_iv is not None and (unstable(d_iv) or band(d_iv.low / ceil.decode_ceiling_tok_s) !=
                             band(d_iv.high / ceil.decode_ceiling_tok_s)):
        diag.undecided.append(Undecided(
            "decode-ceiling", f"cannot tell whether decode is at, near or far below the memory-bandwidth ceiling: "
                              f"single-stream decode {d_iv.value:.1f} tok/s has an interval of {d_iv.low:.1f}–"
                              f"{d_iv.high:.1f} tok/s ({d_iv.n} token gaps), {d_iv.low / ceil.decode_ceiling_tok_s:.0%}–"
                              f"{d_iv.high / ceil.decode_ceiling_tok_s:.0%} of the {ceil.decode_ceiling_tok_s:.0f} tok/s "
                              f"ceiling, across the {CEILING_FAR_BELOW:.0%} / {CEILING_AT:.0%} lines"))
        return
    ev = [Evidence("single-stream decode", d, "tok/s", src),
          Evidence("bandwidth ceiling (bandwidth ÷ bytes per token)", ceil.decode_ceiling_tok_s, "tok/s", ceil.source),
          Evidence("share of the ceiling", 100 * share, "%", "measured ÷ ceiling")]
    if share >= CEILING_AT:
        diag.findings.append(Finding(
            "decode-at-ceiling", "limit",
            f"Decode runs at {share:.0%} of the memory-bandwidth ceiling: only fewer bytes per token "
            f"(quantization, a smaller model) or faster memory will make a single stream faster.",
            ev, tailored("decode_at_ceiling", diag.engine, diag.settings)))
    elif share < CEILING_FAR_BELOW:
        diag.findings.append(Finding(
            "decode-below-ceiling", "problem",
            f"Decode reaches only {share:.0%} of the memory-bandwidth ceiling: the serving stack, not the "
            f"hardware, sets the speed.",
            ev, tailored("decode_below_ceiling", diag.engine, diag.settings)))
    else:
        diag.findings.append(Finding(
            "decode-near-ceiling", "info",
            f"Decode runs at {share:.0%} of the memory-bandwidth ceiling, typical for a tuned stack; "
            f"quantization is the main lever left.", ev, tailored("decode_at_ceiling", diag.engine, diag.settings)))


def rule_long_context(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    cf = r.get("context-fill")
    if cf is None:
        return
    if cf.slows is None:
        if getattr(cf, "reason", ""):
            why = cf.reason
        elif cf.slowdown_pct is None:
            why = "; ".join(cf.notes) or "no decode speed at two context lengths"
        elif cf.slowdown_pct < 0:
            why = (f"decode was {1 - cf.slowdown_pct / 100:.2f}× as fast at the longest context as at the shortest: "
                   f"the measurement is noisier than the effect (a busy machine?)")
        else:
            why = f"decode slowed {cf.slowdown_pct:.1f}% over the context range: between noise and a clear slowdown"
        diag.undecided.append(Undecided("long-context-decode-penalty", why))
        return
    if not cf.slows:
        return
    p0, p1 = cf.points[0], cf.points[-1]
    src = (f"context-fill: 1 / typical token gap, best of {p0.n} repetitions, {len(cf.points)} context lengths"
           f" (the table's decode tok/s)")

    def _sp(p: Any) -> str:
        sp = getattr(p, "spread", None)
        return f" ±{100 * sp:.0f}%" if sp else ""

    ev = [Evidence(f"decode at {p0.context_tokens} tokens of context{_sp(p0)}", p0.decode_tok_s, "tok/s", src),
          Evidence(f"decode at {p1.context_tokens} tokens of context{_sp(p1)}", p1.decode_tok_s, "tok/s", src),
          Evidence("slowdown", cf.slowdown_pct, "%", src)]
    if getattr(cf, "noise_pct", None) is not None:
        ev.append(Evidence("spread of those two points (repetitions)", cf.noise_pct, "%", src))
    if cf.per_token_s_per_ctx_token is not None:
        ev.append(Evidence("added time per output token per 1000 context tokens", cf.per_token_s_per_ctx_token * 1000,
                           "s", "context-fill: linear fit of 1/decode"))
    cause = (f"Decode slows {cf.slowdown_pct:.0f}% as the context grows from {p0.context_tokens} to "
             f"{p1.context_tokens} tokens: every step reads the whole KV cache.")
    if cf.prediction is not None and cf.prediction.slowdown_pct is not None:
        ev.append(Evidence("slowdown the bandwidth model predicts (weights + KV bytes)", cf.prediction.slowdown_pct, "%",
                           cf.prediction.source))
        if cf.measured_over_predicted is not None and cf.measured_over_predicted >= LONG_CONTEXT_WORSE_THAN_MODEL_X:
            cause += (f" That is {cf.measured_over_predicted:.1f}× what the extra KV bytes explain, so attention "
                      f"itself is slow (flash attention, KV layout).")
    sev = "problem" if (cf.slowdown_pct or 0) >= LONG_CONTEXT_PROBLEM_PCT else "info"
    diag.findings.append(Finding("long-context-decode-penalty", sev, cause, ev, advice_for("long_context", diag.engine)))


def rule_batching(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    b = r.get("batching")
    if b is None:
        return
    lv = [x for x in b.levels if x.output_tok_s]
    if b.knee_reached is None or len(lv) < 2:
        diag.undecided.append(Undecided("batching", "fewer than two concurrency levels completed"))
        return
    src = "batching: aggregate output tok/s per concurrency level"
    by_c = {x.concurrency: x for x in lv}
    first, last = lv[0], lv[-1]
    ev = []
    for x in lv:
        iv = level_interval(x)
        spread = f" ({iv.low:.1f}–{iv.high:.1f}, {iv.n} requests)" if iv is not None and iv.n >= 2 else ""
        ev.append(Evidence(f"output tok/s at concurrency {x.concurrency}{spread}", x.output_tok_s, "tok/s", src))
    if first.itl_p99_s and last.itl_p99_s:
        ev.append(Evidence(f"p99 ITL at concurrency {first.concurrency} → {last.concurrency}",
                           f"{_ms(first.itl_p99_s):.0f} → {_ms(last.itl_p99_s):.0f}", "ms", "batching: per-token ITL over all streams"))
    if b.knee_reached and b.knee_concurrency == first.concurrency and \
            max(x.output_tok_s or 0 for x in lv[1:]) < (first.output_tok_s or 0) / NO_GAIN_FLOOR_X:
        # batching can fail to help, but more streams do not halve what one stream gets done
        best = max(lv[1:], key=lambda x: x.output_tok_s or 0)
        diag.undecided.append(Undecided(
            "batching", f"aggregate throughput fell from {first.output_tok_s:.1f} tok/s at concurrency "
                        f"{first.concurrency} to at best {best.output_tok_s:.1f} at {best.concurrency}: more streams do "
                        f"not make a server slower in total, so the levels are noisier than the effect (a busy host?)"))
        return
    kind = "no-gain" if b.knee_reached and b.knee_concurrency == first.concurrency else (
        "knee" if b.knee_reached else "scales")
    why = batching_gate(kind, lv, b.knee_concurrency, KNEE_GAIN)
    if why is not None:  # the levels' intervals do not support the verdict their point values give
        diag.undecided.append(Undecided("batching", why))
    elif kind == "no-gain":
        nxt = lv[-1]  # the level batching_gate tested
        diag.findings.append(Finding(
            "batching-no-gain", "problem",
            f"Concurrent requests gain nothing over one at a time: {nxt.concurrency} streams deliver "
            f"{(nxt.output_tok_s or 0) / (first.output_tok_s or 1):.2f}× the throughput of {first.concurrency}.",
            ev, tailored("batching_no_gain", diag.engine, diag.settings)))
    elif kind == "knee":
        k = b.knee_concurrency
        knee = by_c.get(k) if k is not None else None
        cause = (f"Throughput stops growing past {k} concurrent streams "
                 f"({knee.output_tok_s:.0f} tok/s there); beyond it more users mostly add latency.") if knee else \
            f"Throughput stops growing past {k} concurrent streams."
        diag.findings.append(Finding("batching-knee", "info", cause, ev,
                                     tailored("batching_knee", diag.engine, diag.settings, knee=k)))
    else:
        diag.findings.append(Finding(
            "batching-scales", "info",
            f"Batching still pays at the highest level tested ({last.concurrency}): "
            f"{b.throughput_gain_x:.1f}× the single-stream throughput; {_beyond(b, last.concurrency)}", ev))
    if b.itl_p99_growth_x is not None and b.itl_p99_growth_x >= TAIL_GROWTH_X:
        diag.findings.append(Finding(
            "batching-tail-latency", "info",
            f"Each user's p99 inter-token latency grows {b.itl_p99_growth_x:.1f}× from {first.concurrency} to "
            f"{last.concurrency} concurrent streams: the price of the aggregate throughput.",
            [Evidence(f"p99 ITL at concurrency {first.concurrency}", first.itl_p99_s, "s", "batching: per-token ITL"),
             Evidence(f"p99 ITL at concurrency {last.concurrency}", last.itl_p99_s, "s", "batching: per-token ITL"),
             Evidence(f"p50 ITL at concurrency {last.concurrency}", last.itl_p50_s, "s", "batching: per-token ITL")],
            tailored("batching_knee", diag.engine, diag.settings, knee=b.knee_concurrency) if b.knee_reached else
            [Advice("any", "cap concurrency per server where the p99 ITL still meets your target, and scale out beyond it",
                    f"no knee showed up to {last.concurrency} streams: throughput still grew, so the cap is a latency "
                    f"choice, not a throughput one")]))


def _beyond(b: Any, top: int) -> str:
    """What lies past the highest level tested, from what is known about the bound."""
    bound, src = b.max_concurrency_bound, b.bound_source or ""
    if bound is None:
        return "the knee, if any, lies beyond it."
    if top < bound:
        return (f"levels up to the bound of {bound} ({src}) were not run within the budget, so the knee may lie "
                f"anywhere above {top} (a longer --budget runs them).")
    if "does not report" in src or src.startswith("default"):
        return (f"the server does not report how many requests it runs at once, and {bound} is as far as this "
                f"experiment goes, so the knee lies above {bound}.")
    return (f"that is the server's own limit ({bound}: {src}), so more slots would likely still add throughput.")


def rule_interference(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    pi = r.get("prefill-interference")
    if pi is None:
        return
    if pi.interference is None:
        diag.undecided.append(Undecided("prefill-interference", pi.reason or "could not measure"))
        return
    src = f"prefill-interference: token gaps of {pi.n_streams} running streams (client view)"
    base = [Evidence("usual gap between tokens", pi.itl_baseline_s, "s", src),
            Evidence("longest gap while the long prompt was prefilled", pi.itl_max_during_s, "s", src),
            Evidence("spike", pi.spike_x, "×", src)]
    pre = getattr(pi, "injected_prefill_s", None)
    ttft = Evidence(f"TTFT of the injected {pi.injected_prompt_tokens}-token prompt", pi.injected_ttft_s, "s",
                    "prefill-interference: client TTFT")
    if not pi.interference:
        got = getattr(pi, "tokens_during_prefill", None)
        ev = base + [ttft]
        if got is not None:
            ev.append(Evidence("tokens each stream received during that prefill (median)", got, "tokens", src))
        diag.findings.append(Finding(
            "prefill-no-stall", "info",
            f"A {pi.injected_prompt_tokens}-token prompt arriving mid-generation did not stall the running streams: "
            f"their longest gap during its prefill was {pi.spike_x:.1f}× the usual "
            f"({pi.itl_max_during_s * 1e3:.0f} vs {pi.itl_baseline_s * 1e3:.0f} ms) — the engine mixes the prefill "
            f"into decode steps (chunked prefill).", ev))
        return
    sx = getattr(pi, "spike_x_ci", None)
    if not sx or sx[0] < SPIKE_MIN_X:
        # the stall is claimed only when the longest gap stands SPIKE_MIN_X above the whole interval of the
        # usual gap (issue 29), not above its point value alone
        bc = getattr(pi, "itl_baseline_s_ci", None)
        spread = (f"{bc[0] * 1e3:.1f}–{bc[1] * 1e3:.1f} ms over {getattr(pi, 'itl_baseline_n', 0)} gaps"
                  if bc else "no interval (too few gaps)")
        ratio = f"{sx[0]:.1f}–{sx[1]:.1f}×" if sx else "unknown"
        diag.undecided.append(Undecided(
            "prefill-interference",
            f"cannot tell whether the {pi.injected_prompt_tokens}-token prompt stalled the running streams: their "
            f"longest gap during its prefill was {pi.itl_max_during_s * 1e3:.0f} ms against a usual gap of "
            f"{pi.itl_baseline_s * 1e3:.1f} ms ({spread}), {ratio} it — the 95 % interval reaches below the "
            f"{SPIKE_MIN_X:g}× a stall needs"))
        return
    ev = base + [Evidence("spike duration", pi.spike_duration_s, "s", src), ttft]
    if pre is not None:
        ev.append(Evidence("that prompt's prefill (TTFT − fixed overhead)", pre, "s", "prefill-interference: client TTFT"))
    how = ""
    if pi.chunked_prefill_likely is True:
        how = " The prefill was split (streams kept receiving tokens), but each piece still slows them."
    elif pi.chunked_prefill_likely is False:
        share = f"{pi.stall_share:.0%} of" if pi.stall_share is not None else "most of"
        how = f" One gap held {share} the prompt's prefill, with no token in between: it was not chunked."
    diag.findings.append(Finding(
        "prefill-interference", "problem",
        f"A {pi.injected_prompt_tokens}-token prompt arriving mid-generation froze running streams for "
        f"{pi.stall_s * 1e3:.0f} ms ({pi.spike_x:.1f}× their usual gap).{how}", ev,
        tailored("interference", diag.engine, diag.settings, prompt_tokens=pi.injected_prompt_tokens,
                 chunked=pi.chunked_prefill_likely, cost=prefill_cost(r, pi))))


def rule_model_load(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None, records: Sequence[Any] = ()) -> None:
    loads = [(rec.server or {}).get("load_s") for rec in records]
    loads = [x for x in loads if isinstance(x, (int, float)) and x >= MODEL_LOAD_MIN_S]
    if loads:
        diag.findings.append(Finding(
            "model-load-on-request", "problem",
            f"{len(loads)} request(s) waited for the model to load ({max(loads):.1f} s at most).",
            [Evidence("longest load_duration", max(loads), "s", "server response (Ollama load_duration)")],
            advice_for("model_load", diag.engine)))


QUEUE = Rule("ttft-queueing", 10, rule_queue)
PREFIX_CACHE = Rule("prefix-cache", 20, rule_prefix_cache)
PROMPT_COST = Rule("prompt-cost", 30, rule_prompt_cost)
DECODE_CEILING = Rule("decode-ceiling", 40, rule_decode_ceiling)  # reads prompt-scaling and batching
LONG_CONTEXT = Rule("long-context-decode-penalty", 50, rule_long_context)
BATCHING = Rule("batching", 60, rule_batching)
INTERFERENCE = Rule("prefill-interference", 70, rule_interference)
CONVERSATION = Rule("conversation", 80, rule_conversation)
#: diagnose's own rules, in the order they run
RULES: tuple[Rule, ...] = (QUEUE, PREFIX_CACHE, PROMPT_COST, DECODE_CEILING, LONG_CONTEXT, BATCHING, INTERFERENCE,
                           CONVERSATION)


def diagnose(results: dict[str, Any], *, engine: str | None = None, ceilings: Ceilings | None = None,
             records: Sequence[Any] = (), settings: Any = None, facts: Any = None,
             rules: Sequence[Rule] = (), spans: dict[str, Any] | None = None) -> Diagnosis:
    """Run every rule over ``results`` (experiment name → typed result) and return the diagnosis.

    ``settings`` (:class:`phasescope.diagnose.settings.ServerSettings`): the server's current
    settings; advice then names them and leaves out changes that would not act. ``rules``: the
    experiments' rules (their specs'), run with :data:`RULES` each at its ``order`` (a rule named twice
    runs once) — how a registered experiment's own rule is heard. ``spans``: where each experiment's TTFT
    went by the server's spans (``explain --otlp-listen``, :mod:`phasescope.diagnose.span_rules`)."""
    diag = Diagnosis(engine=engine, settings=settings, facts=facts, spans=spans)
    for rule in sorted(dict.fromkeys([*RULES, *rules]), key=lambda r: r.order):
        rule.check(results, diag, ceilings)
    rule_model_load(results, diag, ceilings, records)
    rule_speculation(results, diag, ceilings, records)  # the requests' own draft counts
    rule_speculation_batch(results, diag, ceilings, records)  # the same, per batching level, on the roofs
    reconcile(diag.findings)  # two pieces of advice never pull one setting opposite ways
    return diag
