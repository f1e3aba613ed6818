"""``prefill-interference``: what a long prompt arriving mid-generation does to running streams.

k streams decode steadily; once every one of them has received ``PRE_TOKENS`` tokens — the
client's own view of the streams, read from the records as their events arrive, so it works on
any server and at any speed (no ``/slots``, no /metrics needed) — one request with a long prompt
is injected. Once its first token is in and the streams have run ``POST_GAPS`` more gaps, the
streams are stopped (records kept, ``error_kind`` ``stopped_by_client``), so stream lengths need
no guess. Sizes come from the calibration: the injected prompt is long enough that its prefill
lasts ≥ ``TARGET_PREFILL_GAPS`` decode gaps (at least ``MIN_PREFILL_S``).

An engine that prefills the whole prompt in one step stalls every running stream for about the
whole prefill; chunked prefill (vLLM ``--max-num-batched-tokens``, llama.cpp ``-b``) mixes the
prompt into decode steps in pieces, so the streams slow down but keep receiving tokens.

From the streams' token timestamps (per event gap, first gap excluded):

* ``itl_baseline_s`` — median gap before the injection was sent (median over streams), with
  ``itl_baseline_s_ci``: the 95 % interval of the median of every stream's gaps before it (``itl_baseline_n``
  gaps), and ``spike_x_ci`` = itl_max_during ÷ that interval's ends (issue 29: the explain rule claims a
  stall only when the whole interval lies at or above ``SPIKE_MIN_X``);
  ``itl_quiet_max_s`` — the longest gap before it (how long gaps get without any injection).
* ``injected_prefill_s`` — the injected TTFT minus the calibrated fixed overhead.
* ``itl_max_during_s`` — the longest gap the injected prefill could hold: one that ends after the
  injection was sent and starts before its first token. A gap that starts later is decode beside
  the injected prompt's longer context (slower where attention costs), not prefill.
* ``itl_second_during_s`` — each stream's second-longest gap in that window, median over streams.
* ``spike_x`` = itl_max_during / baseline; ``stall_s`` = itl_max_during − baseline;
  ``stall_share`` = itl_max_during / injected_prefill.
* ``tokens_during_prefill`` — tokens each stream received in [first token − injected_prefill,
  first token] (median over streams): ≈ 0 when the prefill ran as one step.
* ``client_stall_s`` — how long the client's own event loop could not run while the streams did
  (:class:`~phasescope.experiments.common.ClientStalls`: a GC pause, a descheduled process or VM).
  A token read as the client came out of a stall may have arrived at any time in it, so such a gap
  (and the injected TTFT, when its first token was read so) counts only up to the stall's start: a
  stalled client must not read as a stalled server, nor hide a server that was silent anyway.

``interference`` is ``True`` (not chunked) when the longest gap covers ≥ half the prefill, is
≥ 3× the usual gap and ≥ 30 ms (a few tokens at the window's edges do not matter: the prefill
window is TTFT − overhead, which on a busy host also holds waiting for the running batch); ``True`` (chunked, ``chunked_prefill_likely``) when streams kept
receiving tokens but gaps still spiked ≥ 3× and ≥ 1.5× the quiet maximum, at least twice in each
stream (``itl_second_during_s``: a chunked prefill stalls the streams at every chunk, a hiccup once); ``False`` when the
streams kept receiving tokens and no gap exceeded a quarter of a prefill that lasted ≥ 5 usual
gaps; else ``None`` with the reason (the injected request queued, the prefill was too short to
show, the streams ended too soon, …).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from typing import Sequence

from phasescope.diagnose.thresholds import SPIKE_MIN_X  # the rule claims a stall by it too
from phasescope.experiments.common import ClientStalls, ExperimentInfo, med, ok, prompt_tokens_of, select, read_late_ns
from phasescope.measure import derive
from phasescope.measure.interval import median_interval
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec


if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "prefill-interference"
STALL_MIN_S = 0.03
VISIBLE_PREFILL_GAPS = 5.0
#: a stall covers at least this share of the injected prefill; no stall: no gap above NO_STALL_SHARE of it
STALL_SHARE = 0.5
NO_STALL_SHARE = 0.25
#: streams that received at least this many tokens during the prefill kept going (chunked)
KEPT_GOING_TOKENS = 3
#: tokens every stream must have before the injection (a baseline of PRE_TOKENS − 2 gaps)
PRE_TOKENS = 14
POST_GAPS = 12
TARGET_PREFILL_GAPS = 20
MIN_PREFILL_S = 0.1
STOPPED = "stopped_by_client"


@dataclass
class InterferenceResult:
    info: ExperimentInfo
    n_streams: int = 0
    injected_prompt_tokens: int | None = None
    injected_ttft_s: float | None = None
    itl_baseline_s: float | None = None
    itl_baseline_s_ci: list[float] | None = None
    itl_baseline_n: int = 0
    itl_max_during_s: float | None = None
    #: each stream's second-longest gap in the same window (median over streams): a chunked prefill
    #: stalls the streams once per chunk, a hiccup of the host once
    itl_second_during_s: float | None = None
    spike_x: float | None = None
    spike_x_ci: list[float] | None = None
    stall_s: float | None = None
    extra_delay_s: float | None = None
    spike_duration_s: float | None = None
    stall_share: float | None = None
    injected_prefill_s: float | None = None
    itl_quiet_max_s: float | None = None
    tokens_during_prefill: float | None = None
    #: the client's own stalls while the streams ran (s in all, and the longest; see read_late_ns)
    client_stall_s: float | None = None
    client_stall_max_s: float | None = None
    interference: bool | None = None
    chunked_prefill_likely: bool | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    name: str = NAME


def _gaps(r: RequestRecord) -> list[tuple[int, int]]:
    ts = [e.t_ns for e in r.token_events()]
    return list(zip(ts, ts[1:]))[1:]  # (start, end) ns; first gap excluded (may hold queueing)


def _streams(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in select(records, NAME, phase="stream") if r.ok or r.error_kind == STOPPED]


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None,
            overhead_s: float = 0.0, waiting_seen: float | None = None,
            client_stalls_ns: Sequence[Sequence[int]] | None = None) -> InterferenceResult:
    """``overhead_s``: the calibrated fixed TTFT overhead (taken off the injected TTFT);
    ``waiting_seen``: requests /metrics showed waiting right after the injection (None: not read);
    ``client_stalls_ns``: the client's stalled intervals (default: ``info.params["client_stalls_ns"]``,
    where :func:`run` keeps them, so a saved result re-analyses the same)."""
    info = info or ExperimentInfo(name=NAME)
    res = InterferenceResult(info=info)
    stalls = list(client_stalls_ns if client_stalls_ns is not None else (info.params.get("client_stalls_ns") or []))

    def dur(a: int, b: int) -> float:
        """A gap in s, net of the time its last token may have waited for the stalled client."""
        return (b - a - read_late_ns(a, b, stalls)) / 1e9
    streams = _streams(records)
    injs = ok(select(records, NAME, phase="inject"))
    res.n_streams = len(streams)
    if info.skipped:
        res.reason = info.skipped
        return res
    if not streams or not injs:
        res.reason = "no successful streams or injected request"
        return res
    inj = injs[0]
    res.injected_prompt_tokens = prompt_tokens_of(inj)
    res.injected_ttft_s = derive.ttft_s(inj)
    t0 = inj.t_start_ns
    t_first = derive.first_token_ns(inj) or inj.t_done_ns or t0
    if res.injected_ttft_s is not None:
        res.injected_prefill_s = max(1e-4, dur(t0, t_first) - max(0.0, overhead_s))
    pre_s = res.injected_prefill_s or 0.0
    baselines, maxes, quiet, during, extras, seconds = [], [], [], [], [], []
    pooled: list[float] = []  # every stream's gaps before the injection: the baseline gap distribution
    per_stream: list[tuple[float, list[tuple[int, int]], float]] = []
    ended_early = 0
    for r in streams:
        g = _gaps(r)
        pre = [dur(a, b) for a, b in g if b <= t0]
        if len(pre) < 3:
            continue
        base = float(med(pre))  # type: ignore[arg-type]
        win = [(a, b) for a, b in g if b > t0 and a < t_first]
        if not win:
            continue
        if g[-1][1] < t_first:
            ended_early += 1
        ts = [e.t_ns for e in r.token_events()]
        during.append(sum(1 for t in ts if t_first - int(pre_s * 1e9) <= t < t_first))
        baselines.append(base)
        pooled.extend(pre)
        quiet.append(max(pre))
        maxes.append(max(dur(a, b) for a, b in win))
        seconds.append(sorted(dur(a, b) for a, b in win)[-2] if len(win) >= 2 else 0.0)
        extras.append(sum(max(0.0, dur(a, b) - base) for a, b in win))
        per_stream.append((maxes[-1], win, base))
    if not baselines:
        res.reason = (f"the streams had too few tokens before the injection to measure (need {PRE_TOKENS}; "
                      f"a longer --budget gives them more)")
        return res
    if ended_early:
        res.notes.append(f"{ended_early} stream(s) ended before the injected prefill finished; the stall is a lower bound")
    s0 = min(r.t_start_ns for r in streams)
    s1 = max([derive.last_token_ns(r) or r.t_start_ns for r in streams] + [t_first])
    spans = [min(s1, int(e)) - max(s0, int(b)) for b, e in stalls if min(s1, int(e)) > max(s0, int(b))]
    res.client_stall_s = sum(spans) / 1e9
    res.client_stall_max_s = max(spans) / 1e9 if spans else 0.0
    if spans:
        res.notes.append(f"the client's own event loop stalled {res.client_stall_s * 1e3:.0f} ms in all while the streams "
                         f"ran (longest {res.client_stall_max_s * 1e3:.0f} ms): a gap whose token was read as the client "
                         f"resumed counts only up to the stall's start")
    res.itl_baseline_s = med(baselines)
    res.itl_quiet_max_s = max(quiet)
    res.itl_max_during_s = max(maxes)
    res.itl_second_during_s = med(seconds)
    res.tokens_during_prefill = med(during)
    res.extra_delay_s = med(extras)
    base = res.itl_baseline_s or 0.0
    res.spike_x = res.itl_max_during_s / base if base > 0 else None
    b_iv = median_interval([x for x in pooled if x > 0])
    if b_iv is not None and b_iv.n >= 2 and b_iv.low > 0 and base > 0:
        lo, hi = min(b_iv.low, base), max(b_iv.high, base)
        res.itl_baseline_s_ci, res.itl_baseline_n = [lo, hi], b_iv.n
        res.spike_x_ci = [res.itl_max_during_s / hi, res.itl_max_during_s / lo]
    res.stall_s = res.itl_max_during_s - base
    mx, win, b = max(per_stream, key=lambda x: x[0])
    hi = [(a, e) for a, e in win if dur(a, e) > 2 * b]
    res.spike_duration_s = (hi[-1][1] - hi[0][0]) / 1e9 if hi else 0.0
    if res.injected_prefill_s:
        res.stall_share = res.itl_max_during_s / res.injected_prefill_s
    last_stream_token = max((derive.last_token_ns(r) or 0) for r in streams)
    if res.injected_ttft_s is None:
        res.reason = "the injected request gave no first token"
        return res
    if waiting_seen:
        res.reason = (f"the injected request queued ({waiting_seen:.0f} waiting in /metrics): the server had no free "
                      f"slot for it next to {len(streams)} streams")
        return res
    if last_stream_token and last_stream_token < t_first:
        if (res.tokens_during_prefill or 0) >= KEPT_GOING_TOKENS:
            res.reason = (f"the streams kept receiving tokens ({res.tokens_during_prefill:.0f} each) but all of them "
                          f"ended before the injected request's first token, {res.injected_ttft_s * 1e3:.0f} ms after it "
                          f"was sent: the prefill outlasted them, so whether it stalled them at its end is not seen")
        else:
            res.reason = ("every stream had ended before the injected request's first token: it probably waited for a "
                          "slot, so its prefill never overlapped the streams")
        return res
    visible = base > 0 and pre_s >= VISIBLE_PREFILL_GAPS * base
    kept_going = (res.tokens_during_prefill or 0) >= KEPT_GOING_TOKENS
    spiked = (res.spike_x or 0) >= SPIKE_MIN_X and res.stall_s >= STALL_MIN_S
    if not visible:
        res.reason = (f"the injected prefill ({pre_s * 1e3:.0f} ms) was under {VISIBLE_PREFILL_GAPS:g} decode gaps "
                      f"({base * 1e3:.1f} ms each): too short to expose a stall")
    elif spiked and (res.stall_share or 0) >= STALL_SHARE and (
            not kept_going or res.itl_max_during_s >= 1.5 * res.itl_quiet_max_s):
        # one gap held most of the prefill: frozen (tokens at the window's edges are fine when that
        # gap stands out from every gap before the injection, so it is no hiccup of the host)
        res.interference, res.chunked_prefill_likely = True, False
        res.reason = (f"running streams paused {res.stall_s * 1e3:.0f} ms ({res.spike_x:.1f}× their usual gap) "
                      f"while a {res.injected_prompt_tokens}-token prompt was prefilled in {pre_s * 1e3:.0f} ms")
    elif kept_going and spiked and res.itl_max_during_s >= 1.5 * res.itl_quiet_max_s and not (
            (res.itl_second_during_s or 0) < SPIKE_MIN_X * base or (res.itl_second_during_s or 0) < 1.5 * res.itl_quiet_max_s):
        # split into chunks, each of which stalls the streams: a long gap at every chunk, so at least two
        # in each stream (one long gap in all streams at once is a hiccup of the host, not the prefill)
        res.interference, res.chunked_prefill_likely = True, True
        res.reason = (f"streams kept receiving tokens ({res.tokens_during_prefill:.0f} each) during the "
                      f"{pre_s * 1e3:.0f} ms prefill, but their gaps rose to {res.spike_x:.1f}× normal")
    elif kept_going and (res.stall_share or 0) <= NO_STALL_SHARE:
        res.interference, res.chunked_prefill_likely = False, True
        res.reason = (f"the {pre_s * 1e3:.0f} ms prefill left running streams receiving tokens "
                      f"({res.tokens_during_prefill:.0f} each), no gap above {res.itl_max_during_s * 1e3:.0f} ms "
                      f"({res.spike_x:.2f}× normal)")
    else:
        res.reason = (f"the longest gap ({res.itl_max_during_s * 1e3:.0f} ms, {res.spike_x:.1f}× normal) covered "
                      f"{(res.stall_share or 0):.0%} of the {pre_s * 1e3:.0f} ms prefill with "
                      f"{res.tokens_during_prefill:.0f} tokens per stream during it: between clearly none and clearly a stall")
    return res


async def run(ctx: RunContext, budget_s: float, *, streams: int | None = None, inject_tokens: int | None = None,
              stream_prompt_tokens: int = 32) -> InterferenceResult:
    """k streams (≤ slots − 1, so the injected request gets a slot of its own), then the injection
    once the client has seen every stream decode (see the module docstring)."""
    import asyncio
    import time

    from phasescope.experiments.context import LIVE, live_tokens

    started = time.time()
    c = ctx.calib
    assert c is not None, "calibrate first"
    ctx.start_clock(budget_s)
    slots = ctx.facts.slots
    if slots == 1:
        res = InterferenceResult(info=ctx.info(NAME, started, {}))
        res.info.skipped = "the server has one slot: an injected request would queue, not interfere"
        res.reason = res.info.skipped
        return res
    k = streams or (min(3, slots - 1) if slots else 3)
    gap = 1.0 / c.decode_tok_s
    if inject_tokens is None:
        t_target = max(TARGET_PREFILL_GAPS * gap, MIN_PREFILL_S)
        t_target = min(t_target, 0.3 * budget_s)
        inject_tokens = int(t_target * c.prefill_tok_s)
    inject_tokens = max(64, min(inject_tokens, ctx.ctx_limit() - 16, 8192))
    t_inj = inject_tokens / c.prefill_tok_s
    # the streams are stopped once the measurement is done; their length only has to outlast it
    # even if a chunked prefill takes many times the one-step estimate (small chunks beside running
    # decodes: 5 prompt tokens a step next to 3 streams made it 9x in a test), up to the 10x the
    # wait for the injected first token allows
    need = PRE_TOKENS + POST_GAPS + 10 * t_inj / gap + 16
    m = int(min(max(64, need * 1.5), ctx.ctx_limit() - stream_prompt_tokens - 8,
                max(64, PRE_TOKENS + POST_GAPS + 2 * t_inj / gap + 16, 0.9 * budget_s / gap)))
    ctx.say(f"{NAME}: {k} streams of up to {m} tokens; a {inject_tokens}-token prompt (≈{t_inj * 1e3:.0f} ms of "
            f"prefill) once each stream has {PRE_TOKENS} tokens")
    sp = [await ctx.prompt(stream_prompt_tokens) for _ in range(k)]
    ip = await ctx.prompt(inject_tokens)
    ids = [ctx.next_id(NAME) for _ in range(k)]
    reqs = []
    for i, p in enumerate(sp):
        rq = p.request(m)
        rq.id = ids[i]
        reqs.append(rq)
    async with ClientStalls() as watch:  # the client's own stalls, from the streams' start to the last stop
        tasks = {ids[i]: asyncio.create_task(ctx.send(reqs[i], NAME, phase="stream", stream=i)) for i in range(k)}
        poll = max(0.002, min(0.05, gap / 4))
        t_go = time.monotonic()
        need_s = c.overhead_s + k * stream_prompt_tokens / c.prefill_tok_s + PRE_TOKENS * gap
        wait_max = max(3 * need_s + 1.0, min(0.6 * budget_s, 10 * need_s + 2.0))
        notes: list[str] = []
        stopped: set[str] = set()

        held: dict[str, RequestRecord] = {}

        async def stop(rid: str) -> None:
            t = tasks[rid]
            if t.done():
                return
            rec = LIVE.get(rid)
            if rec is not None:
                held[rid] = rec  # a strong reference: the cancelled send drops its own
            t.cancel()
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopped on purpose
                pass
            stopped.add(rid)

        # 1. every stream decoding, by the client's own count of the tokens received; the wait counts
        # from the streams' first token (a loaded server can take seconds to start them)
        t_seen: float | None = None
        start_max = max(wait_max, 0.5 * budget_s + 10.0)
        while True:
            now_t = time.monotonic()
            if t_seen is None and any(live_tokens(r) for r in ids):
                t_seen = now_t
            if (t_seen is None and now_t - t_go >= start_max) or (t_seen is not None and now_t - t_seen >= wait_max):
                break
            counts = [live_tokens(r) for r in ids if r not in stopped]
            if counts and min(counts) >= PRE_TOKENS:
                break
            if counts and min(counts) == 0 and max(counts) >= PRE_TOKENS + 6:
                break  # some streams decode while others have not started: the server queued them
            if any(tasks[r].done() for r in ids) or ctx.past_hard():
                break
            await asyncio.sleep(poll)
        counts = {r: live_tokens(r) for r in ids}
        running = [r for r in ids if counts[r] >= PRE_TOKENS and not tasks[r].done()]
        queued = [r for r in ids if counts[r] == 0 and not tasks[r].done()]
        waiting_seen: float | None = None
        inj_task = None
        skip = None
        if queued and running:
            # the server runs fewer requests at once than we sent: drop the queued ones, and one more
            # so the injected request finds a free slot
            for r in queued:
                await stop(r)
            notes.append(f"the server ran {len(running)} of {k} streams at once; the others were withdrawn")
            if len(running) >= 2:
                await stop(running.pop())
                notes.append("one running stream was withdrawn to leave a slot for the injected request")
                await asyncio.sleep(4 * gap + 0.02)  # the server frees the slot at its next step
            else:
                skip = (f"the server ran one request at a time ({len(queued)} of {k} streams waited): an injected "
                        f"request would queue, not interfere")
        elif not running:
            skip = (f"no stream reached {PRE_TOKENS} tokens within {wait_max:.0f} s of its first token (the calibration said "
                    f"{c.decode_tok_s:.0f} tok/s): a longer --budget or a less loaded server would let it")
        if skip is None:
            t_inj0 = time.monotonic()
            irq = ip.request(4, cache_prompt=False)
            irq.id = ctx.next_id(NAME)
            inj_task = asyncio.create_task(ctx.send(irq, NAME, phase="inject"))
            if ctx.facts.metrics:
                await asyncio.sleep(min(max(3 * gap, 0.02), 0.5 * t_inj + c.overhead_s + 0.02))
                waiting_seen = await _waiting_now(ctx)
            # 2. the injected request's first token, then POST_GAPS more gaps of the streams
            limit = max(10 * (t_inj + c.overhead_s) + 2.0, 0.5 * budget_s)
            while not inj_task.done() and live_tokens(irq.id) == 0 and time.monotonic() - t_inj0 < limit:
                if all(tasks[r].done() for r in ids) or ctx.past_hard():
                    break
                await asyncio.sleep(poll)
            t_after = time.monotonic() + POST_GAPS * gap * 1.5
            while time.monotonic() < t_after and not all(tasks[r].done() for r in ids) and not ctx.past_hard():
                await asyncio.sleep(poll)
        for r in ids:
            await stop(r)
        if inj_task is not None:
            await inj_task
    for r in ids:
        if r in stopped:
            rec = held.get(r)
            if rec is not None and rec.t_start_ns:
                rec.ok, rec.error_kind = False, STOPPED
                rec.error_message = "stopped by the client once the measurement window had passed"
                rec.t_done_ns = rec.t_done_ns or (rec.token_events()[-1].t_ns if rec.token_events() else rec.t_start_ns)
                rec.tags = {**(rec.tags or {}), **reqs[ids.index(r)].tags}
                ctx.keep(rec)
    params = {"streams": k, "stream_tokens": m, "inject_tokens": inject_tokens, "inject_after_tokens": PRE_TOKENS,
              "budget_s": budget_s, "waiting_after_injection": waiting_seen,
              "client_stalls_ns": [list(x) for x in watch.intervals_ns]}
    info = ctx.info(NAME, started, params)
    info.skipped = skip
    res = analyze(ctx.records, info, overhead_s=c.overhead_s, waiting_seen=waiting_seen)
    res.notes.extend(notes)
    return res


async def _waiting_now(ctx: RunContext) -> float | None:
    from phasescope.experiments.context import gauge, scrape_snapshot

    snap = await scrape_snapshot(ctx)
    return gauge(snap, "waiting") if snap is not None else None


#: explain's prefill-interference (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.12, run=lambda ctx, budget_s, suite: run(ctx, budget_s),
                      analyze=analyze, view=view.prefill_interference, rule=rules.INTERFERENCE)
