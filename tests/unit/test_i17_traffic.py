"""Issue 17 without a server: conversation flags and plans, the per-turn view, Mooncake/BurstGPT readers,
the trace window and the hit rate a trace implies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasescope.errors import InputError
from phasescope.load.conversation import ConversationSpec, build_sessions, parse_think_time, parse_turns
from phasescope.load.conversation_stats import expected_cache_share, prompt_growth, template_constant_in_sessions, turn_rows
from phasescope.prompting import WordPromptMaker
from phasescope.load.schedule import TraceEntry
from phasescope.load.traces import HashedEntry, implied_hit_rate, read_burstgpt, read_mooncake, window
from phasescope.measure.records import Event, RequestRecord

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")


def test_turns_and_think_time_parse() -> None:
    assert parse_turns("4") == (4, 4) and parse_turns("2-6") == (2, 6)
    for bad in ("0", "5-3", "x", "1-2000"):
        with pytest.raises(InputError):
            parse_turns(bad)
    assert parse_think_time("1.5") == (1.5, "fixed") and parse_think_time("exp:2") == (2.0, "exponential")
    assert parse_think_time(None) == (0.0, "fixed")
    for bad in ("-1", "exp:x", "nan", "1e9"):
        with pytest.raises(InputError):
            parse_think_time(bad)


def _plans(**kw):  # type: ignore[no-untyped-def]
    spec = ConversationSpec(**kw)
    spec.check()
    return spec, asyncio.run(build_sessions(spec, WordPromptMaker(), seed=3, run_salt="r"))


def test_sessions_shared_and_per_user_system_prompts() -> None:
    _, shared = _plans(users=3, sessions=6, turns=(2, 2), system_prompt_len=12)
    assert len({s.system for s in shared}) == 1 and all(len(s.system.split()) == 12 for s in shared)
    _, per = _plans(users=3, sessions=6, turns=(2, 2), system_prompt_len=12, system_prompt="per-user")
    assert len({s.system for s in per}) == 3  # one per user, reused by the user's later sessions
    assert per[0].system == per[3].system and per[0].system != per[1].system
    # every turn's input is its own text (no two turns of the run alike)
    texts = [t.text for s in per for t in s.turns]
    assert len(set(texts)) == len(texts)


def test_tool_output_and_think_times() -> None:
    _, ss = _plans(users=1, sessions=200, turns=(3, 3), turn_input_len=5, tool_output_len=7, think_time_s=2.0,
                   think_dist="exponential")
    for s in ss:
        assert s.turns[0].tokens == 5 and s.turns[0].think_s == 0.0 and "[tool output]" not in s.turns[0].text
        for t in s.turns[1:]:
            assert t.tokens == 12 and t.text.startswith("[tool output]")
    thinks = [t.think_s for s in ss for t in s.turns[1:]]
    assert 1.6 < sum(thinks) / len(thinks) < 2.4  # exponential with mean 2 over 400 draws
    assert len(set(thinks)) > 300
    _, fixed = _plans(users=1, sessions=2, turns=(3, 3), think_time_s=0.5)
    assert {t.think_s for s in fixed for t in s.turns[1:]} == {0.5}


def test_turn_counts_drawn_in_range_and_open_loop_offsets() -> None:
    _, ss = _plans(users=2, sessions=100, turns=(2, 5), session_rate=4.0)
    counts = {len(s.turns) for s in ss}
    assert counts == {2, 3, 4, 5}
    offs = [s.offset_s for s in ss]
    assert offs == sorted(offs) and offs[0] == 0.0
    assert 100 / 4.0 * 0.6 < offs[-1] < 100 / 4.0 * 1.5  # Poisson at 4 sessions/s


def _rec(session: str, turn: int, prompt: int, cached: int | None, out: int, content: int, ttft_ms: float,
         ok: bool = True) -> RequestRecord:
    t0 = 1_000_000_000 * turn
    ev = [Event(t0 + int(ttft_ms * 1e6) + i * 10_000_000, "content", 1, 3) for i in range(out)]
    return RequestRecord(id=f"{session}-{turn}", api="chat", target="x", ok=ok, t_start_ns=t0, events=ev,
                         t_done_ns=ev[-1].t_ns if ev else t0, prompt_tokens=prompt, output_tokens=out,
                         cached_prompt_tokens=cached,
                         tags={"session": session, "turn": turn, "turns": 3, "content_tokens": content})


def test_turn_rows_and_growth() -> None:
    recs = []
    for s in ("s0", "s1"):
        # content: 10 system + 20 input; then + 8 reply + 20 input each turn; template adds 3 + 4/turn
        recs += [_rec(s, 1, 33, 0, 8, 30, 50), _rec(s, 2, 65, 33, 8, 58, 52), _rec(s, 3, 97, 65, 8, 86, 55)]
    rows = turn_rows(recs)
    assert [r["turn"] for r in rows] == [1, 2, 3] and all(r["n"] == 2 for r in rows)
    assert [r["prompt_tokens_mean"] for r in rows] == [33, 65, 97]
    assert [r["cached_tokens_mean"] for r in rows] == [0, 33, 65]
    assert rows[0]["median_ttft_ms"] == pytest.approx(50, abs=0.01)
    assert rows[1]["median_itl_ms"] == pytest.approx(10, abs=0.01)
    assert rows[0]["decode_tok_s"] == pytest.approx(100, rel=1e-6)
    g = prompt_growth(recs)
    assert [x["template_tokens"] for x in g] == [[4], [4]] and g[0]["growth_mean"] == 32
    assert expected_cache_share(recs) == pytest.approx((33 + 65) / (33 + 65 + 97))
    assert template_constant_in_sessions(recs) is True
    # a session whose third turn grew by one token more than what was appended: not constant
    bad = recs[:2] + [_rec("s0", 3, 98, 65, 8, 86, 55)]
    assert template_constant_in_sessions(bad) is False
    # no cached counts (Ollama): None, not 0
    assert turn_rows([_rec("s", 1, 10, None, 3, 10, 5)])[0]["cached_tokens_mean"] is None
    # warm-ups and failed turns stay out
    w = _rec("s9", 1, 999, 0, 3, 1, 5)
    w.tags["warmup"] = True
    assert turn_rows(recs + [w, _rec("s8", 1, 999, 0, 3, 1, 5, ok=False)])[0]["prompt_tokens_mean"] == 33


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_reader(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]},
        {"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]},
    ])
    es = read_mooncake(p)
    assert es[1].offset_s == pytest.approx(10.535) and es[1].hash_ids == (46, 47) and es[0].output_len == 52
    for bad, why in (({"input_length": 5}, "timestamp"), ({"timestamp": 0, "input_length": 0}, "input_length"),
                     ({"timestamp": 0, "input_length": 600, "hash_ids": [1, 2, 3]}, "cover more"),
                     ({"timestamp": 0, "input_length": 5, "hash_ids": ["a"]}, "hash_ids")):
        with pytest.raises(InputError, match=why):
            read_mooncake(_write(tmp_path / "b.jsonl", [bad]))


def test_burstgpt_reader(tmp_path: Path) -> None:
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,417,276,693,API log\n")
    es, skipped = read_burstgpt(p)
    assert skipped == 1 and [(e.offset_s, e.input_len, e.output_len) for e in es] == [(5.0, 472, 18), (118.0, 417, 276)]
    bad = tmp_path / "x.csv"
    bad.write_text("time,prompt\n1,2\n")
    with pytest.raises(InputError, match="not a BurstGPT CSV"):
        read_burstgpt(bad)


def test_window() -> None:
    es = [TraceEntry(10.0 + i) for i in range(10)]
    got = window(es, start_s=2, duration_s=3)
    assert [e.offset_s for e in got] == [12.0, 13.0, 14.0]
    assert len(window(es)) == 10
    with pytest.raises(InputError, match="no trace request"):
        window(es, start_s=100)


def test_implied_hit_rate_examples() -> None:
    shared = [HashedEntry(0, 1024, 1, (1, 2)), HashedEntry(1, 1024, 1, (1, 2))]
    assert implied_hit_rate(shared, 512) == pytest.approx(0.5)
    distinct = [HashedEntry(0, 1024, 1, (1, 2)), HashedEntry(1, 1024, 1, (3, 4))]
    assert implied_hit_rate(distinct, 512) == 0.0
    # the chain stops at the first new block; a partial last block counts its real length
    chain = [HashedEntry(0, 1000, 1, (1, 2)), HashedEntry(1, 1000, 1, (1, 9)), HashedEntry(2, 700, 1, (1, 2))]
    assert implied_hit_rate(chain, 512) == pytest.approx((0 + 512 + 700) / 2700)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=4), min_size=1, max_size=12), st.integers(1, 64))
def test_implied_hit_rate_bounds(idlists: list[list[int]], bs: int) -> None:
    es = [HashedEntry(float(i), len(ids) * bs, 1, tuple(ids)) for i, ids in enumerate(idlists)]
    r = implied_hit_rate(es, bs)
    assert r is not None and 0.0 <= r < 1.0  # the first request can never hit
    # an id never seen before is never a hit: fresh ids for every request give none
    fresh = [HashedEntry(float(i), len(ids) * bs, 1, tuple(100 * i + j for j in range(len(ids))))
             for i, ids in enumerate(idlists)]
    assert implied_hit_rate(fresh, bs) == 0.0


@pytest.mark.parametrize("argv, why", [
    (["--users", "3"], "--users is only read with --dataset conversation"),
    (["--dataset", "conversation", "--users", "2", "--session-rate", "1"], "do not combine"),
    (["--dataset", "mooncake"], "needs --dataset-path"),
    (["--dataset", "conversation", "--turns", "0"], "--turns"),
    (["--dataset", "conversation", "--system-prompt", "some"], "--system-prompt"),
    (["--block-size", "16"], "--block-size is only read with --dataset mooncake"),
    (["--trace-start", "5"], "--trace-start has no effect"),
    (["--dataset", "conversation", "--think-time-s", "soon"], "--think-time-s"),
    (["--dataset", "conversation", "--sweep"], "--sweep"),
])
def test_bad_flags_are_one_line(argv: list[str], why: str, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(["bench", "http://127.0.0.1:9", *argv], capsys, monkeypatch)
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines[0].startswith("phasescope: error:") and why in err and "Traceback" not in err


def test_expected_share_counts_a_shared_system_prompt_once_sent() -> None:
    a, b = _rec("s0", 1, 40, 0, 4, 30, 5), _rec("s1", 1, 40, 10, 4, 30, 5)
    b.t_start_ns = a.t_start_ns + 1  # s1's first turn after s0's
    for r in (a, b):
        r.tags.update({"system_tokens": 10, "system_key": "shared"})
    assert expected_cache_share([a, b]) == pytest.approx(10 / 80)
    for r, key in ((a, "u0"), (b, "u1")):  # per-user system prompts: nothing to share
        r.tags["system_key"] = key
    assert expected_cache_share([a, b]) == 0.0


def test_num_prompts_is_refused_for_a_conversation_before_anything_starts(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A conversation sends --sessions × --turns turns: a --num-prompts it silently ignored (the run
    stored num_prompts 10 and sent 6) is one clear line and exit 2, before a server is even looked for."""
    code, out, err = run(["bench", "http://127.0.0.1:9", "--dataset", "conversation", "--users", "2", "--turns", "3",
                          "-n", "10", "--no-store"], capsys, monkeypatch)
    assert code == 2 and "--num-prompts" in err and "--sessions" in err and "Traceback" not in err + out, (out, err)
    assert len(err.strip().splitlines()) == 1


def test_tune_sends_its_conversation_workload_without_num_prompts() -> None:
    from phasescope.load.datasets import check_workload
    from phasescope.tuning.run import bench_config

    cfg = bench_config({"dataset": "conversation", "users": 2, "turns": "3"}, "http://127.0.0.1:9")
    assert cfg.num_prompts is None
    check_workload(cfg)  # no InputError
    assert bench_config({}, "http://127.0.0.1:9").num_prompts == 12  # the random workload keeps its count
