"""The OpenAI-compatible wire format as vLLM 0.33 and SGLang serve it (and llama-server, with its own
differences: no model check, 500 on bad JSON, ``timings`` on the last chunk, the usage chunk layout).

Endpoints: ``POST /v1/completions`` and ``/v1/chat/completions`` (SSE ``data:`` events ending in
``[DONE]``; ``stream_options.include_usage`` and ``continuous_usage_stats``; reasoning deltas as
``delta.reasoning`` (vLLM) or ``delta.reasoning_content`` (SGLang, llama-server) with the parser's count in
``usage`` (vLLM ``completion_tokens_details.reasoning_tokens``, SGLang ``reasoning_tokens``), or, with
``reasoning_format="think"``, inside the text between ``<think>`` and ``</think>``; vLLM puts ``finish_reason`` on the
last token's chunk, SGLang and llama-server send a separate one), ``GET /v1/models`` (every flavor,
Ollama included), and for vLLM / SGLang ``POST /tokenize``, ``GET /health`` and ``GET /version``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from phasescope.testing.wire import llamacpp
from phasescope.testing.wire.common import SSE_MALFORMED, bind, chat_template_ids, fake_tokenize

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer

#: streams are server-sent events (keep-alive comments during a stall are possible)
SSE = True
MALFORMED_EVENT = SSE_MALFORMED


def err_body(status: int, message: str, etype: str) -> Any:
    return {"error": {"message": message, "type": etype, "param": None, "code": status}}


def error_event(srv: FakeServer) -> bytes:
    """vLLM's mid-stream error: an error object as an event, then ``[DONE]``."""
    err = srv._err_body(500, "engine died while generating", "InternalServerError")
    return b"data: " + json.dumps(err).encode() + b"\n\n" + b"data: [DONE]\n\n"


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    """vLLM / SGLang: the OpenAI endpoints plus their own ``/health``, ``/tokenize``, ``/version``."""
    add_openai_routes(srv, r)
    r.add_get("/health", bind(srv, health))
    r.add_post("/tokenize", bind(srv, tokenize))
    r.add_get("/version", bind(srv, version))


def add_openai_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    """The endpoints every OpenAI-compatible server has (llama-server too)."""
    r.add_get("/v1/models", bind(srv, models))
    r.add_post("/v1/completions", bind(srv, generate))
    r.add_post("/v1/chat/completions", bind(srv, generate))


async def health(srv: FakeServer, request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(srv: FakeServer, request: web.Request) -> web.Response:
    return web.json_response({"version": "0.33.0" if srv.flavor == "vllm" else "0.5.23"})


async def models(srv: FakeServer, request: web.Request) -> web.Response:
    if (resp := srv._auth(request)) is not None:
        return resp
    owned = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "ollama": "library", "responses": "openai"}[srv.flavor]
    card: dict[str, Any] = {"id": srv.model, "object": "model", "created": 1767225600, "owned_by": owned}
    if srv.flavor in ("vllm", "sglang"):
        card.update({"root": srv.model, "parent": None, "max_model_len": srv.max_model_len})
    if srv.flavor == "llamacpp":
        card["meta"] = {"vocab_type": 1, "n_vocab": 262144, "n_ctx": 4096, "n_ctx_train": 32768,
                        "n_embd": 640, "n_params": 268098176, "size": 246587904, "ftype": "Q4_K - Medium"}
        card["aliases"] = [srv.model]
    return web.json_response({"object": "list", "data": [card]})


async def tokenize(srv: FakeServer, request: web.Request) -> web.Response:
    """vLLM's ``POST /tokenize`` (``prompt`` in; ``count``, ``max_model_len``, ``tokens`` out)."""
    body = await request.json()
    ids = fake_tokenize(body.get("prompt", ""))
    return web.json_response({"count": len(ids), "max_model_len": srv.max_model_len, "tokens": ids, "token_strs": None})


