"""A fake vLLM ``/metrics`` endpoint on 127.0.0.1 whose metrics evolve on every scrape.

vLLM serves /metrics with prometheus_client; this fake re-declares the vLLM 0.33 families with the
same names, labels (``model_name``, ``engine``), bucket bounds and registry mode
(vLLM's ``vllm/v1/metrics/loggers.py``) and renders them with prometheus_client's own
``choose_encoder`` — classic text 0.0.4 unless the client advertises OpenMetrics, exactly like
vLLM's mount. ``names="0.8"`` exposes the pre-rename names (``gpu_cache_usage_perc``,
``gpu_prefix_cache_*``, ``time_per_output_token_seconds``).

Usage::

    state = VllmMetricsState(model="m", engines=("0",))
    with MetricsFakeServer(state, scenario=steady()).running() as srv:   # sync (own loop thread)
        ... srv.url ...                     # http://127.0.0.1:PORT ; GET /metrics
    async with MetricsFakeServer(state) as srv: ...                      # inside a loop

``scenario`` is called as ``scenario(state, n)`` before the n-th scrape (n = 0, 1, …) is rendered,
so each scrape sees new observations. ``mode`` injects faults: ``"404"``, ``"501"`` (llama.cpp
without --metrics), ``"html"``, ``"json"``, ``"unknown"`` (Prometheus text from no known engine),
``"quoted"`` (llama.cpp #17384: the exposition as a JSON string). ``srv.accept_headers`` records the
Accept header of every scrape.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from phasescope.testing._serve import LoopbackServer

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
#: vLLM's request_tokens family: a 1-2-5 series capped at max_model_len (here 32768)
REQUEST_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
REQ_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class VllmMetricsState:
    """The vLLM metric families of one server (several models/engines allowed), mutable between scrapes."""

    def __init__(self, model: str = "fake-model", engines: tuple[str, ...] = ("0",), names: str = "0.33",
                 models: tuple[str, ...] | None = None) -> None:
        self.models = models or (model,)
        self.engines = engines
        self.names = names
        self.restarts = 0
        self._declare()

    def _declare(self) -> None:
        """(Re)create the registry: a server restart sets every counter and histogram back to 0."""
        r = self.registry = CollectorRegistry()
        ln = ["model_name", "engine"]
        old = self.names == "0.8"
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", ln, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ln, registry=r)
        self.kv = Gauge("vllm:gpu_cache_usage_perc" if old else "vllm:kv_cache_usage_perc",
                        "KV-cache usage. 1 means 100 percent usage.", ln, registry=r)
        pfx = "vllm:gpu_prefix_cache" if old else "vllm:prefix_cache"
        self.queries = Counter(pfx + "_queries", "Prefix cache queries, in terms of number of queried tokens.", ln, registry=r)
        self.hits = Counter(pfx + "_hits", "Prefix cache hits, in terms of number of cached tokens.", ln, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", ln, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               ln + ["finished_reason"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ln,
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:time_per_output_token_seconds" if old else "vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", ln, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", ln,
                             buckets=REQ_BUCKETS, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                               ln, buckets=REQ_BUCKETS, registry=r)
        self.prefill = Histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                                 ln, buckets=REQ_BUCKETS, registry=r)
        self.decode = Histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                                ln, buckets=REQ_BUCKETS, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", ln, buckets=ITL_BUCKETS,
                              registry=r)
        self.kv_computed = Histogram("vllm:request_prefill_kv_computed_tokens",
                                     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", ln,
                                     buckets=REQUEST_TOKEN_BUCKETS, registry=r)
        # vLLM pre-creates every series per engine (create_metric_per_engine)
        for m in self.models:
            for e in self.engines:
                for fam in (self.running, self.waiting, self.kv, self.queries, self.hits, self.preemptions,
                            self.prompt_tokens, self.generation_tokens, self.ttft, self.itl, self.e2e, self.queue,
                            self.prefill, self.decode, self.tpot, self.kv_computed):
                    fam.labels(m, e)
                for reason in ("stop", "length", "abort"):
                    self.success.labels(m, e, reason)

    def restart(self) -> None:
        """Simulate a server restart: all counters and histograms start again from 0."""
        self.restarts += 1
        self._declare()

    def _l(self, model: str | None, engine: str) -> tuple[str, str]:
        return (model or self.models[0], engine)

    def set_load(self, running: float, waiting: float, kv: float, *, model: str | None = None, engine: str = "0") -> None:
        lab = self._l(model, engine)
        self.running.labels(*lab).set(running)
        self.waiting.labels(*lab).set(waiting)
        self.kv.labels(*lab).set(kv)

    def finish_requests(self, ttfts: list[float], itls: list[float], *, prompt_tokens: int = 0, cached_tokens: int = 0,
                        gen_tokens: int = 0, model: str | None = None, engine: str = "0") -> None:
        """Record finished requests: TTFT and ITL observations plus token counters."""
        lab = self._l(model, engine)
        n = max(1, len(ttfts))
        decode_s = sum(itls) / n  # per request
        per_req_out = len(itls) / n + 1
        for v in ttfts:
            self.ttft.labels(*lab).observe(v)
            self.e2e.labels(*lab).observe(v + decode_s)
            self.queue.labels(*lab).observe(0.0)
            self.prefill.labels(*lab).observe(v)
            self.decode.labels(*lab).observe(decode_s)
            if per_req_out > 1:
                self.tpot.labels(*lab).observe(decode_s / (per_req_out - 1))
            self.kv_computed.labels(*lab).observe((prompt_tokens - cached_tokens) / n)
            self.success.labels(*lab, "length").inc()
        for v in itls:
            self.itl.labels(*lab).observe(v)
        self.prompt_tokens.labels(*lab).inc(prompt_tokens)
        self.queries.labels(*lab).inc(prompt_tokens)
        self.hits.labels(*lab).inc(cached_tokens)
        self.generation_tokens.labels(*lab).inc(gen_tokens)

    def preempt(self, n: int = 1, *, model: str | None = None, engine: str = "0") -> None:
        self.preemptions.labels(*self._l(model, engine)).inc(n)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


Scenario = Callable[[VllmMetricsState, int], None]


def steady(ttft_s: float = 0.045, itl_s: float = 0.018, per_scrape: int = 4) -> Scenario:
    """Every scrape: ``per_scrape`` requests finished (512 prompt tokens, half cached; 64 output tokens)."""

    def tick(st: VllmMetricsState, n: int) -> None:
        st.set_load(running=3, waiting=0, kv=0.31)
        st.finish_requests([ttft_s] * per_scrape, [itl_s] * (63 * per_scrape), prompt_tokens=512 * per_scrape,
                           cached_tokens=256 * per_scrape, gen_tokens=64 * per_scrape)

    return tick


def saturated() -> Scenario:
    """KV pool full and a growing queue, TTFT growing, ITL flat with a slow tail, preemptions."""

    def tick(st: VllmMetricsState, n: int) -> None:
        st.set_load(running=48, waiting=5 + 3 * n, kv=0.985)
        ttft = 0.05 * (1 + n) ** 2
        st.finish_requests([ttft] * 4, [0.018] * 240 + [0.35] * 12, prompt_tokens=2048, gen_tokens=256)
        if n >= 1:
            st.preempt(2)

    return tick


def restart_at(k: int, inner: Scenario | None = None) -> Scenario:
    """``inner`` every scrape, and a server restart (all counters → 0) just before scrape ``k``."""
    base = inner or steady()

    def tick(st: VllmMetricsState, n: int) -> None:
        if n == k:
            st.restart()
        base(st, n)

    return tick


_UNKNOWN = "# HELP myapp_requests_total Requests.\n# TYPE myapp_requests_total counter\nmyapp_requests_total 3.0\n"


class MetricsFakeServer(LoopbackServer):
    """aiohttp server on 127.0.0.1:<free port> serving ``GET /metrics`` from a :class:`VllmMetricsState`."""

    thread_name = "metrics-fake"

    def __init__(self, state: VllmMetricsState | None = None, *, scenario: Scenario | None = None,
                 mode: str = "ok") -> None:
        self.state = state or VllmMetricsState()
        self.scenario = scenario
        self.mode = mode
        self.scrapes = 0
        self.accept_headers: list[str] = []
        self._lock = threading.Lock()

    async def _metrics(self, request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        self.accept_headers.append(accept)
        if self.mode == "404":
            return web.json_response({"detail": "Not Found"}, status=404)
        if self.mode == "501":
            return web.json_response(
                {"error": {"code": 501, "message": "This server does not support metrics endpoint. Start it with `--metrics`",
                           "type": "not_supported_error"}}, status=501)
        if self.mode == "html":
            return web.Response(text="<!doctype html><html><body>dashboard</body></html>", content_type="text/html")
        if self.mode == "json":
            return web.json_response({"status": "ok"})
        if self.mode == "unknown":
            return web.Response(body=_UNKNOWN.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
        with self._lock:
            if self.scenario is not None:
                self.scenario(self.state, self.scrapes)
            self.scrapes += 1
            body, ctype = self.state.render(accept)
        if self.mode == "quoted":
            body = json.dumps(body.decode()).encode()
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def _routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/metrics", self._metrics)
        router.add_get("/health", self._health)
