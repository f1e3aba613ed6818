"""What the host-contention sampler costs (phasescope.measure.host), printed, not asserted.

One /proc sample reads /proc/stat, /proc/loadavg and /proc/<pid>/stat of every process; the sampler
takes one every 0.5 s on a daemon thread, so its CPU time is part of the client's own. This prints the
CPU time and wall time of one sample, the number of processes read, and the share of one core the
sampler uses at the default interval.

    .venv/bin/python benchmarks/host_sampler_cost.py [N]
"""

from __future__ import annotations

import sys
import time

from phasescope.measure.host import INTERVAL_S, HostSampler


def main(n: int = 200) -> None:
    s = HostSampler(None, before_s=0)
    t_cpu, t_wall = time.process_time(), time.perf_counter()
    procs = 0
    for _ in range(n):
        smp = s._sample()
        procs = len(smp.procs) if smp else 0
    cpu = (time.process_time() - t_cpu) / n
    wall = (time.perf_counter() - t_wall) / n
    print(f"one sample: {cpu * 1e3:.2f} ms CPU, {wall * 1e3:.2f} ms wall, {procs} processes read")
    print(f"at one sample per {INTERVAL_S:g} s: {cpu / INTERVAL_S * 100:.2f} % of one core")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
