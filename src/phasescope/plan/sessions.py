"""Session-structured workloads for ``plan``: conversations and Mooncake traces, with a prefix hit per request.

A conversation turn N resends the whole history: its prompt is the system prompt + Σ previous turns'
(input + output) + this turn's input, and the tokens it can skip are the previous turn's prompt + reply
when that session's KV is still cached (turn 1: the shared system prompt, once someone computed it).
A Mooncake trace request can skip its leading hash blocks already seen (``load.traces`` reads the file).

The cache is an LRU of session prefixes (conversation) or blocks (Mooncake) bounded by the KV pool
tokens: an entry is evicted, least recently used first, when the pool is full. It walks the requests
in arrival order and ignores the KV that running requests hold, so it is an upper bound of what a
real pool keeps; the simulator then serves each request's hit only where its own prefix cache is
warm, so the simulated hit share is ≤ the LRU's, which is ≤ the workload's implied share (a cache
that keeps everything).

Sessions are open loop: the simulator cannot release a turn when the previous one finished, so turn
N arrives at turn N−1's arrival + the cost model's estimate of turn N−1 alone (prefill + decode at
batch 1) + the think time. Under load real turns take longer than alone, so a simulated user
sends its next turn somewhat earlier than a closed-loop user would.
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
    """Rows ``(arrival s, prompt, output, prefix-hit tokens)`` for the simulator's trace path, the
    share of prompt tokens a keep-everything cache would serve, and facts for the plan JSON."""

    rows: list[tuple[float, int, int, int]]
    implied_hit_share: float
    lru_hit_share: float
    facts: dict[str, Any]


def conversation_prompts(turns: int, system_len: int, turn_input_len: int, output_len: int) -> list[int]:
    """Prompt tokens of turns 1..N: system + Σ previous (input + output) + this input."""
    return [system_len + k * (turn_input_len + output_len) + turn_input_len for k in range(turns)]


def conversation(*, users: int, turns: int, system_len: int, turn_input_len: int, output_len: int,
                 think_time_s: float, session_rate: float | None, pool_tokens: int, caching: bool,
                 turn_time_s: Any, seed: int = 0) -> SessionWorkload:
    """``users`` sessions of ``turns`` turns (see module docstring). Sessions start as a Poisson process
    at ``session_rate`` per second, or (no rate) spread evenly over one think time.
    ``turn_time_s(prompt, output, hit)`` estimates one turn alone."""
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
    prompts = conversation_prompts(turns, system_len, turn_input_len, output_len)
    # (arrival, session, turn): the arrival of turn k+1 needs turn k's estimate
    pending: list[tuple[float, int, int]] = []
    for u in range(users):
        t = float(starts[u])
        for k in range(turns):
            pending.append((t, u, k))
            t += float(turn_time_s(prompts[k], output_len, prompts[k - 1] + output_len if k else system_len))
            t += think_time_s
    pending.sort()
    cache = LRUTokens(pool_tokens if caching else 0)
    rows: list[tuple[float, int, int, int]] = []
    implied = 0
    sys_seen = False
    for t, u, k in pending:
        p = prompts[k]
        if k == 0:
            implied += system_len if sys_seen else 0
            sys_seen = sys_seen or system_len > 0
            hit = cache.get("system")
        else:
            implied += prompts[k - 1] + output_len
            hit = max(cache.get(("session", u)), cache.get("system"))
        rows.append((t, p, output_len, min(hit, p)))
        if system_len:
            cache.put("system", system_len)
        if k + 1 < turns:  # the history this session's next turn will resend
            cache.put(("session", u), p + output_len)
        else:
            cache.put(("session", u), 0)  # the session ended: its KV is freed
    total = sum(r[1] for r in rows)
    return SessionWorkload(
        rows, implied / total, sum(r[3] for r in rows) / total,
        {"dataset": "conversation", "loop": "open", "users": users, "turns": turns,
         "system_prompt_len": system_len, "turn_input_len": turn_input_len, "output_len": output_len,
         "think_time_s": think_time_s, "session_rate": session_rate, "requests": len(rows),
         "prompt_tokens_by_turn": prompts})


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
