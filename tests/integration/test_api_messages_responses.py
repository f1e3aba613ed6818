"""``--api anthropic`` (/v1/messages) and ``--api responses`` (/v1/responses) against the fakes, in
each source's shape (Anthropic, OpenAI/vLLM/SGLang, llama-server): counts from the server's usage,
token events against the fake's ground-truth send times, the edge cases of each stream (ping
events, usage only at the end, errors mid-stream), fault mapping, detection and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis._fast import available as raw_path_available
from phasescope.apis.base import GenRequest, Target, Timeouts
from phasescope.measure import derive as D
from phasescope.target import open_target
from phasescope.testing import FakeServer

#: (fake flavor, api): each server shape that serves the endpoint
CASES = [("anthropic", "anthropic"), ("llamacpp", "anthropic"), ("vllm", "anthropic"),
         ("responses", "responses"), ("llamacpp", "responses"), ("vllm", "responses"), ("sglang", "responses")]
PATHS = pytest.mark.parametrize("fast", [False, pytest.param(True, marks=pytest.mark.skipif(
    not raw_path_available(), reason="httptools not installed"))], ids=["aiohttp", "raw"])


def run(coro):
    return asyncio.run(coro)


async def one(flavor: str, api: str, *, req=None, key=None, timeouts=None, fast=False, **fake):
    async with FakeServer(flavor=flavor, ttft_s=0.01, itl_s=0.002, api_key=key, **fake) as srv:
        t = Target(srv.url, api=api, model="fake-model", engine=flavor, api_key=key, timeouts=timeouts or Timeouts())
        async with new_session(fast=fast) as s:
            r = await get_client(api).send(s, t, req or GenRequest(prompt="one two three four", max_tokens=10))
        return r, list(srv.log)


@pytest.mark.parametrize("flavor,api", CASES)
@pytest.mark.parametrize("tpe", [1, 3])
@PATHS
def test_stream_matches_ground_truth(flavor, api, tpe, fast):
    r, log = run(one(flavor, api, tokens_per_event=tpe, fast=fast))
    assert r.ok, r.error_message
    gt = next(g for g in log if g.id == r.id)
    # the counts come from the server's usage (Anthropic: input + cache reads in message_start, output
    # only in message_delta; Responses: only in response.completed), not from counting events
    assert (r.prompt_tokens, r.output_tokens) == (gt.prompt_tokens, gt.output_tokens) == (7, 10)
    assert r.prompt_tokens_source == r.output_tokens_source == "usage"
    assert r.finish_reason == "length"
    tok = r.token_events()
    assert len(tok) == len(gt.t_events_ns)  # message_start, blocks, pings, created, done events are not tokens
    for ev, sent in zip(tok, gt.t_events_ns):
        assert ev.t_ns >= sent
    assert r.t_headers_ns is not None and r.t_done_ns >= tok[-1].t_ns
    # TTFT is the first delta, not message_start / response.created (sent at the headers by Anthropic, OpenAI, vLLM)
    assert D.ttft_s(r) == pytest.approx((tok[0].t_ns - r.t_start_ns) / 1e9)
    assert tok[0].t_ns >= gt.t_events_ns[0]
    assert len(D.itl_s(r)) == 9 and D.decode_tok_s(r) is not None
    if api == "anthropic":
        assert r.events[0].kind == "role"  # message_start
    if flavor == "llamacpp" and api == "responses":
        assert r.server is not None and r.server["predicted_n"] == 10  # timings on response.completed


def test_anthropic_start_before_tokens_and_ping_events_are_not_tokens():
    r, log = run(one("anthropic", "anthropic"))
    kinds = [e.kind for e in r.events]
    assert kinds[:3] == ["role", "empty", "empty"]  # message_start, ping, content_block_start
    assert kinds[-3:] == ["empty", "usage", "empty"]  # content_block_stop, message_delta, message_stop
    gt = log[0]
    assert r.events[0].t_ns < gt.t_events_ns[0]  # message_start went out with the headers


@pytest.mark.parametrize("flavor,api", [("anthropic", "anthropic"), ("llamacpp", "anthropic"),
                                        ("vllm", "responses"), ("llamacpp", "responses")])
def test_reasoning_then_answer(flavor, api):
    r, log = run(one(flavor, api, reasoning_tokens=4, tokens_per_event=2))
    assert r.ok, r.error_message
    kinds = [e.kind for e in r.token_events()]
    assert kinds == ["reasoning"] * 3 + ["content"] * 3  # events (1, 2, 1 | 2, 2, 2 tokens)
    assert r.output_tokens == 10 and r.reasoning_tokens is not None and r.reasoning_tokens > 0
    if api == "responses":
        assert r.reasoning_tokens == 4  # output_tokens_details.reasoning_tokens


@pytest.mark.parametrize("flavor,api", CASES)
def test_non_stream(flavor, api):
    r, _ = run(one(flavor, api, req=GenRequest(prompt="a b c", max_tokens=5, stream=False)))
    assert r.ok, r.error_message
    assert r.events == [] and r.output_tokens == 5 and r.prompt_tokens == 6


def test_conversation_history_and_reply_text():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]
    for flavor, api in (("anthropic", "anthropic"), ("responses", "responses")):
        r, log = run(one(flavor, api, req=GenRequest(prompt="", messages=msgs, max_tokens=3, keep_text=True)))
        assert r.ok, r.error_message
        assert r.prompt_tokens == log[0].prompt_tokens == 2 + 2 + (3 + 1 + 1) + 1 + 3
        assert r.tags["reply_text"] == " the quick brown"


FAULT_KINDS = [
    ("forbidden", "auth", 403), ("overloaded", "overloaded", 429), ("unavailable", "overloaded", 503),
    ("http500", "http", 500), ("cut", "stream_broken", 200), ("malformed", "malformed_event", 200),
    ("error_event", "server_error_event", 200), ("no_done", "stream_broken", 200),
    ("done_only", "no_token", 200), ("empty_text", "no_token", 200),
]


@pytest.mark.parametrize("flavor,api", CASES)
@pytest.mark.parametrize("fault,kind,status", FAULT_KINDS)
@PATHS
def test_fault_becomes_a_failed_record(flavor, api, fault, kind, status, fast):
    r, _ = run(one(flavor, api, fault=fault, fast=fast))
    assert not r.ok
    assert r.error_kind == kind, r.error_message
    assert r.http_status == status
    assert r.error_message and "\n" not in r.error_message
    if fault in ("cut", "malformed", "error_event"):
        assert len(r.token_events()) == 2  # what arrived before the fault is kept
    if fault == "error_event":  # the server's own sentence, whichever error shape it used
        assert "Overloaded" in r.error_message or "engine died while generating" in r.error_message


@pytest.mark.parametrize("flavor,api", [("anthropic", "anthropic"), ("responses", "responses")])
def test_pings_during_a_stall_do_not_keep_the_stream_alive(flavor, api):
    to = Timeouts(connect_s=2, first_token_s=5, between_tokens_s=0.3)
    r, _ = run(one(flavor, api, fault="stall", fault_after=2, stall_s=3, ping_s=0.05, timeouts=to))
    assert not r.ok and r.error_kind == "inter_token_timeout", r.error_message


def test_anthropic_key_goes_as_x_api_key_detection_included():
    r, _ = run(one("anthropic", "anthropic", key="sk-ant-test-key"))
    assert r.ok, r.error_message  # the anthropic fake reads x-api-key only

    async def go(key):
        async with FakeServer(flavor="anthropic", api_key="sk-ant-test-key") as srv:
            async with open_target(srv.url, api_key=key) as t:
                return t.api
    assert run(go("sk-ant-test-key")) == "anthropic"
    r, _ = run(one("anthropic", "anthropic", key="sk-ant-test-key", req=GenRequest(prompt="a", max_tokens=2)))
    assert r.ok


def test_wrong_anthropic_key_is_an_auth_error():
    async def go():
        async with FakeServer(flavor="anthropic", api_key="right") as srv:
            t = Target(srv.url, api="anthropic", model="fake-model", engine="anthropic", api_key="wrong")
            async with new_session() as s:
                return await get_client("anthropic").send(s, t, GenRequest(prompt="a", max_tokens=2))
    r = run(go())
    assert not r.ok and r.error_kind == "auth" and r.http_status == 401 and "invalid x-api-key" in r.error_message


def test_negative_usage_is_not_trusted():
    for flavor, api in (("anthropic", "anthropic"), ("responses", "responses")):
        r, _ = run(one(flavor, api, fault="neg_usage"))
        assert r.ok and r.output_tokens == 10 and r.output_tokens_source == "events", (api, r.output_tokens)


@pytest.mark.parametrize("flavor,api,engine", [("anthropic", "anthropic", "anthropic"), ("responses", "responses", "openai"),
                                               ("vllm", "openai", "vllm"), ("llamacpp", "llamacpp", "llamacpp")])
def test_detection_where_a_server_offers_only_one_of_them(flavor, api, engine):
    async def go():
        async with FakeServer(flavor=flavor) as srv:
            async with open_target(srv.url) as t:
                return t.api, t.engine, t.model
    assert run(go()) == (api, engine, "fake-model")


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PHASESCOPE_API_KEY")}
    return subprocess.run([sys.executable, "-m", "phasescope", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_help_lists_both_apis_wherever_api_is():
    for cmd in ("probe", "bench", "explain", "tune"):
        p = _cli(cmd, "--help")
        assert p.returncode == 0, p.stderr
        text = " ".join(p.stdout.split())
        assert "anthropic" in text and "responses" in text, cmd


@pytest.mark.parametrize("flavor,api", [("anthropic", "anthropic"), ("llamacpp", "responses")])
def test_probe_cli_speaks_them(flavor, api, tmp_path):
    with FakeServer(flavor=flavor, ttft_s=0.01, itl_s=0.002).running() as srv:
        p = _cli("probe", srv.url, "--api", api, "--prompt-tokens", "20,40", "--max-tokens", "4", "--repeat", "1",
                 "--no-save", "--json", "--out", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["api"] == api
    for s in res["sizes"]:
        assert s["output_tokens"] == 4 and s["prompt_tokens_source"] == "usage" and s["ttft_s"] > 0
