"""``phasescope bench [URL]``: load benchmark at parity with ``vllm bench serve`` (parse, call, print).

One job: bench's flags in and its console out; every flag is declared here, so its help stays in one place.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, List, Optional

import typer

from phasescope._results import BenchSummary, BenchSweep, Result
from phasescope.cli._common import (ENGINE_DRAFT_HELP, ENGINE_SPEC_HELP, OTLP_LISTEN_HELP, api_key_option, api_option,
                                    check_otlp_listen, console, err_console, print_host_line, print_warnings)
from phasescope.cli._gpu import GPU_METRICS_HELP, NO_NVML_HELP
from phasescope.cli._output import console_view, format_option, output


#: the Client health line's words for RunnerHealth.receive_path
_PATH_WORDS = {"raw": "the raw path (httptools)", "aiohttp": "aiohttp"}


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:.{nd}f}"
    return str(v)


def _load_words(s: dict[str, Any]) -> str:
    """The load line: an infinite rate is "all at once", and then no arrival shape applies."""
    rate = s.get("request_rate")
    cap = s.get("max_concurrency")
    tail = f"max concurrency {cap or '-'}, workers {s.get('workers')}"
    if s.get("conversation"):
        c = s["conversation"]
        turns = c["turns"][0] if c["turns"][0] == c["turns"][1] else f"{c['turns'][0]}-{c['turns'][1]}"
        who = (f"{c['session_rate']:g} sessions/s (open loop)" if c.get("loop") == "open"
               else f"{c['users']} users (closed loop)")
        think = f"{c['think_time_s']:g} s {c['think_time_dist']}" if c.get("think_time_s") else "none"
        return (f"conversations: {who}, {c['sessions']} sessions of {turns} turns, system prompt "
                f"{c['system_prompt_len']} tokens ({c['system_prompt']}), {c['turn_input_len']} tokens in + "
                f"{c['output_len']} out per turn" + (f", tool output {c['tool_output_len']}" if c.get("tool_output_len") else "")
                + f", think time {think}")
    if s.get("agentic"):
        a = s["agentic"]
        if a.get("trace_path"):
            tr = a.get("trace") or {}
            return (f"agentic replay of {tr.get('format')} trace {a['trace_path']}: {a['sessions']} sessions, "
                    f"up to {a['users']} at a time")
        turns = a["turns"][0] if a["turns"][0] == a["turns"][1] else f"{a['turns'][0]}-{a['turns'][1]}"
        forks = (f"forks of {a['fork_width']} sub-agents × {a['subagent_turns']} turns before turn(s) "
                 + ",".join(str(x) for x in a["fork_at"])) if a.get("fork_at") else "no forks"
        think = f"{a['think_time_s']:g} s {a['think_time_dist']}" if a.get("think_time_s") else "none"
        return (f"agentic: {a['sessions']} sessions of {turns} turns, up to {a['users']} at a time, {forks}, "
                f"{a['turn_input_len']} tokens in + {a['output_len']} out per call"
                + (f", tool output {a['tool_output_len']}" if a.get("tool_output_len") else "")
                + f", think time {think}")
    if s.get("trace"):
        t = s["trace"]
        rows = t.get("rows_in_file", t["entries_in_file"])
        what = "trace" if t.get("dataset") == "trace" else f"{t['dataset']} trace"
        return (f"{what} replay of {t['entries_replayed']} of {rows} "
                f"rows (span {t['span_s']:.1f} s, speed ×{t['trace_speed']:g}), {tail}")
    if s.get("load_shape") == "trace":
        return f"trace replay, {tail}"
    if s.get("load_shape") == "ramp":
        return f"ramp of arrival rates, burstiness {s.get('burstiness')}, {tail}"
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        return ("all requests sent at once (no arrival process)" if not cap
                else f"closed loop, {cap} requests in flight") + f", {tail}"
    shape = s.get("load_shape")
    kind = ("Poisson arrivals" if float(s.get("burstiness") or 1) == 1 else f"gamma arrivals (burstiness {s.get('burstiness')})") \
        if shape == "poisson" else f"{shape} arrivals"
    return f"{rate} req/s, {kind}, {tail}"


@console_view("bench")
def _show_summary(result: Result) -> None:
    _print_summary(result.to_json())


@console_view("bench-sweep")
def _show_sweep(result: Result) -> None:
    _print_sweep(result.to_json())
    print_warnings(result.get("warnings"))


def _print_summary(s: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title="phasescope bench", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(justify="right")

    def row(label: str, key: str, nd: int = 2) -> None:
        t.add_row(label, _fmt(s.get(key), nd))

    console.print(f"Target: {s.get('target')} ({s.get('engine') or '?'}, api {s.get('backend')}, model {s.get('model_id')})",
                  highlight=False, soft_wrap=True)
    console.print(f"Load: {_load_words(s)}", highlight=False, soft_wrap=True)
    n_tr = s.get("num_trials") if isinstance(s.get("trials"), list) else None
    console.print(f"Requests: {s.get('num_requests', 0)} measured + {s.get('warmup_requests', 0)} warm-up "
                  f"(excluded); prompts {'reused (--reuse-prompts)' if s.get('reuse_prompts') else 'unique to this run'}"
                  + (f"; {s.get('trials_complete')} of {n_tr} trials complete, each with prompts of its own: the "
                     "figures below are the means across the complete trials" if n_tr else ""),
                  highlight=False, soft_wrap=True)
    if s.get("steady_state") and not n_tr:
        console.print(_steady_words(s["steady_state"]), highlight=False, soft_wrap=True)
    row("Successful requests", "completed")
    row("Failed requests", "failed")
    if s.get("errors_by_kind"):
        t.add_row("  by kind", ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items()))
    row("Benchmark duration (s)", "duration")
    row("Total input tokens", "total_input_tokens")
    row("Total generated tokens", "total_output_tokens")
    row("Request throughput (req/s)", "request_throughput")
    if s.get("request_goodput") is not None:
        row("Request goodput (req/s)", "request_goodput")
    row("Output token throughput (tok/s)", "output_throughput")
    row("Total token throughput (tok/s)", "total_token_throughput")
    row("Peak output token throughput (tok/s)", "max_output_tokens_per_s")
    row("Peak concurrent requests", "max_concurrent_requests")
    if (s.get("request_rate") == "inf" and s.get("load_shape") in ("poisson", "constant")
            and s.get("dataset") in ("random", "sharegpt", "jsonl")):
        t.add_row("Achieved send rate (req/s)", "all at once (no --request-rate)")
    else:
        row("Achieved send rate (req/s)", "achieved_rate")
    pcts = s.get("percentiles") or [99]

    def same_as_itl(key: str) -> bool:  # one token per event (llama.cpp, vLLM): the gaps are the ITL
        ks = ["mean", "median", *(f"p{str(int(p)) if float(p).is_integer() else str(p)}" for p in pcts)]
        return all(s.get(f"{k}_{key}_ms") == s.get(f"{k}_itl_ms") for k in ks)

    for key, title in (("ttft", "Time to First Token"), ("ttfo", "Time to First Output Token (after reasoning)"),
                       ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency (per token)"), ("event_gap", "Gap between streamed events"),
                       ("e2el", "End-to-end Latency"), ("client_queue_time", "Client-side queue (concurrency cap)")):
        if s.get(f"mean_{key}_ms") is None:
            continue
        if key == "ttfo" and not s.get("reasoning_tokens"):
            continue  # no reasoning: TTFO is TTFT (the JSON still has it)
        if key == "client_queue_time" and not s.get("max_concurrency"):
            continue  # no cap: nothing held requests back (the send lag is in Client health below)
        if key == "event_gap" and same_as_itl(key):
            t.add_row(f"[dim]{title}[/dim]", "= ITL (one token per event)")
            continue
        t.add_row(f"[dim]{title}[/dim]", "")
        row("  Mean (ms)", f"mean_{key}_ms")
        row("  Median (ms)", f"median_{key}_ms")
        for p in pcts:
            if float(p) == 50.0:
                continue  # = median
            pw = str(int(p)) if float(p).is_integer() else str(p)
            row(f"  P{pw} (ms)", f"p{pw}_{key}_ms")
    src = s.get("token_count_source") or {}
    t.add_row("Token counts from", "output " + ", ".join(f"{k} {v}" for k, v in (src.get("output") or {}).items())
              + "; input " + ", ".join(f"{k} {v}" for k, v in (src.get("input") or {}).items()))
    if s.get("reasoning_tokens"):
        t.add_row("Reasoning / answer tokens", f"{s['reasoning_tokens']} / {s.get('answer_tokens')}")
        row("  Median reasoning rate (tok/s)", "median_reasoning_tok_s")
        row("  Median answer rate (tok/s)", "median_answer_tok_s")
    sm = (s.get("server_metrics") or {})
    if sm.get("available"):
        ss = sm.get("summary") or {}
        if "endpoints_with_metrics" in ss:  # several endpoints: the fleet aggregate (per endpoint below)
            t.add_row("[dim]Server /metrics (all endpoints)[/dim]",
                      f"{sm.get('engine')}, {ss.get('endpoints_with_metrics')} of {ss.get('endpoints')} endpoints")
            t.add_row("  Σ max running / waiting",
                      f"{_fmt(ss.get('max_running_sum'), 0)} / {_fmt(ss.get('max_waiting_sum'), 0)}")
        else:
            t.add_row("[dim]Server /metrics[/dim]", f"{sm.get('engine')}, {ss.get('scrapes')} scrapes")
            t.add_row("  max running / waiting", f"{_fmt(ss.get('max_running'), 0)} / {_fmt(ss.get('max_waiting'), 0)}")
            t.add_row("  time with queue > 0 (s)", _fmt(ss.get("time_with_queue_s")))
        t.add_row("  KV-cache usage peak", _fmt(ss.get("kv_usage_peak"), 3))
        t.add_row("  preemptions", _fmt(ss.get("preemptions"), 0))
        if "endpoints_with_metrics" not in ss:
            t.add_row("  prefix-cache hit rate", _fmt(ss.get("prefix_cache_hit_rate"), 3))
        t.add_row("  server generation tokens", _fmt(ss.get("generation_tokens"), 0))
        cmp_ = s.get("ttft_client_vs_server")
        if cmp_:
            t.add_row("  TTFT client − server mean (ms)", _fmt(cmp_.get("client_minus_server_mean_ms")))
    elif sm:
        t.add_row("Server /metrics", f"not available ({sm.get('reason')})")
    h = s.get("runner_health") or {}
    console.print(t)
    if s.get("turns") is not None:
        _print_turns(s)
    if s.get("agentic"):  # KV reuse, sub-agent TTFT vs parent, waiting vs thinking (load.agentic_stats)
        from phasescope.load.agentic_stats import console_lines as agentic_lines

        for line in agentic_lines(s["agentic"]):
            console.print(line, highlight=False, soft_wrap=True)
    if s.get("trace"):  # rows skipped and why; Mooncake: implied vs measured hit rate and why (load.traces)
        from phasescope.load.traces import trace_console_lines

        for line in trace_console_lines(s["trace"]):
            console.print(line, highlight=False, soft_wrap=True)
    from phasescope.load.bench_ceilings import console_lines

    for line in console_lines(s):  # prompt ÷ TTFT under load (not prefill speed), and the ceilings
        console.print(line, highlight=False, soft_wrap=True)
    from phasescope.planning.twin import console_lines as twin_lines

    for line in twin_lines(s.get("twin")):  # plan's prediction from this server's calibration (issue 36)
        console.print(line, highlight=False, soft_wrap=True)
    from phasescope.cli._gpu import print_gpu

    print_gpu(s.get("gpu"))
    console.print(f"Client health: event-loop lag p99 {_fmt(h.get('loop_lag_ms_p99'))} ms, CPU {_fmt(h.get('cpu_percent'), 0)} % "
                  f"of a core, send lag p99 {_fmt(h.get('send_lag_ms_p99'))} ms"
                  + (f" (streams read on {_PATH_WORDS.get(h['receive_path'], h['receive_path'])}"
                     f"{', ' + h['event_loop'] if h.get('event_loop') else ''})" if h.get("receive_path") else ""),
                  highlight=False, soft_wrap=True)
    if n_tr:
        _print_trials(s)
    console.print(f"Records: {s.get('records_path')}", highlight=False, soft_wrap=True)
    from phasescope.cli._bench_scale import print_scale_out

    print_scale_out(s)
    print_host_line(s.get("host"))
    print_warnings(s.get("warnings"))
    if s.get("partial"):
        err_console.print(f"[red]Partial run:[/red] {s.get('stop_reason')}. The summary covers the "
                          f"{s.get('completed', 0) + s.get('failed', 0)} requests that finished.")


def _steady_words(w: dict[str, Any], who: str = "") -> str:
    """The steady-state line: which window the figures cover, and what it left out."""
    if not w.get("used"):
        return f"Steady state{who}: not used ({w.get('reason')}); the figures cover the whole run"
    return (f"Steady state{who}: {w['start_s']:.3f}–{w['end_s']:.3f} s after the first request "
            f"({w['duration_s']:.3f} s, from {w['target_concurrency']} in flight — {w.get('target_from')} — "
            f"to the last request's start): {w['requests_in_window']} of {w['requests_total']} requests inside, "
            f"{w['excluded_ramp']} left out in the ramp-up, {w['excluded_drain']} in the drain")


#: the figures the trials table shows (key, label, unit): a user's headline
_TRIAL_ROWS = (("request_throughput", "Request throughput", "req/s"),
               ("output_throughput", "Output throughput", "tok/s"),
               ("median_ttft_ms", "Median TTFT", "ms"), ("p99_ttft_ms", "P99 TTFT", "ms"),
               ("median_tpot_ms", "Median TPOT", "ms"), ("median_itl_ms", "Median ITL", "ms"),
               ("p99_itl_ms", "P99 ITL", "ms"), ("median_e2el_ms", "Median E2EL", "ms"))


def _print_trials(s: dict[str, Any]) -> None:
    """Run-level figures: each headline metric's mean across the complete trials, its 95 % interval
    (Student t over the trials) and every trial's own value."""
    from rich.table import Table

    from phasescope.measure.interval import Interval

    trials = s.get("trials") or []
    t = Table(title=f"across trials: mean and 95 % interval ({s.get('trials_complete')} complete of "
                    f"{s.get('num_trials')})", header_style="bold")
    t.add_column("figure", no_wrap=True)
    t.add_column("mean", justify="right")
    t.add_column("95 % interval", justify="right")
    for tr in trials:
        t.add_column(f"trial {tr.get('trial')}" + ("" if tr.get("status") == "complete" else f" ({tr.get('status')})"),
                     justify="right")
    ivs = s.get("intervals") or {}
    for key, label, unit in _TRIAL_ROWS:
        iv = ivs.get(key)
        if iv is None:
            continue
        one = Interval.from_json(iv)
        ci = "-" if one.n < 2 else f"{_fmt(one.low)} – {_fmt(one.high)}"
        if one.n >= 2 and one.rel_halfwidth != float("inf"):
            ci += f" (±{one.rel_halfwidth * 100:.0f} %)"
        t.add_row(f"{label} ({unit})", _fmt(one.value), ci, *[_fmt(tr.get(key)) for tr in trials])
    console.print(t)
    for tr in trials:
        if tr.get("steady_state"):
            console.print(_steady_words(tr["steady_state"], f" (trial {tr.get('trial')})"), highlight=False,
                          soft_wrap=True)


