"""How llama-server really schedules a prompt on the embedded SWA model (issue #13, plan validation).

Recorded on the embedded engine (benchmarks/plan_validation.py, Poisson 0.5/s, 256-token prompts, quiet
machine, 1 Dec 2026): request A arrived while one other sequence decoded; request B arrived 60 ms after A.
A's server-side prompt_ms read 645 ms (≈ 2× a lone 256-token prefill of ~300 ms), B's first token came
63 ms after A's, and the decoding neighbour's token gaps read 304 ms, 343 ms, 63 ms. Two llama.cpp
mechanisms make that shape, both in the vendored server/src:

* ``server-context.cpp`` stops a prompt's batch 4 (and 4 + n_ubatch) tokens before its end to save a
  context checkpoint on SWA models, so the last 4 tokens — and the first token — come one step later, in a
  step that already carries B's first chunk;
* with one KV stream per slot, ``split_equal`` runs a step that mixes decodes and a prompt chunk as a
  decode pass of one row per sequence plus a prefill pass.

The old simulator gave A its first token at the end of its own 256-token step (TTFT ≈ a lone prefill)
and priced a mixed step as one merged roofline step."""

from __future__ import annotations

import numpy as np
import pytest

from phasescope.planning.build import cost_from_theory
from phasescope.planning.costmodel import chunk_pairs
from phasescope.planning.sim import SchedulerConfig, Simulator
from phasescope.planning.workload import Workload, RequestPlan
from phasescope.theory.devices import custom_device

DEV = custom_device(40.0, name="x", dense_bf16_tflops=0.665)
#: roughly the calibrated embedded engine: a lone 256-token prefill ≈ 0.3 s, a decode step ≈ 14 ms
COST = cost_from_theory("gemma-3-270m", DEV, kv_pool_tokens=16384).with_(
    bw_eff=0.5, flops_eff=0.25, step_overhead_s=0.005)
SCHED = dict(policy="llamacpp", max_num_seqs=4, max_num_batched_tokens=2048)


def _plan(arrivals: list[float], inp: int, out: int) -> RequestPlan:
    n = len(arrivals)
    return RequestPlan(arrival_s=np.array(arrivals), input_tokens=np.full(n, inp), output_tokens=np.full(n, out),
                       prefix_tokens=np.zeros(n, dtype=np.int64))


def _run(arrivals: list[float], inp: int = 256, out: int = 64, cost=COST, **kw):
    w = Workload(rate=1.0, num_requests=len(arrivals), input_len=inp, output_len=out)
    return Simulator(cost, w, SchedulerConfig(**{**SCHED, **kw}), requests=_plan(arrivals, inp, out)).run()


def test_breaks_follow_llama_cpp_checkpoint_offsets() -> None:
    from phasescope.planning.costmodel import prefill_chunks

    sched = SchedulerConfig(**SCHED)
    assert sched.tail_breaks(COST) == (516, 4)
    assert prefill_chunks(256, None, 0, (516, 4)) == [(0, 252), (252, 4)]
    assert prefill_chunks(1000, None, 0, (516, 4)) == [(0, 484), (484, 512), (996, 4)]
    assert prefill_chunks(4, None, 0, (516, 4)) == [(0, 4)]
    assert prefill_chunks(5, None, 0, (516, 4)) == [(0, 1), (1, 4)]
    assert prefill_chunks(300, 128, 0, (4,)) == [(0, 128), (128, 128), (256, 40), (296, 4)]
    # vLLM, and llama.cpp on a model without a sliding window, do not break
    assert SchedulerConfig(policy="vllm").tail_breaks(COST) == ()
    assert SchedulerConfig(**SCHED).tail_breaks(COST.with_(kv_window_tokens=None)) == ()
    assert SchedulerConfig(**SCHED, prompt_tail_breaks=()).tail_breaks(COST) == ()


def test_a_lone_prompt_runs_in_two_steps_and_the_closed_form_agrees() -> None:
    res = _run([0.0], out=4)
    w = res.workers[0]
    assert w.step_prefill[:2] == [252, 4]
    br = SchedulerConfig(**SCHED).tail_breaks(COST)
    assert res.ttft_s[0] == pytest.approx(COST.prefill_time_s(256, breaks=br), rel=1e-9)
    assert COST.prefill_time_s(256, breaks=br) > COST.prefill_time_s(256)


