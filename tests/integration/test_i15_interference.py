"""Issue #15: prefill-interference decides in both directions on a fast server that exports only
vLLM-style /metrics (no llama.cpp /slots): stalls when a prefill blocks the running streams, "no
stall / chunked" when the engine mixes the prefill into decode steps — at 5 and 25 ms per token.

The injection is timed from the client's own view of the streams; the old code waited for the
server's generation counter and injected after the streams had finished ("too few tokens")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from phasescope.apis.base import Target
from phasescope.diagnose import diagnose
from phasescope.experiments import prefill_interference
from phasescope.experiments.context import RunContext, calibrate, discover_facts, experiment_session
from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake


def run_pi(b: Behaviour, budget: float = 12.0) -> Any:
    async def go() -> Any:
        async with BehaviourFake(b) as fake:
            target = Target(base_url=fake.url, api="openai", model=b.model, engine="vllm")
            async with experiment_session() as session:
                facts = await discover_facts(session, target)
                assert facts.metrics and facts.slots is None  # vLLM-style: /metrics, no slot count
                ctx = RunContext(target=target, session=session, facts=facts)
                try:
                    await calibrate(ctx)
                    return await prefill_interference.run(ctx, budget)
                finally:
                    await ctx.close()

    return asyncio.run(go())


def speed(step: float, **kw: Any) -> Behaviour:
    return Behaviour(slots=32, decode_step_s=step, prefill_s_per_token=step / 50, overhead_s=0.002,
                     max_model_len=16384, **kw)


@pytest.mark.parametrize("step", [0.005, 0.025])
def test_unchunked_prefill_is_reported_as_a_stall(step):
    r = run_pi(speed(step, chunked_prefill_tokens=None))
    assert r.interference is True, r.reason
    assert r.chunked_prefill_likely is False, r.reason
    assert r.stall_s >= 0.5 * r.injected_prefill_s
    f = diagnose({"prefill-interference": r}, engine="vllm").get("prefill-interference")
    assert f is not None and f.severity == "problem"


@pytest.mark.parametrize("step", [0.005, 0.025])
def test_chunked_prefill_is_reported_as_no_stall(step):
    r = run_pi(speed(step, chunked_prefill_tokens=16))
    assert r.interference is False, r.reason
    assert r.tokens_during_prefill >= 3
    d = diagnose({"prefill-interference": r}, engine="vllm")
    assert "prefill-interference" not in d.ids() and "prefill-no-stall" in d.ids()


def test_few_slots_withdraw_queued_streams_instead_of_measuring_a_queue():
    # 2 slots the server does not report: the third stream queues; it is withdrawn, and one more,
    # so the injected request gets a slot and the stall is still seen
    r = run_pi(Behaviour(slots=2, decode_step_s=0.01, prefill_s_per_token=2e-4, max_model_len=16384))
    assert any("withdrawn" in n for n in r.notes), r.notes
    assert r.interference is True, r.reason
