"""What a running experiment needs: the target, a session, prompts, a record sink, the server's
facts (slots, context per sequence, /metrics) and a first calibration of its speed.

Experiments send through :meth:`RunContext.send`, which tags the record, hands it to the sink (the
run store's JSONL, fsync'd as each request completes) and keeps it in memory for the analysis. It
also gives up on a dead server as bench does (:data:`ABORT_AFTER` requests in a row failing to
connect, cut, timing out or ending without a token; refusals are answers): ``aborted`` says why, the
running experiment's clock stops at once, and the suite runs no further experiment.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

# LIVE: records of requests in flight, by record id, filled by experiment_session's sessions; an
# experiment watches its own streams (the client's view) with live_tokens without asking the server
from phasescope.apis import LIVE as LIVE
from phasescope.apis import Session, fresh_session, get_client
from phasescope.apis import live_tokens as live_tokens
from phasescope.apis.base import GenRequest, Target
from phasescope.experiments.common import ExperimentInfo
from phasescope.measure import derive
from phasescope.prompting import Prompt, PromptBuilder, new_nonce
from phasescope.measure.records import RequestRecord


@dataclass
class ServerFacts:
    """What the server says about its capacity (``None`` = it does not say)."""

    engine: str | None = None
    slots: int | None = None
    slots_source: str | None = None
    ctx_per_seq: int | None = None
    ctx_source: str | None = None
    metrics: bool = False
    metrics_engine: str | None = None


@dataclass
class Calibration:
    """A quick first look at the server's speed, used to size every experiment to the budget."""

    overhead_s: float
    prefill_tok_s: float
    decode_tok_s: float
    probe_prompt_tokens: int


#: a request still in flight at this multiple of its experiment's budget is stopped
HARD_X = 1.2
#: requests in a row failing as a dead server's do after which explain stops (bench's --abort rule, 8)
ABORT_AFTER = 8
#: a record that ran out of the user's timeouts: the server did not answer in time
NO_ANSWER = frozenset({"connect_timeout", "first_token_timeout", "inter_token_timeout", "deadline"})
#: the whole run may end this share of the budget late at most (the stop of requests in flight, then the
#: analysis); ``explain --json`` ``duration_s`` ≤ (1 + RUN_GRACE) × budget plus the analysis
RUN_GRACE = 0.05


@dataclass
class Budget:
    """The run's time budget on one clock: ``start`` and ``seconds``. Nothing new is sent past ``end``,
    and a request in flight at ``hard_end`` (:data:`RUN_GRACE` later) is stopped, so a run of
    ``--budget B`` ends within (1 + RUN_GRACE)·B plus its analysis — the +10 % ``explain`` promises."""

    start: float
    seconds: float
    clock: Callable[[], float] = time.monotonic

    @property
    def end(self) -> float:
        return self.start + self.seconds

    @property
    def hard_end(self) -> float:
        return self.end + RUN_GRACE * self.seconds

    def left(self) -> float:
        return self.end - self.clock()

    def allot(self, share: float, rest_shares: float) -> float:
        """Seconds for an experiment whose share is ``share`` of the ``rest_shares`` still to run: its
        part of the time left (an experiment that finished early leaves more for the next)."""
        return max(0.0, self.left()) * share / rest_shares if rest_shares > 0 else 0.0


