"""phasescope bench vs ``vllm bench serve`` on the same ground-truth fake server.

Both clients drive the probe owner's fake vLLM server (``phasescope.testing.fakeserver``), which
logs when it really wrote every token event (``perf_counter_ns`` = CLOCK_MONOTONIC, the same
system-wide clock both clients use for their own timestamps, since all run on this machine).

Per request, matched by the ``X-Request-Id`` both clients send:

* TTFT error  = client TTFT − server TTFT, where server TTFT = first token written − request
  received (so the error is everything the client adds: building and sending the request,
  loopback, reading and parsing the event, the event loop's delay);
* ITL error   = client gap − server gap between the same two consecutive token events;
* receive lag = client timestamp of an event − server write time of that event ("first-token lag"
  for the first one: the receive side of the TTFT error).

Under a burst the one-core fake itself queues requests before its handler runs, and that wait
lands in every client's TTFT error; the first-token lag has no such term, so the sustain search
uses it by default (``--criterion recv``); ``--criterion ttft`` uses the full TTFT error.

The client is pinned to CPU 0 and the fake to CPU 1 (``taskset``), so "streams one core
sustains" means one client core. Closed loop: ``--max-concurrency N`` with 2·N requests
(two waves), random prompts of 32 tokens, 16 output tokens, TTFT 100 ms, 40 ms per token.
"Sustains" = mean first-token lag (or TTFT error) ≤ 2 ms and mean |ITL error| ≤ 2 ms.

vLLM needs a Hugging Face tokenizer directory; a word-level one matching the fake's "one token
per word" rule is built locally (no download). vLLM is NOT a project dependency: install it in
a separate venv (``python -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install vllm``) and
pass ``--vllm /tmp/vllm-venv/bin/vllm``.

Run: ``.venv/bin/python benchmarks/bench_vs_vllm.py --vllm /tmp/vllm-venv/bin/vllm``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TTFT_MS, ITL_MS, IN_LEN, OUT_LEN = 100, 40, 32, 16


def make_tokenizer(vllm_python: str, d: Path) -> None:
    code = f"""
