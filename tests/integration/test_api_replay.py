"""Replay real llama-server responses captured byte for byte (reference/engine-samples, copied into
tests/data/engine_samples) through a loopback server, cut into awkward read sizes, and check that
each client reads them as llama.cpp meant: role chunk not a token, usage/timings taken, the native
stream ending without [DONE], progress events not tokens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from phasescope.apis import get_client, new_session
from phasescope.apis.base import GenRequest, Target

DATA = Path(__file__).resolve().parents[1] / "data" / "engine_samples"


def body_of(name: str) -> tuple[bytes, str]:
    raw = (DATA / name).read_bytes()
    if raw.startswith(b"HTTP/1.1"):
        head, _, body = raw.partition(b"\n\n")
        ctype = next(line.split(b":", 1)[1].strip().decode() for line in head.split(b"\n") if line.lower().startswith(b"content-type"))
        return body, ctype
    return raw, "application/json"


async def replay(name: str, path: str, api: str, piece: int, req: GenRequest):
    body, ctype = body_of(name)

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": ctype})
        await resp.prepare(request)
        for i in range(0, len(body), piece):
            await resp.write(body[i:i + piece])
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        t = Target(f"http://127.0.0.1:{port}", api=api, model="gemma-3-270m", engine="llamacpp")
        async with new_session() as s:
            return await get_client(api).send(s, t, req)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("piece", [7, 64, 100_000])
def test_replay_v1_completions_stream(piece):
    r = asyncio.run(replay("a_v1_completions_stream.sse", "/v1/completions", "openai", piece, GenRequest(prompt="x", max_tokens=40)))
    assert r.ok, r.error_message
    assert len(r.token_events()) == 23  # 24 JSON events shown; the last is the empty finish+usage chunk
    assert (r.output_tokens, r.output_tokens_source, r.prompt_tokens) == (40, "usage", 10)
    assert r.finish_reason == "length" and r.cached_prompt_tokens == 0
    assert r.server["prompt_n"] == 10 and r.server["prefill_s"] == pytest.approx(0.045456)


@pytest.mark.parametrize("piece", [5, 333])
def test_replay_chat_stream(piece):
    r = asyncio.run(replay("b_v1_chat_completions_stream.sse", "/v1/chat/completions", "chat", piece, GenRequest(prompt="x", max_tokens=40)))
    assert r.ok, r.error_message
    kinds = [e.kind for e in r.events]
    assert kinds[0] == "role" and kinds[-2:] == ["empty", "usage"]
    assert kinds.count("content") == 21  # 24 JSON events shown: role, 21 deltas, finish, usage
    assert (r.output_tokens, r.prompt_tokens, r.cached_prompt_tokens) == (40, 14, 9)
    assert r.server["cache_n"] == 9 and r.server["predicted_n"] == 40


@pytest.mark.parametrize("piece", [11, 100_000])
def test_replay_native_completion_stream(piece):
    r = asyncio.run(replay("c_completion_stream.sse", "/completion", "llamacpp", piece, GenRequest(prompt="x", max_tokens=32)))
    assert r.ok, r.error_message
    kinds = [e.kind for e in r.events]
    assert kinds[:3] == ["empty"] * 3  # prompt_progress events
    assert kinds[-1] == "usage" and kinds.count("content") == 21
    assert all(e.n_tokens == 1 for e in r.token_events())
    assert (r.output_tokens, r.output_tokens_source, r.prompt_tokens) == (32, "server", 10)
    assert r.server["cache_n"] == 5 and r.server["prompt_n"] == 5 and r.finish_reason == "length"


def test_replay_chat_nonstream():
    r = asyncio.run(replay("b_v1_chat_completions_nonstream.json", "/v1/chat/completions", "chat", 50,
                           GenRequest(prompt="x", max_tokens=40, stream=False)))
    assert r.ok and r.events == [] and r.output_tokens == 40 and r.server["decode_s"] == pytest.approx(0.790625)
    assert json.loads((DATA / "b_v1_chat_completions_nonstream.json").read_text())["usage"]["prompt_tokens"] == r.prompt_tokens
