"""``prompt-scaling``: TTFT against prompt length, output length fixed.

The seed's first claim: prefill cost grows with the prompt — linearly for the matmuls, plus a
quadratic attention term that shows on long prompts — while decode speed after the first token
hardly moves. Prompts of n tokens on a geometric grid (each with a unique random start so no
prefix cache can help) are sent one at a time; the medians per length are fitted with

    TTFT(n) = a + b·n + c·n²,   a, b, c ≥ 0        (non-negative least squares on relative
                                                   errors, :func:`fit_relative`)

Physics is read from the *best* repetition of each length (shortest TTFT, fastest decode) — the
least disturbed sample, as hyperfine and pyperf report minimum times — while the points also carry
the medians a user would see (``ttft_s``, ``decode_tok_s``).

* ``a`` (``fixed_overhead_s``): time that does not grow with the prompt (HTTP, tokenization,
  scheduling, the first sampling step).
* ``prefill_tok_s`` = n_max / (TTFT_fit(n_max) − a): the prefill rate at the longest prompt with
  the fixed overhead removed (client-side; the server's own rate is ``server_prefill_tok_s``).
* ``quadratic_share`` = c·n_max² / (b·n_max + c·n_max²): the share of the prefill time at the
  longest prompt that the quadratic (attention) term explains.
* ``decode_change_pct`` = 100·(decode(n_max) − decode(n_min)) / decode(n_min) with decode =
  1 / the typical step (median gap between tokens within a request, best repetition;
  ``decode_source`` = ``gaps``: a burst of load hits a few gaps, not the median), else the best
  server-timed decode tok/s where the server reports it (llama.cpp ``timings``, Ollama
  ``eval_*``; ``decode_source`` = ``server``), else the client's ((output tokens − 1) / (last −
  first token)); ``decode_flat`` when |change| ≤ ``DECODE_FLAT_PCT``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from phasescope.experiments.common import (
    ExperimentInfo,
    finite,
    med,
    ok,
    prompt_tokens_of,
    select,
    server_prefill_s,
)
from phasescope.diagnose.claims import (HIGHER, differ, overlap_reason, s_fmt, step_interval, step_rate, stored, unstable,
                                        unstable_warning)
from phasescope.measure import derive
from phasescope.measure.interval import Interval, median_interval, to_ci
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec
from phasescope.measure.stats import QuadFit, fit_quadratic_nonneg


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "prompt-scaling"
#: decode counts as "flat" when it changes by no more than this between the shortest and longest prompt
DECODE_FLAT_PCT = 25.0
#: TTFT counts as growing when the longest prompt's TTFT is at least this multiple of the shortest's
TTFT_GROWTH_MIN_X = 1.5


@dataclass
class ScalingPoint:
    prompt_tokens: int
    n: int
    ttft_s: float | None
    ttft_min_s: float | None
    server_prefill_s: float | None
    server_prefill_tok_s: float | None
    decode_tok_s: float | None
    server_decode_tok_s: float | None
    decode_best_tok_s: float | None = None
    server_decode_best_tok_s: float | None = None
    #: the typical decode step: median gap between tokens within a request, best repetition
    decode_step_s: float | None = None
    #: 95 % interval of the median TTFT over the repetitions (``measure.interval.median_interval``) and
    #: the slowest repetition (with ``ttft_min_s``: the samples' range)
    ttft_s_ci: list[float] | None = None
    ttft_max_s: float | None = None
    #: 95 % interval of that typical step (the median of the best repetition's gaps) and its gap count
    decode_step_s_ci: list[float] | None = None
    decode_step_n: int = 0


@dataclass
class QuadraticFit:
    a_s: float
    b_s_per_token: float
    c_s_per_token2: float
    r2: float
    n_points: int


@dataclass
class PromptScalingResult:
    info: ExperimentInfo
    output_tokens: int | None = None
    points: list[ScalingPoint] = field(default_factory=list)
    fit: QuadraticFit | None = None
    fixed_overhead_s: float | None = None
    #: median TTFT − server-timed prefill over all requests (time outside the engine's prefill:
    #: HTTP, queueing, tokenization); None when the server does not time its prefill
    client_overhead_s: float | None = None
    client_overhead_s_ci: list[float] | None = None
    client_overhead_n: int = 0
    client_overhead_range: list[float] | None = None
    prefill_tok_s: float | None = None
    server_prefill_tok_s: float | None = None
    quadratic_share: float | None = None
    ttft_growth_x: float | None = None
    ttft_grows: bool | None = None
    decode_change_pct: float | None = None
    decode_flat: bool | None = None
    decode_source: str | None = None  # gaps | server | client
    #: does decode at the longest prompt differ from the shortest, by the intervals of their typical
    #: steps? higher | lower | cannot tell (None: not from gaps, no interval)
    decode_change_verdict: str | None = None
    notes: list[str] = field(default_factory=list)

    name: str = NAME


def geometric_grid(n_min: int, n_max: int, steps: int) -> list[int]:
    """``steps`` integers from n_min to n_max, evenly spaced on a log scale, de-duplicated."""
    if steps <= 1 or n_max <= n_min:
        return [max(1, n_max)]
    ratio = (n_max / n_min) ** (1 / (steps - 1))
    out: list[int] = []
    for i in range(steps):
        v = int(round(n_min * ratio**i))
        if not out or v > out[-1]:
            out.append(v)
    out[-1] = n_max
    return out


def fit_relative(xs: Sequence[float], ys: Sequence[float]) -> QuadFit:
    """:func:`phasescope.measure.stats.fit_quadratic_nonneg` on relative errors: minimise Σ((y − f(x)) / y)².

    TTFT noise grows with TTFT, so unweighted least squares lets the longest prompts decide the
    intercept; weighting by 1/y lets each length count alike. Same exact active-set search over the
    non-empty subsets of {a, b, c} with every coefficient ≥ 0."""
    y = np.asarray(ys, dtype=float)
    if np.any(y <= 0):
        return fit_quadratic_nonneg(xs, ys)
    return fit_quadratic_nonneg(xs, ys, weights=1.0 / y)


def ttft_interval(p: ScalingPoint) -> Interval | None:
    """A point's median TTFT with its interval and the range of its repetitions."""
    rng = (p.ttft_min_s, p.ttft_max_s) if p.ttft_min_s is not None and p.ttft_max_s is not None else None
    return stored(p.ttft_s, p.ttft_s_ci, p.n, rng)


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None) -> PromptScalingResult:
    """Pure: the tagged records of one run → the result (see module docstring)."""
    info = info or ExperimentInfo(name=NAME)
    res = PromptScalingResult(info=info)
    measured = ok(select(records, NAME, phase="measure"))
    groups: dict[int, list[RequestRecord]] = {}
    for r in measured:
        key = int(r.tags.get("prompt_tokens_target") or prompt_tokens_of(r) or 0)
        groups.setdefault(key, []).append(r)
    outs = [r.max_tokens for r in measured if r.max_tokens]
    res.output_tokens = int(outs[0]) if outs else None
    for key in sorted(groups):
        rs = groups[key]
        n_actual = med(prompt_tokens_of(r) for r in rs)
        ttfts = [derive.ttft_s(r) for r in rs]
        steps = [(float(med(g)), g) for g in (finite(derive.itl_s(r)) for r in rs) if len(g) >= 4]  # type: ignore[arg-type]
        best_gaps = min(steps, key=lambda x: x[0])[1] if steps else []
        step_iv = step_interval(best_gaps) if best_gaps else None
        res.points.append(
            ScalingPoint(
                prompt_tokens=int(round(n_actual)) if n_actual is not None else key,
                n=len(rs),
                ttft_s=med(ttfts),
                ttft_min_s=min((t for t in ttfts if t is not None), default=None),
                server_prefill_s=med(server_prefill_s(r) for r in rs),
                server_prefill_tok_s=med(derive.server_prefill_tok_s(r) for r in rs),
                decode_tok_s=med(derive.decode_tok_s(r) for r in rs),
                server_decode_tok_s=med(derive.server_decode_tok_s(r) for r in rs),
                decode_best_tok_s=max(finite(derive.decode_tok_s(r) for r in rs), default=None),
                server_decode_best_tok_s=max(finite(derive.server_decode_tok_s(r) for r in rs), default=None),
                decode_step_s=min(finite(med(derive.itl_s(r)) for r in rs if len(derive.itl_s(r)) >= 4), default=None),
                ttft_s_ci=to_ci(median_interval(ttfts)), ttft_max_s=max(finite(ttfts), default=None),
                decode_step_s_ci=to_ci(step_iv), decode_step_n=step_iv.n if step_iv else 0,
            )
        )
    for p in res.points:
        iv = ttft_interval(p)
        if iv is not None and unstable(iv):
            res.info.warnings.append(unstable_warning(NAME, f"TTFT at {p.prompt_tokens} prompt tokens", iv, s_fmt))
    pts = [p for p in res.points if p.ttft_s is not None]
    if len(pts) < 3:
        res.notes.append(f"only {len(pts)} prompt lengths answered; the fit needs at least 3")
        return res
    xs = [float(p.prompt_tokens) for p in pts]
    ys = [float(p.ttft_min_s if p.ttft_min_s is not None else p.ttft_s) for p in pts]  # type: ignore[arg-type]
    f = fit_relative(xs, ys)
    res.fit = QuadraticFit(a_s=f.a, b_s_per_token=f.b, c_s_per_token2=f.c, r2=f.r2, n_points=len(pts))
    res.fixed_overhead_s = f.a
    n_max = xs[-1]
    prefill_time = f.b * n_max + f.c * n_max * n_max
    if prefill_time > 0:
        res.prefill_tok_s = n_max / prefill_time
        res.quadratic_share = f.c * n_max * n_max / prefill_time
    else:
        res.notes.append("TTFT did not grow with the prompt: no prefill rate can be fitted")
    res.server_prefill_tok_s = pts[-1].server_prefill_tok_s
    outside = [t - p for t, p in ((derive.ttft_s(r), server_prefill_s(r)) for r in measured) if t is not None and p is not None]
    res.client_overhead_s = med(outside) if outside else None
    oiv = median_interval(outside) if outside else None
    res.client_overhead_s_ci = to_ci(oiv)
    res.client_overhead_n = oiv.n if oiv else 0
    res.client_overhead_range = [oiv.min, oiv.max] if oiv and oiv.min is not None else None
    first, last = pts[0], pts[-1]
    if first.ttft_min_s and last.ttft_min_s:
        res.ttft_growth_x = last.ttft_min_s / first.ttft_min_s
        res.ttft_grows = res.ttft_growth_x >= TTFT_GROWTH_MIN_X
        a, b = ttft_interval(first), ttft_interval(last)
        if res.ttft_grows and differ(a, b) != HIGHER:  # a scaling is claimed only where the intervals part
            res.ttft_grows = None
            res.notes.append(overlap_reason("TTFT grows with the prompt", f"TTFT at {first.prompt_tokens} tokens", a,
                                            f"TTFT at {last.prompt_tokens} tokens", b, s_fmt))
    # the server's own decode timing when it gives one (llama.cpp, Ollama): it leaves HTTP and
    # client scheduling out of a physics question; else the client's
    if first.decode_step_s and last.decode_step_s:
        d0, d1, res.decode_source = 1.0 / first.decode_step_s, 1.0 / last.decode_step_s, "gaps"
    elif first.server_decode_best_tok_s and last.server_decode_best_tok_s:
        d0, d1, res.decode_source = first.server_decode_best_tok_s, last.server_decode_best_tok_s, "server"
    else:
        d0, d1, res.decode_source = first.decode_best_tok_s, last.decode_best_tok_s, "client"
    if d0 and d1:
        res.decode_change_pct = 100.0 * (d1 - d0) / d0
        res.decode_flat = abs(res.decode_change_pct) <= DECODE_FLAT_PCT
        if res.decode_source == "gaps":
            res.decode_change_verdict = differ(step_rate(first), step_rate(last))
    else:
        res.notes.append("decode speed not measurable (need ≥ 2 output tokens per request)")
    return res



