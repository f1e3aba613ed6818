"""``prefill-interference``: what a long prompt arriving mid-generation does to running streams.

k streams decode steadily; once they are going, one request with a long prompt is injected. An
engine that prefills the whole prompt in one step stalls every running stream for about the whole
prefill; chunked prefill (vLLM ``--max-num-batched-tokens``, llama.cpp ``-b``) mixes the prompt into
decode steps in pieces, so the streams slow down but keep receiving tokens.

From the streams' token timestamps (per event gap, first gap excluded):

* ``itl_baseline_s`` — median gap before the injection was sent (median over streams).
* ``itl_max_during_s`` — the longest gap overlapping [injection sent, its first token + 3 baseline gaps].
* ``spike_x`` = itl_max_during / baseline; ``stall_s`` = itl_max_during − baseline.
* ``extra_delay_s`` — Σ (gap − baseline)⁺ in that window, median over streams: total delay added.
* ``spike_duration_s`` — from the start of the first to the end of the last gap above 2× baseline
  in the window (stream with the longest gap).
* ``stall_share`` = stall_s / injected TTFT: ≈ 1 → streams waited out the whole prefill (no
  chunking); ≪ 1 → the prefill was split and streams kept going.

``interference`` is ``True`` when spike_x ≥ 3 and the stall ≥ 30 ms; ``False`` when spike_x < 1.5
although the injected prefill lasted ≥ 5 baseline gaps (a stall would have shown); else ``None``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from typing import Sequence

from phasescope.experiments.common import ExperimentInfo, finite, med, ok, prompt_tokens_of, select
from phasescope.measure import derive
from phasescope.measure.records import RequestRecord


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "prefill-interference"
SPIKE_MIN_X = 3.0
STALL_MIN_S = 0.03
NO_SPIKE_MAX_X = 1.5
VISIBLE_PREFILL_GAPS = 5.0


@dataclass
class InterferenceResult:
    info: ExperimentInfo
    n_streams: int = 0
    injected_prompt_tokens: int | None = None
    injected_ttft_s: float | None = None
    itl_baseline_s: float | None = None
    itl_max_during_s: float | None = None
    spike_x: float | None = None
    stall_s: float | None = None
    extra_delay_s: float | None = None
    spike_duration_s: float | None = None
    stall_share: float | None = None
    interference: bool | None = None
    chunked_prefill_likely: bool | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    name: str = NAME


def _gaps(r: RequestRecord) -> list[tuple[int, int]]:
    ts = [e.t_ns for e in r.token_events()]
    return list(zip(ts, ts[1:]))[1:]  # (start, end) ns; first gap excluded (may hold queueing)


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None) -> InterferenceResult:
    info = info or ExperimentInfo(name=NAME)
    res = InterferenceResult(info=info)
    streams = ok(select(records, NAME, phase="stream"))
    injs = ok(select(records, NAME, phase="inject"))
    res.n_streams = len(streams)
    if not streams or not injs:
        res.reason = "no successful streams or injected request"
        return res
    inj = injs[0]
    res.injected_prompt_tokens = prompt_tokens_of(inj)
    res.injected_ttft_s = derive.ttft_s(inj)
    t0 = inj.t_start_ns
    t_first = derive.first_token_ns(inj) or inj.t_done_ns or t0
    baselines, maxes, extras = [], [], []
    per_stream: list[tuple[float, list[tuple[int, int]], float]] = []
    ended_early = 0
    for r in streams:
        g = _gaps(r)
        pre = [(b - a) / 1e9 for a, b in g if b <= t0]
        if len(pre) < 3:
            continue
        base = float(med(pre))  # type: ignore[arg-type]
        t_end = t_first + int(3 * base * 1e9)
        win = [(a, b) for a, b in g if b > t0 and a < t_end]
        if not win:
            continue
        if g[-1][1] < t_first:
            ended_early += 1
        mx = max((b - a) / 1e9 for a, b in win)
        baselines.append(base)
        maxes.append(mx)
        extras.append(sum(max(0.0, (b - a) / 1e9 - base) for a, b in win))
        per_stream.append((mx, win, base))
    if not baselines:
        res.reason = "the streams had too few tokens before/around the injection to measure"
        return res
    if ended_early:
        res.notes.append(f"{ended_early} stream(s) ended before the injected prefill finished; the stall is a lower bound")
    res.itl_baseline_s = med(baselines)
    res.itl_max_during_s = max(maxes)
    res.extra_delay_s = med(extras)
    base = res.itl_baseline_s or 0.0
    res.spike_x = res.itl_max_during_s / base if base > 0 else None
    res.stall_s = res.itl_max_during_s - base
    mx, win, b = max(per_stream, key=lambda x: x[0])
    hi = [(a, e) for a, e in win if (e - a) / 1e9 > 2 * b]
    res.spike_duration_s = (hi[-1][1] - hi[0][0]) / 1e9 if hi else 0.0
    if res.injected_ttft_s:
        res.stall_share = res.stall_s / res.injected_ttft_s
    visible = res.injected_ttft_s is not None and base > 0 and res.injected_ttft_s >= VISIBLE_PREFILL_GAPS * base
    if res.spike_x is not None and res.spike_x >= SPIKE_MIN_X and res.stall_s >= STALL_MIN_S:
        res.interference = True
        res.reason = (f"running streams paused {res.stall_s * 1e3:.0f} ms ({res.spike_x:.1f}× their usual gap) "
                      f"while a {res.injected_prompt_tokens}-token prompt was prefilled")
        if res.stall_share is not None:
            res.chunked_prefill_likely = res.stall_share < 0.5
    elif res.spike_x is not None and res.spike_x < NO_SPIKE_MAX_X and visible:
        res.interference = False
        res.reason = (f"the {res.injected_ttft_s * 1e3:.0f} ms prefill left running streams' gaps within "
                      f"{res.spike_x:.2f}× of normal")
    elif not visible:
        res.reason = "the injected prefill was too short compared with a decode gap to expose a stall"
    else:
        res.reason = f"gaps rose {res.spike_x:.1f}× — between clearly none and clearly a stall"
    if finite([res.injected_ttft_s]) == []:
        res.notes.append("the injected request gave no first token")
    return res


async def run(ctx: RunContext, budget_s: float, *, streams: int | None = None, inject_tokens: int | None = None,
              stream_prompt_tokens: int = 32) -> InterferenceResult:
    """k streams (≤ slots − 1, so the injected request gets a slot of its own), then the injection."""
    import asyncio
    import math
    import time

    started = time.time()
    c = ctx.calib
    assert c is not None, "calibrate first"
    slots = ctx.facts.slots
    if slots == 1:
        res = InterferenceResult(info=ctx.info(NAME, started, {}))
        res.info.skipped = "the server has one slot: an injected request would queue, not interfere"
        res.reason = res.info.skipped
        return res
    k = streams or (min(3, slots - 1) if slots else 3)
    gap = max(1.0, k / 2) / c.decode_tok_s
    if inject_tokens is None:
        t_inj = min(max(25 * gap, 0.3), 0.35 * budget_s)
        inject_tokens = int(t_inj * c.prefill_tok_s)
    inject_tokens = max(64, min(inject_tokens, ctx.ctx_limit() - 16, 4096))
    t_inj = inject_tokens / c.prefill_tok_s
    pre_s = c.overhead_s + k * stream_prompt_tokens / c.prefill_tok_s + 15 * gap
    total = pre_s + t_inj + 15 * gap
    m = int(math.ceil(1.3 * total / gap))
    m = max(40, min(m, ctx.ctx_limit() - stream_prompt_tokens - 8))
    ctx.say(f"{NAME}: {k} streams of {m} tokens, a {inject_tokens}-token prompt injected after ≈{pre_s:.1f} s")
    sp = [await ctx.prompt(stream_prompt_tokens) for _ in range(k)]
    ip = await ctx.prompt(inject_tokens)
    base = await _generated_now(ctx)
    t_go = time.monotonic()
    tasks = [asyncio.create_task(ctx.send(p.request(m), NAME, phase="stream", stream=i)) for i, p in enumerate(sp)]
    # inject once the streams are visibly decoding (server progress), else after the calibrated time
    want = k * 15
    while time.monotonic() - t_go < 4 * pre_s + 5:
        await asyncio.sleep(0.1)
        now = await _generated_now(ctx)
        if now is None or base is None:
            if time.monotonic() - t_go >= pre_s:
                break
        elif now - base >= want:
            break
    pre_s = time.monotonic() - t_go
    inj = asyncio.create_task(ctx.send(ip.request(4, cache_prompt=False), NAME, phase="inject"))
    await asyncio.gather(inj, *tasks)
    params = {"streams": k, "stream_tokens": m, "inject_tokens": inject_tokens, "inject_after_s": pre_s,
              "budget_s": budget_s}
    return analyze(ctx.records, ctx.info(NAME, started, params))


async def _generated_now(ctx: RunContext) -> float | None:
    """Tokens the server has generated so far: llama.cpp ``/slots`` (Σ ``n_decoded`` of busy
    slots), else the ``generation_tokens`` counter in /metrics; None when neither says."""
    import aiohttp

    if ctx.target.engine == "llamacpp":
        try:
            async with ctx.session.get(ctx.target.base_url + "/slots", headers=ctx.target.headers(),
                                       timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    slots = await r.json(content_type=None)
                    return float(sum(int((s.get("next_token") or [{}])[0].get("n_decoded", 0) or 0)
                                     for s in slots if isinstance(s, dict) and s.get("is_processing")))
        except (aiohttp.ClientError, ValueError, TimeoutError, IndexError, AttributeError):
            pass
    if ctx.facts.metrics:
        from phasescope.experiments.context import counter, scrape_snapshot

        snap = await scrape_snapshot(ctx)
        return counter(snap, "generation_tokens") if snap is not None else None
    return None

