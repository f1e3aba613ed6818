"""Issue 30 item 5: ``explain --budget B`` ends within +10 % of B (``duration_s`` ≤ 1.1 × B), and every
experiment gets its part of the time left, whatever the earlier ones did.

The suite's sizing runs on a simulated clock (no real-time assertion a loaded box can break): the
experiments are fakes that spend whatever multiple of their allotment the case draws, up to the hard
deadline the run sets — which :meth:`RunContext.bounded` enforces on a real request
(tests/integration/test_explain_hard_deadline.py, on a fake server)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasescope.apis.base import Target
from phasescope.experiments import NAMES, suite
from phasescope.experiments.common import ExperimentInfo
from phasescope.experiments.context import RUN_GRACE, Budget, Calibration, RunContext, ServerFacts


class SimClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class FakeResult:
    info: ExperimentInfo
    spent_s: float = 0.0
    budget_s: float = 0.0
    name: str = ""
    cache_detected: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _ctx(clock: SimClock) -> RunContext:
    target = Target(base_url="http://127.0.0.1:1", api="openai", model="m", engine="vllm")
    ctx = RunContext(target=target, session=None, facts=ServerFacts(), clock=clock)  # type: ignore[arg-type]
    ctx.calib = Calibration(0.01, 1000.0, 50.0, 64)
    return ctx


def _patch(monkeypatch: pytest.MonkeyPatch, clock: SimClock, factors: dict[str, float]) -> list[FakeResult]:
    """Every experiment's ``run`` → a fake that spends ``factor × its budget`` of simulated time, stopped at
    the run's hard deadline as ``RunContext.bounded`` stops a real request."""
    from phasescope.experiments import (batching, context_fill, conversation, prefill_interference, prefix_cache,
                                        prompt_scaling, queue)

    ran: list[FakeResult] = []
    mods = {"prompt-scaling": prompt_scaling, "prefix-cache": prefix_cache, "context-fill": context_fill,
            "batching": batching, "prefill-interference": prefill_interference, "queue": queue,
            "conversation": conversation}
    for name, mod in mods.items():
        def make(name: str = name):
            async def run(ctx: RunContext, budget_s: float, **_: Any) -> FakeResult:
                ctx.start_clock(budget_s)
                t0 = clock.t
                clock.t += max(0.0, min(factors[name] * budget_s, ctx.hard_left()))
                r = FakeResult(ExperimentInfo(name=name), clock.t - t0, budget_s, name)
                ran.append(r)
                return r
            return run
        monkeypatch.setattr(mod, "run", make())
    return ran


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.floats(10, 900), spent_before=st.floats(0, 0.3),
       factors=st.lists(st.floats(0.05, 5.0), min_size=len(NAMES), max_size=len(NAMES)))
def test_the_whole_run_ends_within_ten_percent_of_the_budget(monkeypatch, budget, spent_before, factors):
    clock = SimClock()
    ran = _patch(monkeypatch, clock, dict(zip(NAMES, factors)))
    ctx = _ctx(clock)
    ctx.budget = Budget(clock.t, budget, clock)
    clock.t += spent_before * budget  # the embedded engine's start and discovery count against the budget
    asyncio.run(suite.run_suite(ctx, budget, list(NAMES)))
    assert clock.t - ctx.budget.start <= (1 + RUN_GRACE) * budget + 1e-9 <= 1.1 * budget
    for r in ran:  # no experiment may spend past its allotment by more than the hard margin
        assert r.spent_s <= 1.2 * r.budget_s + 1e-9


def test_experiments_that_keep_to_their_allotment_all_run(monkeypatch):
    # the run: 90 s; every experiment ran (none skipped, none squeezed to nothing)
    clock = SimClock()
    ran = _patch(monkeypatch, clock, {n: 0.95 for n in NAMES})
    ctx = _ctx(clock)
    results, skipped = asyncio.run(suite.run_suite(ctx, 90.0, list(NAMES)))
    assert not skipped and set(results) == set(NAMES)
    tot = sum(suite.SHARES[n] for n in NAMES)
    want = {n: suite.SHARES[n] / tot * 90.0 for n in NAMES}  # each got about its share of the whole budget
    for r in ran:
        assert r.budget_s >= 0.9 * want[r.name], (r.name, r.budget_s, want[r.name])
    assert clock.t - ctx.budget.start <= 90.0


def test_an_overrunning_experiment_cannot_starve_the_last_one(monkeypatch):
    # issue 30: prompt-scaling on a busy host ran long, and conversation was "skipped (ran 31 s over it)"
    clock = SimClock()
    factors = {n: 1.0 for n in NAMES}
    factors["prompt-scaling"] = 10.0
    ran = _patch(monkeypatch, clock, factors)
    ctx = _ctx(clock)
    results, skipped = asyncio.run(suite.run_suite(ctx, 90.0, list(NAMES)))
    assert "conversation" in results and not skipped, skipped
    assert next(r for r in ran if r.name == "prompt-scaling").spent_s <= 1.2 * 90.0 * 0.2 / 1.12 + 1e-9
    assert clock.t - ctx.budget.start <= 1.1 * 90.0
