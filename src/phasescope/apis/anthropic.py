"""Anthropic Messages ``POST /v1/messages`` (api ``anthropic``), streamed as server-sent events.

Request: ``model``, ``max_tokens``, ``messages`` (``system`` turns moved to the top-level ``system``),
``temperature``, ``stream``; the key goes as ``x-api-key`` (Anthropic) and ``Authorization: Bearer``
(llama-server and vLLM read either), with ``anthropic-version: 2023-06-01``.

The stream (Anthropic's "Streaming Messages" docs; llama.cpp ``tools/server/server-task.cpp``
``to_json_anthropic`` / ``to_json_anthropic_stream`` at 0c1e570) is ``event: NAME`` + ``data: {"type":
NAME, ...}`` blocks; the client reads ``type`` from the data:

* ``message_start`` — ``message.usage``: ``input_tokens`` (the prompt *not* read from cache),
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``; the prompt length is their sum
  (llama.cpp sends ``input_tokens = n_prompt − n_cached`` and ``cache_read_input_tokens = n_cached``).
  Anthropic sends it before the first token; llama-server with the first token. Not a token → ``role``.
* ``content_block_start`` / ``content_block_stop`` / ``ping`` → ``empty`` (never a token, never keeps
  the between-tokens clock alive).
* ``content_block_delta``: ``delta.type`` ``text_delta`` (``text``) and ``input_json_delta``
  (``partial_json``, a tool call) → ``content``; ``thinking_delta`` (``thinking``) → ``reasoning``;
  ``signature_delta`` → ``empty``. Text inside a ``<think>…</think>`` span at the start of the
  answer (a server that does not split reasoning out) is ``reasoning`` (:mod:`phasescope.apis._think`).
* ``message_delta`` — ``delta.stop_reason`` (``max_tokens`` → ``length``; ``end_turn``,
  ``stop_sequence`` → ``stop``; ``tool_use`` → ``tool_calls``) and ``usage.output_tokens``: the output
  count, *cumulative*, arriving only here (Anthropic may repeat ``input_tokens`` and the cache counts
  in it; then they replace message_start's). → ``usage``.
* ``message_stop`` — the end (there is no ``[DONE]``).
* errors: Anthropic's ``event: error`` / ``data: {"type": "error", "error": {"type", "message"}}``;
  llama-server's ``event: error`` carries its bare error object (``{"code", "message", "type"}``, no
  ``error`` key) and a ``data: {"error": ...}`` form is read too → ``server_error_event``.
  An error before the stream starts is an HTTP status with ``{"type": "error", "error": {...}}``
  (mapped by :mod:`phasescope.apis._errors`).
* unknown event types are skipped (Anthropic: "we may add new event types").

Prompts are text through the server's chat template (the Messages API takes no token ids); the
achieved prompt length is the server's count above.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import error_message_of
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._think import ThinkSpans
from phasescope.apis._records import add_event, fill_fallback_counts, new_record, set_count
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.spec import ApiSpec, Detected, Prober
from phasescope.measure.records import RequestRecord

#: the API version header every Messages request carries (the one Anthropic documents as current)
ANTHROPIC_VERSION = "2023-06-01"
#: ``stop_reason`` → phasescope's ``finish_reason`` (OpenAI's words)
STOP_REASONS = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "pause_turn": "stop", "refusal": "content_filter"}
#: engines known to read ``ignore_eos`` through their Messages endpoint's body (Anthropic's own API
#: refuses unknown fields; llama-server's converter drops it, so its outputs may stop at EOS)
_IGNORE_EOS_ENGINES = ("vllm", "sglang")
#: the event types of a healthy stream (anything else with ``message`` and no ``type`` we know is an error object)
_KNOWN = frozenset(("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                    "message_delta", "message_stop", "ping"))


def _messages(req: GenRequest) -> tuple[str | None, list[dict[str, Any]]]:
    """(system text, the turns) for the Messages API: ``system`` turns lifted to the top level."""
    if req.messages is None:
        return None, [{"role": "user", "content": req.prompt}]
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in req.messages:
        if m.get("role") == "system":
            c = m.get("content")
            system.append(c if isinstance(c, str) else str(c))
        else:
            turns.append({"role": m.get("role", "user"), "content": m.get("content", "")})
    return ("\n".join(system) if system else None), turns


class _Messages(Protocol):
    path = "/v1/messages"
    framing = "sse"

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        super().__init__(target, req, rec)
        self.extra_headers = {"anthropic-version": ANTHROPIC_VERSION}
        if target.api_key:
            self.extra_headers["x-api-key"] = target.api_key
        self._stop_seen = False
        self._reasoning_events = 0
        self._text: list[str] = []
        self._think = ThinkSpans()  # <think> spans inside text deltas (a server that does not split reasoning out)

    def body(self) -> dict[str, Any]:
        req, tgt = self.req, self.target
        system, turns = _messages(req)
        b: dict[str, Any] = {"model": tgt.model or "default", "max_tokens": req.max_tokens, "messages": turns,
                             "temperature": req.temperature, "stream": req.stream}
        if system is not None:
            b["system"] = system
        if req.ignore_eos and tgt.engine in _IGNORE_EOS_ENGINES:
            b["ignore_eos"] = True
        b.update(req.extra_body)
        return b

    def _error(self, obj: dict[str, Any], during: str) -> E.ServerStreamError:
        msg = error_message_of(obj) or "unknown error"
        return E.ServerStreamError(f"{self.target.display_url}{self.path}: server error{during}: {msg}")

    def _usage(self, u: Any, *, output: bool = True) -> None:
        if not isinstance(u, dict):
            return
        rec = self.rec
        parts = [u.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
        if isinstance(parts[0], int):
            set_count(rec, "prompt_tokens", sum(p for p in parts if isinstance(p, int)), "usage")
        if isinstance(parts[1], int):
            rec.cached_prompt_tokens = parts[1]
        if output:
            set_count(rec, "output_tokens", u.get("output_tokens"), "usage")

    def on_message(self, obj: Any, t_ns: int) -> None:
        if type(obj) is dict and obj.get("type") == "content_block_delta":  # the common event first
            d = obj.get("delta")
            if type(d) is dict:
                dt = d.get("type")
                if dt == "text_delta":
                    text = d.get("text") or ""
                    if self.req.keep_text:
                        self._text.append(text)
                    if not text:
                        add_event(self.rec, t_ns, "empty", None, 0)
                        return
                    th = self._think
                    add_event(self.rec, t_ns, "content" if th.quiet(text) else th.kind(text, self.rec.events),
                              None, len(text))
                    return
                if dt == "thinking_delta":
                    text = d.get("thinking") or ""
                    if text:
                        self._reasoning_events += 1
                    add_event(self.rec, t_ns, "reasoning" if text else "empty", None, len(text))
                    return
                if dt == "input_json_delta":
                    pj = d.get("partial_json") or ""
                    add_event(self.rec, t_ns, "content" if pj else "empty", None, len(pj))
                    return
            add_event(self.rec, t_ns, "empty", None, 0)  # signature_delta and deltas to come
            return
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (not an object)")
        kind = obj.get("type")
        if kind == "error" or "error" in obj or (kind not in _KNOWN and isinstance(obj.get("message"), str) and
                                                 ("code" in obj or str(kind).endswith("error"))):
            raise self._error(obj, " mid-stream")
        if kind == "message_start":
            msg = obj.get("message")
            if isinstance(msg, dict):
                self._usage(msg.get("usage"), output=False)  # its output_tokens (0 or 1) is not the answer's
            add_event(self.rec, t_ns, "role", None, 0)
        elif kind == "message_delta":
            d = obj.get("delta")
            if isinstance(d, dict) and d.get("stop_reason"):
                self.rec.finish_reason = STOP_REASONS.get(str(d["stop_reason"]), str(d["stop_reason"]))
                self._stop_seen = True
            self._usage(obj.get("usage"))
            add_event(self.rec, t_ns, "usage", None, 0)
        elif kind == "message_stop":
            add_event(self.rec, t_ns, "empty", None, 0)
            self.done = True
        elif kind is None:
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (no 'type')")
        else:  # content_block_start/stop, ping, and event types to come
            add_event(self.rec, t_ns, "empty", None, 0)

    def on_eof(self) -> None:
        if self._stop_seen:  # message_delta said why it stopped: the answer is complete
            self.done = True
            return
        super().on_eof()

    def on_body(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed response (not an object)")
        if obj.get("type") == "error" or "error" in obj:
            raise self._error(obj, "")
        self._usage(obj.get("usage"))
        if obj.get("stop_reason"):
            self.rec.finish_reason = STOP_REASONS.get(str(obj["stop_reason"]), str(obj["stop_reason"]))
        if self.req.keep_text and isinstance(obj.get("content"), list):
            self._text += [b.get("text", "") for b in obj["content"] if isinstance(b, dict) and b.get("type") == "text"]

    def finish(self) -> None:
        rec = self.rec
        if rec.reasoning_tokens is None and (self._reasoning_events or self._think.first >= 0) and \
                any(e.kind == "reasoning" for e in rec.events):
            rec.reasoning_tokens = sum(e.n_tokens or 1 for e in rec.events if e.kind == "reasoning")
        fill_fallback_counts(rec, self.req)
        if self.req.keep_text:
            rec.tags["reply_text"] = "".join(self._text)


async def send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """One ``/v1/messages`` request; never raises for server-side failures."""
    return await exchange(session, _Messages(target, req, new_record(target, req)))


async def probe(p: Prober) -> Detected | None:
    """``GET /v1/models`` in Anthropic's shape (``{"data": [{"type": "model", "id", "display_name"}],
    "has_more", "first_id", "last_id"}``, Anthropic's "List Models" reference): a server speaking the
    Messages API only. OpenAI-shaped listings (``"object": "list"``) are left to the OpenAI probe."""
    st, obj, _ = await p.get("/v1/models")
    if not (st == 200 and isinstance(obj, dict) and isinstance(obj.get("data"), list) and "has_more" in obj
            and "object" not in obj):
        return None
    data = [m for m in obj["data"] if isinstance(m, dict)]
    if not data or not all(m.get("type") == "model" for m in data):
        return None
    from phasescope.redact import register_tainted

    models = [str(m["id"]) for m in data if m.get("id")]
    for m in models:
        register_tainted(m)
    return Detected("anthropic", "anthropic", models)


#: ``--api anthropic``: the Messages API (text prompts through the chat template; the server's counts)
SPECS = (
    ApiSpec("anthropic", "/v1/messages", send, warm_path="/v1/models", tokenizer=True, probe=probe, probe_rank=25,
            probe_label="/v1/models (Anthropic)", url_suffixes=("/v1/messages",)),
)
