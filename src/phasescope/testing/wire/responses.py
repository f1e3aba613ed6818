"""OpenAI Responses ``POST /v1/responses`` as OpenAI documents it and vLLM / SGLang serve it, and as
llama-server serves it (llama.cpp ``tools/server/server-task.cpp`` ``to_json_oaicompat_resp*`` and
``server-context.cpp`` at 0c1e570); the Responses-only flavor adds ``GET /v1/models`` and nothing else.

The stream is ``event: NAME`` / ``data: {"type": NAME, ...}``:

* OpenAI / vLLM / SGLang and the ``responses`` flavor: every event has ``sequence_number``;
  ``response.created`` and ``response.in_progress`` when the headers go out (before any token), then
  ``response.output_item.added`` and ``response.content_part.added`` with the first token, one
  ``response.output_text.delta`` (``response.reasoning_text.delta`` for reasoning tokens) per token
  event (vLLM ``vllm/entrypoints/openai/responses/simple_streaming_events.py``: a reasoning item with
  its ``reasoning_text`` part, closed by ``response.reasoning_text.done``, ``content_part.done`` and
  ``output_item.done`` in the write that opens the answer's message item), ``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``,
  and ``response.completed`` (or ``response.incomplete`` with ``incomplete_details.reason
  max_output_tokens`` when the cap cut the answer) whose ``response.usage`` carries the only counts:
  ``input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens``. Mid-stream error: ``event: error`` /
  ``{"type": "error", "code", "message", "param", "sequence_number"}``.
* llama-server: no ``sequence_number``; ``response.created`` and ``response.in_progress`` go out
  *with* the first token; ``response.completed`` has status ``completed`` even at the cap, and
  ``timings``; a mid-stream error is ``data: {"error": {...}}`` (no event name).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from phasescope.testing.wire import llamacpp as llamacpp_wire
from phasescope.testing.wire import openai as openai_wire
from phasescope.testing.wire.common import bind, chat_template_ids

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer

SSE = True
MALFORMED_EVENT = b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "x\n\n'


def err_body(status: int, message: str, etype: str) -> Any:
    return openai_wire.err_body(status, message, etype)


def error_event(srv: FakeServer) -> bytes:
    """OpenAI's mid-stream ``error`` event (llama-server's is in :func:`respond`)."""
    return (b"event: error\ndata: " + json.dumps({"type": "error", "code": "server_error", "param": None,
                                                  "message": "engine died while generating",
                                                  "sequence_number": 9}).encode() + b"\n\n")


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    """The Responses-only server: ``GET /v1/models`` (OpenAI's shape) and ``POST /v1/responses``."""
    r.add_get("/v1/models", bind(srv, openai_wire.models))
    r.add_post("/v1/responses", bind(srv, respond))


def _input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        msgs.append({"role": "system", "content": body["instructions"]})
    inp = body.get("input")
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        msgs += [m for m in inp if isinstance(m, dict)]
    return msgs


async def respond(srv: FakeServer, request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``, streamed or not (see the module docstring for the two shapes)."""
    llama = srv.flavor == "llamacpp"
    bad = 500 if llama else 400
    gt, body, err = await srv._begin(request, bad_json_status=bad,
                                     bad_json_body=err_body(bad, "malformed JSON body", "invalid_request_error"))
    if err is not None:
        return err
    t0 = time.perf_counter()
    gt.t_body_ns = time.perf_counter_ns()
    srv.requests += 1
    model = body.get("model")
    if not llama and model is not None and model != srv.model:
        return srv._refuse(gt, 404, err_body(404, f"The model `{model}` does not exist.", "NotFoundError"))
    if "input" not in body:
        return srv._refuse(gt, 400, err_body(400, "'input' is required", "invalid_request_error"))
    srv._echo_auth = request.headers.get("Authorization", "")
    fault, refused = srv._admit(gt)
    if refused is not None:
        return refused
    ids = chat_template_ids(_input_messages(body))
    cached = srv._cache(ids, body.get("cache_prompt", True)) if llama else srv._apc(ids)
    gt.prompt_tokens, gt.cached_tokens = len(ids), cached
    max_tokens = int(body.get("max_output_tokens") or 4096)
    ignore_eos = bool(body.get("ignore_eos")) or (body.get("min_tokens") or 0) >= max_tokens
    n_out = srv._n_out(max_tokens, ignore_eos)
    ttft = srv._ttft(len(ids) - cached)
    srv._counters["prompt"] += len(ids) - cached
    rid, mid, rsid = "resp_" + uuid.uuid4().hex[:24], "msg_" + uuid.uuid4().hex[:24], "rs_" + uuid.uuid4().hex[:24]
    capped = n_out >= max_tokens
    n_reason = min(srv.reasoning_tokens, n_out)
    gt.reasoning_tokens = n_reason
    # "field": reasoning items (a server with a reasoning parser, which counts them); "think": inside the text
    think_in_text = srv.reasoning_format == "think"

    def usage(n: int) -> dict[str, Any]:
        if fault == "neg_usage":
            return {"input_tokens": -5, "output_tokens": -300, "total_tokens": -305}
        return {"input_tokens": len(ids), "input_tokens_details": {"cached_tokens": cached}, "output_tokens": n,
                "output_tokens_details": {"reasoning_tokens": 0 if think_in_text else n_reason}, "total_tokens": len(ids) + n}

    def response(status: str, n: int | None, text: str = "") -> dict[str, Any]:
        r: dict[str, Any] = {"id": rid, "object": "response", "created_at": int(time.time()), "status": status,
                             "model": srv.model}
        if n is not None:
            r["output"] = [{"type": "message", "id": mid, "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}]
            r["usage"] = usage(n)
            if status == "incomplete":
                r["incomplete_details"] = {"reason": "max_output_tokens"}
        return r

    final_status = "completed" if llama or not capped else "incomplete"
    if not body.get("stream"):
        await srv.answer_unstreamed(gt, ttft, n_out)
        return web.json_response(response(final_status, n_out, srv.words(0, n_out)))

    seq = [0]

    def ev(name: str, data: dict[str, Any]) -> bytes:
        d = {"type": name, **data}
        if not llama:
            d["sequence_number"] = seq[0]
            seq[0] += 1
        return f"event: {name}\ndata: ".encode() + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"

    opening = ev("response.created", {"response": response("in_progress", None)}) + \
        ev("response.in_progress", {"response": response("in_progress", None)})
    async with srv._stream(request, gt, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}) as resp:
        if not llama:  # OpenAI / vLLM: the response exists before any token
            await resp.write(opening)
        if fault == "done_only":
            await resp.write((opening if llama else b"") + ev("response.completed", {"response": response("completed", 0)}))
            await resp.write_eof()
            return resp
        if fault == "silent":
            await asyncio.sleep(srv.stall_s)
            return resp
        started: set[str] = set()
        t_first_tok = [t0]

        async def emit(i: int, k: int, sent: int) -> None:
            text = "" if fault == "empty_text" else (srv.think_text(i, i + k) if think_in_text else srv.words(i, i + k))
            out = opening if llama and i == 0 else b""
            if i < srv.reasoning_tokens and not think_in_text:
                if "rs" not in started:
                    started.add("rs")
                    out += ev("response.output_item.added", {"output_index": 0, "item": {
                        "id": rsid, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}})
                    if not llama:  # vLLM opens a reasoning_text part too
                        out += ev("response.content_part.added", {"item_id": rsid, "output_index": 0, "content_index": 0,
                                                                  "part": {"type": "reasoning_text", "text": ""}})
                out += ev("response.reasoning_text.delta", {"item_id": rsid, "output_index": 0, "content_index": 0,
                                                            "delta": text})
            else:
                oi = 1 if srv.reasoning_tokens and not think_in_text else 0
                if "msg" not in started:
                    started.add("msg")
                    if "rs" in started and not llama:  # vLLM closes the reasoning item before the answer's opens
                        rtext = srv.words(0, n_reason)
                        out += ev("response.reasoning_text.done", {"item_id": rsid, "output_index": 0,
                                                                   "content_index": 0, "text": rtext})
                        out += ev("response.content_part.done", {"item_id": rsid, "output_index": 0, "content_index": 0,
                                                                 "part": {"type": "reasoning_text", "text": rtext}})
                        out += ev("response.output_item.done", {"output_index": 0, "item": {
                            "id": rsid, "type": "reasoning", "summary": [], "status": "completed",
                            "content": [{"type": "reasoning_text", "text": rtext}]}})
                    out += ev("response.output_item.added", {"output_index": oi, "item": {
                        "id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
                    out += ev("response.content_part.added", {"item_id": mid, "output_index": oi, "content_index": 0,
                                                              "part": {"type": "output_text", "text": "", "annotations": []}})
                out += ev("response.output_text.delta", {"item_id": mid, "output_index": oi, "content_index": 0,
                                                         "delta": text, "logprobs": []})
            await resp.write(out)

        error = (b"data: " + json.dumps(llamacpp_wire.err_body(500, "engine died while generating",
                                                               "server_error")).encode() + b"\n\n"
                 if llama else error_event(srv))
        done = await srv._token_events(request, resp, gt, fault=fault, t0=t0, ttft=ttft, n_out=n_out, emit=emit,
                                       error_bytes=error, malformed=MALFORMED_EVENT)
        if done is None:
            return resp
        sent, t_first_tok[0] = done
        t_last = time.perf_counter()
        srv.count_generated(gt, sent)
        if fault == "no_done":
            await resp.write_eof()
            return resp
        text = srv.think_text(0, sent) if think_in_text else srv.words(n_reason, sent)
        tail = b""
        if "msg" in started:
            oi = 1 if srv.reasoning_tokens and not think_in_text else 0
            tail += ev("response.output_text.done", {"item_id": mid, "output_index": oi, "content_index": 0, "text": text})
            tail += ev("response.content_part.done", {"item_id": mid, "output_index": oi, "content_index": 0,
                                                      "part": {"type": "output_text", "text": text, "annotations": []}})
            tail += ev("response.output_item.done", {"output_index": oi, "item": response("completed", sent, text)["output"][0]})
        end_name = "response.completed" if final_status == "completed" else "response.incomplete"
        end: dict[str, Any] = {"response": response(final_status, sent, text)}
        if llama:
            end["timings"] = llamacpp_wire.timings(n_prompt=len(ids), cached=cached, n=sent, t0=t0,
                                                   t_first=t_first_tok[0], t_last=t_last)
        tail += ev(end_name, end)
        await resp.write(tail)
        await resp.write_eof()
    return resp