@dataclass
class RunContext:
    target: Target
    session: Session
    facts: ServerFacts
    sink: Callable[[RequestRecord], None] | None = None
    progress: Callable[[str], None] | None = None
    calib: Calibration | None = None
    records: list[RequestRecord] = field(default_factory=list)
    seed: int = 0
    #: monotonic time after which the running experiment sends nothing new (set per experiment)
    deadline: float | None = None
    #: monotonic time at which a request still in flight is stopped (the experiment's hard end; see
    #: :class:`Budget`); None: never
    hard_deadline: float | None = None
    #: the whole run's budget (explain): every experiment's clock is capped by it
    budget: "Budget | None" = None
    #: the clock every deadline is read on (a test swaps in a simulated one)
    clock: Callable[[], float] = time.monotonic
    #: requests stopped in flight at a hard deadline (kept as ``stopped_by_client`` records)
    n_cut: int = 0
    #: why the run stopped early: the server failed :data:`ABORT_AFTER` requests in a row (None: it did not)
    aborted: str | None = None
    _watch: Any = None
    _prompts: PromptBuilder | None = None
    _prompt_session: Session | None = None
    _n: int = 0
    _uid: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def prompts(self) -> PromptBuilder:
        if self._prompts is None:
            # a session of its own with fresh connections: a /tokenize call that fails on a stale
            # pooled connection makes the builder fall back to calibration for good
            self._prompt_session = experiment_session()
            self._prompts = PromptBuilder(self._prompt_session, self.target, seed=self.seed)
        return self._prompts

    async def close(self) -> None:
        if self._prompt_session is not None:
            await self._prompt_session.close()
            self._prompt_session = None

    def say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    def start_clock(self, budget_s: float, slack: float = 1.0) -> None:
        """Start an experiment's clock: past ``slack × budget_s`` it sends nothing new, and a request
        still in flight at :data:`HARD_X` × its budget is stopped — both capped by the run's own
        :class:`Budget` when there is one, so no experiment can spend another's time."""
        now = self.clock()
        self.deadline = now + slack * budget_s
        self.hard_deadline = now + HARD_X * budget_s
        if self.aborted is not None:  # the server is gone: nothing more is sent
            self.deadline = self.hard_deadline = now
        if self.budget is not None:
            self.deadline = min(self.deadline, self.budget.end)
            self.hard_deadline = min(self.hard_deadline, self.budget.hard_end)

    def over(self) -> bool:
        return self.aborted is not None or (self.deadline is not None and self.clock() > self.deadline)

    def _see(self, rec: RequestRecord) -> None:
        """Count ``rec`` toward the dead-server stop (bench's :class:`~phasescope.load.runner.ConnectionWatch`,
        which sets ``self.aborted``); on the stop nothing new is sent and what is in flight is stopped."""
        if rec.error_kind == "stopped_by_client":  # stopped by explain itself: says nothing of the server
            return
        if self._watch is None:
            from phasescope.load.runner import ConnectionWatch

            self._watch = ConnectionWatch(ABORT_AFTER)
        if self._watch.see(rec, self):
            self.say(f"stopping: {self.aborted}")
            self.deadline = self.hard_deadline = self.clock()

    def hard_left(self) -> float | None:
        """Seconds until a request in flight is stopped (None: no hard deadline)."""
        return None if self.hard_deadline is None else self.hard_deadline - self.clock()

    def past_hard(self) -> bool:
        left = self.hard_left()
        return left is not None and left <= 0

    def ctx_limit(self, default: int = 4096) -> int:
        """Tokens one sequence may hold (prompt + output)."""
        return self.facts.ctx_per_seq or default

    def next_id(self, experiment: str) -> str:
        self._n += 1
        return f"{experiment}-{self._n}-{self._uid}"

    def keep(self, rec: RequestRecord) -> None:
        """Keep a record the experiment finished itself (e.g. a stream it stopped on purpose)."""
        self.records.append(rec)
        if self.sink is not None:
            self.sink(rec)

    async def send(self, req: GenRequest, experiment: str, **tags: Any) -> RequestRecord:
        req.tags = {**(req.tags or {}), "experiment": experiment, **tags}
        req.id = req.id or self.next_id(experiment)
        coro = get_client(self.target.api).send(self.session, self.target, req)
        rec = await self.bounded(coro, req)
        rec.tags = {**(rec.tags or {}), **req.tags}
        self.records.append(rec)
        if self.sink is not None:
            self.sink(rec)
        self._see(rec)
        return rec

    async def bounded(self, coro: Any, req: GenRequest) -> RequestRecord:
        """Await one request, stopping it at the hard deadline: the record read so far is kept, marked
        ``stopped_by_client`` (a request cut by the budget is data, not a failure of the server)."""
        import asyncio

        left = self.hard_left()
        if left is None:
            return await coro
        task = asyncio.ensure_future(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, left))
        except asyncio.CancelledError:  # the experiment stops its own request (prefill-interference)
            task.cancel()
            raise
        if task in done:
            return task.result()
        rec = LIVE.get(req.id or "")
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopped on purpose
            pass
        if rec is None:  # not started yet (still connecting): an empty record says it was sent
            from phasescope.measure.clock import now_ns

            rec = RequestRecord(id=req.id or "", api=self.target.api, target=self.target.display_url,
                                model=self.target.model, max_tokens=req.max_tokens, t_start_ns=now_ns())
        rec.ok, rec.error_kind = False, "stopped_by_client"
        rec.error_message = (f"stopped while still running: {self.aborted}" if self.aborted is not None else
                             "stopped at the time budget (explain --budget) while still running")
        rec.t_done_ns = rec.t_done_ns or (rec.token_events()[-1].t_ns if rec.token_events() else rec.t_start_ns)
        self.n_cut += 1
        return rec

    async def prompt(self, n_tokens: int, *, fresh: bool = True) -> Prompt:
        p = await self.prompts.build(max(1, int(n_tokens)), nonce=None if fresh else "")
        if fresh and p.token_ids is None and p.nonce and p.text.startswith(p.nonce) and p.source == "calibrated":
            # calibration sent this very text once to count it: swap the nonce (same token count)
            # so the measured request is not served from that request's prefix cache
            nonce = new_nonce()
            p = dataclasses.replace(p, text=nonce + p.text[len(p.nonce):], nonce=nonce)
        return p

    def info(self, name: str, started: float, params: dict[str, Any]) -> ExperimentInfo:
        mine = [r for r in self.records if (r.tags or {}).get("experiment") == name]
        return ExperimentInfo(
            name=name, target=self.target.display_url, engine=self.target.engine, model=self.target.model,
            api=self.target.api, started_unix_s=started, duration_s=time.time() - started,
            n_requests=len(mine), n_failed=sum(1 for r in mine if not r.ok and r.error_kind != "stopped_by_client"),
            params=params,
        )


