"""phasescope bench vs ``vllm bench serve`` on the same ground-truth fake server.

Both clients drive the lean ground-truth vLLM fake (``phasescope.testing.lean_fake``: a raw asyncio
protocol, one deadline heap for every token event, no coroutine per stream, pinned to its own
core), which logs when it really wrote every token event (``perf_counter_ns`` = CLOCK_MONOTONIC,
the same system-wide clock both clients use for their own timestamps, since all run on this
machine) and when each was due. Its own **write lag** (written − due) is printed beside every
figure: a cell whose fake lagged is a saturated instrument, not a client error.
``--fake aiohttp`` uses the older aiohttp fake (``phasescope.testing.fakeserver``) instead.

Per request, matched by the ``X-Request-Id`` both clients send:

* TTFT error  = client TTFT − server TTFT, where server TTFT = first token written − request
  arrived (the kernel's receive timestamp of the request's bytes, ``t_arrived_ns``; the fake's own
  parse time where there is none): the error is everything the client adds (building and sending
  the request, loopback, reading and parsing the event, the event loop's delay) and nothing of the
  time the request then waited in the fake's socket while the fake was busy — that wait, the
  fake's **read lag**, is printed beside the write lag;
* ITL error   = client gap − server gap between the same two consecutive token events;
* receive lag = client timestamp of an event − server write time of that event ("first-token lag"
  for the first one: the receive side of the TTFT error).

The client is pinned to CPU 0 and the fake to CPU 1 (``taskset``), so "streams one core
sustains" means one client core. Closed loop: ``--max-concurrency N`` with 2·N requests
(two waves), random prompts of 32 tokens, 16 output tokens, TTFT 100 ms, 40 ms per token.
"Sustains" (issue 22) = TTFT error ≤ 2 ms at the median and ≤ 8 ms at p99 (``--limit-ms``,
``--limit-p99-ms``; ``--criterion recv`` tests the first-token lag instead), ≥ 95 % of requests
matched, and the fake's own write lag ≤ 0.5 ms at p99 (else the cell says the instrument saturated).
A level where the client was within the limits but the fake's write lag was not proves nothing either
way: the search goes on past it and names it; the first level the client itself misses ends it.
A second line gives the same search with every token's gap held too (abs ITL error mean and p99
within the same limits), and names the sustained levels where ``client_saturated`` fired: in a closed
loop a whole wave finishes within milliseconds, and the client's work for those requests can delay
the other streams' tokens while every first token is still on time.

Without vLLM (``--vllm`` not found), only phasescope's figures are measured and printed, and the
script says that vLLM's column was not re-measured.

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


FAKE = "lean"  # set from --fake
FAKE_LOOP = "auto"  # set from --fake-loop
FAKE_SPIN_MS = 2.0  # set from --fake-spin-ms


def start_fake(log: Path) -> tuple[subprocess.Popen[str], str]:
    mod = (["phasescope.testing.lean_fake", "--loop", FAKE_LOOP, "--spin-ms", str(FAKE_SPIN_MS)] if FAKE == "lean" else ["phasescope.testing.fakeserver", "--flavor", "vllm"])
    p = subprocess.Popen(["taskset", "-c", "1", PY, "-m", *mod,
                          "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--log", str(log)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                         preexec_fn=_nofile)
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("READY"):
        p.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return p, line.split()[1]


def _nofile() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))


def stop_fake(p: subprocess.Popen[str]) -> None:
    """SIGTERM: the lean fake flushes its truth log and exits."""
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def fake_lag(truth: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """The fake's own write lag over this run's token events (ms): written − due (lean fake only)."""
    lags = [(t - d) / 1e6 for gs in truth.values() for g in gs for t, d in zip(g["t_events_ns"], g.get("t_due_ns") or [])]
    a = np.asarray(lags)
    nan = float("nan")
    rl = np.asarray([(g["t_recv_ns"] - g["t_arrived_ns"]) / 1e6 for gs in truth.values() for g in gs
                     if g.get("t_arrived_ns")])
    return {"fake_read_lag_p50_ms": float(np.percentile(rl, 50)) if rl.size else nan,
            "fake_read_lag_p99_ms": float(np.percentile(rl, 99)) if rl.size else nan,
            "fake_lag_p50_ms": float(np.percentile(a, 50)) if a.size else nan,
            "fake_lag_p99_ms": float(np.percentile(a, 99)) if a.size else nan,
            "fake_lag_max_ms": float(a.max()) if a.size else nan}


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
    stamped = 0
    for start, ev, g in rows:
        tev = g["t_events_ns"]
        if not ev or len(ev) != len(tev):
            continue
        arrived = g.get("t_arrived_ns") or g["t_recv_ns"]  # the kernel's receive time, else the fake's parse
        ttft_err.append(((ev[0] - start) - (tev[0] - arrived)) / 1e6)
        stamped += g.get("t_arrived_ns") is not None
        first_lag.append((ev[0] - tev[0]) / 1e6)
        for k in range(1, len(ev)):
            itl_err.append(((ev[k] - ev[k - 1]) - (tev[k] - tev[k - 1])) / 1e6)
        lag.extend((a - b) / 1e6 for a, b in zip(ev, tev))
    t, i, lg, fl = np.array(ttft_err), np.abs(np.array(itl_err)), np.array(lag), np.array(first_lag)
    return {
        "requests_matched": len(ttft_err),
        "truth_from_kernel_arrival": stamped,
        "ttft_err_mean_ms": float(t.mean()) if t.size else float("nan"),
        "ttft_err_median_ms": float(np.median(t)) if t.size else float("nan"),
        "first_token_lag_median_ms": float(np.median(fl)) if fl.size else float("nan"),
        "ttft_err_p99_ms": float(np.percentile(t, 99)) if t.size else float("nan"),
        "itl_abs_err_mean_ms": float(i.mean()) if i.size else float("nan"),
        "itl_abs_err_p99_ms": float(np.percentile(i, 99)) if i.size else float("nan"),
        "first_token_lag_mean_ms": float(fl.mean()) if fl.size else float("nan"),
        "first_token_lag_p99_ms": float(np.percentile(fl, 99)) if fl.size else float("nan"),
        "recv_lag_mean_ms": float(lg.mean()) if lg.size else float("nan"),
        "recv_lag_p99_ms": float(np.percentile(lg, 99)) if lg.size else float("nan"),
    }


def run_phasescope(url: str, n: int, work: Path, truth_log: Path, fake: subprocess.Popen[str]) -> dict[str, Any]:
    from phasescope.measure.records import read_records

    out = work / "ps"
    cmd = ["taskset", "-c", "0", PY, "-m", "phasescope", "bench", url, "--api", "openai", "-n", str(2 * n),
           "-c", str(n), "--input-len", str(IN_LEN), "--output-len", str(OUT_LEN), "--json", "--no-store",
           "--no-server-metrics", "--out", str(out), "--seed", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"phasescope bench failed: {p.stderr[-2000:]}")
    s = json.loads(p.stdout)
    stop_fake(fake)
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
    res.update(fake_lag(truth))
    res.update(completed=s["completed"], failed=s["failed"], cpu_percent=s["runner_health"]["cpu_percent"],
               loop_lag_p99_ms=s["runner_health"]["loop_lag_ms_p99"], send_lag_p99_ms=s["runner_health"]["send_lag_ms_p99"],
               client_saturated=any(w["kind"] == "client_saturated" for w in s.get("warnings", [])),
               reported_mean_ttft_ms=s["mean_ttft_ms"], reported_mean_itl_ms=s["mean_itl_ms"])
    return res


def run_vllm(vllm: str, tok: Path, url: str, n: int, work: Path, truth_log: Path,
             fake: subprocess.Popen[str]) -> dict[str, Any]:
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
    stop_fake(fake)
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
    res.update(fake_lag(truth))
    res.update(completed=d["completed"], failed=d.get("failed"), cpu_percent=None,
               reported_mean_ttft_ms=d["mean_ttft_ms"], reported_mean_itl_ms=d["mean_itl_ms"])
    return res


def one(tool: str, n: int, args: argparse.Namespace, tok: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bvv-{tool}-{n}-"))
    log = work / "truth.jsonl"
    fake, url = start_fake(log)
    try:
        if tool == "phasescope":
            r = run_phasescope(url, n, work, log, fake)
        else:
            r = run_vllm(args.vllm, tok, url, n, work, log, fake)
    finally:
        if fake.poll() is None:
            stop_fake(fake)
        shutil.rmtree(work, ignore_errors=True)
    r.update(tool=tool, streams=n)
    print(json.dumps(r), flush=True)
    return r


def fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else (f"{v:.2f}" if isinstance(v, float) else str(v))


METRICS = ("fake_read_lag_p50_ms", "fake_read_lag_p99_ms", "ttft_err_mean_ms", "ttft_err_median_ms", "ttft_err_p99_ms", "first_token_lag_median_ms",
           "fake_lag_p50_ms", "fake_lag_p99_ms", "fake_lag_max_ms", "itl_abs_err_mean_ms", "itl_abs_err_p99_ms", "recv_lag_mean_ms",
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
    global FAKE, FAKE_LOOP, FAKE_SPIN_MS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default="/tmp/vllm-venv/bin/vllm")
    ap.add_argument("--fake", choices=("lean", "aiohttp"), default="lean", help="the ground-truth server")
    ap.add_argument("--fake-loop", choices=("auto", "asyncio", "uvloop"), default="asyncio",
                    help="the lean fake's event loop (auto: uvloop when installed). The stdlib loop is the "
                         "default: only there does the fake take each request's kernel receive timestamp")
    ap.add_argument("--fake-spin-ms", type=float, default=2.0,
                    help="the lean fake polls instead of sleeping when its next event is due within this "
                         "(1000 polls all run long; on a VM whose vCPUs share a core that slows the client)")
    ap.add_argument("--levels", default="64,256,512,1024", help="stream counts for the error table")
    ap.add_argument("--sustain", default="1536,2048,3072", help="ascending levels past --levels for the sustain search")
    ap.add_argument("--repeats", type=int, default=1, help="runs per tool and level (interleaved; medians reported)")
    ap.add_argument("--limit-ms", type=float, default=2.0, help="sustained: median TTFT error at most this")
    ap.add_argument("--limit-p99-ms", type=float, default=8.0, help="sustained: p99 TTFT error at most this")
    ap.add_argument("--fake-limit-ms", type=float, default=0.5, help="the fake's own write lag p99 at most this")
    ap.add_argument("--criterion", choices=("ttft", "recv"), default="ttft",
                    help="sustain test on the full TTFT error (ttft, default) or the first-token receive lag (recv)")
    ap.add_argument("--json", default=None, help="write all rows here")
    args = ap.parse_args()
    FAKE, FAKE_LOOP, FAKE_SPIN_MS = args.fake, args.fake_loop, args.fake_spin_ms
    if not shutil.which("taskset"):
        sys.exit("taskset is needed to pin client and server to separate cores")
    have_vllm = Path(args.vllm).exists()
    tools: tuple[str, ...] = ("phasescope", "vllm") if have_vllm else ("phasescope",)
    tok = Path(tempfile.mkdtemp(prefix="bvv-tok-"))
    if have_vllm:
        make_tokenizer(str(Path(args.vllm).parent / "python"), tok)
    else:
        print(f"no vLLM at {args.vllm}: `vllm bench serve`'s column is NOT re-measured in this run", flush=True)
    levels = [int(x) for x in args.levels.split(",")]
    sustain_levels = sorted(set(levels) | {int(x) for x in args.sustain.split(",") if x})
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

    def fake_ok(r: dict[str, Any]) -> bool:
        return not (r["fake_lag_p99_ms"] > args.fake_limit_ms)

    def client_ok(t: str, n: int) -> bool:
        r = cache[(t, n)]
        med, p99 = (("ttft_err_median_ms", "ttft_err_p99_ms") if args.criterion == "ttft"
                    else ("first_token_lag_median_ms", "first_token_lag_p99_ms"))
        return r[med] <= args.limit_ms and r[p99] <= args.limit_p99_ms and r["requests_matched"] >= 2 * n * 0.95

    def sustains(t: str, n: int) -> bool:
        return client_ok(t, n) and fake_ok(cache[(t, n)])

    def itl_ok(t: str, n: int) -> bool:
        r = cache[(t, n)]
        return r["itl_abs_err_mean_ms"] <= args.limit_ms and r["itl_abs_err_p99_ms"] <= args.limit_p99_ms

    sustained: dict[str, int | None] = {t: None for t in tools}
    #: the same search, every token's gap held too (abs ITL error mean / p99 within the same limits):
    #: a level can hold TTFT while a whole wave finishing at once delays the other streams' tokens
    sustained_itl: dict[str, int | None] = {t: None for t in tools}
    failed_itl: set[str] = set()
    inconclusive: dict[str, list[int]] = {t: [] for t in tools}
    failed: set[str] = set()
    for n in sustain_levels:
        if n not in levels and failed == set(tools):
            break
        level(n)
        for t in tools:
            if t in failed:
                continue
            if sustains(t, n):
                sustained[t] = n
                if t not in failed_itl and itl_ok(t, n):
                    sustained_itl[t] = n
                else:
                    failed_itl.add(t)
            elif not fake_ok(cache[(t, n)]) and client_ok(t, n):
                inconclusive[t].append(n)  # the client was within the limits but the instrument lagged
            else:
                failed.add(t)

    print()
    print(f"Medians of {args.repeats} interleaved run(s) per cell; client pinned to CPU 0, {FAKE} fake to CPU 1 "
          f"(TTFT {TTFT_MS} ms, {ITL_MS} ms/token, {IN_LEN}-token prompts, {OUT_LEN} outputs, closed loop, 2 waves).")
    print("| streams | tool | TTFT err median / p99 (ms) | TTFT err mean (ms) | first-token lag median / p99 (ms) | "
          "abs ITL err mean / p99 (ms) | fake write lag p50 / p99 / max (ms) | client loop lag p99 (ms) | "
          "fake read lag p50 / p99 (ms) | client_saturated | requests |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (t, n), r in sorted(cache.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        sat = "-" if r.get("client_saturated") is None else ("yes" if r["client_saturated"] else "no")
        print(f"| {n} | {t} | {fmt(r['ttft_err_median_ms'])} / {fmt(r['ttft_err_p99_ms'])} | {fmt(r['ttft_err_mean_ms'])} | "
              f"{fmt(r['first_token_lag_median_ms'])} / {fmt(r['first_token_lag_p99_ms'])} | "
              f"{fmt(r['itl_abs_err_mean_ms'])} / {fmt(r['itl_abs_err_p99_ms'])} | "
              f"{fmt(r['fake_lag_p50_ms'])} / {fmt(r['fake_lag_p99_ms'])} / {fmt(r['fake_lag_max_ms'])}"
              f"{'' if fake_ok(r) else ' (fake saturated)'} | {fmt(r.get('loop_lag_p99_ms'))} | "
              f"{fmt(r['fake_read_lag_p50_ms'])} / {fmt(r['fake_read_lag_p99_ms'])} | {sat} | "
              f"{r['requests_matched']} |")
    print()
    what = "TTFT error" if args.criterion == "ttft" else "first-token lag"
    for t, n in sustained.items():
        print(f"{t}: highest stream count one client core sustains within {args.limit_ms:g} ms median and "
              f"{args.limit_p99_ms:g} ms p99 {what} (fake write lag p99 <= {args.fake_limit_ms:g} ms): "
              f"{n if n is not None else f'< {sustain_levels[0]}'} (levels tried: "
              f"{','.join(str(x) for x in sustain_levels if any((tt, x) in cache for tt in tools))}"
              + (f"; the client was within the limits but the fake's write lag was not at: "
                 f"{','.join(map(str, inconclusive[t]))}, so those levels prove nothing either way" if inconclusive[t] else "")
              + ")")
    for t, n in sustained_itl.items():
        sat = [x for x in sustain_levels if (t, x) in cache and cache[(t, x)].get("client_saturated")
               and sustained[t] is not None and x <= sustained[t]]
        print(f"{t}: the same with every token's gap held too (abs ITL error mean <= {args.limit_ms:g} ms, p99 <= "
              f"{args.limit_p99_ms:g} ms): {n if n is not None else f'< {sustain_levels[0]}'}"
              + (f"; client_saturated fired at {','.join(map(str, sat))} (loop lag: its events were read late)"
                 if sat else ""))
    if not have_vllm:
        print("vllm: not installed here, its column was not re-measured")
    if args.json:
        Path(args.json).write_text(json.dumps({"cells": [dict(v) for v in cache.values()], "raw": raw,
                                               "sustained": sustained, "sustained_itl": sustained_itl}, indent=2))


if __name__ == "__main__":
    main()
