"""Render the larger exposition samples in this folder (run: ``python render_samples.py``).

Like the "rendered" samples of ``shared/reference/server-apis.md``: the metrics are re-declared with
the names, labels, buckets and registry mode of the cited source and rendered by prometheus_client
(the library vLLM and SGLang serve /metrics with); values are made up, formatting is real.
TGI (Rust metrics-exporter-prometheus) and llama.cpp (hand-written C++ ``<<`` of doubles) are
formatted by hand following their formatting rules. The small verbatim samples copied from the
reference (``vllm_0.33.txt``, ``sglang_0.5.23.txt``, ``tgi_3.3.txt``, ``llamacpp_*.txt``) are not
generated here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
REQ_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0]
# vLLM 0.6 (V0) defaults
V0_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
V0_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]


def vllm_033_dp2() -> str:
    """vLLM 0.33, data parallel 2 (engine="0","1"), single API server → default registry with _created."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    r = CollectorRegistry()
    ln = ["model_name", "engine"]
    m = "meta-llama/Llama-3.1-8B-Instruct"
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", ln, registry=r)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ln, registry=r)
    kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ln, registry=r)
    q = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", ln, registry=r)
    h = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", ln, registry=r)
    pre = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", ln, registry=r)
    pt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=r)
    gt = Counter("vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=r)
    ok = Counter("vllm:request_success", "Count of successfully processed requests.", ln + ["finished_reason"], registry=r)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ln,
                     buckets=TTFT_BUCKETS, registry=r)
    itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ln,
                    buckets=ITL_BUCKETS, registry=r)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", ln,
                    buckets=REQ_BUCKETS, registry=r)
    qt = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", ln,
                   buckets=REQ_BUCKETS, registry=r)
    state = {
        "0": dict(run=7, wait=2, kv=0.971, q=120000, h=30000, pre=3, pt=120000, gt=51000, ok=400,
                  ttft=[0.08] * 300 + [0.3] * 90 + [1.2] * 10, itl=[0.02] * 5000 + [0.12] * 40, e2e=[4.0] * 400,
                  queue=[0.1] * 380 + [0.9] * 20),
        "1": dict(run=5, wait=0, kv=0.62, q=80000, h=40000, pre=0, pt=80000, gt=33000, ok=250,
                  ttft=[0.07] * 250, itl=[0.02] * 3000, e2e=[3.0] * 250, queue=[0.05] * 250),
    }
    for eng, s in state.items():
        running.labels(m, eng).set(s["run"])
        waiting.labels(m, eng).set(s["wait"])
        kv.labels(m, eng).set(s["kv"])
        q.labels(m, eng).inc(s["q"])
        h.labels(m, eng).inc(s["h"])
        pre.labels(m, eng).inc(s["pre"])
        pt.labels(m, eng).inc(s["pt"])
        gt.labels(m, eng).inc(s["gt"])
        ok.labels(m, eng, "stop").inc(s["ok"] // 2)
        ok.labels(m, eng, "length").inc(s["ok"] - s["ok"] // 2)
        for v in s["ttft"]:
            ttft.labels(m, eng).observe(v)
        for v in s["itl"]:
            itl.labels(m, eng).observe(v)
        for v in s["e2e"]:
            e2e.labels(m, eng).observe(v)
        for v in s["queue"]:
            qt.labels(m, eng).observe(v)
    return generate_latest(r).decode()


def vllm_08_old_names() -> str:
    """vLLM 0.8.x V1: `engine` label present, names later renamed (gpu_*, time_per_output_token)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    r = CollectorRegistry()
    ln = ["model_name", "engine"]
    m = "Qwen/Qwen2.5-7B-Instruct"
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", ln, registry=r).labels(m, "0").set(4)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ln, registry=r).labels(m, "0").set(0)
    Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", ln, registry=r).labels(m, "0").set(0.25)
    Counter("vllm:gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queried blocks.", ln,
            registry=r).labels(m, "0").inc(640)
    Counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached blocks.", ln,
            registry=r).labels(m, "0").inc(160)
    Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", ln, registry=r).labels(m, "0").inc(0)
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=r).labels(m, "0").inc(10240)
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=r).labels(m, "0").inc(4096)
    t = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ln,
                  buckets=V0_TTFT + [20.0, 40.0, 80.0, 160.0, 640.0, 2560.0], registry=r)
    p = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", ln,
                  buckets=V0_TPOT + [5.0, 7.5, 10.0, 20.0, 40.0, 80.0], registry=r)
    for v in [0.05] * 20:
        t.labels(m, "0").observe(v)
    for v in [0.03] * 4000:
        p.labels(m, "0").observe(v)
    return generate_latest(r).decode()


def vllm_06_v0() -> str:
    """vLLM 0.6 (V0 engine): only `model_name`, hit-rate gauges, swapped requests, avg throughput gauges."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    r = CollectorRegistry()
    ln = ["model_name"]
    m = "mistralai/Mistral-7B-Instruct-v0.3"
    g = lambda n, d, v: Gauge(n, d, ln, registry=r).labels(m).set(v)  # noqa: E731
    g("vllm:num_requests_running", "Number of requests currently running on GPU.", 6)
    g("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0)
    g("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 3)
    g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 0.98)
    g("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", 0.0)
    g("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", -1)
    g("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", 0.42)
    g("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", 1234.5)
    g("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", 456.7)
    Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", ln, registry=r).labels(m).inc(2)
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=r).labels(m).inc(52000)
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=r).labels(m).inc(21000)
    t = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ln,
                  buckets=V0_TTFT, registry=r)
    p = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", ln,
                  buckets=V0_TPOT, registry=r)
    for v in [0.2] * 50:
        t.labels(m).observe(v)
    for v in [0.04] * 2000:
        p.labels(m).observe(v)
    return generate_latest(r).decode()


