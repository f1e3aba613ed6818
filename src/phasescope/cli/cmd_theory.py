"""``phasescope ceiling | kv | hw | devices | models`` — theory and local hardware (parse, call, print)."""

from __future__ import annotations

import math
from typing import Any, List, Optional

import typer
from rich.table import Table

from rich.console import Console
from rich.markup import escape

from phasescope.cli._common import console as _console
from phasescope._results import CeilingReport, Report, Result
from phasescope.cli._common import err_console
from phasescope.cli._output import console_view, format_option, output

#: wide tables stay readable when piped or captured (rich would fold them at 80 columns)
console = _console if _console.is_terminal else Console(width=180, soft_wrap=True)


def _num(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x >= 1:
        s = f"{x:,.0f}"
    elif x >= 0.01:
        s = f"{x:.2f}"
    else:
        s = f"{x:.2g}"
    return s + unit


def _bytes(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= div:
            return f"{x / div:,.2f} {unit}" if x / div < 100 else f"{x / div:,.0f} {unit}"
    return f"{x:,.0f} B"


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1:
        return f"{x:,.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:,.1f} ms"
    return f"{x * 1e6:,.0f} µs"


def _params(n: float | None) -> str:
    if not n:
        return "-"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _model_line(m: dict[str, Any]) -> str:
    bits = m.get("bits_per_weight")
    fmt = m.get("weight_format") or "?"
    if m.get("expert_weight_format"):
        fmt += f" (+{m['expert_weight_format']} experts)"
    parts = [f"[bold]{escape(str(m['name']))}[/bold] ({m['origin']})", f"weights {escape(fmt)}"]
    if bits:
        parts.append(f"{bits:.2f} bits/weight")
    parts.append(f"{_bytes(m.get('weight_bytes'))} stored, {_bytes(m.get('weight_bytes_read_batch1'))} read per token")
    line = " · ".join(parts)
    if m.get("chosen_by"):
        line += f"\n[dim]model shape: {escape(str(m['chosen_by']))}[/dim]"
    return line


def _ridge(r: dict[str, Any]) -> str:
    if r["ridge_batch"] is not None:
        return _num(r["ridge_batch"])
    if r["ridge_batch_no_kv"] is not None:
        return f"never ({_num(r['ridge_batch_no_kv'])} w/o KV)"
    return "never"


# --- ceiling ---------------------------------------------------------------------------------------------


def ceiling(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog id (see `phasescope models`), or a config.json / .gguf path."),
    config: Optional[str] = typer.Option(None, "--config", help="A local Hugging Face config.json (or its directory)."),
    gguf: Optional[str] = typer.Option(None, "--gguf", help="A local GGUF file (header only is read)."),
    weights_gb: Optional[float] = typer.Option(None, "--weights-gb", help="Just the stored weight size in GB read per token (as the seed article: 16)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", "--quant", help="Weight format: bf16, fp8, int4, awq, q4_k_m, q8_0, mxfp4, ... (default: the model's own)."),
    device: Optional[List[str]] = typer.Option(None, "--device", "-d", help="Device id (repeatable), `all`, or `local` (measured by `phasescope hw`). Default: the seed's six."),
    bandwidth_gb_s: Optional[float] = typer.Option(None, "--bandwidth-gb-s", help="An unlisted device by its memory bandwidth (GB/s)."),
    context: int = typer.Option(0, "--context", help="Tokens already in the KV cache per sequence (KV read per step)."),
    batch: int = typer.Option(1, "--batch", help="Concurrent sequences for the aggregate ceiling."),
    prompt: int = typer.Option(2000, "--prompt", help="Prompt tokens for the prefill floor."),
    kv_dtype: str = typer.Option("fp16", "--kv-dtype", help="KV cache element type: fp16, bf16, fp8, q8_0, q4_0."),
    tp: int = typer.Option(1, "--tp", "--gpus", help="Tensor-parallel degree: N devices share weights, KV, bandwidth and compute (+ all-reduce time); fits is judged per device."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object (schema: docs/commands/ceiling.md)."),
    fmt: Optional[str] = format_option(),
) -> None:
    """Decode ceiling (bandwidth and compute roofs), batch aggregate, ridge batch and prefill floor per device."""
    from phasescope.theory.report import ceiling_report, resolve_devices, resolve_model

    spec = resolve_model(model=model, config=config, gguf=gguf, weights_gb=weights_gb, dtype=dtype)
    devices = resolve_devices(device, bandwidth_gb_s)
    sink = output(as_json, fmt)
    rep = ceiling_report(spec, devices, quant=dtype, context=context, batch=batch, prompt_tokens=prompt,
                         kv_dtype=kv_dtype, tp=tp)
    sink.emit(CeilingReport.from_json(rep))


@console_view("ceiling")
def _show_ceiling(result: Result) -> None:
    """The model line, one row per device, the notes."""
    rep = result.to_json()
    context, batch, prompt, tp = rep["context"], rep["batch"], rep["prompt_tokens"], rep["tp"]
    console.print(_model_line(rep["model"]))
    title = f"decode ceiling at context {context:,}"
    if batch > 1:
        title += f", batch {batch}"
    if tp > 1:
        title += f", tensor parallel over {tp} devices each (bandwidth and FLOP/s of the group, all-reduces included)"
    t = Table(title=title, title_justify="left")
    t.add_column("device", no_wrap=True)
    t.add_column("mem BW\nGB/s", justify="right")
    t.add_column("bytes /\ntoken", justify="right")
    t.add_column("BW roof\ntok/s", justify="right")
    t.add_column("compute\nroof tok/s", justify="right")
    t.add_column("ceiling\ntok/s", justify="right", style="bold")
    t.add_column("binds")
    if batch > 1:
        t.add_column(f"aggregate\n@{batch} tok/s", justify="right")
        t.add_column("binds\n@batch")
    t.add_column("ridge\nbatch", justify="right")
    t.add_column(f"prefill floor\n{prompt:,} tok", justify="right")
    t.add_column("fits" if tp == 1 else "fits\nper device", justify="center")
    for r in rep["devices"]:
        name = r["device_name"] if r["device"] in ("custom", "local") else r["device"]
        cells = [
            escape(f"{tp}× {name}" if tp > 1 else name),
            f"{r['mem_bandwidth_gb_s']:,.0f}" if r["mem_bandwidth_gb_s"] >= 10 else f"{r['mem_bandwidth_gb_s']:.1f}",
            _bytes(r["bytes_per_token"]),
            _num(r["bandwidth_roof_tok_s"]),
            _num(r["compute_roof_tok_s"]),
            _num(r["decode_ceiling_tok_s"]),
            r["binding_roof"],
        ]
        if batch > 1:
            cells += [_num(r["aggregate_ceiling_tok_s"]), r["aggregate_binding_roof"]]
        fits = r["fits_in_memory"]
        cells += [
            _ridge(r),
            _secs(r["prefill_floor_s"]),
            "?" if fits is None else ("yes" if fits else "[red]no[/red]"),
        ]
        t.add_row(*cells)
    console.print(t)
    console.print(
        "[dim]ceiling = min(bandwidth ÷ bytes per token, peak FLOP/s ÷ FLOPs per token)"
        + (" with the all-reduce time of each step added to both" if tp > 1 else "")
        + "; measured stacks land at "
        "~40–80 % of it. ridge batch = where decode turns compute-bound. Halving bytes per weight doubles the "
        "bandwidth roof.[/dim]"
    )
    for n in rep["notes"] + rep["model"]["notes"]:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    if any(r["device"] == "local" for r in rep["devices"]):
        from phasescope.theory.hw import local_profile_note

        note = local_profile_note({"id": "local"}).strip()
        if note:
            console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)


# --- kv --------------------------------------------------------------------------------------------------


def kv(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog id, or a config.json / .gguf path."),
    config: Optional[str] = typer.Option(None, "--config", help="A local Hugging Face config.json."),
    gguf: Optional[str] = typer.Option(None, "--gguf", help="A local GGUF file."),
    context: int = typer.Option(4096, "--context", help="Tokens per sequence."),
    kv_dtype: str = typer.Option("fp16", "--kv-dtype", help="KV element type: fp16, bf16, fp8, q8_0, q4_0."),
    device: Optional[str] = typer.Option(None, "--device", "-d", help="Device whose memory holds weights + pool."),
    gpu_mem_gb: Optional[float] = typer.Option(None, "--gpu-mem-gb", help="Memory size in GB instead of a catalog device."),
    util: float = typer.Option(0.9, "--gpu-memory-utilization", help="Fraction of memory the engine may use (vLLM default 0.9)."),
    weights_gb: Optional[float] = typer.Option(None, "--weights-gb", help="Override the weight bytes subtracted from the pool (GB)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", "--quant", help="Weight format for the weight bytes (default: the model's own)."),
    tp: int = typer.Option(1, "--tp", "--gpus", help="Tensor-parallel degree: the pool of N devices (N × memory), weights and KV split over them."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object (schema: docs/commands/kv.md)."),
    fmt: Optional[str] = format_option(),
) -> None:
    """KV-cache bytes per token and per sequence, and how many sequences fit in the pool."""
    from phasescope.theory.devices import get_device
    from phasescope.theory.report import kv_report, resolve_model

    sink = output(as_json, fmt)
    spec = resolve_model(model=model, config=config, gguf=gguf, dtype=dtype)
    dev = get_device(device) if device else None
    rep = kv_report(spec, context=context, kv_dtype=kv_dtype, device=dev, gpu_mem_gb=gpu_mem_gb,
                    gpu_memory_utilization=util, weights_gb=weights_gb, quant=dtype, tp=tp)
    sink.emit(Report.of("kv", rep))


@console_view("kv")
def _show_kv(result: Result) -> None:
    """Bytes per token and per sequence, and the pool when the memory is known."""
    rep = result.to_json()
    context, kv_dtype = rep["context"], rep["kv_dtype"]
    console.print(_model_line(rep["model"]))
    t = Table(show_header=False, box=None)
    t.add_column(style="dim")
    t.add_column(justify="right", style="bold")
    t.add_column(style="dim")
    t.add_row("KV dtype", kv_dtype, f"{rep['kv_bytes_per_element']:g} B/element")
    t.add_row("layout", rep["kind"].upper(), "")
    t.add_row("per token", f"{rep['kv_bytes_per_token']:,.0f} B", _bytes(rep["kv_bytes_per_token"]))
    if rep["sliding_window"]:
        t.add_row("  growth beyond window", f"{rep['kv_bytes_per_token_global']:,.0f} B",
                  f"global layers only; + fixed {_bytes(rep['kv_window_bytes'])} window part")
    t.add_row(f"per sequence @ {context:,}", f"{rep['kv_bytes_per_sequence']:,.0f} B", _bytes(rep["kv_bytes_per_sequence"]))
    pool = rep["pool"]
    if pool is not None:
        n = pool.get("tp", 1)
        if n > 1:
            t.add_row("devices (tensor parallel)", f"{n}", f"{_bytes(pool['memory_bytes_per_device'])} each")
        t.add_row("memory × utilization", _bytes(pool["memory_bytes"] * pool["gpu_memory_utilization"]),
                  f"{_bytes(pool['memory_bytes'])} × {pool['gpu_memory_utilization']:g}")
        t.add_row("− weights", _bytes(pool["weight_bytes"]), f"{_bytes(pool['weight_bytes_per_device'])} per device" if n > 1 else "")
        t.add_row("= KV pool", _bytes(pool["pool_bytes"]),
                  ("" if n == 1 else f"{_bytes(pool['pool_bytes_per_device'])} per device")
                  if pool["fits"] else "[red]weights do not fit[/red]" + (" one device's share" if n > 1 else ""))
        t.add_row("pool tokens", f"{pool['pool_tokens']:,}", "")
        if pool["max_concurrent_sequences"] is not None:
            t.add_row(f"sequences of {context:,}", f"{pool['max_concurrent_sequences']:,}", "max concurrent")
    console.print(t)
    for n in rep["notes"]:
        console.print(f"[dim]note: {escape(n)}[/dim]")


# --- devices / models -----------------------------------------------------------------------------------


def devices(
    kind: Optional[str] = typer.Option(None, "--kind", help="Only gpu, cpu, apple, accelerator or local."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object (schema: docs/commands/devices.md)."),
    fmt: Optional[str] = format_option(),
) -> None:
    """The device catalog (vendor ceilings, with sources) plus `local` when measured."""
    from phasescope.theory.devices import list_devices
    from phasescope.theory.report import devices_report

    sink = output(as_json, fmt)
    devs = [d for d in list_devices() if kind is None or d.kind == kind]
    sink.emit(Report.of("devices", devices_report(devs)))


@console_view("devices")
def _show_devices(result: Result) -> None:
    """One row per device."""
    from types import SimpleNamespace

    devs = [SimpleNamespace(**d) for d in result["devices"]]
    t = Table(title=f"{len(devs)} devices (dense peaks, no sparsity)", title_justify="left")
    for col, just in (("id", "left"), ("name", "left"), ("memory\nGB", "right"), ("mem BW\nGB/s", "right"),
                      ("BF16\nTFLOPS", "right"), ("FP8\nTFLOPS", "right"), ("INT8\nTOPS", "right"),
                      ("FP32\nTFLOPS", "right"), ("link\nGB/s", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:,.4g}"

    for d in devs:
        t.add_row(escape(d.id), escape(d.name), f(d.memory_gb), f(d.mem_bandwidth_gb_s), f(d.dense_bf16_tflops), f(d.dense_fp8_tflops),
                  f(d.dense_int8_tops), f(d.fp32_tflops), f(d.interconnect_gb_s))
    console.print(t)
    console.print("[dim]sources: `phasescope devices --json` (field `source`)[/dim]")


def models(
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object (schema: docs/commands/models.md)."),
    fmt: Optional[str] = format_option(),
) -> None:
    """The model catalog: shapes, parameters read per token, KV bytes per token (fp16)."""
    from phasescope.theory.models import list_models
    from phasescope.theory.report import models_report

    sink = output(as_json, fmt)
    sink.emit(Report.of("models", models_report(list_models())))


@console_view("models")
def _show_models(result: Result) -> None:
    """One row per model."""
    rep = result.to_json()
    t = Table(title=f"{len(rep['models'])} models", title_justify="left")
    for col in ("id", "params", "read /\ntoken", "layers", "hidden", "q/kv\nheads", "head\ndim", "KV B/token\nfp16", "features"):
        t.add_column(col, justify="left" if col in ("id", "features") else "right")
    for m in rep["models"]:
        feats = []
        if m["n_experts"]:
            feats.append(f"MoE {m['n_experts_per_tok']}/{m['n_experts']}")
        if m["kv_lora_rank"]:
            feats.append(f"MLA {m['kv_lora_rank']}")
        if m["sliding_window"]:
            feats.append(f"SWA {m['sliding_window']} ({m['n_sliding_layers']}/{m['n_layers']} local)")
        if m["tie_word_embeddings"]:
            feats.append("tied")
        t.add_row(m["id"], _params(m["total_params"]), _params(m["decode_read_params"]), str(m["n_layers"]),
                  str(m["hidden_size"]), f"{m['n_heads']}/{m['n_kv_heads']}", str(m["head_dim"]),
                  f"{m['kv_bytes_per_token_fp16']:,.0f}", ", ".join(feats))
    console.print(t)


# --- hw --------------------------------------------------------------------------------------------------


def hw(
    size_mb: int = typer.Option(1024, "--size-mb", help="Array size for the bandwidth kernel (MiB; keep far above the caches)."),
    repeats: int = typer.Option(10, "--repeats", help="Timed passes per kernel (best is saved; their spread decides whether)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Threads for the bandwidth kernel (default: all usable cores)."),
    rounds: int = typer.Option(3, "--rounds", help="Rounds of passes to try while they disagree (the first that agrees is kept)."),
    matmul_n: int = typer.Option(2048, "--matmul-n", help="Matrix size of the float32 GEMM."),
    no_c: bool = typer.Option(False, "--no-c", help="Skip the compiled C kernel even when `cc` exists."),
    save: bool = typer.Option(True, "--save/--no-save", help="Save as device `local` (when the passes agree)."),
    force: bool = typer.Option(
        False, "--force", help="Save even when the passes disagree (spread > 15 %), the host was busy, or a stable "
        "saved profile is better; says what it replaced."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON object (schema: docs/commands/hw.md)."),
    if_missing: bool = typer.Option(
        False, "--if-missing", help="Measure only when no `local` device is saved yet (what `make demo` runs)."
    ),
    fmt: Optional[str] = format_option(),
) -> None:
    """Measure this machine's memory read bandwidth (all cores) and matmul throughput; save as device `local`
    when the passes agree."""
    from phasescope.measure.interval import to_ci
    from phasescope.theory import hw as hwlib
    from phasescope.theory.devices import load_local_device, local_device_path, save_local_device

    from phasescope.errors import InputError

    sink = output(as_json, fmt)
    if size_mb < 1 or repeats < 1 or matmul_n < 16 or rounds < 1:  # before anything is printed or measured
        raise InputError("hw: --size-mb, --repeats, --rounds must be >= 1 and --matmul-n >= 16")
    old = hwlib.load_profile()
    existing = load_local_device() if if_missing else None
    if existing is not None:
        say = f"hw: this machine is already measured ({local_device_path()}"
        say += f"; {hwlib.profile_sentence(old)})" if old else ")"
        err_console.print(escape(say + "; run `phasescope hw` to re-measure"), highlight=False)
        sink.emit(Report.of("hw", {"schema": 1, "measurement": None, "device": existing.to_dict(),
                                   "saved_to": str(local_device_path()), "skipped": True, "saved": False,
                                   "spread": old.spread if old else None, "spread_all": old.spread_all if old else None,
                                   "spread_of": old.spread_of if old else None, "reason": "already measured (--if-missing)",
                                   "profile": old.to_dict() if old else None}))
        return

    say = sink.progress(err_console.print)
    if say is not None:
        say(f"hw: measuring memory bandwidth ({size_mb} MiB array, {repeats} passes, up to {rounds} rounds "
            f"until they agree) and a {matmul_n}² GEMM ...")
    result, host = hwlib.measure_sampled(size_mb=size_mb, repeats=repeats, threads=threads, matmul_n=matmul_n,
                                         use_c=not no_c, rounds=rounds)
    new = hwlib.profile_of(result, host, forced=force)
    decision = hwlib.decide(new, old, force=force)
    if not save:
        decision = hwlib.Decision(False, "--no-save", "not saved (--no-save)")
    dev = hwlib.to_device(result)
    path = None
    if decision.save:
        extra = result.to_dict()
        extra.update({"profile": new.to_dict(), "host": host})
        path = save_local_device(dev, extra=extra)
    iv = hwlib.bandwidth_interval(result.bandwidth)
    # the --json document (the console view draws from the measurement objects themselves)
    doc: dict[str, Any] = {
        "schema": 1, "measurement": result.to_dict(), "device": dev.to_dict(),
        "saved_to": str(path) if path else None, "saved": decision.save, "spread": new.spread,
        "spread_all": new.spread_all, "spread_of": new.spread_of,
        "stable": new.stable, "note": decision.note, "profile": new.to_dict(),
        "bandwidth_gb_s": result.bandwidth.best_gb_s,
        "bandwidth_median_gb_s": iv.value if iv else None, "bandwidth_median_gb_s_ci": to_ci(iv),
        "bandwidth_interval": iv.to_json() if iv else None,
        "previous": old.to_dict() if old else None, "host": host,
    }
    if not decision.save:
        doc["reason"] = decision.reason
    sink.emit(Report.of("hw", doc, result=result, host=host, new=new, old=old, decision=decision, dev=dev,
                        path=path, save=save))


@console_view("hw")
def _show_hw(report: Result) -> None:
    """The machine, a row per kernel, the derived compute peaks, and whether it was saved as device `local`."""
    from phasescope.theory import hw as hwlib
    from phasescope.theory.devices import local_device_path

    o = report.objects  # type: ignore[attr-defined]
    if not o:  # skipped (--if-missing): said on stderr already
        return
    result, host, new, old, decision, dev, path, save = (o[k] for k in ("result", "host", "new", "old", "decision",
                                                                         "dev", "path", "save"))
    bw = result.bandwidth
    console.print(f"[bold]{escape(result.cpu)}[/bold], {result.cores} cores, {_num(result.memory_gb)} GB RAM")
    t = Table(show_header=True)
    for col in ("kernel", "best", "median (95 % interval)", "min", "spread: fastest / all", "passes"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    for r in [bw] + list(result.bandwidth_other):
        riv = hwlib.bandwidth_interval(r)
        med = f"{r.median_gb_s:.1f}" + (f" ({riv.low:.1f}–{riv.high:.1f})" if riv and riv.n >= 2 else "")
        t.add_row(f"memory read, {r.method} ({r.threads} threads, {r.array_bytes / 2**30:.2f} GiB)",
                  f"{r.best_gb_s:.1f} GB/s", med, f"{r.min_gb_s:.1f}",
                  f"{hwlib._pct(hwlib.pass_spreads(r.runs_gb_s)[0])} / {r.spread_pct:.0f} %",
                  str(len(r.runs_gb_s)))
    if result.matmul:
        m = result.matmul
        t.add_row(f"matmul, numpy float32 {m.n}×{m.n}", f"{m.best_gflop_s:.1f} GFLOP/s", f"{m.median_gflop_s:.1f}",
                  f"{m.min_gflop_s:.1f}", f"all {m.spread_pct:.0f} %", str(len(m.runs_gflop_s)))
    console.print(t)
    if result.derived:
        d = result.derived
        console.print(f"compute peaks \\[derived]: {d.cores} cores × {d.fp32_flop_per_cycle} FLOP/cycle × {d.ghz:.2f} GHz = "
                      f"FP32 {d.fp32_tflops * 1000:,.0f}, BF16 {d.bf16_tflops * 1000:,.0f}, INT8 {d.int8_tops * 1000:,.0f} "
                      f"GFLOP/s (flags: {', '.join(d.flags) or 'none'})")
    if len(result.rounds) > 1:
        console.print("rounds of passes: " + "; ".join(
            f"{r['round']}: {r['method']} best {r['best_gb_s']:.1f}, median {r['median_gb_s']:.1f} GB/s, spread "
            f"{hwlib._pct(r.get('spread'))} (all {hwlib._pct(r.get('spread_all'))})"
            + (" (kept)" if r.get("kept") else "") for r in result.rounds),
            highlight=False)
    d_ = host.get("during") if isinstance(host, dict) else None
    if d_:
        console.print(f"[dim]host: other work took {d_['other_cpu_share'] * 100:.0f} % of the cores while hw measured"
                      + (f", {host['worst_1s_other_cpu_share'] * 100:.0f} % in its worst 1-s windows"
                         if isinstance(host.get("worst_1s_other_cpu_share"), (int, float)) else "") + "[/dim]",
                      highlight=False)
    if path:
        console.print(f"saved as device [bold]local[/bold] ({escape(str(path))}): {dev.mem_bandwidth_gb_s:.1f} GB/s "
                      "memory "
                      f"read, BF16 peak {_num((dev.dense_bf16_tflops or 0) * 1000)} GFLOP/s — "
                      f"{escape(decision.note)} ({hwlib.spread_words(new)})", highlight=False)
        console.print("next: [bold]phasescope ceiling --device local --model ...[/bold]")
    elif save is False:
        console.print(f"[dim]not saved (--no-save); would go to {escape(str(local_device_path()))}[/dim]")
    else:
        console.print(f"[yellow]not saved as device local[/yellow]: {escape(decision.reason or '')}", highlight=False)
        console.print("[dim]rerun `phasescope hw` when the machine is quiet, or `phasescope hw --force` to save this "
                      "measurement anyway" + ("" if old else "; until then `local` (and the embedded engine's "
                      "ceilings) stay unavailable") + "[/dim]")


def register(app: typer.Typer) -> None:
    app.command("ceiling")(ceiling)
    app.command("kv")(kv)
    app.command("hw")(hw)
    app.command("devices")(devices)
    app.command("models")(models)
