"""Conversation workloads (``bench --dataset conversation``, issue 17): sessions of dependent turns.

Chat and agent traffic resends the whole history every turn, so turn N's prompt is turn N−1's prompt
plus turn N−1's reply plus the new input, and the server's prefix cache decides whether turn N pays
for the history again. A *session* here is what one chat client does:

* an optional system prompt of ``--system-prompt-len`` tokens, the same text for every user
  (``--system-prompt shared``) or one per user (``per-user``);
* ``--turns`` turns (``N`` or ``LO-HI``, drawn uniformly per session); each turn appends a user
  message of ``--turn-input-len`` tokens, sends the *whole* history on the chat API
  (``/v1/chat/completions``, Ollama ``/api/chat``), and appends the server's **real reply text** as
  the assistant message — so the prefix cache sees exactly what a real client sends;
* agentic shape: ``--tool-output-len`` tokens of tool output put before each later turn's input.
  They travel inside the user message (``"[tool output] …"``): a ``tool`` role message needs a
  ``tool_call_id`` the model never produced, and templates such as Gemma's reject roles that do not
  alternate user/assistant. For the prefix cache the bytes are the same;
* think time between a reply and the next turn: ``--think-time-s S`` (fixed) or ``exp:S``
  (exponential with mean S).

Arrivals: closed loop — ``--users`` users, each running sessions back to back until ``--sessions``
(default: one per user) have started or ``--duration`` has passed; open loop —
``--session-rate R`` sessions per second (Poisson), ``--sessions`` of them, each running on its
own. Every turn leaves one :class:`RequestRecord`, written as it completes, with ``session``,
``user``, ``turn`` (1-based) and ``turns`` in its tags; the reply text is kept in memory only (never
written). Per-turn aggregates (:func:`phasescope.load.conversation_stats.turn_rows`) become ``turns`` in
``bench --json``, the session view (:func:`phasescope.load.conversation_stats.conversation_section`)
``conversation``.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from phasescope.apis import registry
from phasescope.apis.base import GenRequest, Target, take_reply
from phasescope.errors import InputError
from phasescope.load.session_run import SendFn, SessionRun
from phasescope.load.workload import WorkItem, part_salt
from phasescope.measure.records import RequestRecord

#: the ``--dataset`` name of this workload
DATASET = "conversation"
#: the text put before a tool result inside the next user message
TOOL_MARK = "[tool output]"


def parse_turns(text: str | int) -> tuple[int, int]:
    """``--turns``: ``N`` or ``LO-HI`` (uniform per session), each from 1 to 1000."""
    s = str(text).strip()
    try:
        if "-" in s:
            a, b = s.split("-", 1)
            lo, hi = int(a), int(b)
        else:
            lo = hi = int(s)
    except ValueError:
        raise InputError(f"--turns must be N or LO-HI (got {text!r})") from None
    if not 1 <= lo <= hi <= 1000:
        raise InputError(f"--turns must be from 1 to 1000, LO ≤ HI (got {text!r})")
    return lo, hi


def parse_think_time(text: str | float | None) -> tuple[float, str]:
    """``--think-time-s``: ``S`` (fixed seconds) or ``exp:S`` (exponential, mean S)."""
    if text is None:
        return 0.0, "fixed"
    s = str(text).strip().lower()
    dist = "fixed"
    if s.startswith(("exp:", "exponential:")):
        dist, s = "exponential", s.split(":", 1)[1]
    try:
        v = float(s)
    except ValueError:
        raise InputError(f"--think-time-s must be seconds or exp:SECONDS (got {text!r})") from None
    if not (math.isfinite(v) and 0 <= v <= 3600):
        raise InputError(f"--think-time-s must be from 0 to 3600 s (got {text!r})")
    return v, dist


@dataclass
class ConversationSpec:
    """The conversation flags, checked (see the module docstring)."""

    users: int = 4
    sessions: int | None = None  # None: one per user (closed loop), 10 (open loop)
    turns: tuple[int, int] = (4, 4)
    system_prompt_len: int = 0
    system_prompt: str = "shared"  # shared | per-user
    turn_input_len: int = 64
    output_len: int = 64
    think_time_s: float = 0.0
    think_dist: str = "fixed"  # fixed | exponential
    tool_output_len: int = 0
    session_rate: float | None = None  # None: closed loop of `users`
    cache_prompt: bool | None = None  # llama.cpp cache_prompt per request (None: server default)

    @property
    def open_loop(self) -> bool:
        return self.session_rate is not None

    @property
    def n_sessions(self) -> int:
        if self.sessions is not None:
            return self.sessions
        return 10 if self.open_loop else self.users

    @classmethod
    def from_config(cls, cfg: Any) -> "ConversationSpec":
        think, dist = parse_think_time(getattr(cfg, "think_time_s", None))
        spec = cls(users=int(cfg.users), sessions=cfg.sessions, turns=parse_turns(cfg.turns),
                   system_prompt_len=int(cfg.system_prompt_len), system_prompt=str(cfg.system_prompt_scope),
                   turn_input_len=int(cfg.turn_input_len), output_len=int(cfg.output_len or 64),
                   think_time_s=think, think_dist=dist, tool_output_len=int(cfg.tool_output_len),
                   session_rate=cfg.session_rate, cache_prompt=cfg.cache_prompt)
        spec.check()
        return spec

    def check(self) -> None:
        if not 1 <= self.users <= 10_000:
            raise InputError(f"--users must be from 1 to 10,000 (got {self.users})")
        if self.sessions is not None and not 1 <= self.sessions <= 100_000:
            raise InputError(f"--sessions must be from 1 to 100,000 (got {self.sessions})")
        if self.system_prompt not in ("shared", "per-user"):
            raise InputError(f"--system-prompt must be shared or per-user (got {self.system_prompt!r})")
        for name, v, lo in (("--system-prompt-len", self.system_prompt_len, 0), ("--turn-input-len", self.turn_input_len, 1),
                            ("--output-len", self.output_len, 1), ("--tool-output-len", self.tool_output_len, 0)):
            if not lo <= v <= 1_000_000:
                raise InputError(f"{name} must be from {lo} to 1,000,000 (got {v})")
        if self.session_rate is not None and not (math.isfinite(self.session_rate) and self.session_rate > 0):
            raise InputError(f"--session-rate must be a positive number of sessions per second (got {self.session_rate})")

    def to_dict(self) -> dict[str, Any]:
        return {"users": self.users, "sessions": self.n_sessions, "turns": list(self.turns),
                "system_prompt_len": self.system_prompt_len, "system_prompt": self.system_prompt,
                "turn_input_len": self.turn_input_len, "output_len": self.output_len,
                "think_time_s": self.think_time_s, "think_time_dist": self.think_dist,
                "tool_output_len": self.tool_output_len, "session_rate": self.session_rate,
                "loop": "open" if self.open_loop else "closed", "cache_prompt": self.cache_prompt}


@dataclass
class TurnPlan:
    """One turn's new content: the user input (with tool output before it) and the reply length."""

    text: str
    tokens: int  # content tokens of this turn's new message (tool output + input)
    output_len: int
    think_s: float  # pause before this turn (0 for the first)


