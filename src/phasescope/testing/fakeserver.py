"""Faithful fake LLM servers on 127.0.0.1 that log when they really sent each event.

Real aiohttp HTTP servers, bound to 127.0.0.1 on a free port, speaking the wire formats of
reference/server-apis.md (edge cases included), for the APIs we cannot run here and for fault
injection. Every request's ground truth is logged with ``time.perf_counter_ns`` (CLOCK_MONOTONIC,
so it is comparable with a client's ``now_ns`` in another process on the same machine).

Constructor (all keyword arguments)::

    FakeServer(
        flavor="vllm",            # vllm | sglang | llamacpp | ollama — which server to imitate
        model="fake-model",       # served model name; other names get the server's 404
        ttft_s=0.02,              # fixed delay from request body read to the first token
        prefill_tok_s=None,       # if set, + evaluated_prompt_tokens / prefill_tok_s (TTFT grows with prompt)
        itl_s=0.005,              # time per output token after the first (absolute deadlines, no drift)
        tokens_per_event=1,       # tokens packed into one SSE/NDJSON event (vLLM --stream-interval, spec decode)
        reasoning_tokens=0,       # the first N output tokens are reasoning (delta.reasoning / reasoning_content / thinking)
        eos_after=None,           # the model "stops" after N tokens unless ignore_eos (Ollama has no ignore_eos)
        api_key=None,             # require "Authorization: Bearer <key>" (401 otherwise)
        fault=None,               # see FAULTS
        fault_after=2,            # token events sent before cut / malformed / error_event / stall
        fault_count=None,         # only the first N requests get the fault (None = all) — for retry tests
        retry_after=1,            # Retry-After seconds for overloaded / unavailable (None = header omitted)
        stall_s=3600.0,           # how long "stall" stays silent
        ping_s=None,              # during a stall, SSE keep-alive comments ":\n\n" every ping_s (llama.cpp sse_ping_interval)
        load_s=0.0,               # Ollama: load_duration (and delay) of the first request
        max_model_len=32768,
        log_path=None,            # also append each request's ground truth as JSONL here
        prefix_cache=False,       # vLLM/SGLang: automatic prefix caching in 16-token blocks (usage cached_tokens,
                                  # vllm:prefix_cache_{queries,hits}_total / sglang:cached_tokens_total)
    )

Use it as ``async with FakeServer(...) as srv:`` (inside a loop), ``with FakeServer(...).running()
as srv:`` (from sync code: it runs its own loop in a thread), or as a separate process::

    python -m phasescope.testing --flavor vllm --ttft-ms 20 --itl-ms 5 --log gt.jsonl
    # prints "READY http://127.0.0.1:PORT" on stdout, serves until SIGTERM/SIGINT

``srv.url`` is ``http://127.0.0.1:PORT``; ``srv.log`` is a list of :class:`GroundTruth`, one per
generation request, keyed by the client's ``X-Request-Id`` header (phasescope clients send their
record id there). ``GroundTruth.t_events_ns`` holds the send time (just after the write returned)
of every token-carrying event, ``tokens_per_event`` their token counts.

Tokenizer: one token per whitespace-led word (``" the"``), plus a BOS token for llama.cpp text
prompts; token-id prompts (lists of ints) count as given. ``/tokenize`` uses the same rule. Chat
messages go through :func:`chat_template_ids` (3 template tokens per request, 4 more per assistant
message), so a conversation's next turn extends the previous prompt exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import sys
import threading
import time
import uuid
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

FAULTS = (
    "forbidden",  # 403 on generation endpoints
    "overloaded",  # 429 + Retry-After
    "unavailable",  # 503 + Retry-After (vLLM admission, Ollama queue full, llama.cpp loading)
    "http500",  # 500 with the server's error body
    "cut",  # connection closed mid-stream after fault_after token events
    "malformed",  # a non-JSON event after fault_after token events
    "error_event",  # the server's mid-stream error event after fault_after token events
    "stall",  # silence for stall_s after fault_after token events (0 → before the first token)
    "no_done",  # stream ends cleanly but without [DONE]/finish_reason/done:true
    # hostile servers (issue 21): each must neither hang phasescope nor leak the key
    "echo_key",  # 401 on generation endpoints whose body echoes the request's Authorization header
    "endless",  # streams tokens past max_tokens forever: no finish_reason, no [DONE]
    "silent",  # sends the response headers, then nothing at all (for stall_s)
)

FLAVORS = ("vllm", "sglang", "llamacpp", "ollama")

_WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", " and", " runs", " far"]
_WORD_RE = re.compile(r"\s*\S+")
BOS_ID = 2


def fake_tokenize(text: str) -> list[int]:
    """The fakes' tokenizer: one id per whitespace-led word."""
    return [100 + zlib.crc32(w.encode()) % 50000 for w in _WORD_RE.findall(text)]


