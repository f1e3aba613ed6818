"""llama.cpp's slots, for ``watch``: what each slot is doing, read from ``GET /slots`` (and
``/props``), since llama-server's /metrics has no latency histograms and no KV usage.

A slot object (``server_slot::to_json`` in llama.cpp's ``tools/server/server.cpp`` at the pinned build 0c1e570)
is ``{id, n_ctx, speculative, is_processing}`` plus, once the slot has run a task,
``id_task, n_prompt_tokens, n_prompt_tokens_processed, n_prompt_tokens_cache, params,
next_token: [{has_next_token, has_new_line, n_remain, n_decoded}]``. ``n_prompt_tokens`` is the
size of the slot's token list — the prompt *and* the tokens generated so far (the server pushes
each sampled token onto it) — so:

* ``context_tokens`` = ``n_prompt_tokens``; ``context_fill`` = context_tokens / ``n_ctx``;
* ``decoded`` = ``n_decoded``; ``prompt_tokens`` = context_tokens − decoded;
* ``cached_tokens`` = ``n_prompt_tokens_cache`` (prompt tokens reused from the slot's cache),
  ``cache_reuse`` = cached / (cached + ``n_prompt_tokens_processed``) — of the task's prompt,
  the part the prompt cache saved;
* ``state``: ``idle`` (not processing), ``prefill`` (processing, nothing decoded yet),
  ``decode``.

An idle slot reports its last task (``task_prev``) with its counters reset (``n_decoded`` 0,
processed 0, cache 0, measured on the embedded engine) but its token list kept: for an idle slot
only ``context_tokens`` (the context it keeps cached for the next task) and ``task`` are given. :class:`SlotTracker` notes each task id the first time it is seen, so the
cache reuse of every new task is listed (tasks that start and end between two refreshes are not seen).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from phasescope.metrics.alerts import Alert

#: a slot context this full gets an alert
CONTEXT_NEARLY_FULL = 0.90
#: new tasks remembered for the "recent tasks" list
RECENT_TASKS = 12


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class Slot:
    id: int
    state: str  # idle | prefill | decode
    n_ctx: int | None
    task: int | None = None
    context_tokens: int | None = None
    prompt_tokens: int | None = None
    decoded: int | None = None
    remaining: int | None = None
    cached_tokens: int | None = None
    processed_tokens: int | None = None

    @property
    def busy(self) -> bool:
        return self.state != "idle"

    @property
    def context_fill(self) -> float | None:
        if self.context_tokens is None or not self.n_ctx:
            return None
        return self.context_tokens / self.n_ctx

    @property
    def cache_reuse(self) -> float | None:
        c, p = self.cached_tokens, self.processed_tokens
        if c is None or p is None or c + p <= 0:
            return None
        return c / (c + p)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "prompt_tokens": self.prompt_tokens, "decoded": self.decoded,
                "n_ctx": self.n_ctx, "context_tokens": self.context_tokens,
                "context_fill": None if self.context_fill is None else round(self.context_fill, 4),
                "cached_tokens": self.cached_tokens,
                "cache_reuse": None if self.cache_reuse is None else round(self.cache_reuse, 4),
                "remaining": self.remaining, "task": self.task}


def parse_slots(raw: list[dict[str, Any]]) -> list[Slot]:
    """The /slots array → :class:`Slot` list, by id. Unknown fields are ignored, missing ones None."""
    out = []
    for i, s in enumerate(raw):
        nt = s.get("next_token")
        nt0 = nt[0] if isinstance(nt, list) and nt and isinstance(nt[0], dict) else nt if isinstance(nt, dict) else {}
        ctx = _int(s.get("n_prompt_tokens"))
        dec = _int(nt0.get("n_decoded"))
        processing = bool(s.get("is_processing"))
        state = "idle" if not processing else ("decode" if dec else "prefill")
        sid = _int(s.get("id"))
        slot = Slot(id=sid if sid is not None else i, state=state, n_ctx=_int(s.get("n_ctx")), task=_int(s.get("id_task")),
                    context_tokens=ctx)
        if processing:  # an idle slot's counters are reset (n_decoded 0, processed 0): only its kept context is real
            slot.decoded = dec
            slot.prompt_tokens = None if ctx is None else max(0, ctx - (dec or 0))
            slot.remaining = _int(nt0.get("n_remain"))
            slot.cached_tokens = _int(s.get("n_prompt_tokens_cache"))
            slot.processed_tokens = _int(s.get("n_prompt_tokens_processed"))
        out.append(slot)
    return sorted(out, key=lambda x: x.id)


@dataclass
class SlotTracker:
    """The slots across refreshes: the latest list, and each new task's prompt-cache reuse."""

    slots: list[Slot] | None = None
    note: str | None = None
    props: dict[str, Any] | None = None
    seen_tasks: set[int] = field(default_factory=set)
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_TASKS))
    new_tasks: int = 0

    def update(self, raw: list[dict[str, Any]] | None, note: str | None = None) -> None:
        if raw is None:
            self.slots, self.note = None, note
            return
        self.slots, self.note = parse_slots(raw), None
        first = not self.seen_tasks and not self.new_tasks
        for s in self.slots:
            if s.task is None:
                continue
            if s.task not in self.seen_tasks:
                self.seen_tasks.add(s.task)
                if first and not s.busy:
                    continue  # a task that ended before the watch began
                self.new_tasks += 1
                self.recent.append({"task": s.task, "slot": s.id, "prompt_tokens": s.prompt_tokens,
                                    "cached_tokens": s.cached_tokens, "cache_reuse": s.cache_reuse})
            elif s.busy:  # the same task seen again: its prompt is now (more) complete
                for t in self.recent:
                    if t["task"] == s.task and t["slot"] == s.id:
                        t.update(prompt_tokens=s.prompt_tokens, cached_tokens=s.cached_tokens, cache_reuse=s.cache_reuse)
        if len(self.seen_tasks) > 10_000:  # a long watch: keep the set bounded
            self.seen_tasks = {s.task for s in self.slots if s.task is not None}

    @property
    def total(self) -> int | None:
        if self.slots is not None:
            return len(self.slots)
        n = (self.props or {}).get("total_slots")
        return n if isinstance(n, int) else None

    def queue(self, waiting: float | None) -> dict[str, Any]:
        """Busy vs idle slots and the queue estimate: with an idle slot a new request starts at
        once; with none it waits for a slot to finish (``waiting`` = llama.cpp's
        ``requests_deferred`` from /metrics, when known)."""
        if self.slots is None:
            return {"total": self.total, "busy": None, "idle": None, "waiting": waiting, "estimate": None}
        busy = sum(1 for s in self.slots if s.busy)
        idle = len(self.slots) - busy
        w = int(waiting) if isinstance(waiting, (int, float)) else None
        if idle:
            est = f"no queue: {idle} of {len(self.slots)} slots idle, a new request starts at once"
        elif w:
            est = f"all {len(self.slots)} slots busy, {w} request{'s' if w != 1 else ''} waiting for a slot"
        else:
            est = f"all {len(self.slots)} slots busy: the next request waits for one to finish"
        return {"total": len(self.slots), "busy": busy, "idle": idle, "waiting": w, "estimate": est}

    def alerts(self, waiting: float | None) -> list[Alert]:
        out: list[Alert] = []
        if not self.slots:
            return out
        q = self.queue(waiting)
        if q["idle"] == 0 and q["waiting"]:
            n_ctx = self.slots[0].n_ctx
            out.append(Alert("slots_full", "crit",
                             f"all {q['total']} slots are busy and {q['waiting']} request(s) wait for one: "
                             f"llama-server runs at most --parallel {q['total']} at once — raise --parallel (each slot "
                             f"then gets a share of --ctx-size{f', now {n_ctx} tokens per slot' if n_ctx else ''}) "
                             "or add a replica"))
        for s in self.slots:
            f = s.context_fill
            if s.busy and f is not None and f >= CONTEXT_NEARLY_FULL:
                out.append(Alert("slot_context", "warn",
                                 f"slot {s.id}'s context is {f:.0%} full ({s.context_tokens:,} of {s.n_ctx:,} tokens): "
                                 "its request will stop at the limit or the server shifts the context — raise "
                                 "--ctx-size (per slot: ctx-size ÷ --parallel) or send shorter prompts"))
        return out

    def to_json(self, waiting: float | None) -> dict[str, Any]:
        """The ``watch --json`` keys: ``slots`` (list, or null with ``slots_note``), ``slots_queue``,
        ``slots_recent_tasks``."""
        return {
            "slots": None if self.slots is None else [s.to_dict() for s in self.slots],
            "slots_note": self.note,
            "slots_queue": self.queue(waiting),
            "slots_recent_tasks": list(self.recent),
        }
