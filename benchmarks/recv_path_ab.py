"""Where one client core's time goes per streamed event: aiohttp's receive path against the raw one.

Issue 22 asks whether a leaner receive path than aiohttp's ``StreamReader`` is needed for one core
to sustain 2,000 streams. Both variants drive the lean ground-truth fake (pinned to CPU 1) from a
client process pinned to CPU 0, closed loop of two waves (``--streams`` N, 2·N requests, 32-token
prompts, 16 outputs, TTFT 100 ms, 40 ms per token), through the same
:func:`phasescope.apis._http.exchange` and OpenAI protocol object bench uses (same records, same
timestamps); only the session differs:

* ``aiohttp``: ``new_session()``: socket → aiohttp's C parser → ``StreamReader`` → a future wakes
  the request's task → ``readany()`` → the SSE framer;
* ``raw``: ``new_session(fast=True)`` (:mod:`phasescope.apis._fast`): socket → httptools' parser →
  the SSE framer inside ``data_received``; no future, no task step per event.

Printed per variant: client CPU µs per event (``process_time`` over the run ÷ token events), the
client core's busy share, TTFT error (client TTFT − server truth) median / p99, and the fake's own
write lag p99 (an instrument check). Rounds alternate the order, so drift hits both alike.

Needs ``httptools`` (``pip install 'phasescope[fast]'``) and ``taskset``.
Run: ``.venv/bin/python benchmarks/recv_path_ab.py --streams 256,1024 [--rounds 2] [--loop uvloop]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
import bench_vs_vllm as bv  # noqa: E402  (start_fake, stop_fake, read_truth, pick, fake_lag)

OUT = 16
PROMPT = " ".join(["the quick brown fox"] * 8)  # 32 words = 32 tokens for the fake


# --- the client process ------------------------------------------------------------------------
def _target(url: str) -> Any:
    from phasescope.apis.base import Target, Timeouts

    return Target(base_url=url, api="openai", model="fake-model", timeouts=Timeouts())


def _request() -> Any:
    from phasescope.apis.base import GenRequest

    return GenRequest(prompt=PROMPT, max_tokens=OUT, ignore_eos=True)


async def _run(url: str, n: int, fast: bool) -> list[Any]:
    from phasescope.apis import _records
    from phasescope.apis._http import exchange
    from phasescope.apis._session import new_session
    from phasescope.apis.openai import _Completions

    tgt = _target(url)
    recs: list[Any] = []
    async with new_session(limit=0, fast=fast) as session:
        async def one() -> None:
            req = _request()
            rec = _records.new_record(tgt, req)
            recs.append(await exchange(session, _Completions(tgt, req, rec)))

        await _waves(one, n)
    return recs


async def _waves(one: Any, n: int) -> None:
    """Closed loop, concurrency n, 2·n requests."""
    left = [2 * n]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(n)))


def client_main(mode: str, url: str, n: int, out: str, uv: bool) -> None:
    import gc

    import httptools  # noqa: F401  (imports outside the timed run)

    from phasescope.apis import _http, _records, _session, openai  # noqa: F401

    gc.collect()
    gc.freeze()  # as bench does for a run's duration
    loop = asyncio.new_event_loop
    if uv:
        import uvloop

        loop = uvloop.new_event_loop
    c0, w0 = time.process_time(), time.perf_counter()
    with asyncio.Runner(loop_factory=loop) as r:
        recs = r.run(_run(url, n, mode == "raw"))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rows = [{"id": r.id, "start": r.t_start_ns, "ev": [e.t_ns for e in r.token_events()], "ok": r.ok} for r in recs]
    Path(out).write_text(json.dumps({"cpu_s": cpu, "wall_s": wall, "rows": rows}))


# --- the parent --------------------------------------------------------------------------------
def measure(mode: str, n: int, work: Path, loop: str) -> dict[str, Any]:
    log = work / f"truth-{mode}-{n}.jsonl"
    fake, url = bv.start_fake(log)
    out = work / f"client-{mode}-{n}.json"
    try:
        subprocess.run(["taskset", "-c", "0", sys.executable, __file__, "--client", mode, url, str(n), str(out), loop],
                       check=True, preexec_fn=bv._nofile)
    finally:
        bv.stop_fake(fake)
    doc = json.loads(out.read_text())
    truth = bv.read_truth(log)
    ttft_err, events = [], 0
    for r in doc["rows"]:
        events += len(r["ev"])
        g = bv.pick(truth.get(r["id"], []), r["start"])
        if g and r["ev"] and len(r["ev"]) == len(g["t_events_ns"]):
            ttft_err.append(((r["ev"][0] - r["start"]) - (g["t_events_ns"][0] - g["t_recv_ns"])) / 1e6)
    t = np.asarray(ttft_err)
    res = {"mode": mode, "streams": n, "requests": len(doc["rows"]), "matched": int(t.size),
           "us_per_event": 1e6 * doc["cpu_s"] / max(1, events), "busy_pct": 100 * doc["cpu_s"] / doc["wall_s"],
           "ttft_err_median_ms": float(np.median(t)) if t.size else float("nan"),
           "ttft_err_p99_ms": float(np.percentile(t, 99)) if t.size else float("nan")}
    res.update(bv.fake_lag(truth))
    return res


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6] == "uvloop")
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="1024", help="comma-separated stream counts")
    ap.add_argument("--rounds", type=int, default=2, help="alternating A/B rounds per stream count")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the client's event loop")
    a = ap.parse_args()
    try:
        import httptools  # noqa: F401
    except ImportError:
        sys.exit("recv_path_ab: needs httptools (pip install 'phasescope[fast]')")
    print(f"{'streams':>7} {'variant':>9} {'CPU us/event':>12} {'core busy':>9} {'TTFT err med/p99 ms':>20} "
          f"{'fake lag p99':>12}")
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in a.streams.split(",")):
            for rnd in range(a.rounds):
                for mode in (("aiohttp", "raw") if rnd % 2 == 0 else ("raw", "aiohttp")):
                    r = measure(mode, n, Path(d), a.loop)
                    print(f"{n:>7} {mode:>9} {r['us_per_event']:>12.1f} {r['busy_pct']:>8.0f}% "
                          f"{r['ttft_err_median_ms']:>9.2f} / {r['ttft_err_p99_ms']:<8.2f} {r['fake_lag_p99_ms']:>12.2f}"
                          + ("" if r["matched"] >= 0.95 * r["requests"] else f"  (matched {r['matched']}/{r['requests']})"),
                          flush=True)


if __name__ == "__main__":
    main()
