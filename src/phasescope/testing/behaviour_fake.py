"""A loopback LLM server whose *timing* follows a model you choose — for testing ``explain``.

One job: answer as vLLM, SGLang, TGI or llama-server would while a simulated scheduler sets every
token's time from the :class:`Behaviour` (the truth a test grades ``explain`` against).

Real aiohttp HTTP on 127.0.0.1, OpenAI-compatible (``/v1/completions``, ``/v1/chat/completions``,
SSE with ``[DONE]`` and the ``include_usage`` chunk, as vLLM 0.33 sends them, see
:mod:`phasescope.testing.wire.openai`), plus ``/v1/models``, ``/tokenize``, ``/health``, ``/version`` and — optionally — vLLM-style
``/metrics``. With ``flavour="llamacpp"`` it answers like llama-server instead: the native
``/completion`` (``content`` / ``stop`` events, no ``[DONE]``, ``cache_prompt``), ``/props`` with
``total_slots``, ``timings`` (``cache_n``, ``prompt_n``, ``prompt_ms``, ``predicted_ms``) on the last
chunk and ``llamacpp:*`` metrics. ``flavour="sglang"`` (SGLang 0.5.23, server-apis.md §2): ``owned_by``
``sglang``, ``sglang:*`` metrics (``num_running_reqs`` / ``num_queue_reqs`` / ``token_usage`` with the
scheduler labels, ``prompt_tokens_total`` / ``generation_tokens_total`` / ``cached_tokens_total{cache_source}``
counted when a request finishes), no slot count anywhere. ``flavour="tgi"`` (TGI 3.3, §3): ``owned_by``
the model id (TGI does not name itself there; the ``tgi_`` metric prefix does), no ``max_model_len``,
``/info``, TGI's ``/tokenize`` (``{"inputs"}`` → a list of ``{id, text, start, stop}``) and ``tgi_*``
metrics (``tgi_queue_size``, ``tgi_batch_current_size``, counters without ``_total``, the input-length and
generated-tokens histograms), no prefix-cache counters.

Tokens are whitespace-separated words (a prompt may also be a list of token ids). One scheduler
task simulates a continuous-batching engine, step by step:

* at most ``slots`` sequences run; the rest wait (``num_requests_waiting``);
* a sequence's prefill of positions p0→p1 costs ``prefill_s_per_token·(p1−p0) +
  prefill_s_per_token2·(p1²−p0²)`` (linear matmuls + quadratic attention); with ``prefix_cache``
  the longest cached prefix (``cache_block``-token blocks, as vLLM) is skipped;
* without ``chunked_prefill_tokens`` a prefill runs as one step during which running decodes wait
  (the stall the seed describes); with it, at most that many prompt tokens join each decode step;
* a decode step emits one token for every decoding sequence and costs ``decode_step_s +
  decode_s_per_seq·(B−1) + decode_s_per_ctx_token·Σ context`` (weights once, KV per sequence);
* with ``jitter_s`` every step lasts an extra exponentially distributed time of that mean (a seeded
  ``random.Random(jitter_seed)``: designed noise, the same on every run), the noise of a shared host.

``overhead_s`` is paid per request before it reaches the scheduler (HTTP, tokenization).
Start it with ``async with BehaviourFake(Behaviour(...)) as fake: fake.url`` or, from sync code,
``with running_behaviour_fake(Behaviour(...)) as fake:`` (a thread runs the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from phasescope.testing._serve import LoopbackServer


@dataclass
class Behaviour:
    model: str = "fake-llm"
    flavour: str = "vllm"  # vllm | sglang | tgi | llamacpp
    slots: int = 8
    prefix_cache: bool = True
    cache_block: int = 16
    overhead_s: float = 0.002
    prefill_s_per_token: float = 5e-5
    prefill_s_per_token2: float = 0.0
    decode_step_s: float = 0.008
    decode_s_per_seq: float = 0.0
    decode_s_per_ctx_token: float = 0.0
    chunked_prefill_tokens: int | None = None
    metrics: bool = True
    kv_pool_tokens: int | None = None
    max_model_len: int = 32768
    report_cached_tokens: bool = True
    #: a slow network: every HTTP answer (generation, /metrics, /v1/models, …) starts this late
    network_rtt_s: float = 0.0
    #: fault injection, a burst of host load landing on one request: the first request whose prompt holds
    #: at least this many tokens decodes ``slow_factor`` times slower (every step it runs in)
    slow_first_prompt_over: int | None = None
    slow_factor: float = 1.0
    #: designed noise: each scheduler step lasts an extra Exp(mean ``jitter_s``) seconds (seeded)
    jitter_s: float = 0.0
    jitter_seed: int = 0
    #: export the spans of every finished OpenAI-API request to this OTLP endpoint with the official SDK
    #: exporter (the test extra): ``http://HOST:PORT/v1/traces`` OTLP/HTTP protobuf, ``grpc://HOST:PORT``
    #: OTLP/gRPC; named as the flavour's engine names them (vLLM, SGLang, TGI: :mod:`phasescope.testing.span_export`;
    #: llamacpp, which has no OTLP, as vLLM) and continuing the caller's ``traceparent``; the truth in ``fake.span_truth``
    otlp_endpoint: str | None = None
    #: False: the exported span's clock starts at admission to a slot, not at arrival (queue 0, TTFT from
    #: admission), as an engine's span that cannot see a wait in front of it (a proxy, the API server's backlog)
    #: — a designed disagreement between the span and what the client and /metrics see
    span_counts_queue: bool = True

    def __post_init__(self) -> None:
        if self.flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {self.flavour!r}; choose from {', '.join(FLAVOURS)}")


#: the servers the behaviour fake can answer as
FLAVOURS = ("vllm", "sglang", "tgi", "llamacpp")


@dataclass
class _Seq:
    tokens: list[Any]
    max_tokens: int
    events: asyncio.Queue[Any]
    n_cached: int = 0
    prefilled: int = 0
    generated: int = 0
    t_arrival: float = 0.0
    t_prefill_start: float | None = None
    t_prefill_end: float | None = None
    t_last: float | None = None
    cancelled: bool = False
    slowed: bool = False
    use_cache: bool = True  # llama.cpp ``cache_prompt``: false computes the whole prompt


@dataclass
class FakeCounters:
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    requests_finished: int = 0
    max_running: int = 0
    max_waiting: int = 0
    #: at request finish (SGLang's and TGI's counters move then, vLLM's and llama.cpp's at admission)
    finished_prompt_tokens: int = 0
    finished_cached_tokens: int = 0
    finished_generation_tokens: int = 0


def tokenize(text: str) -> list[str]:
    return text.split()


def token_id(tok: Any) -> int:
    return tok if isinstance(tok, int) else zlib.crc32(str(tok).encode()) % 262144


class _Engine:
    """The simulated scheduler (one asyncio task)."""

    def __init__(self, b: Behaviour) -> None:
        self.b = b
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.cache: set[int] = set()
        self.c = FakeCounters()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._slowed_one = False
        self._rng = random.Random(b.jitter_seed)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass

    def submit(self, seq: _Seq) -> None:
        seq.t_arrival = time.perf_counter()
        over = self.b.slow_first_prompt_over
        if over is not None and not self._slowed_one and len(seq.tokens) >= over:
            seq.slowed, self._slowed_one = True, True
        self.waiting.append(seq)
        self.c.max_waiting = max(self.c.max_waiting, len(self.waiting))
        self._wake.set()

    # -- prefix cache (chained block hashes, like vLLM's) -----------------------------------
    def _block_hashes(self, tokens: list[Any]) -> list[int]:
        out, h, bs = [], 0, self.b.cache_block
        for i in range(len(tokens) // bs):
            h = hash((h, tuple(tokens[i * bs:(i + 1) * bs])))
            out.append(h)
        return out

    def _lookup(self, tokens: list[Any]) -> int:
        if not self.b.prefix_cache:
            return 0
        n = 0
        for i, h in enumerate(self._block_hashes(tokens)):
            if h not in self.cache:
                break
            n = (i + 1) * self.b.cache_block
        return min(n, len(tokens) - 1)  # at least one token is always computed

    def _insert(self, tokens: list[Any]) -> None:
        if self.b.prefix_cache:
            self.cache.update(self._block_hashes(tokens))

    # -- costs ---------------------------------------------------------------------------------
    def prefill_cost(self, p0: int, p1: int) -> float:
        b = self.b
        return b.prefill_s_per_token * (p1 - p0) + b.prefill_s_per_token2 * (p1 * p1 - p0 * p0)

    def decode_cost(self, seqs: list[_Seq]) -> float:
        if not seqs:
            return 0.0
        b = self.b
        ctx = sum(len(s.tokens) + s.generated for s in seqs)
        t = b.decode_step_s + b.decode_s_per_seq * (len(seqs) - 1) + b.decode_s_per_ctx_token * ctx
        return t * b.slow_factor if any(s.slowed for s in seqs) else t

    def kv_usage(self) -> float:
        used = sum(len(s.tokens) + s.generated for s in self.running)
        pool = self.b.kv_pool_tokens or self.b.slots * self.b.max_model_len
        return min(1.0, used / pool)

    def _fits(self, seq: _Seq) -> bool:
        if not self.b.kv_pool_tokens:
            return True
        used = sum(len(s.tokens) + s.max_tokens for s in self.running)
        return used + len(seq.tokens) + seq.max_tokens <= self.b.kv_pool_tokens or not self.running

    # -- the loop --------------------------------------------------------------------------------
    async def _loop(self) -> None:
        t_next = time.perf_counter()
        while True:
            self.running = [s for s in self.running if not s.cancelled]
            while self.waiting and self.waiting[0].cancelled:
                self.waiting.popleft()
            while self.waiting and len(self.running) < self.b.slots and self._fits(self.waiting[0]):
                s = self.waiting.popleft()
                s.n_cached = self._lookup(s.tokens) if s.use_cache else 0
                s.prefilled = s.n_cached
                self.c.prefix_queries += len(s.tokens)
                self.c.prefix_hits += s.n_cached
                self.c.prompt_tokens += len(s.tokens)
                self.c.prompt_tokens_cached += s.n_cached
                self.running.append(s)
            self.c.max_running = max(self.c.max_running, len(self.running))
            if not self.running:
                self._wake.clear()
                await self._wake.wait()
                t_next = time.perf_counter()
                continue
            prefilling = [s for s in self.running if s.prefilled < len(s.tokens)]
            decoding = [s for s in self.running if s.prefilled >= len(s.tokens) and s.generated > 0]
            now = time.perf_counter()
            for s in prefilling:
                if s.t_prefill_start is None:
                    s.t_prefill_start = now
            finished_prefill: list[_Seq] = []
            step = 0.0
            advance_decode: list[_Seq] = []
            if prefilling and self.b.chunked_prefill_tokens is None:
                s = prefilling[0]  # one whole prefill per step; decodes wait
                step = self.prefill_cost(s.prefilled, len(s.tokens))
                s.prefilled = len(s.tokens)
                finished_prefill.append(s)
            else:
                budget = (self.b.chunked_prefill_tokens or 0) - len(decoding)
                for s in prefilling:
                    if budget <= 0:
                        break
                    take = min(budget, len(s.tokens) - s.prefilled)
                    step += self.prefill_cost(s.prefilled, s.prefilled + take)
                    s.prefilled += take
                    budget -= take
                    if s.prefilled >= len(s.tokens):
                        finished_prefill.append(s)
                advance_decode = decoding
                step += self.decode_cost(decoding)
            if self.b.jitter_s > 0:
                step += self._rng.expovariate(1.0 / self.b.jitter_s)
            t_next = max(t_next, time.perf_counter() - 0.002) + step
            delay = t_next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t_emit = time.perf_counter()
            for s in finished_prefill:
                s.t_prefill_end = t_emit
                self._insert(s.tokens)
            for s in finished_prefill + advance_decode:
                s.generated += 1
                s.t_last = t_emit
                self.c.generation_tokens += 1
                done = s.generated >= s.max_tokens
                s.events.put_nowait(("token", s.generated, done))
                if done:
                    self.running.remove(s)
                    self.c.requests_finished += 1
                    self.c.finished_prompt_tokens += len(s.tokens)
                    self.c.finished_cached_tokens += s.n_cached
                    self.c.finished_generation_tokens += s.generated
                    s.events.put_nowait(("done", None, True))


class BehaviourFake(LoopbackServer):
    """``async with BehaviourFake(behaviour) as fake: fake.url``, or ``with fake.running():``."""

    thread_name = "behaviour-fake"

    def __init__(self, behaviour: Behaviour | None = None, port: int = 0) -> None:
        self.b = behaviour or Behaviour()
        self.port = port
        self.engine: _Engine | None = None
        self.requests_seen = 0
        #: per X-Request-Id, the times the exported span carries (``Behaviour.otlp_endpoint``)
        self.span_truth: dict[str, dict[str, Any]] = {}
        self._tracer: Any = None
        self._provider: Any = None

    @property
    def counters(self) -> FakeCounters:
        assert self.engine is not None
        return self.engine.c

    async def start(self) -> "BehaviourFake":
        self.engine = _Engine(self.b)
        self.engine.start()  # the scheduler task runs on the server's loop
        return await super().start()

    async def _on_stop(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
        if self._provider is not None:  # the spans still batched go out before the fake is gone
            await asyncio.get_running_loop().run_in_executor(None, self._provider.shutdown)
            self._provider = self._tracer = None

    def _middlewares(self) -> list[object]:
        return [self._network] if self.b.network_rtt_s > 0 else []

    def _routes(self, r: web.UrlDispatcher) -> None:
        r.add_post("/v1/completions", self._completions)
        r.add_post("/v1/chat/completions", self._chat)
        r.add_get("/v1/models", self._models)
        r.add_post("/tokenize", self._tokenize)
        r.add_get("/health", self._health)
        r.add_get("/metrics", self._metrics)
        if self.b.flavour == "llamacpp":
            r.add_get("/props", self._props)
            r.add_post("/completion", self._native_completion)
            r.add_post("/completions", self._native_completion)
        elif self.b.flavour == "tgi":
            r.add_get("/info", self._info)
        else:
            r.add_get("/version", self._version)

    @web.middleware
    async def _network(self, request: web.Request, handler: Any) -> web.StreamResponse:
        await asyncio.sleep(self.b.network_rtt_s)
        return await handler(request)

    # -- small endpoints -----------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"}) if self.b.flavour == "llamacpp" else web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.33.0"})

    async def _models(self, request: web.Request) -> web.Response:
        fl = self.b.flavour
        card: dict[str, Any] = {"id": self.b.model, "object": "model", "created": 0,
                                "owned_by": self.b.model if fl == "tgi" else fl}
        if fl != "tgi":  # TGI's model card has no context length (its /info has max_total_tokens)
            card["max_model_len"] = self.b.max_model_len
        return web.json_response({"object": "list", "data": [card]})

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_id": self.b.model, "max_concurrent_requests": 128,
                                  "max_input_tokens": self.b.max_model_len - 1, "max_total_tokens": self.b.max_model_len,
                                  "version": "3.3.7", "sha": "db931fcf", "docker_label": None})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({
            "default_generation_settings": {"n_ctx": self.b.max_model_len // max(1, self.b.slots), "params": {}},
            "total_slots": self.b.slots, "model_alias": self.b.model, "model_path": "/fake/model.gguf",
            "model_ftype": "Q4_K - Medium",
            "build_info": "b1-fake", "endpoint_slots": True, "endpoint_metrics": self.b.metrics,
        })

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt", body.get("content", ""))
        if self.b.flavour == "tgi":  # TGI: {"inputs"} → [{id, text, start, stop}]
            out, pos = [], 0
            for w in tokenize(str(body.get("inputs", ""))):
                out.append({"id": token_id(w), "text": w, "start": pos, "stop": pos + len(w)})
                pos += len(w) + 1
            return web.json_response(out)
        toks = [token_id(t) for t in (text if isinstance(text, list) else tokenize(str(text)))]
        if self.b.flavour == "llamacpp":
            return web.json_response({"tokens": toks})
        return web.json_response({"count": len(toks), "max_model_len": self.b.max_model_len, "tokens": toks})

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self.b.metrics:
            if self.b.flavour == "llamacpp":
                return web.json_response({"error": {"code": 501, "message": "This server does not support metrics endpoint. Start it with `--metrics`", "type": "not_supported_error"}}, status=501)
            return web.Response(status=404, text="Not Found")
        e = self.engine
        assert e is not None
        c = e.c
        lines: list[str] = []
        if self.b.flavour == "llamacpp":
            def m(name: str, kind: str, v: float) -> None:
                lines.extend([f"# HELP llamacpp:{name} {name}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {v:g}"])
            m("prompt_tokens_total", "counter", c.prompt_tokens - c.prompt_tokens_cached)
            m("prompt_tokens_cached_total", "counter", c.prompt_tokens_cached)
            m("tokens_predicted_total", "counter", c.generation_tokens)
            m("requests_processing", "gauge", len(e.running))
            m("requests_deferred", "gauge", len(e.waiting))
        elif self.b.flavour == "sglang":
            lines.extend(self._sglang_metrics(e))
        elif self.b.flavour == "tgi":
            lines.extend(self._tgi_metrics(e))
        else:
            lab = f'{{engine="0",model_name="{self.b.model}"}}'

            def m(name: str, kind: str, v: float) -> None:
                lines.extend([f"# HELP vllm:{name} {name}", f"# TYPE vllm:{name} {kind}", f"vllm:{name}{lab} {float(v)!r}"])
            m("num_requests_running", "gauge", len(e.running))
            m("num_requests_waiting", "gauge", len(e.waiting))
            m("kv_cache_usage_perc", "gauge", e.kv_usage())
            m("prefix_cache_queries_total", "counter", c.prefix_queries)
            m("prefix_cache_hits_total", "counter", c.prefix_hits)
            m("prompt_tokens_total", "counter", c.prompt_tokens)
            m("generation_tokens_total", "counter", c.generation_tokens)
            m("num_preemptions_total", "counter", 0)
            pc = "True" if self.b.prefix_cache else "False"
            lines.extend(["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                          "# TYPE vllm:cache_config_info gauge",
                          f'vllm:cache_config_info{{block_size="{self.b.cache_block}",cache_dtype="auto",'
                          f'enable_prefix_caching="{pc}",engine="0",gpu_memory_utilization="0.9"}} 1.0'])
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _sglang_metrics(self, e: _Engine) -> list[str]:
        """SGLang 0.5.23's families (server-apis.md §2.2, §2.4): scheduler gauges with the scheduler
        labels, tokenizer counters (at request finish) with ``is_streaming``."""
        c, mdl = e.c, self.b.model
        sched = f'{{engine_type="unified",model_name="{mdl}",moe_ep_rank="0",pp_rank="0",tp_rank="0"}}'
        tok = f'{{engine_type="unified",is_streaming="true",model_name="{mdl}"}}'
        out: list[str] = []

        def m(name: str, kind: str, help_: str, labels: str, v: float) -> None:
            out.extend([f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} {kind}", f"sglang:{name}{labels} {float(v)!r}"])
        m("prompt_tokens_total", "counter", "Number of prefill tokens processed.", tok, c.finished_prompt_tokens)
        m("generation_tokens_total", "counter", "Number of generation tokens processed.", tok, c.finished_generation_tokens)
        m("cached_tokens_total", "counter", "Number of cached prompt tokens by source (device/host/storage).",
          f'{{cache_source="device",engine_type="unified",model_name="{mdl}"}}', c.finished_cached_tokens)
        m("num_requests_total", "counter", "Number of requests processed.", tok, c.requests_finished)
        m("num_running_reqs", "gauge", "The number of running requests.", sched, len(e.running))
        m("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", sched, len(e.waiting))
        m("token_usage", "gauge", "The token usage.", sched, e.kv_usage())
        return out

    def _tgi_metrics(self, e: _Engine) -> list[str]:
        """TGI's families (server-apis.md §3.2, §3.3): bare counter names, no labels, histograms with
        ``le`` last; no KV or prefix-cache figures."""
        c = e.c
        out: list[str] = []

        def m(name: str, kind: str, help_: str, v: float) -> None:
            out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {v!r}" if kind == "gauge" else f"{name} {int(v)}"])

        def h(name: str, help_: str, total: float, n: int) -> None:
            out.extend([f"# HELP {name} {help_}", f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf"}} {n}',
                        f"{name}_sum {float(total)!r}", f"{name}_count {n}"])
        m("tgi_request_count", "counter", "Total number of requests", self.requests_seen)
        m("tgi_request_success", "counter", "Number of successful requests", c.requests_finished)
        m("tgi_queue_size", "gauge", "Current queue size", float(len(e.waiting)))
        m("tgi_batch_current_size", "gauge", "Current batch size", float(len(e.running)))
        h("tgi_request_input_length", "Input length per request", c.finished_prompt_tokens, c.requests_finished)
        h("tgi_request_generated_tokens", "Generated tokens per request", c.finished_generation_tokens, c.requests_finished)
        return out

    # -- generation ---------------------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        p = body.get("prompt", "")
        tokens = list(p) if isinstance(p, list) else tokenize(str(p))
        return await self._generate(request, body, tokens, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens: list[Any] = []
        for msg in body.get("messages", []):
            tokens.append(f"<{msg.get('role', 'user')}>")
            tokens.extend(tokenize(str(msg.get("content") or "")))
        tokens.append("<assistant>")
        return await self._generate(request, body, tokens, chat=True)

    async def _submit(self, body: dict[str, Any], tokens: list[Any], max_tokens: int) -> "_Seq | web.Response":
        """Count the request, check it, pay the overhead and hand it to the scheduler (or the error answer).
        ``cache_prompt: false`` (llama.cpp) computes the whole prompt, whatever is cached."""
        self.requests_seen += 1
        b = self.b
        if not tokens:
            return web.json_response({"error": {"message": "empty prompt", "type": "BadRequestError", "code": 400}}, status=400)
        if len(tokens) + max_tokens > b.max_model_len:
            return web.json_response({"error": {"message": f"This model's maximum context length is {b.max_model_len} tokens.",
                                                "type": "BadRequestError", "code": 400}}, status=400)
        if b.overhead_s > 0:
            await asyncio.sleep(b.overhead_s)
        assert self.engine is not None
        seq = _Seq(tokens=tokens, max_tokens=max_tokens, events=asyncio.Queue(),
                   use_cache=body.get("cache_prompt") is not False)
        self.engine.submit(seq)
        return seq

    async def _native_completion(self, request: web.Request) -> web.StreamResponse:
        """llama-server's native ``POST /completion``: SSE ``data:`` events (``content``, ``stop``), no
        ``[DONE]``; the last event is ``stop: true`` with ``timings`` (server-apis.md §4)."""
        body = await request.json()
        p = body.get("prompt", "")
        tokens = list(p) if isinstance(p, list) else tokenize(str(p))
        n_predict = int(body.get("n_predict", body.get("max_tokens", -1)))
        seq = await self._submit(body, tokens, n_predict if n_predict > 0 else 64)
        if not isinstance(seq, _Seq):
            return seq

        def final(content: str) -> dict[str, Any]:
            return {"index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": self.b.model,
                    "tokens_predicted": seq.generated, "tokens_evaluated": len(seq.tokens), "stop_type": "limit",
                    "stopping_word": "", "tokens_cached": len(seq.tokens) + seq.generated - 1,
                    "timings": self._timings(seq)}
        try:
            if not body.get("stream"):
                texts = []
                while True:
                    kind, n, _done = await seq.events.get()
                    if kind == "done":
                        break
                    texts.append(f" w{n}")
                return web.json_response(final("".join(texts)))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)

            async def send(o: dict[str, Any]) -> None:
                await resp.write(f"data: {json.dumps(o, separators=(',', ':'))}\n\n".encode())
            while True:
                kind, n, _done = await seq.events.get()
                if kind == "done":
                    break
                await send({"index": 0, "content": f" w{n}", "tokens": [100 + n], "stop": False, "id_slot": -1,
                            "tokens_predicted": n, "tokens_evaluated": len(seq.tokens)})
            await send(final(""))
            await resp.write_eof()
            return resp
        except asyncio.CancelledError:
            seq.cancelled = True
            raise
        except ConnectionResetError:
            seq.cancelled = True
            return web.Response(status=499)

    async def _generate(self, request: web.Request, body: dict[str, Any], tokens: list[Any], chat: bool) -> web.StreamResponse:
        b = self.b
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        seq = await self._submit(body, tokens, max_tokens)
        if not isinstance(seq, _Seq):
            return seq
        rid = f"cmpl-{self.requests_seen}"
        created = int(time.time())
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        obj = "chat.completion.chunk" if chat else "text_completion"
        texts: list[str] = []
        try:
            if not stream:
                while True:
                    kind, n, done = await seq.events.get()
                    if kind == "token":
                        texts.append(f" w{n}")
                    if done and kind == "done":
                        break
                text = "".join(texts)
                choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                out = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
                       "model": b.model, "choices": [choice], "usage": self._usage(seq)}
                if b.flavour == "llamacpp":
                    out["timings"] = self._timings(seq)
                return web.json_response(out)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)

            async def send(o: dict[str, Any]) -> None:
                await resp.write(f"data: {json.dumps(o, separators=(',', ':'))}\n\n".encode())

            if chat:
                await send({"id": rid, "object": obj, "created": created, "model": b.model,
                            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]})
            while True:
                kind, n, done = await seq.events.get()
                if kind == "done":
                    break
                fin = "length" if done else None
                piece = f" w{n}"
                ch = ({"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": fin} if chat
                      else {"index": 0, "text": piece, "logprobs": None, "finish_reason": fin})
                await send({"id": rid, "object": obj, "created": created, "model": b.model, "choices": [ch]})
            if include_usage:
                last: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": b.model, "choices": [],
                                        "usage": self._usage(seq)}
                if b.flavour == "llamacpp":
                    last["timings"] = self._timings(seq)
                await send(last)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self._export_span(request, seq)
            return resp
        except asyncio.CancelledError:
            seq.cancelled = True
            raise
        except ConnectionResetError:  # the client hung up (an experiment stopping a stream): not an error
            seq.cancelled = True
            return web.Response(status=499)

    def _export_span(self, request: web.Request, seq: _Seq) -> None:
        """The finished request's span(s), named as the flavour's engine names them
        (:mod:`phasescope.testing.span_export`; ``Behaviour.otlp_endpoint``): queue = arrival → prefill start,
        prefill = prefill start → first token, decode = first → last token, TTFT and E2E from arrival; recorded
        in ``span_truth`` by ``X-Request-Id``."""
        if not self.b.otlp_endpoint or seq.t_prefill_start is None or seq.t_prefill_end is None:
            return
        from phasescope.testing import span_export as X

        if self._tracer is None:
            self._provider, self._tracer = X.tracer_for(self.b.otlp_endpoint, self.b.flavour)
        xrid = request.headers.get("X-Request-Id") or f"fake-{self.requests_seen}"
        arrival, p0, p1 = seq.t_arrival, seq.t_prefill_start, seq.t_prefill_end
        if not self.b.span_counts_queue:
            arrival = p0
        last = seq.t_last or p1
        truth: dict[str, Any] = {"request_id": f"cmpl-{xrid}", "queue_s": p0 - arrival, "prefill_s": p1 - p0,
                                 "decode_s": last - p1, "ttft_s": p1 - arrival, "e2e_s": last - arrival,
                                 "t_arrival": arrival}
        if self.b.flavour == "sglang":
            truth["request_id"] = f"{zlib.crc32(xrid.encode()):08x}{len(self.span_truth):024x}"  # SGLang's own rid
            X.export_sglang(self._tracer, request.headers, truth["request_id"], arrival, p0, p1, last)
        elif self.b.flavour == "tgi":
            handler = "chat_completions" if request.path.endswith("/chat/completions") else "completions"
            truth.update(request_id=None, validation_s=0.0, inference_s=last - p0, span_name=handler)
            X.export_tgi(self._tracer, request.headers, handler, arrival, p0, last, seq.generated)
        else:
            X.export_vllm(self._tracer, request.headers, truth, len(seq.tokens), seq.generated, self.b.model)
        self.span_truth[xrid] = truth

    def _usage(self, seq: _Seq) -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": len(seq.tokens), "completion_tokens": seq.generated,
                             "total_tokens": len(seq.tokens) + seq.generated}
        if self.b.report_cached_tokens:
            u["prompt_tokens_details"] = {"cached_tokens": seq.n_cached}
        return u

    def _timings(self, seq: _Seq) -> dict[str, Any]:
        p0 = seq.t_prefill_start or seq.t_arrival
        p1 = seq.t_prefill_end or p0
        prompt_ms = (p1 - p0) * 1e3
        predicted_ms = ((seq.t_last or p1) - p1) * 1e3
        prompt_n = len(seq.tokens) - seq.n_cached
        return {"cache_n": seq.n_cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / max(1, prompt_n),
                "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
                "predicted_n": seq.generated, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / max(1, seq.generated - 1),
                "predicted_per_second": 1e3 * (seq.generated - 1) / predicted_ms if predicted_ms > 0 else 0.0}


def running_behaviour_fake(behaviour: Behaviour | None = None) -> contextlib.AbstractContextManager[BehaviourFake]:
    """Run a :class:`BehaviourFake` on its own event-loop thread (for sync tests and CLI runs)."""
    return BehaviourFake(behaviour).running()


__all__ = ["FLAVOURS", "Behaviour", "BehaviourFake", "FakeCounters", "running_behaviour_fake", "tokenize"]
