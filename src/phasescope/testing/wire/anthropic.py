"""Anthropic Messages ``POST /v1/messages`` as Anthropic documents it ("Streaming Messages") and as
llama-server serves it (llama.cpp ``tools/server/server-task.cpp`` ``to_json_anthropic*`` and
``server-context.cpp`` at 0c1e570), plus the Anthropic-only flavor's ``GET /v1/models``.

The stream is ``event: NAME`` / ``data: {"type": NAME, ...}``:

* Anthropic (flavor ``anthropic``, and vLLM's Messages endpoint): ``message_start`` (usage
  ``input_tokens``, ``cache_read_input_tokens``, ``output_tokens: 1``) and a ``ping`` when the headers
  go out, before the first token; ``content_block_start`` (text) with the first token, one
  ``content_block_delta`` (``text_delta``, or ``thinking_delta`` in a thinking block 0 before it) per
  token event, ``content_block_stop``, ``message_delta`` (``stop_reason``, usage ``output_tokens``:
  the output count arrives only here), ``message_stop``; ``ping`` during a stall every ``ping_s``.
  Mid-stream error: ``event: error`` / ``{"type": "error", "error": {"type", "message"}}``.
* llama-server (flavor ``llamacpp``): ``message_start`` goes out *with* the first token (its
  ``input_tokens`` = prompt − cached, ``cache_read_input_tokens`` = cached, ``output_tokens: 0``), no
  ``ping`` events (keep-alive ``:`` comments), ``message_delta`` carries only ``output_tokens``;
  its mid-stream error is ``event: error`` with the bare error object ``{"code", "message", "type"}``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from phasescope.testing.wire.common import bind, chat_template_ids

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer

SSE = True
#: a truncated event (the "malformed" fault)
MALFORMED_EVENT = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"type"\n\n'


def err_body(status: int, message: str, etype: str) -> Any:
    """Anthropic's error object (``{"type": "error", "error": {"type", "message"}}``)."""
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}.get(status, etype)
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(srv: FakeServer) -> bytes:
    """Anthropic's mid-stream error event (the anthropic flavor's; llama-server's is in :func:`messages`)."""
    return _sse("error", err_body(529, "Overloaded", "overloaded_error"))