def _print_turns(s: dict[str, Any]) -> None:
    """The per-turn table of a conversation run, then the session line."""
    from rich.table import Table

    t = Table(title="by turn")
    for c in ("turn", "n", "prompt tok", "cached tok", "p50 TTFT ms", "p99 TTFT ms", "p50 ITL ms", "decode tok/s"):
        t.add_column(c, justify="right")
    for r in s.get("turns") or []:
        t.add_row(str(r["turn"]), str(r["n"]), _fmt(r["prompt_tokens_mean"], 1), _fmt(r["cached_tokens_mean"], 1),
                  _fmt(r["median_ttft_ms"], 1), _fmt(r["p99_ttft_ms"], 1), _fmt(r["median_itl_ms"]), _fmt(r["decode_tok_s"], 1))
    console.print(t)
    c = s.get("conversation") or {}
    st = c.get("session_time_s") or {}
    share, exp = c.get("cache_share"), c.get("expected_cache_share")
    cache = (f"{share * 100:.1f} % of prompt tokens served from the server's cache ({c.get('cache_share_source')})"
             if share is not None else "cached prompt tokens not reported by this server")
    if exp is not None:
        cache += f"; resending the history makes {exp * 100:.1f} % reusable"
    console.print(f"Sessions: {c.get('sessions_completed', 0)} of {c.get('sessions_started', 0)} completed, time to complete "
                  f"median {_fmt(st.get('median'))} s, p99 {_fmt(st.get('p99'))} s; {cache}.", highlight=False, soft_wrap=True)


