"""Explain experiments and rules against loopback fakes whose behaviour is known: prefix cache on/off,
one slot so requests queue, decode that slows with context, prefill that stalls running decodes.

Effects are built large (tens of ms and more) so machine noise cannot flip an answer; budgets are
small so the file stays fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any, Awaitable, Callable

import pytest

from phasescope.apis.base import Target
from phasescope.diagnose import diagnose
from phasescope.experiments import batching, context_fill, prefill_interference, prefix_cache, prompt_scaling, queue
from phasescope.experiments.context import RunContext, calibrate, discover_facts, experiment_session
from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake, running_behaviour_fake


def run_on(b: Behaviour, body: Callable[[RunContext], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        async with BehaviourFake(b) as fake:
            engine = "llamacpp" if b.flavour == "llamacpp" else "vllm"
            target = Target(base_url=fake.url, api="openai", model=b.model, engine=engine)
            async with experiment_session() as session:
                facts = await discover_facts(session, target)
                ctx = RunContext(target=target, session=session, facts=facts)
                try:
                    await calibrate(ctx)
                    return await body(ctx)
                finally:
                    await ctx.close()

    return asyncio.run(go())


FAST = dict(prefill_s_per_token=1e-4, decode_step_s=0.006, overhead_s=0.002, max_model_len=8192)


# -- prefix cache --------------------------------------------------------------------------------------
def _timing_said(r: Any, truth: bool) -> bool:
    """The timing verdict is never wrong: it names the truth, or (a loaded box spread the repeats past what
    the intervals can separate) it says "cannot tell" with the reason. True when it named the truth."""
    assert r.cache_detected is not (not truth), r.reason
    if r.cache_detected is None:
        assert r.reason and ("cannot tell" in r.reason or "overlap" in r.reason or "noise" in r.reason), r.reason
        return False
    return True


def test_prefix_cache_on_is_detected_and_matches_the_server():
    r = run_on(Behaviour(prefix_cache=True, **FAST), lambda ctx: prefix_cache.run(ctx, 8, system_tokens=1024))
    # the server's counters are the truth here, and load cannot move them
    assert r.server.says_cached is True
    assert r.server.hit_rate is not None and r.server.hit_rate > 0.3  # vLLM counters scraped around the run
    d = diagnose({"prefix-cache": r}, engine="vllm")
    assert "prefix-cache-absent" not in d.ids()
    if _timing_said(r, True):
        assert r.ttft_repeat_s < 0.3 * r.ttft_first_s and r.agrees_with_server is True
        assert "prefix-cache-working" in d.ids()


def test_prefix_cache_off_is_a_problem_with_vllm_advice():
    r = run_on(Behaviour(prefix_cache=False, **FAST), lambda ctx: prefix_cache.run(ctx, 8, system_tokens=1024))
    assert r.server.says_cached is False
    d = diagnose({"prefix-cache": r}, engine="vllm")
    assert "prefix-cache-working" not in d.ids()
    if _timing_said(r, False):
        f = d.get("prefix-cache-absent")
        assert f is not None and any("--enable-prefix-caching" in a.change for a in f.advice)


def test_prefix_cache_cannot_tell_when_the_system_prompt_costs_nothing():
    b = Behaviour(prefix_cache=False, **{**FAST, "prefill_s_per_token": 1e-7})
    r = run_on(b, lambda ctx: prefix_cache.run(ctx, 6, system_tokens=512))
    # within the noise, or (a cold request that hiccuped under load, CI stop 39) "cannot tell" with the spread
    assert r.cache_detected is None and ("noise" in r.reason or r.reason.startswith("cannot tell")), r.reason
    d = diagnose({"prefix-cache": r})
    assert "prefix-cache" in d.undecided_ids() and not d.ids()


def test_prefix_cache_llamacpp_flavour_reads_cache_n():
    b = Behaviour(flavour="llamacpp", prefix_cache=True, slots=2, **FAST)
    r = run_on(b, lambda ctx: prefix_cache.run(ctx, 8, system_tokens=1024))
    _timing_said(r, True)
    assert r.server.cached_tokens_repeat is not None and r.server.cached_tokens_repeat >= 900
    assert r.server.server_prefill_repeat_s < r.server.server_prefill_cold_s


# -- prompt scaling ------------------------------------------------------------------------------------
def test_prompt_scaling_linear_and_quadratic():
    # two repetitions: one request per length has no interval, and no scaling is claimed without one (issue 29)
    lin = run_on(Behaviour(**FAST), lambda ctx: prompt_scaling.run(ctx, 8, n_max=2048, reps=2, steps=5))
    assert lin.ttft_grows is not False, lin.notes  # never the wrong way
    if lin.ttft_grows is None:  # a loaded host (97 % busy, beside the other tests) put one length's repeats
        # more than 2x apart: the claim is withheld, and the note says why
        assert any("unstable" in n for n in lin.notes), lin.notes
    else:
        assert lin.decode_flat is True
        assert lin.prefill_tok_s == pytest.approx(1e4, rel=0.35)
        assert lin.quadratic_share < 0.3
    quad = run_on(Behaviour(**{**FAST, "prefill_s_per_token": 2e-5, "prefill_s_per_token2": 1e-7}),
                  lambda ctx: prompt_scaling.run(ctx, 8, n_max=2048, reps=1, steps=5))
    assert quad.quadratic_share > 0.6


# -- context fill ---------------------------------------------------------------------------------------
def test_decode_slowing_with_context_is_seen_and_flat_is_not():
    slow = run_on(Behaviour(**{**FAST, "decode_s_per_ctx_token": 4e-6}),
                  lambda ctx: context_fill.run(ctx, 10, l_max=4000, steps=4, reps=1, output_tokens=24,
                                               weight_bytes=250e6, kv_bytes_per_token=3072))
    assert slow.slows is True and slow.slowdown_pct > 40
    assert slow.per_token_s_per_ctx_token == pytest.approx(4e-6, rel=0.5)
    assert slow.measured_over_predicted > 2  # the fake's KV cost is far above the bytes model
    d = diagnose({"context-fill": slow})
    assert d.get("long-context-decode-penalty").severity == "problem"
    flat = run_on(Behaviour(**FAST), lambda ctx: context_fill.run(ctx, 10, l_max=4000, steps=4, reps=1,
                                                                   output_tokens=24))
    assert flat.slows is not True
    assert "long-context-decode-penalty" not in diagnose({"context-fill": flat}).ids()


# -- one slot: queueing, no batching gain ------------------------------------------------------------------
def test_one_slot_queues_and_batching_gains_nothing():
    """A one-slot server: the queue is found, batching is never said to pay, and 'no gain' is claimed
    unless the levels' intervals (the requests' step times) overlap on a loaded box — then 'cannot tell'
    with both spreads, never a wrong claim."""
    b = Behaviour(slots=1, **FAST)

    async def body(ctx: RunContext) -> Any:
        bt = await batching.run(ctx, 12, max_concurrency=4, prompt_tokens=32, output_tokens=24, per_worker=2)
        q = await queue.run(ctx, 8, concurrency=4, prompt_tokens=32, output_tokens=16, per_worker=2, interval_s=0.05)
        return bt, q

    bt, q = run_on(b, body)
    assert bt.knee_concurrency == 1 and bt.knee_reached is True
    assert q.queueing is True and q.waiting_max >= 1
    d = diagnose({"batching": bt, "queue": q}, engine="vllm")
    ids = set(d.ids())
    assert "ttft-queueing" in ids
    assert not ids & {"batching-scales", "batching-knee"}
    undecided = [u.reason for u in d.undecided if u.id == "batching"]
    assert "batching-no-gain" in ids or any("cannot tell" in u for u in undecided), (ids, undecided)


def test_many_slots_batching_scales_and_no_queue():
    b = Behaviour(slots=8, **FAST)

    async def body(ctx: RunContext) -> Any:
        bt = await batching.run(ctx, 12, max_concurrency=4, prompt_tokens=32, output_tokens=24, per_worker=1)
        q = await queue.run(ctx, 6, concurrency=4, prompt_tokens=32, output_tokens=16, per_worker=1, interval_s=0.05)
        return bt, q

    bt, q = run_on(b, body)
    assert bt.levels[-1].output_tok_s > 2.5 * bt.levels[0].output_tok_s
    assert bt.knee_concurrency != 1
    assert q.queueing is False and q.waiting_max == 0
    d = diagnose({"batching": bt, "queue": q})
    assert "batching-no-gain" not in d.ids() and "ttft-queueing" not in d.ids()


# -- prefill interference ----------------------------------------------------------------------------------
def test_unchunked_prefill_stalls_running_streams():
    b = Behaviour(slots=4, **{**FAST, "prefill_s_per_token": 2e-4})
    r = run_on(b, lambda ctx: prefill_interference.run(ctx, 10, streams=3, inject_tokens=2000))
    assert r.interference is True, r.reason
    assert r.stall_s > 0.25 and r.chunked_prefill_likely is False
    assert "prefill-interference" in diagnose({"prefill-interference": r}).ids()


def test_chunked_prefill_does_not_stall():
    b = Behaviour(slots=4, chunked_prefill_tokens=8, **{**FAST, "prefill_s_per_token": 1e-4})
    r = run_on(b, lambda ctx: prefill_interference.run(ctx, 10, streams=3, inject_tokens=1500))
    assert r.interference is not True, r.reason
    if r.interference is False:  # "no stall" claimed: the spike it rests on is small (a loaded host's client
        # stall read 13x once, and the experiment rightly claimed nothing then)
        assert r.spike_x < 3, r.reason
    assert "prefill-interference" not in diagnose({"prefill-interference": r}).ids()


def test_one_slot_server_skips_interference():
    b = Behaviour(flavour="llamacpp", slots=1, **FAST)
    r = run_on(b, lambda ctx: prefill_interference.run(ctx, 5))
    assert r.interference is None and r.info.skipped


# -- the command ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_explain_json_against_a_fake(tmp_path):
    b = Behaviour(slots=2, prefix_cache=False, **FAST)
    env = {**os.environ, "PHASESCOPE_STORE": str(tmp_path / "runs.db")}
    with running_behaviour_fake(b) as fake:
        out = subprocess.run([sys.executable, "-m", "phasescope", "explain", fake.url, "--budget", "25s", "--json"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert set(doc["experiments"]) == {"prompt-scaling", "prefix-cache", "context-fill", "batching",
                                       "prefill-interference", "queue", "conversation"}
    cv = doc["experiments"]["conversation"]  # issue 17: the history resent each turn, prefix cache off here
    assert cv["history_cached"] is not True and len(cv["turns"]) >= 3
    for f in doc["findings"]:
        assert set(f) >= {"id", "cause", "evidence", "advice"} and f["evidence"]
    ps = doc["experiments"]["prompt-scaling"]
    assert {"prefill_tok_s", "decode_change_pct", "fit"} <= set(ps)
    assert set(ps["fit"]) >= {"a_s", "b_s_per_token", "c_s_per_token2"}
    pc = doc["experiments"]["prefix-cache"]
    assert {"cache_detected", "ttft_first_s", "ttft_repeat_s"} <= set(pc)
    assert all({"context_tokens", "decode_tok_s"} <= set(p) for p in doc["experiments"]["context-fill"]["points"])
    for lvl in doc["experiments"]["batching"]["levels"]:
        assert {"concurrency", "output_tok_s", "itl_p50_s", "itl_p99_s", "ttft_p99_s"} <= set(lvl)
    assert doc["run_id"] and os.path.exists(doc["records_path"])
    with open(doc["records_path"]) as fh:
        assert sum(1 for _ in fh) > 20  # every raw record saved
    # issue 30 item 5, the contract: the whole run within +10 % of --budget (requests still running at the
    # hard deadline are stopped, so a loaded machine makes the run leaner, not longer)
    assert doc["duration_s"] <= 1.1 * 25, doc["duration_s"]


def test_experiment_json_keys_and_bad_name():
    with running_behaviour_fake(Behaviour(**FAST)) as fake:
        out = subprocess.run([sys.executable, "-m", "phasescope", "experiment", "prefix-cache", fake.url,
                              "--budget", "10s", "--json", "--no-save"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["cache_detected"] is not False, doc["reason"]  # never wrong; "cannot tell" on a loaded box
    if doc["cache_detected"] is True:
        assert doc["ttft_repeat_s"] < doc["ttft_first_s"]
    assert {"cache_detected", "ttft_first_s", "ttft_repeat_s", "reason"} <= set(doc) and "findings" in doc
    bad = subprocess.run([sys.executable, "-m", "phasescope", "experiment", "warp-drive", "http://127.0.0.1:9"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown experiment" in bad.stderr and "Traceback" not in bad.stderr


# -- host noise must not become a finding ------------------------------------------------------------------
def _stall_loop_after_injection(delay_s: float, block_s: float):
    """A body that runs prefill-interference and blocks the whole event loop (client and in-process
    fake alike, as a GC pause or a descheduled process does) ``delay_s`` after the injection is sent."""
    import time

    async def body(ctx: RunContext) -> Any:
        send = ctx.send

        async def send_and_stall(req, experiment, **tags):
            if tags.get("phase") == "inject":
                asyncio.get_running_loop().call_later(delay_s, time.sleep, block_s)
            return await send(req, experiment, **tags)

        ctx.send = send_and_stall  # type: ignore[method-assign]
        return await prefill_interference.run(ctx, 10, streams=3, inject_tokens=1500)

    return body


def test_a_client_stall_during_a_chunked_prefill_is_not_a_spike():
    b = Behaviour(slots=4, chunked_prefill_tokens=8, **{**FAST, "prefill_s_per_token": 1e-4})
    r = run_on(b, _stall_loop_after_injection(0.05, 0.08))
    assert r.client_stall_s is not None and r.client_stall_s >= 0.06  # the client saw its own 80 ms stall
    assert r.interference is not True, r.reason
    assert r.spike_x < 3, r.reason  # the 80 ms the client did not read is not the server's gap
    assert any("client" in n for n in r.notes), r.notes


def test_a_client_stall_does_not_hide_a_real_stall():
    b = Behaviour(slots=4, **{**FAST, "prefill_s_per_token": 2e-4})
    r = run_on(b, _stall_loop_after_injection(0.05, 0.08))
    assert r.interference is True, r.reason
    assert r.chunked_prefill_likely is False and r.stall_s > 0.2


def test_one_request_slowed_by_the_host_is_no_context_slowdown():
    # flat decode, but the one request at the longest context decodes 1.6x slower, as when a burst of
    # host load lands on it: one repetition alone would call that a 37 % slowdown
    b = Behaviour(**{**FAST, "slow_first_prompt_over": 3000, "slow_factor": 1.6})
    flat = run_on(b, lambda ctx: context_fill.run(ctx, 10, l_max=4000, steps=4, reps=1, output_tokens=24))
    assert flat.slows is not True, flat.reason
    # the end point is measured again before a verdict where the 10 s budget allows (beside seven other test
    # workers it did not, once); with one sample it makes no slowdown claim either way (asserted above)
    assert "long-context-decode-penalty" not in diagnose({"context-fill": flat}).ids()
