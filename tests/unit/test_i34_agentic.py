"""Issue 34 item 4: the agentic workload's generator (forks share the parent's exact context, seeds,
bounds), the two agent-trace readers (Weka, OpenTelemetry GenAI spans: fields, structure, malformed
input → one line), and the summary math (union of in-flight time, sub-agent TTFT ratio, KV reuse)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from phasescope.errors import InputError
from phasescope.load import agent_traces as at
from phasescope.load import agentic_stats as st
from phasescope.load.agentic import AgenticSpec, build_agentic, check_graph, messages_for, parse_fork_at
from phasescope.measure.records import Event, RequestRecord
from phasescope.prompting import WordPromptMaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import isolated_home, run  # noqa: E402,F401

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"
MS = 1_000_000


def _build(spec: AgenticSpec, seed: int = 0, salt: str | None = "r1") -> list[Any]:
    spec.check()
    return asyncio.run(build_agentic(spec, WordPromptMaker(), seed=seed, run_salt=salt))


def _replay(sess: Any) -> dict[str, list[dict[str, Any]]]:
    """The messages each call would send, with a distinct fake reply per call (as a client holds them)."""
    sent: dict[str, list[dict[str, Any]]] = {}
    replies: dict[str, str] = {}
    for c in sess.calls:
        sent[c.key] = messages_for(c, sess, sent, replies)
        replies[c.key] = f"reply of {c.key}"
    return sent


# --- the generator ---------------------------------------------------------------------------------
def test_forked_subagents_start_with_the_parents_exact_context() -> None:
    spec = AgenticSpec(users=1, sessions=2, turns=(4, 4), system_prompt_len=12, turn_input_len=8, output_len=4,
                       tool_output_len=20, fork_at=(2, 4), fork_width=3, subagent_turns=2)
    for sess in _build(spec):
        check_graph(sess)
        sent = _replay(sess)
        subs = [c for c in sess.calls if c.fork_id is not None and c.fork_parent is not None]
        assert len(subs) == 2 * 3  # two forks of three sub-agents
        for c in subs:
            parent = sent[c.fork_parent]
            inherited = parent + [{"role": "assistant", "content": f"reply of {c.fork_parent}"}]
            assert sent[c.key][: len(inherited)] == inherited  # the whole context, byte for byte
            assert len(sent[c.key]) == len(inherited) + 1 and sent[c.key][-1]["role"] == "user"
        by_fork: dict[int, set[str]] = {}
        for c in subs:
            by_fork.setdefault(int(c.fork_id or 0), set()).add(sent[c.key][-1]["content"])
        assert all(len(tasks) == 3 for tasks in by_fork.values())  # each sub-agent has a task of its own
        # the main turn after a fork waits for every sub-agent and gets their last replies as tool output
        t2 = next(c for c in sess.calls if c.key == "main.t2")
        lasts = {c.key for c in sess.calls if c.fork_id == 1 and c.key.endswith(".t2")}
        assert set(t2.tool_from) == lasts and lasts <= set(t2.after)
        assert all(f"reply of {k}" in sent["main.t2"][-1]["content"] for k in lasts)
        assert sent["main.t2"][:-1] == sent["main.t1"] + [{"role": "assistant", "content": "reply of main.t1"}]
        # a later main turn without a fork carries the tool output (--tool-output-len)
        assert sent["main.t3"][-1]["content"].startswith("[tool output]")


def test_same_seed_same_sessions_other_seed_or_run_other_text() -> None:
    spec = AgenticSpec(users=2, sessions=3, turns=(2, 5), turn_input_len=6, output_len=4, fork_at=(2,),
                       fork_width=2, think_time_s=0.5, think_dist="exponential")

    def shape(ss: list[Any]) -> list[Any]:
        return [[(c.key, c.after, c.text, round(c.think_s, 9)) for c in s.calls] for s in ss]

    a, b = shape(_build(spec, seed=7)), shape(_build(spec, seed=7))
    assert a == b
    assert a != shape(_build(spec, seed=8))
    texts = lambda ss: [c[2] for s in ss for c in s]  # noqa: E731
    assert texts(a) != texts(shape(_build(spec, seed=7, salt="r2")))  # a new run is not the last one's cache
    assert shape(_build(spec, seed=7, salt=None)) == shape(_build(spec, seed=7, salt=None))  # --reuse-prompts


@pytest.mark.parametrize("kw, words", [
    ({"fork_width": 0}, "--fork-width must be from 1 to 32"),
    ({"fork_width": 33}, "--fork-width must be from 1 to 32"),
    ({"subagent_turns": 0}, "--subagent-turns must be from 1 to 50"),
    ({"fork_at": (5,), "turns": (4, 4)}, "--fork-at 5 is past the last turn"),
    ({"users": 0}, "--users must be from 1 to 1,000"),
    ({"sessions": 10_001}, "--sessions must be from 1 to 10,000"),
    ({"turns": (1000, 1000), "fork_at": tuple(range(2, 40)), "fork_width": 32, "subagent_turns": 50},
     "keep it at most 2,000"),
])
def test_bad_agentic_flags_are_one_line(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError, match=words.replace("-", r"\-").replace("+", r"\+")):
        AgenticSpec(**kw).check()


@pytest.mark.parametrize("text, want", [("2", (2,)), ("4,2,2", (2, 4)), ("none", ()), ("", ())])
def test_fork_at_parses(text: str, want: tuple[int, ...]) -> None:
    assert parse_fork_at(text) == want


@pytest.mark.parametrize("text", ["1", "x", "2,a", "1001"])
def test_fork_at_rejects(text: str) -> None:
    with pytest.raises(InputError, match="--fork-at"):
        parse_fork_at(text)


def test_plan_size_is_bounded() -> None:
    spec = AgenticSpec(users=1, sessions=1, turns=(3, 3), fork_at=(2, 3), fork_width=4, subagent_turns=3)
    (sess,) = _build(spec)
    assert len(sess.calls) == 3 + 2 * 4 * 3


@pytest.mark.parametrize("args, words", [
    (["--fork-width", "0"], "--fork-width must be ≥ 1"),
    (["--fork-at", "1"], "--fork-at turns must be from 2"),
    (["--subagent-turns", "99"], "--subagent-turns must be ≤ 50"),
    (["--fork-width", "2", "--dataset-path", str(TRACES / "otel_agent.json")], "--fork-width has no effect on an agent trace"),
    (["--session-rate", "2"], "drop --session-rate"),
    (["--num-prompts", "5"], "drop --num-prompts"),
    (["--dataset-path", "/nonexistent/agent.json"], "not found: /nonexistent/agent.json"),
])
def test_cli_bad_values_exit_2_with_one_line(args: list[str], words: str, capsys: Any, monkeypatch: Any) -> None:
    code, out, err = run(["bench", "http://127.0.0.1:9", "--dataset", "agentic", "--no-store", *args], capsys, monkeypatch)
    assert code == 2, (out, err)
    assert words in err and "Traceback" not in err


# --- Weka traces -----------------------------------------------------------------------------------
def test_weka_sample_structure() -> None:
    fmt, objs = at.read_agent_trace(TRACES / "weka_agent.jsonl")
    assert fmt == "weka" and len(objs) == 2
    tr = at.parse_weka(objs[0], "x")
    assert tr["id"] == "sample-a" and tr["block_size"] == 64 and len(tr["main"]) == 3 and len(tr["subagents"]) == 2
    sess, reqs = at.weka_sessions_plan(tr, 0, speed=1.0, default_out=8)
    calls = {c.key: c for c in sess.calls}
    subs_first = [c for c in sess.calls if c.fork_parent]
    assert {c.fork_parent for c in subs_first} == {"main.t2"} and {c.fork_id for c in subs_first} == {1}
    # the main request after both sub-agents ended waits for both of them
    assert set(calls["main.t3"].after) == {"main.t2", "f1.aexplore-1.t2", "f1.aexplore-2.t1"}
    assert calls["f1.aexplore-1.t2"].after == ("f1.aexplore-1.t1",)
    assert calls["main.t2"].output_len == 16 and calls["main.t2"].prompt_tokens_expected == 300
    # a recorded gap: 1.2 s after a request that started at 0 and took 0.6 s
    assert calls["main.t2"].think_s == pytest.approx(0.6)


def test_weka_shared_hash_ids_send_the_same_leading_text() -> None:
    ss = asyncio.run(at.weka_sessions(at.read_agent_trace(TRACES / "weka_agent.jsonl")[1], "x", maker=WordPromptMaker(),
                                      seed=1, run_salt="r", speed=1.0, default_out=8, limit=None))
    a = {c.key: str((c.messages or [{}])[0]["content"]) for c in ss[0].calls}
    blocks4 = a["main.t2"].split()[: 4 * 64]  # WordPromptMaker: one word per token
    for k in ("f1.aexplore-1.t1", "f1.aexplore-2.t1", "main.t3"):
        assert a[k].split()[: 4 * 64] == blocks4
    assert a["f1.aexplore-1.t1"].split()[4 * 64: 5 * 64] != a["f1.aexplore-2.t1"].split()[4 * 64: 5 * 64]  # ids 5 vs 7
    assert [len(a[k].split()) for k in ("main.t1", "main.t2", "main.t3")] == [200, 300, 420]
    b = {c.key: str((c.messages or [{}])[0]["content"]) for c in ss[1].calls}
    assert b["main.t1"].split()[:64] != a["main.t1"].split()[:64]  # hash ids are scoped per trace


def test_weka_subagent_times_relative_to_their_entry() -> None:
    obj = {"id": "r", "block_size": 4, "requests": [
        {"t": 10.0, "type": "n", "in": 8, "out": 2, "api_time": 1.0},
        {"t": 12.0, "type": "subagent", "agent_id": "x", "duration_ms": 2000, "requests": [
            {"t": 0.5, "type": "n", "in": 8, "out": 2, "api_time": 1.0}]},
        {"t": 15.0, "type": "n", "in": 8, "out": 2}]}
    tr = at.parse_weka(obj, "w")
    assert tr["subagents"][0]["requests"][0]["t"] == 12.5  # 0.5 s after the entry's t
    sess, _ = at.weka_sessions_plan(tr, 0, speed=1.0, default_out=2)
    c = {x.key: x for x in sess.calls}
    assert c["f1.ax.t1"].think_s == pytest.approx(1.5) and c["f1.ax.t1"].fork_parent == "main.t1"
    assert c["main.t2"].after == ("main.t1", "f1.ax.t1")


@pytest.mark.parametrize("obj, words", [
    ({"id": "a", "requests": [{"t": 0, "type": "n", "in": 5, "out": 1}]}, "\"block_size\" must be an integer"),
    ({"id": "a", "block_size": 4, "requests": []}, "\"requests\" must be a non-empty list"),
    ({"id": "a", "block_size": 4, "requests": [{"t": 0, "type": "x", "in": 5, "out": 1}]}, "\"type\" must be"),
    ({"id": "a", "block_size": 4, "requests": [{"t": 0, "type": "n", "in": 5, "out": 1, "hash_ids": [1, 2, 3]}]},
     "3 hash_ids cover more than"),
    ({"id": "a", "block_size": 4, "requests": [{"t": -1, "type": "n", "in": 5, "out": 1}]}, "\"t\" must be a number"),
    ({"id": "a", "block_size": 4, "requests": [{"t": 0, "type": "subagent", "requests": []}]}, "subagent entry needs"),
    ({"block_size": 4, "requests": [{"t": 0, "type": "n", "in": 5, "out": 1}]}, "needs an \"id\""),
])
def test_malformed_weka_is_one_line(obj: dict[str, Any], words: str, tmp_path: Path) -> None:
    p = tmp_path / "w.jsonl"
    p.write_text(json.dumps(obj) + "\n")
    with pytest.raises(InputError) as e:
        at.check_trace(p, speed=1.0, limit=None)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, words", [
    ("", "the agent trace is empty"),
    ("{\"id\": 1}\nnot json\n", ":2: not JSON"),
    ("{\"foo\": 1}", "not an agent trace this bench reads"),
    ("[1, 2]", "must hold JSON objects"),
])
def test_not_an_agent_trace_is_one_line(text: str, words: str, tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(InputError, match=words):
        at.check_trace(p, speed=1.0, limit=None)


# --- OpenTelemetry GenAI spans ---------------------------------------------------------------------
def test_otel_sample_structure() -> None:
    fmt, objs = at.read_agent_trace(TRACES / "otel_agent.json")
    assert fmt == "otel"
    ss, ignored = at.otel_sessions(objs, "x", speed=1.0, default_out=8, limit=None)
    assert ignored == 1  # the invoke_agent span is not an LLM call
    assert [s.name for s in ss] == ["otel-sample-1", "otel-sample-2"]
    c = {x.key: x for x in ss[0].calls}
    assert [c[k].agent for k in ("span1", "span2", "span3", "span4")] == ["main", "f1.a1", "f1.a2", "main"]
    assert c["span2"].fork_parent == c["span3"].fork_parent == "span1"
    assert set(c["span4"].after) == {"span1", "span2", "span3"} and c["span2"].after == ("span1",)
    assert c["span4"].think_s == pytest.approx(0.3) and c["span2"].output_len == 8
    assert c["span1"].tokens == 300 and c["span1"].prompt_tokens_expected is None  # another tokenizer's count
    # sub-agents start with the parent's messages, as recorded
    m1, m2, m3 = c["span1"].messages, c["span2"].messages, c["span3"].messages
    assert m1 and m2 and m3 and m2[:2] == m1 and m3[:3] == m2[:3] and m2[3] != m3[3]
    # the tool call and its result: an assistant message with the call, then a user message marked as tool output
    m4 = c["span4"].messages or []
    assert [m["role"] for m in m4] == ["system", "user", "assistant", "user"]
    assert "run_subagents" in m4[2]["content"] and m4[3]["content"].startswith("[tool output]")
    assert [x.agent for x in ss[1].calls] == ["main", "main"]  # a chain, no fork


def test_otel_replay_marks_each_run_but_keeps_the_shared_prefix() -> None:
    objs = at.read_agent_trace(TRACES / "otel_agent.json")[1]

    def firsts(salt: str | None) -> list[str]:
        ss, _ = at.otel_sessions(objs, "x", speed=1.0, default_out=8, limit=1, mark=at.run_mark(3, salt))
        return [str((c.messages or [{}])[0]["content"]) for c in ss[0].calls]

    a, b, plain = firsts("run-a"), firsts("run-b"), firsts(None)
    assert len(set(a)) == 1 and len(set(b)) == 1  # one mark for every call of a run: the prefix stays shared
    assert a[0] != b[0] and a[0].startswith("[run ") and a[0].endswith(plain[0])
    assert plain[0].startswith("You are a coding agent.")  # --reuse-prompts: the recorded text


def test_otel_messages_normalised() -> None:
    raw = [{"role": "system", "content": "s"}, {"role": "user", "parts": [{"type": "text", "content": "a"}]},
           {"role": "user", "content": [{"type": "text", "text": "b"}]}, {"role": "tool", "content": "r"},
           {"role": "assistant", "content": "x"}, {"role": "system", "content": "late"}]
    assert at.otel_messages(json.dumps(raw), "w") == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "a\nb\n[tool output] r"},
        {"role": "assistant", "content": "x"}, {"role": "user", "content": "[tool output] late"}]


def test_otlp_attribute_list_and_nanos() -> None:
    span = {"traceId": "t", "spanId": "1", "name": "chat m", "startTimeUnixNano": "1000000000",
            "endTimeUnixNano": "2000000000", "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": "[{\"role\": \"user\", \"content\": \"hi\"}]"}},
                {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "7"}}]}
    by, ignored = at.otel_spans([{"spans": [span]}], "x")
    assert ignored == 0 and by["t"][0]["out"] == 7 and by["t"][0]["start"] == 1.0 and by["t"][0]["end"] == 2.0


def _span(**kw: Any) -> dict[str, Any]:
    s = {"trace_id": "t", "span_id": "1", "name": "chat m", "start_time": "2026-01-01T00:00:00",
         "end_time": "2026-01-01T00:00:01",
         "attributes": {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[{\"role\": \"user\", \"content\": \"hi\"}]"}}
    s.update(kw)
    return s


@pytest.mark.parametrize("doc, words", [
    ({"spans": {"a": 1}}, "\"spans\" must be a list"),
    ({"spans": [_span(start_time="yesterday")]}, "not an ISO 8601 time"),
    ({"spans": [_span(start_time=None)]}, "an LLM span needs \"start_time\""),
    ({"spans": [_span(attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[oops"})]},
     "gen_ai.input.messages is not JSON"),
    ({"spans": [_span(attributes={"gen_ai.operation.name": "invoke_agent"})]}, "no LLM span"),
])
def test_malformed_otel_is_one_line(doc: dict[str, Any], words: str, tmp_path: Path) -> None:
    p = tmp_path / "o.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        at.check_trace(p, speed=1.0, limit=None)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_recorded_gaps_are_capped_and_sped_up() -> None:
    spans = [_span(span_id="a"), _span(span_id="b", start_time="2026-01-01T00:01:00", end_time="2026-01-01T00:01:01"),
             _span(span_id="c", start_time="2026-01-01T00:01:03", end_time="2026-01-01T00:01:04")]
    by, _ = at.otel_spans([{"spans": spans}], "x")
    s = at.otel_session(by["t"], 0, "t", speed=2.0, default_out=4)
    assert [c.think_s for c in s.calls] == [0.0, at.MAX_GAP_S, 1.0]


# --- the summary -----------------------------------------------------------------------------------
def _rec(i: str, session: str, start_ms: float, ttft_ms: float, dur_ms: float, *, prompt: int, cached: int | None,
         role: str = "main", parent: str | None = None, ok: bool = True, context: str | None = None,
         out: int = 4) -> RequestRecord:
    r = RequestRecord(id=i, api="chat", target="http://127.0.0.1:1", ok=ok)
    r.t_start_ns = int(start_ms * MS)
    r.events = [Event(int((start_ms + ttft_ms) * MS), "content", 1, 1)]
    r.t_done_ns = int((start_ms + dur_ms) * MS)
    r.prompt_tokens, r.output_tokens, r.cached_prompt_tokens = prompt, out, cached
    r.server = {"cache_n": cached} if cached is not None else None
    r.tags = {"session": session, "call": i, "role": role, "agent": "main" if role == "main" else f"f1.{i}",
              "fork": None if role == "main" else 1, "fork_parent": parent, "context": context or parent, "think_s": 0.1}
    return r


def test_busy_time_is_the_union_of_in_flight_intervals() -> None:
    from phasescope.measure.clock import union_s  # agentic's wait time and the OTLP stage sums share it

    assert union_s([(0, 2_000_000_000), (1_000_000_000, 3_000_000_000), (5_000_000_000, 6_000_000_000)]) == 4.0
    assert union_s([]) == 0.0


def test_summary_math() -> None:
    recs = [
        _rec("p", "a0", 0, 100, 200, prompt=100, cached=0),
        _rec("s1", "a0", 300, 20, 400, prompt=120, cached=90, role="subagent", parent="p"),
        _rec("s2", "a0", 300, 40, 500, prompt=120, cached=0, role="subagent", parent="p"),
        _rec("m2", "a0", 900, 50, 100, prompt=200, cached=150, context="p"),
    ]
    a = st.agentic_section(recs, {"users": 1})
    (row,) = a["per_session"]
    assert row["kv_reuse"] == pytest.approx(240 / 540) and a["kv_reuse"]["source"] == "timings.cache_n"
    # in flight 0–200, 300–800 (two sub-agents in parallel count once), 900–1000 ms
    assert row["span_s"] == pytest.approx(1.0) and row["wait_s"] == pytest.approx(0.2 + 0.5 + 0.1)
    assert row["think_s"] == pytest.approx(0.2) and a["wait_share"] == pytest.approx(0.8)
    assert a["forks"] == 1 and a["subagents"] == 2 and a["subagent_calls"] == 2
    assert a["subagent_prefix_reuse"] == {"n": 2, "median": pytest.approx(0.45), "min": 0.0, "reused": 1,
                                          "cached_tokens": [90, 0]}
    tr = a["subagent_ttft_ratio"]  # 0.2 and 0.4: too few for an interval
    assert tr["n"] == 2 and tr["verdict"] == "cannot tell" and tr["ci"] is None and tr["spread"] == pytest.approx([0.2, 0.4])
    # implied: each call can reuse its context's prompt + reply
    assert a["kv_reuse"]["implied"] == pytest.approx((104 + 104 + 104) / 540)
    assert any("cannot tell from 2 sub-agent(s)" in line for line in st.console_lines(a))


def test_ttft_ratio_interval_and_verdict() -> None:
    def pairs(ratios: list[float]) -> list[Any]:
        out = []
        for k, x in enumerate(ratios):
            par = _rec(f"p{k}", "a", 0, 100, 150, prompt=10, cached=0)
            out.append((_rec(f"s{k}", "a", 200, 100 * x, 400, prompt=10, cached=0, role="subagent", parent=f"p{k}"), par))
        return out

    fast = st.ttft_ratio(pairs([0.2, 0.3, 0.25, 0.22, 0.28, 0.3, 0.21]))
    assert fast["verdict"] == "faster" and fast["ci"][1] < 1 and fast["method"] == "order-stat"
    slow = st.ttft_ratio(pairs([2.0, 3.0, 2.5]))
    assert slow["verdict"] == "slower" and slow["ci"][0] > 1 and slow["method"] == "log-t"
    mixed = st.ttft_ratio(pairs([0.5, 2.0, 1.0, 0.7, 1.5, 1.1]))
    assert mixed["verdict"] == "cannot tell" and mixed["ci"][0] < 1 < mixed["ci"][1]


def test_no_cached_counts_say_so() -> None:
    recs = [_rec("p", "a0", 0, 100, 200, prompt=100, cached=None)]
    a = st.agentic_section(recs, {})
    assert a["kv_reuse"]["source"] is None and a["kv_reuse"]["overall"] is None
    assert "reports no cached prompt tokens" in " ".join(st.console_lines(a))


def test_the_workload_table_knows_agentic() -> None:
    from phasescope.load.bench import BenchConfig
    from phasescope.load.datasets import workload_for

    wl = workload_for(BenchConfig(dataset="agentic"))
    assert wl.name == "agentic" and wl.driver == "agentic"
    assert SimpleNamespace(**wl.spec().to_dict()).fork_at == [2]


def test_prefix_reuse_counts_the_inherited_reply() -> None:
    par = _rec("p", "a", 0, 100, 200, prompt=100, cached=0, out=20)
    sub = _rec("s", "a", 300, 20, 400, prompt=130, cached=118, role="subagent", parent="p")
    assert st.prefix_reuse([(sub, par)])["median"] == pytest.approx(1.18)  # a replay: the parent's prompt only
    sub.tags["inherits_reply"] = True  # synthetic: the parent's reply is part of what it inherited
    assert st.prefix_reuse([(sub, par)])["median"] == pytest.approx(118 / 120)