def _print_sweep(d: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title="sweep: throughput vs p99 latency")
    t.add_column("profile", no_wrap=True)
    for c in ("req. rate", "achieved", "req/s", "out tok/s", "p50 TTFT ms", "p99 TTFT ms",
              "p50 ITL ms", "p99 ITL ms", "within SLO"):
        t.add_column(c, justify="right")
    for r in d["rows"]:
        t.add_row(r["profile"], _fmt(r["requested_rate"]), _fmt(r["achieved_rate"]), _fmt(r["request_throughput"]),
                  _fmt(r["output_throughput"], 1), _fmt(r["median_ttft_ms"], 1), _fmt(r["p99_ttft_ms"], 1),
                  _fmt(r["median_itl_ms"]), _fmt(r["p99_itl_ms"]),
                  "-" if r["within_slo"] is None else ("yes" if r["within_slo"] else "no"))
    console.print(t)
    k = d.get("knee")
    if d.get("slo_ms"):
        if k:
            rate = k["requested_rate"] if k["requested_rate"] is not None else k["request_throughput"]
            console.print(f"Knee: {_fmt(rate)} req/s is the highest tested rate within the SLO {d['slo_ms']} (p99).")
        else:
            console.print(f"Knee: no tested rate stays within the SLO {d['slo_ms']} (p99).")
    if d.get("saturation_rate") is not None:
        console.print(f"Saturation: from {_fmt(d['saturation_rate'])} req/s the server no longer keeps up "
                      "(achieved < 90 % of requested).")