def chat_template_ids(messages: Any) -> list[int]:
    """The fakes' chat template: system/user/tool contents as they are, each assistant message
    wrapped as ``[1, 2, 3] + content + [4]`` (its turn's opening and end tokens), and ``[1, 2, 3]``
    (the generation prompt) at the end. So a single user message costs its words + 3, and a
    conversation's turn N+1 starts with exactly turn N's prompt (what a prefix cache can reuse)."""
    ids: list[int] = []
    for m in messages if isinstance(messages, list) else []:
        content = m.get("content", "") if isinstance(m, dict) else ""
        text = content if isinstance(content, str) else json.dumps(content)
        if isinstance(m, dict) and m.get("role") == "assistant":
            ids += [1, 2, 3] + fake_tokenize(text) + [4]
        else:
            ids += fake_tokenize(text)
    return ids + [1, 2, 3]


class _StampingHandler(RequestHandler):
    """aiohttp's connection protocol, noting when the server process read the latest bytes of the
    connection (before any HTTP parsing): the arrival time of a request on a keep-alive connection."""

    def data_received(self, data: bytes) -> None:
        self._ps_rx_ns = time.perf_counter_ns()
        super().data_received(data)


class _StampingServer(Server):
    def __call__(self) -> RequestHandler:
        return _StampingHandler(self, loop=self._loop, **self._kwargs)


def _rx_ns(request: web.Request, fallback: int) -> int:
    return int(getattr(request.protocol, "_ps_rx_ns", None) or fallback)


def _const(make: Any, *args: Any, **kw: Any) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        return make(*args, **kw)

    return handler


@dataclass
class GroundTruth:
    id: str
    path: str
    t_recv_ns: int  # handler entered (headers parsed)
    t_rx_ns: int = 0  # the server process read the request's bytes (before HTTP parsing)
    t_body_ns: int = 0  # request body read and parsed
    t_headers_ns: int | None = None  # response headers written
    t_events_ns: list[int] = field(default_factory=list)  # token-carrying events, after write
    tokens_per_event: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    status: int = 200
    fault: str | None = None

    @property
    def t_first_token_ns(self) -> int | None:
        return self.t_events_ns[0] if self.t_events_ns else None