async def generate(srv: FakeServer, request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions`` and ``/v1/chat/completions``, streamed or not."""
    is_llamacpp = srv.flavor == "llamacpp"
    bad = 500 if is_llamacpp else 400
    gt, body, err = await srv._begin(
        request, bad_json_status=bad, bad_json_body=srv._err_body(bad, "malformed JSON body", "invalid_request_error"))
    if err is not None:
        return err
    t0 = time.perf_counter()
    gt.t_body_ns = time.perf_counter_ns()
    srv.requests += 1
    chat = request.path.endswith("/chat/completions")
    model = body.get("model")
    if model is not None and model != srv.model and not is_llamacpp:
        return srv._refuse(gt, 404, srv._err_body(404, f"The model `{model}` does not exist.", "NotFoundError"))
    srv._echo_auth = request.headers.get("Authorization", "")
    fault, refused = srv._admit(gt)
    if refused is not None:
        return refused
    if chat:
        ids = chat_template_ids(body.get("messages", []))
    else:
        ids = srv._prompt_ids(body.get("prompt", ""), bos=is_llamacpp)
    cached = srv._cache(ids, body.get("cache_prompt", True)) if is_llamacpp else srv._apc(ids)
    gt.prompt_tokens, gt.cached_tokens = len(ids), cached
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    ignore_eos = bool(body.get("ignore_eos")) or (body.get("min_tokens") or 0) >= max_tokens
    n_out = srv._n_out(max_tokens, ignore_eos)
    so = body.get("stream_options") or {}
    include_usage = bool(so.get("include_usage"))
    continuous = include_usage and bool(so.get("continuous_usage_stats"))
    cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:12]
    obj = "chat.completion.chunk" if chat else "text_completion"
    ttft = srv._ttft(len(ids) - cached)
    srv._counters["prompt"] += len(ids) - cached

    def usage(n: int) -> dict[str, Any]:
        if fault == "neg_usage":
            return {"prompt_tokens": -5, "total_tokens": -305, "completion_tokens": -300}
        u: dict[str, Any] = {"prompt_tokens": len(ids), "total_tokens": len(ids) + n, "completion_tokens": n}
        if srv.prefix_cache and srv.flavor in ("vllm", "sglang"):
            u["prompt_tokens_details"] = {"cached_tokens": cached}
        if split_reasoning and srv.reasoning_tokens:  # a reasoning parser counts what it split out
            nr = min(n, srv.reasoning_tokens)
            if srv.flavor == "sglang":
                u["reasoning_tokens"] = nr
            elif srv.flavor == "vllm":
                u["completion_tokens_details"] = {"reasoning_tokens": nr}
        return u

    finish = "length" if n_out >= max_tokens else "stop"
    # reasoning: split out into its own delta field (a server with a reasoning parser; chat only), or
    # left in the text between <think> and </think> (reasoning_format "think"; chat and completions)
    split_reasoning = chat and srv.reasoning_format == "field"
    think = srv.reasoning_format == "think"
    if split_reasoning or think:
        gt.reasoning_tokens = min(n_out, srv.reasoning_tokens)

    def timings(n: int, t_first: float, t_last: float) -> dict[str, Any]:
        return llamacpp.timings(n_prompt=len(ids), cached=cached, n=n, t0=t0, t_first=t_first, t_last=t_last,
                                draft=srv.spec_counts(n)[:2] if srv.spec_draft else None)

    if not body.get("stream"):
        await srv.answer_unstreamed(gt, ttft, n_out)
        text = srv.words(0, n_out)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        out: dict[str, Any] = {"id": cid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                               "model": srv.model, "choices": [choice], "usage": usage(n_out)}
        if is_llamacpp:
            out["timings"] = timings(n_out, t0 + ttft, time.perf_counter())
        return web.json_response(out)

    def chunk(choice: dict[str, Any] | None, u: dict[str, Any] | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"id": cid, "object": obj, "created": int(time.time()), "model": srv.model,
                             "choices": [choice] if choice is not None else []}
        if u is not None:
            d["usage"] = u
        return d

    reasoning_key = "reasoning" if srv.flavor == "vllm" else "reasoning_content"
    async with srv._stream(request, gt, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}) as resp:

        async def send(d: Any) -> None:
            await resp.write(b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n")

        if fault == "done_only":  # a well-formed end, and not one token before it
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        if fault == "silent":  # headers out, then nothing
            await asyncio.sleep(srv.stall_s)
            return resp
        if fault == "endless":  # past max_tokens for ever, never finishing
            j = 0
            while True:
                await srv._sleep_until(t0, ttft + j * srv.itl_s)
                text = srv.words(j, j + 1)
                ch = ({"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None} if chat
                      else {"index": 0, "text": text, "logprobs": None, "finish_reason": None})
                await send(chunk(ch))
                gt.t_events_ns.append(time.perf_counter_ns())
                gt.tokens_per_event.append(1)
                gt.output_tokens += 1
                j += 1
        if chat:  # role-only opening delta, sent before the prompt is processed (per server)
            role: dict[str, Any] = {"role": "assistant", "content": None if is_llamacpp else ""}
            if srv.flavor == "sglang":
                role = {"reasoning_content": None, "role": "assistant", "content": ""}
            await send(chunk({"index": 0, "delta": role, "logprobs": None, "finish_reason": None},
                             usage(0) if continuous else None))

        async def emit(i: int, k: int, sent: int) -> None:
            text = "" if fault == "empty_text" else (srv.think_text(i, i + k) if think else srv.words(i, i + k))
            if chat:
                delta = {reasoning_key: text} if split_reasoning and i < srv.reasoning_tokens else {"content": text}
                ch: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            else:
                ch = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
            if i + k == n_out and srv.flavor == "vllm":  # vLLM: the last token's chunk carries the finish
                ch["finish_reason"] = finish
                ch["stop_reason"] = None
            await send(chunk(ch, usage(sent) if continuous else None))

        done = await srv._token_events(request, resp, gt, fault=fault, t0=t0, ttft=ttft, n_out=n_out, emit=emit)
        if done is None:
            return resp
        sent, t_first_tok = done
        t_last = time.perf_counter()
        srv.count_generated(gt, sent)
        if fault == "no_done":
            return resp
        if srv.flavor != "vllm" or n_out == 0:
            if is_llamacpp and not chat:
                # llama.cpp /v1/completions: finish_reason, usage and timings share the last chunk
                fin = chunk({"text": "", "index": 0, "logprobs": None, "finish_reason": finish},
                            usage(sent) if include_usage else None)
                fin["timings"] = timings(sent, t_first_tok, t_last)
                await send(fin)
            else:
                fch = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish} if chat else \
                    {"index": 0, "text": "", "logprobs": None, "finish_reason": finish}
                await send(chunk(fch))
        if include_usage and not (is_llamacpp and not chat):
            u = chunk(None, usage(sent))
            if is_llamacpp:
                u["timings"] = timings(sent, t_first_tok, t_last)
            await send(u)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    return resp