def bench(
    url: Optional[str] = typer.Argument(None, help="Server base URL (http://host:port). Omit to use the embedded llama.cpp engine."),
    ray_address_arg: Optional[str] = typer.Argument(None, metavar="[ADDRESS]", help="With --ray: the Ray cluster address (host:6379, ray://host:10001, auto). Omit to start a local cluster on 127.0.0.1 for the run."),
    api: str = api_option(),
    model: Optional[str] = typer.Option(None, "--model", help="Model name (default: the server's first model)."),
    api_key: Optional[str] = api_key_option(),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", "-n", help="Requests to send (default 50 when no --duration)."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop sending after this many seconds."),
    request_rate: float = typer.Option(math.inf, "--request-rate", help="Arrivals per second (Poisson/gamma); inf = all at once."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape of inter-arrival gaps (1 = Poisson, <1 burstier)."),
    load_shape: str = typer.Option("poisson", "--load-shape", help="poisson | constant | ramp | trace"),
    ramp_start_rate: Optional[float] = typer.Option(None, "--ramp-start-rate", help="Ramp: first rate (req/s)."),
    ramp_end_rate: Optional[float] = typer.Option(None, "--ramp-end-rate", help="Ramp: last rate (req/s)."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Trace JSONL: offset_s|timestamp(ms), input_len, output_len."),
    trace_speed: float = typer.Option(1.0, "--trace-speed", help="Replay the trace this many times faster."),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", "-c", help="Cap on requests in flight (closed loop)."),
    warmup: int = typer.Option(1, "--warmup", help="Warm-up requests sent first and excluded."),
    trials: int = typer.Option(1, "--trials", help="Run the workload N times (fresh prompts each, one stored run, records tagged by trial) and report each headline metric's mean and 95 % interval across trials (<metric>_ci); compare then uses these run-level intervals."),
    steady_state: bool = typer.Option(False, "--steady-state", help="Report only the window between the ramp-up (until the requests in flight first reach the target concurrency) and the drain (from the last request's start); says which window it used."),
    seed: int = typer.Option(0, "--seed", help="Seed for arrivals and prompts."),
    dataset: str = typer.Option("random", "--dataset", help="random | sharegpt | jsonl | conversation | agentic | mooncake | burstgpt"),
    dataset_path: Optional[str] = typer.Option(None, "--dataset-path", help="ShareGPT JSON, prompts JSONL, Mooncake trace JSONL, BurstGPT CSV, or (agentic) a Weka agent trace or OpenTelemetry GenAI spans JSON."),
    input_len: int = typer.Option(128, "--input-len", help="Prompt tokens (random dataset)."),
    output_len: Optional[int] = typer.Option(None, "--output-len", help="Output tokens per request (default 64; ShareGPT: each reply's length)."),
    range_ratio: float = typer.Option(0.0, "--range-ratio", help="Lengths uniform in [L(1-r), L(1+r)]."),
    prefix_len: int = typer.Option(0, "--prefix-len", help="Shared prefix tokens per group."),
    prefix_groups: int = typer.Option(1, "--prefix-groups", help="Number of distinct shared prefixes."),
    no_ignore_eos: bool = typer.Option(False, "--no-ignore-eos", help="Let the model stop early (lengths vary)."),
    engine_flags: Optional[str] = typer.Option(None, "--engine-flags", help="How the server was started (e.g. \"--max-num-seqs 64 --enable-prefix-caching\"); saved with the run, and compare calls runs with other flags not comparable."),
    reuse_prompts: bool = typer.Option(False, "--reuse-prompts", help="Send the same prompt texts as earlier runs with this --seed (measure the prefix cache on purpose). Default: every run salts its prompts."),
    percentiles: str = typer.Option("50,90,95,99", "--percentiles", help="Percentiles to report."),
    goodput: Optional[List[str]] = typer.Option(None, "--goodput", help="SLO per request: ttft:MS ttfo:MS tpot:MS e2el:MS (ttfo: first answer token, after reasoning)."),
    workers: int = typer.Option(1, "--workers", help="Client processes (spread the load over CPU cores)."),
    metrics_interval: float = typer.Option(1.0, "--metrics-interval", help="Seconds between /metrics scrapes."),
    no_server_metrics: bool = typer.Option(False, "--no-server-metrics", help="Do not scrape /metrics."),
    gpu_metrics: Optional[List[str]] = typer.Option(None, "--gpu-metrics", help=GPU_METRICS_HELP),
    no_nvml: bool = typer.Option(False, "--no-nvml", help=NO_NVML_HELP),
    no_prewarm: bool = typer.Option(False, "--no-prewarm", help="Do not open connections before t0 (first wave then pays TCP connect inside TTFT)."),
    sweep: bool = typer.Option(False, "--sweep", help="Synchronous → max throughput → rates in between; report the knee."),
    sweep_steps: int = typer.Option(4, "--sweep-steps", help="Constant rates tested between the two ends."),
    slo: Optional[List[str]] = typer.Option(None, "--slo", help="Sweep SLO on p99: ttft:MS itl:MS (ttfo, tpot, e2el)."),
    out: Optional[str] = typer.Option(None, "--out", help="Folder for records.jsonl + summary.json (+ sweep.csv)."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not save the run in the run history (without --out, records go to ./phasescope-runs/bench-…/)."),
    label: Optional[str] = typer.Option(None, "--label", help="Free-text label saved with the run."),
    parallel: int = typer.Option(4, "--parallel", help="Embedded engine only: llama-server slots (batch size)."),
    engine_spec: Optional[str] = typer.Option(None, "--engine-spec", help=ENGINE_SPEC_HELP),
    engine_draft_model: Optional[str] = typer.Option(None, "--engine-draft-model", help=ENGINE_DRAFT_HELP),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to connect."),
    ttft_timeout: float = typer.Option(300.0, "--ttft-timeout", help="Seconds to wait for the first token."),
    itl_timeout: float = typer.Option(60.0, "--itl-timeout", help="Seconds of silence allowed between tokens."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON (schema in docs/commands/bench.md)."),
    fmt: Optional[str] = format_option(),
    target_urls: Optional[List[str]] = typer.Option(None, "--target", help="Another endpoint (repeatable); requests are routed over all of them (--route). See docs/commands/bench-ray.md."),
    route: str = typer.Option("round-robin", "--route", help="round-robin | random | least-outstanding (several --target)."),
    ray: bool = typer.Option(False, "--ray", help="Drive the load from Ray actors: --ray [ADDRESS] (needs pip install 'phasescope\\[ray]')."),
    ray_workers: int = typer.Option(2, "--ray-workers", help="Ray actors (one async runner each) with --ray."),
    ray_actor_cpus: float = typer.Option(1.0, "--ray-actor-cpus", help="CPUs each Ray actor reserves."),
    users: int = typer.Option(4, "--users", help="Conversation/agentic: concurrent users (closed loop), each running sessions back to back."),
    sessions: Optional[int] = typer.Option(None, "--sessions", help="Conversation/agentic: sessions in all (default one per user; 10 with --session-rate; agentic replay: every trace in the file)."),
    turns: str = typer.Option("4", "--turns", help="Conversation/agentic: turns per session (agentic: of the main agent), N or LO-HI (uniform)."),
    system_prompt_len: int = typer.Option(0, "--system-prompt-len", help="Conversation/agentic: system prompt tokens (0 = none)."),
    system_prompt: str = typer.Option("shared", "--system-prompt", help="Conversation/agentic: shared (one text for all users) | per-user."),
    turn_input_len: int = typer.Option(64, "--turn-input-len", help="Conversation/agentic: tokens of each turn's new user message (agentic: and of each sub-agent's task)."),
    think_time_s: Optional[str] = typer.Option(None, "--think-time-s", help="Conversation/agentic: pause before each later turn (agentic: before every call that follows a reply), S (fixed) or exp:S (exponential, mean S)."),
    tool_output_len: int = typer.Option(0, "--tool-output-len", help="Conversation/agentic: tool-output tokens put before each later turn's input."),
    session_rate: Optional[float] = typer.Option(None, "--session-rate", help="Conversation: open loop, new sessions per second (Poisson) instead of --users."),
    fork_at: str = typer.Option("2", "--fork-at", help="Agentic: main-agent turns before which sub-agents fork from the context so far, e.g. 2,4 (none: no forks)."),
    fork_width: int = typer.Option(2, "--fork-width", help="Agentic: sub-agents per fork, run in parallel (1-32)."),
    subagent_turns: int = typer.Option(1, "--subagent-turns", help="Agentic: turns each sub-agent runs before its result returns to the main agent as tool output (1-50)."),
    no_cache_prompt: bool = typer.Option(False, "--no-cache-prompt", help="llama.cpp: send cache_prompt=false with every request (the prefix cache off, to compare)."),
    block_size: int = typer.Option(512, "--block-size", help="Mooncake: prompt tokens per hash id."),
    trace_start: Optional[float] = typer.Option(None, "--trace-start", help="Trace replay: skip the first S seconds of the trace."),
    trace_duration: Optional[float] = typer.Option(None, "--trace-duration", help="Trace replay: replay S seconds of the trace (trace time, before --trace-speed)."),
    twin_from: Optional[str] = typer.Option(None, "--twin-from", help="Calibrate the twin (plan's prediction of this run, beside each percentile) from this stored run (default: the newest probe of the same target and model)."),
    no_twin: bool = typer.Option(False, "--no-twin", help="No twin: do not predict the run from a stored calibration."),
    otlp_listen: Optional[str] = typer.Option(None, "--otlp-listen", metavar="[grpc://]HOST:PORT", help=OTLP_LISTEN_HELP),
) -> None:
    """Load benchmark with vllm-bench-serve metrics, server /metrics alongside, sweeps and multi-process load."""
    from phasescope.apis.base import Timeouts
    from phasescope.engine.spec import check_engine_draft, check_engine_spec
    from phasescope.load.bench import BenchConfig, run_bench
    from phasescope.load.progress import LiveStats
    from phasescope.load.summary import parse_goodput, parse_percentiles
    from phasescope.load.sweep import parse_slo, run_sweep

    cfg = BenchConfig(
        url=url, api=api, model=model, api_key=api_key, num_prompts=num_prompts, duration_s=duration,
        request_rate=request_rate, burstiness=burstiness, shape=load_shape, ramp_start_rate=ramp_start_rate,
        ramp_end_rate=ramp_end_rate, trace_path=trace, trace_speed=trace_speed, max_concurrency=max_concurrency,
        warmup=warmup, seed=seed, trials=trials, steady_state=steady_state, dataset=dataset, dataset_path=dataset_path, input_len=input_len,
        output_len=output_len, range_ratio=range_ratio, prefix_len=prefix_len, prefix_groups=prefix_groups,
        ignore_eos=not no_ignore_eos, reuse_prompts=reuse_prompts, engine_flags=engine_flags, percentiles=parse_percentiles(percentiles), goodput=parse_goodput(goodput),
        workers=workers, metrics_interval_s=metrics_interval, server_metrics=not no_server_metrics, out_dir=out,
        store=not no_store, label=label, engine_parallel=parallel, prewarm=not no_prewarm,
        engine_spec=check_engine_spec(engine_spec, url),
        engine_draft_model=check_engine_draft(engine_draft_model, url),
        timeouts=Timeouts(connect_s=connect_timeout, first_token_s=ttft_timeout, between_tokens_s=itl_timeout),
    )
    from phasescope.cli._scale_out import check_scale_out_flags

    cfg.url, cfg.targets, cfg.route, cfg.ray, cfg.ray_address = check_scale_out_flags(
        url, ray_address_arg, target_urls or [], route, ray, sweep=sweep)
    cfg.ray_workers, cfg.ray_actor_cpus = ray_workers, ray_actor_cpus
    cfg.gpu_metrics, cfg.nvml = list(gpu_metrics or []), not no_nvml
    cfg.users, cfg.sessions, cfg.turns, cfg.system_prompt_len = users, sessions, turns, system_prompt_len
    cfg.system_prompt_scope, cfg.turn_input_len, cfg.think_time_s = system_prompt, turn_input_len, think_time_s
    cfg.tool_output_len, cfg.session_rate, cfg.cache_prompt = tool_output_len, session_rate, (False if no_cache_prompt else None)
    cfg.block_size, cfg.trace_start, cfg.trace_duration = block_size, trace_start, trace_duration
    cfg.fork_at, cfg.fork_width, cfg.subagent_turns = fork_at, fork_width, subagent_turns
    cfg.otlp_listen = check_otlp_listen(otlp_listen)
    sink = output(json_out, fmt)
    for key, value in sink.overrides.items():  # the API's BenchConfig fields that no flag sets
        setattr(cfg, key, value)
    if twin_from and no_twin:
        from phasescope.errors import InputError

        raise InputError("--twin-from and --no-twin contradict each other: drop one")
    if not no_twin and not sweep and trials == 1:
        from phasescope.planning.twin import bench_twin

        if twin_from:  # a run id that names nothing is bad input, said before anything is sent
            from phasescope.store import open_store

            twin_from = open_store().get(twin_from).id
        cfg.twin = bench_twin(twin_from)
    if sweep and (trials != 1 or steady_state):
        from phasescope.errors import InputError

        raise InputError("--sweep runs its own series of loads; --trials and --steady-state apply to one bench "
                         "run (drop --sweep, or run the sweep's rates one by one with --trials)")
    if sweep and dataset in ("conversation", "agentic", "mooncake", "burstgpt"):
        from phasescope.errors import InputError

        raise InputError(f"--sweep varies the arrival rate; --dataset {dataset} brings its own arrivals")
    slo_d = parse_slo(slo)
    stop = threading.Event()
    total = cfg.default_num_prompts()
    if total is not None and trials > 1:  # one bar over every trial
        total *= trials
    live = LiveStats(total)
    show_bar = err_console.is_terminal and sink.human
    progress = None
    task = None

    status = sink.progress(lambda msg: err_console.print(f"[dim]bench: {msg}[/dim]"))

    def start_bar(n: int | None) -> None:
        nonlocal progress, task, live
        live = LiveStats(n)
        if not show_bar:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=err_console, transient=True)
        progress.start()
        task = progress.add_task("", total=n)

    def on_record(item: Any) -> None:
        live.add(item)
        if progress is not None and task is not None:
            progress.update(task, completed=live.done, description=live.line())

    def stop_bar() -> None:
        nonlocal progress
        if progress is not None:
            progress.stop()
            progress = None
        elif sink.human and live.done:
            err_console.print(f"[dim]bench: {live.done} requests done — {live.line()}[/dim]")

    if sweep:
        def on_step(name: str, br: Any) -> None:
            stop_bar()
            if sink.human:
                s = br.summary
                err_console.print(f"[dim]sweep {name}: {_fmt(s.get('request_throughput'))} req/s, "
                                  f"p99 TTFT {_fmt(s.get('p99_ttft_ms'), 1)} ms, p99 ITL {_fmt(s.get('p99_itl_ms'))} ms[/dim]")
            start_bar(total)

        start_bar(total)
        t0 = time.monotonic()
        res = run_sweep(cfg, slo=slo_d, steps=sweep_steps, on_step=on_step, on_status=None, on_record=on_record, stop=stop)
        stop_bar()
        d = res.to_dict()
        d["elapsed_s"] = time.monotonic() - t0
        sink.emit(BenchSweep.from_json(d))
        if d["rows"] and not any((r.get("request_throughput") or 0) > 0 for r in d["rows"]) and not stop.is_set():
            from phasescope.errors import NoSuccessError

            raise NoSuccessError(f"no request succeeded in any of the {len(d['rows'])} sweep steps")
        if res.partial:
            raise typer.Exit(130 if stop.is_set() else 3)
        return

    start_bar(total)
    try:
        result = run_bench(cfg, on_record=on_record, on_status=status, stop=stop)
    finally:
        stop_bar()
    sink.emit(BenchSummary.from_json(result.summary))
    if result.run.write_error:  # the run stopped at a write failure: say where and why, exit 3
        from phasescope.errors import OutputError

        raise OutputError(f"{result.run.write_error}; sending stopped there", hint=f"records: {result.records_path}")
    _fail_if_nothing_succeeded(result.summary)
    if result.summary.get("partial"):
        raise typer.Exit(130 if result.run.interrupted else 3)


def _load_levers(s: dict[str, Any]) -> tuple[str, ...]:
    """The flags that set how hard this run's mode loads the server (each accepted in that mode)."""
    if s.get("dataset") == "conversation":
        return ("--users", "--session-rate")
    if s.get("dataset") == "agentic":
        return ("--users", "--fork-width")
    if s.get("load_shape") == "trace" or s.get("dataset") in ("mooncake", "burstgpt"):
        return ("--trace-speed", "--max-concurrency")
    return ("--max-concurrency", "--request-rate")


def _fail_if_nothing_succeeded(s: dict[str, Any]) -> None:
    """A run in which no request succeeded is a failed run: exit 3, the error kinds counted."""
    if s.get("status") != "failed":
        return
    from phasescope.errors import NoSuccessError, overloaded_hint

    by_kind = s.get("errors_by_kind") or {}
    kinds = ", ".join(f"{k} {v}" for k, v in by_kind.items()) or "none sent"
    hint = s.get("first_error") or None
    if "overloaded" in by_kind:  # bench has no --retries: what it can change is the load it sends
        more = overloaded_hint(None, _load_levers(s))
        hint = f"{hint} ({more})" if hint else more
    raise NoSuccessError(f"no request succeeded ({s.get('failed', 0)} failed: {kinds}); "
                         f"records in {s.get('records_path')}", hint=hint)


def register(app: typer.Typer) -> None:
    from phasescope.cli._common import with_synthetic

    app.command("bench", help="Load benchmark at parity with `vllm bench serve`: TTFT/TPOT/ITL/E2EL, goodput, "
                              "server /metrics alongside, --sweep for the knee, --workers for multi-process load.")(with_synthetic(bench))
