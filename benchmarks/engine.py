#!/usr/bin/env python3
"""Benchmark (not a test): the embedded engine's prefill and decode next to this machine's two roofs.

What it measures, in one run (numbers vary ±10–15 % on a shared 2-vCPU VM; run it on a quiet machine):

1. This machine's roofs
   * memory bandwidth BW: ``phasescope hw``'s read kernel (``phasescope.theory.hw.measure``: C helper with
     one thread per core over 1 GiB, numpy cross-check; best and median of 10 passes); the local
     OpenMP kernel below only when that module is missing; ``--use-hw`` reads the saved ``local`` device.
   * matmul throughput F: numpy float32 GEMM (2048³, BLAS on all cores), best of several.
2. The roofs for each model file (formulas from ``phasescope.theory.roofline``, theory.md §1–§3)
   * bandwidth roof (decode tok/s) = BW / (weight bytes read per token + KV bytes at the context)
   * compute roof (decode tok/s)   = F / FLOPs per token (2·params read + attention)
   * compute roof (prefill tok/s)  = F / (prefill FLOPs(S) / S)
   The lower roof binds; efficiency = measured / binding roof.
3. The engine, three ways
   * llama-server (``running_engine``, 1 slot): server ``timings`` of a ~200-token prefill
     (``cache_prompt: false``) and of a 64-token decode (``ignore_eos``); medians of ``--reps``.
   * llama-bench (no HTTP): pp200 and tg64 on the same threads; server overhead = 1 − server/llama-bench.
   * decode threads scaling (llama-bench tg64 at 1 thread and at all): a bandwidth-bound decode
     would barely change; a compute-bound one scales with cores.
4. Quantization: tg64 of F16, Q8_0, Q4_0 (and pure Q4_0) requantized from the bundled Q4_K_M with
   ``phasescope engine quantize`` — speed ratio vs bytes ratio, explained with the two roofs.

Usage: ``python benchmarks/engine.py [--reps 3] [--json out.json] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from phasescope.engine import ensure_bundled_model, find_llama_server, find_tool, running_engine
from phasescope.engine.quantize import quantize
from phasescope.engine.server import default_threads
from phasescope.theory import roofline
from phasescope.theory.models import load_model_spec

READ_BW_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){
  size_t bytes=(size_t)atoll(argv[1]); int reps=atoi(argv[2]); size_t n=bytes/sizeof(double);
  double*a=aligned_alloc(64,n*sizeof(double)); if(!a) return 1;
  #pragma omp parallel for
  for(size_t i=0;i<n;i++) a[i]=(double)(i&7);
  double sink=0;
  for(int r=0;r<reps;r++){
    double s=0, t0=now();
    #pragma omp parallel for simd reduction(+:s)
    for(size_t i=0;i<n;i++) s+=a[i];
    double dt=now()-t0; sink+=s; printf("%.3f\n", bytes/dt/1e9);
  }
  fprintf(stderr,"%g\n",sink); return 0;
}
"""


def measure_bandwidth(gib: float = 1.0, reps: int = 12) -> dict[str, Any]:
    """Read bandwidth in GB/s (best and median of ``reps`` passes over ``gib`` GiB, all cores)."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "readbw.c", Path(d) / "readbw"
        src.write_text(READ_BW_C)
        b = subprocess.run([cc, "-O3", "-march=native", "-fopenmp", str(src), "-o", str(exe)], capture_output=True)
        if b.returncode == 0:
            out = subprocess.run([str(exe), str(int(gib * 2**30)), str(reps)], capture_output=True, text=True,
                                 check=True)
            vals = [float(x) for x in out.stdout.split()][1:]  # the first pass also faults pages in
            method = f"OpenMP read-only sum, {gib:g} GiB, {default_threads()} threads, {len(vals)} passes ({cc} -O3 -march=native)"
        else:  # no compiler: numpy copy (read + write counted), one thread — a lower bound
            a = np.ones(int(gib * 2**30) // 8)
            o = np.empty_like(a)
            vals = []
            for _ in range(reps // 2):
                t0 = time.perf_counter()
                np.copyto(o, a)
                vals.append(2 * a.nbytes / (time.perf_counter() - t0) / 1e9)
            method = "numpy copyto (read+write), 1 thread — no C compiler found"
    return {"best_gb_s": max(vals), "median_gb_s": statistics.median(vals), "min_gb_s": min(vals),
            "passes": vals, "method": method}


def measure_matmul(n: int = 2048, reps: int = 6) -> dict[str, Any]:
    """float32 GEMM throughput in GFLOP/s (2·n³ per product), best and median."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm up BLAS threads
    vals = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        vals.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return {"best_gflop_s": max(vals), "median_gflop_s": statistics.median(vals), "passes": vals,
            "method": f"numpy float32 matmul {n}x{n}, {reps} reps"}


