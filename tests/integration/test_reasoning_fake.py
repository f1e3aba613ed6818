"""Reasoning models on the project's fake: reasoning deltas (``delta.reasoning`` / ``reasoning_content``,
Anthropic's ``thinking_delta``, the Responses API's ``response.reasoning_text.delta``)
or ``<think>…</think>`` inside the content, then answer deltas, on a designed schedule. Every client
event is matched to the event the server logged sending (ground truth keyed by the record id): the
event the client calls the first answer is the one the server sent as the first answer token, never
earlier, and the reasoning/answer split is the server's. No timing bound is asserted (a loaded box may
delay any delivery); the fake's absolute deadlines give lower bounds that no load can break."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis.base import GenRequest, Target
from phasescope.measure import derive as D
from phasescope.measure.records import read_records
from phasescope.testing.fakeserver import FakeServer

TTFT_S, ITL_S, R = 0.01, 0.002, 5


def _check_against_truth(r, gt, causal: bool = True) -> None:  # type: ignore[no-untyped-def]
    """One record against its ground truth: event by event kinds, the first answer event, the split.
    ``causal``: client and server share one event loop, so the server's stamp (taken after its write
    returned) precedes the client's read; a server on a thread of its own may stamp after the client read."""
    tok = r.token_events()
    assert len(tok) == len(gt.t_events_ns)
    start = 0
    for ev, sent, k in zip(tok, gt.t_events_ns, gt.tokens_per_event):
        assert ev.kind == ("reasoning" if start < gt.reasoning_tokens else "content"), (start, ev)
        assert ev.t_ns >= sent or not causal  # causality on one clock
        start += k
    first_answer = D.first_answer_ns(r)
    assert first_answer is not None and gt.t_first_answer_ns is not None
    # the client's first answer event is the server's first answer event (its index), seen after it was sent
    assert [e.t_ns for e in tok].index(first_answer) == gt.t_events_ns.index(gt.t_first_answer_ns)
    assert first_answer >= gt.t_first_answer_ns or not causal
    # the designed schedule: the first answer token cannot leave before ttft + R × itl after the request came in
    assert gt.t_first_answer_ns - gt.t_recv_ns >= (TTFT_S + (gt.reasoning_tokens - 1) * ITL_S) * 1e9
    assert D.ttfo_s(r) > D.ttft_s(r)
    assert D.reasoning_tokens(r) == gt.reasoning_tokens
    assert D.answer_tokens(r) == gt.output_tokens - gt.reasoning_tokens


@pytest.mark.parametrize("flavor,fmt,tpe", [("vllm", "field", 1), ("vllm", "field", 3), ("sglang", "field", 1),
                                            ("llamacpp", "field", 1), ("vllm", "think", 1), ("llamacpp", "think", 1),
                                            ("vllm", "think", 3)])
def test_chat_stream_reasoning_matches_ground_truth(flavor: str, fmt: str, tpe: int) -> None:
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(flavor=flavor, ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=R, reasoning_format=fmt,
                              tokens_per_event=tpe) as srv:
            t = Target(srv.url, api="chat", model="fake-model", engine=flavor)
            # per-event counts (continuous usage) where events carry several tokens and nothing counts reasoning
            extra = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}} if tpe > 1 else {}
            async with new_session() as s:
                r = await get_client("chat").send(s, t, GenRequest(prompt="one two three", max_tokens=12,
                                                                   extra_body=extra))
            return r, list(srv.log)

    r, log = asyncio.run(go())
    assert r.ok, r.error_message
    gt = next(g for g in log if g.id == r.id)
    assert gt.reasoning_tokens == R and r.output_tokens == 12
    _check_against_truth(r, gt)


@pytest.mark.parametrize("flavor,api,fmt,tpe", [
    ("anthropic", "anthropic", "field", 1), ("llamacpp", "anthropic", "field", 1), ("anthropic", "anthropic", "think", 1),
    ("responses", "responses", "field", 1), ("vllm", "responses", "field", 3), ("llamacpp", "responses", "field", 1),
    ("responses", "responses", "think", 1)])
def test_messages_and_responses_reasoning_matches_ground_truth(flavor: str, api: str, fmt: str, tpe: int) -> None:
    """Anthropic's thinking blocks (thinking_delta) and the Responses API's reasoning items
    (response.reasoning_text.delta), or <think> inside their text: the same truth as chat's."""
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(flavor=flavor, ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=R, reasoning_format=fmt,
                              tokens_per_event=tpe) as srv:
            t = Target(srv.url, api=api, model="fake-model", engine=flavor)
            async with new_session() as s:
                r = await get_client(api).send(s, t, GenRequest(prompt="one two three", max_tokens=12))
            return r, list(srv.log)

    r, log = asyncio.run(go())
    assert r.ok, r.error_message
    gt = next(g for g in log if g.id == r.id)
    assert gt.reasoning_tokens == R and r.output_tokens == 12
    _check_against_truth(r, gt)


