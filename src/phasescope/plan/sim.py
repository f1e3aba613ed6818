"""Discrete-event simulator of a continuous-batching LLM server (vLLM-V1-like or llama.cpp-like).

Events (a ``heapq`` of (time, order, kind, payload)): a request becomes visible to the server, an
engine step ends, a KV transfer ends. Between events nothing changes; a replica that has work starts
its next step the moment the previous one ends, so a busy server is simulated step by step and an
idle one jumps to the next arrival. Every event of one instant is applied before any replica plans its
next step, so requests that arrive together (two users starting at once, a request sent the moment the
previous answer ended) are scheduled together, as llama-server's ``update_slots`` and vLLM's
``schedule`` take everything already queued.

One step of a replica (vLLM V1 ``Scheduler.schedule``; llama.cpp ``server_context::update_slots``
does the same order with ``n_batch`` as the budget):

1. every running decode sequence gets one token (budget −1 each);
2. running prompts continue prefilling in chunks, in admission order, while budget remains;
3. waiting requests are admitted FCFS while budget remains, ``running < max_num_seqs`` and the KV
   pool can take them — the head of the queue blocks the rest (no skipping);
4. the step time comes from :class:`~phasescope.plan.costmodel.CostModel`; at its end a prompt whose
   last chunk ran emits its first token, every decode emits a token, finished sequences free KV.

KV policies. ``preempt=False`` (default): admission reserves prompt + output tokens, so a full pool
makes new requests wait and nothing is ever evicted. ``preempt=True``: vLLM's on-demand allocation —
admit when the chunk fits, grow one token per decode step, and when the pool runs out evict the most
recently admitted running request, free its KV and recompute prompt + generated tokens later
(``PreemptionMode.RECOMPUTE``): the user sees a stall mid-answer.

Prefix caching: a request that carries the shared prefix skips prefilling it once the prefix is
resident (vLLM: once any request has computed those blocks; llama.cpp: once the slot it lands on
has served the prefix, slots with the prefix preferred — its ``slot_prompt_similarity``). The
resident prefix occupies the pool once.

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
from phasescope.plan.costmodel import CostModel, chunk_pairs
from phasescope.plan.workload import RequestPlan, Workload, build_requests

POLICIES = ("vllm", "llamacpp")

_EV_VISIBLE, _EV_STEP, _EV_XFER, _EV_SEND, _EV_ISSUE = 0, 1, 2, 3, 4


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


class _Seq:
    __slots__ = (
        "rid", "prompt", "out", "prefix", "t_send", "t_visible", "t_admit", "t_first", "t_last",
        "computed", "target", "generated", "cached", "alloc", "join_step", "gen_at_join", "version",
        "worker", "segments", "tokens", "extra_itl", "preemptions", "state", "slot", "failed",
        "t_prefill_done", "xfer_s",
    )

    def __init__(self, rid: int, prompt: int, out: int, prefix: int, t_send: float, t_visible: float) -> None:
        self.rid = rid
        self.prompt = prompt
        self.out = out
        self.prefix = prefix
        self.t_send = t_send
        self.t_visible = t_visible
        self.t_admit = math.nan
        self.t_first = math.nan
        self.t_last = math.nan
        self.computed = 0
        self.target = prompt
        self.generated = 0
        self.cached = 0
        self.alloc = 0
        self.join_step = -1
        self.gen_at_join = 0
        self.version = 0
        self.worker: _Worker | None = None
        self.segments: list[tuple[int, int, int]] = []  # (worker index, join step, last step)
        self.tokens: list[float] = []  # token times not covered by segments
        self.extra_itl: list[float] = []
        self.preemptions = 0
        self.state = "new"  # new, waiting, prefill, decode, xfer, done
        self.slot = -1
        self.failed: str | None = None
        self.t_prefill_done = math.nan
        self.xfer_s = math.nan


class _Worker:
    """One replica: its queue, running set, KV pool and step history."""

    def __init__(self, idx: int, role: str, cost: CostModel, cfg: SchedulerConfig, sim: "Simulator") -> None:
        self.idx = idx
        self.role = role  # both, prefill, decode
        self.cost = cost
        self.cfg = cfg
        self.sim = sim
        self.waiting: deque[_Seq] = deque()
        self.prefilling: list[_Seq] = []
        self.decoding: dict[int, _Seq] = {}
        self.admit_order: list[_Seq] = []
        self.finish_heap: list[tuple[int, int, int, _Seq]] = []
        self.ctx_sum = 0.0
        self.fresh = 0  # decoding sequences whose next token is their first (disaggregated decode side)
        self.kv_used = 0
        self.kv_cap = int(cost.kv_pool_tokens)
        self.prefix_warm = False
        self.slot_prefix: list[bool] = [False] * cfg.max_num_seqs
        self.free_slots: list[int] = list(range(cfg.max_num_seqs))
        self.k = -1  # last completed step
        self.step_end: list[float] = []
        self.step_dur: list[float] = []
        self.itl_weight: list[int] = []
        self.ts_waiting: list[int] = []
        self.ts_running: list[int] = []
        self.ts_kv: list[int] = []
        #: per step: prefill tokens it carried, and why the head of the queue could not be admitted
        #: (None: nothing waited; "max_num_seqs", "kv_pool", "budget", "preempted")
        self.step_prefill: list[int] = []
        self.step_block: list[str | None] = []
        self.step_shared: list[bool] = []
        self.busy_s = 0.0
        self.link_free_at = 0.0
        self.preemptions = 0
        self._plan: tuple[Any, ...] | None = None

    # -- queue state ----------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def load(self) -> int:
        return self.running + len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.decoding or self.prefilling or self.waiting)

    # -- KV ---------------------------------------------------------------------------------------
    def _need_reserve(self, s: _Seq) -> int:
        return (s.target - s.cached) + (s.out - s.generated)

    def _fits_ever(self, s: _Seq) -> bool:
        if self.cfg.policy == "llamacpp":
            per_slot = self.kv_cap // max(self.cfg.max_num_seqs, 1)
            return s.prompt + s.out <= per_slot
        return s.prompt + s.out <= self.kv_cap

    def _hit(self, s: _Seq, slot: int) -> int:
        if not (self.cfg.prefix_caching and s.prefix > 0):
            return 0
        if self.cfg.policy == "llamacpp":
            return s.prefix if slot >= 0 and self.slot_prefix[slot] else 0
        return s.prefix if self.prefix_warm else 0

    def _best_hit(self, s: _Seq) -> int:
        """Prefix tokens ``s`` could skip if admitted now (llama.cpp: on the best free slot)."""
        if self.cfg.policy != "llamacpp":
            return self._hit(s, -1)
        return max((self._hit(s, sl) for sl in self.free_slots), default=0)

    def _pick_slot(self, s: _Seq) -> int:
        if s.prefix > 0 and self.cfg.prefix_caching:
            for i, sl in enumerate(self.free_slots):
                if self.slot_prefix[sl]:
                    return self.free_slots.pop(i)
        return self.free_slots.pop(0)

    def _release(self, s: _Seq) -> None:
        if self.cfg.policy == "llamacpp":
            if s.slot >= 0:
                self.free_slots.append(s.slot)
                self.free_slots.sort()
                s.slot = -1
        else:
            self.kv_used -= s.alloc
        s.alloc = 0

    def _preempt_one(self, now: float) -> bool:
        """Evict the most recently admitted running sequence (vLLM V1 ``running.pop()``)."""
        while self.admit_order:
            v = self.admit_order.pop()
            if v.worker is not self or v.state not in ("prefill", "decode"):
                continue
            if v.state == "decode":
                self._leave_decode(v)
            else:
                self.prefilling.remove(v)
            self._release(v)
            v.preemptions += 1
            self.preemptions += 1
            v.computed = v.cached = 0
            v.target = v.prompt + v.generated  # recompute prompt and the tokens already sent
            v.state = "waiting"
            self.waiting.appendleft(v)
            return True
        return False

    # -- decode set -------------------------------------------------------------------------------
    def _join_decode(self, s: _Seq) -> None:
        s.state = "decode"
        s.join_step = self.k
        s.gen_at_join = s.generated
        if s.generated == 0:
            self.fresh += 1
        s.version += 1
        self.decoding[s.rid] = s
        self.ctx_sum += s.prompt + s.generated
        finish = self.k + (s.out - s.generated)
        heapq.heappush(self.finish_heap, (finish, s.rid, s.version, s))

    def _leave_decode(self, s: _Seq) -> None:
        """Take ``s`` out of the decode set after step ``self.k`` (bookkeeping of its segment)."""
        steps = self.k - s.join_step
        s.generated = s.gen_at_join + steps
        if steps > 0:
            s.segments.append((self.idx, s.join_step, self.k))
        if self.cfg.preempt and self.cfg.policy == "vllm":
            s.alloc += steps  # decode tokens were allocated one per step
        del self.decoding[s.rid]
        self.ctx_sum -= s.prompt + s.generated
        s.version += 1

    # -- one step ---------------------------------------------------------------------------------
    def plan_step(self, now: float) -> float:
        """Choose the batch of the next step (see module docstring); returns its duration (0: idle)."""
        cfg, cost = self.cfg, self.cost
        budget = cfg.max_num_batched_tokens
        vllm = cfg.policy == "vllm"
        preempted = False
        if cfg.preempt and vllm:
            while self.decoding and self.kv_used + len(self.decoding) > self.kv_cap:
                if not self._preempt_one(now):
                    break
                preempted = True
        n_dec = len(self.decoding)
        budget -= n_dec
        if cfg.preempt and vllm:
            self.kv_used += n_dec
        chunks: list[tuple[_Seq, int, int]] = []
        if self.role != "decode":
            for s in self.prefilling:
                if budget <= 0:
                    break
                c = min(s.target - s.computed, budget)
                if cfg.preempt and vllm:
                    c = min(c, self.kv_cap - self.kv_used)
                    if c <= 0:
                        break
                    self.kv_used += c
                    s.alloc += c
                chunks.append((s, s.computed, c))
                budget -= c
        # admission (vLLM V1 admits nothing in a step that had to preempt)
        block: str | None = None
        while self.waiting and self.running < cfg.max_num_seqs and not preempted:
            s = self.waiting[0]
            if not self._fits_ever(s):
                self.waiting.popleft()
                self.sim._fail(s, now, "prompt + output tokens exceed the KV capacity"
                               + (" of one slot (--kv-pool-tokens ÷ --max-num-seqs)" if not vllm else ""))
                continue
            if (not cfg.chunked_prefill and s.computed < s.target
                    and s.target - self._best_hit(s) > cfg.max_num_batched_tokens):
                self.waiting.popleft()  # it would block the queue forever
                self.sim._fail(s, now, f"a prompt of {s.target} tokens exceeds --max-num-batched-tokens "
                                       f"{cfg.max_num_batched_tokens} with chunked prefill off")
                continue
            direct = s.computed >= s.target  # handed-off (disaggregated) sequence: decode only
            if not direct and (budget <= 0 or self.role == "decode"):
                block = "budget"
                break
            slot = self._pick_slot(s) if not vllm else -1
            if not direct:
                hit = self._hit(s, slot)
                s.cached = hit
                s.computed = max(s.computed, hit)
            need = s.target - s.computed
            if not direct and not cfg.chunked_prefill and need > budget:
                if slot >= 0:
                    self.free_slots.append(slot)
                    self.free_slots.sort()
                block = "budget"
                break
            if vllm:
                if cfg.preempt:
                    # vLLM ``allocate_slots`` needs blocks for the whole chunk, or the request waits
                    if not direct and self.kv_used + min(need, budget) > self.kv_cap:
                        block = "kv_pool"
                        break
                    if direct:
                        if self.kv_used + need + 1 > self.kv_cap:
                            block = "kv_pool"
                            break
                        self.kv_used += s.target
                        s.alloc = s.target
                else:
                    r = self._need_reserve(s)
                    if self.kv_used + r > self.kv_cap:
                        block = "kv_pool"
                        break
                    self.kv_used += r
                    s.alloc = r
            self.waiting.popleft()
            s.slot = slot
            s.worker = self
            s.t_admit = now if math.isnan(s.t_admit) else s.t_admit
            self.admit_order.append(s)
            if direct:
                self._join_decode(s)  # decodes in this very step
                budget -= 1
                if cfg.preempt and vllm:
                    self.kv_used += 1
                continue
            s.state = "prefill"
            self.prefilling.append(s)
            c = min(need, budget)
            if cfg.preempt and vllm:
                c = min(c, self.kv_cap - self.kv_used)
                self.kv_used += c
                s.alloc += c
            chunks.append((s, s.computed, c))
            budget -= c
        if self.waiting and block is None:
            block = "preempted" if preempted else ("max_num_seqs" if self.running >= cfg.max_num_seqs else None)
        # decodes this step: the decode set after admission (handed-off sequences decode at once)
        n_dec = len(self.decoding)
        if n_dec == 0 and not chunks:
            self._plan = None
            if self.prefilling and cfg.preempt and vllm and self._preempt_one(now):
                return self.plan_step(now)  # partial prompts filled the pool: evict one, go on
            return 0.0
        p_tok = 0
        pairs = 0.0
        kvtok = 0.0
        sampled = n_dec
        for s, p, c in chunks:
            p_tok += c
            pairs += chunk_pairs(p, c)
            kvtok += p + c
            if p + c >= s.target:
                sampled += 1
        dt = cost.step_time_s(n_dec, self.ctx_sum, p_tok, pairs, kvtok, len(chunks), sampled)
        self._plan = (chunks, n_dec, self.fresh, dt, p_tok, block)
        return dt

    def end_step(self, t: float) -> None:
        assert self._plan is not None
        chunks, n_dec, fresh, dt, p_tok, block = self._plan
        self._plan = None
        self.step_prefill.append(p_tok)
        self.step_block.append(block)
        self.k += 1
        k = self.k
        # a continuing decode's gap is end-to-end between this worker's steps (on a shared device
        # the other worker's steps sit in between; on its own device this equals ``dt``)
        gap = t - self.step_end[-1] if self.step_end else dt
        # the gap spans another worker's step (a prefill worker sharing the device): a prefill pause too
        self.step_shared.append(n_dec - fresh > 0 and gap > dt * (1 + 1e-9) + 1e-12)
        self.step_end.append(t)
        self.step_dur.append(gap if n_dec - fresh > 0 else dt)
        self.itl_weight.append(n_dec - fresh)
        self.busy_s += dt
        # decodes that ran this step: every member of the set before this step's joiners
        self.ctx_sum += n_dec
        self.fresh -= fresh
        # prefill progress
        for s, p, c in chunks:
            s.computed = p + c
            if s.prefix > 0 and s.computed >= s.prefix and self.cfg.prefix_caching:
                if self.cfg.policy == "llamacpp":
                    if s.slot >= 0:
                        self.slot_prefix[s.slot] = True
                elif not self.prefix_warm:
                    self.prefix_warm = True
                    moved = min(s.prefix, s.alloc)
                    s.alloc -= moved  # the prefix now belongs to the cache, resident once
            if s.computed >= s.target:
                self.prefilling.remove(s)
                self._prompt_done(s, t)
        # finished decodes
        h = self.finish_heap
        while h and h[0][0] <= k:
            _, _, ver, s = heapq.heappop(h)
            if ver != s.version or s.state != "decode" or s.worker is not self:
                continue
            self._leave_decode(s)
            s.t_last = t
            self._finish(s, t)
        self.ts_waiting.append(len(self.waiting))
        self.ts_running.append(self.running)
        if self.cfg.policy == "vllm":
            self.ts_kv.append(self.kv_used)
        else:  # llama.cpp slots: tokens actually held
            self.ts_kv.append(int(self.ctx_sum) + sum(x.computed for x in self.prefilling))

    def _prompt_done(self, s: _Seq, t: float) -> None:
        if math.isnan(s.t_prefill_done):
            s.t_prefill_done = t
        if self.role == "prefill":
            s.state = "xfer"
            self.sim._handoff(s, self, t)
            return
        # the step that finished the prompt also sampled the next token
        if s.generated > 0:  # resumed after preemption: the stall is one long inter-token gap
            s.extra_itl.append(t - self.sim._last_token_time(s))
        s.generated += 1
        s.tokens.append(t)
        if math.isnan(s.t_first):
            s.t_first = t
        s.t_last = t
        if s.generated >= s.out:
            self._finish(s, t)
        else:
            self._join_decode(s)

    def _finish(self, s: _Seq, t: float) -> None:
        s.state = "done"
        s.t_last = t
        self._release(s)
        self.sim._done(s, t)


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
        self.workers: list[_Worker] = []
        d = self.deploy
        if d.disaggregated:
            dc = d.decode_cost or cost
            for i in range(d.prefill_replicas):
                self.workers.append(_Worker(len(self.workers), "prefill", cost, self.sched, self))
            for i in range(d.decode_replicas):
                self.workers.append(_Worker(len(self.workers), "decode", dc, self.sched, self))
            # executors: one per worker, or one for the pair on a shared device
            if d.shared_device:
                self.executors: list[list[_Worker]] = [self.workers[:]]
            else:
                self.executors = [[w] for w in self.workers]
        else:
            for i in range(d.replicas):
                self.workers.append(_Worker(i, "both", cost, self.sched, self))
            self.executors = [[w] for w in self.workers]
        self._exec_of = {}
        for ei, ws in enumerate(self.executors):
            for w in ws:
                self._exec_of[w.idx] = ei
        self._exec_busy = [False] * len(self.executors)
        self._exec_rr = [0] * len(self.executors)
        self._exec_running: list[_Worker | None] = [None] * len(self.executors)
        self.seqs: list[_Seq] = []
        self.in_flight = 0
        self._next_rid = 0
        self._client_queue: deque[int] = deque()
        self.now = 0.0

    # -- events -----------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._order += 1
        heapq.heappush(self._heap, (t, self._order, kind, payload))

    def _send(self, rid: int, t: float) -> None:
        r = self.reqs
        s = _Seq(rid, int(r.input_tokens[rid]), int(r.output_tokens[rid]), int(r.prefix_tokens[rid]), t,
                 t + self.sched.api_overhead_s)
        self.seqs.append(s)
        self.in_flight += 1
        self._push(s.t_visible, _EV_VISIBLE, s)

    def _dispatch(self, s: _Seq, role: str) -> _Worker:
        cands = [w for w in self.workers if w.role == role]
        return min(cands, key=lambda w: (w.load(), w.idx))

    def _handoff(self, s: _Seq, w: _Worker, t: float) -> None:
        """Prefill done on a prefill replica: ship the prompt's KV, then queue on a decode replica."""
        xfer = w.cost.kv_transfer_s(s.prompt)
        start = max(t, w.link_free_at)
        w.link_free_at = start + xfer
        s.xfer_s = start + xfer - t  # waiting for the link + the transfer itself
        self._push(start + xfer, _EV_XFER, s)

    def _last_token_time(self, s: _Seq) -> float:
        best = s.tokens[-1] if s.tokens else math.nan
        for wi, j0, j1 in s.segments:
            te = self.workers[wi].step_end[j1]
            if math.isnan(best) or te > best:
                best = te
        return best

    def _fail(self, s: _Seq, t: float, why: str) -> None:
        s.failed = why
        s.state = "done"
        s.t_last = t
        self._done(s, t)

    def _done(self, s: _Seq, t: float) -> None:
        self.in_flight -= 1
        w = self.workload
        if self.workload.closed_loop:
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
        if w.closed_loop:
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

    def _first(self, s: _Seq) -> float:
        if s.failed:
            return math.nan
        best = s.tokens[0] if s.tokens else math.nan
        for wi, j0, _ in s.segments:
            t = self.sim.workers[wi].step_end[j0 + 1]
            if math.isnan(best) or t < best:
                best = t
        return best

    def _last(self, s: _Seq) -> float:
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
    def workers(self) -> list[_Worker]:
        return self.sim.workers


def simulate(
    cost: CostModel,
    workload: Workload,
    sched: SchedulerConfig | None = None,
    deploy: Deployment | None = None,
) -> SimResult:
    """Convenience: build and run a :class:`Simulator`."""
    return Simulator(cost, workload, sched, deploy).run()
