"""Agent traces replayed as agentic sessions (``bench --dataset agentic --dataset-path FILE``, issue 34).

Two public formats that peers replay, told apart by their shape (:func:`read_agent_trace`); each
becomes :class:`~phasescope.load.agentic.AgentSession` graphs that :func:`~phasescope.load.agentic.run_agentic`
runs like the synthetic ones.

**Weka agent traces** — the KV-cache-tester traces of coding-agent sessions with sub-agents (Hugging
Face ``semianalysisai/cc-traces-weka-*``, ``traces.jsonl``), as inference-perf reads them
(``inference_perf/datagen/replay/weka_trace_replay_datagen.py``, kubernetes-sigs/inference-perf
``7de5ef2``): one trace per line (or one JSON object). Read: ``id``, ``block_size``, ``requests``; a
request of ``type`` ``n``/``s`` reads ``t`` (s), ``in``, ``out``, ``hash_ids``, ``api_time``; a
``subagent`` entry reads ``t``, ``agent_id``, ``duration_ms`` and its own ``requests`` (times absolute,
or relative to the entry's ``t`` when smaller, as inference-perf reads them). Ignored: ``models``,
``model``, ``think_time``, ``ttft``, ``subagent_type``, ``tool_tokens``, ``system_tokens`` (the prefix
they describe is already in ``hash_ids``). Each distinct hash id becomes one block of exactly
``block_size`` server tokens (scoped per trace, as inference-perf seeds them), so requests — main or
sub-agent — that share leading ids send the same leading text; a prompt is its blocks in order (the
last one cut to ``in``) plus a unique tail where ``in`` exceeds them, sent as one user message, and
asks for ``out`` tokens. A sub-agent waits for the last main request at or before its ``t`` (the
context it forked from) and the first main request after its end (``t`` + ``duration_ms``) waits for
it, as the main agent waits for a Task tool's result.

**OpenTelemetry GenAI spans** — the trace files of inference-perf's OTel trace replay
(``docs/otel_trace_replay.md``, ``inference_perf/datagen/replay/otel_trace_to_replay_graph.py``, same
commit): a JSON object with ``spans`` (or a list of them, or one per line). LLM spans are those with
``gen_ai.operation.name`` ``chat`` (or a name starting ``chat ``) and ``gen_ai.input.messages``. Read:
``trace_id`` (one session per trace id), ``span_id``, ``start_time``/``end_time`` (ISO 8601; OTLP's
``startTimeUnixNano``/``endTimeUnixNano`` too), ``attributes`` (a map, or OTLP's key/value list):
``gen_ai.input.messages`` (JSON text or a list; ``content`` text, OTel ``parts``, ``tool_calls``),
``gen_ai.usage.completion_tokens``/``output_tokens`` (else ``gen_ai.request.max_tokens``) for the output
length, ``gen_ai.usage.prompt_tokens``/``input_tokens`` (kept as the call's ``content_tokens`` tag only: they
were counted by the recorded model's tokenizer, so they are no expected length for this server). Ignored:
``parent_span_id``, ``kind``, ``status``, ``resource_attributes``, the recorded outputs, model names,
temperature, tool definitions. The recorded messages are sent as recorded (inference-perf's
``disable_output_substitution``), so prefix sharing is the trace's own text — the first message of every
call prefixed with the run's mark (:func:`run_mark`; none with ``--reuse-prompts``) so that a run does not
hit the last run's cache; tool results and other
roles become user messages marked ``[tool output]`` and consecutive messages of one role are joined,
because chat templates such as Gemma's reject other roles. Dependencies as inference-perf's temporal
edges: a span waits for every span of its trace that ended before it started, then for the recorded
gap. Spans that share their latest predecessor and overlap each other in time are a **fork**: their
sub-agents' parent is that predecessor.

Recorded gaps are replayed ``/ --trace-speed`` and capped at :data:`MAX_GAP_S`.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from phasescope.errors import InputError
from phasescope.load.agentic import MAX_CALLS_PER_SESSION, AgentSession, CallPlan, check_graph
from phasescope.load.conversation import TOOL_MARK
from phasescope.load.workload import part_salt

FORMATS = ("weka", "otel")
#: a recorded gap (think time, tool time) longer than this is replayed as this (inference-perf caps at 15 s / 1 s)
MAX_GAP_S = 5.0
MAX_SESSIONS = 10_000


def _load_objects(path: str | Path) -> list[dict[str, Any]]:
    """The file's JSON objects: one object, a list of objects, or one object per line."""
    from phasescope.safeio import read_user_text

    p = Path(path).expanduser()
    text = read_user_text(p, what="agent trace").strip()
    if not text:
        raise InputError(f"{p}: the agent trace is empty")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    if isinstance(whole, list):
        if not all(isinstance(x, dict) for x in whole):
            raise InputError(f"{p}: a list of agent traces must hold JSON objects")
        return whole
    out = []
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise InputError(f"{p}:{ln}: not JSON (an agent trace is a JSON object, a list of them, or one per line)") from None
        if not isinstance(d, dict):
            raise InputError(f"{p}:{ln}: each line must be a JSON object")
        out.append(d)
    return out


