"""How exactly does phasescope read TTFT and inter-token time? Client minus ground truth.

A fake vLLM-style server (``phasescope.testing.fakeserver``) runs in a SEPARATE PROCESS (so client
and server do not share an event loop) and logs, with ``perf_counter_ns`` (CLOCK_MONOTONIC, shared
by all processes of this machine), when it received each request and when it wrote each event.
Clients, in this process, stream ``/v1/completions`` at 1, 16 and 256 concurrent streams:

* ``phasescope`` — :func:`phasescope.apis.openai.send` on :func:`phasescope.apis.new_session`;
* ``baseline`` — a plain ~60-line aiohttp client written the way most benchmark clients are
  (default ``ClientSession``, ``async for line in resp.content``, ``perf_counter`` per line;
  ``vllm bench serve`` is not installed here, so this stands in for it, as the issue allows).

Reported per client and concurrency (milliseconds, median and p99 over requests / events):

* ``ttft_err`` = client TTFT − server TTFT, where server TTFT = first-token write − request
  arrival in the handler. The peers' definition (reference/peers.md §4): what the client adds.
* ``vs rx`` = the same against the server TTFT counted from when the server process read the request
  bytes (before its own HTTP parsing): the yardstick that charges the client only for its own stack
  and the kernel;
* ``send_lag`` = server arrival − client start; ``recv_lag`` = client first-token stamp − server
  write: the two halves of ``ttft_err``.
* ``itl_err`` = client gap − server gap between consecutive events (per event).

Then event coalescing: the server packs 4 tokens per event; phasescope's per-token ITL and decode
rate must still read the true per-token time (10 ms), while per-event gaps read 40 ms.

Run: ``.venv/bin/python benchmarks/probe_timing.py [--quick]``. Prints a table and writes JSON
next to ``--out`` (default ``benchmarks/results/probe_timing.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import numpy as np

from phasescope.apis import new_session
from phasescope.apis import openai as oa
from phasescope.apis.base import GenRequest, Target
from phasescope.measure import derive as D

TTFT_MS, ITL_MS, OUT_TOKENS = 50.0, 10.0, 32


# --- the plain baseline client (what most benchmark scripts do) --------------------------------
async def baseline_send(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int) -> dict:
    rid = uuid.uuid4().hex[:16]
    payload = {"model": "fake-model", "prompt": prompt, "max_tokens": max_tokens, "stream": True,
               "stream_options": {"include_usage": True}, "ignore_eos": True}
    out = {"id": rid, "ok": False, "t_start_ns": 0, "first_ns": None, "token_ns": []}
    st = time.perf_counter_ns()
    out["t_start_ns"] = st
    async with session.post(url + "/v1/completions", json=payload, headers={"X-Request-Id": rid}) as resp:
        if resp.status != 200:
            return out
        async for raw in resp.content:
            line = raw.strip()
            if not line:
                continue
            ts = time.perf_counter_ns()
            line = line.decode("utf-8")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            obj = json.loads(data)
            ch = obj.get("choices") or []
            if ch and ch[0].get("text"):
                if out["first_ns"] is None:
                    out["first_ns"] = ts
                out["token_ns"].append(ts)
    out["ok"] = True
    return out


# --- running a load ---------------------------------------------------------------------------
async def run_phasescope(url: str, conc: int, rounds: int) -> list[dict]:
    t = Target(url, api="openai", model="fake-model", engine="vllm")
    res = []
    async with new_session() as s:
        # one unmeasured round opens the connections (steady state, as a long benchmark sees it)
        await asyncio.gather(*[oa.send(s, t, GenRequest(prompt="a b c d", max_tokens=2)) for _ in range(conc)])
        for _ in range(rounds):
            recs = await asyncio.gather(*[oa.send(s, t, GenRequest(prompt="a b c d", max_tokens=OUT_TOKENS)) for _ in range(conc)])
            for r in recs:
                tok = r.token_events()
                res.append({"id": r.id, "ok": r.ok, "t_start_ns": r.t_start_ns, "t_conn_ns": r.t_conn_ready_ns,
                            "first_ns": tok[0].t_ns if tok else None,
                            "token_ns": [e.t_ns for e in tok], "rec": r})
    return res


async def run_baseline(url: str, conc: int, rounds: int) -> list[dict]:
    res = []
    async with aiohttp.ClientSession() as s:  # aiohttp defaults, as a plain script would
        await asyncio.gather(*[baseline_send(s, url, "a b c d", 2) for _ in range(conc)])
        for _ in range(rounds):
            res.extend(await asyncio.gather(*[baseline_send(s, url, "a b c d", OUT_TOKENS) for _ in range(conc)]))
    return res


def start_server(tokens_per_event: int, log: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "phasescope.testing", "--flavor", "vllm", "--ttft-ms", str(TTFT_MS),
           "--itl-ms", str(ITL_MS), "--tokens-per-event", str(tokens_per_event), "--log", str(log)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if not line.startswith("READY "):
        p.kill()
        raise SystemExit(f"fake server did not start: {line!r}")
    return p, line.split(" ", 1)[1]


def stop_server(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def load_gt(path: Path) -> dict[str, dict]:
    gt = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        gt[d["id"]] = d
    return gt


def errors(results: list[dict], gt: dict[str, dict]) -> dict[str, float | int | None]:
    ttft_err, send_lag, recv_lag, itl_err, net_err, rx_err = [], [], [], [], [], []
    for r in results:
        g = gt.get(r["id"])
        if not r["ok"] or g is None or r["first_ns"] is None or not g["t_events_ns"]:
            continue
        server_ttft = g["t_events_ns"][0] - g["t_recv_ns"]
        client_ttft = r["first_ns"] - r["t_start_ns"]
        ttft_err.append((client_ttft - server_ttft) / 1e6)
        if g.get("t_rx_ns"):
            rx_err.append((client_ttft - (g["t_events_ns"][0] - g["t_rx_ns"])) / 1e6)
        if r.get("t_conn_ns") is not None:
            net_err.append(((r["first_ns"] - r["t_conn_ns"]) - server_ttft) / 1e6)
        send_lag.append((g["t_recv_ns"] - r["t_start_ns"]) / 1e6)
        recv_lag.append((r["first_ns"] - g["t_events_ns"][0]) / 1e6)
        c, s = r["token_ns"], g["t_events_ns"]
        if len(c) == len(s):
            for i in range(1, len(c)):
                itl_err.append(((c[i] - c[i - 1]) - (s[i] - s[i - 1])) / 1e6)

    def q(xs: list[float], p: float) -> float | None:
        return float(np.percentile(xs, p)) if xs else None
    return {"n": len(ttft_err), "ttft_err_p50_ms": q(ttft_err, 50), "ttft_err_p99_ms": q(ttft_err, 99),
            "ttft_net_err_p50_ms": q(net_err, 50), "ttft_net_err_p99_ms": q(net_err, 99),
            "ttft_err_vs_arrival_p50_ms": q(rx_err, 50), "ttft_err_vs_arrival_p99_ms": q(rx_err, 99),
            "send_lag_p50_ms": q(send_lag, 50), "recv_lag_p50_ms": q(recv_lag, 50), "recv_lag_p99_ms": q(recv_lag, 99),
            "itl_err_p50_ms": q(itl_err, 50), "itl_err_p99_ms": q(itl_err, 99),
            "itl_abs_err_p50_ms": q([abs(x) for x in itl_err], 50)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer requests")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "probe_timing.json"))
    a = ap.parse_args()
    plan = {1: 10 if a.quick else 30, 16: 1 if a.quick else 3, 256: 1}  # rounds per concurrency
    out: dict = {"config": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_tokens": OUT_TOKENS,
                            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "gt.jsonl"
        srv, url = start_server(1, log)
        try:
            # warm both clients once (imports, first connections)
            asyncio.run(run_phasescope(url, 1, 2))
            asyncio.run(run_baseline(url, 1, 2))
            for conc, rounds in plan.items():
                # alternate the two clients so drift on this shared machine hits both alike
                for client in ("phasescope", "baseline", "phasescope", "baseline"):
                    fn = run_phasescope if client == "phasescope" else run_baseline
                    res = asyncio.run(fn(url, conc, max(1, rounds // 2)))
                    time.sleep(0.3)
                    gt = load_gt(log)
                    e = errors(res, gt)
                    e.update({"client": client, "concurrency": conc})
                    out["runs"].append(e)
        finally:
            stop_server(srv)
        # coalescing: 4 tokens per event
        log4 = Path(tmp) / "gt4.jsonl"
        srv, url = start_server(4, log4)
        try:
            res = asyncio.run(run_phasescope(url, 1, 5 if a.quick else 10))
            recs = [r["rec"] for r in res if r["ok"]]
            itl = [x for r in recs for x in D.itl_s(r)]
            gaps = [x for r in recs for x in D.event_gaps_s(r)]
            out["coalescing"] = {
                "tokens_per_event": 4, "true_itl_ms": ITL_MS,
                "itl_p50_ms": float(np.median(itl)) * 1e3, "decode_tok_s_median": float(np.median([D.decode_tok_s(r) for r in recs])),
                "event_gap_p50_ms": float(np.median(gaps)) * 1e3,
            }
        finally:
            stop_server(srv)
    out["config"]["loadavg_end"] = os.getloadavg()
    # merge the two passes of each (client, concurrency) by taking the pass medians' mean
    print(f"fake server: TTFT {TTFT_MS:g} ms, {ITL_MS:g} ms/token, {OUT_TOKENS} tokens; separate process; "
          f"{os.cpu_count()} CPUs, load {out['config']['loadavg_start'][0]:.1f}")
    print(f"{'client':<11}{'streams':>8}{'n':>6}{'TTFT err p50':>14}{'p99':>9}{'net p50':>9}{'vs rx p50':>10}{'send lag':>10}{'recv lag':>10}{'ITL err p50':>13}{'p99':>9}")
    for r in out["runs"]:
        f = lambda v: "—" if v is None else f"{v:+.2f}"  # noqa: E731
        print(f"{r['client']:<11}{r['concurrency']:>8}{r['n']:>6}{f(r['ttft_err_p50_ms']):>14}{f(r['ttft_err_p99_ms']):>9}{f(r['ttft_net_err_p50_ms']):>9}{f(r['ttft_err_vs_arrival_p50_ms']):>10}"
              f"{f(r['send_lag_p50_ms']):>10}{f(r['recv_lag_p50_ms']):>10}{f(r['itl_err_p50_ms']):>13}{f(r['itl_err_p99_ms']):>9}")
    c = out["coalescing"]
    print(f"coalescing (4 tokens/event, true {ITL_MS:g} ms/token): phasescope ITL p50 {c['itl_p50_ms']:.2f} ms, "
          f"decode {c['decode_tok_s_median']:.1f} tok/s (true {1000 / ITL_MS:.0f}); per-event gap p50 {c['event_gap_p50_ms']:.2f} ms "
          f"(what vLLM-style per-event ITL reports)")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
