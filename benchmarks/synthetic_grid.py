"""The theory against the real engine over model shapes (issue 36 item 3; not a timed test; prints a table).

For each catalog shape × weight type, a synthetic GGUF (`phasescope engine synth`: exact tensor shapes,
a real tokenizer, synthetic weights) is served by the embedded llama-server and probed at each prompt
length (sequential requests, the server's own prefill and decode timings). Beside each measured value:

* the ceiling (decode: the bandwidth/compute roof at that context; prefill: the compute floor), from the
  file's exact bytes and the device;
* `plan`'s prediction from the device alone (``cost_from_theory``: the default efficiencies for the
  device kind, no probe, no calibration) and its error against the measurement.

The device is ``local`` (what `phasescope hw` saved) when there is one, else measured here with the same
kernels (not saved; a few seconds). The defaults are sized for a small CPU box: three shapes up to ~1B,
two types, prompts 128-1024.

Usage: .venv/bin/python benchmarks/synthetic_grid.py [--shapes smollm2-135m,qwen2.5-0.5b,llama-3.2-1b]
           [--quants q8_0,q4_k_m] [--prompts 128,512,1024] [--max-tokens 32] [--repeat 2] [--threads N]
           [--json out.json] [--from stored.json]
Run it on a quiet machine: llama-server uses every core it is given and other work slows it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from phasescope.engine.synth import synthesize
from phasescope.lifecycle import use_synthetic
from phasescope.planning.build import cost_from_theory
from phasescope.planning.cpu import FITTED_ON
from phasescope.probing import probe
from phasescope.probing.ceilings import ceilings
from phasescope.theory.models import spec_from_gguf


def device(size_mb: int = 256) -> Any:
    from phasescope.errors import PhasescopeError
    from phasescope.theory.devices import get_device

    try:
        return get_device("local")
    except PhasescopeError:
        from phasescope.theory.hw import measure, to_device

        print("no `phasescope hw` profile: measuring this machine (not saved)", file=sys.stderr)
        return to_device(measure(size_mb=size_mb, repeats=3, matmul_n=1024))


def err(pred: float | None, meas: float | None) -> float | None:
    return None if not pred or not meas else (pred - meas) / meas


def cell(shape: str, quant: str, prompts: list[int], max_tokens: int, repeat: int, dev: Any,
         threads: int | None) -> list[dict[str, Any]]:
    res = synthesize(shape, quant, say=lambda m: print(f"  {m}", file=sys.stderr))
    spec = spec_from_gguf(res.path)  # the file's exact bytes, shapes and tensor types
    with use_synthetic(res):
        if threads:
            from phasescope.engine import server

            server.default_threads = lambda: threads  # type: ignore[assignment]
        out = probe(None, sizes=prompts, max_tokens=max_tokens, repeat=repeat, warmup=True, save=False)
    rows = []
    for sz in out["sizes"]:
        p = int(sz["prompt_tokens_target"] if sz.get("prompt_tokens_target") else sz["prompt_tokens"])
        srv = sz.get("server") or {}
        pre_s = srv.get("prefill_s") or sz.get("ttft_s")
        rows.append({
            "shape": shape, "quant": res.qtype, "file": str(res.path), "file_gb": res.size_bytes / 1e9,
            "prompt_tokens": p, "max_tokens": max_tokens,
            "prefill_tok_s": p / pre_s if pre_s else None,
            "decode_tok_s": srv.get("decode_tok_s") or sz.get("decode_tok_s"),
            "host_busy": (out.get("host") or {}).get("during", {}).get("other_cpu_share"),
        })
    return predict(rows, dev, spec)


def predict(rows: list[dict[str, Any]], dev: Any, spec: Any = None) -> list[dict[str, Any]]:
    """Add the roofs and `plan`'s prediction from the device alone (today's model) to measured rows.
    ``spec``: the file's; else read again from each row's file."""
    for r in rows:
        sp = spec or spec_from_gguf(r.get("file") or synthesize(r["shape"], r["quant"].lower(), say=lambda m: None).path)
        cost = cost_from_theory(sp, dev)
        p, mt = int(r["prompt_tokens"]), int(r.get("max_tokens") or 32)
        c = ceilings(sp, dev, [{"prompt_tokens": p}])["sizes"][0]
        r["prefill_roof_tok_s"] = p / c["prefill_floor_s"] if c.get("prefill_floor_s") else None
        r["decode_ceiling_tok_s"] = c.get("decode_ceiling_tok_s")
        r["plan_prefill_tok_s"] = p / cost.prefill_time_s(p)
        r["plan_decode_tok_s"] = 1.0 / cost.decode_step_s(1, p + mt / 2)
        r["set"] = "fit" if (r["shape"], r["quant"], p) in FITTED_ON else "held-out"
        r["prefill_err"] = err(r["plan_prefill_tok_s"], r["prefill_tok_s"])
        r["decode_err"] = err(r["plan_decode_tok_s"], r["decode_tok_s"])
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """How many cells `plan` meets (issue 36: ±30 % prefill, ±20 % decode), fitted and held-out apart."""
    out = []
    for name in ("fit", "held-out"):
        rs = [r for r in rows if r["set"] == name]
        if not rs:
            continue
        pre = [abs(r["prefill_err"]) for r in rs if r["prefill_err"] is not None]
        dec = [abs(r["decode_err"]) for r in rs if r["decode_err"] is not None]
        out.append(f"{name} cells ({len(rs)}): prefill within ±30 % in {sum(e <= 0.30 for e in pre)}/{len(pre)} "
                   f"(worst {100 * max(pre):.0f} %), decode within ±20 % in {sum(e <= 0.20 for e in dec)}/{len(dec)} "
                   f"(worst {100 * max(dec):.0f} %)")
    return "\n".join(out)


def fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'shape':<14} {'type':<7} {'GB':>5} {'prompt':>6} | {'prefill':>8} {'roof':>8} {'plan':>8} {'err':>6} | "
            f"{'decode':>7} {'ceiling':>7} {'plan':>7} {'err':>6} | {'busy':>4} {'set':<8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['shape']:<14} {r['quant']:<7} {r['file_gb']:>5.2f} {r['prompt_tokens']:>6} | "
            f"{fmt(r['prefill_tok_s']):>8} {fmt(r['prefill_roof_tok_s']):>8} {fmt(r['plan_prefill_tok_s']):>8} "
            f"{fmt(r['prefill_err'] and 100 * r['prefill_err'], '+.0f'):>5}% | "
            f"{fmt(r['decode_tok_s']):>7} {fmt(r['decode_ceiling_tok_s']):>7} {fmt(r['plan_decode_tok_s']):>7} "
            f"{fmt(r['decode_err'] and 100 * r['decode_err'], '+.0f'):>5}% | "
            f"{fmt(r['host_busy'] and 100 * r['host_busy'], '.0f'):>3}% {r.get('set', ''):<8}")
    lines.append("tok/s throughout; prefill = prompt tokens / the server's prefill time; roof = the compute floor's rate; "
                 "plan = `plan` from the device alone; err = (plan - measured) / measured; busy = other work's CPU share; "
                 "set = fit (planning.cpu's terms were fitted on this cell's stop-41 measurement) or held-out")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="smollm2-135m,qwen2.5-0.5b,llama-3.2-1b")
    ap.add_argument("--quants", default="q8_0,q4_k_m")
    ap.add_argument("--prompts", default="128,512,1024")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the rows and the device here")
    ap.add_argument("--from", dest="from_json", default=None,
                    help="no engine run: today's `plan` against the rows and device stored by an earlier --json")
    a = ap.parse_args(argv)
    if a.from_json:
        from phasescope.theory.devices import Device

        stored = json.loads(open(a.from_json).read())
        dev = Device(**stored["device"])
        rows = predict(stored["rows"], dev)
        print(table(rows))
        print(summary(rows))
        return 0
    dev = device()
    print(f"device {dev.id}: {dev.mem_bandwidth_gb_s} GB/s, {dev.dense_bf16_tflops} TFLOP/s ({dev.name})", file=sys.stderr)
    prompts = [int(x) for x in a.prompts.split(",")]
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for shape in a.shapes.split(","):
        for q in a.quants.split(","):
            print(f"{shape} {q}", file=sys.stderr)
            rows += cell(shape, q, prompts, a.max_tokens, a.repeat, dev, a.threads)
    print(table(rows))
    print(summary(rows))
    print(f"{len(rows)} cells in {time.monotonic() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": dev.to_dict(), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
