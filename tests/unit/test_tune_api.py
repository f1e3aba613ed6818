"""tune's --api reaches its workloads: bench's config takes it from the stored workload args (auto when absent)."""

from __future__ import annotations

from phasescope.tuning.run import bench_config


def test_bench_workload_speaks_the_tunes_api() -> None:
    assert bench_config({"api": "anthropic"}, "http://127.0.0.1:9").api == "anthropic"
    assert bench_config({"api": "responses"}, "http://127.0.0.1:9").api == "responses"


def test_a_tune_without_api_detects_as_before() -> None:
    assert bench_config({}, "http://127.0.0.1:9").api == "auto"