def test_the_first_token_waits_for_the_next_prompts_chunk_as_recorded() -> None:
    # A alone, B 60 ms later (during A's first chunk): the recorded shape — A's TTFT ≈ 2 prefills, B's first
    # token one short step after A's
    res = _run([0.0, 0.06])
    lone = COST.prefill_time_s(256)
    ttft_a, ttft_b = res.ttft_s
    first_gap = (0.06 + ttft_b) - ttft_a
    assert ttft_a > 1.7 * lone, (ttft_a, lone)
    assert 0 < first_gap < 0.2 * lone, first_gap
    # without the breaks (vLLM policy) A's first token comes at the end of its own prefill, as before
    res_v = _run([0.0, 0.06], policy="vllm")
    assert res_v.ttft_s[0] == pytest.approx(lone, rel=1e-9)


def test_mixed_step_is_a_decode_pass_plus_a_prefill_pass_and_never_cheaper() -> None:
    split = COST.with_(split_mixed_steps=True)
    n_dec, ctx = 3, 3 * 300.0
    got = split.step_time_s(n_dec, ctx, 252, chunk_pairs(0, 252), 252, 1, n_dec)
    want = split.decode_step_s(4, 300.0) + split.step_time_s(0, 0.0, 251, chunk_pairs(0, 252), 252, 1, 0)
    assert got == pytest.approx(want, rel=1e-12)
    # a split step is never faster than the merged roofline step (physics stays a lower bound)
    for nd in (1, 2, 4, 16):
        for c in (1, 4, 64, 512):
            for sc in (None, [[1, 1.0], [2, 2.0], [4, 2.3]]):
                a = COST.with_(decode_batch_scale=sc)
                b = a.with_(split_mixed_steps=True)
                args = (nd, nd * 500.0, c, chunk_pairs(100, c), 100 + c, 1, nd + 1)
                assert b.step_time_s(*args) >= a.step_time_s(*args) * (1 - 1e-12)
    # pure decode and pure prefill steps are unchanged
    assert split.decode_step_s(3, 300.0) == COST.decode_step_s(3, 300.0)
    assert split.prefill_time_s(256) == COST.prefill_time_s(256)


def test_a_prompt_next_to_decodes_stretches_their_gap_as_recorded() -> None:
    # recorded: one sequence decoding, a 256-token prompt arrives: the decoder's gaps read ~1 chunk + 1 decode
    # pass (304 ms against a ~290 ms chunk alone), then the 4-token tail step with a decode pass
    cost = COST.with_(split_mixed_steps=True)
    res = _run([0.0, 1.0], out=64, cost=cost)
    w = res.workers[0]
    durs = dict(zip(np.round(w.step_end, 6), w.step_dur))
    t_a = res.token_times(0)
    gaps = np.diff([t for t in t_a if 1.0 <= t <= 1.0 + 2.0])
    chunk = cost.prefill_time_s(252)
    big = gaps[gaps > 0.5 * chunk]
    assert len(big) >= 1 and big[0] == pytest.approx(chunk + cost.decode_step_s(2, 300.0), rel=0.05), (big, chunk)
    assert durs  # the step history is recorded


def test_plan_reports_the_lone_prefill_the_simulator_runs() -> None:
    # `plan`'s "one request alone → prefill" (cost_model.prefill_alone_ms) is what a lone request's TTFT is
    # in the simulation: with llama.cpp's checkpoint break that is two steps, more than one merged step
    from phasescope.planning.planner import cost_facts

    w = Workload(concurrency=1, num_requests=1, input_len=256, output_len=4)
    facts = cost_facts(COST, w, SchedulerConfig(**SCHED))
    lone = _run([0.0], out=4)
    assert facts["prefill_alone_ms"] == pytest.approx(lone.ttft_s[0] * 1e3, rel=1e-9)
    assert facts["prefill_alone_ms"] > COST.prefill_time_s(256) * 1e3


def test_plan_json_with_the_llamacpp_policy_runs_split_mixed_steps(capsys, monkeypatch, tmp_path) -> None:
    # llama-server --parallel N: one KV stream per slot, so `plan --policy llamacpp` prices mixed steps as two
    # passes and says so in cost_model.params; a lone request's TTFT is the (broken) two-step prefill
    import json

    from cli_helpers import run

    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    code, out, err = run(["plan", "-m", "gemma-3-270m", "-d", "cpu-ddr5-5600-2ch", "--policy", "llamacpp",
                          "--rate", "2", "--input-len", "256", "--output-len", "16", "-n", "12", "--json", "--no-save"],
                         capsys, monkeypatch)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cost_model"]["params"]["split_mixed_steps"] is True
    code, out, err = run(["plan", "-m", "gemma-3-270m", "-d", "cpu-ddr5-5600-2ch", "--rate", "2", "--input-len", "256",
                          "--output-len", "16", "-n", "12", "--json", "--no-save"], capsys, monkeypatch)
    assert code == 0, err
    assert json.loads(out)["cost_model"]["params"]["split_mixed_steps"] is False