def machine_roofs(use_hw: bool) -> dict[str, Any]:
    """Bandwidth and matmul of this machine: ``phasescope hw``'s kernels (``phasescope.theory.hw``) when
    that module is present, else the local minimal ones above; ``--use-hw`` reads its saved ``local`` device."""
    if use_hw:
        from phasescope.theory.devices import load_local_device

        dev = load_local_device()
        if dev is not None and dev.fp32_tflops:
            return {"bandwidth": {"best_gb_s": dev.mem_bandwidth_gb_s, "median_gb_s": dev.mem_bandwidth_gb_s,
                                  "method": f"phasescope hw (saved device 'local': {dev.source})"},
                    "matmul": {"best_gflop_s": dev.fp32_tflops * 1e3, "median_gflop_s": dev.fp32_tflops * 1e3,
                               "method": "phasescope hw (saved device 'local')"}}
        print("note: no saved `phasescope hw` device with a matmul figure; measuring here", file=sys.stderr)
    try:
        from phasescope.theory import hw
    except ImportError:
        return {"bandwidth": measure_bandwidth(), "matmul": measure_matmul()}
    r = hw.measure(size_mb=1024, repeats=10)
    bw = {"best_gb_s": r.bandwidth.best_gb_s, "median_gb_s": r.bandwidth.median_gb_s,
          "passes": r.bandwidth.runs_gb_s, "method": f"phasescope.theory.hw {r.bandwidth.method}, "
          f"{r.bandwidth.threads} threads, {r.bandwidth.array_bytes / 2**20:.0f} MiB"}
    assert r.matmul is not None
    mm = {"best_gflop_s": r.matmul.best_gflop_s, "median_gflop_s": r.matmul.median_gflop_s,
          "passes": r.matmul.runs_gflop_s, "method": f"phasescope.theory.hw numpy {r.matmul.dtype} GEMM n={r.matmul.n}"}
    if r.derived is not None:
        mm["derived_fp32_gflop_s"] = r.derived.fp32_tflops * 1e3
        mm["derived_int8_gop_s"] = r.derived.int8_tops * 1e3
    return {"bandwidth": bw, "matmul": mm}


def roofs_for(model: Path, bw_gb_s: float, gflop_s: float, context: int, prompt: int) -> dict[str, Any]:
    spec = load_model_spec(str(model))
    wbytes = roofline.weight_bytes_read(spec)
    kv = roofline.kv_bytes_per_sequence(spec, context)
    dflops = roofline.decode_flops_per_token(spec, context)
    r = roofline.decode_roofs(weight_bytes=wbytes, kv_bytes_per_sequence=kv, flops_per_token=dflops, batch=1,
                              bandwidth_bytes_s=bw_gb_s * 1e9, peak_flops=gflop_s * 1e9)
    pflops_tok = roofline.prefill_flops(spec, prompt) / prompt
    return {
        "weight_bytes": wbytes, "kv_bytes": kv, "decode_flops_per_token": dflops,
        "prefill_flops_per_token": pflops_tok,
        "decode_bandwidth_roof_tok_s": r.bandwidth_tok_s, "decode_compute_roof_tok_s": r.compute_tok_s,
        "decode_binding": r.binding, "decode_ceiling_tok_s": r.ceiling_tok_s,
        "prefill_compute_roof_tok_s": gflop_s * 1e9 / pflops_tok,
    }


