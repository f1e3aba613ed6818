"""build_schedule(): arrival processes are seeded, bounded and have the requested statistics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from phasescope.errors import InputError
from phasescope.load.schedule import build_schedule, read_trace, TraceEntry
from phasescope.load.workload import draw_lengths, length_range


def offsets(s):  # type: ignore[no-untyped-def]
    return np.array([r.offset_s for r in s.requests])


def test_poisson_seeded_and_mean_rate() -> None:
    a = build_schedule(4000, rate=20.0, seed=3)
    b = build_schedule(4000, rate=20.0, seed=3)
    c = build_schedule(4000, rate=20.0, seed=4)
    assert [r.offset_s for r in a.requests] == [r.offset_s for r in b.requests]
    assert [r.offset_s for r in a.requests] != [r.offset_s for r in c.requests]
    gaps = np.diff(offsets(a))
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    # exponential gaps: coefficient of variation ≈ 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.08)
    assert a.requests[0].offset_s == 0.0
    assert a.requested_rate == pytest.approx(20.0, rel=0.05)


def test_burstiness_changes_dispersion_not_mean() -> None:
    bursty = np.diff(offsets(build_schedule(4000, rate=10.0, burstiness=0.25, seed=1)))
    even = np.diff(offsets(build_schedule(4000, rate=10.0, burstiness=8.0, seed=1)))
    assert bursty.mean() == pytest.approx(0.1, rel=0.1)
    assert even.mean() == pytest.approx(0.1, rel=0.05)
    # gamma CV = 1/sqrt(k)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.15)
    assert even.std() / even.mean() == pytest.approx(1 / math.sqrt(8), rel=0.15)


def test_constant_and_inf() -> None:
    s = build_schedule(5, rate=4.0, shape="constant")
    assert list(offsets(s)) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    s = build_schedule(5, rate=4.0, burstiness=math.inf)
    assert list(offsets(s)) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    s = build_schedule(7)
    assert list(offsets(s)) == [0.0] * 7
    assert s.requested_rate is None


def test_duration_bounds_open_loop() -> None:
    s = build_schedule(None, rate=50.0, duration_s=2.0, seed=0)
    assert all(r.offset_s < 2.0 for r in s.requests)
    assert len(s.requests) == pytest.approx(100, rel=0.3)
    s = build_schedule(10, rate=50.0, duration_s=100.0)
    assert len(s.requests) == 10


def test_closed_loop_duration_repeats() -> None:
    s = build_schedule(None, duration_s=1.0, max_concurrency=4, num_items=3)
    assert s.repeat
    it = s.iter_requests()
    first = [next(it) for _ in range(10)]
    assert [r.index for r in first] == list(range(10))
    assert [r.item for r in first] == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]


def test_ramp_rates_increase() -> None:
    s = build_schedule(2000, shape="ramp", ramp_start_rate=5.0, ramp_end_rate=50.0, seed=0)
    gaps = np.diff(offsets(s))
    assert gaps[:200].mean() > 3 * gaps[-200:].mean()
    with pytest.raises(InputError):
        build_schedule(10, shape="ramp")


def test_warmup_and_partition() -> None:
    s = build_schedule(10, rate=5.0, warmup=3, seed=0)
    assert len(s.warmups) == 3 and all(w.warmup for w in s.warmups)
    # warm-ups use their own items: no measured prompt is seen by the server beforehand
    assert {w.item for w in s.warmups} == {10, 11, 12}
    assert not {w.item for w in s.warmups} & {r.item for r in s.requests}
    parts = s.partition(3)
    merged = sorted((r for p in parts for r in p.requests), key=lambda r: r.index)
    assert merged == s.requests
    assert sum(len(p.warmups) for p in parts) == 3


def test_trace(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(d) for d in [
        {"timestamp": 5000, "input_length": 10, "output_length": 3},
        {"timestamp": 5500, "input_length": 20, "output_length": 4},
        {"offset_s": 7.0},
    ]) + "\n")
    tr = read_trace(p)
    assert tr[0] == TraceEntry(5.0, 10, 3)
    s = build_schedule(None, shape="trace", trace=tr, trace_speed=2.0)
    assert list(offsets(s)) == pytest.approx([0.0, 0.25, 1.0])
    assert s.requests[1].input_len == 20 and s.requests[1].output_len == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\"x\": 1}\n")
    with pytest.raises(InputError):
        read_trace(bad)
    with pytest.raises(InputError):
        read_trace(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("kw", [dict(num_prompts=0), dict(rate=0), dict(rate=-1.0), dict(burstiness=0),
                                dict(shape="zigzag"), dict(max_concurrency=0), dict(num_prompts=None)])
def test_bad_input(kw: dict) -> None:  # type: ignore[type-arg]
    args = {"num_prompts": 5, **kw}
    with pytest.raises(InputError):
        build_schedule(**args)


def test_length_ranges() -> None:
    assert length_range(100, 0.0) == (100, 100)
    assert length_range(100, 0.25) == (75, 125)
    import random
    xs = draw_lengths(500, 100, 0.5, random.Random(0))
    assert min(xs) >= 50 and max(xs) <= 150 and len(set(xs)) > 20
    with pytest.raises(InputError):
        length_range(10, 1.0)


def test_trace_shape_without_a_file_is_bad_input_not_a_type_error() -> None:
    # make_schedule read the trace before checking one was given: read_trace(None) raised TypeError
    from phasescope.load.bench import BenchConfig, make_schedule

    with pytest.raises(InputError, match="--load-shape trace needs --trace FILE"):
        make_schedule(BenchConfig(url="http://127.0.0.1:1", shape="trace"))