SGLANG_SCRIPT = r'''
import sys
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
sched = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
tok = ["model_name", "engine_type"]
m = "Qwen/Qwen3-8B"
TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200,
       0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]
run = Gauge("sglang:num_running_reqs", "The number of running requests.", sched, multiprocess_mode="mostrecent")
que = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched, multiprocess_mode="mostrecent")
use = Gauge("sglang:token_usage", "The token usage.", sched, multiprocess_mode="mostrecent")
hit = Gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", sched, multiprocess_mode="mostrecent")
thr = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", sched, multiprocess_mode="mostrecent")
for tp in ("0", "1"):   # --enable-metrics-for-all-schedulers: every TP rank reports the same scheduler state
    run.labels(m, "unified", tp, "0", "0").set(12)
    que.labels(m, "unified", tp, "0", "0").set(4)
    use.labels(m, "unified", tp, "0", "0").set(0.96)
    hit.labels(m, "unified", tp, "0", "0").set(0.5)
    thr.labels(m, "unified", tp, "0", "0").set(812.5)
ret = Counter("sglang:num_retracted_requests_total", "Total number of retracted requests due to KV cache pressure.", sched)
ret.labels(m, "unified", "0", "0", "0").inc(5)
ret.labels(m, "unified", "1", "0", "0").inc(5)
pt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", tok + ["is_streaming"])
gt = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", tok + ["is_streaming"])
ct = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens by source (device/host/storage).", ["cache_source"] + tok)
pt.labels(m, "unified", "true").inc(30000); pt.labels(m, "unified", "false").inc(10000)
gt.labels(m, "unified", "true").inc(9000); gt.labels(m, "unified", "false").inc(1000)
ct.labels("device", m, "unified").inc(15000); ct.labels("host", m, "unified").inc(5000)
ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", tok + ["is_streaming"], buckets=TTFT)
itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", tok, buckets=ITL)
for v in [0.15] * 30:
    ttft.labels(m, "unified", "true").observe(v)
for v in [0.5] * 10:
    ttft.labels(m, "unified", "false").observe(v)
for v in [0.012] * 900 + [0.09] * 100:
    itl.labels(m, "unified").observe(v)
reg = CollectorRegistry()
multiprocess.MultiProcessCollector(reg)
sys.stdout.write(generate_latest(reg).decode())
'''


