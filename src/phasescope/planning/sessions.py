"""Session-structured workloads for ``plan``: conversations and Mooncake traces, with a prefix hit per request.

A conversation turn N resends the whole history: its prompt is the system prompt + Σ previous turns'
(input + output) + this turn's input, and the tokens it can skip are the previous turn's prompt + reply
when that session's KV is still cached (turn 1: the shared system prompt, once someone computed it).
A Mooncake trace request can skip its leading hash blocks already seen (``load.traces`` reads the file).

The cache is an LRU of session prefixes (conversation) or blocks (Mooncake) bounded by the KV pool
tokens: an entry is evicted, least recently used first, when the pool is full. It ignores the KV that
running requests hold, so it is an upper bound of what a real pool keeps; the simulator then serves
each request's hit only where its own prefix cache is warm, so the simulated hit share is ≤ the LRU's,
which is ≤ the workload's implied share (a cache that keeps everything).

Conversations are a closed loop (:class:`ConversationLoop`, driven by the simulator): a session's turn
N+1 is sent only once turn N's last token was produced in the simulation, plus the think time, so a
session never has two turns in flight and the load never exceeds one request per user. Its history
enters the cache when the reply that completes it exists (the system prompt: when the first turn that
carries it is sent, as every later turn 1 can reuse it once computed). A Mooncake trace is open loop:
its timestamps are the arrivals.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np

from phasescope.errors import InputError

DATASETS = ("conversation", "mooncake")


class LRUTokens:
    """Entries of known token sizes, bounded by ``capacity`` tokens; least recently used evicted first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self.used = 0
        self._d: OrderedDict[Hashable, int] = OrderedDict()

    def get(self, key: Hashable) -> int:
        """Tokens cached under ``key`` (0: absent); a hit counts as a use."""
        if key not in self._d:
            return 0
        self._d.move_to_end(key)
        return self._d[key]

    def put(self, key: Hashable, tokens: int) -> None:
        old = self._d.pop(key, None)
        if old is not None:
            self.used -= old
        if tokens <= 0 or tokens > self.capacity:
            return
        while self.used + tokens > self.capacity and self._d:
            _, t = self._d.popitem(last=False)
            self.used -= t
        self._d[key] = tokens
        self.used += tokens


@dataclass
class SessionWorkload:
    """Rows ``(arrival s, prompt, output, prefix-hit tokens)`` for the simulator's trace path (Mooncake),
    the share of prompt tokens a keep-everything cache would serve, and facts for the plan JSON."""

    rows: list[tuple[float, int, int, int]]
    implied_hit_share: float
    lru_hit_share: float
    facts: dict[str, Any]
    #: conversations: the closed loop the simulator drives (arrivals and hits come from it)
    loop: ConversationLoop | None = None


def conversation_prompts(turns: int, system_len: int, turn_input_len: int, output_len: int) -> list[int]:
    """Prompt tokens of turns 1..N: system + Σ previous (input + output) + this input."""
    return [system_len + k * (turn_input_len + output_len) + turn_input_len for k in range(turns)]


class ConversationLoop:
    """Closed-loop conversations for the simulator (module docstring): ``first_sends()`` gives each
    session's first send time; the simulator calls ``on_send(u, k)`` when it sends turn ``k`` of
    session ``u`` (→ prompt, output, prefix-hit tokens from the LRU at that moment) and
    ``on_done(u, k, t)`` when that turn's last token came (→ the next turn's send time, or None)."""

    def __init__(self, *, starts: Sequence[float] | np.ndarray, turns: int, system_len: int, turn_input_len: int,
                 output_len: int, think_time_s: float, pool_tokens: int, caching: bool) -> None:
        self._args: dict[str, Any] = dict(starts=starts, turns=turns, system_len=system_len, turn_input_len=turn_input_len,
                          output_len=output_len, think_time_s=think_time_s, pool_tokens=pool_tokens,
                          caching=caching)
        self.starts = [float(x) for x in starts]
        self.users = len(self.starts)
        self.turns = turns
        self.system_len = system_len
        self.output_len = output_len
        self.think_time_s = float(think_time_s)
        self.prompts = conversation_prompts(turns, system_len, turn_input_len, output_len)
        self.cache = LRUTokens(pool_tokens if caching else 0)
        self.sent_prompt_tokens = 0
        self.lru_hit_tokens = 0

    def fresh(self) -> "ConversationLoop":
        """The same sessions with an empty cache (each simulation starts from nothing)."""
        return ConversationLoop(**self._args)

    @property
    def requests(self) -> int:
        return self.users * self.turns

    def first_sends(self) -> list[tuple[float, int]]:
        return [(t, u) for u, t in enumerate(self.starts)]

    def on_send(self, u: int, k: int) -> tuple[int, int, int]:
        p = self.prompts[k]
        if k == 0:
            hit = self.cache.get("system")
        else:
            hit = max(self.cache.get(("session", u)), self.cache.get("system"))
        if self.system_len:
            self.cache.put("system", self.system_len)
        hit = min(hit, p)
        self.sent_prompt_tokens += p
        self.lru_hit_tokens += hit
        return p, self.output_len, hit

    def on_done(self, u: int, k: int, t: float, ok: bool = True) -> float | None:
        if k + 1 < self.turns:  # the history (prompt + reply) the next turn resends now exists
            if ok:
                self.cache.put(("session", u), self.prompts[k] + self.output_len)
            return t + self.think_time_s
        self.cache.put(("session", u), 0)  # the session ended: its KV is freed
        return None

    def implied_hit_share(self) -> float:
        """A cache that keeps everything: every later turn skips its whole history, every first turn
        but the very first skips the system prompt (order-independent, so known before simulating)."""
        later = sum(self.prompts[k - 1] + self.output_len for k in range(1, self.turns))
        implied = self.users * later + (self.users - 1) * self.system_len
        return implied / (self.users * sum(self.prompts))

    def lru_hit_share(self) -> float | None:
        """The LRU's share over the turns sent so far (None before the simulation ran)."""
        return self.lru_hit_tokens / self.sent_prompt_tokens if self.sent_prompt_tokens else None


