"""Issue 34 item 4 on loopback fakes: agentic sessions whose forked sub-agents reuse the parent's context in
the server's prefix cache (vLLM-style block cache and llama.cpp's one-slot ``cache_n``), and the two sample
agent traces replayed through the CLI. Assertions on the servers' cached-token counters and record counts,
never on timing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from phasescope.load.bench import BenchConfig, run_bench
from phasescope.measure.records import read_records
from phasescope.testing.fakeserver import FakeServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import isolated_home, run  # noqa: E402,F401

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def _cfg(url: str, tmp: Path, **kw: Any) -> BenchConfig:
    base = dict(url=url, dataset="agentic", users=1, sessions=2, turns="3", fork_at="2", fork_width=3, subagent_turns=2,
                system_prompt_len=96, turn_input_len=20, tool_output_len=40, output_len=8, store=False,
                out_dir=str(tmp), server_metrics=False, nvml=False)
    base.update(kw)
    return BenchConfig(**base)


def _pairs(records: list[Any]) -> list[tuple[Any, Any]]:
    by_id = {r.id: r for r in records}
    return [(r, by_id[r.tags["fork_parent"]]) for r in records if r.tags.get("fork_parent")]


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp"])
def test_subagents_reuse_the_parents_context(flavor: str, tmp_path: Path) -> None:
    with FakeServer(flavor=flavor, prefix_cache=True, ttft_s=0.002, itl_s=0.001).running() as srv:
        r = run_bench(_cfg(srv.url, tmp_path))
    a = r.summary["agentic"]
    # 2 sessions × (3 main turns + 1 fork × 3 sub-agents × 2 turns)
    assert a["calls_planned"] == a["calls_sent"] == a["calls_ok"] == 18 and a["sessions"] == 2
    assert a["forks"] == 2 and a["subagents"] == 6 and a["subagent_calls"] == 12
    pairs = _pairs(r.records)
    assert len(pairs) == 6
    for sub, parent in pairs:
        cached = sub.cached_prompt_tokens
        # the parent's whole prompt (and its reply) is the sub-agent's prefix: the cache serves it
        # (vLLM: whole 16-token blocks; llama.cpp: all but the parent's generation-prompt tokens)
        assert cached is not None and cached >= parent.prompt_tokens - 16, (cached, parent.prompt_tokens)
    src = "usage.prompt_tokens_details.cached_tokens" if flavor == "vllm" else "timings.cache_n"
    assert a["kv_reuse"]["source"] == src and a["kv_reuse"]["overall"] > 0.3
    assert a["subagent_prefix_reuse"]["n"] == a["subagent_prefix_reuse"]["reused"] == 6
    assert a["subagent_prefix_reuse"]["min"] >= 0.8
    assert a["subagent_ttft_ratio"]["n"] == 6
    assert all(row["wait_s"] > 0 and row["think_s"] >= 0 for row in a["per_session"])
    # every call is on disk, tagged (and no reply text kept)
    recs = [x for x in read_records(tmp_path / "records.jsonl") if not x.tags.get("warmup")]
    assert len(recs) == 18 and {x.tags["role"] for x in recs} == {"main", "subagent"}
    assert all("reply_text" not in x.tags for x in recs)


def test_llamacpp_cache_prompt_off_reuses_nothing(tmp_path: Path) -> None:
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.001).running() as srv:
        r = run_bench(_cfg(srv.url, tmp_path, cache_prompt=False, sessions=1))
    a = r.summary["agentic"]
    assert a["subagent_prefix_reuse"]["n"] == 3 and a["subagent_prefix_reuse"]["cached_tokens"] == [0, 0, 0]
    assert a["kv_reuse"]["overall"] == 0


def test_think_time_is_time_not_waiting(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as srv:
        r = run_bench(_cfg(srv.url, tmp_path, sessions=1, think_time_s="0.2", fork_at="none", turns="3"))
    (row,) = r.summary["agentic"]["per_session"]
    # two pauses of 0.2 s between three calls: at least that much of the session was not waiting
    assert row["planned_think_s"] == pytest.approx(0.4) and row["think_s"] >= 0.4 - 0.01
    assert r.summary["agentic"]["forks"] == 0


def test_duration_bounds_the_run(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001).running() as srv:
        r = run_bench(_cfg(srv.url, tmp_path, sessions=1, turns="40", fork_at="2,10,20", think_time_s="0.1",
                           duration_s=0.5))
    a = r.summary["agentic"]
    assert 1 <= a["calls_sent"] < 40 < a["calls_planned"]


def _cli(url: str, tmp_path: Path, capsys: Any, monkeypatch: Any, *args: str) -> tuple[dict[str, Any], str]:
    code, out, err = run(["bench", url, "--no-store", "--out", str(tmp_path / "o"), "--no-nvml", "--no-server-metrics",
                          "--json", "--dataset", "agentic", "--users", "1", "--trace-speed", "20", *args], capsys, monkeypatch)
    assert code == 0, (out, err)
    return json.loads(out), err


def test_weka_sample_replay_keeps_its_prefix_structure(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.001).running() as srv:
        d, _ = _cli(srv.url, tmp_path, capsys, monkeypatch, "--dataset-path", str(TRACES / "weka_agent.jsonl"))
    a = d["agentic"]
    assert a["trace"]["format"] == "weka" and a["sessions"] == 2 and a["calls_ok"] == 8
    assert a["forks"] == 1 and a["subagents"] == 2
    # both sub-agents share the main agent's first four 64-token blocks
    assert a["subagent_prefix_reuse"]["cached_tokens"] == [256, 256]
    recs = [x for x in read_records(tmp_path / "o" / "records.jsonl") if not x.tags.get("warmup")]
    assert sorted(x.prompt_tokens - 3 for x in recs if x.tags["trace_session"] == "sample-a") == [200, 300, 330, 330, 400, 420]


def test_otel_sample_replay_forks_reuse_the_parent(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    with FakeServer(flavor="vllm", prefix_cache=True, ttft_s=0.002, itl_s=0.001).running() as srv:
        d, _ = _cli(srv.url, tmp_path, capsys, monkeypatch, "--dataset-path", str(TRACES / "otel_agent.json"))
    a = d["agentic"]
    assert a["trace"]["format"] == "otel" and a["trace"]["spans_ignored"] == 1
    assert a["sessions"] == 2 and a["calls_ok"] == 6 and a["forks"] == 1 and a["subagents"] == 2
    assert a["subagent_prefix_reuse"]["n"] == 2 and a["subagent_prefix_reuse"]["min"] >= 0.8


def test_console_says_reuse_ttft_and_waiting(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.001).running() as srv:
        code, out, err = run(["bench", srv.url, "--no-store", "--out", str(tmp_path / "c"), "--no-nvml",
                              "--dataset", "agentic", "--users", "1", "--sessions", "1", "--turns", "3",
                              "--fork-width", "2", "--turn-input-len", "16", "--output-len", "4"], capsys, monkeypatch)
    assert code == 0, err
    assert "Agentic: 1 sessions, 5 of 5 calls answered, 1 fork(s) sent 2 sub-agent(s) (2 calls)." in out
    assert "KV reuse (timings.cache_n):" in out and "Sub-agents' first calls found" in out
    assert "Sub-agent TTFT ÷ parent's: cannot tell from 2 sub-agent(s)" in out
    assert "Sessions waited for the server" in out
