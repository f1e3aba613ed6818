"""The batching trade-off on the real embedded engine: concurrency 1 → 2 → 4 → 8.

Starts the embedded llama-server with 8 slots (``--parallel 8``) and runs ``phasescope bench``
(library call) at ``--max-concurrency`` 1, 2, 4 and 8 with the same workload. Prints aggregate
output throughput (rises: more streams share each weight read) and per-user p50/p99 per-token ITL
(rises: every decode step carries more sequences), with the ratios to concurrency 1 measured in
this run. Nothing is asserted: machines differ.

Run: ``.venv/bin/python benchmarks/bench_engine_concurrency.py [--prompts 16 --input-len 64 --output-len 32]``
"""

from __future__ import annotations

import argparse
import json

from phasescope.engine import running_engine
from phasescope.load.bench import BenchConfig, run_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    rows = []
    with running_engine(parallel=max(levels), ctx_size=4096 * max(1, max(levels) // 2)) as eng:
        for c in levels:
            cfg = BenchConfig(url=eng.url, num_prompts=max(args.prompts, 2 * c), max_concurrency=c,
                              input_len=args.input_len, output_len=args.output_len, store=False,
                              out_dir=None, warmup=1, metrics_interval_s=0.5)
            s = run_bench(cfg).summary
            rows.append({"concurrency": c, "output_throughput": s["output_throughput"],
                         "request_throughput": s["request_throughput"], "median_itl_ms": s["median_itl_ms"],
                         "p99_itl_ms": s["p99_itl_ms"], "median_ttft_ms": s["median_ttft_ms"],
                         "mean_tpot_ms": s["mean_tpot_ms"], "completed": s["completed"],
                         "server_max_running": (s.get("server_metrics") or {}).get("summary", {}).get("max_running")})
            print(json.dumps(rows[-1]), flush=True)
    base = rows[0]
    print()
    print("| concurrency | output tok/s (agg.) | × c=1 | p50 ITL ms (per user) | × c=1 | p99 ITL ms | p50 TTFT ms | server max running |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['output_throughput']:.1f} | {r['output_throughput'] / base['output_throughput']:.2f} | "
              f"{r['median_itl_ms']:.2f} | {r['median_itl_ms'] / base['median_itl_ms']:.2f} | {r['p99_itl_ms']:.2f} | "
              f"{r['median_ttft_ms']:.1f} | {r['server_max_running']} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
