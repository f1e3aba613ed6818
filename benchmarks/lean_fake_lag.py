"""Is the lean ground-truth fake ever the bottleneck? Its own write lag at N streams × 25 events/s.

Starts ``python -m phasescope.testing.lean_fake`` pinned to CPU 1 (TTFT 100 ms, 40 ms per token =
25 token events/s per stream) and drives it from this process, pinned to CPU 0, with a minimal raw
asyncio client: ``--streams`` keep-alive connections, each sending one streamed ``/v1/completions``
request after another (``--tokens`` tokens each), starts staggered over the first second, for
``--seconds``. The client only counts bytes and finds the end of each response; it times nothing.
The fake logs when each token event was due and when its write returned; the difference is its
**write lag**, printed as p50 / p99 / max (ms) for the whole run and for the steady state (after
the first two seconds). Goal (issue 22): p99 < 0.5 ms at 2,000 streams on one core.

Run: ``.venv/bin/python benchmarks/lean_fake_lag.py [--streams 2000] [--loop auto|asyncio|uvloop]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


class _Client(asyncio.Protocol):
    def __init__(self, host: str, port: int, tokens: int, until: float, done: asyncio.Future[None]) -> None:
        self.req = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                    "Content-Length: {n}\r\nX-Request-Id: lag-{i}\r\n\r\n{body}")
        self.body = json.dumps({"model": "fake-model", "prompt": "the quick brown fox", "max_tokens": tokens,
                                "stream": True, "ignore_eos": True})
        self.until, self.done, self.tail, self.i = until, done, b"", 0
        self.tr: asyncio.Transport | None = None
        self.responses = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        assert self.tr is not None
        self.i += 1
        self.tr.write(self.req.format(n=len(self.body), i=f"{id(self)}-{self.i}", body=self.body).encode())

    def data_received(self, data: bytes) -> None:
        s = self.tail + data
        if s.endswith(b"\r\n0\r\n\r\n"):
            self.responses += 1
            self.tail = b""
            if time.monotonic() < self.until:
                self.send()
            elif not self.done.done():
                self.done.set_result(None)
        else:
            self.tail = s[-16:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def drive(url: str, streams: int, tokens: int, seconds: float) -> int:
    host, port = url.rsplit("/", 1)[-1].split(":")
    loop = asyncio.get_running_loop()
    until = time.monotonic() + seconds
    clients, dones = [], []
    for k in range(streams):
        await asyncio.sleep(max(0.0, (k / streams) - (time.monotonic() - (until - seconds))))
        fut: asyncio.Future[None] = loop.create_future()
        _, c = await loop.create_connection(lambda f=fut: _Client(host, int(port), tokens, until, f), host, int(port))
        clients.append(c)
        dones.append(fut)
    await asyncio.wait_for(asyncio.gather(*dones), seconds + 30)
    return sum(c.responses for c in clients)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="the fake's event loop")
    ap.add_argument("--spin-ms", type=float, default=2.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * a.streams + 256)), hard))
    with tempfile.TemporaryDirectory(prefix="leanlag-") as d:
        log = Path(d) / "truth.jsonl"
        os.sched_setaffinity(0, {0})  # this process is the load client: CPU 0
        fake = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "phasescope.testing.lean_fake",
                                 "--ttft-ms", "100", "--itl-ms", "40", "--log", str(log), "--loop", a.loop,
                                 "--spin-ms", str(a.spin_ms)],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=_raise_nofile(a.streams))
        assert fake.stdout is not None
        url = fake.stdout.readline().split()[1]
        from phasescope.testing.lean_fake import loop_factory

        t0 = time.monotonic()
        with asyncio.Runner(loop_factory=loop_factory("auto")) as r:
            n = r.run(drive(url, a.streams, a.tokens, a.seconds))
        wall = time.monotonic() - t0
        fake.send_signal(signal.SIGTERM)
        out, _ = fake.communicate(timeout=30)
        lag_line = [ln for ln in out.splitlines() if ln.startswith("LAG")]
        ev_t, lags = [], []
        for ln in log.read_text().splitlines():
            g = json.loads(ln)
            for t, due in zip(g["t_events_ns"], g["t_due_ns"]):
                ev_t.append(t)
                lags.append(t - due)
    t_arr, l_arr = np.asarray(ev_t), np.asarray(lags) / 1e6
    steady = l_arr[t_arr >= t_arr.min() + 2e9] if t_arr.size else l_arr
    rate = len(steady) / max(1e-9, (t_arr.max() - (t_arr.min() + 2e9)) / 1e9) if steady.size else 0.0

    def q(a_: np.ndarray) -> str:
        return (f"p50 {np.percentile(a_, 50):.3f} / p99 {np.percentile(a_, 99):.3f} / max {a_.max():.3f} ms"
                if a_.size else "-")

    print(f"lean fake ({lag_line[0].split('loop=')[-1] if lag_line else '?'} loop, spin {a.spin_ms} ms, CPU 1) "
          f"at {a.streams} streams × 25 events/s, {a.seconds:g} s, {n} responses, {wall:.1f} s wall")
    print(f"  write lag, all {l_arr.size} events: {q(l_arr)}")
    print(f"  write lag, steady state (after 2 s, {steady.size} events, {rate:,.0f} events/s): {q(steady)}")
    ok = steady.size and float(np.percentile(steady, 99)) < 0.5
    print(f"  never the bottleneck (steady p99 < 0.5 ms): {'yes' if ok else 'NO'}")


def _raise_nofile(streams: int):  # type: ignore[no-untyped-def]
    def f() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * streams + 256)), hard))
    return f


if __name__ == "__main__":
    main()
