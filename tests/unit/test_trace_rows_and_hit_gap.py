"""Issue 30 item 8: every replay says how many rows it skipped and why, and a Mooncake replay explains
the gap between the hit rate the trace implies and the server's (concurrent arrivals, llama.cpp's
per-slot reuse) — on the records' own clocks, no timing assertion."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from phasescope.load.datasets import workload_for
from phasescope.load.traces import HashedEntry, hit_rate_gap, trace_console_lines, trace_section
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000


def _cfg(path, dataset, **kw):
    base = dict(dataset=dataset, dataset_path=str(path), block_size=512, trace_start=None, trace_duration=None,
                num_prompts=None, trace_speed=1.0)
    base.update(kw)
    return SimpleNamespace(**base)


def read_trace_dataset(cfg):
    """The trace workload's windowed entries and facts (load.datasets reads every trace the same way)."""
    return workload_for(cfg).entries()


BURST = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
         "0,ChatGPT,472,18,490,Conversation log\n"
         "3,ChatGPT,1087,0,1087,Conversation log\n"
         "5,GPT-4,417,64,481,API log\n"
         "9,ChatGPT,260,32,292,Conversation log\n")


def test_burstgpt_says_the_zero_response_row_was_skipped(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(BURST)
    entries, facts = read_trace_dataset(_cfg(p, "burstgpt"))
    assert len(entries) == 3 and facts["rows_in_file"] == 4
    assert facts["skipped"] == {"zero_response_tokens": 1}
    line = trace_console_lines(trace_section(facts, [], {}))[0]
    assert "3 of 4 rows replayed; 1 skipped: 1 with 0 response tokens" in line


def test_window_and_num_prompts_are_counted_as_skipped(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text(BURST)
    _, facts = read_trace_dataset(_cfg(p, "burstgpt", trace_start=1.0, num_prompts=1))
    # row at t=0 is outside the window, t=3 failed, t=5 replayed, t=9 beyond --num-prompts 1
    assert facts["skipped"] == {"zero_response_tokens": 1, "outside_window": 1, "beyond_num_prompts": 1}
    s = trace_section(facts, [], {})["skipped_sentence"]
    assert s.startswith("1 of 4 rows replayed; 3 skipped:") and "outside the --trace-start" in s and "--num-prompts" in s


def test_a_full_replay_says_none_skipped(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1024, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 10, "input_length": 1024, "hash_ids": [1, 2]}\n')
    _, facts = read_trace_dataset(_cfg(p, "mooncake"))
    assert trace_section(facts, [], {})["skipped_sentence"] == "2 of 2 rows replayed; none skipped"


def _rec(item, start_ms, first_ms):
    return RequestRecord(id=f"r{item}", api="openai", target="t", model="m", t_start_ns=start_ms * MS,
                         events=[Event(first_ms * MS, "content", 1, 1)], t_done_ns=(first_ms + 1) * MS, ok=True,
                         tags={"item": item, "index": item})


ENTRIES = [HashedEntry(0.0, 1024, 4, (1, 2)), HashedEntry(0.1, 1024, 4, (1, 2)), HashedEntry(5.0, 1024, 4, (1, 2))]


def test_concurrent_arrivals_explain_the_gap():
    # request 1 arrives at 100 ms while request 0 (same two blocks) is prefilling until 400 ms: its 1,024
    # implied hit tokens were not computed yet; request 2 arrives at 5 s, after both: its hit is reachable
    recs = [_rec(0, 0, 400), _rec(1, 100, 700), _rec(2, 5000, 5100)]
    g = hit_rate_gap(ENTRIES, recs, 512, implied=2048 / 3072, measured=1024 / 3072, engine="vllm")
    assert g["reachable_hit_rate"] == pytest.approx(1024 / 3072)
    assert g["concurrent_hit_share"] == pytest.approx(0.5)
    # the measured rate equals the reachable one: concurrency is the whole reason, no more is claimed
    why = g["hit_rate_gap_reason"]
    assert "50 % of the implied hits were blocks another request was still prefilling" in why
    assert "at most 33.3 % was reachable" in why and "llama.cpp" not in why and "evicted" not in why


def test_llamacpp_per_slot_reuse_is_named():
    recs = [_rec(0, 0, 400), _rec(1, 1000, 1400), _rec(2, 5000, 5100)]  # sequential: every hit reachable
    g = hit_rate_gap(ENTRIES, recs, 512, implied=2048 / 3072, measured=0.109, engine="llamacpp")
    assert g["concurrent_hit_share"] == 0.0
    assert "llama.cpp keeps one prompt per slot" in g["hit_rate_gap_reason"]
    assert "10.9 %" in g["hit_rate_gap_reason"] and "66.7 %" in g["hit_rate_gap_reason"]


def test_no_reason_when_the_server_matches_the_trace():
    recs = [_rec(0, 0, 400), _rec(1, 1000, 1400), _rec(2, 5000, 5100)]
    g = hit_rate_gap(ENTRIES, recs, 512, implied=2048 / 3072, measured=0.66, engine="vllm")
    assert g["hit_rate_gap_reason"] is None