def test_think_in_completions_text_matches_ground_truth() -> None:
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(flavor="vllm", ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=R,
                              reasoning_format="think") as srv:
            t = Target(srv.url, api="openai", model="fake-model", engine="vllm")
            async with new_session() as s:
                r = await get_client("openai").send(s, t, GenRequest(prompt="one two three", max_tokens=12))
            return r, list(srv.log)

    r, log = asyncio.run(go())
    _check_against_truth(r, next(g for g in log if g.id == r.id))


def test_no_reasoning_ttfo_is_ttft_on_the_fake() -> None:
    async def go():  # type: ignore[no-untyped-def]
        async with FakeServer(flavor="vllm", ttft_s=TTFT_S, itl_s=ITL_S) as srv:
            t = Target(srv.url, api="chat", model="fake-model", engine="vllm")
            async with new_session() as s:
                return await get_client("chat").send(s, t, GenRequest(prompt="one two", max_tokens=6))

    r = asyncio.run(go())
    assert D.ttfo_s(r) == D.ttft_s(r) and D.reasoning_tokens(r) == 0 and D.answer_tokens(r) == 6


def _truth_ms(records, log, which: str) -> float:  # type: ignore[no-untyped-def]
    by_id = {g.id: g for g in log}
    return 1000 * statistics.median(
        (getattr(by_id[r.id], which) - r.t_start_ns) / 1e9 for r in records if r.id in by_id)


@pytest.mark.parametrize("flavor,api,fmt", [("vllm", "chat", "field"), ("vllm", "chat", "think"),
                                             ("anthropic", "anthropic", "field"), ("responses", "responses", "field")])
def test_probe_reports_ttfo_against_the_fakes_truth(tmp_path: Path, flavor: str, api: str, fmt: str) -> None:
    from phasescope.probing import probe

    with FakeServer(flavor=flavor, ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=R, reasoning_format=fmt).running() as srv:
        res = probe(srv.url, api=api, sizes=[20], max_tokens=12, repeat=4, warmup=False, save=False,
                    out_dir=tmp_path / "out")
        log = list(srv.log)
    recs = [r for r in read_records(res["records_path"]) if r.ok]
    size = res["sizes"][0]
    assert size["ttfo_s"] == pytest.approx(statistics.median(D.ttfo_s(r) for r in recs))
    assert size["ttfo_s_ci"] is not None and size["ttfo_s_ci"][0] <= size["ttfo_s"] <= size["ttfo_s_ci"][1]
    assert size["ttfo_s"] > size["ttft_s"]
    assert (size["reasoning_tokens"], size["answer_tokens"]) == (R, 12 - R)
    assert size["reasoning_tok_s"] is not None and size["answer_tok_s"] is not None
    by_id = {g.id: g for g in log}
    for r in recs:
        _check_against_truth(r, by_id[r.id], causal=False)
    # the numbers the done-when names (printed with -s; a loaded box delays deliveries, so not asserted)
    print(f"probe {api} {fmt}: TTFT {size['ttft_s'] * 1000:.3f} ms (truth {_truth_ms(recs, log, 't_first_token_ns'):.3f}), "
          f"TTFO {size['ttfo_s'] * 1000:.3f} ms (truth {_truth_ms(recs, log, 't_first_answer_ns'):.3f})")


@pytest.mark.parametrize("flavor,api,fmt", [("sglang", "chat", "field"), ("sglang", "chat", "think"),
                                             ("llamacpp", "anthropic", "field"), ("sglang", "responses", "field")])
def test_bench_reports_ttfo_against_the_fakes_truth(tmp_path: Path, flavor: str, api: str, fmt: str) -> None:
    from phasescope.load.bench import BenchConfig, run_bench

    # TTFO ≥ ttft + (R − 1) × itl = 18 ms by the fake's own schedule: a 5 ms TTFO SLO can never be met
    with FakeServer(flavor=flavor, ttft_s=TTFT_S, itl_s=ITL_S, reasoning_tokens=R, reasoning_format=fmt).running() as srv:
        cfg = BenchConfig(url=srv.url, api=api, num_prompts=8, max_concurrency=2, input_len=8, output_len=12,
                          goodput={"ttfo": 5.0}, store=False, out_dir=str(tmp_path), server_metrics=False, warmup=0)
        r = run_bench(cfg)
        log = list(srv.log)
    s = r.summary
    recs = [x for x in r.records if x.ok]
    assert s["completed"] == 8
    assert s["median_ttfo_ms"] == pytest.approx(1000 * statistics.median(D.ttfo_s(x) for x in recs))
    for k in ("mean", "median", "p99"):
        assert s[f"{k}_ttfo_ms"] > s[f"{k}_ttft_ms"]
    assert s["reasoning_tokens"] == 8 * R and s["answer_tokens"] == 8 * (12 - R)
    assert s["goodput_slo_ms"] == {"ttfo": 5.0} and s["goodput_completed"] == 0
    by_id = {g.id: g for g in log}
    for x in recs:
        _check_against_truth(x, by_id[x.id], causal=False)
    print(f"bench {api} {fmt}: median TTFT {s['median_ttft_ms']:.3f} ms (truth {_truth_ms(recs, log, 't_first_token_ns'):.3f}), "
          f"median TTFO {s['median_ttfo_ms']:.3f} ms (truth {_truth_ms(recs, log, 't_first_answer_ns'):.3f})")
