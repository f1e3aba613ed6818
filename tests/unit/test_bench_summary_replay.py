"""Behaviour unchanged (issue 32 item 3): stored records of real fake runs — random (cap, rate, prefix
groups, --steady-state, --workers), ShareGPT, jsonl, a plain --trace replay, Mooncake, BurstGPT, a
conversation and --trials — replayed through the summary give, key for key, the numbers the code gave
before ``load/`` became workload × driver (tests/data/bench_replay/*/expected.json, written by
benchmarks/bench_replay_fixtures.py then). Pure: files in, dicts compared."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_replay import DATA, diff, load_case, replay  # noqa: E402

#: keys the refactor adds (none may go): a plain --trace replay's facts are now built by the same
#: builder as Mooncake's and BurstGPT's (load.traces.trace_facts), so they name its rows skipped and
#: block size too
ADDED = {"trace": {".trace.rows_skipped": 0, ".trace.block_size": None}}

#: keys the reasoning split (issue 33) adds to every summary: TTFO beside TTFT and the output split.
#: Without reasoning in these runs each TTFO statistic must equal its TTFT one and reasoning_tokens be 0.
REASONING_KEY = re.compile(r"(^|\.)((mean|median|std|p[\d.]+)_ttfo_ms(_ci)?|reasoning_tokens|answer_tokens|"
                           r"median_reasoning_tok_s|median_answer_tok_s)$")


def _check_reasoning_keys(d: object) -> None:
    """Every summary dict inside ``d``: TTFO = TTFT statistic by statistic, no reasoning tokens."""
    if isinstance(d, list):
        for x in d:
            _check_reasoning_keys(x)
        return
    if not isinstance(d, dict):
        return
    for k, v in d.items():
        if "_ttfo_ms" in k:
            assert v == d[k.replace("_ttfo_ms", "_ttft_ms")], k
        elif k == "reasoning_tokens":
            assert v == 0, k
        elif k == "answer_tokens" and "total_output_tokens" in d:
            assert v == d["total_output_tokens"], k
        else:
            _check_reasoning_keys(v)


CASES = sorted(p.name for p in DATA.iterdir() if (p / "expected.json").is_file())


def test_every_kind_of_run_is_frozen() -> None:
    assert set(CASES) >= {"random", "random_steady", "random_rate_prefix", "workers", "sharegpt", "jsonl", "trace",
                          "mooncake", "burstgpt", "conversation", "trials"}


@pytest.mark.parametrize("name", CASES)
def test_replayed_summary_is_identical(name: str) -> None:
    import json

    case, recs = load_case(DATA / name)
    expected = json.loads((DATA / name / "expected.json").read_text())
    got = replay(case, recs)
    added = ADDED.get(name, {})
    for path, value in added.items():  # ".trace.rows_skipped" → got["trace"]["rows_skipped"]
        section, key = path.strip(".").split(".")
        assert got[section][key] == value, path
    problems = [d for d in diff(expected, got) if not ((d.split(":")[0] in added or REASONING_KEY.search(
        d.split(":")[0])) and "new key" in d)]
    _check_reasoning_keys(got)
    assert not problems, f"{name}: " + "; ".join(problems[:20])


def test_the_check_sees_a_changed_number() -> None:
    case, recs = load_case(DATA / "random")
    got = replay(case, recs)
    recs[0].output_tokens = (recs[0].output_tokens or 0) + 1  # one more token on one request
    assert any("total_output_tokens" in d for d in diff(got, replay(case, recs)))