@dataclass
class SessionPlan:
    index: int
    user: int
    offset_s: float  # open loop: arrival after t0; closed loop: 0 (when a user is free)
    system: str | None
    system_tokens: int
    turns: list[TurnPlan] = field(default_factory=list)


async def build_sessions(spec: ConversationSpec, maker: Any, *, seed: int = 0,
                         run_salt: str | None = None) -> list[SessionPlan]:
    """Every session's texts, built up front through the server's tokenizer (``maker``, see
    :mod:`phasescope.prompting`) so each part has its exact token count. Texts are salted
    per run (``run_salt``; None = ``--reuse-prompts``), so a new run never hits the last one's cache."""
    rng = random.Random(seed * 1_000_003 + 17)
    n = spec.n_sessions
    systems: dict[int, tuple[str, int]] = {}

    async def system_of(user: int) -> tuple[str | None, int]:
        if spec.system_prompt_len <= 0:
            return None, 0
        key = 0 if spec.system_prompt == "shared" else user
        if key not in systems:
            text, _ = await maker.make(spec.system_prompt_len, salt=part_salt(seed, run_salt, "sys", key), first=False)
            systems[key] = (text, spec.system_prompt_len)
        return systems[key]

    t = 0.0
    out: list[SessionPlan] = []
    for i in range(n):
        user = i % spec.users if not spec.open_loop else i
        if spec.open_loop and i > 0:
            t += rng.expovariate(spec.session_rate or 1.0)
        sys_text, sys_tokens = await system_of(user)
        sp = SessionPlan(i, user, t if spec.open_loop else 0.0, sys_text, sys_tokens)
        for k in range(rng.randint(*spec.turns)):
            text, _ = await maker.make(spec.turn_input_len, salt=part_salt(seed, run_salt, f"c{i}t", k), first=False)
            tokens = spec.turn_input_len
            if k > 0 and spec.tool_output_len > 0:
                tool, _ = await maker.make(spec.tool_output_len, salt=part_salt(seed, run_salt, f"c{i}o", k), first=False)
                text = f"{TOOL_MARK}{tool}\n{text}"
                tokens += spec.tool_output_len
            think = 0.0
            if k > 0 and spec.think_time_s > 0:
                think = spec.think_time_s if spec.think_dist == "fixed" else rng.expovariate(1.0 / spec.think_time_s)
            sp.turns.append(TurnPlan(text, tokens, spec.output_len, think))
        out.append(sp)
    return out


