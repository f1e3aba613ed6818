"""The fake's ``GET /metrics``: Prometheus text with the families phasescope reads, named as vLLM
(``vllm:*``, labels ``engine``, ``model_name``), SGLang (``sglang:*``) and llama-server
(``llamacpp:*``) name them, from the fake's own counters. (A full vLLM exposition whose histograms
evolve per scrape is :mod:`phasescope.testing.metrics_fake`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from phasescope.testing.wire.common import bind

if TYPE_CHECKING:
    from phasescope.testing.fakeserver import FakeServer


def add_routes(srv: FakeServer, r: web.UrlDispatcher) -> None:
    r.add_get("/metrics", bind(srv, metrics))


def _family(name: str, kind: str, help_: str, labels: str, value: float) -> str:
    return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n{name}{labels} {value}\n"


async def metrics(srv: FakeServer, request: web.Request) -> web.Response:
    c = srv._counters
    if srv.flavor == "llamacpp":
        text = (
            _family("llamacpp:prompt_tokens_total", "counter",
                    "Number of prompt tokens processed, excluding cached tokens", "", c["prompt"])
            + _family("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed", "", c["gen"])
            + _family("llamacpp:requests_processing", "gauge", "Number of requests processing", "", srv._running)
            + _family("llamacpp:spec_decode_num_draft_tokens_total", "counter",
                      "Speculative: Total draft tokens generated", "", c["spec_draft_tokens"])
            + _family("llamacpp:spec_decode_num_accepted_tokens_total", "counter",
                      "Speculative: Total draft tokens accepted by the target model", "", c["spec_accepted"])
            + _family("llamacpp:spec_decode_num_drafts_total", "counter",
                      "Speculative: Total speculative decoding verification steps", "", c["spec_drafts"])
        )
    else:
        p = "vllm:" if srv.flavor == "vllm" else "sglang:"
        lab = f'{{engine="0",model_name="{srv.model}"}}' if srv.flavor == "vllm" else f'{{model_name="{srv.model}"}}'
        text = (
            _family(f"{p}num_requests_running", "gauge", "Number of requests in model execution batches.", lab,
                    float(srv._running))
            + _family(f"{p}prompt_tokens_total", "counter", "Number of prefill tokens processed.", lab, float(c["prompt"]))
            + _family(f"{p}generation_tokens_total", "counter", "Number of generation tokens processed.", lab,
                      float(c["gen"]))
        )
        if srv.prefix_cache and srv.flavor == "vllm":
            text += (_family("vllm:prefix_cache_queries_total", "counter",
                             "Prefix cache queries, in terms of number of queried tokens.", lab, float(c["pc_queries"]))
                     + _family("vllm:prefix_cache_hits_total", "counter",
                               "Prefix cache hits, in terms of number of cached tokens.", lab, float(c["pc_hits"])))
        elif srv.prefix_cache:
            text += _family("sglang:cached_tokens_total", "counter", "The number of prefix cached tokens.", lab,
                            float(c["pc_hits"]))
        if srv.spec_draft and srv.flavor == "vllm":  # vllm/v1/spec_decode/metrics.py (SpecDecodingProm)
            text += (_family("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", lab,
                             float(c["spec_drafts"]))
                     + _family("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", lab,
                               float(c["spec_draft_tokens"]))
                     + _family("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
                               lab, float(c["spec_accepted"])))
        elif srv.spec_draft and c["spec_drafts"]:  # SGLang: gauges the scheduler sets (tokens per verify step, bonus in)
            text += (_family("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.",
                             lab, (c["spec_accepted"] + c["spec_drafts"]) / c["spec_drafts"])
                     + _family("sglang:spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding.",
                               lab, c["spec_accepted"] / max(1, c["spec_draft_tokens"])))
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={})
