"""Behaviour unchanged (issue 32 item 3): stored records of real fake runs — random (cap, rate, prefix
groups, --steady-state, --workers), ShareGPT, jsonl, a plain --trace replay, Mooncake, BurstGPT, a
conversation and --trials — replayed through the summary give, key for key, the numbers the code gave
before ``load/`` became workload × driver (tests/data/bench_replay/*/expected.json, written by
benchmarks/bench_replay_fixtures.py then). Pure: files in, dicts compared."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_replay import DATA, diff, load_case, replay  # noqa: E402

#: keys the refactor adds (none may go): a plain --trace replay's facts are now built by the same
#: builder as Mooncake's and BurstGPT's (load.traces.trace_facts), so they name its rows skipped and
#: block size too
ADDED = {"trace": {".trace.rows_skipped": 0, ".trace.block_size": None}}

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
    problems = [d for d in diff(expected, got) if not (d.split(":")[0] in added and "new key" in d)]
    assert not problems, f"{name}: " + "; ".join(problems[:20])


def test_the_check_sees_a_changed_number() -> None:
    case, recs = load_case(DATA / "random")
    got = replay(case, recs)
    recs[0].output_tokens = (recs[0].output_tokens or 0) + 1  # one more token on one request
    assert any("total_output_tokens" in d for d in diff(got, replay(case, recs)))
