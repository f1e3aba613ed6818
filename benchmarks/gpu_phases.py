"""Which roof binds, read off the GPU: DRAM and tensor activity per phase on a real NVIDIA GPU.

Needs an NVIDIA GPU, its driver and ``pip install 'phasescope[gpu]'`` (nvidia-ml-py); with
``--gpu-metrics URL`` a dcgm-exporter (``dcgm-exporter -c 100``) is read as well. Two workloads:

``--mode torch`` (default; needs PyTorch with CUDA)
    A kernel shaped like Llama-3.1-8B in bf16: 32 layers of q/k/v/o (4096×4096, GQA k/v
    4096×1024) and a SwiGLU MLP (4096×14336 ×2, 14336×4096), 15 GB of weights. *Prefill* is one
    GEMM per weight with ``--prompt-tokens`` rows (compute-bound); *decode* is a GEMV per weight
    with ``--batch`` rows (bandwidth-bound: every weight read once per step). Each phase runs for
    ``--seconds``, alternating ``--rounds`` times. Besides the counters, decode's real bandwidth
    is known exactly (weight bytes × steps ÷ time), so the table sets DRAM active × peak next to
    the bytes actually moved.

``--mode server --url URL`` (an engine you started, e.g. llama.cpp built with ``-DGGML_CUDA=ON``:
``llama-server -m model.gguf -ngl 99 --metrics``, or vLLM)
    Two ``phasescope bench`` runs through the same code path users get: prefill-heavy (long
    prompts, 2 output tokens) and decode-heavy (short prompts, long outputs), GPU telemetry on.

Either way each phase's time windows are classified by :mod:`phasescope.metrics.gpu_phases` —
the same code as ``bench --gpu-metrics`` — and the script prints one row per phase: windows,
DRAM active, tensor active, SM active, power, J per token, and for decode the achieved bandwidth.
Nothing is asserted (GPUs differ); ``--json FILE`` keeps the numbers. It has not been run in CI:
no GPU there. Record its table in docs/commands/gpu.md when you run it.

Run: ``python benchmarks/gpu_phases.py [--mode torch --seconds 3 --rounds 2] [--gpu-metrics URL]``
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

# Llama-3.1-8B: hidden 4096, 32 layers, 32 q heads / 8 kv heads of 128, MLP 14336
HIDDEN, LAYERS, KV, MLP = 4096, 32, 1024, 14336
SHAPES = [(HIDDEN, HIDDEN), (HIDDEN, KV), (HIDDEN, KV), (HIDDEN, HIDDEN), (HIDDEN, MLP), (HIDDEN, MLP), (MLP, HIDDEN)]


def _recorder(args: argparse.Namespace) -> Any:
    from phasescope.metrics.gpu import open_recorder

    rec = open_recorder(args.gpu_metrics, nvml=True, interval_s=args.interval)
    if rec is None:
        sys.exit("gpu_phases: no GPU telemetry — install nvidia-ml-py (pip install 'phasescope[gpu]') on a machine "
                 "with an NVIDIA GPU, or pass --gpu-metrics URL of a dcgm-exporter")
    return rec


def _record(i: int, t_start: int, t_first: int, t_last: int, n_out: int, n_prompt: int) -> Any:
    """A synthetic request record for one phase run: prefill = [start, first), decode = [first, last]."""
    from phasescope.measure.records import Event, RequestRecord

    n = max(2, n_out)
    ev = [Event(t_first + (t_last - t_first) * k // (n - 1), "content", max(1, n_out // n)) for k in range(n)]
    return RequestRecord(id=f"phase{i}", api="bench", target="gpu", t_start_ns=t_start, events=ev, t_done_ns=t_last,
                         prompt_tokens=n_prompt, output_tokens=n_out, ok=True)


def run_torch(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        sys.exit("gpu_phases: --mode torch needs PyTorch with CUDA (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("gpu_phases: torch sees no CUDA device")
    from phasescope.measure.clock import now_ns

    dev = torch.device("cuda")
    ws = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) / k ** 0.5 for _ in range(LAYERS) for k, n in SHAPES]
    weight_bytes = sum(w.numel() * w.element_size() for w in ws)
    xp = torch.randn(args.prompt_tokens, HIDDEN, device=dev, dtype=torch.bfloat16)
    xd = torch.randn(args.batch, HIDDEN, device=dev, dtype=torch.bfloat16)
    xmp = torch.randn(args.prompt_tokens, MLP, device=dev, dtype=torch.bfloat16)
    xmd = torch.randn(args.batch, MLP, device=dev, dtype=torch.bfloat16)

    def step(x: Any, xm: Any) -> None:
        for w in ws:
            (xm if w.shape[0] == MLP else x) @ w

    for _ in range(3):  # warm-up: cuBLAS heuristics, clocks up
        step(xp, xmp)
        step(xd, xmd)
    torch.cuda.synchronize()
    rec = _recorder(args)
    rec.start()
    records = []
    decode_bw = []
    prefill_flops = []
    for r in range(args.rounds):
        t0 = now_ns()
        n = 0
        while (now_ns() - t0) / 1e9 < args.seconds:
            step(xp, xmp)
            n += 1
            torch.cuda.synchronize()
        t1 = now_ns()
        prefill_flops.append(2 * args.prompt_tokens * sum(k * m for k, m in SHAPES) * LAYERS * n / ((t1 - t0) / 1e9))
        steps = 0
        while (now_ns() - t1) / 1e9 < args.seconds:
            step(xd, xmd)
            steps += 1
            torch.cuda.synchronize()
        t2 = now_ns()
        decode_bw.append(weight_bytes * steps / ((t2 - t1) / 1e9) / 1e9)
        records.append(_record(r, t0, t1, t2, steps * args.batch, n * args.prompt_tokens))
        time.sleep(args.interval * 2)  # an idle gap between rounds
    from phasescope.metrics.gpu_phases import finish_section

    sec = finish_section(rec, records)
    sec["measured"] = {"weight_bytes": weight_bytes, "decode_bandwidth_gb_s": sum(decode_bw) / len(decode_bw),
                       "prefill_tflops": sum(prefill_flops) / len(prefill_flops) / 1e12,
                       "batch": args.batch, "prompt_tokens": args.prompt_tokens}
    return sec


def run_server(args: argparse.Namespace) -> dict[str, Any]:
    from phasescope.load.bench import BenchConfig, run_bench

    _recorder(args).stop()  # fail early, in one line, when there is no GPU telemetry at all
    out = {}
    for name, il, ol, n in (("prefill-heavy", args.prompt_tokens, 2, 8), ("decode-heavy", 16, 256, 4)):
        cfg = BenchConfig(url=args.url, num_prompts=n, max_concurrency=1, input_len=il, output_len=ol, warmup=1,
                          metrics_interval_s=args.interval, gpu_metrics=list(args.gpu_metrics or []), store=False)
        s = run_bench(cfg).summary
        out[name] = s.get("gpu")
    return out


def _table(sec: dict[str, Any], title: str) -> None:
    print(f"\n{title}: {', '.join(sorted({d.get('model_name') or '?' for d in sec.get('devices', [])}))}"
          f" (catalog {sec.get('device_id') or '?'})")
    print(f"{'phase':8} {'win':>4} {'DRAM':>6} {'tensor':>7} {'SM':>6} {'W':>6} {'J/out tok':>10} {'J/prompt tok':>13}")
    for ph in ("prefill", "decode", "mixed", "idle"):
        p = sec["phases"][ph]
        if not p["windows"]:
            continue

        def f(v: Any, fmt: str) -> str:
            return "-" if v is None else format(v, fmt)

        print(f"{ph:8} {p['windows']:>4} {f(p['dram_active'], '.2f'):>6} {f(p['tensor_active'], '.2f'):>7} "
              f"{f(p['sm_active'], '.2f'):>6} {f(p['power_w'], '.0f'):>6} {f(p['j_per_output_token'], '.3g'):>10} "
              f"{f(p['j_per_prompt_token'], '.3g'):>13}")
    bw = sec["bandwidth"]
    m = sec.get("measured")
    if bw.get("decode_achieved_gb_s") is not None:
        line = f"decode: DRAM active × peak = {bw['decode_achieved_gb_s']:.0f} GB/s of {bw['peak_gb_s']:g}"
        if m:
            line += f"; bytes actually read {m['decode_bandwidth_gb_s']:.0f} GB/s (ratio "
            line += f"{m['decode_bandwidth_gb_s'] / bw['decode_achieved_gb_s']:.2f})"
        print(line)
    if m:
        print(f"prefill: {m['prefill_tflops']:.0f} TFLOP/s dense bf16 measured")
    for e in sec.get("evidence") or []:
        print("  " + e)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("torch", "server"), default="torch")
    ap.add_argument("--url", help="--mode server: the LLM server's base URL")
    ap.add_argument("--gpu-metrics", action="append", default=[], help="dcgm-exporter /metrics URL (repeatable)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per phase per round (torch)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=2048, help="prefill rows (torch) / prompt length (server)")
    ap.add_argument("--batch", type=int, default=1, help="decode rows (torch)")
    ap.add_argument("--interval", type=float, default=0.1, help="telemetry sampling interval (s)")
    ap.add_argument("--json", default=None, help="write the gpu section(s) here")
    args = ap.parse_args()
    if args.mode == "server" and not args.url:
        ap.error("--mode server needs --url")
    from phasescope.errors import PhasescopeError

    try:
        _main(args)
    except PhasescopeError as exc:
        sys.exit(f"gpu_phases: error: {exc}")


def _main(args: argparse.Namespace) -> None:
    if args.mode == "torch":
        res: Any = run_torch(args)
        _table(res, "PyTorch Llama-8B-shaped kernel")
    else:
        res = run_server(args)
        for name, sec in res.items():
            if sec:
                _table(sec, name)
    if args.json:
        from phasescope.jsonutil import dumps

        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
