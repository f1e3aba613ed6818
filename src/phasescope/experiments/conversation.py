"""``conversation``: does turn N of a chat pay for turns 1…N−1 again?

One short session is replayed on the chat API (``/v1/chat/completions``, Ollama ``/api/chat``), as
a chat client sends it: a system prompt, then ``turns`` user messages, each request carrying the
whole history with the server's real reply text appended (:mod:`phasescope.load.conversation`).
Two sessions with different texts run one after the other (records tagged ``phase="turn"``,
``session``, ``turn``). Then, per turn: the prompt tokens the server counted, the cached tokens it
reported, TTFT and the decode rate.

* **History and the prefix cache.** Without a cache, TTFT grows with the history at the server's
  prefill rate. Two reference requests measure it here: fresh single-message prompts as long as the
  first and the last turn's (``phase="ref"``, never cached; each sent twice where the budget allows, the
  fastest of each length kept: a stall only adds time), ``expected slope = ΔTTFT / Δtokens``
  (calibration's ``1 / prefill_tok_s`` when a reference failed).
  The measured slope of TTFT against prompt tokens over the turns, as a share of that
  (``slope_share``), says which: ≤ :data:`CACHED_MAX_SHARE` → the history is served from the
  cache (``history_cached`` True); ≥ :data:`RECOMPUTED_MIN_SHARE` → every turn prefills it again
  (False); in between, or when the expected growth is within the noise (4 × the spread of the two
  sessions' TTFTs, floor 2 ms), cannot tell (None). The server's own count is read alongside:
  ``history_cached_share`` = Σ cached tokens ÷ Σ the previous turn's prompt tokens over turns 2…
  (≥ 0.5: cached); a disagreement is "cannot tell". A cache that
  served the early turns but not the last (``evicted_at_turn``) means the history outgrew it.
* **Sessions filling the KV pool.** With ``/metrics``, ``fill_sessions`` sessions (the server's
  slots, at most 8; 4 when it does not say) then run *concurrently* (``phase="fill"``), no more
  than it runs at once, while waiting requests and KV usage are sampled every 0.2 s. Requests that
  wait although no more are in flight than the server runs means the sessions' histories filled the
  KV pool: ``fill_queue_turn`` is the turn at which waiting first appeared (None: no queue). The
  queue must last (waiting in ≥ :data:`FILL_WAIT_SHARE_MIN` of the samples and in at least
  :data:`FILL_MIN_SAMPLES`: a lone sample caught a request between its arrival and the next scheduler
  step; and in :data:`FILL_TRANSIENT_X` × the share such waits for a step explain: sessions × the typical
  token gap ÷ the typical request time) and, where the server reports KV usage, the pool must have
  reached :data:`FILL_KV_MIN`.
* **Decode as the history grows.** The decode rate of the last turn against the first
  (``decode_slowdown_pct``), next to the bandwidth model's prediction when the model's weight and
  KV bytes are known: every step reads the weights once and the sequence's KV, so
  ``ITL ∝ W + kv·context`` (``predicted_slowdown_pct``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from phasescope.apis import registry as protocols
from phasescope.apis.base import take_reply
from phasescope.experiments.common import ExperimentInfo, finite, mad_sigma, med, ok, select
from phasescope.measure import derive
from phasescope.measure.interval import bootstrap_interval, median_interval, to_ci
from phasescope.measure.records import RequestRecord
from phasescope.diagnose import rules
from phasescope.experiments import view
from phasescope.experiments.spec import ExperimentSpec

if TYPE_CHECKING:
    from phasescope.experiments.context import RunContext

NAME = "conversation"
#: measured TTFT slope ≤ this share of a full prefill's: the history comes from the cache
CACHED_MAX_SHARE = 0.2
#: ≥ this share: the history is prefilled again every turn
RECOMPUTED_MIN_SHARE = 0.5
NOISE_K = 4.0
NOISE_FLOOR_S = 0.002
#: decode slowdown (%) from the first to the last turn worth a finding
DECODE_SLOWDOWN_MIN_PCT = 10.0
#: a queue in the fill phase lasts: waiting > 0 in at least this share of the /metrics samples, and in
#: at least FILL_MIN_SAMPLES of them (one sample catches a request between arrival and the next step)
FILL_WAIT_SHARE_MIN = 0.1
FILL_MIN_SAMPLES = 2
#: with a KV-usage gauge, a pool that peaked below this share was not what the requests waited for
FILL_KV_MIN = 0.5
#: waiting must show in at least this many times the share of samples that waits for the next scheduler
#: step alone explain (sessions × the typical token gap ÷ the typical request time)
FILL_TRANSIENT_X = 2.0


@dataclass
class TurnStat:
    turn: int
    n: int
    prompt_tokens: float | None
    cached_tokens: float | None
    ttft_s: float | None
    decode_tok_s: float | None
    #: 95 % intervals over the sessions (``measure.interval.median_interval``) and the samples' range
    ttft_s_ci: list[float] | None = None
    decode_tok_s_ci: list[float] | None = None
    decode_tok_s_range: list[float] | None = None


@dataclass
class ConversationResult:
    info: ExperimentInfo
    turns: list[TurnStat] = field(default_factory=list)
    system_tokens: int | None = None
    turn_tokens: int | None = None
    output_tokens: int | None = None
    ttft_slope_s_per_token: float | None = None
    #: 95 % bootstrap interval of that slope (the (prompt, TTFT) points resampled), over ``ttft_slope_n`` points
    ttft_slope_s_per_token_ci: list[float] | None = None
    ttft_slope_n: int = 0
    expected_slope_s_per_token: float | None = None
    slope_share: float | None = None
    expected_growth_s: float | None = None
    noise_s: float | None = None
    history_cached: bool | None = None
    server_says_cached: bool | None = None
    #: Σ cached tokens of turns 2… ÷ Σ the previous turns' prompt tokens (what the server says it reused)
    history_cached_share: float | None = None
    evicted_at_turn: int | None = None
    decode_slowdown_pct: float | None = None
    predicted_slowdown_pct: float | None = None
    fill_sessions: int | None = None
    fill_waiting_max: float | None = None
    fill_kv_usage_max: float | None = None
    fill_queue_turn: int | None = None
    fill_history_tokens: float | None = None  # Σ over the sessions of the prompt at that turn
    fill_reason: str = ""
    reason: str = ""
    name: str = NAME


def _per_turn(recs: Sequence[RequestRecord]) -> list[TurnStat]:
    by: dict[int, list[RequestRecord]] = {}
    for r in recs:
        by.setdefault(int(r.tags.get("turn", 0)), []).append(r)
    out = []
    for t in sorted(by):
        rs = by[t]
        dec = median_interval([derive.decode_tok_s(r) for r in rs])
        out.append(TurnStat(t, len(rs), med(r.prompt_tokens for r in rs), med(derive.cached_prompt_tokens(r) for r in rs),
                            med(derive.ttft_s(r) for r in rs), med(derive.decode_tok_s(r) for r in rs),
                            ttft_s_ci=to_ci(median_interval([derive.ttft_s(r) for r in rs])), decode_tok_s_ci=to_ci(dec),
                            decode_tok_s_range=[dec.min, dec.max] if dec is not None and dec.min is not None else None))
    return out


def growth_text(share: float) -> str:
    """The fit as a sentence, with the same number the evidence shows (a negative fit is no growth, not "0%")."""
    if share < 0:
        return f"TTFT did not grow with the history (fit {share:+.0%} of a full prefill of it)"
    return f"TTFT grew {share:.0%} as fast as a full prefill of the history"


def _slopes(xs: np.ndarray, ys: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``fit_linear(xs[i], ys[i]).slope`` for every row ``i`` of ``idx`` at once (least squares in closed form;
    0 where a row's x are all equal, as ``fit_linear`` says): the bootstrap's 2,000 fits took 0.17 s one by one."""
    x, y = xs[idx], ys[idx]
    dx = x - x.mean(axis=1, keepdims=True)
    sxx = (dx * dx).sum(axis=1)
    sxy = (dx * (y - y.mean(axis=1, keepdims=True))).sum(axis=1)
    flat = np.all(x == x[:, :1], axis=1) | (sxx <= 0)
    return np.where(flat, 0.0, sxy / np.where(flat, 1.0, sxx))


def analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None, *, prefill_tok_s: float | None = None,
            weight_bytes: float | None = None, kv_bytes_per_token: float | None = None) -> ConversationResult:
    info = info or ExperimentInfo(name=NAME)
    recs = ok(select(records, NAME, phase="turn"))
    res = ConversationResult(info=info)
    tags = next((r.tags for r in recs), {})
    res.system_tokens, res.turn_tokens, res.output_tokens = (tags.get("system_tokens"), tags.get("turn_tokens"),
                                                             tags.get("output_tokens"))
    res.turns = _per_turn(recs)
    pts = [(r.prompt_tokens, derive.ttft_s(r)) for r in recs if r.prompt_tokens and derive.ttft_s(r) is not None]
    if len(res.turns) < 3 or len({p for p, _ in pts}) < 3:
        res.reason = "fewer than 3 turns succeeded"
        return res
    from phasescope.measure.stats import fit_linear

    fit = fit_linear([float(p) for p, _ in pts], [float(t) for _, t in pts])
    res.ttft_slope_s_per_token = fit.slope
    xs = np.asarray([float(p) for p, _ in pts])
    ys = np.asarray([float(t) for _, t in pts])

    def _slope(idx: np.ndarray) -> float:  # the fit over a resample of the points (by index)
        i = idx.astype(int)
        return fit_linear(xs[i], ys[i]).slope

    s_iv = bootstrap_interval(list(range(len(pts))), _slope, rows=lambda idx: _slopes(xs, ys, idx.astype(int)))
    if s_iv is not None and s_iv.n >= 2:
        res.ttft_slope_s_per_token_ci, res.ttft_slope_n = to_ci(s_iv), s_iv.n
    first, last = res.turns[0], res.turns[-1]
    # noise: how much the two sessions' TTFTs of the same turn differ (robust σ), floor 2 ms
    diffs: list[float] = []
    for t in res.turns:
        ts = finite(derive.ttft_s(r) for r in recs if r.tags.get("turn") == t.turn)
        if len(ts) >= 2:
            diffs.append(ts[0] - ts[1])
    res.noise_s = max(mad_sigma(diffs) if len(diffs) >= 2 else 0.0, NOISE_FLOOR_S)
    # what the server says: later turns' cached tokens against the previous turn's prompt
    shares, cached_sum, prev_sum = [], 0.0, 0.0
    for prev, cur in zip(res.turns, res.turns[1:]):
        if cur.cached_tokens is not None and prev.prompt_tokens:
            shares.append((cur.turn, cur.cached_tokens / prev.prompt_tokens))
            cached_sum += cur.cached_tokens
            prev_sum += prev.prompt_tokens
    if shares:
        early = [s for _, s in shares[:-1]] or [shares[0][1]]
        # the share of the resent history the server served from its cache, over all turns (Σ ÷ Σ: the
        # long late turns weigh by their tokens, not one vote per turn)
        res.history_cached_share = cached_sum / prev_sum
        res.server_says_cached = res.history_cached_share >= 0.5
        if med(early) >= 0.5 and shares[-1][1] < 0.5 and len(shares) >= 2:
            res.evicted_at_turn = shares[-1][0]
    # decode as the history grows
    if first.decode_tok_s and last.decode_tok_s:
        res.decode_slowdown_pct = 100.0 * (1.0 - last.decode_tok_s / first.decode_tok_s)
    if weight_bytes and kv_bytes_per_token and first.prompt_tokens and last.prompt_tokens:
        half = (res.output_tokens or 0) / 2
        a = weight_bytes + kv_bytes_per_token * (first.prompt_tokens + half)
        b = weight_bytes + kv_bytes_per_token * (last.prompt_tokens + half)
        res.predicted_slowdown_pct = 100.0 * (1.0 - a / b)
    # each reference length's fastest TTFT: a stall only ever adds time, and one stalled long reference would
    # otherwise inflate the expected growth past the noise gate (stop 42)
    fastest: dict[int, tuple[int, float]] = {}
    for r in ok(select(records, NAME, phase="ref")):
        t = derive.ttft_s(r)
        if r.prompt_tokens and t is not None:
            key = int(r.tags.get("length") or r.prompt_tokens)
            if key not in fastest or t < fastest[key][1]:
                fastest[key] = (int(r.prompt_tokens), t)
    refs = sorted(fastest.values(), key=lambda x: x[0])
    slope = None
    if len(refs) >= 2 and refs[-1][0] > refs[0][0] and refs[-1][1] > refs[0][1]:  # type: ignore[operator]
        slope = (refs[-1][1] - refs[0][1]) / (refs[-1][0] - refs[0][0])  # type: ignore[operator]
    elif prefill_tok_s and prefill_tok_s > 0:
        slope = 1.0 / prefill_tok_s
    if slope is None or first.prompt_tokens is None or last.prompt_tokens is None:
        res.reason = "no prefill rate to compare the TTFT growth with"
        return res
    res.expected_slope_s_per_token = slope
    res.slope_share = res.ttft_slope_s_per_token / res.expected_slope_s_per_token
    res.expected_growth_s = (last.prompt_tokens - first.prompt_tokens) * slope
    if res.expected_growth_s < NOISE_K * res.noise_s:
        res.reason = (f"re-prefilling the history would add only {res.expected_growth_s * 1e3:.1f} ms by turn "
                      f"{last.turn}, within the noise ({res.noise_s * 1e3:.1f} ms); longer turns would tell")
        return res
    if res.slope_share <= CACHED_MAX_SHARE:
        res.history_cached = True
        res.reason = (f"{growth_text(res.slope_share)}: "
                      "the history is served from the prefix cache")
    elif res.slope_share >= RECOMPUTED_MIN_SHARE:
        res.history_cached = False
        res.reason = (f"TTFT grew {res.slope_share:.0%} as fast as a full prefill of the history: every turn "
                      "prefills the whole history again")
    else:
        res.reason = f"TTFT grew {res.slope_share:.0%} as fast as a full prefill: partial, cannot tell"
    if res.history_cached is not None and res.server_says_cached is not None \
            and res.history_cached != res.server_says_cached and res.evicted_at_turn is None:
        res.reason = (f"timing says the history is {'cached' if res.history_cached else 'recomputed'} ({res.reason}) "
                      f"but the server reports it {'cached' if res.server_says_cached else 'not cached'}: cannot tell")
        res.history_cached = None
    return res


