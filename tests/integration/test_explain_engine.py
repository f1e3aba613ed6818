"""The seed's claims, reproduced on the real embedded llama-server (Gemma 3 270M on this CPU):
TTFT grows with the prompt many times more than a decode step does; a shared system prompt is cached;
decode slows as the context fills; batching raises throughput and p99 ITL.

Sizes are fixed (not budget-scaled) and small so the file stays short on a 2-core machine;
decode speeds are the server's own timings (llama.cpp ``timings``), which leave HTTP out.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest

from phasescope.target import resolve
from phasescope.diagnose import diagnose
from phasescope.experiments import batching, context_fill, prefix_cache, prompt_scaling
from phasescope.experiments.context import RunContext, calibrate, discover_facts, experiment_session

pytestmark = pytest.mark.engine


def run_on(url: str, body: Callable[[RunContext], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        target, det = await resolve(url)
        async with experiment_session() as session:
            facts = await discover_facts(session, target, props=det.props)
            ctx = RunContext(target=target, session=session, facts=facts)
            try:
                await calibrate(ctx)
                return await body(ctx)
            finally:
                await ctx.close()

    return asyncio.run(go())


def step_growth(r) -> float:
    """How many times longer a decode step is at the longest prompt than at the shortest."""
    return 100.0 / (100.0 + r.decode_change_pct)


def test_ttft_grows_with_the_prompt_and_decode_changes_far_less(engine):
    # The seed's claim is relative: prefill (TTFT) pays for every prompt token, a decode step only
    # attends over them. On a GPU a step hardly moves; on this 2-core CPU decode is compute-bound
    # and a step at 1024 tokens is 15-40 % dearer than at 32 (so ``decode_flat``, |change| <= 25 %,
    # sits on its threshold here and is not asserted). What must hold on any machine: TTFT grows at
    # least 4x more than the step does. Decode on a shared box swings with other processes' load, so
    # the better of two attempts is checked (each already the best of 3 repetitions per length).
    attempts = []
    for _ in range(2):
        r = run_on(engine.url, lambda ctx: prompt_scaling.run(ctx, 120, n_max=1024, steps=4, reps=3, output_tokens=24))
        attempts.append(r)
        if (r.ttft_grows is True and r.decode_change_pct is not None and r.ttft_growth_x
                and r.ttft_growth_x - 1 >= 4 * (step_growth(r) - 1)):
            break
    # Every claim is drawn from intervals (issue 29): on a loaded box a repeat stalled 2x makes its point
    # unstable and the experiment says "cannot tell" rather than a growth it cannot prove. That is right,
    # not a failure; what must never happen is a wrong claim, and a claim made must hold.
    for x in attempts:
        assert x.ttft_grows is not False, [(p.prompt_tokens, p.ttft_min_s) for p in x.points]
        if x.ttft_grows is None:
            assert x.notes or x.info.warnings, "a 'cannot tell' names its reason"
    claimed = [x for x in attempts if x.ttft_grows is True]
    if not claimed:
        return
    r = min(claimed, key=lambda x: abs(x.decode_change_pct if x.decode_change_pct is not None else 1e9))
    assert r.ttft_growth_x > 3, [(p.prompt_tokens, p.ttft_min_s) for p in r.points]
    assert r.fit is not None and r.fit.b_s_per_token > 0 and r.prefill_tok_s > 10
    assert r.decode_source in ("gaps", "server")
    if r.decode_change_pct is None:  # decode's own interval could not be read: no decode claim to check
        return
    assert r.ttft_growth_x - 1 >= 4 * (step_growth(r) - 1), [
        (x.ttft_growth_x, x.decode_change_pct, [(p.prompt_tokens, p.decode_step_s) for p in x.points]) for x in attempts]
    # the sentence explain prints states the same numbers it was judged on
    cause = diagnose({"prompt-scaling": r}, engine="llamacpp").get("prompt-cost").cause
    assert f"{r.decode_change_pct:+.0f} %" in cause, cause


def test_shared_system_prompt_is_cached(engine):
    r = run_on(engine.url, lambda ctx: prefix_cache.run(ctx, 90, system_tokens=512, repeats=3, groups=2))
    # the truth is the server's own counter (timings.cache_n), which load cannot change
    assert r.server.says_cached is True
    assert r.server.cached_tokens_repeat >= 0.9 * 512
    # the timing verdict is drawn from intervals: right, or "cannot tell" when a stalled cold request
    # makes them overlap on a loaded box (issue 29) -- never "no cache"
    assert r.cache_detected is not False, r.reason
    if r.cache_detected is None:  # "cannot tell", or the system prompt's cost lost in a loaded box's noise
        assert "cannot tell" in r.reason or "noise" in r.reason, r.reason
        return
    assert r.agrees_with_server is True
    assert "prefix-cache-working" in diagnose({"prefix-cache": r}, engine="llamacpp").ids()


def test_decode_slows_as_the_context_fills(engine):
    # the shared engine's slots hold 4096 tokens each: the experiment fills 80 % of one (3,244 tokens); an
    # engine of its own with an 8192-token slot filled to 6,000 took 41 s against 28 s here, for the same
    # assertions (the claim is drawn from intervals, and "cannot tell" must say why)
    r = run_on(engine.url, lambda ctx: context_fill.run(ctx, 240, steps=4, reps=3, output_tokens=32))
    pts = [(p.context_tokens, p.per_token_s, p.server_decode_tok_s) for p in r.points]
    # the points are sized to the time left: on a loaded box (two clean-clone runs side by side) the last
    # one reached 4,623 of its 6,000 tokens, and decode steps swung with the load so that the longest
    # context read faster than the shortest: the claim is drawn from intervals, never "flat" here
    assert r.points[-1].context_tokens > 2000, pts
    assert r.slows is not False, (r.reason, pts)
    if r.slows is None:
        assert r.reason, pts  # "cannot tell" names its reason
        return
    assert r.per_token_s_per_ctx_token > 0, pts
    assert r.slowdown_pct > 0, pts


def test_batching_raises_throughput_and_itl(engine):
    # Another process on a 2-core box can stall a single stream for seconds, which only ever
    # makes a level look slower. So where the first run does not show both effects, the experiment
    # runs once more and each level keeps its better figures (highest throughput, lowest median ITL) —
    # the same rule for every level. A quiet machine shows both at once and runs it once (10 s saved).
    # With both cores kept busy in bursts (1 s on, 1 s off) a level can run inside a burst and the next outside
    # one: a clean-clone `make test` beside two spinners read a 60 ms median gap at 1 stream against 37 ms at 4.
    # The physics is asserted where the host's own CPU accounting (phasescope.measure.host) saw no other work;
    # beside it, only that explain's finding says what the levels show.
    from phasescope.measure.host import HostSampler, judge

    runs: list[dict[int, Any]] = []
    busy = []
    for _ in range(2):
        host = HostSampler(engine.url).start()
        try:
            r = run_on(engine.url, lambda ctx: batching.run(ctx, 240, prompt_tokens=32, output_tokens=32,
                                                            per_worker=2))
        finally:
            busy.append(any(w.kind == "host_busy" for w in judge(host.stop())))
        by_c = {lv.concurrency: lv for lv in r.levels}
        assert set(by_c) == {1, 2, 4}  # bounded by the 4 slots /props reports
        assert r.max_concurrency_bound == 4 and "total_slots" in (r.bound_source or "")
        runs.append(by_c)
        tput = {c: max(run[c].output_tok_s for run in runs) for c in (1, 4)}
        # the typical token gap: a stall of another process lands in one level's p99 (0.39 s at 1 stream
        # against 0.07 s at 4 on a loaded host), but not in its median
        p50 = {c: min(run[c].itl_p50_s for run in runs) for c in (1, 4)}
        if tput[4] > tput[1] and p50[4] > p50[1]:
            break
    # How much 4 streams gain depends on which roof binds on this CPU: 1.2-2x where memory binds,
    # barely more than 1x where the 2 cores' compute binds (CI measured 1.15x). The physics that
    # holds on every host is that 4 streams sharing each weight read never deliver less in total.
    if not any(busy):
        assert tput[4] > tput[1], tput
        assert p50[4] > p50[1], p50  # each step serves 4 sequences, so each of them waits longer per token
    # ... and whatever the gain, explain's batching finding must say what the levels of a run show
    diag = diagnose({"batching": r}, engine="llamacpp")
    ids = diag.ids()
    gain = {lv.concurrency: lv.output_tok_s / r.levels[0].output_tok_s for lv in r.levels}
    if "batching-no-gain" in ids:
        assert r.knee_concurrency == 1 and max(gain.values()) < batching.KNEE_GAIN ** 2, (ids, gain)
    if "batching-scales" in ids:
        assert r.knee_reached is False and gain[4] >= batching.KNEE_GAIN, (ids, gain)
    assert {"batching-no-gain", "batching-knee", "batching-scales"} & set(ids) or \
        any(u.id == "batching" for u in diag.undecided), (ids, diag.undecided)
