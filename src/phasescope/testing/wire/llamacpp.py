"""llama-server's wire format: native ``POST /completion`` (and ``/completions``; SSE ``data:`` events
without ``[DONE]``, the last one ``stop: true`` with ``timings``; ``return_progress`` prompt-progress
events; ``cache_prompt`` on one slot), ``GET /props``, ``POST /tokenize`` (``content``, ``add_special``),
``GET /health`` (``{"status": "ok"}``), and its error objects. Its OpenAI-compatible endpoints are
:mod:`phasescope.testing.wire.openai`'s, with the llama.cpp differences there (it uses :func:`timings`).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from phasescope.testing.wire.common import BOS_ID, SSE_MALFORMED, bind, fake_tokenize

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer

SSE = True
MALFORMED_EVENT = SSE_MALFORMED


def err_body(status: int, message: str, etype: str) -> Any:
    return {"error": {"code": status, "message": message, "type": etype}}


def error_event(srv: FakeServer) -> bytes:
    """llama-server's mid-stream error: an error object as an event, no ``[DONE]``."""
    return b"data: " + json.dumps(err_body(500, "engine died while generating", "InternalServerError")).encode() + b"\n\n"


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    """The native endpoints (the fake adds the OpenAI-compatible ones of :mod:`~phasescope.testing.wire.openai`)."""
    r.add_get("/health", bind(srv, health))
    r.add_post("/tokenize", bind(srv, tokenize))
    r.add_get("/props", bind(srv, props))
    r.add_post("/completion", bind(srv, completion))
    r.add_post("/completions", bind(srv, completion))


def timings(*, n_prompt: int, cached: int, n: int, t0: float, t_first: float, t_last: float,
            draft: tuple[int, int] | None = None) -> dict[str, Any]:
    """llama-server's ``timings`` object: prompt from the body read to the first token, then generation;
    ``draft_n`` / ``draft_n_accepted`` only when the request drafted (server-common.cpp at the pin)."""
    pm, gm = (t_first - t0) * 1000, (t_last - t_first) * 1000
    spec = {"draft_n": draft[0], "draft_n_accepted": draft[1]} if draft and draft[0] > 0 else {}
    return spec | {"cache_n": cached, "prompt_n": n_prompt - cached, "prompt_ms": pm,
            "prompt_per_token_ms": pm / max(1, n_prompt - cached),
            "prompt_per_second": 1000 * (n_prompt - cached) / pm if pm else 0,
            "predicted_n": n, "predicted_ms": gm, "predicted_per_token_ms": gm / max(1, n - 1),
            "predicted_per_second": 1000 * (n - 1) / gm if gm else 0}


async def health(srv: FakeServer, request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def tokenize(srv: FakeServer, request: web.Request) -> web.Response:
    body = await request.json()
    ids = fake_tokenize(body.get("content", ""))
    if body.get("add_special"):
        ids = [BOS_ID] + ids
    return web.json_response({"tokens": ids})


async def props(srv: FakeServer, request: web.Request) -> web.Response:
    return web.json_response({
        "default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1, "ignore_eos": False}},
        "total_slots": 4, "model_alias": srv.model, "model_path": "/models/fake.gguf",
        "modalities": {"vision": False, "audio": False}, "endpoint_slots": True, "endpoint_props": False,
        "endpoint_metrics": True, "build_info": "b1-0c1e570", "is_sleeping": False,
    })


async def completion(srv: FakeServer, request: web.Request) -> web.StreamResponse:
    """``POST /completion``, streamed or not."""
    gt, body, err = await srv._begin(
        request, bad_json_status=500,
        bad_json_body=srv._err_body(500, "[json.exception.parse_error.101] parse error", "server_error"))
    if err is not None:
        return err
    t0 = time.perf_counter()
    gt.t_body_ns = time.perf_counter_ns()
    srv.requests += 1
    fault, refused = srv._admit(gt)
    if refused is not None:
        return refused
    ids = srv._prompt_ids(body.get("prompt", ""), bos=True)
    cached = srv._cache(ids, body.get("cache_prompt", True))
    gt.prompt_tokens, gt.cached_tokens = len(ids), cached
    n_predict = int(body.get("n_predict", body.get("max_tokens", -1)))
    if n_predict < 0:
        n_predict = 64
    n_out = srv._n_out(n_predict, bool(body.get("ignore_eos")))
    ttft = srv._ttft(len(ids) - cached)
    srv._counters["prompt"] += len(ids) - cached

    def final(n: int, t_first: float, t_last: float, content: str) -> dict[str, Any]:
        return {"index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": srv.model,
                "tokens_predicted": n, "tokens_evaluated": len(ids),
                "generation_settings": {"n_predict": n_predict, "ignore_eos": bool(body.get("ignore_eos")), "stream": bool(body.get("stream"))},
                "prompt": "<bos>…", "has_new_line": False, "truncated": False,
                "stop_type": "limit" if n >= n_predict else "eos", "stopping_word": "", "tokens_cached": len(ids) + n - 1,
                "timings": timings(n_prompt=len(ids), cached=cached, n=n, t0=t0, t_first=t_first, t_last=t_last,
                                   draft=srv.spec_counts(n)[:2] if srv.spec_draft else None)}

    if not body.get("stream"):
        await asyncio.sleep(ttft)
        tf = time.perf_counter()
        await asyncio.sleep(srv.itl_s * max(0, n_out - 1))
        gt.output_tokens = n_out
        srv._record(gt)
        return web.json_response(final(n_out, tf, time.perf_counter(), srv.words(0, n_out)))

    async with srv._stream(request, gt, {"Content-Type": "text/event-stream"}) as resp:

        async def send(d: Any) -> None:
            await resp.write(b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n")

        if body.get("return_progress"):
            await send({"index": 0, "content": "", "tokens": [0], "stop": False, "id_slot": -1, "tokens_predicted": 0,
                        "tokens_evaluated": len(ids), "prompt_progress": {"total": len(ids), "cache": cached, "processed": cached, "time_ms": 0}})

        async def emit(i: int, k: int, sent: int) -> None:
            await send({"index": 0, "content": srv.words(i, i + k), "tokens": [100 + j for j in range(i, i + k)],
                        "stop": False, "id_slot": -1, "tokens_predicted": sent, "tokens_evaluated": len(ids)})

        done = await srv._token_events(request, resp, gt, fault=fault, t0=t0, ttft=ttft, n_out=n_out, emit=emit)
        if done is None:
            return resp
        sent, t_first = done
        srv.count_generated(gt, sent)
        if fault == "no_done":
            await resp.write_eof()
            return resp
        await send(final(sent, t_first, time.perf_counter(), ""))
        await resp.write_eof()
    return resp