def analyze_fill(res: ConversationResult, records: Sequence[RequestRecord], samples: Sequence[tuple[float, float | None,
                 float | None, int, int]], sessions: int) -> None:
    """The fill phase: ``samples`` are (t, waiting, kv usage, highest turn in flight, requests in flight)."""
    res.fill_sessions = sessions
    waits = [w for _, w, _, _, _ in samples if w is not None]
    kvs = [k for _, _, k, _, _ in samples if k is not None]
    res.fill_waiting_max = max(waits) if waits else None
    res.fill_kv_usage_max = max(kvs) if kvs else None
    if not waits:
        res.fill_reason = "no waiting-requests gauge in /metrics"
        return
    queued = [turn for _, w, _, turn, n in samples if w and w > 0 and n <= sessions]
    if not queued:
        res.fill_reason = f"no request waited with {sessions} sessions in flight"
        return
    if len(queued) < FILL_MIN_SAMPLES or len(queued) / len(waits) < FILL_WAIT_SHARE_MIN:
        # a request is "waiting" from its arrival to the scheduler's next step: one sample that caught
        # that is no queue, let alone a full pool
        res.fill_reason = (f"only {len(queued)} of {len(waits)} /metrics samples showed a waiting request with "
                           f"{sessions} sessions in flight (a request between its arrival and the next scheduler "
                           f"step), under the {FILL_WAIT_SHARE_MIN:.0%} and {FILL_MIN_SAMPLES} samples a lasting "
                           f"queue shows")
        return
    # each request waits up to a scheduler step between its arrival and admission: with a slow step and
    # short turns, sessions × step / request time of the samples catch one "waiting" with room to spare
    fill_ok = ok(select(records, NAME, phase="fill"))
    itls = [g for r in fill_ok for g in derive.itl_s(r)]
    durs = [(r.t_done_ns - r.t_start_ns) / 1e9 for r in fill_ok if r.t_done_ns and r.t_done_ns > r.t_start_ns]
    if itls and durs:
        step, t_req = float(med(itls) or 0.0), float(med(durs) or 0.0)
        transient = min(1.0, sessions * step / t_req) if t_req > 0 else 0.0
        share = len(queued) / len(waits)
        if share < FILL_TRANSIENT_X * transient:
            res.fill_reason = (f"{len(queued)} of {len(waits)} /metrics samples ({share:.0%}) showed a waiting request, "
                               f"no more than requests that each wait up to a scheduler step ({step * 1e3:.0f} ms) "
                               f"show: {sessions} sessions × {step * 1e3:.0f} ms ÷ {t_req:.2f} s a request = "
                               f"{transient:.0%} of the samples; a full pool holds them longer")
            return
    if kvs and max(kvs) < FILL_KV_MIN:
        res.fill_reason = (f"requests waited with {sessions} sessions in flight, but KV-cache usage peaked at "
                           f"{max(kvs):.0%}: the pool was not full, so something else held them")
        return
    res.fill_queue_turn = min(queued)
    fill = ok(select(records, NAME, phase="fill"))
    at = [r.prompt_tokens for r in fill if r.tags.get("turn") == res.fill_queue_turn and r.prompt_tokens]
    res.fill_history_tokens = float(sum(at)) if at else None
    res.fill_reason = (f"requests waited from turn {res.fill_queue_turn} with only {sessions} sessions in flight: "
                       "their histories filled the KV pool")


