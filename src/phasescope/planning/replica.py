"""One replica of the simulated server: its queue, running set, KV pool, prefix cache and step history,
and the plan of its next step (:meth:`Replica.plan_step`, vLLM V1 ``Scheduler.schedule`` /
llama.cpp ``update_slots``) — the scheduler that :mod:`phasescope.planning.sim` drives with its events.
A :class:`Seq` is one request as the replicas see it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING, Any

from phasescope.planning.costmodel import CostModel, chunk_pairs

if TYPE_CHECKING:
    from phasescope.planning.sim import SchedulerConfig, Simulator


class Seq:
    __slots__ = (
        "rid", "prompt", "out", "prefix", "t_send", "t_visible", "t_admit", "t_first", "t_last",
        "computed", "target", "generated", "cached", "alloc", "join_step", "gen_at_join", "version",
        "worker", "segments", "tokens", "extra_itl", "preemptions", "state", "slot", "failed",
        "t_prefill_done", "xfer_s", "sess",
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
        self.worker: Replica | None = None
        self.segments: list[tuple[int, int, int]] = []  # (worker index, join step, last step)
        self.tokens: list[float] = []  # token times not covered by segments
        self.extra_itl: list[float] = []
        self.preemptions = 0
        self.state = "new"  # new, waiting, prefill, decode, xfer, done
        self.slot = -1
        self.failed: str | None = None
        self.t_prefill_done = math.nan
        self.xfer_s = math.nan
        self.sess: int | None = None  # conversations: the session this turn belongs to


class Replica:
    """One replica: its queue, running set, KV pool and step history."""

    def __init__(self, idx: int, role: str, cost: CostModel, cfg: SchedulerConfig, sim: "Simulator") -> None:
        self.idx = idx
        self.role = role  # both, prefill, decode
        self.cost = cost
        self.cfg = cfg
        self.sim = sim
        self.waiting: deque[Seq] = deque()
        self.prefilling: list[Seq] = []
        self.decoding: dict[int, Seq] = {}
        self.admit_order: list[Seq] = []
        self.finish_heap: list[tuple[int, int, int, Seq]] = []
        self.ctx_sum = 0.0
        self.fresh = 0  # decoding sequences whose next token is their first (disaggregated decode side)
        self.kv_used = 0
        self.kv_cap = int(cost.kv_pool_tokens)
        self.prefix_warm = False
        self.slot_prefix: list[bool] = [False] * cfg.max_num_seqs
        #: llama.cpp + conversations: the session whose prompt each slot holds (one prompt per slot)
        self.slot_owner: list[int | None] = [None] * cfg.max_num_seqs
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
        #: llama.cpp's checkpoint breaks before a prompt's end (SchedulerConfig.prompt_tail_breaks)
        self.breaks = cfg.tail_breaks(cost)
        #: a session workload (plan.sessions): per-request hits decided by its LRU, held per request
        self.sessions = sim.workload.implied_hit_share is not None

    # -- queue state ----------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def load(self) -> int:
        return self.running + len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.decoding or self.prefilling or self.waiting)

    # -- KV ---------------------------------------------------------------------------------------
    def _need_reserve(self, s: Seq) -> int:
        return (s.target - s.cached) + (s.out - s.generated)

    def _fits_ever(self, s: Seq) -> bool:
        if self.cfg.policy == "llamacpp":
            per_slot = self.kv_cap // max(self.cfg.max_num_seqs, 1)
            return s.prompt + s.out <= per_slot
        return s.prompt + s.out <= self.kv_cap

    def _hit(self, s: Seq, slot: int) -> int:
        if not (self.cfg.prefix_caching and s.prefix > 0):
            return 0
        if self.cfg.policy == "llamacpp":
            if self.sessions and s.sess is not None:
                # a slot keeps only its last prompt: this session's own history, another session's
                # (sharing the system prompt at most), or nothing yet
                if slot < 0 or self.slot_owner[slot] is None:
                    return 0
                if self.slot_owner[slot] == s.sess:
                    return s.prefix
                return min(s.prefix, self._system_len())
            return s.prefix if slot >= 0 and self.slot_prefix[slot] else 0
        if self.sessions:
            # session workloads: the LRU of plan.sessions already decided this request's hit (a
            # history or blocks an earlier request left in the cache), not the one shared prefix
            return s.prefix
        return s.prefix if self.prefix_warm else 0

    def _best_hit(self, s: Seq) -> int:
        """Prefix tokens ``s`` could skip if admitted now (llama.cpp: on the best free slot)."""
        if self.cfg.policy != "llamacpp":
            return self._hit(s, -1)
        return max((self._hit(s, sl) for sl in self.free_slots), default=0)

    def _system_len(self) -> int:
        loop = getattr(self.sim, "loop", None)
        return int(loop.system_len) if loop is not None else 0

    def _pick_slot(self, s: Seq) -> int:
        if self.sessions and s.sess is not None:
            # llama.cpp picks the slot whose prompt is most similar: this session's, then any
            # (the shared system prompt), then an empty one
            for want in (lambda o: o == s.sess, lambda o: o is not None):
                for i, sl in enumerate(self.free_slots):
                    if want(self.slot_owner[sl]):
                        return self.free_slots.pop(i)
            return self.free_slots.pop(0)
        if s.prefix > 0 and self.cfg.prefix_caching:
            for i, sl in enumerate(self.free_slots):
                if self.slot_prefix[sl]:
                    return self.free_slots.pop(i)
        return self.free_slots.pop(0)

    def _release(self, s: Seq) -> None:
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
    def _join_decode(self, s: Seq) -> None:
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

    def _leave_decode(self, s: Seq) -> None:
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

    def _chunk(self, s: Seq, start: int, c: int) -> int:
        """Cut a chunk of ``c`` tokens from ``start`` at llama.cpp's checkpoint breaks: the batch stops
        when the prompt reaches ``target − offset`` (server-context.cpp checks after adding each token)."""
        for off in self.breaks:
            brk = s.target - off
            if start < brk < start + c:
                return brk - start
        return c

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
        chunks: list[tuple[Seq, int, int]] = []
        if self.role != "decode":
            for s in self.prefilling:
                if budget <= 0:
                    break
                c = self._chunk(s, s.computed, min(s.target - s.computed, budget))
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
            if not vllm and not self.free_slots:  # a slot still holds a prompt whose KV is being shipped
                block = "max_num_seqs"
                break
            slot = self._pick_slot(s) if not vllm else -1
            held = 0
            if not direct:
                hit = self._hit(s, slot)
                if slot >= 0 and s.sess is not None:
                    self.slot_owner[slot] = s.sess  # this prompt now overwrites the slot's
                s.cached = hit
                s.computed = max(s.computed, hit)
                # a session's cached history is its own (not one prefix resident once for all):
                # it occupies the pool while the request runs, as vLLM's referenced blocks do
                held = hit if self.sessions else 0
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
                    if not direct and self.kv_used + held + min(need, budget) > self.kv_cap:
                        block = "kv_pool"
                        break
                    self.kv_used += held
                    s.alloc += held
                    if direct:
                        if self.kv_used + need + 1 > self.kv_cap:
                            block = "kv_pool"
                            break
                        self.kv_used += s.target
                        s.alloc = s.target
                else:
                    r = self._need_reserve(s) + held
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
            c = self._chunk(s, s.computed, min(need, budget))
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
                elif not self.prefix_warm and not self.sessions:
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

    def _prompt_done(self, s: Seq, t: float) -> None:
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

    def _finish(self, s: Seq, t: float) -> None:
        s.state = "done"
        s.t_last = t
        self._release(s)
        self.sim._done(s, t)