def llama_bench(model: Path, threads: int, reps: int, prompt: int = 200, gen: int = 64) -> dict[str, float]:
    """llama-bench pp<prompt> and tg<gen> average tok/s (``-o json``); 0 means "not asked"."""
    exe = find_tool("llama-bench", find_llama_server())
    out = subprocess.run([str(exe), "-m", str(model), "-p", str(prompt), "-n", str(gen), "-t", str(threads),
                          "-r", str(reps), "-o", "json"], capture_output=True, text=True, check=True)
    res: dict[str, float] = {}
    for row in json.loads(out.stdout):
        kind = "pp" if row["n_prompt"] > 0 and row["n_gen"] == 0 else "tg" if row["n_gen"] > 0 and row["n_prompt"] == 0 else None
        if kind:
            res[f"{kind}_tok_s"] = row["avg_ts"]
            res[f"{kind}_best_tok_s"] = max(row.get("samples_ts") or [row["avg_ts"]])
    return res


def interleaved_tg(models: list[Path], threads: list[int], rounds: int, gen: int = 64) -> dict[tuple[str, int], dict[str, float]]:
    """tg<gen> tok/s for every (model, threads), measured round-robin (one llama-bench rep per call) so
    that a burst of other work on the machine hits all configurations alike; best and median per pair."""
    samples: dict[tuple[str, int], list[float]] = {(str(m), t): [] for m in models for t in threads}
    for _ in range(rounds):
        for m in models:
            for t in threads:
                samples[(str(m), t)].append(llama_bench(m, t, 1, prompt=0, gen=gen)["tg_tok_s"])
    return {k: {"best": max(v), "median": statistics.median(v), "runs": v} for k, v in samples.items()}


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def server_phases(model: Path | None, threads: int, reps: int, prompt_tokens: int = 200) -> dict[str, Any]:
    """Server-reported prefill and decode tok/s (medians), each prompt unique so nothing is cached."""
    pre, dec, ttft = [], [], []
    with running_engine(parallel=1, ctx_size=4096, threads=threads, model_path=model) as eng:
        for i in range(reps + 1):  # the first rep warms up and is dropped
            words = " ".join(f"{(i * 7919 + k * 104729) % 100000:05d}" for k in range(prompt_tokens))
            toks = _post(eng.url + "/tokenize", {"content": words})["tokens"][:prompt_tokens]
            p = _post(eng.url + "/completion", {"prompt": toks, "n_predict": 1, "cache_prompt": False})["timings"]
            d = _post(eng.url + "/completion", {"prompt": f"Item {i}:", "n_predict": 64, "ignore_eos": True,
                                                "cache_prompt": False, "temperature": 0})["timings"]
            if i:
                pre.append(p["prompt_per_second"])
                ttft.append(p["prompt_ms"])
                dec.append(d["predicted_per_second"])
    return {"prefill_tok_s": statistics.median(pre), "prefill_best_tok_s": max(pre),
            "decode_best_tok_s": max(dec), "prefill_prompt_tokens": prompt_tokens,
            "prompt_ms": statistics.median(ttft), "decode_tok_s": statistics.median(dec),
            "prefill_runs": pre, "decode_runs": dec}


def _pick(d: dict[str, Any], stat: str) -> dict[str, Any]:
    """With ``stat == "best"``, the plain keys (``decode_tok_s``, ``tg_tok_s``...) take the best rep's value."""
    if stat != "best":
        return d
    out = dict(d)
    for k in list(d):
        if "_best_" in k:
            plain = k.replace("_best_", "_")
            out[plain + "_typical"] = d.get(plain)
            out[plain] = d[k]
    return out