async def run(ctx: RunContext, budget_s: float, *, output_tokens: int = 16, steps: int = 6, reps: int = 2,
              ctx_fraction: float = 0.5, n_max: int | None = None) -> PromptScalingResult:
    """Send the grid (unique prompts, ``cache_prompt: false`` where the API has it) and analyse.

    The longest prompt is the largest that fits ``ctx_fraction`` of the context per sequence and
    whose calibrated cost (``reps`` passes over the grid) fits 80 % of ``budget_s``."""
    import time

    from phasescope.experiments.context import request_time_s

    started = time.time()
    ctx.start_clock(budget_s)
    assert ctx.calib is not None, "calibrate first"
    cap = max(64, int(ctx.ctx_limit() * ctx_fraction) - output_tokens)

    def fit_top(reps: int, out: int) -> int:
        top = min(n_max or cap, cap)
        while top > 64:
            grid = geometric_grid(min(32, top // 4), top, steps)
            if reps * sum(request_time_s(ctx.calib, n, out) for n in grid) <= 0.8 * budget_s:
                break
            top = int(top / 1.4)
        return top

    # a slow server gets shorter outputs, then shorter prompts, never fewer repetitions: a single request
    # per length has no interval, and no scaling is claimed without one (an explicit reps=1 is kept)
    top = fit_top(reps, output_tokens)
    short = max(8, output_tokens // 2)
    for r2, o2, enough in ((reps, output_tokens, 512), (reps, short, 0)):
        t2 = fit_top(r2, o2)
        reps, output_tokens, top = r2, o2, t2
        if t2 >= enough or t2 >= min(n_max or cap, cap):
            break
    grid = geometric_grid(max(8, min(32, top // 4)), max(top, 16), steps)
    ctx.say(f"{NAME}: {len(grid)} prompt lengths {grid[0]}…{grid[-1]} tokens × {reps}, {output_tokens} output tokens")
    await ctx.send((await ctx.prompt(grid[0])).request(4, cache_prompt=False), NAME, phase="warmup")
    # ascending, then descending (a load drift cannot pose as a length effect) — the descending pass takes
    # both ends first: the finding compares them, and a pass the budget cuts short must not leave one end
    # with a single request (no interval)
    down = [grid[-1], grid[0]] + grid[-2:0:-1] if len(grid) > 2 else grid[::-1]
    for rep in range(reps):
        for n in (grid if rep % 2 == 0 else down):
            if ctx.over():
                break
            p = await ctx.prompt(n)
            await ctx.send(p.request(output_tokens, cache_prompt=False), NAME, phase="measure",
                           prompt_tokens_target=n, rep=rep)
    params = {"grid": grid, "reps": reps, "output_tokens": output_tokens, "budget_s": budget_s}
    res = analyze(ctx.records, ctx.info(NAME, started, params))
    if res.prefill_tok_s and ctx.calib is not None:  # later experiments size from the better number
        ctx.calib.prefill_tok_s = res.prefill_tok_s
    if ctx.over():
        from phasescope.measure.warnings import warn

        res.info.warnings.append(warn("partial_run", "budget", {"budget_s": budget_s}))
    return res


#: explain's prompt-scaling (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.20, run=lambda ctx, budget_s, suite: run(ctx, budget_s),
                      analyze=analyze, view=view.prompt_scaling, rule=rules.PROMPT_COST)
