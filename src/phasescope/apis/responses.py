"""OpenAI Responses ``POST /v1/responses`` (api ``responses``), streamed as server-sent events.

Request: ``model``, ``input`` (the prompt text, or the conversation as ``[{"role", "content"}]``),
``max_output_tokens``, ``temperature``, ``stream``; ``ignore_eos`` on vLLM, SGLang and llama-server
(llama-server copies the body into its chat request, ``server_chat_convert_responses_to_chatcmpl``).

The stream (OpenAI API reference "Streaming events" of Responses; vLLM ``vllm/entrypoints/openai/
responses``; llama.cpp ``tools/server/server-task.cpp`` ``to_json_oaicompat_resp*`` at 0c1e570) is
``event: NAME`` + ``data: {"type": NAME, ...}`` blocks (OpenAI and vLLM add ``sequence_number``);
the client reads ``type``:

* ``response.created``, ``response.in_progress``, ``response.output_item.added``/``.done``,
  ``response.content_part.added``/``.done``, ``response.output_text.done`` → ``empty`` (not tokens;
  llama-server sends ``created`` and ``in_progress`` with the first token, OpenAI and vLLM before it).
* ``response.output_text.delta`` (``delta``) and ``response.function_call_arguments.delta`` →
  ``content``; ``response.reasoning_text.delta`` (vLLM, llama-server) and
  ``response.reasoning_summary_text.delta`` (OpenAI) → ``reasoning``. Output text inside a
  ``<think>…</think>`` span at the start (no reasoning parser on the server) is ``reasoning``
  (:mod:`phasescope.apis._think`).
* ``response.completed`` / ``response.incomplete`` — the end (no ``[DONE]``): ``response.usage``
  ``input_tokens`` (cached included), ``input_tokens_details.cached_tokens``, ``output_tokens``,
  ``output_tokens_details.reasoning_tokens``: the counts arrive only here. ``finish_reason``:
  ``length`` when ``incomplete_details.reason`` is ``max_output_tokens`` or the output reached
  ``max_output_tokens`` (llama-server says ``completed`` either way), else ``stop``. llama-server adds
  its ``timings`` to this event.
* errors: ``{"type": "error", "message", "code"}`` (OpenAI, vLLM), ``response.failed`` with
  ``response.error.message``, and llama-server's ``data: {"error": {...}}`` → ``server_error_event``.
* unknown event types are skipped.

Prompts are text through the server's chat template (no token ids); the achieved prompt length is
the server's ``input_tokens``.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import error_message_of
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._think import ThinkSpans
from phasescope.apis._records import add_event, fill_fallback_counts, llamacpp_timings, new_record, set_count
from phasescope.apis.base import GenRequest, Target, add_engine_fields
from phasescope.apis.spec import ApiSpec, Detected, Prober
from phasescope.measure.records import RequestRecord

#: engines whose Responses endpoint reads ``ignore_eos`` (OpenAI's own API refuses unknown fields)
_IGNORE_EOS_ENGINES = ("vllm", "sglang", "llamacpp")
_CONTENT = frozenset(("response.output_text.delta", "response.function_call_arguments.delta"))
_REASONING = frozenset(("response.reasoning_text.delta", "response.reasoning_summary_text.delta"))
_END = frozenset(("response.completed", "response.incomplete"))


class _Responses(Protocol):
    path = "/v1/responses"
    framing = "sse"

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        super().__init__(target, req, rec)
        self._reasoning_events = 0
        self._text: list[str] = []
        self._think = ThinkSpans()  # <think> spans inside output_text deltas (no reasoning parser on the server)

    def body(self) -> dict[str, Any]:
        req, tgt = self.req, self.target
        b: dict[str, Any] = {}
        if tgt.model:
            b["model"] = tgt.model
        b["input"] = ([{"role": m.get("role", "user"), "content": m.get("content", "")} for m in req.messages]
                      if req.messages is not None else req.prompt)
        b["max_output_tokens"] = req.max_tokens
        b["temperature"] = req.temperature
        b["stream"] = req.stream
        add_engine_fields(b, req, tgt, ignore_eos=tgt.engine in _IGNORE_EOS_ENGINES)
        return b

    def _error(self, obj: dict[str, Any], during: str) -> E.ServerStreamError:
        msg = error_message_of(obj)
        if msg is None and isinstance(obj.get("response"), dict):
            msg = error_message_of(obj["response"])
        return E.ServerStreamError(f"{self.target.display_url}{self.path}: server error{during}: {msg or 'unknown error'}")

    def on_message(self, obj: Any, t_ns: int) -> None:
        kind = obj.get("type") if type(obj) is dict else None
        if kind in _CONTENT:  # the common event first
            d = obj.get("delta")
            text = d if isinstance(d, str) else ""
            if not text:
                add_event(self.rec, t_ns, "empty", None, 0)
                return
            if kind == "response.output_text.delta":
                if self.req.keep_text:
                    self._text.append(text)
                th = self._think
                add_event(self.rec, t_ns, "content" if th.quiet(text) else th.kind(text, self.rec.events),
                          None, len(text))
                return
            add_event(self.rec, t_ns, "content", None, len(text))
            return
        if kind in _REASONING:
            d = obj.get("delta")
            text = d if isinstance(d, str) else ""
            if text:
                self._reasoning_events += 1
            add_event(self.rec, t_ns, "reasoning" if text else "empty", None, len(text))
            return
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (not an object)")
        if kind in ("error", "response.failed") or "error" in obj and kind is None:
            raise self._error(obj, " mid-stream")
        if kind in _END:
            self._final(obj.get("response"))
            if isinstance(obj.get("timings"), dict):
                self.rec.server = llamacpp_timings(obj["timings"])
            add_event(self.rec, t_ns, "usage", None, 0)
            self.done = True
            return
        if kind is None:
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (no 'type')")
        add_event(self.rec, t_ns, "empty", None, 0)

    def _final(self, resp: Any) -> None:
        if not isinstance(resp, dict):
            return
        rec = self.rec
        u = resp.get("usage")
        if isinstance(u, dict):
            set_count(rec, "prompt_tokens", u.get("input_tokens"), "usage")
            set_count(rec, "output_tokens", u.get("output_tokens"), "usage")
            itd, otd = u.get("input_tokens_details"), u.get("output_tokens_details")
            if isinstance(itd, dict) and isinstance(itd.get("cached_tokens"), int):
                rec.cached_prompt_tokens = itd["cached_tokens"]
            if isinstance(otd, dict) and isinstance(otd.get("reasoning_tokens"), int):
                rec.reasoning_tokens = otd["reasoning_tokens"]
        inc = resp.get("incomplete_details")
        capped = isinstance(inc, dict) and inc.get("reason") == "max_output_tokens"
        if capped or (rec.output_tokens is not None and self.req.max_tokens and rec.output_tokens >= self.req.max_tokens):
            rec.finish_reason = "length"
        elif resp.get("status") in ("completed", "incomplete"):
            rec.finish_reason = "stop"

    def on_body(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed response (not an object)")
        if obj.get("error") or obj.get("status") == "failed":
            raise self._error(obj, "")
        self._final(obj)
        if self.req.keep_text and isinstance(obj.get("output"), list):
            for item in obj["output"]:
                if isinstance(item, dict) and item.get("type") == "message":
                    self._text += [c.get("text", "") for c in item.get("content") or []
                                   if isinstance(c, dict) and c.get("type") == "output_text"]

    def finish(self) -> None:
        rec = self.rec
        if rec.reasoning_tokens is None and (self._reasoning_events or self._think.first >= 0) and \
                any(e.kind == "reasoning" for e in rec.events):
            rec.reasoning_tokens = sum(e.n_tokens or 1 for e in rec.events if e.kind == "reasoning")
        if rec.server and rec.cached_prompt_tokens is None and rec.server.get("cache_n") is not None:
            rec.cached_prompt_tokens = int(rec.server["cache_n"])
        fill_fallback_counts(rec, self.req)
        if self.req.keep_text:
            rec.tags["reply_text"] = "".join(self._text)


async def send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """One ``/v1/responses`` request; never raises for server-side failures."""
    return await exchange(session, _Responses(target, req, new_record(target, req)))


async def probe(p: Prober) -> Detected | None:
    """An OpenAI-shaped ``GET /v1/models`` on a server without ``/v1/completions`` and
    ``/v1/chat/completions`` (a GET on each answers 404: no such route; a server that has them
    answers 405, method not allowed) but with ``/v1/responses`` (a GET answers anything but 404)."""
    st, obj, _ = await p.get("/v1/models")
    if not (st == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list) and "has_more" not in obj):
        return None
    for path in ("/v1/completions", "/v1/chat/completions"):
        got, _, _ = await p.optional(path)
        if got != 404:
            return None
    got, _, _ = await p.optional("/v1/responses")
    if got is None or got == 404:
        return None
    listing = await p.models()
    return Detected("openai", "responses", listing.models, model_meta=listing.meta)


#: ``--api responses``: the Responses API (text prompts through the chat template; the server's counts)
SPECS = (
    ApiSpec("responses", "/v1/responses", send, warm_path="/v1/models", probe=probe, probe_rank=29,
            probe_label="/v1/responses (OpenAI Responses)", url_suffixes=("/v1/responses",)),
)