def experiment_session(connect_timeout_s: float | None = 10.0) -> Session:
    """A session for experiments: one fresh connection per request, its records in :data:`LIVE`
    (:func:`phasescope.apis.fresh_session`: experiments leave connections idle for seconds between
    phases, and llama-server closes idle keep-alive connections after 5 s)."""
    return fresh_session(connect_timeout_s)


def join_prompts(a: Prompt, b: Prompt) -> GenRequest:
    """``a`` followed by ``b`` (as token ids when both have them; b's leading BOS dropped)."""
    ids = None
    if a.token_ids is not None and b.token_ids is not None:
        tail = b.token_ids
        if tail and a.token_ids and tail[0] == a.token_ids[0]:
            tail = tail[1:]
        ids = list(a.token_ids) + list(tail)
    n = len(ids) if ids is not None else ((a.n_tokens or a.target_tokens) + (b.n_tokens or b.target_tokens))
    return GenRequest(prompt=a.text + "\n" + b.text, prompt_token_ids=ids, prompt_tokens_expected=n)


def prefix_of(p: Prompt, n_tokens: int) -> GenRequest:
    """The first ``n_tokens`` of ``p`` (exact with token ids; by word share for text prompts)."""
    if p.token_ids is not None:
        ids = p.token_ids[:n_tokens]
        return GenRequest(prompt=p.text, prompt_token_ids=ids, prompt_tokens_expected=len(ids))
    words = p.text.split(" ")
    total = p.n_tokens or p.target_tokens
    k = max(1, int(len(words) * n_tokens / max(1, total)))
    return GenRequest(prompt=" ".join(words[:k]), prompt_tokens_expected=n_tokens)


async def discover_facts(session: Session, target: Target, props: dict[str, Any] | None = None) -> ServerFacts:
    """Slots and context per sequence from llama.cpp ``/props`` (``total_slots``,
    ``default_generation_settings.n_ctx``) or ``/v1/models`` ``max_model_len`` (vLLM); whether
    ``/metrics`` answers."""
    from phasescope.apis.llamacpp import get_props
    from phasescope.apis.openai import list_models

    f = ServerFacts(engine=target.engine)
    if props is None and target.engine == "llamacpp":
        props = await get_props(session, target)
    if isinstance(props, dict):
        if props.get("total_slots"):
            f.slots, f.slots_source = int(props["total_slots"]), "llama.cpp /props total_slots"
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        if n_ctx:
            f.ctx_per_seq, f.ctx_source = int(n_ctx), "llama.cpp /props n_ctx (per slot)"
    if f.ctx_per_seq is None and target.api != "ollama":
        for m in await list_models(session, target):
            if m.get("max_model_len"):
                f.ctx_per_seq, f.ctx_source = int(m["max_model_len"]), "/v1/models max_model_len"
                break
            meta = m.get("meta") or {}
            if meta.get("n_ctx_train") and f.ctx_per_seq is None:
                f.ctx_per_seq, f.ctx_source = int(meta["n_ctx_train"]), "/v1/models meta n_ctx_train"
    if target.api != "ollama":
        try:
            from phasescope.metrics import Scraper

            async with Scraper(target.base_url, session=session, api_key=target.api_key) as s:
                snap = await s.scrape()
            f.metrics, f.metrics_engine = True, snap.engine
        except Exception:  # noqa: BLE001 - any failure means "no usable /metrics"
            f.metrics = False
    return f