async def _fill(ctx: RunContext, n: int, turns: int, system_tokens: int, turn_tokens: int, output_tokens: int,
                ) -> list[tuple[float, float | None, float | None, int, int]]:
    """``n`` sessions at once while /metrics is sampled (see module docstring)."""
    import asyncio

    from phasescope.apis.base import GenRequest
    from phasescope.experiments.context import gauge, scrape_snapshot

    systems = [(await ctx.prompt(system_tokens)).text for _ in range(n)]
    inputs = [[(await ctx.prompt(turn_tokens)).text for _ in range(turns)] for _ in range(n)]
    current: dict[int, int] = {}
    samples: list[tuple[float, float | None, float | None, int, int]] = []
    stop = asyncio.Event()
    t0 = time.perf_counter()

    async def sampler() -> None:
        while not stop.is_set():
            snap = await scrape_snapshot(ctx)
            if snap is not None and current:
                samples.append((time.perf_counter() - t0, gauge(snap, "waiting"), gauge(snap, "kv_usage"),
                                max(current.values()), len(current)))
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    async def session(i: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": systems[i]}]
        for k in range(turns):
            if k and ctx.over():
                return
            messages.append({"role": "user", "content": inputs[i][k]})
            req = GenRequest(prompt=inputs[i][k], max_tokens=output_tokens, messages=[dict(m) for m in messages],
                             keep_text=True, tags=_chat_tags(ctx))
            current[i] = k + 1
            try:
                rec, reply = await _send_chat(ctx, req, phase="fill", session=i, turn=k + 1)
            finally:
                current.pop(i, None)
            if not rec.ok:
                return
            messages.append({"role": "assistant", "content": reply})

    samp = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*(session(i) for i in range(n)))
    finally:
        stop.set()
        await samp
    return samples


