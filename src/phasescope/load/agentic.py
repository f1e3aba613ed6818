"""Agentic sessions (``bench --dataset agentic``, issue 34): sessions that grow, call tools with large
outputs, and fork parallel sub-agents from a shared prefix, with think times.

A session is a small dependency graph of chat calls (:class:`CallPlan`), run by :func:`run_agentic`:

* the **main agent** runs ``--turns`` turns like a conversation (:mod:`phasescope.load.conversation`):
  each turn resends the whole history with the server's real reply text, and each later turn carries
  ``--tool-output-len`` tokens of tool output (``"[tool output] …"`` inside the user message, as the
  conversation workload sends it) before its ``--turn-input-len`` tokens of input;
* **forks** (``--fork-at 2,4``: before those main turns): ``--fork-width N`` sub-agents start
  together, each from the main agent's *whole context so far* (every message it sent and the reply it
  got: the same bytes for every sub-agent, so the server's prefix cache sees one shared prefix) plus a
  task of its own (``--turn-input-len`` tokens), and run ``--subagent-turns`` turns of their own
  concurrently. The main turn waits for all of them; their last replies come back inside its user
  message as tool output;
* think time (``--think-time-s S`` or ``exp:S``) before every call that follows a reply.

Replays (``--dataset agentic --dataset-path FILE``) of Weka agent traces and OpenTelemetry GenAI span
traces become the same graphs (:mod:`phasescope.load.agent_traces`), with the trace's own messages.

Arrivals: a closed loop of ``--users`` sessions at a time, ``--sessions`` in all (default: one per
user), bounded by ``--duration`` (no call starts after it). Every call leaves one
:class:`~phasescope.measure.records.RequestRecord`, written as it completes, tagged ``session``,
``agent`` (``main`` or ``f<fork>.a<i>``), ``role`` (``main`` | ``subagent``), ``call``, ``fork``,
``fork_parent`` (the record id of the main call whose context the sub-agent inherited), ``context``
(the record id of the call whose context this one continues) and ``think_s``. :mod:`phasescope.load.agentic_stats` turns them into the ``agentic`` section.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from phasescope.apis.base import GenRequest, Target, take_reply
from phasescope.errors import InputError
from phasescope.load.conversation import TOOL_MARK, parse_think_time, parse_turns
from phasescope.load.session_run import SendFn, SessionRun
from phasescope.load.workload import WorkItem, part_salt
from phasescope.measure.records import RequestRecord

#: the ``--dataset`` name of this workload
DATASET = "agentic"
#: bounds that keep a run finite whatever the flags say
MAX_FORK_WIDTH = 32
MAX_SUBAGENT_TURNS = 50
MAX_CALLS_PER_SESSION = 2_000


def parse_fork_at(text: str | None) -> tuple[int, ...]:
    """``--fork-at``: main-agent turn numbers (comma separated, from 2) before which sub-agents fork;
    ``none`` or empty: no forks."""
    s = str(text or "").strip().lower()
    if s in ("", "none", "0"):
        return ()
    try:
        turns = tuple(sorted({int(x) for x in s.split(",") if x.strip()}))
    except ValueError:
        raise InputError(f"--fork-at must be turn numbers separated by commas, e.g. 2,4 (got {text!r})") from None
    if not turns or turns[0] < 2 or turns[-1] > 1000:
        raise InputError(f"--fork-at turns must be from 2 to 1000: a fork needs a turn before it (got {text!r})")
    return turns


@dataclass
class AgenticSpec:
    """The agentic flags, checked (see the module docstring)."""

    users: int = 2
    sessions: int | None = None  # None: one per user
    turns: tuple[int, int] = (4, 4)
    system_prompt_len: int = 0
    system_prompt: str = "shared"  # shared | per-user
    turn_input_len: int = 64
    output_len: int = 64
    tool_output_len: int = 0
    think_time_s: float = 0.0
    think_dist: str = "fixed"
    fork_at: tuple[int, ...] = (2,)
    fork_width: int = 2
    subagent_turns: int = 1
    cache_prompt: bool | None = None
    #: a replayed trace (``--dataset-path``); None: synthetic sessions
    trace_path: str | None = None
    trace_speed: float = 1.0

    @property
    def n_sessions(self) -> int:
        return self.sessions if self.sessions is not None else self.users

    @classmethod
    def from_config(cls, cfg: Any) -> "AgenticSpec":
        think, dist = parse_think_time(getattr(cfg, "think_time_s", None))
        spec = cls(users=int(cfg.users), sessions=cfg.sessions, turns=parse_turns(cfg.turns),
                   system_prompt_len=int(cfg.system_prompt_len), system_prompt=str(cfg.system_prompt_scope),
                   turn_input_len=int(cfg.turn_input_len), output_len=int(cfg.output_len or 64),
                   tool_output_len=int(cfg.tool_output_len), think_time_s=think, think_dist=dist,
                   fork_at=parse_fork_at(getattr(cfg, "fork_at", "2")), fork_width=int(getattr(cfg, "fork_width", 2)),
                   subagent_turns=int(getattr(cfg, "subagent_turns", 1)), cache_prompt=cfg.cache_prompt,
                   trace_path=cfg.dataset_path, trace_speed=float(cfg.trace_speed))
        spec.check()
        return spec

    def check(self) -> None:
        if not 1 <= self.users <= 1_000:
            raise InputError(f"--users must be from 1 to 1,000 for --dataset agentic (got {self.users})")
        if self.sessions is not None and not 1 <= self.sessions <= 10_000:
            raise InputError(f"--sessions must be from 1 to 10,000 for --dataset agentic (got {self.sessions})")
        if self.system_prompt not in ("shared", "per-user"):
            raise InputError(f"--system-prompt must be shared or per-user (got {self.system_prompt!r})")
        for name, v, lo in (("--system-prompt-len", self.system_prompt_len, 0), ("--turn-input-len", self.turn_input_len, 1),
                            ("--output-len", self.output_len, 1), ("--tool-output-len", self.tool_output_len, 0)):
            if not lo <= v <= 1_000_000:
                raise InputError(f"{name} must be from {lo} to 1,000,000 (got {v})")
        if not 1 <= self.fork_width <= MAX_FORK_WIDTH:
            raise InputError(f"--fork-width must be from 1 to {MAX_FORK_WIDTH} (got {self.fork_width})")
        if not 1 <= self.subagent_turns <= MAX_SUBAGENT_TURNS:
            raise InputError(f"--subagent-turns must be from 1 to {MAX_SUBAGENT_TURNS} (got {self.subagent_turns})")
        if self.trace_path is None and self.fork_at and self.fork_at[-1] > self.turns[1]:
            raise InputError(f"--fork-at {self.fork_at[-1]} is past the last turn (--turns {self.turns[1]}): "
                             "no main turn would wait for those sub-agents")
        calls = self.turns[1] + len(self.fork_at) * self.fork_width * self.subagent_turns
        if self.trace_path is None and calls > MAX_CALLS_PER_SESSION:
            raise InputError(f"a session would send {calls:,} calls (--turns + forks × --fork-width × "
                             f"--subagent-turns); keep it at most {MAX_CALLS_PER_SESSION:,}")

    def to_dict(self) -> dict[str, Any]:
        return {"users": self.users, "sessions": self.n_sessions, "turns": list(self.turns),
                "system_prompt_len": self.system_prompt_len, "system_prompt": self.system_prompt,
                "turn_input_len": self.turn_input_len, "output_len": self.output_len,
                "tool_output_len": self.tool_output_len, "think_time_s": self.think_time_s,
                "think_time_dist": self.think_dist, "fork_at": list(self.fork_at), "fork_width": self.fork_width,
                "subagent_turns": self.subagent_turns, "cache_prompt": self.cache_prompt,
                "trace_path": self.trace_path}


@dataclass
class CallPlan:
    """One chat call of a session. Either ``messages`` is fixed (a replayed trace), or the call
    continues ``base`` (that call's messages + the reply it got, as the client holds them) with one new
    user message: ``tool_from``'s replies as tool output, then ``text``."""

    key: str
    agent: str = "main"
    after: tuple[str, ...] = ()
    base: str | None = None
    text: str = ""
    tokens: int = 0  # content tokens this call adds (fixed messages: the trace's prompt length when known)
    tool_from: tuple[str, ...] = ()
    messages: list[dict[str, Any]] | None = None
    output_len: int = 64
    think_s: float = 0.0  # pause after every call in ``after`` is done
    fork_id: int | None = None  # the fork a sub-agent belongs to (None: main agent)
    fork_parent: str | None = None  # the main call whose context this sub-agent's first call inherits
    prompt_tokens_expected: int | None = None


@dataclass
class AgentSession:
    index: int
    user: int
    system: str | None = None
    system_tokens: int = 0
    calls: list[CallPlan] = field(default_factory=list)
    source: str = "synthetic"
    name: str | None = None  # the trace's own id, when replayed


async def build_agentic(spec: AgenticSpec, maker: Any, *, seed: int = 0, run_salt: str | None = None,
                        ) -> list[AgentSession]:
    """The synthetic sessions, texts built up front through the server's tokenizer (``maker``) and
    salted per run (``run_salt``; None = ``--reuse-prompts``). Deterministic for one seed and salt."""
    rng = random.Random(seed * 1_000_003 + 34)
    systems: dict[int, str] = {}

    async def text(n: int, part: str, i: int) -> str:
        t, _ = await maker.make(n, salt=part_salt(seed, run_salt, part, i), first=False)
        return str(t)

    def think() -> float:
        if spec.think_time_s <= 0:
            return 0.0
        return spec.think_time_s if spec.think_dist == "fixed" else rng.expovariate(1.0 / spec.think_time_s)

    out: list[AgentSession] = []
    for i in range(spec.n_sessions):
        user = i % spec.users
        sess = AgentSession(i, user)
        if spec.system_prompt_len > 0:
            key = 0 if spec.system_prompt == "shared" else user
            if key not in systems:
                systems[key] = await text(spec.system_prompt_len, "asys", key)
            sess.system, sess.system_tokens = systems[key], spec.system_prompt_len
        n_turns = rng.randint(*spec.turns)
        prev: str | None = None
        n_fork = 0
        for k in range(1, n_turns + 1):
            tool_from: tuple[str, ...] = ()
            after: tuple[str, ...] = (prev,) if prev else ()
            if k in spec.fork_at and prev is not None:
                n_fork += 1
                lasts = []
                for a in range(1, spec.fork_width + 1):
                    agent = f"f{n_fork}.a{a}"
                    sa_prev = prev
                    for j in range(1, spec.subagent_turns + 1):
                        key = f"{agent}.t{j}"
                        body = await text(spec.turn_input_len, f"s{i}{agent}t", j)
                        tokens = spec.turn_input_len
                        if j > 1 and spec.tool_output_len > 0:
                            tool = await text(spec.tool_output_len, f"s{i}{agent}o", j)
                            body, tokens = f"{TOOL_MARK}{tool}\n{body}", tokens + spec.tool_output_len
                        sess.calls.append(CallPlan(
                            key, agent=agent, after=(sa_prev,), base=sa_prev, text=body, tokens=tokens,
                            output_len=spec.output_len, think_s=think(), fork_id=n_fork,
                            fork_parent=prev if j == 1 else None))
                        sa_prev = key
                    lasts.append(sa_prev)
                tool_from = tuple(lasts)
                after = (prev, *lasts)
            key = f"main.t{k}"
            body = await text(spec.turn_input_len, f"s{i}mt", k)
            tokens = spec.turn_input_len
            if k > 1 and spec.tool_output_len > 0 and not tool_from:
                tool = await text(spec.tool_output_len, f"s{i}mo", k)
                body, tokens = f"{TOOL_MARK}{tool}\n{body}", tokens + spec.tool_output_len
            sess.calls.append(CallPlan(key, after=after, base=prev, text=body, tokens=tokens, tool_from=tool_from,
                                       output_len=spec.output_len, think_s=think() if k > 1 else 0.0))
            prev = key
        out.append(sess)
    return out


def check_graph(sess: AgentSession) -> None:
    """Every ``after``/``base``/``tool_from`` names an earlier call (the plan is a DAG in list order)."""
    seen: set[str] = set()
    for c in sess.calls:
        for k in (*c.after, *c.tool_from, *((c.base,) if c.base else ())):
            if k not in seen:
                raise InputError(f"session {sess.name or sess.index}: call {c.key} waits for {k}, which does not come before it")
        if c.key in seen:
            raise InputError(f"session {sess.name or sess.index}: call {c.key} appears twice")
        seen.add(c.key)


def context_of(c: CallPlan, agents: dict[str, str]) -> str | None:
    """The call whose context ``c`` continues: its ``base``, else a sub-agent's ``fork_parent``, else the
    last call of its own agent that it waits for (``agents``: call key → agent)."""
    if c.base is not None:
        return c.base
    if c.fork_parent is not None:
        return c.fork_parent
    same = [k for k in c.after if agents.get(k) == c.agent]
    return same[-1] if same else None


def messages_for(c: CallPlan, sess: AgentSession, sent: dict[str, list[dict[str, Any]]],
                 replies: dict[str, str]) -> list[dict[str, Any]]:
    """What the client sends for ``c``: its fixed messages, or its base's messages and reply plus one
    new user message (tool output from ``tool_from``'s replies, then ``text``)."""
    if c.messages is not None:
        return [dict(m) for m in c.messages]
    if c.base is not None:
        msgs = [dict(m) for m in sent[c.base]] + [{"role": "assistant", "content": replies[c.base]}]
    else:
        msgs = [{"role": "system", "content": sess.system}] if sess.system is not None else []
    body = c.text
    if c.tool_from:
        results = "\n".join(f"{TOOL_MARK} {k}: {replies.get(k, '')}" for k in c.tool_from)
        body = f"{results}\n{body}"
    return msgs + [{"role": "user", "content": body}]


async def run_agentic(
    sessions: Sequence[AgentSession],
    spec: AgenticSpec,
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
) -> Any:
    """Run the sessions, ``spec.users`` at a time, and return a
    :class:`phasescope.load.runner.RunResult` (one record per call; warm-ups before t0, excluded).
    A call whose predecessor failed is not sent (``tags["skipped"]`` counts stay in the result's
    ``cancelled``); no call starts after ``duration_s``."""
    run = SessionRun(target, send=send, writer=writer, on_record=on_record, stop=stop,
                     abort_after_errors=abort_after_errors, duration_s=duration_s)

    async def run_session(sess: AgentSession) -> None:
        events = {c.key: asyncio.Event() for c in sess.calls}
        ok: dict[str, bool] = {}
        sent: dict[str, list[dict[str, Any]]] = {}
        replies: dict[str, str] = {}
        rec_ids: dict[str, str] = {}
        agents = {c.key: c.agent for c in sess.calls}

        async def run_call(c: CallPlan) -> None:
            try:
                for k in c.after:
                    await events[k].wait()
                if not all(ok.get(k, False) for k in c.after):
                    return
                if not await run.pause(c.think_s) or run.ended():
                    return
                msgs = messages_for(c, sess, sent, replies)
                req = GenRequest(
                    prompt=str(msgs[-1]["content"]) if msgs else "", max_tokens=c.output_len, stream=True,
                    ignore_eos=ignore_eos, cache_prompt=spec.cache_prompt, id=f"{run_id}-a{sess.index}-{c.key}",
                    keep_text=c.messages is None, messages=msgs, prompt_tokens_expected=c.prompt_tokens_expected,
                    tags={**run.chat_tags, "session": f"a{sess.index}", "user": sess.user, "agent": c.agent,
                          "role": "main" if c.fork_id is None else "subagent", "call": c.key, "fork": c.fork_id,
                          "fork_parent": rec_ids.get(c.fork_parent) if c.fork_parent else None,
                          "context": rec_ids.get(ctx) if (ctx := context_of(c, agents)) else None,
                          "inherits_reply": c.messages is None and c.base is not None,
                          "think_s": c.think_s, "content_tokens": c.tokens, "source": sess.source,
                          **({"trace_session": sess.name} if sess.name else {})})
                run.res.scheduled += 1
                run.res.sent += 1
                rec = await run.send(req)
                replies[c.key] = take_reply(rec)
                sent[c.key] = msgs
                rec_ids[c.key] = rec.id
                run.done(rec)
                ok[c.key] = bool(rec.ok)
            finally:
                events[c.key].set()

        await asyncio.gather(*(run_call(c) for c in sess.calls))

    return await run.run(sessions, run_session, users=spec.users, warmups=warmups, run_id=run_id,
                         ignore_eos=ignore_eos, start_gate=start_gate, prewarm_connections=prewarm_connections,
                         drain_timeout_s=drain_timeout_s)
