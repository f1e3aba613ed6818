"""Each client against the faithful fakes (real aiohttp servers on 127.0.0.1): formats, counts,
event kinds, and causality against the fake's ground-truth send times (same monotonic clock)."""

from __future__ import annotations

import asyncio

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis.base import GenRequest, Target
from phasescope.target import open_target
from phasescope.measure import derive as D
from phasescope.prompting import PromptBuilder
from phasescope.testing import FakeServer

CASES = [
    ("vllm", "openai"), ("vllm", "chat"), ("sglang", "openai"), ("sglang", "chat"),
    ("llamacpp", "openai"), ("llamacpp", "chat"), ("llamacpp", "llamacpp"), ("ollama", "ollama"),
]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("flavor,api", CASES)
@pytest.mark.parametrize("tpe", [1, 3])
def test_client_stream_matches_ground_truth(flavor, api, tpe):
    async def go():
        async with FakeServer(flavor=flavor, ttft_s=0.01, itl_s=0.002, tokens_per_event=tpe) as srv:
            t = Target(srv.url, api=api, model="fake-model", engine=flavor)
            async with new_session() as s:
                r = await get_client(api).send(s, t, GenRequest(prompt="one two three four", max_tokens=10))
            return r, srv.log
    r, log = run(go())
    assert r.ok, r.error_message
    gt = next(g for g in log if g.id == r.id)  # X-Request-Id carries the record id
    assert r.output_tokens == 10 == gt.output_tokens
    assert r.prompt_tokens == gt.prompt_tokens
    tok = r.token_events()
    assert len(tok) == len(gt.t_events_ns)  # one event per server event: role/usage/finish are not tokens
    # causality on one clock: every token event is seen after the server wrote it, in order
    for ev, sent in zip(tok, gt.t_events_ns):
        assert ev.t_ns >= sent
    assert r.t_start_ns <= gt.t_recv_ns and r.t_conn_ready_ns is not None and r.t_start_ns <= r.t_conn_ready_ns <= gt.t_recv_ns
    assert r.t_headers_ns is not None and r.t_done_ns >= tok[-1].t_ns
    if api == "chat":
        assert r.events[0].kind == "role"
    if flavor in ("llamacpp",) and api == "llamacpp":
        assert [e.n_tokens for e in tok] == gt.tokens_per_event  # native stream gives token ids per event
    if flavor in ("llamacpp", "ollama") and api != "chat":
        assert r.server is not None and r.server["predicted_n"] == 10
    assert D.decode_tok_s(r) is not None and len(D.itl_s(r)) == 9


@pytest.mark.parametrize("flavor,api", [("vllm", "openai"), ("vllm", "chat"), ("llamacpp", "llamacpp"), ("ollama", "ollama")])
def test_non_stream(flavor, api):
    async def go():
        async with FakeServer(flavor=flavor, ttft_s=0.005, itl_s=0.001) as srv:
            t = Target(srv.url, api=api, model="fake-model", engine=flavor)
            async with new_session() as s:
                return await get_client(api).send(s, t, GenRequest(prompt="a b c", max_tokens=5, stream=False))
    r = run(go())
    assert r.ok and r.events == [] and r.output_tokens == 5 and r.t_done_ns > r.t_start_ns
    assert D.ttft_s(r) is None and D.e2e_s(r) > 0


def test_reasoning_tokens_and_continuous_usage():
    async def go():
        async with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=0.001, reasoning_tokens=4, tokens_per_event=2) as srv:
            t = Target(srv.url, api="chat", model="fake-model", engine="vllm")
            async with new_session() as s:
                req = GenRequest(prompt="q", max_tokens=9, extra_body={"stream_options": {"include_usage": True, "continuous_usage_stats": True}})
                return await get_client("chat").send(s, t, req), srv.log[0]
    r, gt = run(go())
    assert r.ok
    assert [e.kind for e in r.token_events()][:3] == ["reasoning", "reasoning", "reasoning"]
    assert [e.n_tokens for e in r.token_events()] == gt.tokens_per_event
    assert r.reasoning_tokens == 4