def chat_target(target: Target) -> Target:
    """The target on its chat API (its spec's ``chat_api``): ``/v1/chat/completions`` for
    OpenAI-compatible and llama.cpp servers, Ollama's ``/api/chat`` (the ``ollama`` api with its
    ``chat_tags``, ``ollama_chat``) for Ollama."""
    chat = registry.chat_of(target.api)
    if chat.name == target.api:
        return target
    from dataclasses import replace

    return replace(target, api=chat.name)


async def run_sessions(
    sessions: Sequence[SessionPlan],
    spec: ConversationSpec,
    target: Target,
    *,
    send: SendFn,
    warmups: Sequence[WorkItem] = (),
    writer: Any = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    stop: asyncio.Event | None = None,
    run_id: str = "run",
    start_gate: Callable[[], Awaitable[int]] | None = None,
    abort_after_errors: int = 8,
    duration_s: float | None = None,
    ignore_eos: bool = True,
    prewarm_connections: int = 0,
    drain_timeout_s: float | None = 60.0,
    count: Callable[[str], Awaitable[int | None]] | None = None,
) -> Any:
    """Run the sessions and return a :class:`phasescope.load.runner.RunResult` (one record per turn;
    warm-ups — single-message requests with their own prompts — before t0, excluded).

    ``writer``: the run's record sink (``.write(record)``), fed on a background thread as each turn
    completes. ``duration_s``: no turn starts after it (in-flight turns get ``drain_timeout_s``).
    A failed turn ends its session (the history would no longer be what a client holds).
    ``count``: the server's tokenizer (``/tokenize``), when it has one: each reply's text is counted
    as it will be resent (``tags["reply_tokens_resent"]``; a generated token sequence need not
    re-tokenize to the same count), so the next turn's ``content_tokens`` is exact. It runs after
    the turn's last byte, outside every measured interval."""
    run = SessionRun(target, send=send, writer=writer, on_record=on_record, stop=stop,
                     abort_after_errors=abort_after_errors, duration_s=duration_s)

    async def run_session(sp: SessionPlan) -> None:
        messages: list[dict[str, Any]] = []
        if sp.system is not None:
            messages.append({"role": "system", "content": sp.system})
        history = sp.system_tokens  # content tokens sent so far (no template tokens)
        for k, tp in enumerate(sp.turns):
            if k > 0 and not await run.pause(tp.think_s):
                return
            if run.ended():
                return
            messages.append({"role": "user", "content": tp.text})
            history += tp.tokens
            req = GenRequest(
                prompt=tp.text, max_tokens=tp.output_len, stream=True, ignore_eos=ignore_eos,
                cache_prompt=spec.cache_prompt, id=f"{run_id}-s{sp.index}t{k + 1}", keep_text=True,
                messages=[dict(m) for m in messages],
                tags={**run.chat_tags, "session": f"s{sp.index}", "user": sp.user, "turn": k + 1,
                      "turns": len(sp.turns), "history_messages": len(messages), "content_tokens": history,
                      "system_tokens": sp.system_tokens,
                      "system_key": "shared" if spec.system_prompt == "shared" else f"u{sp.user}"})
            run.res.scheduled += 1
            run.res.sent += 1
            rec = await run.send(req)
            reply = take_reply(rec)  # resent trimmed, and counted as resent
            resent = None
            if rec.ok and count is not None:
                try:
                    resent = await count(reply) if reply else 0
                except Exception:  # noqa: BLE001 - a count is a nicety; the history is resent either way
                    resent = None
                if resent is not None:
                    rec.tags["reply_tokens_resent"] = resent
            run.done(rec)
            if not rec.ok:
                return
            messages.append({"role": "assistant", "content": reply})
            history += int(resent if resent is not None else (rec.output_tokens or 0))

    return await run.run(sessions, run_session, users=spec.users,
                         offsets_s=[sp.offset_s for sp in sessions] if spec.open_loop else None, warmups=warmups,
                         run_id=run_id, ignore_eos=ignore_eos, start_gate=start_gate,
                         prewarm_connections=prewarm_connections, drain_timeout_s=drain_timeout_s)