async def run(ctx: RunContext, budget_s: float, *, turns: int | None = None, turn_tokens: int | None = None,
              system_tokens: int | None = None, output_tokens: int = 16, sessions: int = 2,
              fill_sessions: int | None = None,
              weight_bytes: float | None = None, kv_bytes_per_token: float | None = None) -> ConversationResult:
    """Two sessions of ``turns`` turns, one after the other, sized to the budget (module docstring)."""
    from phasescope.apis.base import GenRequest
    from phasescope.experiments.context import request_time_s

    started = time.time()
    ctx.start_clock(budget_s)
    c = ctx.calib
    assert c is not None, "calibrate first"
    cap = max(256, min(8192, ctx.ctx_limit() - output_tokens - 64))
    if turn_tokens is None:
        turn_tokens = int(max(32, min(512, c.prefill_tok_s * 0.05)))
    if system_tokens is None:
        system_tokens = int(max(64, min(1024, c.prefill_tok_s * 0.1)))
    if turns is None:
        turns = 5
        # every turn could pay the whole history: keep the worst case inside ~70 % of the budget
        while turns > 3:
            worst = sum(request_time_s(c, system_tokens + k * (turn_tokens + output_tokens) + 16, output_tokens)
                        for k in range(turns)) * sessions
            if worst <= 0.7 * budget_s and system_tokens + turns * (turn_tokens + output_tokens) + 32 <= cap:
                break
            turns -= 1
    while system_tokens + turns * (turn_tokens + output_tokens) + 32 > cap and turn_tokens > 8:
        turn_tokens //= 2
    ctx.say(f"{NAME}: {sessions} sessions of {turns} turns, {system_tokens}-token system prompt, "
            f"{turn_tokens} tokens in + {output_tokens} out per turn")
    for s in range(sessions):
        if s and ctx.over():
            break
        sysp = await ctx.prompt(system_tokens)
        messages: list[dict[str, Any]] = [{"role": "system", "content": sysp.text}]
        for k in range(turns):
            if k and ctx.over():
                break
            msg = (await ctx.prompt(turn_tokens)).text
            messages.append({"role": "user", "content": msg})
            req = GenRequest(prompt=msg, max_tokens=output_tokens, messages=[dict(m) for m in messages], keep_text=True,
                             tags=_chat_tags(ctx))
            rec, reply = await _send_chat(ctx, req, phase="turn", session=s, turn=k + 1, system_tokens=system_tokens,
                                   turn_tokens=turn_tokens, output_tokens=output_tokens)
            if not rec.ok:
                break
            messages.append({"role": "assistant", "content": reply})
    # references: fresh single-message prompts as long as the first and last turns (never cached)
    turn_recs = ok(select(ctx.records, NAME, phase="turn"))
    lens = sorted({int(r.prompt_tokens) for r in turn_recs if r.prompt_tokens})
    if len(lens) >= 2:
        for rep in range(2):  # twice each, interleaved: the analysis keeps each length's fastest
            if rep and ctx.over():
                break
            for n in (lens[0], lens[-1]):
                req = GenRequest(prompt=(await ctx.prompt(max(8, n - 8))).text, max_tokens=output_tokens,
                                 tags=_chat_tags(ctx))
                req.messages = [{"role": "user", "content": req.prompt}]
                await _send_chat(ctx, req, phase="ref", length=n)
    n_fill = fill_sessions if fill_sessions is not None else min(8, ctx.facts.slots or 4)
    samples: list[tuple[float, float | None, float | None, int, int]] = []
    fill_skip = ""
    if n_fill < 2:
        fill_skip = "no concurrent sessions asked for"
    elif not ctx.facts.metrics:
        fill_skip = "no /metrics: whether sessions fill the KV pool cannot be observed"
    elif ctx.over():
        fill_skip = "budget used by the sequential sessions"
    else:
        ctx.say(f"{NAME}: {n_fill} sessions at once, sampling /metrics")
        samples = await _fill(ctx, n_fill, turns, system_tokens, turn_tokens, output_tokens)
    params = {"turns": turns, "sessions": sessions, "system_tokens": system_tokens, "turn_tokens": turn_tokens,
              "output_tokens": output_tokens, "fill_sessions": n_fill, "budget_s": budget_s}
    res = analyze(ctx.records, ctx.info(NAME, started, params), prefill_tok_s=c.prefill_tok_s,
                  weight_bytes=weight_bytes, kv_bytes_per_token=kv_bytes_per_token)
    if fill_skip:
        res.fill_sessions, res.fill_reason = n_fill, f"not run: {fill_skip}"
    else:
        analyze_fill(res, ctx.records, samples, n_fill)
    return res


