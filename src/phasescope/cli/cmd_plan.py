"""``phasescope plan`` — what-if simulation of prefill/decode scheduling (parse, call, print)."""

from __future__ import annotations

import math
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from phasescope.cli._common import console as _console
from phasescope._results import PlanResult, Result
from phasescope.cli._common import err_console, print_warnings
from phasescope.cli._output import console_view, format_option, output
from phasescope.planning.api import PlanOptions, run_plan

console = _console if _console.is_terminal else Console(width=160, soft_wrap=True)


def _ms(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x >= 10_000:
        return f"{x / 1e3:,.1f} s"
    if x >= 100:
        return f"{x:,.0f} ms"
    return f"{x:,.1f} ms"


def _n(x: Any, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or (isinstance(x, float) and x >= 100):
        return f"{x:,.0f}"
    return f"{x:,.{nd}f}"


def _flops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.0f} GFLOP/s"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x * 100:+.0f} %"


def _header(doc: dict[str, Any]) -> None:
    cm = doc["cost_model"]
    cfg = doc["config"]
    w, s = cfg["workload"], cfg["scheduler"]
    p = cm["params"]
    load = (f"{w['rate']:g} req/s ({w['arrival']})" if w["rate"] else "all at once") + (
        f", ≤ {w['concurrency']} in flight" if w["concurrency"] else "")
    if w["rate"] is None and w["concurrency"]:
        load = f"{w['concurrency']} users, closed loop"
    n = (f"{w['num_requests']} requests" if w["num_requests"] else
         f"{w['duration_s']:g} s" if w["duration_s"] is not None else "trace")
    sf = w.get("session_facts")
    unit = {"cpu": "CPU(s)", "local": "CPU(s)", "apple": "device(s)", "accelerator": "accelerator(s)",
            "custom": "device(s)"}.get(doc.get("device_kind") or "gpu", "GPU(s)")
    console.print(f"[bold]plan[/bold] {cm['name']} · {cfg['gpus']} {unit}, tp {cfg['tp']} · scheduler {s['policy']} "
                  f"(budget {s['max_num_batched_tokens']} tok, ≤ {s['max_num_seqs']} seqs"
                  f"{', preempt' if s['preempt'] else ''}{'' if s['chunked_prefill'] else ', no chunking'})")
    if sf and sf["dataset"] == "conversation":
        pt = sf["prompt_tokens_by_turn"]
        console.print(f"workload: {sf['users']} conversations of {sf['turns']} turns (closed loop: each turn sent when the "
                      f"previous reply is complete + {sf['think_time_s']:g} s think time), system prompt {sf['system_prompt_len']}, "
                      f"{sf['turn_input_len']} in → {sf['output_len']} out per turn; prompt {pt[0]} → {pt[-1]} tokens "
                      f"from turn 1 to {sf['turns']}, seed {w['seed']}")
    elif sf:
        console.print(f"workload: Mooncake trace, {sf['requests']} requests, {sf['distinct_blocks']} distinct blocks "
                      f"of {sf['block_size']} tokens")
    else:
        console.print(f"workload: {n}, {load}, prompt {w['input_len']} → output {w['output_len']} tokens"
                      + (f", prefix {w['prefix_len']} tok shared by {w['prefix_share'] * 100:.0f} %" if w["prefix_len"] and w["prefix_share"] else "")
                      + f", seed {w['seed']}")
    console.print(f"cost model: one request alone → prefill {_ms(cm['prefill_alone_ms'])}, decode step {_ms(cm['decode_step_alone_ms'])} "
                  f"({_n(cm['decode_tok_s_alone'], 1)} tok/s); KV pool {cm['kv_pool_tokens']:,} tokens; "
                  f"η_bw {p['bw_eff']:.2f}, η_flops {p['flops_eff']:.2f}"
                  + (f" (decode {p['decode_flops_eff']:.2f})" if p.get("decode_flops_eff") is not None else "")
                  + f", step = overhead {p['step_overhead_s'] * 1e3:.2f} ms + "
                  + ("max(memory, math)" if p["overlap"] == "max" else "memory + math")
                  + _cpu_terms(p, cm.get("source") or {}))
    cal = doc.get("calibration")
    if cal:
        f = cal["fitted"]
        r = cal["residuals"]
        console.print(f"calibrated from {cal['from']}: {cal['n_prefill_points']} prefill + {cal['n_decode_points']} decode points, "
                      f"API overhead {cal['api_overhead_s'] * 1e3:.1f} ms, effective {f.get('bandwidth_bytes_s', 0) / 1e9:.1f} GB/s, "
                      f"{_flops(f.get('flops_s', 0))}; fit error prefill {_pct(r.get('prefill_rel_err_median'))}, "
                      f"decode {_pct(r.get('decode_rel_err_median'))}")


def _cpu_terms(p: dict[str, Any], src: dict[str, Any]) -> str:
    """llama.cpp's CPU terms (planning.cpu) when the cost model has them, for the cost-model line."""
    if not p.get("prefill_overhead_s") and p.get("decode_attn_flops_eff") is None and not p.get("dequant_s_per_step"):
        return ""
    out = (f" + decode attention + {p['dequant_s_per_step'] * 1e3:.1f} ms dequantize; "
           f"{p['prefill_overhead_s'] * 1e3:.0f} ms per prompt (llama.cpp on CPU, fitted on the synthetic grid; "
           f"weight types: {src.get('weight_types_from', '?')})")
    if src.get("uncalibrated_types"):
        out += f"; not calibrated for {', '.join(src['uncalibrated_types'])}: taken as Q8_0"
    return out


def _summary_table(s: dict[str, Any], title: str = "simulated") -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("metric")
    for c in ("mean", "median", "p90", "p99", "max"):
        t.add_column(c, justify="right")
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency")):
        t.add_row(label, *(_ms(s.get(f"{c}_{key}_ms")) for c in ("mean", "median", "p90", "p99", "max")))
    return t


def _limited(d: dict[str, Any], prefix: str = "limited by") -> None:
    if d.get("limited_by"):
        console.print(f"[bold]{prefix} {d['limited_by']}[/bold]: {d.get('limited_by_reason') or ''}")


def _facts(s: dict[str, Any]) -> None:
    console.print(
        f"completed {s['completed']} (failed {s['failed']}) in {s['duration']:.1f} s simulated · "
        f"{_n(s['request_throughput'])} req/s · {_n(s['output_throughput'])} output tok/s · "
        f"{_n(s['total_token_throughput'])} total tok/s"
        + (f" · goodput {_n(s['request_goodput'])} req/s" if s.get("request_goodput") is not None else "")
    )
    kv = s.get("max_kv_usage")
    console.print(
        f"server: queue wait mean {_ms(s.get('mean_queue_ms'))}, p99 {_ms(s.get('p99_queue_ms'))} · waiting max {s['max_waiting']} · "
        f"KV usage max {'-' if kv is None else f'{kv * 100:.0f} %'} · preemptions {s['preemptions']} · "
        f"prefix hits {s['prefix_hit_requests']}/{s['prefix_requests']} · {s['steps']:,} steps"
        + (f" · ≤ {s['peak_in_flight']} in flight" if s.get("peak_in_flight") is not None else "")
        + (f" (≤ {s['max_turns_in_flight_per_session']} per session)"
           if s.get("max_turns_in_flight_per_session") is not None else "")
        + (f" · KV transfer mean {_ms(s.get('mean_kv_transfer_ms'))}" if s.get("mean_kv_transfer_ms") is not None else "")
    )
    slo = s.get("slo")
    if slo:
        parts = []
        for k, c in slo["checks"].items():
            v = next((vv for kk, vv in c.items() if kk.endswith("_ms") and kk != "limit_ms"), None)
            parts.append(f"{k} p{slo['percentile']:g} {_ms(v)} ≤ {_ms(c['limit_ms'])} {'✓' if c['met'] else '✗'}")
        console.print(("[green]SLO met[/green]: " if slo["met"] else "[red]SLO missed[/red]: ") + " · ".join(parts))
    if s.get("failed_reason"):
        console.print(f"[red]failed[/red] {s['failed_reason']}")


def _rows_table(rows: list[dict[str, Any]], first: str, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    cols = [(first, "value"), ("req/s", "request_throughput"), ("out tok/s", "output_throughput"),
            ("TTFT p50", "median_ttft_ms"), ("TTFT p99", "p99_ttft_ms"), ("ITL p50", "median_itl_ms"),
            ("ITL p99", "p99_itl_ms"), ("ITL max", "max_itl_ms"), ("E2E p99", "p99_e2el_ms"), ("KV max", "max_kv_usage"),
            ("preempt", "preemptions"), ("SLO", "slo_met"), ("limited by", "limited_by")]
    for c, _ in cols:
        t.add_column(c, justify="right")
    for r in rows:
        if "error" in r:
            t.add_row(_n(r["value"]) if not isinstance(r["value"], str) else r["value"], *(["-"] * (len(cols) - 3)), "error", "-")
            continue
        cells = []
        for _, k in cols:
            v = r.get(k)
            if k.endswith("_ms"):
                cells.append(_ms(v))
            elif k == "max_kv_usage":
                cells.append("-" if v is None else f"{v * 100:.0f} %")
            elif k == "slo_met":
                cells.append("-" if v is None else ("✓" if v else "✗"))
            elif k == "limited_by":
                cells.append(v or "-")
            else:
                cells.append(_n(v) if not isinstance(v, str) else v)
        t.add_row(*cells)
    return t


def plan(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog id (llama-3.1-8b), config.json or .gguf."),
    device: Optional[str] = typer.Option(None, "--device", "-d", help="Catalog device (l40s, h100, ...) or 'local' (from `phasescope hw`)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Devices in all; a replica uses --tp of them (default: one replica, --tp devices)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree per replica (default: smallest power of two that fits)."),
    quant: Optional[str] = typer.Option(None, "--quant", help="Weight format (bf16, fp8, q4_k_m, ...); default: the model's own."),
    kv_dtype: str = typer.Option("fp16", "--kv-dtype", help="KV cache element type (fp16, fp8)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Requests per second (default: all at once, as vllm bench serve)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Max requests in flight; alone = N users in a closed loop."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", "-n", help="Requests to simulate (default 500 unless --duration)."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop sending after this many simulated seconds."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson | gamma | constant."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape for --arrival gamma (1 = Poisson)."),
    input_len: int = typer.Option(1024, "--input-len", help="Prompt tokens per request."),
    output_len: int = typer.Option(128, "--output-len", help="Output tokens per request."),
    range_ratio: float = typer.Option(0.0, "--range-ratio", help="Lengths uniform in L·(1±r), as vLLM's --random-range-ratio."),
    prefix_len: int = typer.Option(0, "--prefix-len", help="Shared prompt prefix (system prompt) in tokens."),
    prefix_share: float = typer.Option(0.0, "--prefix-share", help="Share of requests that carry the shared prefix (0–1)."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens", help="Tokens per step (chunked-prefill budget; vLLM 8192, llama.cpp n_batch 2048)."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Running sequences at most (llama.cpp: --parallel slots)."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Share of device memory for weights + KV pool."),
    kv_pool_tokens: Optional[int] = typer.Option(None, "--kv-pool-tokens", help="Override the KV pool size in tokens (llama.cpp: --ctx-size)."),
    no_chunked_prefill: bool = typer.Option(False, "--no-chunked-prefill", help="A prompt must fit the budget whole."),
    preempt: bool = typer.Option(False, "--preempt", help="Allocate KV on demand and preempt+recompute when full (vLLM); default: reserve and wait."),
    no_prefix_caching: bool = typer.Option(False, "--no-prefix-caching", help="Recompute shared prefixes every time."),
    policy: Optional[str] = typer.Option(None, "--policy", help="vllm | llamacpp (default vllm; llamacpp when calibrating from llama.cpp records)."),
    bw_eff: Optional[float] = typer.Option(None, "--bw-eff", help="Achieved share of memory bandwidth (default 0.8 GPU, 0.49 CPU)."),
    flops_eff: Optional[float] = typer.Option(None, "--flops-eff", help="Achieved share of peak FLOP/s in prefill (default 0.6 GPU; CPU: by the weights' storage types, 0.20-0.42)."),
    step_overhead_ms: Optional[float] = typer.Option(None, "--step-overhead-ms", help="Fixed time per engine step."),
    api_overhead_ms: Optional[float] = typer.Option(None, "--api-overhead-ms", help="HTTP/tokenization time added to TTFT."),
    interconnect_gb_s: Optional[float] = typer.Option(None, "--interconnect-gb-s", help="KV transfer link, one direction (default: device catalog)."),
    calibrate_from: Optional[str] = typer.Option(None, "--calibrate-from", help="Fit the cost model to measured records: RUN_ID or records.jsonl."),
    slo: Optional[str] = typer.Option(None, "--slo", help="SLOs in ms, e.g. ttft:2000,itl:100 (also tpot, e2el)."),
    slo_percentile: float = typer.Option(99.0, "--slo-percentile", help="Percentile the SLO is checked at."),
    disaggregate: Optional[str] = typer.Option(None, "--disaggregate", help="P:D prefill:decode replicas, compared with the same GPUs colocated."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="PARAM=v1,v2,... e.g. max_num_batched_tokens=512,2048,8192."),
    capacity: bool = typer.Option(False, "--capacity", help="Most users (or highest --rate) within --slo."),
    seed: int = typer.Option(0, "--seed", help="Random seed (arrivals, lengths, prefix hits)."),
    no_save: bool = typer.Option(False, "--no-save", help="Do not save the run in the run store."),
    records_limit: int = typer.Option(2000, "--records-limit", help="Simulated request records saved with the run."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Session workload: conversation (multi-turn chat, closed loop: a turn after the previous reply + think time) | mooncake (trace with hash_ids, --dataset-path). Prefix hits come from the shared history."),
    dataset_path: Optional[str] = typer.Option(None, "--dataset-path", help="Mooncake: the trace JSONL."),
    block_size: int = typer.Option(512, "--block-size", help="Mooncake: prompt tokens per hash id."),
    users: int = typer.Option(4, "--users", help="Conversation: sessions (one per user)."),
    turns: int = typer.Option(4, "--turns", help="Conversation: turns per session."),
    system_prompt_len: int = typer.Option(0, "--system-prompt-len", help="Conversation: system prompt tokens shared by all users (0 = none)."),
    turn_input_len: int = typer.Option(64, "--turn-input-len", help="Conversation: tokens of each turn's new user message (--output-len: each reply)."),
    think_time_s: float = typer.Option(0.0, "--think-time-s", help="Conversation: pause between a reply's last token and the next turn (closed loop)."),
    session_rate: Optional[float] = typer.Option(None, "--session-rate", help="Conversation: sessions start as a Poisson process at this rate (default: spread over one think time)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    fmt: Optional[str] = format_option(),
) -> None:
    """What-if simulation of a continuous-batching server: TTFT/ITL/throughput for a model, device, load and flags."""
    o = PlanOptions(
        model=model, device=device, quant=quant, kv_dtype=kv_dtype, gpus=gpus, tp=tp, rate=rate,
        concurrency=concurrency, num_requests=num_requests, duration_s=duration, arrival=arrival,
        burstiness=burstiness, input_len=input_len, output_len=output_len, range_ratio=range_ratio,
        prefix_len=prefix_len, prefix_share=prefix_share, seed=seed, policy=policy,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        gpu_memory_utilization=gpu_memory_utilization, kv_pool_tokens=kv_pool_tokens,
        chunked_prefill=not no_chunked_prefill, preempt=preempt, prefix_caching=not no_prefix_caching,
        bw_eff=bw_eff, flops_eff=flops_eff, step_overhead_ms=step_overhead_ms, api_overhead_ms=api_overhead_ms,
        interconnect_gb_s=interconnect_gb_s, calibrate_from=calibrate_from, slo=slo, slo_percentile=slo_percentile,
        disaggregate=disaggregate, sweep=sweep, capacity=capacity, save=not no_save, records_limit=records_limit,
        dataset=dataset, dataset_path=dataset_path, block_size=block_size, users=users, turns=turns,
        system_prompt_len=system_prompt_len, turn_input_len=turn_input_len, think_time_s=think_time_s,
        session_rate=session_rate,
    )
    sink = output(json_out, fmt)
    if sink.overrides:  # the API's PlanOptions fields that no flag sets
        import dataclasses

        o = dataclasses.replace(o, **sink.overrides)
    doc = run_plan(o, say=sink.progress(lambda m: err_console.print(f"[dim]plan: {m}[/dim]"), always=True))
    sink.emit(PlanResult.from_json(doc))


@console_view("plan")
def _show(result: Result) -> None:
    """The header, then the table of the plan's mode (one run, a sweep, a capacity search, a disaggregation)."""
    doc = result.to_json()
    print_warnings(doc.get("warnings"))
    _header(doc)
    mode = doc["mode"]
    if mode == "single":
        console.print(_summary_table(doc["summary"]))
        sm = doc["summary"]
        if sm.get("implied_hit_share") is not None:
            console.print(f"prefix cache: {sm['prefix_hit_share'] * 100:.1f} % of prompt tokens served from cache in the "
                          f"simulation; the workload implies {sm['implied_hit_share'] * 100:.1f} % with a cache that keeps everything")
        _facts(doc["summary"])
        _limited(doc["summary"])
    elif mode == "sweep":
        sw = doc["sweep"]
        console.print(_rows_table(sw["rows"], sw["param"], f"sweep of {sw['param']}"))
        for r in sw["rows"]:
            if "error" in r:
                console.print(f"[red]{sw['param']} = {r['value']}[/red]: {r['error']}")
            else:
                _limited(r, f"{sw['param']} = {_n(r['value'])}: limited by")
    elif mode == "capacity":
        cap = doc["capacity"]
        console.print(_rows_table(cap["probes"], "users" if cap["mode"] == "users" else "req/s", "capacity search (probes)"))
        if cap["mode"] == "users":
            console.print(f"[bold]capacity: {cap['max_users']} concurrent users[/bold] within the SLO"
                          + (" (search capped)" if cap.get("capped") else ""))
        else:
            console.print(f"[bold]capacity: {cap['max_rate']:.3g} requests/s[/bold] within the SLO")
        _limited(cap)
    elif mode == "disaggregate":
        dz = doc["disaggregation"]
        a, b = dz["colocated"]["summary"], dz["disaggregated"]["summary"]
        t = Table(title=f"{dz['prefill_replicas']}:{dz['decode_replicas']} disaggregated vs {dz['gpus']} GPU(s) colocated"
                        + (" (one shared device)" if dz["shared_device"] else ""), title_justify="left")
        for c in ("metric", "colocated", "disaggregated", "change"):
            t.add_column(c, justify="right" if c != "metric" else "left")
        for k, label in (("median_ttft_ms", "TTFT p50"), ("p99_ttft_ms", "TTFT p99"), ("median_itl_ms", "ITL p50"),
                         ("p99_itl_ms", "ITL p99"), ("max_itl_ms", "ITL max"), ("output_throughput", "output tok/s"),
                         ("request_goodput", "goodput req/s")):
            fmt = _ms if k.endswith("_ms") else _n
            ch = dz["relative_change"].get(k)
            t.add_row(label, fmt(a.get(k)), fmt(b.get(k)), _pct(ch))
        console.print(t)
        if b.get("mean_kv_transfer_ms") is not None:
            console.print(f"KV transfer per request: mean {_ms(b['mean_kv_transfer_ms'])}, p99 {_ms(b.get('p99_kv_transfer_ms'))}")
        console.print(("[green]disaggregation pays[/green]: " if dz["pays"] else "[yellow]disaggregation does not pay[/yellow]: ") + dz["why"])
        _limited(a, "colocated: limited by")
        _limited(b, "disaggregated: limited by")
        alt = dz.get("colocated_smaller_budget")
        if alt:
            console.print(f"colocated with --max-num-batched-tokens {alt['max_num_batched_tokens']}: TTFT p99 {_ms(alt['p99_ttft_ms'])}, "
                          f"ITL p99 {_ms(alt['p99_itl_ms'])}, {_n(alt['output_throughput'])} output tok/s"
                          + ("" if alt.get("slo_met") is None else (" — SLO met" if alt["slo_met"] else " — SLO missed")))
    err_console.print(f"simulated in {doc['sim_wall_s']:.2f} s" + (f" · saved as run {doc['run_id']}" if doc.get("run_id") else ""))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