def sglang_tp2() -> str:
    """SGLang 0.5.23, TP=2 with metrics for all schedulers; multiprocess registry (no _created, _sum first)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=d)
        return subprocess.run([sys.executable, "-c", SGLANG_SCRIPT], env=env, check=True, capture_output=True,
                              text=True).stdout


def tgi_full() -> str:
    """TGI 3.3: bare counter names, integer counters, 35 geometric duration buckets, `le` last."""
    dur = [0.0001 * 1.5 ** k for k in range(1, 36)]

    def hist(name: str, help_: str, values: list[float], buckets: list[float], labels: str = "") -> list[str]:
        lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"] if labels in ("", 'method="prefill",') else []
        for b in buckets:
            lines.append(f'{name}_bucket{{{labels}le="{b!r}"}} {sum(1 for v in values if v <= b)}')
        lines.append(f'{name}_bucket{{{labels}le="+Inf"}} {len(values)}')
        lab = "{" + labels.rstrip(",") + "}" if labels else ""
        lines.append(f"{name}_sum{lab} {sum(values)!r}")
        lines.append(f"{name}_count{lab} {len(values)}")
        return lines

    out: list[str] = []
    out += ["# HELP tgi_request_count Total number of requests", "# TYPE tgi_request_count counter", "tgi_request_count 42", ""]
    out += ["# HELP tgi_request_success Number of successful requests", "# TYPE tgi_request_success counter",
            "tgi_request_success 40", ""]
    out += ["# TYPE tgi_request_failure counter", 'tgi_request_failure{err="overloaded"} 2', ""]
    out += ["# HELP tgi_batch_inference_count Inference calls per method (prefill or decode)",
            "# TYPE tgi_batch_inference_count counter", 'tgi_batch_inference_count{method="prefill"} 40',
            'tgi_batch_inference_count{method="decode"} 5120', ""]
    out += ["# HELP tgi_queue_size Current queue size", "# TYPE tgi_queue_size gauge", "tgi_queue_size 3", ""]
    out += ["# HELP tgi_batch_current_size Current batch size", "# TYPE tgi_batch_current_size gauge",
            "tgi_batch_current_size 8", ""]
    out += ["# HELP tgi_batch_current_max_tokens Maximum tokens for the current batch",
            "# TYPE tgi_batch_current_max_tokens gauge", "tgi_batch_current_max_tokens 15360", ""]
    out += hist("tgi_request_queue_duration", "Time spent in the queue per request", [0.0002] * 30 + [0.4] * 10, dur) + [""]
    out += hist("tgi_request_duration", "Total time spent processing the request", [2.5] * 40, dur) + [""]
    out += hist("tgi_request_mean_time_per_token_duration", "Mean time per token per request", [0.012] * 35 + [0.03] * 5,
                dur) + [""]
    out += hist("tgi_batch_forward_duration", "Batch forward duration per method (prefill or decode)", [0.08] * 40, dur,
                'method="prefill",')
    out += hist("tgi_batch_forward_duration", "", [0.011] * 5120, dur, 'method="decode",') + [""]
    inp = [float(x) for x in range(40, 4096, 100)]
    out += hist("tgi_request_input_length", "Input tokens per request", [512.0] * 40, inp) + [""]
    out += hist("tgi_request_generated_tokens", "Generated tokens per request", [128.0] * 40, inp) + [""]
    return "\n".join(out) + "\n"


def llamacpp_old_large() -> str:
    """An early-2025 llama-server (kv_cache_* gauges still present) after a long run: counters ≥ 1e6
    print as C++ `double` with 6 significant digits (`1.23457e+06`)."""
    rows = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", "1.23457e+06"),
        ("prompt_seconds_total", "counter", "Prompt process time", "2469.14"),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", "2.46914e+06"),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", "49382.7"),
        ("n_decode_total", "counter", "Total number of llama_decode() calls", "2.5e+06"),
        ("n_busy_slots_per_decode", "counter", "Average number of busy slots per llama_decode() call", "3.87"),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", "512.3"),
        ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", "49.9"),
        ("kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", "0.97"),
        ("kv_cache_tokens", "gauge", "KV-cache tokens.", "15894"),
        ("requests_processing", "gauge", "Number of request processing.", "4"),
        ("requests_deferred", "gauge", "Number of request deferred.", "3"),
    ]
    out = []
    for name, typ, help_, value in rows:
        out += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {typ}", f"llamacpp:{name} {value}"]
    return "\n".join(out) + "\n"


def main() -> None:
    files = {
        "vllm_0.33_dp2_full.txt": vllm_033_dp2(),
        "vllm_0.8_old_names.txt": vllm_08_old_names(),
        "vllm_0.6_v0.txt": vllm_06_v0(),
        "sglang_0.5.23_tp2.txt": sglang_tp2(),
        "tgi_3.3_full.txt": tgi_full(),
        "llamacpp_old_large.txt": llamacpp_old_large(),
    }
    for name, text in files.items():
        (HERE / name).write_text(text)
        print(name, len(text.splitlines()), "lines")


if __name__ == "__main__":
    main()