def _chat_tags(ctx: RunContext) -> dict[str, Any]:
    """The tags a request on the target's chat API carries (Ollama's ``/api/chat``: ``ollama_chat``)."""
    return dict(protocols.chat_of(ctx.target.api).chat_tags)


async def _send_chat(ctx: RunContext, req: Any, **tags: Any) -> tuple[RequestRecord, str]:
    """One request on the target's chat API, kept like every experiment request (``ctx.keep``);
    the reply text is taken out of the record first, so it is never written."""
    req.tags = {**(req.tags or {}), "experiment": NAME, **tags}
    req.id = ctx.next_id(NAME)
    coro = protocols.chat_of(ctx.target.api).send(ctx.session, ctx.target, req)
    rec = await ctx.bounded(coro, req)  # stopped at the budget's hard deadline like every experiment request
    reply = take_reply(rec)  # resent trimmed, as bench's sessions do
    rec.tags = {**(rec.tags or {}), **req.tags}
    ctx.keep(rec)
    return rec, reply


#: explain's conversation (:mod:`phasescope.experiments.spec`); ``run`` is looked up when called (tests replace it)
SPEC = ExperimentSpec(NAME, share=0.12, run=lambda ctx, budget_s, suite: run(
        ctx, budget_s, weight_bytes=suite.weight_bytes, kv_bytes_per_token=suite.kv_bytes_per_token),
                      analyze=analyze, view=view.conversation, rule=rules.CONVERSATION)
