"""Does ``compare --fail-on worse`` pass two runs of the same server, and fail a real regression? (issue 29)

Starts the ground-truth fake (``python -m phasescope.testing``, vLLM flavour, fixed TTFT and ITL) on
127.0.0.1 in its own process, then, into a scratch store (``PHASESCOPE_STORE`` in a temporary folder):

1. ``--pairs`` times: two ``phasescope bench URL --trials 3 ... --json`` runs of that one server, one after
   the other, and ``phasescope compare A B --fail-on worse --json`` on them. On a quiet machine every pair
   must exit 0 (``pass``): run-level intervals across trials, and each metric's documented minimum effect
   (``report/compare.py`` ``MIN_EFFECT``: 5 % for medians and rates, 10 % for p99 tails).
2. one pair against a second fake whose ITL is doubled (the first run of this pair is on the normal fake):
   must exit 5 (``worse``) — or 6 (``inconclusive``) when the host load differed between the two runs.
3. with ``--burner``: one pair of the normal fake with a core kept busy 1 s on, 1 s off during the second
   run only: should exit 6 (the host load differs).

For each pair it prints the exit code, the gate's verdict, the host contention of both runs
(``host.during.other_cpu_share``), and every gated metric's change with its verdict; then the tally of exit
codes. Exit codes (README): 0 pass, 5 worse, 6 inconclusive. Loopback only; bounded: each bench sends
``-n`` requests per trial (default 60 × 16 tokens at concurrency 4, about 3 s a trial; 60 samples per trial
so that a p99 is not one request's luck; at concurrency 8 a busy host's lag moved the median TTFT of the
20 ms fake by up to 15 % between runs, at 4 by up to 3 %), every command has a timeout, and the fakes and
the burner are stopped by their own process ids.

Run: ``.venv/bin/python benchmarks/gate_repeat.py [--pairs 10] [--burner] [--no-doubled] [--verbose] [--keep DIR]``
(``--verbose``: each run's per-trial median TTFT and ITL and load average; ``--keep``: the store to look into after).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BURNER = "import time\nwhile 1:\n t=time.time()\n while time.time()-t<1: pass\n time.sleep(1)"
SHORT = {"ttft_s": "ttft", "ttft_p99_s": "ttft99", "prefill_tok_s": "prefill", "decode_tok_s": "decode",
         "tpot_s": "tpot", "itl_p50_s": "itl", "itl_p99_s": "itl99", "e2e_s": "e2e", "throughput_tok_s": "thru"}
MARK = {"better": "+", "worse": "W", "within noise": "=", "not comparable": "nc", "too few samples": "few"}


class Fake:
    """``python -m phasescope.testing`` in its own process; stopped by its pid."""

    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "phasescope.testing", "--flavor", "vllm", "--ttft-ms", str(ttft_ms),
             "--itl-ms", str(itl_ms)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # "READY http://127.0.0.1:PORT"
        if not line.startswith("READY "):
            self.stop()
            raise SystemExit(f"gate_repeat: the fake did not start ({line!r})")
        self.url = line.split()[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def phasescope(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, dict[str, Any], str]:
    p = subprocess.run([sys.executable, "-m", "phasescope", *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {}
    return p.returncode, doc, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""


def bench(url: str, a: argparse.Namespace, env: dict[str, str], burner: bool = False) -> dict[str, Any]:
    args = ["bench", url, "--trials", str(a.trials), "-n", str(a.n), "-c", str(a.c), "--input-len", "64",
            "--output-len", str(a.output_len), "--metrics-interval", "0.5", "--json"]
    burn = subprocess.Popen([sys.executable, "-c", BURNER]) if burner else None
    try:
        code, doc, err = phasescope(args, env, a.timeout)
    finally:
        if burn is not None:
            burn.terminate()
            burn.wait(10)
    if code != 0 or "run_id" not in doc:
        raise SystemExit(f"gate_repeat: bench exited {code}: {err}")
    return doc


def host_share(doc: dict[str, Any]) -> str:
    def one(d: dict[str, Any]) -> float | None:
        h = d.get("host") or {}
        return (h.get("during") or {}).get("other_cpu_share")

    shares = [s for s in [one(doc)] + [one(t) for t in doc.get("trials") or []] if isinstance(s, (int, float))]
    return f"{max(shares) * 100:.0f}%" if shares else "?"


def pair(label: str, url_a: str, url_b: str, a: argparse.Namespace, env: dict[str, str],
         burner: bool = False) -> int:
    t0 = time.monotonic()
    ra = bench(url_a, a, env)
    rb = bench(url_b, a, env, burner=burner)
    code, cmp, err = phasescope(["compare", ra["run_id"], rb["run_id"], "--fail-on", "worse", "--json"], env,
                                a.timeout)
    gate = cmp.get("gate") or {}
    rows = []
    for m in cmp.get("metrics") or []:
        if m.get("group"):
            continue
        ch = m.get("change")
        tag = MARK.get(m.get("verdict"), m.get("verdict"))
        if m.get("unstable"):
            tag += "!"
        rows.append(f"{SHORT.get(m['metric'], m['metric'])} {'?' if ch is None else format(ch * 100, '+.1f')}%{tag}")
    open_ = gate.get("inconclusive") or []
    why = (f"{open_[0]['metric']}: {open_[0]['why'][:150]}"
           + (f" (also: {', '.join(x['metric'] for x in open_[1:])})" if len(open_) > 1 else "")) if open_ else ""
    print(f"{label:>9} {code:>4} {gate.get('verdict', err[:20] or '?'):>12} {host_share(ra):>6} {host_share(rb):>6} "
          f"{time.monotonic() - t0:5.0f}s  {' '.join(rows)}", flush=True)
    if a.verbose:
        for name, r in (("A", ra), ("B", rb)):
            ts = r.get("trials") or []
            print(f"{'':>9}      {name} {r['run_id']}: median TTFT per trial "
                  + ", ".join(f"{t.get('median_ttft_ms', 0):.1f}" for t in ts) + " ms; ITL "
                  + ", ".join(f"{t.get('median_itl_ms', 0):.2f}" for t in ts) + " ms; load avg "
                  + ", ".join(str((t.get("host") or {}).get("loadavg_1m_max", "?")) for t in ts), flush=True)
    if gate.get("worse"):
        print(f"{'':>9}      worse: {', '.join(gate['worse'])}", flush=True)
    if why:
        print(f"{'':>9}      why: {why}", flush=True)
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="pairs of runs of the same server (default 10)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("-n", type=int, default=60, help="requests per trial (default 60)")
    ap.add_argument("-c", type=int, default=4, help="concurrency (default 4)")
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--no-doubled", action="store_true", help="skip the pair against a fake with doubled ITL")
    ap.add_argument("--burner", action="store_true", help="add one pair with a 1 s on / 1 s off burner in run B")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds allowed per phasescope command")
    ap.add_argument("--keep", default=None, help="keep the runs in this store (default: a temporary one)")
    ap.add_argument("--verbose", action="store_true", help="print each run's per-trial medians and load average")
    a = ap.parse_args()
    if not 1 <= a.pairs <= 50 or not 1 <= a.n <= 1000 or not 2 <= a.trials <= 10:
        raise SystemExit("gate_repeat: --pairs 1..50, -n 1..1000, --trials 2..10")
    tally: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory(prefix="phasescope-gate-") as tmp:
        store = Path(a.keep).resolve() if a.keep else Path(tmp) / "store"
        env = dict(os.environ, PHASESCOPE_STORE=str(store), PHASESCOPE_HOME=str(Path(tmp) / "home"))
        fake = Fake(a.ttft_ms, a.itl_ms)
        slow = None
        try:
            print(f"fake {fake.url}: vLLM flavour, TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; each run: bench "
                  f"--trials {a.trials} -n {a.n} -c {a.c} --output-len {a.output_len}")
            print("changes B vs A (+better, =within noise, W worse, nc not comparable, ! unstable); host = other "
                  "work's share of the cores, the busiest of the run's trials")
            print(f"{'pair':>9} {'exit':>4} {'verdict':>12} {'hostA':>6} {'hostB':>6} {'time':>6}  gated metrics")
            for i in range(1, a.pairs + 1):
                tally["same server"][pair(f"same {i}", fake.url, fake.url, a, env)] += 1
            if not a.no_doubled:
                slow = Fake(a.ttft_ms, 2 * a.itl_ms)
                tally["ITL doubled"][pair("ITL x2", fake.url, slow.url, a, env)] += 1
            if a.burner:
                tally["burner in B"][pair("burner B", fake.url, fake.url, a, env, burner=True)] += 1
        finally:
            fake.stop()
            if slow is not None:
                slow.stop()
    print("exit codes (0 pass, 5 worse, 6 inconclusive):")
    for what, c in tally.items():
        print(f"  {what}: " + ", ".join(f"{code}: {k}" for code, k in sorted(c.items())))
    same = tally["same server"]
    print(f"same-server pairs passing: {same.get(0, 0)} of {sum(same.values())}")


if __name__ == "__main__":
    main()
