"""``context-fill``: decode speed as the context grows.

Every decode step reads the weights (fixed) plus the KV cache of every earlier token (growing), so
the time per output token should rise linearly with the context:

    t_token(L) ≈ t0 + k·L      (fit over the points; L = prompt tokens + output tokens / 2,
                                the mean context during the measured decode; t_token = the median
                                gap between tokens within a request, best repetition — robust to
                                bursts of load — or the server's decode time when there are no gaps)

Prompts are nested prefixes of one long random text, sent shortest first, so a server with a
prefix cache only prefills the new part of each (that keeps long contexts affordable; decode is
what is measured). When the model's weight bytes W and KV bytes per token KV are known (theory),
the bandwidth model predicts

    predicted_slowdown_pct(L) = 100·(1 − (W + L_min·KV) / (W + L·KV))

and ``measured_over_predicted`` compares it with what the server did. ``slows`` is ``True`` when
decode at the longest context is at least ``SLOW_PCT`` slower than at the shortest — and the 95 %
intervals of the two ends' typical steps do not overlap (``decode_tok_s_ci``) —, ``False`` when
it is within ``FLAT_PCT`` and those intervals rule out a ``SLOW_PCT`` slowdown, ``None`` otherwise. A slowdown seen from one request per point is never
taken on its own: both end points are measured once more first (load only slows decode, and each
point keeps its best repetition), so one request slowed by the host cannot make the finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from typing import Any, Sequence

import math

from phasescope.experiments.common import ExperimentInfo, finite, mad_sigma, med, ok, output_tokens_of, prompt_tokens_of, select
from phasescope.diagnose.claims import (LOWER, UNSTABLE_RATIO, differ, overlap_reason, rate_fmt, rate_of_step,
                                        step_interval, step_rate, unstable_warning)
from phasescope.measure import derive
from phasescope.measure.interval import Interval, to_ci
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec, SuiteInputs
from phasescope.measure.stats import fit_linear


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "context-fill"
SLOW_PCT = 10.0
FLAT_PCT = 5.0
#: a slowdown must be this many times the points' spread to count
NOISE_K = 2.0
#: the smallest spread assumed (%): a single repetition never proves a 1 % effect
NOISE_FLOOR_PCT = 2.0


@dataclass
class ContextPoint:
    context_tokens: int
    prompt_tokens: int
    n: int
    #: the one per-point decode estimate, used by the table and by the finding alike: 1 / the typical
    #: step of the best repetition (median gap between tokens within a request; load only slows)
    decode_tok_s: float | None
    server_decode_tok_s: float | None
    per_token_s: float | None
    predicted_decode_tok_s: float | None = None
    #: relative spread of that estimate: over repetitions (max − min) / max, else within the request
    #: (robust σ of the gaps / √gaps / median gap)
    spread: float | None = None
    #: the decode rate of each repetition (same estimator), for the record
    rep_decode_tok_s: list[float] = field(default_factory=list)
    #: 95 % interval of ``decode_tok_s``: the best repetition's typical step (median of its gaps) with
    #: its order-statistic / log-t interval over ``decode_step_n`` gaps, inverted
    decode_tok_s_ci: list[float] | None = None
    decode_step_s: float | None = None
    decode_step_s_ci: list[float] | None = None
    decode_step_n: int = 0


@dataclass
class Prediction:
    weight_bytes: float
    kv_bytes_per_token: float
    source: str
    slowdown_pct: float | None = None


@dataclass
class ContextFillResult:
    info: ExperimentInfo
    output_tokens: int | None = None
    points: list[ContextPoint] = field(default_factory=list)
    per_token_s_at_zero: float | None = None
    per_token_s_per_ctx_token: float | None = None
    fit_r2: float | None = None
    slowdown_pct: float | None = None
    slows: bool | None = None
    #: the spread both ends carry, in % of the rate: a slowdown within it is noise
    noise_pct: float | None = None
    #: Σ of rises between neighbouring points (% of the first rate): decode should only fall with context
    rises_pct: float | None = None
    #: why ``slows`` is None, when it is
    reason: str = ""
    prediction: Prediction | None = None
    measured_over_predicted: float | None = None
    notes: list[str] = field(default_factory=list)

    name: str = NAME


def predicted_slowdown_pct(weight_bytes: float, kv_bytes_per_token: float, l_min: float, l_max: float) -> float:
    """Bandwidth model: per-token bytes W + L·KV; slowdown of decode tok/s from l_min to l_max, %."""
    return 100.0 * (1.0 - (weight_bytes + l_min * kv_bytes_per_token) / (weight_bytes + l_max * kv_bytes_per_token))


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None,
            weight_bytes: float | None = None, kv_bytes_per_token: float | None = None,
            model_source: str = "theory") -> ContextFillResult:
    info = info or ExperimentInfo(name=NAME)
    res = ContextFillResult(info=info)
    measured = ok(select(records, NAME, phase="measure"))
    groups: dict[int, list[RequestRecord]] = {}
    for r in measured:
        groups.setdefault(int(r.tags.get("context_target") or prompt_tokens_of(r) or 0), []).append(r)
    outs = [output_tokens_of(r) for r in measured]
    res.output_tokens = int(med(outs)) if med(outs) is not None else None
    for key in sorted(groups):
        rs = groups[key]
        p = med(prompt_tokens_of(r) for r in rs) or key
        o = med(output_tokens_of(r) for r in rs) or 0
        sd = med(derive.server_decode_tok_s(r) for r in rs)
        rates: list[float] = []
        within: list[float] = []
        best: tuple[float, list[float]] | None = None
        for r in rs:
            g = finite(derive.itl_s(r))
            if len(g) >= 4 and med(g):
                m = float(med(g))  # type: ignore[arg-type]
                rates.append(1.0 / m)
                within.append(mad_sigma(g) / math.sqrt(len(g)) / m)
                if best is None or m < best[0]:
                    best = (m, g)
            else:
                v = derive.server_decode_tok_s(r)
                if v:
                    rates.append(float(v))
        rate = max(rates) if rates else None
        spread = None
        if len(rates) >= 2 and rate:
            spread = (max(rates) - min(rates)) / max(rates)
        elif within:
            spread = min(within)
        siv = step_interval(best[1]) if best is not None and rate and abs(1.0 / best[0] - rate) < 1e-9 * rate else None
        riv = rate_of_step(siv)
        res.points.append(ContextPoint(
            context_tokens=int(round(p + o / 2)), prompt_tokens=int(round(p)), n=len(rs),
            decode_tok_s=rate, server_decode_tok_s=sd, per_token_s=(1.0 / rate) if rate else None,
            spread=spread, rep_decode_tok_s=[round(x, 3) for x in rates], decode_tok_s_ci=to_ci(riv),
            decode_step_s=siv.value if siv else None, decode_step_s_ci=to_ci(siv), decode_step_n=siv.n if siv else 0,
        ))
    pts = [p for p in res.points if p.per_token_s is not None]
    if len(pts) < 2:
        res.notes.append(f"only {len(pts)} context lengths gave a decode speed; need at least 2")
        res.reason = res.notes[-1]
        return res
    xs = [float(p.context_tokens) for p in pts]
    f = fit_linear(xs, [float(p.per_token_s) for p in pts])  # type: ignore[arg-type]
    res.per_token_s_at_zero, res.per_token_s_per_ctx_token, res.fit_r2 = f.intercept, f.slope, f.r2
    r0 = float(pts[0].decode_tok_s)  # type: ignore[arg-type]
    r1 = float(pts[-1].decode_tok_s)  # type: ignore[arg-type]
    res.slowdown_pct = 100.0 * (r0 - r1) / r0
    spreads = [p.spread for p in (pts[0], pts[-1]) if p.spread is not None]
    res.noise_pct = 100.0 * (sum(spreads) if len(spreads) == 2 else (2 * spreads[0] if spreads else 0.0))
    rates_all = [float(p.decode_tok_s) for p in pts]  # type: ignore[arg-type]
    res.rises_pct = 100.0 * sum(max(0.0, b - a) for a, b in zip(rates_all, rates_all[1:])) / r0
    noise = max(res.noise_pct, NOISE_FLOOR_PCT)
    # repetitions more than UNSTABLE_RATIO apart (spread = (max − min) / max > 1 − 1 / ratio)
    shaky = [p for p in (pts[0], pts[-1]) if len(p.rep_decode_tok_s) > 1
             and max(p.rep_decode_tok_s) > UNSTABLE_RATIO * min(p.rep_decode_tok_s)]
    for p in shaky:
        reps = p.rep_decode_tok_s
        res.info.warnings.append(unstable_warning(NAME, f"decode at {p.context_tokens} tokens of context", Interval(
            float(p.decode_tok_s), min(reps), max(reps), len(reps), "repeats", min=min(reps), max=max(reps)),
            rate_fmt))
    if res.slowdown_pct >= SLOW_PCT and shaky:
        res.reason = (f"decode slowed {res.slowdown_pct:.0f}%, but the repetitions at "
                      f"{' and '.join(str(p.context_tokens) for p in shaky)} tokens of context are more than "
                      f"{UNSTABLE_RATIO:g}× apart (unstable): cannot tell")
    elif res.slowdown_pct >= SLOW_PCT:
        if res.slowdown_pct < NOISE_K * noise:
            res.reason = (f"decode slowed {res.slowdown_pct:.0f}% but its two end points carry a spread of "
                          f"±{res.noise_pct:.0f}% ({'over repetitions' if pts[0].n > 1 else 'within each request'}): "
                          f"within the noise")
        elif res.rises_pct > 0.5 * res.slowdown_pct and res.rises_pct > FLAT_PCT:
            res.reason = (f"decode should only fall as the context grows, but between neighbouring points it rose "
                          f"{res.rises_pct:.0f}% in all against a {res.slowdown_pct:.0f}% fall end to end: "
                          f"the points are noisier than the effect (a busy machine?)")
        elif differ(step_rate(pts[0]), step_rate(pts[-1])) != LOWER:
            # the slowdown is claimed only where the two ends' intervals part (issue 29)
            res.reason = overlap_reason(f"decode slows from {pts[0].context_tokens} to {pts[-1].context_tokens} "
                                        f"tokens of context", f"decode at {pts[0].context_tokens}", step_rate(pts[0]),
                                        f"decode at {pts[-1].context_tokens}", step_rate(pts[-1]), rate_fmt)
        else:
            res.slows = True
    elif abs(res.slowdown_pct) <= FLAT_PCT and noise <= 2 * FLAT_PCT:
        # "flat" is claimed only where the two ends' intervals rule out a slowdown that counts (as "slows"
        # needs them to part): the slowest the last end may be against the fastest the first may be
        a, b = step_rate(pts[0]), step_rate(pts[-1])
        worst = 100.0 * (1.0 - b.low / a.high) if a is not None and b is not None and a.high > 0 else None
        if worst is not None and worst >= SLOW_PCT:
            res.reason = (f"cannot tell whether decode is flat in the context: it changed {-res.slowdown_pct:+.1f}% from "
                          f"{pts[0].context_tokens} to {pts[-1].context_tokens} tokens, but the two ends' intervals "
                          f"({rate_fmt(a.low)}–{rate_fmt(a.high)} and {rate_fmt(b.low)}–{rate_fmt(b.high)}) allow a "
                          f"slowdown of up to {worst:.0f}%, past the {SLOW_PCT:g}% that counts (more repetitions or "
                          f"longer outputs narrow them)")
        else:
            res.slows = False
    elif abs(res.slowdown_pct) < NOISE_K * noise:
        res.reason = (f"decode changed {-res.slowdown_pct:+.1f}% from {pts[0].context_tokens} to {pts[-1].context_tokens} "
                      f"tokens of context, within the points' spread of ±{res.noise_pct:.0f}%: the measurement is "
                      f"noisier than any effect (a busy machine?)")
    elif res.slowdown_pct < 0:
        res.reason = (f"decode was {r1 / r0:.2f}× as fast at {pts[-1].context_tokens} tokens of context as at "
                      f"{pts[0].context_tokens}: it cannot speed up with more context, so the measurement is noisier "
                      f"than the effect (a busy machine?)")
    elif res.slowdown_pct < SLOW_PCT:
        res.reason = (f"decode slowed {res.slowdown_pct:.1f}% over the context range (noise ±{res.noise_pct:.0f}%): "
                      f"between flat and a clear slowdown")
    else:
        res.reason = f"decode changes within the noise ({res.noise_pct:.0f}%)"
    if weight_bytes and kv_bytes_per_token:
        pred = predicted_slowdown_pct(weight_bytes, kv_bytes_per_token, xs[0], xs[-1])
        res.prediction = Prediction(weight_bytes=float(weight_bytes), kv_bytes_per_token=float(kv_bytes_per_token),
                                    source=model_source, slowdown_pct=pred)
        for p in pts:
            # scale the first point's measured rate by the bandwidth model
            p.predicted_decode_tok_s = r0 * (weight_bytes + xs[0] * kv_bytes_per_token) / (
                weight_bytes + p.context_tokens * kv_bytes_per_token) if r0 else None
        if res.slowdown_pct is not None and pred > 0:
            res.measured_over_predicted = res.slowdown_pct / pred
    else:
        res.notes.append("model bytes unknown: no predicted slowdown (pass --model-spec to compare)")
    return res


async def run(ctx: RunContext, budget_s: float, *, output_tokens: int = 32, steps: int = 5, reps: int = 2,
              ctx_fraction: float = 0.8, cache_known: bool | None = None, l_max: int | None = None,
              weight_bytes: float | None = None, kv_bytes_per_token: float | None = None,
              model_source: str = "theory") -> ContextFillResult:
    """Nested prefixes of one long prompt, shortest first, ``reps`` passes (see module docstring).

    The longest context fits ``ctx_fraction`` of the context per sequence and the budget, assuming
    the prefix cache works unless ``cache_known`` is False (then every prefix is paid in full)."""
    import time

    from phasescope.experiments.context import prefix_of, request_time_s

    started = time.time()
    ctx.start_clock(budget_s)
    c = ctx.calib
    assert c is not None, "calibrate first"
    cap = max(128, int(ctx.ctx_limit() * ctx_fraction) - output_tokens)

    def fit_top(reps: int, out: int) -> int:
        top = min(l_max or cap, cap)
        decode_cost = steps * reps * request_time_s(c, 0, out)
        while top > 128:
            prefill = (top if cache_known is not False else 1.7 * top * reps) / c.prefill_tok_s
            if prefill + decode_cost <= 0.8 * budget_s:
                break
            top = int(top / 1.3)
        return top

    # a slow decoder gets fewer repetitions and shorter outputs before it gets shorter contexts
    for r2, o2 in ((reps, output_tokens), (1, output_tokens), (1, max(12, output_tokens // 2))):
        top = fit_top(r2, o2)
        reps, output_tokens = r2, o2
        if top >= 2048 or top >= min(l_max or cap, cap):
            break
    from phasescope.experiments.prompt_scaling import geometric_grid

    grid = geometric_grid(min(64, top // 4), top, steps)
    ctx.say(f"{NAME}: decode {output_tokens} tokens at {len(grid)} context lengths {grid[0]}…{grid[-1]} × {reps}")
    long_p = await ctx.prompt(grid[-1])
    for rep in range(reps):  # shortest first (each prefix extends the cached one), then re-measured
        for n in (grid if rep % 2 == 0 else grid[::-1]):
            if ctx.over():
                break
            req = prefix_of(long_p, n)
            req.max_tokens = output_tokens
            await ctx.send(req, NAME, phase="measure", context_target=n, rep=rep)
    params = {"grid": grid, "reps": reps, "output_tokens": output_tokens, "budget_s": budget_s}

    def result() -> ContextFillResult:
        return analyze(ctx.records, ctx.info(NAME, started, params), weight_bytes=weight_bytes,
                       kv_bytes_per_token=kv_bytes_per_token, model_source=model_source)

    res = result()
    if res.slows is True and reps == 1:
        # one request per point: a burst of host load on the longest one reads as a slowdown. Load only
        # slows decode and each point keeps its best repetition, so measuring both ends once more (the
        # long one first) either confirms the slowdown or lifts the point the burst had pulled down
        for n in (grid[-1], grid[0]):
            if ctx.over():
                break
            req = prefix_of(long_p, n)
            req.max_tokens = output_tokens
            await ctx.send(req, NAME, phase="measure", context_target=n, rep=1)
        params["confirmed_ends"] = True
        res = result()
    return res


def _run_in_suite(ctx: RunContext, budget_s: float, suite: SuiteInputs) -> Any:
    """``run`` after prefix-cache, whose verdict says whether a repeated context prefix is served from cache."""
    pc = suite.results.get("prefix-cache")
    return run(ctx, budget_s, cache_known=pc.cache_detected if pc is not None else None,
               weight_bytes=suite.weight_bytes, kv_bytes_per_token=suite.kv_bytes_per_token,
               model_source=suite.model_source)


#: explain's context-fill (:mod:`phasescope.experiments.spec`)
SPEC = ExperimentSpec(NAME, share=0.20, run=_run_in_suite, analyze=analyze, view=view.context_fill, rule=rules.LONG_CONTEXT)
