"""The real embedded llama-server (one per session, the ``engine`` fixture): the endpoints and
behaviours every phasescope command relies on. Small prompts and few tokens keep it fast."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytestmark = pytest.mark.engine


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read().decode()


def _post(url: str, body: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.eE+-]+)$", text, re.MULTILINE)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_health_and_props_match_the_handle(engine) -> None:
    status, body = _get(engine.url + "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    props = json.loads(_get(engine.url + "/props")[1])
    assert props["total_slots"] == engine.parallel
    assert props["default_generation_settings"]["n_ctx"] == engine.ctx_size // engine.parallel
    assert props["model_alias"] == engine.model_alias == "gemma-3-270m"
    assert props["model_path"] == str(engine.model_path)
    assert engine.url.startswith("http://127.0.0.1:")


def test_completion_reports_timings(engine) -> None:
    out = _post(engine.url + "/completion", {
        "prompt": "The capital of France is", "n_predict": 8, "temperature": 0,
        "ignore_eos": True, "cache_prompt": False,
    })
    t = out["timings"]
    assert out["tokens_predicted"] == 8 == t["predicted_n"]
    assert t["prompt_n"] == out["tokens_evaluated"] > 0
    assert t["prompt_ms"] > 0 and t["predicted_ms"] > 0
    # predicted_per_second = (n - 1) / predicted_ms: llama.cpp counts the first token as free
    assert t["predicted_per_second"] == pytest.approx(1000.0 * (t["predicted_n"] - 1) / t["predicted_ms"], rel=1e-3)


def test_v1_completions_streams_one_token_per_event_then_usage_and_done(engine) -> None:
    body = {"model": engine.model_alias, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(engine.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    events: list[str] = []
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c.get("choices") and c["choices"][0].get("text")]
    assert 1 <= len(texts) <= 6
    last = chunks[-1]
    assert last["usage"]["completion_tokens"] == 6
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["timings"]["predicted_n"] == 6


def test_metrics_counters_advance(engine) -> None:
    before = _get(engine.url + "/metrics")[1]
    _post(engine.url + "/completion", {"prompt": "one two three", "n_predict": 4, "ignore_eos": True,
                                        "cache_prompt": False})
    after = _get(engine.url + "/metrics")[1]
    assert _metric(after, "llamacpp:tokens_predicted_total") >= _metric(before, "llamacpp:tokens_predicted_total") + 4
    assert _metric(after, "llamacpp:prompt_tokens_total") > _metric(before, "llamacpp:prompt_tokens_total")
    assert _metric(after, "llamacpp:requests_processing") == 0


def test_tokenize_detokenize_roundtrip(engine) -> None:
    text = "Prefill is compute-bound; decode is bandwidth-bound."
    toks = _post(engine.url + "/tokenize", {"content": text})["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert _post(engine.url + "/detokenize", {"tokens": toks})["content"].strip() == text
    with_bos = _post(engine.url + "/tokenize", {"content": text, "add_special": True})["tokens"]
    assert len(with_bos) == len(toks) + 1


def test_prompt_cache_reuses_the_prefix_on_repeat(engine) -> None:
    prompt = "phasescope cache test " + " ".join(f"w{i}" for i in range(120))
    body = {"prompt": prompt, "n_predict": 2, "ignore_eos": True, "cache_prompt": True, "temperature": 0}
    first = _post(engine.url + "/completion", body)["timings"]
    second = _post(engine.url + "/completion", body)["timings"]
    assert second["cache_n"] > first["cache_n"]
    assert second["cache_n"] >= 0.9 * (first["prompt_n"] + first["cache_n"])
    assert second["prompt_n"] < first["prompt_n"]


def test_parallel_slots_decode_concurrent_requests_together(engine) -> None:
    """4 concurrent streams land in 4 distinct slots and their generation windows overlap
    (continuous batching); served one after another, the windows would be disjoint."""
    n = min(4, engine.parallel)
    barrier = threading.Barrier(n)

    def one(i: int) -> tuple[float, float, int]:
        body = {"prompt": f"Request {i}: count slowly", "n_predict": 24, "ignore_eos": True,
                "cache_prompt": False, "stream": True}
        req = urllib.request.Request(engine.url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        barrier.wait()
        first = last = None
        slot = -1
        with urllib.request.urlopen(req, timeout=120) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                ev = json.loads(line[6:])
                now = time.monotonic()
                if ev.get("content") and first is None:
                    first = now
                last = now
                if ev.get("stop"):
                    slot = ev.get("id_slot", -1)
        assert first is not None and last is not None
        return first, last, slot

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    starts = [r[0] for r in results]
    ends = [r[1] for r in results]
    assert max(starts) < min(ends), "generation windows do not overlap: requests were not batched"
    assert len({r[2] for r in results}) == n