def detect_format(objs: list[dict[str, Any]], path: Any) -> str:
    first = objs[0] if objs else {}
    if "spans" in first:
        return "otel"
    if "requests" in first:
        return "weka"
    raise InputError(f"{path}: not an agent trace this bench reads: expected a Weka trace (\"id\", \"block_size\", "
                     "\"requests\") or OpenTelemetry spans (\"spans\")")


def read_agent_trace(path: str | Path) -> tuple[str, list[dict[str, Any]]]:
    """(format, the file's trace objects)."""
    objs = _load_objects(path)
    return detect_format(objs, Path(path)), objs


# --- Weka ------------------------------------------------------------------------------------------
def _num(d: dict[str, Any], key: str, where: str, *, need: bool = True, lo: float = 0.0) -> float | None:
    v = d.get(key)
    if v is None and not need:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo:
        raise InputError(f"{where}: \"{key}\" must be a number ≥ {lo:g} (got {v!r})")
    return float(v)


def _int(d: dict[str, Any], key: str, where: str, lo: int, hi: int = 10_000_000) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError(f"{where}: \"{key}\" must be an integer from {lo} to {hi:,} (got {v!r})")
    return v


def _weka_request(r: Any, where: str, block_size: int) -> dict[str, Any]:
    if not isinstance(r, dict):
        raise InputError(f"{where}: a request must be a JSON object")
    ids = r.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**64 for h in ids):
        raise InputError(f"{where}: \"hash_ids\" must be a list of integers from 0 to 2^64 - 1")
    il = _int(r, "in", where, 1)
    if len(ids) > -(-il // block_size):
        raise InputError(f"{where}: {len(ids)} hash_ids cover more than \"in\" {il} at block_size {block_size}")
    return {"t": _num(r, "t", where), "in": il, "out": _int(r, "out", where, 0), "hash_ids": tuple(ids),
            "api_time": _num(r, "api_time", where, need=False) or 0.0}


def parse_weka(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """One Weka trace → ``{id, block_size, main: [request], subagents: [{t, end, agent_id, requests}]}``
    (fields checked; one :class:`InputError` line naming the trace and request otherwise)."""
    tid = obj.get("id")
    if not isinstance(tid, (str, int)) or isinstance(tid, bool):
        raise InputError(f"{where}: a Weka trace needs an \"id\"")
    where = f"{where} (trace {tid})"
    bs = _int(obj, "block_size", where, 1, 1_000_000)
    reqs = obj.get("requests")
    if not isinstance(reqs, list) or not reqs:
        raise InputError(f"{where}: \"requests\" must be a non-empty list")
    main: list[dict[str, Any]] = []
    subs: list[dict[str, Any]] = []
    for j, r in enumerate(reqs):
        w = f"{where} request {j}"
        kind = r.get("type") if isinstance(r, dict) else None
        if kind in ("n", "s"):
            main.append(_weka_request(r, w, bs))
        elif kind == "subagent":
            t = float(_num(r, "t", w) or 0.0)
            inner = r.get("requests")
            if not isinstance(inner, list) or not inner:
                raise InputError(f"{w}: a subagent entry needs a non-empty \"requests\" list")
            rs = []
            for i, x in enumerate(inner):
                q = _weka_request(x, f"{w} sub-request {i}", bs)
                if q["t"] + 1e-6 < t:  # relative to the entry (inference-perf's rule)
                    q["t"] += t
                rs.append(q)
            rs.sort(key=lambda q: q["t"])
            dur = _num(r, "duration_ms", w, need=False)
            end = t + dur / 1000.0 if dur is not None else rs[-1]["t"] + rs[-1]["api_time"]
            subs.append({"t": t, "end": max(end, rs[-1]["t"]), "agent_id": str(r.get("agent_id", len(subs))), "requests": rs})
        else:
            raise InputError(f"{w}: \"type\" must be \"n\", \"s\" or \"subagent\" (got {kind!r})")
    if not main:
        raise InputError(f"{where}: no main-agent request (type \"n\" or \"s\")")
    main.sort(key=lambda q: q["t"])
    return {"id": str(tid), "block_size": bs, "main": main, "subagents": subs}


def _gap(seconds: float, speed: float) -> float:
    return min(MAX_GAP_S, max(0.0, seconds) / speed)


def weka_sessions_plan(tr: dict[str, Any], index: int, *, speed: float, default_out: int,
                       ) -> tuple[AgentSession, list[tuple[str, dict[str, Any]]]]:
    """The session graph of one parsed Weka trace (calls without prompts yet) and, per call, its request."""
    main, subs = tr["main"], tr["subagents"]
    sess = AgentSession(index, index, source="weka", name=tr["id"])
    parent_of: list[int | None] = []
    joins: dict[int, list[str]] = {}
    fork_no: dict[int | None, int] = {}
    items: list[tuple[float, int, CallPlan, dict[str, Any]]] = []
    for s in subs:
        before = [k for k, q in enumerate(main) if q["t"] <= s["t"]]
        parent_of.append(before[-1] if before else None)
    for si, s in enumerate(subs):
        p = parent_of[si]
        if p not in fork_no:
            fork_no[p] = len(fork_no) + 1
        agent = f"f{fork_no[p]}.a{s['agent_id']}"
        prev_key = f"main.t{p + 1}" if p is not None else None
        prev_end = (main[p]["t"] + main[p]["api_time"]) if p is not None else s["t"]
        for j, q in enumerate(s["requests"]):
            key = f"{agent}.t{j + 1}"
            c = CallPlan(key, agent=agent, after=(prev_key,) if prev_key else (), fork_id=fork_no[p],
                         fork_parent=prev_key if j == 0 else None, output_len=max(1, q["out"] or default_out),
                         think_s=_gap(q["t"] - prev_end, speed), prompt_tokens_expected=q["in"], tokens=q["in"])
            items.append((q["t"], 1, c, q))
            prev_key, prev_end = key, q["t"] + q["api_time"]
        last_t = s["requests"][-1]["t"]
        after_end = [k for k, q in enumerate(main) if q["t"] >= s["end"] and q["t"] > last_t]
        if after_end and prev_key:
            joins.setdefault(after_end[0], []).append(prev_key)
    for k, q in enumerate(main):
        after = ((f"main.t{k}",) if k else ()) + tuple(joins.get(k, ()))
        prev_end = main[k - 1]["t"] + main[k - 1]["api_time"] if k else q["t"]
        c = CallPlan(f"main.t{k + 1}", after=after, output_len=max(1, q["out"] or default_out),
                     think_s=_gap(q["t"] - prev_end, speed) if k else 0.0, prompt_tokens_expected=q["in"], tokens=q["in"])
        items.append((q["t"], 0, c, q))
    items.sort(key=lambda x: (x[0], x[1]))
    sess.calls = [c for _, _, c, _ in items]
    if len(sess.calls) > MAX_CALLS_PER_SESSION:
        raise InputError(f"Weka trace {tr['id']}: {len(sess.calls):,} requests; at most {MAX_CALLS_PER_SESSION:,} per session")
    check_graph(sess)
    return sess, [(c.key, q) for _, _, c, q in items]


async def weka_prompt(q: dict[str, Any], *, trace_id: str, block_size: int, maker: Any, seed: int,
                      run_salt: str | None, blocks: dict[tuple[str, int], str], tail_salt: str) -> str:
    """One Weka request's prompt: its hash blocks (built once per trace and id) then a unique tail."""
    texts: list[str] = []
    left = int(q["in"])
    for h in q["hash_ids"]:
        if left <= 0:
            break
        take = min(block_size, left)
        if take == block_size:
            if (trace_id, h) not in blocks:
                t, _ = await maker.make(block_size, salt=part_salt(seed, run_salt, f"wk{trace_id}:h", h), first=False)
                blocks[(trace_id, h)] = str(t)
            texts.append(blocks[(trace_id, h)])
        else:  # a partial last block: its own text (nothing follows it in this prompt)
            t, _ = await maker.make(take, salt=part_salt(seed, run_salt, f"wk{trace_id}:h{h}:", take), first=False)
            texts.append(str(t))
        left -= take
    if left > 0:
        t, _ = await maker.make(left, salt=part_salt(seed, run_salt, f"wk{trace_id}:tail:{tail_salt}", 0), first=False)
        texts.append(str(t))
    return "".join(texts)


async def weka_sessions(objs: list[dict[str, Any]], path: Any, *, maker: Any, seed: int, run_salt: str | None,
                        speed: float, default_out: int, limit: int | None) -> list[AgentSession]:
    out = []
    blocks: dict[tuple[str, int], str] = {}
    for i, obj in enumerate(objs[: limit or MAX_SESSIONS]):
        tr = parse_weka(obj, f"{path} trace {i + 1}")
        sess, reqs = weka_sessions_plan(tr, i, speed=speed, default_out=default_out)
        by_key = {c.key: c for c in sess.calls}
        for key, q in reqs:
            text = await weka_prompt(q, trace_id=tr["id"], block_size=tr["block_size"], maker=maker, seed=seed,
                                     run_salt=run_salt, blocks=blocks, tail_salt=f"{key}")
            by_key[key].messages = [{"role": "user", "content": text}]
        out.append(sess)
    return out


# --- OpenTelemetry GenAI spans ---------------------------------------------------------------------
def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    a = span.get("attributes") or {}
    if isinstance(a, dict):
        return a
    if isinstance(a, list):  # OTLP JSON: [{"key": k, "value": {"stringValue": v}}]
        out = {}
        for kv in a:
            if isinstance(kv, dict) and isinstance(kv.get("key"), str) and isinstance(kv.get("value"), dict):
                vals = list(kv["value"].values())
                v = vals[0] if vals else None
                if "intValue" in kv["value"]:
                    try:
                        v = int(kv["value"]["intValue"])
                    except (TypeError, ValueError):
                        v = None
                out[kv["key"]] = v
        return out
    return {}


def _time_s(span: dict[str, Any], iso_key: str, nano_key: str, where: str) -> float | None:
    v = span.get(iso_key)
    if isinstance(v, str) and v:
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise InputError(f"{where}: \"{iso_key}\" is not an ISO 8601 time (got {v!r})") from None
    n = span.get(nano_key)
    if n is not None:
        try:
            return int(n) / 1e9
        except (TypeError, ValueError):
            raise InputError(f"{where}: \"{nano_key}\" must be nanoseconds (got {n!r})") from None
    return None


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(p.get("content", p.get("text", p.get("response", p))) if isinstance(p, dict)
                                   and p.get("type", "text") in ("text", "tool_call_response") else p) for p in content)
    if isinstance(content, dict):
        return json.dumps(content, sort_keys=True, ensure_ascii=False)
    return str(content)


def otel_messages(raw: Any, where: str) -> list[dict[str, str]]:
    """``gen_ai.input.messages`` → chat messages a plain template accepts (see the module docstring)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise InputError(f"{where}: gen_ai.input.messages is not JSON") from None
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{where}: gen_ai.input.messages must be a non-empty list of messages")
    out: list[dict[str, str]] = []
    for m in raw:
        if not isinstance(m, dict):
            raise InputError(f"{where}: each message in gen_ai.input.messages must be an object")
        role = str(m.get("role", "user"))
        text = _text_of(m.get("content")) if "content" in m else _text_of(m.get("parts"))
        if m.get("tool_calls"):
            text = (text + "\n" if text else "") + json.dumps(m["tool_calls"], sort_keys=True, ensure_ascii=False)
        if role in ("system", "developer") and not out:
            role = "system"
        elif role not in ("user", "assistant"):
            role, text = "user", f"{TOOL_MARK} {text}"
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n" + text
        else:
            out.append({"role": role, "content": text})
    return out


def _tokens(a: dict[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` that holds a token count ≥ 1 (capped at 10,000,000)."""
    for k in keys:
        v = a.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 1:
            return min(int(v), 10_000_000)
    return None


def otel_spans(objs: list[dict[str, Any]], path: Any) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """(LLM spans by trace id in file order, other spans ignored)."""
    by: dict[str, list[dict[str, Any]]] = {}
    ignored = 0
    for i, obj in enumerate(objs):
        spans = obj.get("spans")
        if not isinstance(spans, list):
            raise InputError(f"{path} trace {i + 1}: \"spans\" must be a list")
        for j, s in enumerate(spans):
            where = f"{path} trace {i + 1} span {j}"
            if not isinstance(s, dict):
                raise InputError(f"{where}: a span must be a JSON object")
            a = _attrs(s)
            name = str(s.get("name") or "")
            if not ((a.get("gen_ai.operation.name") == "chat" or name.startswith("chat ")) and a.get("gen_ai.input.messages")):
                ignored += 1
                continue
            start = _time_s(s, "start_time", "startTimeUnixNano", where)
            if start is None:
                raise InputError(f"{where}: an LLM span needs \"start_time\"")
            end = _time_s(s, "end_time", "endTimeUnixNano", where)
            tid = str(s.get("trace_id") or s.get("traceId") or obj.get("trace_id") or f"trace{i + 1}")

            by.setdefault(tid, []).append({
                "span_id": str(s.get("span_id") or s.get("spanId") or j), "start": start,
                "end": end if end is not None and end >= start else start,
                "messages": otel_messages(a.get("gen_ai.input.messages"), where),
                "out": _tokens(a, "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.max_tokens"),
                "in": _tokens(a, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")})
    if not by:
        raise InputError(f"{path}: no LLM span (gen_ai.operation.name \"chat\" with gen_ai.input.messages)")
    return by, ignored


def run_mark(seed: int, run_salt: str | None) -> str | None:
    """The text put before a replayed trace's first message so that a run does not hit the last run's
    cache (None with ``--reuse-prompts``: the recorded text as it is)."""
    if run_salt is None:
        return None
    return f"[run {part_salt(seed, run_salt, 'otel-run', 0) % 16**8:08x}] "


def otel_session(spans: list[dict[str, Any]], index: int, name: str, *, speed: float, default_out: int,
                 mark: str | None = None) -> AgentSession:
    """One trace's LLM spans → a session graph (temporal edges, forks; module docstring). ``mark``
    (:func:`run_mark`) goes before every call's first message: the same text for every call of the run,
    so the trace's prefix sharing is kept."""
    if len(spans) > MAX_CALLS_PER_SESSION:
        raise InputError(f"OTel trace {name}: {len(spans):,} LLM spans; at most {MAX_CALLS_PER_SESSION:,} per session")
    ss = sorted(spans, key=lambda s: (s["start"], s["span_id"]))
    t0 = ss[0]["start"]
    keys = [f"span{i + 1}" for i in range(len(ss))]
    preds = [[j for j in range(i) if ss[j]["end"] <= ss[i]["start"]] for i in range(len(ss))]
    latest = [max(p, key=lambda j: (ss[j]["end"], ss[j]["start"])) if p else None for p in preds]
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(latest):
        if p is not None:
            groups.setdefault(p, []).append(i)
    fork_of: dict[int, tuple[int, int]] = {}  # span → (fork number, sub-agent number)
    n_fork = 0
    for p in sorted(groups):
        g = groups[p]
        over = [i for i in g if any(j != i and ss[j]["start"] < ss[i]["end"] and ss[i]["start"] < ss[j]["end"] for j in g)]
        if len(over) >= 2:
            n_fork += 1
            for a, i in enumerate(over, 1):
                fork_of[i] = (n_fork, a)
    sess = AgentSession(index, index, source="otel", name=name)
    for i, s in enumerate(ss):
        p = latest[i]
        gap = s["start"] - (ss[p]["end"] if p is not None else t0)
        f = fork_of.get(i)
        msgs = [dict(m) for m in s["messages"]]
        if mark and msgs:
            msgs[0]["content"] = mark + msgs[0]["content"]
        sess.calls.append(CallPlan(
            keys[i], agent=f"f{f[0]}.a{f[1]}" if f else "main", after=tuple(keys[j] for j in preds[i]),
            messages=msgs, output_len=s["out"] or default_out, think_s=_gap(gap, speed),
            fork_id=f[0] if f else None, fork_parent=keys[p] if (f and p is not None) else None,
            tokens=s["in"] or 0))  # the recorded count is another tokenizer's: not an expected length here
    check_graph(sess)
    return sess


def otel_sessions(objs: list[dict[str, Any]], path: Any, *, speed: float, default_out: int,
                  limit: int | None, mark: str | None = None) -> tuple[list[AgentSession], int]:
    by, ignored = otel_spans(objs, path)
    names = list(by)[: limit or MAX_SESSIONS]
    return [otel_session(by[n], i, n, speed=speed, default_out=default_out, mark=mark)
            for i, n in enumerate(names)], ignored


async def trace_sessions(path: str | Path, *, maker: Any, seed: int, run_salt: str | None, speed: float,
                         default_out: int, limit: int | None) -> tuple[str, list[AgentSession], dict[str, Any]]:
    """(format, sessions, facts for the summary) of an agent trace file."""
    if not (math.isfinite(speed) and speed > 0):
        raise InputError("--trace-speed must be a positive number")
    fmt, objs = read_agent_trace(path)
    facts: dict[str, Any] = {"format": fmt, "path": str(path), "objects_in_file": len(objs)}
    if fmt == "weka":
        ss = await weka_sessions(objs, path, maker=maker, seed=seed, run_salt=run_salt, speed=speed,
                                 default_out=default_out, limit=limit)
    else:
        ss, ignored = otel_sessions(objs, path, speed=speed, default_out=default_out, limit=limit,
                                    mark=run_mark(seed, run_salt))
        facts["spans_ignored"] = ignored
    facts["sessions_replayed"] = len(ss)
    facts["calls_planned"] = sum(len(s.calls) for s in ss)
    return fmt, ss, facts


def check_trace(path: str | Path, *, speed: float, limit: int | None) -> dict[str, Any]:
    """Read and check an agent trace before anything starts (no prompt is built): one
    :class:`InputError` line for a file that is not one; returns ``{format, sessions, calls}``."""
    if not (math.isfinite(speed) and speed > 0):
        raise InputError("--trace-speed must be a positive number")
    fmt, objs = read_agent_trace(path)
    if fmt == "weka":
        plans = [weka_sessions_plan(parse_weka(o, f"{path} trace {i + 1}"), i, speed=speed, default_out=1)[0]
                 for i, o in enumerate(objs[: limit or MAX_SESSIONS])]
    else:
        plans, _ = otel_sessions(objs, path, speed=speed, default_out=1, limit=limit)
    return {"format": fmt, "sessions": len(plans), "calls": sum(len(s.calls) for s in plans)}