from tokenizers import Tokenizer, models, pre_tokenizers
import json
words = ["the","quick","brown","fox","jumps","over","a","lazy","dog","and","runs","far"]
vocab = {{"[UNK]": 0, "<s>": 1, "</s>": 2}}
for w in words: vocab[w] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save({str(d / 'tokenizer.json')!r})
json.dump({{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 4096}}, open({str(d / 'tokenizer_config.json')!r}, "w"))
"""
    subprocess.run([vllm_python, "-c", code], check=True)


def start_fake(log: Path) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(["taskset", "-c", "1", PY, "-m", "phasescope.testing.fakeserver", "--flavor", "vllm",
                          "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--log", str(log)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return p, line.split()[1]


def read_truth(log: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for ln in log.read_text().splitlines():
        if ln.strip():
            g = json.loads(ln)
            if g.get("t_events_ns"):
                out.setdefault(g["id"], []).append(g)
    return out


def pick(cands: list[dict[str, Any]], start_ns: int) -> dict[str, Any] | None:
    """The ground-truth entry for a request started at ``start_ns`` (first received after it)."""
    after = [g for g in cands if g["t_recv_ns"] >= start_ns - 1_000_000]
    return min(after, key=lambda g: g["t_recv_ns"]) if after else None


def errors_from(rows: list[tuple[int, list[int], dict[str, Any]]]) -> dict[str, float]:
    """rows: (client start ns, client token-event times ns, ground truth)."""
    ttft_err, itl_err, lag, first_lag = [], [], [], []
    for start, ev, g in rows:
        tev = g["t_events_ns"]
        if not ev or len(ev) != len(tev):
            continue
        ttft_err.append(((ev[0] - start) - (tev[0] - g["t_recv_ns"])) / 1e6)
        first_lag.append((ev[0] - tev[0]) / 1e6)
        for k in range(1, len(ev)):
            itl_err.append(((ev[k] - ev[k - 1]) - (tev[k] - tev[k - 1])) / 1e6)
        lag.extend((a - b) / 1e6 for a, b in zip(ev, tev))
    t, i, lg, fl = np.array(ttft_err), np.abs(np.array(itl_err)), np.array(lag), np.array(first_lag)
    return {
        "requests_matched": len(ttft_err),
        "ttft_err_mean_ms": float(t.mean()) if t.size else float("nan"),
        "ttft_err_p99_ms": float(np.percentile(t, 99)) if t.size else float("nan"),
        "itl_abs_err_mean_ms": float(i.mean()) if i.size else float("nan"),
        "itl_abs_err_p99_ms": float(np.percentile(i, 99)) if i.size else float("nan"),
        "first_token_lag_mean_ms": float(fl.mean()) if fl.size else float("nan"),
        "first_token_lag_p99_ms": float(np.percentile(fl, 99)) if fl.size else float("nan"),
        "recv_lag_mean_ms": float(lg.mean()) if lg.size else float("nan"),
        "recv_lag_p99_ms": float(np.percentile(lg, 99)) if lg.size else float("nan"),
    }


def run_phasescope(url: str, n: int, work: Path, truth_log: Path) -> dict[str, Any]:
    from phasescope.measure.records import read_records

    out = work / "ps"
    cmd = ["taskset", "-c", "0", PY, "-m", "phasescope", "bench", url, "--api", "openai", "-n", str(2 * n),
           "-c", str(n), "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN), "--json", "--no-store",
           "--no-server-metrics", "--out", str(out), "--seed", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"phasescope bench failed: {p.stderr[-2000:]}")
    s = json.loads(p.stdout)
    truth = read_truth(truth_log)
    rows = []
    for r in read_records(out / "records.jsonl"):
        if r.tags.get("warmup") or not r.ok:
            continue
        g = pick(truth.get(r.id, []), r.t_start_ns)
        if g is None:
            continue
        rows.append((r.t_start_ns, [e.t_ns for e in r.token_events()], g))
    res = errors_from(rows)
    res.update(completed=s["completed"], failed=s["failed"], cpu_percent=s["runner_health"]["cpu_percent"],
               reported_mean_ttft_ms=s["mean_ttft_ms"], reported_mean_itl_ms=s["mean_itl_ms"])
    return res


def run_vllm(vllm: str, tok: Path, url: str, n: int, work: Path, truth_log: Path) -> dict[str, Any]:
    rdir = work / "vllm"
    cmd = ["taskset", "-c", "0", vllm, "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
           "--base-url", url, "--model", "fake-model", "--tokenizer", str(tok), "--dataset-name", "random",
           "--random-input-len", str(IN_LEN), "--random-output-len", str(OUT_LEN), "--num-prompts", str(2 * n),
           "--max-concurrency", str(n), "--ignore-eos", "--save-result", "--save-detailed", "--result-dir",
           str(rdir), "--result-filename", "r.json", "--request-id-prefix", "vb-", "--percentile-metrics",
           "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--disable-tqdm", "--seed", "1"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {p.stderr[-2000:]}")
    d = json.loads((rdir / "r.json").read_text())
    truth = read_truth(truth_log)
    rows = []
    for i, (st, ttft, itls) in enumerate(zip(d["start_times"], d["ttfts"], d["itls"])):
        if not ttft:
            continue
        start = int(round(st * 1e9))
        g = pick(truth.get(f"vb-{i}", []), start)
        if g is None:
            continue
        ev = [start + int(round(ttft * 1e9))]
        for gap in itls:
            ev.append(ev[-1] + int(round(gap * 1e9)))
        rows.append((start, ev, g))
    res = errors_from(rows)
    res.update(completed=d["completed"], failed=d.get("failed"), cpu_percent=None,
               reported_mean_ttft_ms=d["mean_ttft_ms"], reported_mean_itl_ms=d["mean_itl_ms"])
    return res


def one(tool: str, n: int, args: argparse.Namespace, tok: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bvv-{tool}-{n}-"))
    log = work / "truth.jsonl"
    fake, url = start_fake(log)
    try:
        if tool == "phasescope":
            r = run_phasescope(url, n, work, log)
        else:
            r = run_vllm(args.vllm, tok, url, n, work, log)
    finally:
        fake.terminate()
        fake.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    r.update(tool=tool, streams=n)
    print(json.dumps(r), flush=True)
    return r


def fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else (f"{v:.2f}" if isinstance(v, float) else str(v))


METRICS = ("ttft_err_mean_ms", "ttft_err_p99_ms", "itl_abs_err_mean_ms", "itl_abs_err_p99_ms", "recv_lag_mean_ms",
           "recv_lag_p99_ms", "first_token_lag_mean_ms", "first_token_lag_p99_ms")


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each metric over repeated runs (this box is shared and noisy)."""
    out = dict(runs[0])
    for m in METRICS:
        vals = [r[m] for r in runs if r[m] == r[m]]
        out[m] = float(np.median(vals)) if vals else float("nan")
    out["requests_matched"] = min(r["requests_matched"] for r in runs)
    out["repeats"] = len(runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default="/tmp/vllm-venv/bin/vllm")
    ap.add_argument("--levels", default="4,64,256", help="stream counts for the error table")
    ap.add_argument("--sustain", default="4,8,16,32,64,128,256", help="ascending levels for the sustain search")
    ap.add_argument("--repeats", type=int, default=3, help="runs per tool and level (interleaved; medians reported)")
    ap.add_argument("--limit-ms", type=float, default=2.0)
    ap.add_argument("--criterion", choices=("recv", "ttft"), default="recv",
                    help="sustain test on the first-token receive lag (recv, default) or on the full TTFT error "
                         "(ttft: includes the one-core fake's own accept/parse queue under bursts)")
    ap.add_argument("--json", default=None, help="write all rows here")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        sys.exit("taskset is needed to pin client and server to separate cores")
    tok = Path(tempfile.mkdtemp(prefix="bvv-tok-"))
    make_tokenizer(str(Path(args.vllm).parent / "python"), tok)
    levels = [int(x) for x in args.levels.split(",")]
    sustain_levels = [int(x) for x in args.sustain.split(",")]
    tools = ("phasescope", "vllm")
    cache: dict[tuple[str, int], dict[str, Any]] = {}
    raw: list[dict[str, Any]] = []

    def level(n: int) -> None:
        if all((t, n) in cache for t in tools):
            return
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
        for _ in range(args.repeats):  # interleave the tools so drifting background load hits both
            for t in tools:
                r = one(t, n, args, tok)
                runs[t].append(r)
                raw.append(r)
        for t in tools:
            cache[(t, n)] = median_row(runs[t])

    def sustains(t: str, n: int) -> bool:
        r = cache[(t, n)]
        ttft_key = "ttft_err_mean_ms" if args.criterion == "ttft" else "first_token_lag_mean_ms"
        return (r[ttft_key] <= args.limit_ms and r["itl_abs_err_mean_ms"] <= args.limit_ms
                and r["requests_matched"] >= 2 * n * 0.95)

    for n in levels:
        level(n)
    sustained: dict[str, int | None] = {t: None for t in tools}
    failed: set[str] = set()
    for n in sustain_levels:
        if failed == set(tools):
            break
        level(n)
        for t in tools:
            if t in failed:
                continue
            if sustains(t, n):
                sustained[t] = n
            else:
                failed.add(t)

    print()
    print(f"Medians of {args.repeats} interleaved runs per cell; client pinned to CPU 0, fake server to CPU 1.")
    print("| streams | tool | TTFT err mean / p99 (ms) | first-token lag mean / p99 (ms) | abs ITL err mean / p99 (ms) | "
          "event lag mean / p99 (ms) | requests |")
    print("|---|---|---|---|---|---|---|")
    for (t, n), r in sorted(cache.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"| {n} | {t} | {fmt(r['ttft_err_mean_ms'])} / {fmt(r['ttft_err_p99_ms'])} | "
              f"{fmt(r['first_token_lag_mean_ms'])} / {fmt(r['first_token_lag_p99_ms'])} | "
              f"{fmt(r['itl_abs_err_mean_ms'])} / {fmt(r['itl_abs_err_p99_ms'])} | "
              f"{fmt(r['recv_lag_mean_ms'])} / {fmt(r['recv_lag_p99_ms'])} | {r['requests_matched']} |")
    print()
    for t, n in sustained.items():
        print(f"{t}: highest stream count sustained on one client core with mean {args.criterion} and ITL errors <= "
              f"{args.limit_ms} ms: {n if n is not None else f'< {sustain_levels[0]}'} (levels tried: {args.sustain})")
    if args.json:
        Path(args.json).write_text(json.dumps({"cells": [dict(v) for v in cache.values()], "raw": raw,
                                               "sustained": sustained}, indent=2))


if __name__ == "__main__":
    main()