def test_eos_without_ignore_eos_is_reported_as_stopped_early():
    async def go():
        async with FakeServer(flavor="ollama", ttft_s=0.005, itl_s=0.001, eos_after=3) as srv:
            t = Target(srv.url, api="ollama", model="fake-model", engine="ollama")
            async with new_session() as s:
                return await get_client("ollama").send(s, t, GenRequest(prompt="a b", max_tokens=8))
    r = run(go())
    assert r.ok and r.output_tokens == 3 and r.stopped_early is True and r.finish_reason == "stop"


def test_ollama_cached_prompt_counts_full_prompt_but_no_prefill_rate_claimed():
    async def go():
        async with FakeServer(flavor="ollama", ttft_s=0.005, itl_s=0.001, prefill_tok_s=50_000) as srv:
            t = Target(srv.url, api="ollama", model="fake-model", engine="ollama")
            async with new_session() as s:
                a = await get_client("ollama").send(s, t, GenRequest(prompt="same words " * 50, max_tokens=3, tags={"fresh_prompt": True}))
                b = await get_client("ollama").send(s, t, GenRequest(prompt="same words " * 50, max_tokens=3))
                return a, b, srv.log
    a, b, log = run(go())
    assert log[1].cached_tokens > 0
    assert a.prompt_tokens == b.prompt_tokens == log[1].prompt_tokens  # since 0.30.1: cached included
    assert D.server_prefill_tok_s(a) is not None
    assert D.server_prefill_tok_s(b) is None  # evaluated count unknown → not overstated


@pytest.mark.parametrize("flavor,api", [("vllm", "openai"), ("vllm", "chat"), ("llamacpp", "llamacpp"), ("ollama", "ollama")])
def test_prompts_of_exact_length(flavor, api):
    async def go():
        async with FakeServer(flavor=flavor, ttft_s=0.001, itl_s=0.001) as srv:
            async with open_target(srv.url, api=api) as t:
                async with new_session() as s:
                    pb = PromptBuilder(s, t, seed=1)
                    out = []
                    for n in (37, 300):
                        p = await pb.build(n)
                        r = await get_client(t.api).send(s, t, p.request(2))
                        out.append((n, p, r))
                    return out, srv.log
    out, log = run(go())
    nonces = set()
    for n, p, r in out:
        assert r.ok
        nonces.add(p.nonce)
        assert p.text.startswith(p.nonce)
        if api == "chat":
            assert p.source == "tokenizer" and p.n_tokens == n  # user text exact; the template adds its own
            assert r.prompt_tokens == n + 3
        else:
            assert r.prompt_tokens == n, (p.source, r.prompt_tokens)
        if flavor == "ollama":
            assert p.source == "calibrated"
            # calibration requests used throw-away nonces: the measured prompt is not a cache hit
            measured = next(g for g in log if g.id == r.id)
            assert measured.cached_tokens <= 1
        elif api != "chat":
            assert p.source == "tokenizer" and p.token_ids is not None and len(p.token_ids) == n
    assert len(nonces) == 2


def test_detection_of_each_flavor_and_model_default():
    async def go(flavor):
        async with FakeServer(flavor=flavor, model=f"m-{flavor}") as srv:
            async with open_target(srv.url + "/v1") as t:
                return t
    for flavor, api in [("vllm", "openai"), ("sglang", "openai"), ("llamacpp", "llamacpp"), ("ollama", "ollama")]:
        t = run(go(flavor))
        assert (t.engine, t.api, t.model) == (flavor, api, f"m-{flavor}")


def test_open_target_sync_from_thread_server():
    with FakeServer(flavor="vllm").running() as srv:
        with open_target(srv.url, api="chat") as t:
            assert t.api == "chat" and t.engine == "vllm" and t.engine_version == "0.33.0"
