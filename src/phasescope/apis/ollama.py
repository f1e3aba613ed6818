"""Ollama native ``/api/generate`` (api ``ollama``) and ``/api/chat`` (NDJSON or one JSON body).

One JSON object per line; text in ``response`` (generate) or ``message.content`` (chat),
reasoning in ``thinking`` / ``message.thinking``; the last object has ``done: true``,
``done_reason`` and the metrics, all in **nanoseconds** and all ``omitempty`` (a zero value makes
the key disappear, so a missing key means 0/unknown, never an error):

* ``load_duration`` — scheduling + model load → ``server.load_s`` (reported as cold start, kept
  out of prefill);
* ``prompt_eval_count`` — since Ollama 0.30.1 the **full** prompt including cached tokens;
  ``prompt_eval_duration`` covers only the evaluated (non-cached) part, and Ollama does not expose
  the cached count, so ``prompt_eval_count / prompt_eval_duration`` overstates prefill speed on a
  cache hit. ``server.prompt_n`` (the evaluated count behind the server prefill rate) is therefore
  set only for requests whose prompt could not have been cached — those built with a fresh nonce
  (``req.tags["fresh_prompt"]``, set by :mod:`phasescope.prompting`); otherwise it is ``None``
  and no server prefill rate is claimed;
* ``eval_count`` / ``eval_duration`` — generated tokens and end of prompt → last token
  (= llama-server ``predicted_n``/``predicted_ms``).

Output length: ``options.num_predict`` caps it; Ollama has no ``ignore_eos``, so a model can stop
early (recorded as ``stopped_early``). Errors before output: HTTP status + ``{"error": "..."}``;
after output started: a final line ``{"error": "..."}``. Source: Ollama v0.33 ``docs/api.md`` and ``server/routes.go``.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._json import json_object
from phasescope.apis._records import add_event, fill_fallback_counts, new_record, set_count
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.spec import ApiSpec, Detected, Prober
from phasescope.measure.records import RequestRecord


class _Ollama(Protocol):
    framing = "ndjson"
    chat = False

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        super().__init__(target, req, rec)
        self.path = "/api/chat" if self.chat else "/api/generate"
        self._text: list[str] = []  # the reply's text, kept only with req.keep_text

    def body(self) -> dict[str, Any]:
        req = self.req
        b: dict[str, Any] = {"model": self.target.model, "stream": req.stream}
        if self.chat:
            b["messages"] = req.messages if req.messages is not None else [{"role": "user", "content": req.prompt}]
        else:
            b["prompt"] = req.prompt
            b["raw"] = True  # no template: the prompt length is what we built
        b["options"] = {"num_predict": req.max_tokens, "temperature": req.temperature}
        b.update(req.extra_body)
        return b

    def on_message(self, obj: Any, t_ns: int) -> None:
        obj = self.message(obj, "line")
        if obj.get("done"):
            self._final(obj)
            add_event(self.rec, t_ns, "usage", None, 0)
            self.done = True
            return
        if self.chat:
            msg = obj.get("message") or {}
            text, think = msg.get("content") or "", msg.get("thinking") or ""
        else:
            text, think = obj.get("response") or "", obj.get("thinking") or ""
        if text:
            if self.req.keep_text:
                self._text.append(text)
            add_event(self.rec, t_ns, "content", None, len(text))
        elif think:
            add_event(self.rec, t_ns, "reasoning", None, len(think))
        else:
            add_event(self.rec, t_ns, "empty", None, 0)

    def _final(self, obj: dict[str, Any]) -> None:
        rec = self.rec
        ns = lambda k: (obj.get(k) / 1e9) if isinstance(obj.get(k), (int, float)) else None  # noqa: E731
        pec = obj.get("prompt_eval_count")
        ec = obj.get("eval_count")
        fresh = bool(self.req.tags.get("fresh_prompt"))
        load_s, pe_s, ev_s, total_s = ns("load_duration"), ns("prompt_eval_duration"), ns("eval_duration"), ns("total_duration")
        rec.server = {
            "source": "ollama",
            "load_s": load_s or 0.0,
            "prefill_s": pe_s,
            "decode_s": ev_s,
            "total_s": total_s,
            # evaluated prompt tokens are only known when the prompt could not have been cached
            "prompt_n": pec if (fresh and isinstance(pec, int)) else None,
            "predicted_n": ec if isinstance(ec, int) else 0,
            "cache_n": None,
            "ttft_s": ((load_s or 0.0) + pe_s) if pe_s is not None else None,
            "raw": {k: obj.get(k) for k in ("total_duration", "load_duration", "prompt_eval_count",
                                            "prompt_eval_duration", "eval_count", "eval_duration", "done_reason") if k in obj},
        }
        set_count(rec, "prompt_tokens", pec, "server")
        set_count(rec, "output_tokens", ec if isinstance(ec, int) else 0, "server")
        if obj.get("done_reason"):
            rec.finish_reason = str(obj["done_reason"])

    def on_body(self, obj: Any) -> None:
        obj = self.message(obj, "response")
        self._final(obj)
        if self.req.keep_text:
            m = obj.get("message") if self.chat else None
            t = m.get("content") if isinstance(m, dict) else obj.get("response")
            if isinstance(t, str):
                self._text.append(t)

    def on_eof(self) -> None:
        raise E.StreamBrokenError(f"{self.target.display_url}{self.path}: stream ended before done:true "
                                  f"({len(self.rec.token_events())} token lines received)")

    def finish(self) -> None:
        rec = self.rec
        nr = sum(1 for e in rec.events if e.kind == "reasoning")
        if nr:
            rec.reasoning_tokens = nr
        fill_fallback_counts(rec, self.req)
        if self.req.keep_text:
            rec.tags["reply_text"] = "".join(self._text)


class _Generate(_Ollama):
    chat = False


class _Chat(_Ollama):
    chat = True


async def send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    """``/api/generate`` (``/api/chat`` when ``req.tags["ollama_chat"]``); never raises for server failures."""
    cls = _Chat if req.tags.get("ollama_chat") else _Generate
    rec = new_record(target, req)
    return await exchange(session, cls(target, req, rec))


#: ``POST /api/show {"model"}``: a model's details, Modelfile parameters and GGUF key/values
SHOW_PATH = "/api/show"


async def show_model(session: aiohttp.ClientSession, target: Target, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """Ollama ``POST /api/show {"model"}``: ``details.quantization_level``, ``parameters`` (the
    Modelfile's ``num_ctx``/``num_batch``/… lines), ``model_info``; ``None`` when it does not answer."""
    return await json_object(session, target.base_url + SHOW_PATH, method="POST", body={"model": target.model},
                             headers=target.headers(), timeout_s=timeout_s)


#: ``GET /api/version``: Ollama's cheapest answer (detection's first probe; the warm-up GET,
#: :func:`phasescope.apis.warm_up`)
VERSION_PATH = "/api/version"


async def probe(p: Prober) -> Detected | None:
    """``GET /api/version`` → ``{"version": ...}``: Ollama (the models from ``GET /api/tags``)."""
    st, obj, _ = await p.get(VERSION_PATH)
    if not (st == 200 and isinstance(obj, dict) and "version" in obj):
        return None
    models: list[str] = []
    st2, tags, _ = await p.optional("/api/tags")  # optional: a stall here costs its timeout, never the run
    if st2 == 200 and isinstance(tags, dict):
        models = [m.get("name") or m.get("model") for m in tags.get("models", []) if isinstance(m, dict)]
    return Detected("ollama", "ollama", [m for m in models if m], version=str(obj["version"]))


#: ``--api ollama``: ``/api/generate``, and ``/api/chat`` for a conversation (``ollama_chat``)
SPECS = (
    ApiSpec("ollama", "/api/generate", send, warm_path=VERSION_PATH, framing=_Ollama.framing,
            chat_tags={"ollama_chat": True}, tokenizer=False, probe=probe, probe_rank=10,
            probe_label="/api/version (Ollama)", engine="ollama", engine_label="Ollama (no /api/version)",
            url_suffixes=("/api/generate", "/api/chat")),
)
