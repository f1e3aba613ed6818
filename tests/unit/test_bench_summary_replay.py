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
    assert not diff(expected, got), f"{name}: " + "; ".join(diff(expected, got)[:20])


def test_the_check_sees_a_changed_number() -> None:
    case, recs = load_case(DATA / "random")
    got = replay(case, recs)
    recs[0].output_tokens = (recs[0].output_tokens or 0) + 1  # one more token on one request
    assert any("total_output_tokens" in d for d in diff(got, replay(case, recs)))