class FakeServer:
    def __init__(
        self,
        *,
        flavor: str = "vllm",
        model: str = "fake-model",
        ttft_s: float = 0.02,
        prefill_tok_s: float | None = None,
        itl_s: float = 0.005,
        tokens_per_event: int = 1,
        reasoning_tokens: int = 0,
        eos_after: int | None = None,
        api_key: str | None = None,
        fault: str | None = None,
        fault_after: int = 2,
        fault_count: int | None = None,
        retry_after: float | None = 1,
        stall_s: float = 3600.0,
        ping_s: float | None = None,
        load_s: float = 0.0,
        max_model_len: int = 32768,
        log_path: str | None = None,
        prefix_cache: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}")
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")
        self.flavor = flavor
        self.model = model
        self.ttft_s = ttft_s
        self.prefill_tok_s = prefill_tok_s
        self.itl_s = itl_s
        self.tokens_per_event = max(1, int(tokens_per_event))
        self.reasoning_tokens = reasoning_tokens
        self.eos_after = eos_after
        self.api_key = api_key
        self.fault = fault
        self.fault_after = fault_after
        self.fault_count = fault_count
        self.retry_after = retry_after
        self.stall_s = stall_s
        self.ping_s = ping_s
        self.load_s = load_s
        self.max_model_len = max_model_len
        self.log_path = log_path
        self.host = host
        self.port = port
        self.log: list[GroundTruth] = []
        self.requests = 0  # generation requests received
        self._faulted = 0
        self._echo_auth = ""
        self._loaded = False
        self._last_prompt: list[int] = []
        self._runner: web.AppRunner | None = None
        self._logfh: Any = None
        self._running = 0
        self._counters = {"prompt": 0, "gen": 0, "req": 0, "pc_queries": 0, "pc_hits": 0}
        self.prefix_cache = prefix_cache
        self._blocks: set[int] = set()  # hashes of cached 16-token block chains (vLLM APC)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> "FakeServer":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        if type(self._runner.server) is Server:  # stamp byte arrival (see _StampingHandler)
            self._runner.server.__class__ = _StampingServer
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        if self.log_path:
            self._logfh = open(self.log_path, "a", encoding="utf-8")
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._logfh is not None:
            self._logfh.close()
            self._logfh = None

    async def __aenter__(self) -> "FakeServer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator["FakeServer"]:
        """Serve from a background thread with its own event loop (for sync tests)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        err: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # pragma: no cover - start failure
                err.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:  # stalled handlers ("stall" fault) must not outlive the loop
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        th = threading.Thread(target=run, name=f"fake-{self.flavor}", daemon=True)
        th.start()
        ready.wait(10)
        if err:
            raise err[0]
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            th.join(10)

    # -- routes ---------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        r = app.router
        f = self.flavor
        if f == "ollama":
            r.add_get("/", _const(web.Response, text="Ollama is running"))
            r.add_get("/api/version", _const(web.json_response, {"version": "0.33.0"}))
            r.add_get("/api/tags", self._ollama_tags)
            r.add_post("/api/show", self._ollama_show)
            r.add_post("/api/generate", self._ollama_gen)
            r.add_post("/api/chat", self._ollama_gen)
            r.add_get("/v1/models", self._models)
        else:
            r.add_get("/v1/models", self._models)
            r.add_get("/health", self._health)
            r.add_post("/tokenize", self._tokenize)
            r.add_get("/metrics", self._metrics)
            r.add_post("/v1/completions", self._openai)
            r.add_post("/v1/chat/completions", self._openai)
            if f == "llamacpp":
                r.add_get("/props", self._props)
                r.add_post("/completion", self._llamacpp_completion)
                r.add_post("/completions", self._llamacpp_completion)
            else:
                r.add_get("/version", _const(web.json_response, {"version": "0.33.0" if f == "vllm" else "0.5.23"}))

    # -- helpers --------------------------------------------------------------------------
    def _err_body(self, status: int, message: str, etype: str) -> Any:
        if self.flavor == "ollama":
            return {"error": message}
        if self.flavor == "llamacpp":
            return {"error": {"code": status, "message": message, "type": etype}}
        return {"error": {"message": message, "type": etype, "param": None, "code": status}}

    def _auth(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        h = request.headers.get("Authorization", "")
        if h != f"Bearer {self.api_key}":
            return web.json_response(self._err_body(401, "Invalid API Key" if h else "Missing API key", "authentication_error"), status=401)
        return None

    def _take_fault(self) -> str | None:
        if self.fault is None:
            return None
        if self.fault_count is not None and self._faulted >= self.fault_count:
            return None
        self._faulted += 1
        return self.fault

    def _pre_fault(self, fault: str | None, gt: GroundTruth) -> web.Response | None:
        if fault == "forbidden":
            gt.status = 403
            return web.json_response(self._err_body(403, "Forbidden: key lacks access to this model", "permission_error"), status=403)
        if fault in ("overloaded", "unavailable"):
            status = 429 if fault == "overloaded" else 503
            gt.status = status
            msg = "server busy, please try again.  maximum pending requests exceeded" if self.flavor == "ollama" else "Too many requests in the queue"
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
            return web.json_response(self._err_body(status, msg, "unavailable_error"), status=status, headers=headers)
        if fault == "echo_key":
            gt.status = 401
            auth = self._echo_auth
            return web.json_response(self._err_body(401, f"Invalid API key: {auth}", "authentication_error")
                                     | {"received_headers": {"Authorization": auth}}, status=401,
                                     headers={"WWW-Authenticate": f'Bearer realm="fake", error="invalid_token", token="{auth}"'})
        if fault == "http500":
            gt.status = 500
            return web.json_response(self._err_body(500, "internal engine error", "server_error"), status=500)
        return None

    def _prompt_ids(self, prompt: Any, *, bos: bool) -> list[int]:
        if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
            return list(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return list(prompt[0])
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        ids = fake_tokenize(text)
        return ([BOS_ID] + ids) if bos else ids

    def _cache(self, ids: list[int], use_cache: bool) -> int:
        """Prefix-cache hit length (llama.cpp/Ollama single slot); at least one token is evaluated."""
        n = 0
        if use_cache:
            for a, b in zip(ids, self._last_prompt):
                if a != b:
                    break
                n += 1
            n = min(n, max(0, len(ids) - 1))
        self._last_prompt = list(ids)
        return n

    def _apc(self, ids: list[int]) -> int:
        """vLLM-style automatic prefix caching: full 16-token blocks whose whole chain (this block
        and every block before it) was seen before are hits; the prompt's blocks are then cached."""
        if not self.prefix_cache or self.flavor not in ("vllm", "sglang"):
            return 0
        bs, h, hit, chain = 16, 0, 0, True
        for i in range(0, len(ids) - len(ids) % bs, bs):
            h = hash((h, tuple(ids[i:i + bs])))
            if chain and h in self._blocks:
                hit += bs
            else:
                chain = False
                self._blocks.add(h)
        hit = min(hit, max(0, len(ids) - 1))
        self._counters["pc_queries"] += len(ids)
        self._counters["pc_hits"] += hit
        return hit

    def _ttft(self, evaluated: int) -> float:
        t = self.ttft_s
        if self.prefill_tok_s:
            t += evaluated / self.prefill_tok_s
        return t

    def _n_out(self, max_tokens: int, ignore_eos: bool) -> int:
        n = max(0, int(max_tokens))
        if self.eos_after is not None and not ignore_eos:
            n = min(n, self.eos_after)
        return n

    def _schedule(self, n_out: int) -> list[tuple[int, int]]:
        """(first token index, count) per event."""
        out = []
        if n_out <= 0:
            return out
        out.append((0, 1))  # the first token always goes alone (prefill's output)
        i = 1
        while i < n_out:
            k = min(self.tokens_per_event, n_out - i)
            # reasoning and content never share an event
            if i < self.reasoning_tokens < i + k:
                k = self.reasoning_tokens - i
            out.append((i, k))
            i += k
        return out

    def _record(self, gt: GroundTruth) -> None:
        self.log.append(gt)
        if self._logfh is not None:
            self._logfh.write(json.dumps(asdict(gt)) + "\n")
            self._logfh.flush()

    async def _sleep_until(self, t0: float, offset_s: float) -> None:
        delay = t0 + offset_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    # -- introspection endpoints ------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        if self.flavor == "llamacpp":
            return web.json_response({"status": "ok"})
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        if (resp := self._auth(request)) is not None:
            return resp
        owned = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "ollama": "library"}[self.flavor]
        card: dict[str, Any] = {"id": self.model, "object": "model", "created": 1767225600, "owned_by": owned}
        if self.flavor in ("vllm", "sglang"):
            card.update({"root": self.model, "parent": None, "max_model_len": self.max_model_len})
        if self.flavor == "llamacpp":
            card["meta"] = {"vocab_type": 1, "n_vocab": 262144, "n_ctx": 4096, "n_ctx_train": 32768,
                            "n_embd": 640, "n_params": 268098176, "size": 246587904, "ftype": "Q4_K - Medium"}
            card["aliases"] = [self.model]
        return web.json_response({"object": "list", "data": [card]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.flavor == "llamacpp":
            ids = fake_tokenize(body.get("content", ""))
            if body.get("add_special"):
                ids = [BOS_ID] + ids
            return web.json_response({"tokens": ids})
        ids = fake_tokenize(body.get("prompt", ""))
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids, "token_strs": None})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({
            "default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1, "ignore_eos": False}},
            "total_slots": 4, "model_alias": self.model, "model_path": "/models/fake.gguf",
            "modalities": {"vision": False, "audio": False}, "endpoint_slots": True, "endpoint_props": False,
            "endpoint_metrics": True, "build_info": "b1-0c1e570", "is_sleeping": False,
        })

    async def _metrics(self, request: web.Request) -> web.Response:
        c = self._counters
        if self.flavor == "llamacpp":
            text = (
                "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens\n"
                "# TYPE llamacpp:prompt_tokens_total counter\n"
                f"llamacpp:prompt_tokens_total {c['prompt']}\n"
                "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {c['gen']}\n"
                "# HELP llamacpp:requests_processing Number of requests processing\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                f"llamacpp:requests_processing {self._running}\n"
            )
        else:
            p = "vllm:" if self.flavor == "vllm" else "sglang:"
            lab = f'{{engine="0",model_name="{self.model}"}}' if self.flavor == "vllm" else f'{{model_name="{self.model}"}}'
            text = (
                f"# HELP {p}num_requests_running Number of requests in model execution batches.\n"
                f"# TYPE {p}num_requests_running gauge\n{p}num_requests_running{lab} {float(self._running)}\n"
                f"# HELP {p}prompt_tokens_total Number of prefill tokens processed.\n"
                f"# TYPE {p}prompt_tokens_total counter\n{p}prompt_tokens_total{lab} {float(c['prompt'])}\n"
                f"# HELP {p}generation_tokens_total Number of generation tokens processed.\n"
                f"# TYPE {p}generation_tokens_total counter\n{p}generation_tokens_total{lab} {float(c['gen'])}\n"
            )
            if self.prefix_cache and self.flavor == "vllm":
                text += (f"# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
                         f"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{lab} {float(c['pc_queries'])}\n"
                         f"# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
                         f"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{lab} {float(c['pc_hits'])}\n")
            elif self.prefix_cache:
                text += (f"# HELP sglang:cached_tokens_total The number of prefix cached tokens.\n"
                         f"# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{lab} {float(c['pc_hits'])}\n")
        return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={})

    async def _begin(
        self, request: web.Request, *, bad_json_status: int, bad_json_body: Any, check_auth: bool = True
    ) -> tuple[GroundTruth, Any, web.StreamResponse | None]:
        """Every generation handler's first steps: the ground-truth entry (stamped on arrival), the
        auth check and the JSON body. Returns ``(gt, body, None)``, or ``(gt, None, response)`` for a
        refused request, already recorded."""
        t_recv = time.perf_counter_ns()
        gt = GroundTruth(id=request.headers.get("X-Request-Id", uuid.uuid4().hex[:16]), path=request.path, t_recv_ns=t_recv,
                         t_rx_ns=_rx_ns(request, t_recv))
        if check_auth and (resp := self._auth(request)) is not None:
            gt.status = 401
            self._record(gt)
            return gt, None, resp
        try:
            body = await request.json()
        except ValueError:
            gt.status = bad_json_status
            self._record(gt)
            return gt, None, web.json_response(bad_json_body, status=bad_json_status)
        return gt, body, None

    # -- OpenAI-compatible generation -------------------------------------------------------
    async def _openai(self, request: web.Request) -> web.StreamResponse:
        bad = 400 if self.flavor != "llamacpp" else 500
        gt, body, err = await self._begin(
            request, bad_json_status=bad, bad_json_body=self._err_body(bad, "malformed JSON body", "invalid_request_error"))
        if err is not None:
            return err
        t0 = time.perf_counter()
        gt.t_body_ns = time.perf_counter_ns()
        self.requests += 1
        chat = request.path.endswith("/chat/completions")
        model = body.get("model")
        if model is not None and model != self.model and self.flavor != "llamacpp":
            gt.status = 404
            self._record(gt)
            return web.json_response(self._err_body(404, f"The model `{model}` does not exist.", "NotFoundError"), status=404)
        fault = self._take_fault()
        gt.fault = fault
        self._echo_auth = request.headers.get("Authorization", "")
        if (resp := self._pre_fault(fault, gt)) is not None:
            self._record(gt)
            return resp
        if chat:
            ids = chat_template_ids(body.get("messages", []))
        else:
            ids = self._prompt_ids(body.get("prompt", ""), bos=self.flavor == "llamacpp")
        cached = self._cache(ids, body.get("cache_prompt", True)) if self.flavor == "llamacpp" else self._apc(ids)
        gt.prompt_tokens, gt.cached_tokens = len(ids), cached
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        ignore_eos = bool(body.get("ignore_eos")) or (body.get("min_tokens") or 0) >= max_tokens
        n_out = self._n_out(max_tokens, ignore_eos)
        so = body.get("stream_options") or {}
        include_usage = bool(so.get("include_usage"))
        continuous = include_usage and bool(so.get("continuous_usage_stats"))
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:12]
        obj = "chat.completion.chunk" if chat else "text_completion"
        ttft = self._ttft(len(ids) - cached)
        self._counters["prompt"] += len(ids) - cached
        def usage(n: int) -> dict[str, Any]:
            u: dict[str, Any] = {"prompt_tokens": len(ids), "total_tokens": len(ids) + n, "completion_tokens": n}
            if self.prefix_cache and self.flavor in ("vllm", "sglang"):
                u["prompt_tokens_details"] = {"cached_tokens": cached}
            return u
        finish = "length" if n_out >= max_tokens else "stop"

        def timings(n: int, t_first: float, t_last: float) -> dict[str, Any]:
            pm = (t_first - t0) * 1000
            gm = (t_last - t_first) * 1000
            return {"cache_n": cached, "prompt_n": len(ids) - cached, "prompt_ms": pm,
                    "prompt_per_token_ms": pm / max(1, len(ids) - cached), "prompt_per_second": 1000 * (len(ids) - cached) / pm if pm else 0,
                    "predicted_n": n, "predicted_ms": gm, "predicted_per_token_ms": gm / max(1, n - 1),
                    "predicted_per_second": 1000 * (n - 1) / gm if gm else 0}

        if not body.get("stream"):
            await asyncio.sleep(ttft + self.itl_s * max(0, n_out - 1))
            gt.output_tokens = n_out
            text = "".join(_WORDS[i % len(_WORDS)] for i in range(n_out))
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            out: dict[str, Any] = {"id": cid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                                   "model": self.model, "choices": [choice], "usage": usage(n_out)}
            if self.flavor == "llamacpp":
                out["timings"] = timings(n_out, t0 + ttft, time.perf_counter())
            self._counters["gen"] += n_out
            self._record(gt)
            return web.json_response(out)

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        gt.t_headers_ns = time.perf_counter_ns()
        self._running += 1

        async def send(d: Any) -> None:
            await resp.write(b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n")

        def chunk(choice: dict[str, Any] | None, u: dict[str, Any] | None = None) -> dict[str, Any]:
            d: dict[str, Any] = {"id": cid, "object": obj, "created": int(time.time()), "model": self.model,
                                 "choices": [choice] if choice is not None else []}
            if u is not None:
                d["usage"] = u
            return d

        reasoning_key = "reasoning" if self.flavor == "vllm" else "reasoning_content"
        try:
            if fault == "silent":  # headers out, then nothing
                await asyncio.sleep(self.stall_s)
                return resp
            if fault == "endless":  # past max_tokens for ever, never finishing
                j = 0
                while True:
                    await self._sleep_until(t0, ttft + j * self.itl_s)
                    text = _WORDS[j % len(_WORDS)]
                    ch = ({"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None} if chat
                          else {"index": 0, "text": text, "logprobs": None, "finish_reason": None})
                    await send(chunk(ch))
                    gt.t_events_ns.append(time.perf_counter_ns())
                    gt.tokens_per_event.append(1)
                    gt.output_tokens += 1
                    j += 1
            if chat:  # role-only opening delta, sent before the prompt is processed (per server)
                role: dict[str, Any] = {"role": "assistant", "content": "" if self.flavor != "llamacpp" else None}
                if self.flavor == "sglang":
                    role = {"reasoning_content": None, "role": "assistant", "content": ""}
                await send(chunk({"index": 0, "delta": role, "logprobs": None, "finish_reason": None},
                                 usage(0) if continuous else None))
            if fault == "stall" and self.fault_after <= 0:
                await self._stall(resp)
            sched = self._schedule(n_out)
            t_first_tok = t0 + ttft
            sent = 0
            for ev_i, (i, k) in enumerate(sched):
                last = i + k - 1
                await self._sleep_until(t0, ttft + last * self.itl_s)
                if ev_i == 0:
                    t_first_tok = time.perf_counter()
                if fault is not None and ev_i == self.fault_after and fault in ("cut", "malformed", "error_event", "stall", "no_done"):
                    await self._fault_mid(fault, request, resp, gt)
                    return resp
                text = "".join(_WORDS[j % len(_WORDS)] for j in range(i, i + k))
                is_last = last == n_out - 1
                reasoning = i < self.reasoning_tokens
                if chat:
                    delta = {reasoning_key: text} if reasoning else {"content": text}
                    ch: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
                else:
                    ch = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
                sent += k
                final_inline = is_last and self.flavor == "vllm"
                if final_inline:
                    ch["finish_reason"] = finish
                    ch["stop_reason"] = None
                d = chunk(ch, usage(sent) if continuous else None)
                await send(d)
                gt.t_events_ns.append(time.perf_counter_ns())
                gt.tokens_per_event.append(k)
            t_last = time.perf_counter()
            gt.output_tokens = sent
            self._counters["gen"] += sent
            if fault == "no_done":
                return resp
            if self.flavor != "vllm" or n_out == 0:
                if self.flavor == "llamacpp" and not chat:
                    # llama.cpp /v1/completions: finish_reason, usage and timings share the last chunk
                    fin = chunk({"text": "", "index": 0, "logprobs": None, "finish_reason": finish},
                                usage(sent) if include_usage else None)
                    fin["timings"] = timings(sent, t_first_tok, t_last)
                    await send(fin)
                else:
                    fch = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish} if chat else \
                        {"index": 0, "text": "", "logprobs": None, "finish_reason": finish}
                    await send(chunk(fch))
            if include_usage and not (self.flavor == "llamacpp" and not chat):
                u = chunk(None, usage(sent))
                if self.flavor == "llamacpp":
                    u["timings"] = timings(sent, t_first_tok, t_last)
                await send(u)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        except ConnectionResetError:  # the client went away (Ctrl-C, timeout): not a server error
            gt.fault = gt.fault or "client_gone"
            return resp
        finally:
            self._running -= 1
            self._record(gt)

    async def _stall(self, resp: web.StreamResponse) -> None:
        end = time.perf_counter() + self.stall_s
        while True:
            left = end - time.perf_counter()
            if left <= 0:
                return
            if self.ping_s and self.flavor != "ollama":
                await asyncio.sleep(min(self.ping_s, left))
                await resp.write(b":\n\n")
            else:
                await asyncio.sleep(left)

    async def _fault_mid(self, fault: str, request: web.Request, resp: web.StreamResponse, gt: GroundTruth) -> None:
        if fault == "cut":
            if request.transport is not None:
                request.transport.close()
            return
        if fault == "malformed":
            await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "x"\n\n')
            await resp.write_eof()
            return
        if fault == "error_event":
            if self.flavor == "ollama":
                await resp.write(b'{"error":"an error was encountered while running the model: unexpected EOF"}\n')
            else:
                err = self._err_body(500, "engine died while generating", "InternalServerError")
                await resp.write(b"data: " + json.dumps(err).encode() + b"\n\n")
                if self.flavor in ("vllm", "sglang"):
                    await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return
        if fault == "stall":
            await self._stall(resp)
            return
        if fault == "no_done":
            await resp.write_eof()

    # -- llama.cpp native /completion -------------------------------------------------------
    async def _llamacpp_completion(self, request: web.Request) -> web.StreamResponse:
        gt, body, err = await self._begin(
            request, bad_json_status=500,
            bad_json_body=self._err_body(500, "[json.exception.parse_error.101] parse error", "server_error"))
        if err is not None:
            return err
        t0 = time.perf_counter()
        gt.t_body_ns = time.perf_counter_ns()
        self.requests += 1
        fault = self._take_fault()
        gt.fault = fault
        if (resp := self._pre_fault(fault, gt)) is not None:
            self._record(gt)
            return resp
        ids = self._prompt_ids(body.get("prompt", ""), bos=True)
        cached = self._cache(ids, body.get("cache_prompt", True))
        gt.prompt_tokens, gt.cached_tokens = len(ids), cached
        n_predict = int(body.get("n_predict", body.get("max_tokens", -1)))
        if n_predict < 0:
            n_predict = 64
        n_out = self._n_out(n_predict, bool(body.get("ignore_eos")))
        ttft = self._ttft(len(ids) - cached)
        self._counters["prompt"] += len(ids) - cached

        def final(n: int, t_first: float, t_last: float, content: str) -> dict[str, Any]:
            pm, gm = (t_first - t0) * 1000, (t_last - t_first) * 1000
            return {"index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": self.model,
                    "tokens_predicted": n, "tokens_evaluated": len(ids),
                    "generation_settings": {"n_predict": n_predict, "ignore_eos": bool(body.get("ignore_eos")), "stream": bool(body.get("stream"))},
                    "prompt": "<bos>…", "has_new_line": False, "truncated": False,
                    "stop_type": "limit" if n >= n_predict else "eos", "stopping_word": "", "tokens_cached": len(ids) + n - 1,
                    "timings": {"cache_n": cached, "prompt_n": len(ids) - cached, "prompt_ms": pm,
                                "prompt_per_token_ms": pm / max(1, len(ids) - cached),
                                "prompt_per_second": 1000 * (len(ids) - cached) / pm if pm else 0,
                                "predicted_n": n, "predicted_ms": gm, "predicted_per_token_ms": gm / max(1, n - 1),
                                "predicted_per_second": 1000 * (n - 1) / gm if gm else 0}}

        if not body.get("stream"):
            await asyncio.sleep(ttft)
            tf = time.perf_counter()
            await asyncio.sleep(self.itl_s * max(0, n_out - 1))
            gt.output_tokens = n_out
            self._record(gt)
            return web.json_response(final(n_out, tf, time.perf_counter(), "".join(_WORDS[i % len(_WORDS)] for i in range(n_out))))

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        gt.t_headers_ns = time.perf_counter_ns()
        self._running += 1

        async def send(d: Any) -> None:
            await resp.write(b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n")

        try:
            if body.get("return_progress"):
                await send({"index": 0, "content": "", "tokens": [0], "stop": False, "id_slot": -1, "tokens_predicted": 0,
                            "tokens_evaluated": len(ids), "prompt_progress": {"total": len(ids), "cache": cached, "processed": cached, "time_ms": 0}})
            if fault == "stall" and self.fault_after <= 0:
                await self._stall(resp)
            t_first = t0 + ttft
            sent = 0
            for ev_i, (i, k) in enumerate(self._schedule(n_out)):
                await self._sleep_until(t0, ttft + (i + k - 1) * self.itl_s)
                if ev_i == 0:
                    t_first = time.perf_counter()
                if fault is not None and ev_i == self.fault_after and fault in ("cut", "malformed", "error_event", "stall", "no_done"):
                    await self._fault_mid(fault, request, resp, gt)
                    return resp
                sent += k
                toks = [100 + j for j in range(i, i + k)]
                await send({"index": 0, "content": "".join(_WORDS[j % len(_WORDS)] for j in range(i, i + k)), "tokens": toks,
                            "stop": False, "id_slot": -1, "tokens_predicted": sent, "tokens_evaluated": len(ids)})
                gt.t_events_ns.append(time.perf_counter_ns())
                gt.tokens_per_event.append(k)
            gt.output_tokens = sent
            self._counters["gen"] += sent
            if fault == "no_done":
                await resp.write_eof()
                return resp
            await send(final(sent, t_first, time.perf_counter(), ""))
            await resp.write_eof()
            return resp
        except ConnectionResetError:  # the client went away (Ctrl-C, timeout): not a server error
            gt.fault = gt.fault or "client_gone"
            return resp
        finally:
            self._running -= 1
            self._record(gt)

    # -- Ollama native ----------------------------------------------------------------------
    async def _ollama_tags(self, request: web.Request) -> web.Response:
        return web.json_response({"models": [{
            "name": self.model, "model": self.model, "modified_at": "2026-01-01T00:00:00Z", "size": 253113024,
            "digest": "a5fd3b62230aa5ec", "details": {"parent_model": "", "format": "gguf", "family": "gemma3",
                                                     "families": ["gemma3"], "parameter_size": "268.10M",
                                                     "quantization_level": "Q4_K_M"}}]})

    async def _ollama_show(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body.get("model") or body.get("name")
        if name != self.model:
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        return web.json_response({
            "modelfile": "FROM fake", "parameters": "", "template": "{{ .Prompt }}",
            "details": {"parent_model": "", "format": "gguf", "family": "gemma3", "families": ["gemma3"],
                        "parameter_size": "268.10M", "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": "gemma3", "general.parameter_count": 268098176,
                           "gemma3.block_count": 18, "gemma3.context_length": 32768, "gemma3.embedding_length": 640,
                           "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 1,
                           "gemma3.feed_forward_length": 2048},
            "capabilities": ["completion"], "modified_at": "2026-01-01T00:00:00Z"})

    async def _ollama_gen(self, request: web.Request) -> web.StreamResponse:
        gt, body, err = await self._begin(  # Ollama has no API keys: no auth check
            request, check_auth=False, bad_json_status=400,
            bad_json_body={"error": "invalid character 'x' looking for beginning of value"})
        if err is not None:
            return err
        t0 = time.perf_counter()
        t0_ns = time.perf_counter_ns()
        gt.t_body_ns = t0_ns
        self.requests += 1
        chat = request.path == "/api/chat"
        if body.get("model") != self.model:
            gt.status = 404
            self._record(gt)
            return web.json_response({"error": f'model "{body.get("model")}" not found, try pulling it first'}, status=404)
        fault = self._take_fault()
        gt.fault = fault
        if (resp := self._pre_fault(fault, gt)) is not None:
            self._record(gt)
            return resp
        load = 0.0 if self._loaded else self.load_s
        self._loaded = True
        text = "".join(m.get("content", "") for m in body.get("messages", [])) if chat else body.get("prompt", "")
        ids = self._prompt_ids(text, bos=True) if text else []
        cached = self._cache(ids, True) if ids else 0
        gt.prompt_tokens, gt.cached_tokens = len(ids), cached
        opts = body.get("options") or {}
        num_predict = int(opts.get("num_predict", -1))
        if num_predict < 0:
            num_predict = 128
        n_out = self._n_out(num_predict, False) if ids else 0
        ttft = load + self._ttft(len(ids) - cached) if ids else load
        created = "2026-01-01T00:00:00.000000Z"
        stream = body.get("stream", True)

        def final(n: int, t_pe: float, t_last: float) -> dict[str, Any]:
            d: dict[str, Any] = {"model": self.model, "created_at": created, "done": True,
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
            txt = "".join(_WORDS[j % len(_WORDS)] for j in range(i, i + k))
            reasoning = i < self.reasoning_tokens
            d: dict[str, Any] = {"model": self.model, "created_at": created}
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
            await asyncio.sleep(self.itl_s * max(0, n_out - 1))
            gt.output_tokens = n_out
            self._record(gt)
            d = final(n_out, tpe, time.perf_counter())
            txt = "".join(_WORDS[j % len(_WORDS)] for j in range(n_out))
            if chat:
                d["message"]["content"] = txt
            else:
                d["response"] = txt
            return web.json_response(d)

        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        gt.t_headers_ns = time.perf_counter_ns()
        self._running += 1
        try:
            if fault == "stall" and self.fault_after <= 0:
                await self._stall(resp)
            t_pe = t0 + ttft
            sent = 0
            for ev_i, (i, k) in enumerate(self._schedule(n_out)):
                await self._sleep_until(t0, ttft + (i + k - 1) * self.itl_s)
                if ev_i == 0:
                    t_pe = time.perf_counter()
                if fault is not None and ev_i == self.fault_after and fault in ("cut", "malformed", "error_event", "stall", "no_done"):
                    if fault == "malformed":
                        await resp.write(b'{"model":"x","response":"y",\n')
                        await resp.write_eof()
                    else:
                        await self._fault_mid(fault, request, resp, gt)
                    return resp
                await resp.write(json.dumps(piece(i, k), separators=(",", ":")).encode() + b"\n")
                gt.t_events_ns.append(time.perf_counter_ns())
                gt.tokens_per_event.append(k)
                sent += k
            gt.output_tokens = sent
            if fault == "no_done":
                await resp.write_eof()
                return resp
            if not ids:
                await asyncio.sleep(ttft)
            await resp.write(json.dumps(final(sent, t_pe, time.perf_counter()), separators=(",", ":")).encode() + b"\n")
            await resp.write_eof()
            return resp
        except ConnectionResetError:  # the client went away (Ctrl-C, timeout): not a server error
            gt.fault = gt.fault or "client_gone"
            return resp
        finally:
            self._running -= 1
            self._record(gt)


# --- a separate process (benchmarks: client and server must not share an event loop) -------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m phasescope.testing")
    ap.add_argument("--flavor", default="vllm", choices=FLAVORS)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--tokens-per-event", type=int, default=1)
    ap.add_argument("--log", default=None, help="JSONL ground-truth log")
    ap.add_argument("--uvloop", action="store_true", help="use uvloop if installed")
    ap.add_argument("--prefill-tok-s", type=float, default=None, help="TTFT grows by evaluated prompt tokens / this")
    ap.add_argument("--prefix-cache", action="store_true", help="vLLM/SGLang automatic prefix caching (16-token blocks)")
    ap.add_argument("--fault", default=None, choices=FAULTS, help="fault mode for every generation request")
    ap.add_argument("--fault-after", type=int, default=2)
    ap.add_argument("--api-key", default=None, help="require this Bearer key")
    a = ap.parse_args(argv)
    srv = FakeServer(flavor=a.flavor, model=a.model, port=a.port, ttft_s=a.ttft_ms / 1000, itl_s=a.itl_ms / 1000,
                     tokens_per_event=a.tokens_per_event, log_path=a.log, prefill_tok_s=a.prefill_tok_s,
                     prefix_cache=a.prefix_cache, fault=a.fault, fault_after=a.fault_after, api_key=a.api_key)

    async def run() -> None:
        await srv.start()
        print(f"READY {srv.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await srv.stop()

    asyncio.run(run())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
