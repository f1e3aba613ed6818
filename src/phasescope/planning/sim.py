"""Discrete-event simulator of a continuous-batching LLM server (vLLM-V1-like or llama.cpp-like).

Events (a ``heapq`` of (time, order, kind, payload)): a request becomes visible to the server, an
engine step ends, a KV transfer ends. Between events nothing changes; a replica that has work starts
its next step the moment the previous one ends, so a busy server is simulated step by step and an
idle one jumps to the next arrival. Every event of one instant is applied before any replica plans its
next step, so requests that arrive together (two users starting at once, a request sent the moment the
previous answer ended) are scheduled together, as llama-server's ``update_slots`` and vLLM's
``schedule`` take everything already queued.

This module holds the events, the deployment and the results; one replica's scheduler is
:class:`~phasescope.planning.replica.Replica`. One step of a replica (vLLM V1 ``Scheduler.schedule``;
llama.cpp ``server_context::update_slots`` does the same order with ``n_batch`` as the budget):

1. every running decode sequence gets one token (budget −1 each);
2. running prompts continue prefilling in chunks, in admission order, while budget remains;
3. waiting requests are admitted FCFS while budget remains, ``running < max_num_seqs`` and the KV
   pool can take them — the head of the queue blocks the rest (no skipping);
4. the step time comes from :class:`~phasescope.planning.costmodel.CostModel`; at its end a prompt whose
   last chunk ran emits its first token, every decode emits a token, finished sequences free KV.

llama.cpp on a sliding-window model (``SchedulerConfig.prompt_tail_breaks``) stops each prompt's batch
4 tokens before its end (a context checkpoint): the last 4 tokens and the first token come one step
later, in a step that also carries the other slots' decodes and the next queued prompt's first chunk.

KV policies. ``preempt=False`` (default): admission reserves prompt + output tokens, so a full pool
makes new requests wait and nothing is ever evicted. ``preempt=True``: vLLM's on-demand allocation —
admit when the chunk fits, grow one token per decode step, and when the pool runs out evict the most
recently admitted running request, free its KV and recompute prompt + generated tokens later
(``PreemptionMode.RECOMPUTE``): the user sees a stall mid-answer.

Prefix caching: a request that carries the shared prefix skips prefilling it once the prefix is
resident (vLLM: once any request has computed those blocks; llama.cpp: once the slot it lands on
has served the prefix, slots with the prefix preferred — its ``slot_prompt_similarity``). The
resident prefix occupies the pool once. A conversation on llama.cpp: a slot keeps only the last prompt it
served, so a turn hits its whole history only on the slot its session used last and not overwritten since
(another session's slot shares the system prompt at most); the slot is chosen this session's first,
then any used one, then an empty one.

Conversations (``Workload.sessions``, :class:`~phasescope.planning.sessions.ConversationLoop`) are a closed
loop per session: a session's first turn is sent at its start, and each later turn at the simulated
time the previous turn's last token was produced (or it failed) plus the think time — never before the
reply exists, so a session has at most one turn in flight. Its prefix hit is looked up in the
session LRU at that send.

Disaggregation: prefill replicas only prefill; a finished prompt's KV (prompt tokens × KV bytes)
crosses the interconnect (one transfer at a time per prefill replica), then a decode replica admits
it and produces the first token in its next step (as vLLM's disaggregated proxy: prefill with
``max_tokens=1``, then stream from the decode instance). ``shared_device`` puts a prefill and a
decode replica on one device: their steps serialize.

ITL bookkeeping is O(1) per step: every sequence decoding in a step gets its token at the step's
end, so its inter-token gap is the time since the worker's previous step ended; the pooled ITL sample is the step durations
weighted by the number of continuing decodes (plus the explicit gaps of resumed/handed-off tokens).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phasescope.errors import InputError
from phasescope.planning.costmodel import CostModel
from phasescope.planning.replica import Replica, Seq
from phasescope.planning.workload import RequestPlan, Workload, build_requests

POLICIES = ("vllm", "llamacpp")

_EV_VISIBLE, _EV_STEP, _EV_XFER, _EV_SEND, _EV_ISSUE, _EV_TURN = 0, 1, 2, 3, 4, 5


@dataclass
class SchedulerConfig:
    """Server knobs, named after vLLM's flags (llama.cpp: ``max_num_seqs`` = ``--parallel`` slots,
    ``max_num_batched_tokens`` = ``--batch-size``/n_batch, 2048 by default)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    chunked_prefill: bool = True
    preempt: bool = False
    prefix_caching: bool = True
    policy: str = "vllm"
    #: time from the client's send until the scheduler sees the request (HTTP, tokenization) and
    #: from a token's step end until the client reads it — added once, to TTFT
    api_overhead_s: float = 0.0
    #: llama.cpp on a sliding-window (SWA) or recurrent model stops a prompt's batch this many tokens
    #: before its end so that it can save a context checkpoint (``server-context.cpp``: offsets
    #: ``4 + n_ubatch`` and ``4``, each capped at n_batch; llama.cpp PR #20288): the prompt's last
    #: tokens run in a step of their own, which also carries every other slot's decode and the next
    #: queued prompt's first chunk — the first token waits for that whole step. ``None``: automatic
    #: (policy ``llamacpp`` and a cost model with a sliding window), ``()``: never.
    prompt_tail_breaks: tuple[int, ...] | None = None
    #: llama.cpp's physical batch (``--ubatch-size``, 512 by default), used by the breaks above
    n_ubatch: int = 512

    def tail_breaks(self, cost: CostModel) -> tuple[int, ...]:
        """The offsets before a prompt's end at which its batch stops (see ``prompt_tail_breaks``)."""
        if self.prompt_tail_breaks is not None:
            return tuple(self.prompt_tail_breaks)
        if self.policy != "llamacpp" or not cost.kv_window_tokens:
            return ()
        return tuple(sorted({min(self.max_num_batched_tokens, 4 + self.n_ubatch),
                             min(self.max_num_batched_tokens, 4)}, reverse=True))

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise InputError(f"unknown scheduler policy {self.policy!r} (use {' or '.join(POLICIES)})")
        if self.max_num_seqs < 1:
            raise InputError("--max-num-seqs must be ≥ 1")
        if self.max_num_batched_tokens < 1:
            raise InputError("--max-num-batched-tokens must be ≥ 1")
        if self.policy == "vllm" and self.max_num_batched_tokens < self.max_num_seqs:
            raise InputError(
                f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be ≥ --max-num-seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )


@dataclass
class Deployment:
    """How many replicas serve, and in which roles. A replica = ``cost.tp`` devices."""

    replicas: int = 1
    prefill_replicas: int = 0
    decode_replicas: int = 0
    shared_device: bool = False
    #: cost model of the decode pool when it differs (other device); defaults to the prefill one
    decode_cost: CostModel | None = None

    @property
    def disaggregated(self) -> bool:
        return self.prefill_replicas > 0 or self.decode_replicas > 0

    def validate(self) -> None:
        if self.disaggregated:
            if self.prefill_replicas < 1 or self.decode_replicas < 1:
                raise InputError("--disaggregate P:D needs P ≥ 1 and D ≥ 1")
            if self.shared_device and (self.prefill_replicas, self.decode_replicas) != (1, 1):
                raise InputError("a shared device holds exactly one prefill and one decode worker (1:1)")
        elif self.replicas < 1:
            raise InputError("--gpus must give at least one replica")


class Simulator:
    """Run one workload against one deployment. ``run()`` returns a :class:`SimResult`."""

    def __init__(
        self,
        cost: CostModel,
        workload: Workload,
        sched: SchedulerConfig | None = None,
        deploy: Deployment | None = None,
        *,
        requests: RequestPlan | None = None,
    ) -> None:
        self.cost = cost
        self.workload = workload
        self.sched = sched or SchedulerConfig()
        self.deploy = deploy or Deployment()
        self.sched.validate()
        self.deploy.validate()
        self.reqs = requests if requests is not None else build_requests(workload)
        self._heap: list[tuple[float, int, int, Any]] = []
        self._order = 0
        self.workers: list[Replica] = []
        d = self.deploy
        if d.disaggregated:
            dc = d.decode_cost or cost
            for _ in range(d.prefill_replicas):
                self.workers.append(Replica(len(self.workers), "prefill", cost, self.sched, self))
            for _ in range(d.decode_replicas):
                self.workers.append(Replica(len(self.workers), "decode", dc, self.sched, self))
            # executors: one per worker, or one for the pair on a shared device
            if d.shared_device:
                self.executors: list[list[Replica]] = [self.workers[:]]
            else:
                self.executors = [[w] for w in self.workers]
        else:
            for i in range(d.replicas):
                self.workers.append(Replica(i, "both", cost, self.sched, self))
            self.executors = [[w] for w in self.workers]
        self._exec_of = {}
        for ei, ws in enumerate(self.executors):
            for w in ws:
                self._exec_of[w.idx] = ei
        self._exec_busy = [False] * len(self.executors)
        self._exec_rr = [0] * len(self.executors)
        self._exec_running: list[Replica | None] = [None] * len(self.executors)
        self.seqs: list[Seq] = []
        self.in_flight = 0
        self._next_rid = 0
        self._client_queue: deque[int] = deque()
        self.now = 0.0
        #: closed-loop conversations (plan.sessions.ConversationLoop), a fresh copy per simulation
        self.loop = workload.sessions.fresh() if workload.sessions is not None else None

    # -- events -----------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._order += 1
        heapq.heappush(self._heap, (t, self._order, kind, payload))

    def _send(self, rid: int, t: float) -> None:
        r = self.reqs
        s = Seq(rid, int(r.input_tokens[rid]), int(r.output_tokens[rid]), int(r.prefix_tokens[rid]), t,
                 t + self.sched.api_overhead_s)
        self.seqs.append(s)
        self.in_flight += 1
        self._push(s.t_visible, _EV_VISIBLE, s)

    def _dispatch(self, s: Seq, role: str) -> Replica:
        cands = [w for w in self.workers if w.role == role]
        return min(cands, key=lambda w: (w.load(), w.idx))

    def _handoff(self, s: Seq, w: Replica, t: float) -> None:
        """Prefill done on a prefill replica: ship the prompt's KV, then queue on a decode replica."""
        xfer = w.cost.kv_transfer_s(s.prompt)
        start = max(t, w.link_free_at)
        w.link_free_at = start + xfer
        s.xfer_s = start + xfer - t  # waiting for the link + the transfer itself
        self._push(start + xfer, _EV_XFER, s)

    def _last_token_time(self, s: Seq) -> float:
        best = s.tokens[-1] if s.tokens else math.nan
        for wi, _j0, j1 in s.segments:
            te = self.workers[wi].step_end[j1]
            if math.isnan(best) or te > best:
                best = te
        return best

    def _fail(self, s: Seq, t: float, why: str) -> None:
        s.failed = why
        s.state = "done"
        s.t_last = t
        self._done(s, t)

    def _done(self, s: Seq, t: float) -> None:
        self.in_flight -= 1
        w = self.workload
        if self.loop is not None:
            r = self.reqs
            assert r.session is not None and r.turn is not None
            nxt = self.loop.on_done(int(r.session[s.rid]), int(r.turn[s.rid]), t, ok=s.failed is None)
            if nxt is not None:  # the reply exists: the user reads it, thinks, sends the next turn
                self._push(nxt, _EV_TURN, (int(r.session[s.rid]), int(r.turn[s.rid]) + 1))
        elif self.workload.closed_loop:
            if w.duration_s is None or t < w.duration_s:
                self._issue_next(t)
        elif w.concurrency is not None and self._client_queue:
            rid = self._client_queue.popleft()
            self._send(rid, t)

    def _issue_next(self, t: float) -> None:
        if self._next_rid >= len(self.reqs):
            if self.reqs.growable:
                self.reqs.grow()
            else:
                return
        rid = self._next_rid
        self._next_rid += 1
        self._send(rid, t)

    def _kick(self, ei: int, now: float) -> None:
        """Start the executor's next step if it is idle and one of its workers has work."""
        if self._exec_busy[ei]:
            return
        ws = self.executors[ei]
        n = len(ws)
        for j in range(n):
            w = ws[(self._exec_rr[ei] + j) % n]
            if not w.has_work():
                continue
            dt = w.plan_step(now)
            if dt <= 0:
                continue
            self._exec_rr[ei] = (self._exec_rr[ei] + j + 1) % n
            self._exec_busy[ei] = True
            self._exec_running[ei] = w
            self._push(now + dt, _EV_STEP, ei)
            return

    # -- main loop --------------------------------------------------------------------------------
    def run(self) -> "SimResult":
        w = self.workload
        r = self.reqs
        if self.loop is not None:
            for t0, u in self.loop.first_sends():
                self._push(t0, _EV_TURN, (u, 0))
        elif w.closed_loop:
            n_users = min(int(w.concurrency or 1), len(r) if not r.growable else 10**9)
            for u in range(n_users):  # users start together, or spread over ramp_s
                self._push(w.ramp_s * u / n_users, _EV_ISSUE, None)
        else:
            for rid in range(len(r)):
                self._push(float(r.arrival_s[rid]), _EV_SEND, rid)
            self._next_rid = len(r)
        heap = self._heap
        pending: set[int] = set()  # executors to start once every event of this instant is in
        while heap:
            t, _, kind, payload = heapq.heappop(heap)
            self.now = t
            self._instant(kind, payload, t, pending)
            if pending and (not heap or heap[0][0] > t):
                for ei in sorted(pending):
                    self._kick(ei, t)
                pending.clear()
        for s in self.seqs:  # anything left could never be scheduled (e.g. KV pool too small)
            if s.state != "done":
                s.failed = "never scheduled: the server could not make room for it"
                s.state = "done"
                s.t_last = self.now
        return SimResult(self)

    def _instant(self, kind: int, payload: Any, t: float, pending: set[int]) -> None:
        """Apply one event. Executors to (re)start go to ``pending``: a scheduler sees every request
        that arrived at the same instant in one iteration (two prompts sent together are batched together,
        as llama-server's ``update_slots`` and vLLM's ``schedule`` take everything queued)."""
        w = self.workload
        if kind == _EV_STEP:
            ei = payload
            wk = self._exec_running[ei]
            assert wk is not None
            wk.end_step(t)
            self._exec_busy[ei] = False
            self._exec_running[ei] = None
            pending.add(ei)
            # a finished step may have freed KV / handed off work on other executors
            return
        if kind == _EV_ISSUE:
            self._issue_next(t)
            return
        if kind == _EV_TURN:
            u, k = payload
            assert self.loop is not None
            rid = self._next_rid
            self._next_rid += 1
            prompt, out, hit = self.loop.on_send(u, k)
            r = self.reqs
            assert r.session is not None and r.turn is not None
            r.arrival_s[rid], r.input_tokens[rid], r.output_tokens[rid], r.prefix_tokens[rid] = t, prompt, out, hit
            r.session[rid], r.turn[rid] = u, k
            self._send(rid, t)
            self.seqs[-1].sess = u
            return
        if kind == _EV_SEND:
            rid = payload
            if w.concurrency is not None and self.in_flight >= w.concurrency:
                self._client_queue.append(rid)
            else:
                self._send(rid, t)
            return
        if kind == _EV_VISIBLE:
            s = payload
            role = "prefill" if self.deploy.disaggregated else "both"
            wk = self._dispatch(s, role)
            s.state = "waiting"
            wk.waiting.append(s)
            pending.add(self._exec_of[wk.idx])
            return
        if kind == _EV_XFER:
            s = payload
            src = s.worker
            assert src is not None
            src._release(s)  # the prefill replica frees the KV once shipped
            dst = self._dispatch(s, "decode")
            s.state = "waiting"
            s.computed = s.target
            s.cached = 0
            s.alloc = 0
            dst.waiting.append(s)
            pending.add(self._exec_of[dst.idx])
            return