def _loadavg() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--json", type=Path, help="also write all numbers to this file")
    ap.add_argument("--quick", action="store_true", help="skip the quantization sweep")
    ap.add_argument("--stat", choices=("median", "best"), default="median",
                    help="which rep to report: median (quiet machine) or best (a busy one: interference only slows)")
    ap.add_argument("--use-hw", action="store_true", help="use `phasescope hw`'s saved local device for the roofs")
    args = ap.parse_args()
    T = args.threads
    out: dict[str, Any] = {"threads": T, "cpus": default_threads(), "loadavg_start": _loadavg(),
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    model = ensure_bundled_model()

    out["stat"] = args.stat
    print(f"== machine roofs ({T} threads; load average {out['loadavg_start']:.2f}; engine figures: {args.stat} of {args.reps} reps)")
    m = machine_roofs(args.use_hw)
    out["machine"] = m
    bw, fl = m["bandwidth"]["best_gb_s"], m["matmul"]["best_gflop_s"]
    print(f"bandwidth  best {bw:.1f} GB/s, median {m['bandwidth']['median_gb_s']:.1f}  [{m['bandwidth']['method']}]")
    print(f"matmul     best {fl:.0f} GFLOP/s, median {m['matmul']['median_gflop_s']:.0f}  [{m['matmul']['method']}]")
    if "derived_fp32_gflop_s" in m["matmul"]:
        print(f"           (derived from CPU flags x cores x clock: fp32 {m['matmul']['derived_fp32_gflop_s']:.0f} GFLOP/s, "
              f"int8 {m['matmul']['derived_int8_gop_s']:.0f} GOP/s; the compute roof below uses the measured GEMM)")

    print("\n== bundled Gemma 3 270M Q4_K_M: engine vs roofs")
    roofs = roofs_for(model, bw, fl, context=64, prompt=200)
    srv = _pick(server_phases(None, T, args.reps), args.stat)
    lb = _pick(llama_bench(model, T, args.reps), args.stat)
    key = "best" if args.stat == "best" else "median"
    files: list[tuple[str, Path]] = [("Q4_K_M (bundled)", model)]
    if not args.quick:
        for qt, pure in (("F16", False), ("Q8_0", False), ("Q4_0", False), ("Q4_0", True)):
            files.append((qt + (" pure" if pure else ""), quantize(qt, allow_requantize=True, pure=pure).path))
    thread_list = sorted({1, T})
    tg = interleaved_tg([p for _, p in files], thread_list, args.reps)
    lb1 = {"tg_tok_s": tg[(str(model), 1)][key]}
    lb["tg_tok_s_interleaved"] = tg[(str(model), T)][key]
    out["bundled"] = {"roofs": roofs, "server": srv, "llama_bench": lb, "llama_bench_1thread": lb1,
                      "decode_threads_interleaved": {str(t): tg[(str(model), t)] for t in thread_list}}
    bind = roofs["decode_ceiling_tok_s"]
    print(f"weights read per token {roofs['weight_bytes'] / 1e6:.1f} MB; decode FLOPs/token "
          f"{roofs['decode_flops_per_token'] / 1e9:.2f} G; prefill FLOPs/token {roofs['prefill_flops_per_token'] / 1e9:.2f} G")
    print(f"decode roofs: bandwidth {roofs['decode_bandwidth_roof_tok_s']:.0f} tok/s, compute "
          f"{roofs['decode_compute_roof_tok_s']:.0f} tok/s -> {roofs['decode_binding']} binds ({bind:.0f} tok/s)")
    print(f"decode  server {srv['decode_tok_s']:.1f} tok/s = {100 * srv['decode_tok_s'] / bind:.0f} % of the binding roof, "
          f"{100 * srv['decode_tok_s'] / roofs['decode_bandwidth_roof_tok_s']:.0f} % of the bandwidth roof; "
          f"llama-bench tg64 {lb['tg_tok_s']:.1f}; server overhead {100 * (1 - srv['decode_tok_s'] / lb['tg_tok_s']):+.0f} %")
    print(f"prefill server {srv['prefill_tok_s']:.0f} tok/s (200 tokens in {srv['prompt_ms']:.0f} ms) = "
          f"{100 * srv['prefill_tok_s'] / roofs['prefill_compute_roof_tok_s']:.0f} % of the compute roof "
          f"{roofs['prefill_compute_roof_tok_s']:.0f} tok/s; llama-bench pp200 {lb['pp_tok_s']:.0f}; "
          f"server overhead {100 * (1 - srv['prefill_tok_s'] / lb['pp_tok_s']):+.0f} %")
    eff_gb = srv["decode_tok_s"] * roofs["weight_bytes"] / 1e9
    eff_gf = srv["decode_tok_s"] * roofs["decode_flops_per_token"] / 1e9
    print(f"decode  uses {eff_gb:.1f} GB/s of {bw:.1f} measured and {eff_gf:.0f} GFLOP/s of {fl:.0f} (GEMM peak); "
          f"prefill uses {srv['prefill_tok_s'] * roofs['prefill_flops_per_token'] / 1e9:.0f} GFLOP/s")
    out["bundled"]["decode_effective_gb_s"] = eff_gb
    out["bundled"]["decode_effective_gflop_s"] = eff_gf
    tT = lb["tg_tok_s_interleaved"]
    print(f"decode threads (llama-bench tg64, interleaved): 1 -> {T}: {lb1['tg_tok_s']:.1f} -> {tT:.1f} tok/s "
          f"(x{tT / lb1['tg_tok_s']:.2f}; a compute-bound decode scales with cores, a bandwidth-bound one "
          "only until the memory bus is full)")

    if not args.quick:
        print(f"\n== quantization: decode (llama-bench tg64, {key} of {args.reps} interleaved rounds) vs bytes per token")
        rows = []
        for name, path in files:
            r = roofs_for(path, bw, fl, context=64, prompt=200)
            row = {"name": name, "path": str(path), "weight_bytes": r["weight_bytes"],
                   "bandwidth_roof_tok_s": r["decode_bandwidth_roof_tok_s"],
                   "compute_roof_tok_s": r["decode_compute_roof_tok_s"], "binding": r["decode_binding"]}
            for t in thread_list:
                row[f"tg_tok_s_t{t}"] = tg[(str(path), t)][key]
                row[f"tg_runs_t{t}"] = tg[(str(path), t)]["runs"]
            row["tg_tok_s"] = row[f"tg_tok_s_t{T}"]
            row["effective_gb_s"] = row["tg_tok_s"] * r["weight_bytes"] / 1e9
            rows.append(row)
        out["quant"] = rows
        f16 = next(r for r in rows if r["name"] == "F16")
        print(f"{'file':<18}{'MB/token':>9}{'tg@1thr':>9}{'tg@' + str(T) + 'thr':>9}{'BW roof':>9}{'eff GB/s':>10}"
              f"{'% BW roof':>10}{'speed x':>9}{'bytes x':>9}")
        for r in rows:
            print(f"{r['name']:<18}{r['weight_bytes'] / 1e6:>9.0f}{r['tg_tok_s_t1']:>9.1f}{r['tg_tok_s']:>9.1f}"
                  f"{r['bandwidth_roof_tok_s']:>9.0f}{r['effective_gb_s']:>10.1f}"
                  f"{100 * r['tg_tok_s'] / r['bandwidth_roof_tok_s']:>9.0f}%"
                  f"{r['tg_tok_s'] / f16['tg_tok_s']:>9.2f}{f16['weight_bytes'] / r['weight_bytes']:>9.2f}")
        print("speed x / bytes x: relative to F16 at the full thread count. Where speed x < bytes x, per-token"
              " compute (dequantize + dot products) is a large part of the step: both roofs matter, not bandwidth alone.")
    out["loadavg_end"] = _loadavg()
    print(f"\nload average {out['loadavg_start']:.2f} -> {out['loadavg_end']:.2f} "
          "(other work on this machine inflates the spread; compare ratios measured in one run)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
