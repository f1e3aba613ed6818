"""``prefix-cache``: is a long shared system prompt paid once, or on every request?

Requests, sent one at a time (phases in the record tags):

* ``short`` — the user turn alone (no system prompt): what TTFT would be if the whole system prompt
  came from the cache.
* ``cold``  — a fresh system prompt S (random, never seen) + a user turn: the full prefill.
* ``repeat`` — the same S + a *different* user turn, several times: a cache hit on S.

Two groups (two different S) give two cold samples. Then

    expected_saving_s = TTFT(cold) − TTFT(short)     (the prefill of S)
    saved_s           = TTFT(cold) − TTFT(repeat)
    saved_fraction    = saved_s / TTFT(cold)

``cache_detected`` is ``True`` when repeats save at least half of the expected saving (and the 95 %
intervals of the cold and repeat TTFTs do not overlap), ``False`` when they save at most a fifth of it
(and the system prompt's cost shows: the intervals of the user turn alone and the cold request part), and ``None`` (cannot tell) when the expected saving is not
clearly above the noise (4 × robust σ of the repeat TTFTs, floor 2 ms), the saving is in between,
or the timing verdict contradicts what the server itself reports (``agrees_with_server`` False).

The server's own view is read alongside: cached prompt tokens per response (OpenAI
``usage.prompt_tokens_details.cached_tokens``, llama.cpp ``timings.cache_n``), the server-timed
prefill (llama.cpp ``prompt_ms``, Ollama ``prompt_eval_duration``) and the vLLM/SGLang/llama.cpp
prefix-cache counters scraped before and after (``metrics_delta``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from typing import Any, Sequence

from phasescope.experiments.common import (
    ExperimentInfo,
    finite,
    mad_sigma,
    med,
    ok,
    prompt_tokens_of,
    select,
    server_prefill_s,
)
from phasescope.diagnose.claims import HIGHER, LOWER, differ, overlap_reason, s_fmt, unstable, unstable_warning
from phasescope.measure import derive
from phasescope.measure.interval import median_interval, to_ci
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "prefix-cache"
HIT_MIN_SHARE = 0.5  # of the expected saving
MISS_MAX_SHARE = 0.2
NOISE_K = 4.0
NOISE_FLOOR_S = 0.002


@dataclass
class ServerCacheView:
    """What the server itself reported about the cache during the experiment."""

    cached_tokens_repeat: float | None = None  # median over repeats (usage / cache_n)
    cached_tokens_cold: float | None = None
    server_prefill_cold_s: float | None = None
    server_prefill_repeat_s: float | None = None
    metrics_delta: dict[str, float] = field(default_factory=dict)  # counter deltas over the run
    hit_rate: float | None = None  # Δhits/Δqueries from /metrics
    says_cached: bool | None = None
    source: str | None = None


@dataclass
class PrefixCacheResult:
    info: ExperimentInfo
    system_prompt_tokens: int | None = None
    user_turn_tokens: int | None = None
    n_cold: int = 0
    n_repeat: int = 0
    ttft_first_s: float | None = None
    ttft_repeat_s: float | None = None
    ttft_short_s: float | None = None
    expected_saving_s: float | None = None
    saved_s: float | None = None
    saved_fraction: float | None = None
    noise_s: float | None = None
    cache_detected: bool | None = None
    reason: str = ""
    server: ServerCacheView = field(default_factory=ServerCacheView)
    agrees_with_server: bool | None = None
    #: 95 % intervals of the three median TTFTs (``measure.interval.median_interval``)
    ttft_first_s_ci: list[float] | None = None
    ttft_repeat_s_ci: list[float] | None = None
    ttft_short_s_ci: list[float] | None = None
    n_short: int = 0

    name: str = NAME


def _server_view(cold: list[RequestRecord], rep: list[RequestRecord], system_tokens: int | None,
                 metrics_delta: dict[str, float] | None) -> ServerCacheView:
    v = ServerCacheView(metrics_delta=dict(metrics_delta or {}))
    v.cached_tokens_repeat = med(derive.cached_prompt_tokens(r) for r in rep)
    v.cached_tokens_cold = med(derive.cached_prompt_tokens(r) for r in cold)
    v.server_prefill_cold_s = med(server_prefill_s(r) for r in cold)
    v.server_prefill_repeat_s = med(server_prefill_s(r) for r in rep)
    md = v.metrics_delta
    q, h = md.get("prefix_cache_queries"), md.get("prefix_cache_hits")
    if q and h is not None and q > 0:
        v.hit_rate = h / q
    # decide from the strongest channel available
    if v.cached_tokens_repeat is not None and system_tokens:
        v.says_cached = v.cached_tokens_repeat >= 0.5 * system_tokens
        v.source = "cached prompt tokens in responses (usage.cached_tokens / timings.cache_n)"
    elif v.hit_rate is not None:
        v.says_cached = v.hit_rate >= 0.25
        v.source = "prefix-cache hit/query counters in /metrics"
    elif md.get("prompt_tokens_cached") is not None:
        v.says_cached = md["prompt_tokens_cached"] >= 0.5 * (system_tokens or 1) * max(1, len(rep))
        v.source = "prompt_tokens_cached counter in /metrics"
    elif v.server_prefill_cold_s and v.server_prefill_repeat_s is not None:
        v.says_cached = v.server_prefill_repeat_s <= 0.5 * v.server_prefill_cold_s
        v.source = "server-timed prefill (prompt_ms / prompt_eval_duration)"
    return v


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None,
            metrics_delta: dict[str, float] | None = None) -> PrefixCacheResult:
    info = info or ExperimentInfo(name=NAME)
    res = PrefixCacheResult(info=info)
    short = ok(select(records, NAME, phase="short"))
    cold = ok(select(records, NAME, phase="cold"))
    rep = ok(select(records, NAME, phase="repeat"))
    res.n_cold, res.n_repeat = len(cold), len(rep)
    sys_t = [r.tags.get("system_tokens") for r in cold + rep if r.tags.get("system_tokens")]
    res.system_prompt_tokens = int(sys_t[0]) if sys_t else None
    usr = [prompt_tokens_of(r) for r in short]
    res.user_turn_tokens = int(med(usr)) if finite(usr) else None
    t_short = finite(derive.ttft_s(r) for r in short)
    t_cold = finite(derive.ttft_s(r) for r in cold)
    t_rep = finite(derive.ttft_s(r) for r in rep)
    res.ttft_short_s, res.ttft_first_s, res.ttft_repeat_s = med(t_short), med(t_cold), med(t_rep)
    ivs = {k: median_interval(v) for k, v in (("short", t_short), ("first", t_cold), ("repeat", t_rep))}
    res.ttft_short_s_ci, res.ttft_first_s_ci, res.ttft_repeat_s_ci = (to_ci(ivs[k]) for k in ("short", "first", "repeat"))
    res.n_short = len(t_short)
    for k, label in (("short", "TTFT of the user turn alone"), ("first", "cold TTFT"), ("repeat", "repeat TTFT")):
        if ivs[k] is not None and unstable(ivs[k]):
            res.info.warnings.append(unstable_warning(NAME, label, ivs[k], s_fmt))
    res.server = _server_view(cold, rep, res.system_prompt_tokens, metrics_delta)
    if res.ttft_first_s is None or res.ttft_repeat_s is None:
        res.reason = "no successful cold or repeat request"
        return res
    res.saved_s = res.ttft_first_s - res.ttft_repeat_s
    res.saved_fraction = res.saved_s / res.ttft_first_s if res.ttft_first_s > 0 else None
    res.noise_s = max(mad_sigma(t_rep), NOISE_FLOOR_S)
    if res.ttft_short_s is None:
        res.reason = "no baseline (user-turn-only) request succeeded"
        return res
    res.expected_saving_s = res.ttft_first_s - res.ttft_short_s
    if res.expected_saving_s < NOISE_K * res.noise_s:
        res.reason = (f"the system prompt's prefill ({res.expected_saving_s * 1e3:.1f} ms) is within the noise "
                      f"({res.noise_s * 1e3:.1f} ms); a longer system prompt would tell")
    else:
        share = res.saved_s / res.expected_saving_s
        cold, rep, short = ivs["first"], ivs["repeat"], ivs["short"]
        if share >= HIT_MIN_SHARE and differ(cold, rep) != LOWER:  # a saving the intervals do not support
            res.reason = overlap_reason("repeats are faster than the cold request", "cold TTFT", cold, "repeat TTFT",
                                        rep, s_fmt)
        elif share <= MISS_MAX_SHARE and differ(short, cold) != HIGHER:  # the prompt's cost is not shown
            res.reason = overlap_reason("the system prompt costs anything to prefill", "user turn alone", short,
                                        "with the system prompt", cold, s_fmt)
        elif share >= HIT_MIN_SHARE:
            res.cache_detected = True
            res.reason = f"repeats saved {share:.0%} of the system prompt's prefill"
        elif share <= MISS_MAX_SHARE:
            res.cache_detected = False
            res.reason = f"repeats saved only {max(share, 0):.0%} of the system prompt's prefill"
        else:
            res.reason = f"repeats saved {share:.0%} of the system prompt's prefill: partial, cannot tell"
    if res.cache_detected is not None and res.server.says_cached is not None:
        res.agrees_with_server = res.cache_detected == res.server.says_cached
        if not res.agrees_with_server:  # a direct report against noisy timing: do not pick a side
            res.reason = (f"timing says the cache is {'on' if res.cache_detected else 'off'} ({res.reason}) but the "
                          f"server reports it {'used' if res.server.says_cached else 'unused'} "
                          f"({res.server.source}): cannot tell")
            res.cache_detected = None
    return res


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Counter deltas (after − before) for the names present in both scrapes."""
    return {k: after[k] - before[k] for k in after if k in before}


