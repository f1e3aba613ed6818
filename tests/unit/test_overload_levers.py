"""bench's 429/503 hint names the flags that set the load in the run's own mode, each one that
mode accepts (bench's cross-flag checks reject a flag with no effect there)."""

from __future__ import annotations

import pytest

from phasescope.cli.cmd_bench import _load_levers
from phasescope.errors import InputError, overloaded_hint
from phasescope.cli.validate import _bench_cross

MODES = [
    {"dataset": "random", "load_shape": "poisson"},
    {"dataset": "conversation", "load_shape": "poisson"},
    {"dataset": "random", "load_shape": "trace", "trace": "t.jsonl"},
    {"dataset": "mooncake", "load_shape": "poisson", "dataset_path": "m.jsonl"},
]


def _accepted(mode: dict, flag: str) -> bool:
    name = flag[2:].replace("-", "_")
    try:
        _bench_cross({**mode, name: 1}, lambda n: n == name)
    except InputError:
        return False
    return True


@pytest.mark.parametrize("mode", MODES)
def test_every_lever_named_is_accepted_in_that_mode(mode: dict) -> None:
    levers = _load_levers(mode)
    assert levers
    for flag in levers:
        assert _accepted(mode, flag), (flag, mode)
        assert flag in overloaded_hint(None, levers)
    assert "--retries" not in overloaded_hint(None, levers)


def test_the_check_tells_a_foreign_flag() -> None:  # the test above can fail
    assert not _accepted(MODES[0], "--users") and not _accepted(MODES[0], "--trace-speed")


def test_probe_hint_counts_the_retries_made() -> None:
    assert "pass --retries N" in overloaded_hint(0)
    for n in (1, 3):
        h = overloaded_hint(n)
        assert f"after {n} retr" in h and "pass --retries" not in h
