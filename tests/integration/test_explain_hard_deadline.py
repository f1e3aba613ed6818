"""Issue 30 item 5, on a real request: :meth:`RunContext.bounded` stops a request (and a chat turn)
still running at the run's hard deadline and keeps it as data. A fake server decodes far slower than
the deadline allows; the tests assert the record, not a time. Moved from tests/unit/test_explain_budget.py
(they start a server)."""

from __future__ import annotations

import asyncio
from typing import Any

from phasescope.apis.base import Target
from phasescope.experiments.context import RunContext, ServerFacts


def test_a_request_still_running_at_the_hard_deadline_is_stopped_and_kept():
    from phasescope.experiments.context import experiment_session
    from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake

    async def go() -> Any:
        async with BehaviourFake(Behaviour(decode_step_s=0.05, overhead_s=0.001)) as fake:
            target = Target(base_url=fake.url, api="openai", model="fake-llm", engine="vllm")
            async with experiment_session() as session:
                ctx = RunContext(target=target, session=session, facts=ServerFacts())
                try:
                    ctx.start_clock(0.25)  # hard deadline 0.3 s from now; the request needs 400 × 50 ms = 20 s
                    p = await ctx.prompt(16)
                    rec = await ctx.send(p.request(400), "batching", phase="measure")
                    return rec, ctx
                finally:
                    await ctx.close()

    rec, ctx = asyncio.run(go())
    assert rec.ok is False and rec.error_kind == "stopped_by_client"
    assert len(rec.token_events()) < 400 and ctx.n_cut == 1
    assert rec in ctx.records  # kept: a cut request is data


def test_a_chat_turn_still_running_at_the_hard_deadline_is_stopped_too():
    # the conversation experiment sends on the chat API by its own path: it ran 24.6 s of a 16.6 s share
    from phasescope.apis.base import GenRequest
    from phasescope.experiments import conversation
    from phasescope.experiments.context import experiment_session
    from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake

    async def go() -> Any:
        async with BehaviourFake(Behaviour(decode_step_s=0.05, overhead_s=0.001)) as fake:
            target = Target(base_url=fake.url, api="openai", model="fake-llm", engine="vllm")
            async with experiment_session() as session:
                ctx = RunContext(target=target, session=session, facts=ServerFacts())
                ctx.start_clock(0.25)
                req = GenRequest(prompt="hello there", max_tokens=400, keep_text=True,
                                 messages=[{"role": "user", "content": "hello there"}])
                rec, _ = await conversation._send_chat(ctx, req, phase="turn", session=0, turn=1)
                return rec, ctx

    rec, ctx = asyncio.run(go())
    assert rec.error_kind == "stopped_by_client" and ctx.n_cut == 1 and rec in ctx.records