@dataclass
class SimResult:
    """Raw outcome: per-request arrays and per-replica step histories (metrics in :mod:`.metrics`)."""

    sim: Simulator = field(repr=False)

    def __post_init__(self) -> None:
        seqs = self.sim.seqs
        n = len(seqs)
        self.n = n
        self.t_send = np.array([s.t_send for s in seqs])
        self.t_first = np.array([self._first(s) for s in seqs])
        self.t_last = np.array([self._last(s) for s in seqs])
        self.t_admit = np.array([s.t_admit for s in seqs])
        self.t_visible = np.array([s.t_visible for s in seqs])
        self.input_tokens = np.array([s.prompt for s in seqs], dtype=np.int64)
        self.output_tokens = np.array([s.out if not s.failed else 0 for s in seqs], dtype=np.int64)
        self.cached_tokens = np.array([s.cached for s in seqs], dtype=np.int64)
        self.preemptions = np.array([s.preemptions for s in seqs], dtype=np.int64)
        self.ok = np.array([s.failed is None for s in seqs], dtype=bool)
        self.api_overhead_s = self.sim.sched.api_overhead_s
        # TTFT and E2E run from the client's send, so they include the API overhead on the way in
        self.ttft_s = self.t_first - self.t_send
        self.e2e_s = self.t_last - self.t_send
        self.extra_itl = [x for s in seqs for x in s.extra_itl]
        self.xfer_s = np.array([s.xfer_s for s in seqs])

    def _first(self, s: Seq) -> float:
        if s.failed:
            return math.nan
        best = s.tokens[0] if s.tokens else math.nan
        for wi, j0, _ in s.segments:
            t = self.sim.workers[wi].step_end[j0 + 1]
            if math.isnan(best) or t < best:
                best = t
        return best

    def _last(self, s: Seq) -> float:
        if s.failed:
            return s.t_last
        t = self.sim._last_token_time(s)
        return t if not math.isnan(t) else s.t_last

    def token_times(self, i: int) -> list[float]:
        """Every output-token time of request ``i`` (seconds, simulation clock)."""
        s = self.sim.seqs[i]
        ts = list(s.tokens)
        for wi, j0, j1 in s.segments:
            ts.extend(self.sim.workers[wi].step_end[j0 + 1 : j1 + 1])
        ts.sort()
        return ts

    @property
    def workers(self) -> list[Replica]:
        return self.sim.workers


def simulate(
    cost: CostModel,
    workload: Workload,
    sched: SchedulerConfig | None = None,
    deploy: Deployment | None = None,
) -> SimResult:
    """Convenience: build and run a :class:`Simulator`."""
    return Simulator(cost, workload, sched, deploy).run()
