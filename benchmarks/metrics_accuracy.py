"""How far can the /metrics view be trusted? Two checks, ratios measured in one run.

1. Bucket interpolation: observations drawn from log-normal TTFT/ITL distributions are put into vLLM's
   default buckets (prometheus_client Histogram, as vLLM does) and ``histogram_quantile`` on the window
   delta is compared with the exact quantile of the raw observations (numpy, linear).
2. Counters vs the client: K ``/completion`` requests against the embedded llama-server; the deltas of
   ``llamacpp:prompt_tokens_total``, ``prompt_tokens_cached_total`` and ``tokens_predicted_total``
   between a scrape before and after are compared with the sums of each response's ``timings``
   (``prompt_n``, ``cache_n``, ``predicted_n``).

Run: ``.venv/bin/python benchmarks/metrics_accuracy.py [--requests 12] [--skip-engine]``
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import urllib.request

import numpy as np


def bucket_check(seed: int = 1) -> None:
    from phasescope.metrics import Timeline, parse_snapshot
    from phasescope.testing.metrics_fake import VllmMetricsState

    rng = np.random.default_rng(seed)
    print("1) histogram_quantile on vLLM default buckets vs exact quantiles of the raw observations")
    print(f"   {'distribution':42s} {'q':>5s} {'exact':>10s} {'from buckets':>13s} {'ratio':>7s}")
    cases = [
        ("TTFT lognormal median 80 ms", 0.08, 0.5, "ttft"),
        ("TTFT lognormal median 1.2 s", 1.2, 0.7, "ttft"),
        ("ITL lognormal median 18 ms", 0.018, 0.3, "itl"),
        ("ITL lognormal median 6 ms (< 1st bucket)", 0.006, 0.3, "itl"),
    ]
    for label, median, sigma, kind in cases:
        st = VllmMetricsState(model="m")
        tl = Timeline(60)
        tl.add(parse_snapshot(st.render()[0].decode(), t_ns=0))
        obs = rng.lognormal(np.log(median), sigma, size=5000)
        if kind == "ttft":
            st.finish_requests(list(obs), [])
        else:
            st.finish_requests([], list(obs))
        tl.add(parse_snapshot(st.render()[0].decode(), t_ns=10**9))
        for q in (0.5, 0.9, 0.99):
            exact = float(np.quantile(obs, q))
            est = tl.quantile(kind, q)
            print(f"   {label:42s} {q:5.2f} {exact * 1e3:8.2f}ms {est * 1e3:11.2f}ms {est / exact:7.3f}")
        mean_est = tl.hist_mean(kind)
        print(f"   {label:42s} {'mean':>5s} {obs.mean() * 1e3:8.2f}ms {mean_est * 1e3:11.2f}ms {mean_est / obs.mean():7.3f}")


def engine_check(n_requests: int) -> None:
    from phasescope.engine import running_engine
    from phasescope.metrics import Timeline, scrape_once

    print(f"\n2) llama.cpp counters vs {n_requests} responses' own timings (embedded engine)")
    with running_engine() as eng:
        tl = Timeline(3600)
        tl.add(scrape_once(eng.url))
        results: list[dict] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            # every third request repeats an earlier prompt, so the prompt cache is exercised
            body = {"prompt": f"Request {i % 8}: describe a river in one sentence", "n_predict": 16,
                    "ignore_eos": True, "cache_prompt": True, "temperature": 0}
            req = urllib.request.Request(eng.url + "/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                d = json.loads(r.read())
            with lock:
                results.append(d["timings"])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n_requests)]
        for i in range(0, n_requests, 4):  # 4 at a time = the engine's slots
            for t in threads[i:i + 4]:
                t.start()
            for t in threads[i:i + 4]:
                t.join()
        tl.add(scrape_once(eng.url))
    client = {
        "prompt_tokens_computed": sum(t["prompt_n"] for t in results),
        "prompt_tokens_cached": sum(t["cache_n"] for t in results),
        "generation_tokens": sum(t["predicted_n"] for t in results),
    }
    print(f"   {'counter':26s} {'Δ /metrics':>11s} {'Σ responses':>12s} {'ratio':>7s}")
    for name, want in client.items():
        got = tl.total_increase(name) or 0.0
        print(f"   {name:26s} {got:11.0f} {want:12d} {got / want if want else float('nan'):7.3f}")
    s = tl.summary()
    print(f"   window {tl.span_s:.1f} s: prompt {s['prompt_tok_s']:.1f} tok/s, generation {s['generation_tok_s']:.1f} tok/s, "
          f"prefix-cache hit rate {s['prefix_cache_hit_rate']:.3f}, itl_mean {s['itl_mean_s'] * 1e3:.1f} ms")
    exact_itl = sum(t["predicted_ms"] for t in results) / sum(max(t["predicted_n"] - 1, 0) for t in results) / 1e3
    print(f"   itl_mean from counters {s['itl_mean_s'] * 1e3:.2f} ms vs Σpredicted_ms/Σ(predicted_n−1) "
          f"{exact_itl * 1e3:.2f} ms: ratio {s['itl_mean_s'] / exact_itl:.3f} (expected (n−1)/n = {15 / 16:.3f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--skip-engine", action="store_true")
    a = ap.parse_args()
    bucket_check()
    if not a.skip_engine:
        engine_check(a.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
