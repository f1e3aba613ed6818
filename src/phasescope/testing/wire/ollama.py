"""Ollama's wire format: ``POST /api/generate`` and ``/api/chat`` (NDJSON lines, the last ``done: true``
with the durations in ns, ``omitempty`` zeros; ``thinking`` for reasoning tokens; ``load_duration`` on
the first request; no API keys), ``POST /api/show``, ``GET /api/tags``, ``/api/version``, ``/`` and the
OpenAI-compatible ``GET /v1/models``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from phasescope.testing.wire import openai
from phasescope.testing.wire.common import bind

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer

#: NDJSON, not SSE: a stall is plain silence
SSE = False
MALFORMED_EVENT = b'{"model":"x","response":"y",\n'

_DETAILS = {"parent_model": "", "format": "gguf", "family": "gemma3", "families": ["gemma3"],
            "parameter_size": "268.10M", "quantization_level": "Q4_K_M"}


def err_body(status: int, message: str, etype: str) -> Any:
    return {"error": message}


def error_event(srv: FakeServer) -> bytes:
    return b'{"error":"an error was encountered while running the model: unexpected EOF"}\n'


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    r.add_get("/", bind(srv, root))
    r.add_get("/api/version", bind(srv, version))
    r.add_get("/api/tags", bind(srv, tags))
    r.add_post("/api/show", bind(srv, show))
    r.add_post("/api/generate", bind(srv, generate))
    r.add_post("/api/chat", bind(srv, generate))
    r.add_get("/v1/models", bind(srv, openai.models))


async def root(srv: FakeServer, request: web.Request) -> web.Response:
    return web.Response(text="Ollama is running")


async def version(srv: FakeServer, request: web.Request) -> web.Response:
    return web.json_response({"version": "0.33.0"})


async def tags(srv: FakeServer, request: web.Request) -> web.Response:
    return web.json_response({"models": [{
        "name": srv.model, "model": srv.model, "modified_at": "2026-01-01T00:00:00Z", "size": 253113024,
        "digest": "a5fd3b62230aa5ec", "details": dict(_DETAILS)}]})


async def show(srv: FakeServer, request: web.Request) -> web.Response:
    body = await request.json()
    name = body.get("model") or body.get("name")
    if name != srv.model:
        return web.json_response({"error": f"model '{name}' not found"}, status=404)
    return web.json_response({
        "modelfile": "FROM fake", "parameters": "", "template": "{{ .Prompt }}",
        "details": dict(_DETAILS),
        "model_info": {"general.architecture": "gemma3", "general.parameter_count": 268098176,
                       "gemma3.block_count": 18, "gemma3.context_length": 32768, "gemma3.embedding_length": 640,
                       "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 1,
                       "gemma3.feed_forward_length": 2048},
        "capabilities": ["completion"], "modified_at": "2026-01-01T00:00:00Z"})


async def generate(srv: FakeServer, request: web.Request) -> web.StreamResponse:
    """``POST /api/generate`` and ``/api/chat``, streamed (the default) or not."""
    gt, body, err = await srv._begin(  # Ollama has no API keys: no auth check
        request, check_auth=False, bad_json_status=400,
        bad_json_body={"error": "invalid character 'x' looking for beginning of value"})
    if err is not None:
        return err
    t0 = time.perf_counter()
    gt.t_body_ns = time.perf_counter_ns()
    srv.requests += 1
    chat = request.path == "/api/chat"
    if body.get("model") != srv.model:
        return srv._refuse(gt, 404, {"error": f'model "{body.get("model")}" not found, try pulling it first'})
    fault, refused = srv._admit(gt)
    if refused is not None:
        return refused
    load = 0.0 if srv._loaded else srv.load_s
    srv._loaded = True
    text = "".join(m.get("content", "") for m in body.get("messages", [])) if chat else body.get("prompt", "")
    ids = srv._prompt_ids(text, bos=True) if text else []
    cached = srv._cache(ids, True) if ids else 0
    gt.prompt_tokens, gt.cached_tokens = len(ids), cached
    opts = body.get("options") or {}
    num_predict = int(opts.get("num_predict", -1))
    if num_predict < 0:
        num_predict = 128
    n_out = srv._n_out(num_predict, False) if ids else 0
    gt.reasoning_tokens = min(n_out, srv.reasoning_tokens)  # Ollama always splits it out (thinking)
    ttft = load + srv._ttft(len(ids) - cached) if ids else load
    created = "2026-01-01T00:00:00.000000Z"
    stream = body.get("stream", True)

    def final(n: int, t_pe: float, t_last: float) -> dict[str, Any]:
        d: dict[str, Any] = {"model": srv.model, "created_at": created, "done": True,
                             "done_reason": ("load" if not ids else ("length" if n >= num_predict else "stop"))}
        if chat:
            d["message"] = {"role": "assistant", "content": ""}
        else:
            d["response"] = ""
            if ids:
                d["context"] = ids[:8]
        metrics = {
            "total_duration": int((time.perf_counter() - t0) * 1e9) + 250_000,
            "load_duration": int(load * 1e9) + 150_000,
            "prompt_eval_count": len(ids),  # since 0.30.1: cached + evaluated
            "prompt_eval_duration": int((t_pe - t0 - load) * 1e9) if ids else 0,
            "eval_count": n,
            "eval_duration": int((t_last - t_pe) * 1e9) if n else 0,
        }
        d.update({k: v for k, v in metrics.items() if v})  # omitempty
        return d

    def piece(i: int, k: int) -> dict[str, Any]:
        txt = srv.words(i, i + k)
        reasoning = i < srv.reasoning_tokens
        d: dict[str, Any] = {"model": srv.model, "created_at": created}
        if chat:
            d["message"] = {"role": "assistant", "content": "" if reasoning else txt}
            if reasoning:
                d["message"]["thinking"] = txt
        else:
            d["response"] = "" if reasoning else txt
            if reasoning:
                d["thinking"] = txt
        d["done"] = False
        return d

    if not stream:
        await asyncio.sleep(ttft)
        tpe = time.perf_counter()
        await asyncio.sleep(srv.itl_s * max(0, n_out - 1))
        gt.output_tokens = n_out
        srv._record(gt)
        d = final(n_out, tpe, time.perf_counter())
        if chat:
            d["message"]["content"] = srv.words(0, n_out)
        else:
            d["response"] = srv.words(0, n_out)
        return web.json_response(d)

    async with srv._stream(request, gt, {"Content-Type": "application/x-ndjson"}) as resp:

        async def emit(i: int, k: int, sent: int) -> None:
            await resp.write(json.dumps(piece(i, k), separators=(",", ":")).encode() + b"\n")

        done = await srv._token_events(request, resp, gt, fault=fault, t0=t0, ttft=ttft, n_out=n_out, emit=emit)
        if done is None:
            return resp
        sent, t_pe = done
        gt.output_tokens = sent
        if fault == "no_done":
            await resp.write_eof()
            return resp
        if not ids:
            await asyncio.sleep(ttft)
        await resp.write(json.dumps(final(sent, t_pe, time.perf_counter()), separators=(",", ":")).encode() + b"\n")
        await resp.write_eof()
    return resp