async def run(ctx: RunContext, budget_s: float, *, user_tokens: int = 24, output_tokens: int = 8,
              repeats: int = 3, groups: int = 2, system_tokens: int | None = None) -> PrefixCacheResult:
    """Shorts, then per group a cold request and ``repeats`` repeats (see module docstring).

    The system prompt is as long as the budget allows if nothing were cached (every request pays
    it), between 512 and 2048 tokens (llama.cpp cannot reuse a shorter prefix of a Gemma-3 SWA
    model after the prompt diverges: a 256-token system prompt got ``cache_n`` 0 here, 512 got all) and within the context per sequence."""
    import time

    from phasescope.experiments.context import join_prompts, request_time_s

    started = time.time()
    ctx.start_clock(budget_s)
    c = ctx.calib
    assert c is not None, "calibrate first"
    cap = max(64, min(2048, ctx.ctx_limit() - user_tokens - output_tokens - 16))
    if system_tokens is None:
        per_req = 0.8 * budget_s / (groups * (1 + repeats) + 4)
        system_tokens = int(max(512, min(cap, (per_req - request_time_s(c, user_tokens, output_tokens)) * c.prefill_tok_s)))
    system_tokens = min(system_tokens, cap)
    ctx.say(f"{NAME}: {system_tokens}-token system prompt, {groups} × (1 cold + {repeats} repeats), "
            f"{user_tokens}-token user turns")
    before = await _scrape_counters(ctx)
    await ctx.send((await ctx.prompt(user_tokens)).request(output_tokens), NAME, phase="warmup")
    for i in range(3):
        await ctx.send((await ctx.prompt(user_tokens)).request(output_tokens), NAME, phase="short", i=i)
    for g in range(groups):
        if g and ctx.over():
            break
        sysp = await ctx.prompt(system_tokens)
        for i in range(1 + repeats):
            if i > 1 and ctx.over():
                break
            req = join_prompts(sysp, await ctx.prompt(user_tokens))
            req.max_tokens = output_tokens
            await ctx.send(req, NAME, phase="cold" if i == 0 else "repeat", group=g, i=i, system_tokens=system_tokens)
    after = await _scrape_counters(ctx)
    delta = metrics_delta(before, after) if before and after else {}
    params = {"system_tokens": system_tokens, "user_tokens": user_tokens, "repeats": repeats, "groups": groups,
              "output_tokens": output_tokens, "budget_s": budget_s}
    return analyze(ctx.records, ctx.info(NAME, started, params), metrics_delta=delta)


_CACHE_COUNTERS = ("prefix_cache_hits", "prefix_cache_queries", "prompt_tokens_cached")


async def _scrape_counters(ctx: RunContext) -> dict[str, float]:
    if not ctx.facts.metrics:
        return {}
    from phasescope.experiments.context import scrape_snapshot

    snap = await scrape_snapshot(ctx)
    if snap is None:
        return {}
    return {k: sum(snap.counters[k].values()) for k in _CACHE_COUNTERS if k in snap.counters}


#: explain's prefix-cache (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.15, run=lambda ctx, budget_s, suite: run(ctx, budget_s),
                      analyze=analyze, view=view.prefix_cache, rule=rules.PREFIX_CACHE)
