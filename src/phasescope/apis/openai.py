"""OpenAI-compatible ``/v1/completions`` (api ``openai``) and ``/v1/chat/completions`` (api ``chat``).

Streaming is SSE with ``stream_options.include_usage`` so the server's own token counts arrive
in a final ``choices: []`` chunk (vLLM, SGLang, TGI, llama.cpp, Ollama ``/v1``; see vLLM 0.33
``vllm/entrypoints/openai/chat_completion/protocol.py`` and the OpenAI API reference). What counts as a token event:

* a chat delta with non-empty ``content`` or ``tool_calls`` → ``content``; with non-empty
  ``reasoning`` (vLLM ≥0.11, Ollama) or ``reasoning_content`` (SGLang, llama.cpp) → ``reasoning``
  (reasoning tokens are output tokens, so they start TTFT as in ``vllm bench serve`` 0.33's
  ``_choice_has_streamed_output``; their count is reported separately);
* a completion choice with non-empty ``text`` → ``content``;
* content or text inside a ``<think>…</think>`` span (a server that does not split reasoning out:
  llama.cpp ``--reasoning-format none``, no ``--reasoning-parser``) → ``reasoning``
  (:mod:`phasescope.apis._think`); the first answer event after it starts TTFO;
* the role-only opening delta (``{"role":"assistant","content":""|null}``) → ``role``, never the
  first token (the bug of vllm#3759); empty deltas/finish chunks → ``empty``; the usage-only chunk
  → ``usage``.

Tokens per event: known from cumulative ``usage`` on every chunk (vLLM
``continuous_usage_stats``) or from ``token_ids`` when the server returns them; otherwise
``None`` and the total from ``usage.completion_tokens`` is spread over events by
:func:`phasescope.measure.derive.itl_s`. llama.cpp's ``timings`` on the last chunk are kept as
server-side timings. A ``data: {"error": ...}`` event mid-stream ends the request with
``server_error_event`` (vLLM and SGLang still send ``[DONE]`` after it).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import TRANSPORT, error_message_of
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._json import fetch_json, json_object
from phasescope.apis._records import add_event, fill_fallback_counts, llamacpp_timings, new_record, set_count
from phasescope.apis._think import DONE, WATCH, ThinkSpans
from phasescope.apis.base import GenRequest, Target, add_engine_fields
from phasescope.apis.spec import ApiSpec, Detected, Prober, engine_from_metrics
from phasescope.measure.records import EVENT_CONTENT, Event, RequestRecord


class _OpenAI(Protocol):
    chat = False

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        super().__init__(target, req, rec)
        self.path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self._cum: list[tuple[int, int]] = []  # (event index, cumulative completion_tokens)
        self._finish_seen = False
        self._reasoning_events = 0
        self._text: list[str] = []  # the reply's text, kept only with req.keep_text
        self._think = ThinkSpans()  # <think> spans inside content: those events are reasoning

    # -- request --------------------------------------------------------------------------
    def body(self) -> dict[str, Any]:
        req, tgt = self.req, self.target
        b: dict[str, Any] = {}
        if tgt.model:
            b["model"] = tgt.model
        if self.chat:
            b["messages"] = req.messages if req.messages is not None else [{"role": "user", "content": req.prompt}]
        else:
            b["prompt"] = req.prompt_token_ids if req.prompt_token_ids is not None else req.prompt
        b["max_tokens"] = req.max_tokens
        b["temperature"] = req.temperature
        b["stream"] = req.stream
        if req.stream:
            b["stream_options"] = {"include_usage": True}
        add_engine_fields(b, req, tgt)  # vLLM/SGLang/llama.cpp extensions; others ignore unknown fields
        return b

    # -- streamed messages --------------------------------------------------------------------
    def on_message(self, obj: Any, t_ns: int) -> None:
        # The common event first (runs once per token, issue 22): one choice carrying text, no
        # usage, timings, finish or token ids. Anything else takes the full path below, which
        # gives the same Event for this case.
        if type(obj) is dict and "usage" not in obj and "timings" not in obj:
            choices = obj.get("choices")
            if type(choices) is list and choices:
                ch = choices[0]
                if type(ch) is dict and not ch.get("finish_reason") and "token_ids" not in ch:
                    if self.chat or "delta" in ch:
                        d = ch.get("delta")
                        text = d.get("content") if type(d) is dict else None
                    else:
                        text = ch.get("text")
                    if type(text) is str and text:
                        if self.req.keep_text:
                            self._text.append(text)
                        th = self._think  # ThinkSpans.quiet, inlined: the answer's events pass with one test
                        st = th.state
                        kind = EVENT_CONTENT if st == DONE or (st == WATCH and not th.carry and "<" not in text) \
                            else th.kind(text, self.rec.events)
                        self.rec.events.append(Event(t_ns, kind, None, len(text)))
                        return
        self._on_message(obj, t_ns)

    def _on_message(self, obj: Any, t_ns: int) -> None:
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (not an object)")
        if "error" in obj and not obj.get("choices"):
            msg = error_message_of(obj) or "unknown error"
            raise E.ServerStreamError(f"{self.target.display_url}{self.path}: server error mid-stream: {msg}")
        choices = obj.get("choices")
        if choices is None:
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (no 'choices')")
        usage = obj.get("usage")
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and choices:
                self._cum.append((len(self.rec.events), ct))
            self._take_usage(usage)
        if isinstance(obj.get("timings"), dict):
            self.rec.server = llamacpp_timings(obj["timings"])
        if not choices:
            add_event(self.rec, t_ns, "usage" if usage else "empty", None, 0)
            return
        ch = choices[0]
        if not isinstance(ch, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed event (bad choice)")
        if ch.get("finish_reason"):
            self.rec.finish_reason = str(ch["finish_reason"])
            self._finish_seen = True
        kind, n_chars = self._classify(ch)
        n_tokens: int | None = None
        ids = ch.get("token_ids")
        if isinstance(ids, list) and ids:
            n_tokens = len(ids)
            if kind == "empty":
                kind = "content"  # token ids without printable text (special tokens) are tokens
        add_event(self.rec, t_ns, kind, n_tokens if kind in ("content", "reasoning") else None, n_chars)

    def _classify(self, ch: dict[str, Any]) -> tuple[str, int]:
        if self.chat or "delta" in ch:
            d = ch.get("delta") or {}
            if not isinstance(d, dict):
                return "empty", 0
            content = d.get("content")
            if content or d.get("tool_calls"):
                n = len(content) if isinstance(content, str) else 0
                if isinstance(content, str) and content:
                    if self.req.keep_text:
                        self._text.append(content)
                    return self._think.kind(content, self.rec.events), n
                return "content", n
            r = d.get("reasoning") or d.get("reasoning_content")
            if r:
                self._reasoning_events += 1
                return "reasoning", len(r) if isinstance(r, str) else 0
            if "role" in d:
                return "role", 0
            return "empty", 0
        text = ch.get("text")
        if text:
            if isinstance(text, str):
                if self.req.keep_text:
                    self._text.append(text)
                return self._think.kind(text, self.rec.events), len(text)
            return "content", 0  # a non-string text
        return "empty", 0

    def _take_usage(self, usage: dict[str, Any]) -> None:
        rec = self.rec
        set_count(rec, "prompt_tokens", usage.get("prompt_tokens"), "usage")
        set_count(rec, "output_tokens", usage.get("completion_tokens"), "usage")
        ptd = usage.get("prompt_tokens_details")
        if isinstance(ptd, dict) and isinstance(ptd.get("cached_tokens"), int):
            rec.cached_prompt_tokens = ptd["cached_tokens"]
        ctd = usage.get("completion_tokens_details")
        if isinstance(ctd, dict) and isinstance(ctd.get("reasoning_tokens"), int):
            rec.reasoning_tokens = ctd["reasoning_tokens"]
        elif isinstance(usage.get("reasoning_tokens"), int) and not isinstance(usage["reasoning_tokens"], bool):
            rec.reasoning_tokens = usage["reasoning_tokens"]  # SGLang's top-level count

    def on_eof(self) -> None:
        # A few servers end without [DONE]; a stream that said finish_reason is complete.
        if self._finish_seen:
            self.done = True
            return
        super().on_eof()

    def finish(self) -> None:
        rec = self.rec
        if len(self._cum) >= 2:
            # usage on every chunk (vLLM continuous_usage_stats): per-event token counts
            prev = 0
            for idx, ct in self._cum:
                ev = rec.events[idx]
                if ev.kind in ("content", "reasoning") and ev.n_tokens is None:
                    ev.n_tokens = max(0, ct - prev)
                prev = ct
        if rec.reasoning_tokens is None and (self._reasoning_events or self._think.first >= 0) and \
                any(e.kind == "reasoning" for e in rec.events):
            rec.reasoning_tokens = sum(e.n_tokens or 1 for e in rec.events if e.kind == "reasoning")
        if rec.server and rec.output_tokens is None:
            set_count(rec, "output_tokens", rec.server.get("predicted_n"), "server")
        if rec.server and rec.prompt_tokens is None and rec.server.get("prompt_n") is not None:
            set_count(rec, "prompt_tokens", int(rec.server["prompt_n"]) + int(rec.server.get("cache_n") or 0), "server")
        if rec.server and rec.cached_prompt_tokens is None and rec.server.get("cache_n") is not None:
            rec.cached_prompt_tokens = int(rec.server["cache_n"])
        fill_fallback_counts(rec, self.req)
        if self.req.keep_text:
            rec.tags["reply_text"] = "".join(self._text)

    # -- non-streamed body --------------------------------------------------------------------
    def on_body(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed response (not an object)")
        if "error" in obj and not obj.get("choices"):
            raise E.ServerStreamError(f"{self.target.display_url}{self.path}: server error: {error_message_of(obj)}")
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise E.MalformedEventError(f"{self.target.display_url}{self.path}: malformed response (no 'choices')")
        if choices and isinstance(choices[0], dict) and choices[0].get("finish_reason"):
            self.rec.finish_reason = str(choices[0]["finish_reason"])
        if self.req.keep_text and choices and isinstance(choices[0], dict):
            msg = choices[0].get("message") if self.chat else None
            t = msg.get("content") if isinstance(msg, dict) else choices[0].get("text")
            if isinstance(t, str):
                self._text.append(t)
        if isinstance(obj.get("usage"), dict):
            self._take_usage(obj["usage"])
        if isinstance(obj.get("timings"), dict):
            self.rec.server = llamacpp_timings(obj["timings"])


class _Completions(_OpenAI):
    chat = False


class _Chat(_OpenAI):
    chat = True


async def send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """One request; ``target.api`` ``chat`` selects ``/v1/chat/completions``, anything else
    ``/v1/completions``. Never raises for server-side failures (see :mod:`phasescope.apis._http`)."""
    cls = _Chat if target.api == "chat" else _Completions
    rec = new_record(target, req)
    return await exchange(session, cls(target, req, rec))


async def send_chat(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """``/v1/chat/completions`` whatever ``target.api`` says."""
    rec = new_record(target, req)
    rec.api = "chat"
    return await exchange(session, _Chat(target, req, rec))


#: ``GET /v1/models``: the served models (vLLM adds ``max_model_len``, llama.cpp ``meta``); also the
#: cheap GET that opens pooled connections before a run (:func:`phasescope.apis.warm_up`)
MODELS_PATH = "/v1/models"

#: engines whose ``/v1/completions`` take a list of token ids as the prompt (and serve ``/tokenize``)
TOKEN_ID_ENGINES = ("vllm", "sglang", "llamacpp")


async def probe(p: Prober) -> Detected | None:
    """``GET /v1/models`` → ``{"data": [...]}``: an OpenAI-compatible server; ``owned_by`` (``vllm``,
    ``sglang``, ``llamacpp``) and the ``GET /metrics`` family prefixes (the one table in
    :mod:`phasescope.apis.engines`) name the engine, ``GET /version`` its version (vLLM, SGLang)."""
    listing = await p.models()
    if not listing.ok:
        return None
    engine = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}.get(str(listing.owned_by or "").lower())
    version = None
    st, _, mtext = await p.optional("/metrics")  # optional: a stall here costs its timeout, never the run
    if st == 200:
        engine = engine_from_metrics(mtext) or engine
    if engine in ("vllm", "sglang", None):
        st, vobj, _ = await p.optional("/version")
        if st == 200 and isinstance(vobj, dict) and vobj.get("version"):
            version = str(vobj["version"])
    return Detected(engine or "openai", "openai", listing.models, version=version, model_meta=listing.meta,
                    has_tokenize=engine in TOKEN_ID_ENGINES)


#: ``--api openai`` (``/v1/completions``) and ``--api chat`` (``/v1/chat/completions``)
SPECS = (
    ApiSpec("openai", "/v1/completions", send, warm_path=MODELS_PATH, chat_api="chat",
            takes_token_ids=lambda t: t.engine in TOKEN_ID_ENGINES, probe=probe, probe_rank=30,
            probe_label="/v1/models (OpenAI-compatible)", url_suffixes=("/v1/completions", "/v1")),
    ApiSpec("chat", "/v1/chat/completions", send_chat, warm_path=MODELS_PATH,
            url_suffixes=("/v1/chat/completions",)),
)


async def list_models(session: aiohttp.ClientSession, target: Target, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """``GET /v1/models`` ``data`` entries (vLLM adds ``max_model_len``); ``[]`` when it does not answer."""
    d = await json_object(session, target.base_url + MODELS_PATH, headers=target.headers(), timeout_s=timeout_s)
    data = d.get("data") if isinstance(d, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


async def metrics_info_labels(session: aiohttp.ClientSession, target: Target,
                              timeout_s: float = 5.0) -> dict[str, dict[str, str]]:
    """Labels of the info-style gauges in ``/metrics`` (``vllm:cache_config_info`` and any other
    ``*_info`` family whose value is 1): family name → its label set. ``{}`` when /metrics does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        status, _, text = await fetch_json(session, target.base_url + "/metrics", headers=target.headers(),
                                           timeout_s=timeout_s)
    except TRANSPORT:
        return {}
    if status != 200:
        return {}
    out: dict[str, dict[str, str]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            if not fam.name.endswith("_info"):
                continue
            for s in fam.samples:
                labels = {k: v for k, v in s.labels.items() if k not in ("engine", "model_name")}
                out.setdefault(fam.name, {}).update(labels)
    except ValueError:
        return out
    return out