def conversation(*, users: int, turns: int, system_len: int, turn_input_len: int, output_len: int,
                 think_time_s: float, session_rate: float | None, pool_tokens: int, caching: bool,
                 seed: int = 0) -> SessionWorkload:
    """``users`` closed-loop sessions of ``turns`` turns (see module docstring). Sessions start as a
    Poisson process at ``session_rate`` per second, or (no rate) spread evenly over one think time.
    The rows hold ``(start of the session, prompt, output, 0)`` per turn for the means; arrivals and
    hits come from the simulation (``loop``)."""
    if users < 1:
        raise InputError("--users must be ≥ 1")
    if turns < 1:
        raise InputError("--turns must be ≥ 1")
    if system_len < 0 or turn_input_len < 1 or output_len < 1:
        raise InputError("--system-prompt-len must be ≥ 0, --turn-input-len and --output-len ≥ 1")
    if not think_time_s >= 0:
        raise InputError("--think-time-s must be ≥ 0 s")
    if session_rate is not None and not session_rate > 0:
        raise InputError("--session-rate must be > 0 sessions/s")
    rng = np.random.default_rng(seed)
    if session_rate is not None:
        starts = np.cumsum(rng.exponential(1.0 / session_rate, size=users))
        starts -= starts[0]
    else:
        starts = np.arange(users) * (think_time_s / users)
    loop = ConversationLoop(starts=starts, turns=turns, system_len=system_len, turn_input_len=turn_input_len,
                            output_len=output_len, think_time_s=think_time_s, pool_tokens=pool_tokens,
                            caching=caching)
    rows = [(float(starts[u]), p, output_len, 0) for u in range(users) for p in loop.prompts]
    return SessionWorkload(
        rows, loop.implied_hit_share(), 0.0,
        {"dataset": "conversation", "loop": "closed", "users": users, "turns": turns,
         "system_prompt_len": system_len, "turn_input_len": turn_input_len, "output_len": output_len,
         "think_time_s": think_time_s, "session_rate": session_rate, "requests": len(rows),
         "prompt_tokens_by_turn": loop.prompts}, loop=loop)


def mooncake(entries: Sequence[Any], *, block_size: int, pool_tokens: int, caching: bool) -> SessionWorkload:
    """Trace entries (``load.traces.read_mooncake``) with their LRU block hits (see module docstring)."""
    from phasescope.load.traces import implied_hit_rate

    if not entries:
        raise InputError("the trace holds no requests")
    cache = LRUTokens((pool_tokens // block_size) * block_size if caching else 0)
    rows: list[tuple[float, int, int, int]] = []
    ordered = sorted(entries, key=lambda e: e.offset_s)
    for e in ordered:
        il = int(e.input_len or 0)
        hit = 0
        for j, h in enumerate(e.hash_ids):
            if not cache.get(("block", h)):
                break
            hit += min(block_size, il - j * block_size)
        for h in e.hash_ids:
            cache.put(("block", h), block_size)
        rows.append((float(e.offset_s), il, max(1, int(e.output_len or 1)), hit))
    total = sum(r[1] for r in rows) or 1
    implied = implied_hit_rate(ordered, block_size) or 0.0
    return SessionWorkload(rows, float(implied), sum(r[3] for r in rows) / total,
                           {"dataset": "mooncake", "requests": len(rows), "block_size": block_size,
                            "distinct_blocks": len({h for e in entries for h in e.hash_ids})})