def _sse(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    """The Anthropic-only server: ``GET /v1/models`` in Anthropic's shape and ``POST /v1/messages``."""
    r.add_get("/v1/models", bind(srv, models))
    r.add_post("/v1/messages", bind(srv, messages))


async def models(srv: FakeServer, request: web.Request) -> web.Response:
    """Anthropic's "List Models": ``data`` of ``{"type": "model", "id", "display_name", "created_at"}``."""
    if (resp := srv._auth(request)) is not None:
        return resp
    card = {"type": "model", "id": srv.model, "display_name": srv.model, "created_at": "2026-01-01T00:00:00Z"}
    return web.json_response({"data": [card], "has_more": False, "first_id": srv.model, "last_id": srv.model})


def _system_and_turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        msgs.append({"role": "system", "content": system})
    msgs += [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return msgs


async def messages(srv: FakeServer, request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``, streamed or not (see the module docstring for the two shapes)."""
    llama = srv.flavor == "llamacpp"
    gt, body, err = await srv._begin(
        request, bad_json_status=500 if llama else 400,
        bad_json_body=srv._err_body(500 if llama else 400, "malformed JSON body", "invalid_request_error"))
    if err is not None:
        return err
    t0 = time.perf_counter()
    gt.t_body_ns = time.perf_counter_ns()
    srv.requests += 1
    model = body.get("model")
    if not llama and model is not None and model != srv.model:
        return srv._refuse(gt, 404, srv._err_body(404, f"model: {model}", "not_found_error"))
    srv._echo_auth = request.headers.get("x-api-key", "") or request.headers.get("Authorization", "")
    fault, refused = srv._admit(gt)
    if refused is not None:
        return refused
    ids = chat_template_ids(_system_and_turns(body))
    cached = srv._cache(ids, True) if llama else srv._apc(ids)
    gt.prompt_tokens, gt.cached_tokens = len(ids), cached
    max_tokens = int(body.get("max_tokens") or 4096)
    # llama-server's converter drops ignore_eos; vLLM reads it; Anthropic has none
    n_out = srv._n_out(max_tokens, bool(body.get("ignore_eos")) and not llama)
    ttft = srv._ttft(len(ids) - cached)
    srv._counters["prompt"] += len(ids) - cached
    gt.reasoning_tokens = min(n_out, srv.reasoning_tokens)
    # "field": thinking blocks (a server that splits reasoning out); "think": <think>…</think> inside the text
    think_in_text = srv.reasoning_format == "think"
    mid = "msg_" + uuid.uuid4().hex[:24]
    stop = "max_tokens" if n_out >= max_tokens else "end_turn"

    def usage_in(n: int) -> dict[str, Any]:
        if fault == "neg_usage":
            return {"input_tokens": -5, "cache_read_input_tokens": 0, "output_tokens": -300}
        return {"input_tokens": len(ids) - cached, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached, "output_tokens": n}

    def message(n: int, content: list[Any], stop_reason: str | None) -> dict[str, Any]:
        return {"id": mid, "type": "message", "role": "assistant", "content": content, "model": srv.model,
                "stop_reason": stop_reason, "stop_sequence": None, "usage": usage_in(n)}

    if not body.get("stream"):
        await srv.answer_unstreamed(gt, ttft, n_out)
        return web.json_response(message(n_out, [{"type": "text", "text": srv.words(0, n_out)}], stop))

    async with srv._stream(request, gt, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}) as resp:

        async def send(name: str, data: Any) -> None:
            await resp.write(_sse(name, data))

        if not llama:  # Anthropic: the message and a ping open the stream, before any token
            await send("message_start", {"type": "message_start", "message": message(1, [], None)})
            await send("ping", {"type": "ping"})
        if fault == "done_only":
            if llama:
                await send("message_start", {"type": "message_start", "message": message(0, [], None)})
            await send("message_stop", {"type": "message_stop"})
            await resp.write_eof()
            return resp
        if fault == "silent":
            await asyncio.sleep(srv.stall_s)
            return resp
        think = srv.reasoning_tokens > 0 and not think_in_text
        text_index = 1 if think else 0
        opened: set[int] = set()

        async def emit(i: int, k: int, sent: int) -> None:
            text = "" if fault == "empty_text" else (srv.think_text(i, i + k) if think_in_text else srv.words(i, i + k))
            out = b""
            if llama and i == 0:
                out += _sse("message_start", {"type": "message_start", "message": message(0, [], None)})
            reasoning = think and i < srv.reasoning_tokens
            idx = 0 if reasoning else text_index
            if idx not in opened:
                opened.add(idx)
                block = {"type": "thinking", "thinking": ""} if reasoning else {"type": "text", "text": ""}
                out += _sse("content_block_start", {"type": "content_block_start", "index": idx, "content_block": block})
            delta = {"type": "thinking_delta", "thinking": text} if reasoning else {"type": "text_delta", "text": text}
            out += _sse("content_block_delta", {"type": "content_block_delta", "index": idx, "delta": delta})
            await resp.write(out)

        # llama-server: its bare error object under event: error, ':' keep-alives; Anthropic: its error, ping events
        error = (_sse("error", {"code": 500, "message": "engine died while generating", "type": "server_error"})
                 if llama else error_event(srv))
        done = await srv._token_events(request, resp, gt, fault=fault, t0=t0, ttft=ttft, n_out=n_out, emit=emit,
                                       error_bytes=error, malformed=MALFORMED_EVENT,
                                       ping=None if llama else _sse("ping", {"type": "ping"}))
        if done is None:
            return resp
        sent, _ = done
        srv.count_generated(gt, sent)
        if fault == "no_done":
            await resp.write_eof()
            return resp
        tail = b""
        if think:
            tail += _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "signature_delta", "signature": ""}})
        for idx in sorted(opened):
            tail += _sse("content_block_stop", {"type": "content_block_stop", "index": idx})
        out_usage: dict[str, Any] = {"output_tokens": -300 if fault == "neg_usage" else sent}
        if not llama and fault != "neg_usage":  # Anthropic repeats the input counts, cumulative
            out_usage = {"input_tokens": len(ids) - cached, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": cached, "output_tokens": sent}
        tail += _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": out_usage})
        tail += _sse("message_stop", {"type": "message_stop"})
        await resp.write(tail)
        await resp.write_eof()
    return resp