async def calibration_prompts(ctx: RunContext) -> list[Prompt]:
    """The calibration's three prompts (warm-up, short, long). Building them may ask the server's
    tokenizer several times — over a slow network seconds that are not the calibration's requests."""
    n = min(256, max(32, ctx.ctx_limit() // 4))
    return [await ctx.prompt(16), await ctx.prompt(16), await ctx.prompt(n)]


async def calibrate(ctx: RunContext, prompts: "list[Prompt] | None" = None) -> Calibration:
    """Warm up, then a short and a longer prompt: fixed overhead, prefill and decode rates.
    ``prompts``: :func:`calibration_prompts`' (built here when not given)."""
    if prompts is None:
        prompts = await calibration_prompts(ctx)
    ctx.say("calibrating: a warm-up and two probe requests")
    warm = await ctx.send(prompts[0].request(8), "calibrate", phase="warmup")
    if not warm.ok and (warm.error_kind in NO_ANSWER or (warm.error_kind == "stopped_by_client"
                                                         and not warm.token_events())):
        # the warm-up got no token within the user's timeouts (or the calibration's time): the two
        # probe requests would wait as long again, so the run ends at the first (issue 31)
        from phasescope.errors import NoAnswerError, TargetError

        if warm.error_kind == "stopped_by_client":  # explain's own clock stopped it, not the user's timeouts
            raise TargetError("explain's calibration got no first token from its warm-up request within its share "
                              "of the time budget: this server is slower than the budget allows",
                              hint="pass a larger --budget")
        raise NoAnswerError(f"the server did not answer the calibration's warm-up request: "
                            f"{warm.error_message or warm.error_kind}",
                            hint="it took the connection but sent no token; raise --ttft-timeout if it is only slow")
    short = await ctx.send(prompts[1].request(16), "calibrate", phase="short")
    n = prompts[2].target_tokens
    long_ = await ctx.send(prompts[2].request(16), "calibrate", phase="long")
    # a request the calibration's own clock stopped after its first token is still a measurement (its TTFT
    # and the gaps it got); one stopped before any token says only that this budget is too small for this server
    def usable(r: RequestRecord) -> bool:
        return r.ok or (r.error_kind == "stopped_by_client" and derive.ttft_s(r) is not None)

    for r in (short, long_):
        if not r.ok and r.error_kind == "stopped_by_client" and not usable(r):
            from phasescope.errors import TargetError

            raise TargetError("explain's calibration got no first token within its share of the time budget "
                              f"(a {n if r is long_ else prompts[1].target_tokens}-token prompt): this server is slower than the budget "
                              "allows", hint="pass a larger --budget")
    # robust to a burst of load: the better of two short TTFTs, decode from the typical gap
    shorts = [t for t in (derive.ttft_s(short), derive.ttft_s(warm)) if t]
    t_s = min(shorts) if shorts else 0.05
    t_l = derive.ttft_s(long_) or (t_s + n / 500)
    prefill = (n - 16) / (t_l - t_s) if t_l > t_s else float(n) / max(t_l, 1e-3)
    gaps = [g for r in (short, long_, warm) for g in derive.itl_s(r)]
    gaps.sort()
    decode = 1.0 / gaps[len(gaps) // 2] if gaps and gaps[len(gaps) // 2] > 0 else 20.0
    if not (usable(short) and usable(long_)):
        from phasescope.errors import TargetError

        bad = short if not usable(short) else long_
        raise TargetError(f"the server failed the calibration request: {bad.error_message or bad.error_kind}")
    c = Calibration(overhead_s=max(0.0, t_s - 16 / max(prefill, 1.0)), prefill_tok_s=max(prefill, 1.0),
                    decode_tok_s=max(decode, 0.5), probe_prompt_tokens=n)
    ctx.calib = c
    ctx.say(f"calibrated: prefill ≈ {c.prefill_tok_s:.0f} tok/s, decode ≈ {c.decode_tok_s:.1f} tok/s, "
            f"overhead ≈ {c.overhead_s * 1e3:.0f} ms")
    return c


def request_time_s(c: Calibration, prompt_tokens: float, output_tokens: float) -> float:
    """Calibrated estimate of one uncontended request: overhead + prefill + decode."""
    return c.overhead_s + prompt_tokens / c.prefill_tok_s + max(0.0, output_tokens - 1) / c.decode_tok_s


def floor_pow2(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


async def scrape_snapshot(ctx: RunContext) -> Any:
    """One /metrics snapshot (``phasescope.metrics.Snapshot``), or None when it fails."""
    try:
        from phasescope.metrics import Scraper

        async with Scraper(ctx.target.base_url, session=ctx.session, api_key=ctx.target.api_key,
                           engine=ctx.facts.metrics_engine or "auto") as s:
            return await s.scrape()
    except Exception:  # noqa: BLE001 - metrics are optional evidence
        return None


def gauge(snap: Any, name: str) -> float | None:
    series = getattr(snap, "gauges", {}).get(name)
    return float(sum(series.values())) if series else None


def counter(snap: Any, name: str) -> float | None:
    series = getattr(snap, "counters", {}).get(name)
    return float(sum(series.values())) if series else None
