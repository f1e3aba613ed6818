"""Measure this machine: sustained memory read bandwidth with all cores, and matmul throughput.

Not pure (it runs kernels and reads /proc); the result becomes the catalog device ``local``
(:func:`phasescope.theory.devices.save_local_device`), so ``phasescope ceiling --device local`` gives the
CPU row for *this* box.

Bandwidth — a STREAM-like read kernel (McCalpin's STREAM measures sustained bandwidth the same way: arrays
far larger than the caches, best of several timed passes):

* ``c-threads``: when a C compiler (``cc``) is present, a ~40-line C helper compiled at run time sums a
  ``size`` byte array of doubles with one pthread per core, 4 independent accumulators per thread;
* ``numpy-threads``: otherwise (and always as a cross-check) one Python thread per core runs
  ``numpy.sum`` over its contiguous chunk (numpy releases the GIL inside the reduction).

Each pass reads every byte once; bandwidth = bytes / wall time of the slowest thread (all threads start
together). As STREAM does, the saved figure is the *best* pass of the best method (other processes only
ever slow a pass down); the median and the spreads (below) are reported next to it.

Matmul — ``numpy`` float32 GEMM (``n×n @ n×n`` = 2·n³ FLOP) through the BLAS numpy links to, all cores;
reported as GFLOP/s (best of several runs; median and spread alongside).

Saving — never noise (issue 29). The saved figure moves every ceiling, efficiency and ``tune`` sentence
that uses ``local``, so it is saved only when the measurement can be trusted:

* the bandwidth passes agree: the *fastest majority* of them (the fastest ⌊n/2⌋ + 1 of n passes,
  :func:`fastest_majority`) spread ``(max − min) / median`` at most :data:`STABLE_SPREAD` (15 %). The
  saved figure is the best pass, so what must hold is that most passes reach it; the range of *all* passes
  (``spread_all``, still reported) is not the rule, because max − min over n passes grows with n — one
  pass that something slowed is enough, and the more passes, the surer one is — so a rule on it refused
  more the more passes it took, and never saved a quiet machine whose tenth pass straggled. A majority
  keeps a machine that slows half its passes (a burner 1 s on, 1 s off) from passing; and other work
  did not take the cores while they ran (the run is sampled with
  :class:`~phasescope.measure.host.HostSampler` and judged with the stricter thresholds of a measurement
  that uses every core: 15 % on average, 30 % in the worst 1-second windows);
* and it is not worse than a stable profile already saved: not noisier (a larger spread) and its best pass
  not more than :data:`SLOWER_BY` (15 %) below the saved one's (other work only ever slows a pass, so a
  slower best is the suspect one);

or with ``--force``, which still says what it replaced. :func:`decide` is that rule; the profile
(:class:`Profile`: when, best, median, spread, passes) is stored beside the device, and
:func:`local_profile_note` is the sentence every card that uses ``local`` prints (when it was measured and
its spread).

Compute peaks of ``local`` — a ceiling must not sit below what an engine achieves, and llama.cpp's quantized
CPU kernels (int8 dot products on Q8 activations) beat a float32 GEMM, so the saved peaks are derived the way
the catalog's CPU rows are (``hardware.csv``: cores × FLOP/cycle × clock; FP32 FLOP/cycle 64 with AVX-512F,
32 with AVX2+FMA, 16 with AVX/NEON; BF16 ×2 with AVX512_BF16/AMX; INT8 ×4 with VNNI, ×2 with AVX2) and never
below the measured GEMM. The measured GEMM is kept next to them.

One job: a measurement of this machine that may become ``local`` — the kernels, the profile of their
passes, the rule that decides whether it is saved, and the sentence that names it read the same passes.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from phasescope.errors import InputError
from phasescope.measure.interval import Interval, median_interval
from phasescope.theory.devices import LOCAL_DEVICE_ID, Device

#: the bandwidth passes agree when the fastest majority's (max − min) / median is at most this (relative)
STABLE_SPREAD = 0.15
#: a new best pass this much below a stable saved profile's was slowed by something (noise only slows)
SLOWER_BY = 0.15
#: other work allowed beside hw (it uses every core, like a server on this machine): average, worst 1 s windows
HW_BUSY_SHARE = 0.15
HW_BURST_SHARE = 0.30

_C_SOURCE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef struct { const double *p; size_t n; double s; } job_t;
static pthread_barrier_t bar;
static void *run(void *a) {
    job_t *j = (job_t *)a; const double *p = j->p; size_t n = j->n, i;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    pthread_barrier_wait(&bar);
    for (i = 0; i + 4 <= n; i += 4) { s0 += p[i]; s1 += p[i+1]; s2 += p[i+2]; s3 += p[i+3]; }
    for (; i < n; i++) s0 += p[i];
    j->s = s0 + s1 + s2 + s3;
    pthread_barrier_wait(&bar);
    return 0;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    size_t bytes = strtoull(argv[1], 0, 10); int nt = atoi(argv[2]); int reps = atoi(argv[3]);
    size_t n = bytes / sizeof(double), per = n / nt; int r, t;
    double *a = malloc(n * sizeof(double)); if (!a) return 2;
    for (size_t i = 0; i < n; i++) a[i] = (double)(i & 1023);
    pthread_t *th = malloc(sizeof(pthread_t) * nt); job_t *jobs = malloc(sizeof(job_t) * nt);
    pthread_barrier_init(&bar, 0, nt + 1);
    double check = 0;
    for (r = 0; r < reps; r++) {
        for (t = 0; t < nt; t++) { jobs[t].p = a + per * t; jobs[t].n = per; pthread_create(&th[t], 0, run, &jobs[t]); }
        pthread_barrier_wait(&bar); double t0 = now();
        pthread_barrier_wait(&bar); double t1 = now();
        for (t = 0; t < nt; t++) { pthread_join(th[t], 0); check += jobs[t].s; }
        printf("%.9f\n", t1 - t0);
    }
    fprintf(stderr, "checksum %g\n", check);
    return 0;
}
"""


@dataclass(frozen=True)
class BandwidthResult:
    method: str
    threads: int
    array_bytes: int
    runs_gb_s: list[float]
    best_gb_s: float
    median_gb_s: float
    min_gb_s: float
    max_gb_s: float
    spread_pct: float  # (max − min) / median × 100


@dataclass(frozen=True)
class MatmulResult:
    n: int
    dtype: str
    threads: int
    runs_gflop_s: list[float]
    best_gflop_s: float
    median_gflop_s: float
    min_gflop_s: float
    max_gflop_s: float
    spread_pct: float


@dataclass(frozen=True)
class DerivedPeaks:
    """Theoretical CPU peaks from flags, core count and clock (``[derived]`` like hardware.csv's CPU rows)."""

    cores: int
    ghz: float
    fp32_flop_per_cycle: int
    fp32_tflops: float
    bf16_tflops: float
    int8_tops: float
    flags: list[str]


@dataclass(frozen=True)
class HwResult:
    cpu: str
    cores: int
    memory_gb: float | None
    bandwidth: BandwidthResult
    bandwidth_other: list[BandwidthResult] = field(default_factory=list)
    matmul: MatmulResult | None = None
    derived: DerivedPeaks | None = None
    #: every round of bandwidth passes tried (:func:`measure`): round, method, best, median, spread (relative)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summary(values: list[float]) -> tuple[float, float, float, float]:
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return med, lo, hi, (hi - lo) / med * 100 if med > 0 else 0.0


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux) or platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> set[str]:
    """CPU feature flags (Linux /proc/cpuinfo ``flags``/``Features``); empty when unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key = line.split(":", 1)[0].strip().lower()
            if key in ("flags", "features"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_ghz() -> float | None:
    """Maximum core clock in GHz: cpufreq ``cpuinfo_max_freq`` when present, else /proc/cpuinfo ``cpu MHz``."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        mhz = [float(line.split(":", 1)[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.lower().startswith("cpu mhz")]
        return max(mhz) / 1000 if mhz else None
    except (OSError, ValueError):
        return None


def derived_peaks(cores: int, ghz: float | None, flags: set[str], machine: str | None = None) -> DerivedPeaks | None:
    """Theoretical peaks: FP32 = cores × FLOP/cycle × GHz (64 AVX-512F, 32 AVX2+FMA, 16 AVX or ARM NEON/asimd,
    8 otherwise); BF16 ×2 with avx512_bf16/amx_bf16; INT8 ×4 with avx512_vnni/avx_vnni, ×2 with AVX2/asimddp."""
    if not ghz:
        return None
    machine = machine or platform.machine()
    if "avx512f" in flags:
        fpc = 64
    elif "avx2" in flags and "fma" in flags:
        fpc = 32
    elif "avx" in flags or "asimd" in flags or machine in ("arm64", "aarch64"):
        fpc = 16
    else:
        fpc = 8
    fp32 = cores * fpc * ghz / 1000
    bf16 = fp32 * (2 if flags & {"avx512_bf16", "amx_bf16", "bf16"} else 1)
    if flags & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        int8 = fp32 * 4
    elif flags & {"avx2", "asimddp"}:
        int8 = fp32 * 2
    else:
        int8 = fp32
    used = sorted(flags & {"avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni",
                           "amx_int8", "asimd", "asimddp", "bf16"})
    return DerivedPeaks(cores, round(ghz, 3), fpc, fp32, bf16, int8, used)


def total_memory_gb() -> float | None:
    """Physical memory in GB (1e9 B), via sysconf; None when unavailable."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def bandwidth_numpy(size_bytes: int, threads: int, repeats: int) -> BandwidthResult:
    """``numpy.sum`` over per-thread chunks of one float64 array, all threads released together."""
    n = size_bytes // 8
    a = np.ones(n, dtype=np.float64)  # touched: pages are really allocated
    chunks = np.array_split(a, threads)
    runs: list[float] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for chunk in chunks:  # warm-up pass (page faults, thread start)
            pool.submit(np.sum, chunk).result()
        for _ in range(repeats):
            barrier = threading.Barrier(threads + 1)

            def work(c: np.ndarray) -> float:
                barrier.wait()  # noqa: B023 (this iteration's barrier: its futures finish before the next)
                return float(np.sum(c))

            futs = [pool.submit(work, c) for c in chunks]
            barrier.wait()
            t0 = time.perf_counter()
            for f in futs:
                f.result()
            dt = time.perf_counter() - t0
            runs.append(a.nbytes / dt / 1e9)
    med, lo, hi, spread = _summary(runs)
    return BandwidthResult("numpy-threads", threads, int(a.nbytes), runs, hi, med, lo, hi, spread)


def bandwidth_c(size_bytes: int, threads: int, repeats: int, cc: str | None = None) -> BandwidthResult | None:
    """The pthread C helper (compiled at run time with ``cc -O2``); None when no compiler works."""
    cc = cc or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    with tempfile.TemporaryDirectory(prefix="phasescope-hw-") as tmp:
        src = Path(tmp) / "bw.c"
        exe = Path(tmp) / "bw"
        src.write_text(_C_SOURCE)
        try:
            subprocess.run([cc, "-O2", "-o", str(exe), str(src), "-lpthread"], check=True,
                           capture_output=True, timeout=60)
            out = subprocess.run([str(exe), str(size_bytes), str(threads), str(repeats + 1)], check=True,
                                 capture_output=True, text=True, timeout=600)
        except (subprocess.SubprocessError, OSError):
            return None
    times = [float(x) for x in out.stdout.split()]
    if len(times) < 2:
        return None
    per = (size_bytes // 8) // threads * threads * 8
    runs = [per / t / 1e9 for t in times[1:] if t > 0]  # first pass = warm-up
    if not runs:
        return None
    med, lo, hi, spread = _summary(runs)
    return BandwidthResult("c-threads", threads, per, runs, hi, med, lo, hi, spread)


def matmul_gflops(n: int = 2048, repeats: int = 5) -> MatmulResult:
    """float32 GEMM throughput: ``2·n³ / t`` per run (numpy's BLAS, all its threads)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up (BLAS thread pool start)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        runs.append(2.0 * n**3 / (time.perf_counter() - t0) / 1e9)
    med, lo, hi, spread = _summary(runs)
    return MatmulResult(n, "float32", usable_cores(), runs, hi, med, lo, hi, spread)


def fastest_majority(runs: list[float]) -> list[float]:
    """The fastest ⌊n/2⌋ + 1 of n passes, fastest first (both of two): the passes the rule judges. The saved
    figure is the best pass; it stands when most passes reach it, whatever slowed the others."""
    return sorted(runs, reverse=True)[: len(runs) // 2 + 1]


def _rel_spread(values: list[float]) -> float | None:
    """(max − min) / median, relative; None for fewer than two values."""
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else None


def pass_spreads(runs: list[float]) -> tuple[float | None, float | None]:
    """(``spread``: of the fastest majority — the rule; ``spread_all``: of every pass), relative; None for
    one pass."""
    return _rel_spread(fastest_majority(runs)), _rel_spread(list(runs))


def _spread(bw: BandwidthResult) -> float | None:
    """The rule's spread of a kernel's passes (:func:`pass_spreads`)."""
    return pass_spreads(bw.runs_gb_s)[0]


def measure(
    *,
    size_mb: int = 1024,
    repeats: int = 10,
    threads: int | None = None,
    matmul_n: int = 2048,
    use_c: bool = True,
    rounds: int = 3,
) -> HwResult:
    """Run both bandwidth kernels (C when a compiler exists) and the GEMM; the best pass of the best method wins.

    A round is ``repeats`` passes of each kernel. When the winning kernel's passes disagree (spread above
    :data:`STABLE_SPREAD`), up to ``rounds`` rounds are run in all, looking for a stretch quiet enough for
    them to agree; the first round that agrees is kept, else the one whose passes spread least (and it is
    not saved). Every round tried is listed in ``rounds``."""
    if size_mb < 1 or repeats < 1 or matmul_n < 16 or rounds < 1:
        raise InputError("hw: --size-mb, --repeats, --rounds must be >= 1 and --matmul-n >= 16")
    threads = threads or usable_cores()
    size = size_mb * 1024 * 1024
    tried: list[list[BandwidthResult]] = []
    log: list[dict[str, Any]] = []
    for i in range(rounds):
        results = [bandwidth_numpy(size, threads, repeats)]
        if use_c:
            c = bandwidth_c(size, threads, repeats)
            if c is not None:
                results.append(c)
        results.sort(key=lambda r: r.best_gb_s, reverse=True)
        sp = _spread(results[0])
        tried.append(results)
        log.append({"round": i + 1, "method": results[0].method, "best_gb_s": results[0].best_gb_s,
                    "median_gb_s": results[0].median_gb_s, "spread": sp,
                    "spread_all": pass_spreads(results[0].runs_gb_s)[1]})
        if sp is None or sp <= STABLE_SPREAD:
            break
    pick = next((j for j, r in enumerate(log) if r["spread"] is not None and r["spread"] <= STABLE_SPREAD),
                min(range(len(log)), key=lambda j: log[j]["spread"] if log[j]["spread"] is not None else float("inf")))
    log[pick]["kept"] = True
    results = tried[pick]
    mm = matmul_gflops(matmul_n, repeats) if matmul_n else None
    return HwResult(
        cpu=cpu_name(),
        cores=threads,
        memory_gb=total_memory_gb(),
        bandwidth=results[0],
        bandwidth_other=results[1:],
        matmul=mm,
        derived=derived_peaks(usable_cores(), cpu_ghz(), cpu_flags()),
        rounds=log,
    )


def measure_sampled(**kwargs: Any) -> tuple[HwResult, dict[str, Any]]:
    """:func:`measure` with the host sampled while it runs (other work slows every pass): (result, ``host``)."""
    from phasescope.measure.host import HostSampler

    sampler = HostSampler(None).start()
    try:
        result = measure(**kwargs)
    finally:
        host = sampler.stop()
    return result, host


def to_device(result: HwResult) -> Device:
    """The measured machine as the catalog device ``local`` (source text says how it was measured)."""
    bw = result.bandwidth
    measured = result.matmul.best_gflop_s / 1000 if result.matmul else None
    der = result.derived

    def peak(derived: float | None) -> float | None:
        vals = [v for v in (derived, measured) if v]
        return max(vals) if vals else None
    parts = [
        f"measured by `phasescope hw` on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: memory read bandwidth "
        f"{bw.best_gb_s:.1f} GB/s = best of {len(bw.runs_gb_s)} passes over a {bw.array_bytes / 2**30:.2f} GiB "
        f"array ({bw.method}, {bw.threads} threads; median {bw.median_gb_s:.1f}, min {bw.min_gb_s:.1f}, "
        f"spread {bw.spread_pct:.0f}%)",
    ]
    for other in result.bandwidth_other:
        parts.append(f"cross-check {other.method}: best {other.best_gb_s:.1f}, median {other.median_gb_s:.1f} GB/s")
    if result.matmul:
        m = result.matmul
        parts.append(
            f"matmul {m.best_gflop_s:.1f} GFLOP/s = best of {len(m.runs_gflop_s)} numpy float32 "
            f"{m.n}x{m.n} GEMMs (median {m.median_gflop_s:.1f}, spread {m.spread_pct:.0f}%)"
        )
    if der:
        parts.append(
            f"compute peaks [derived, as hardware.csv CPU rows]: {der.cores} cores x {der.fp32_flop_per_cycle} FP32 "
            f"FLOP/cycle x {der.ghz:.2f} GHz = {der.fp32_tflops * 1000:.0f} GFLOP/s FP32, BF16 {der.bf16_tflops * 1000:.0f}, "
            f"INT8 {der.int8_tops * 1000:.0f} GOPS (flags: {', '.join(der.flags) or 'none'}); never below the measured GEMM"
        )
    return Device(
        id=LOCAL_DEVICE_ID,
        name=f"this machine: {result.cpu} ({result.cores} cores)",
        vendor="local",
        kind="local",
        memory_gb=round(result.memory_gb, 2) if result.memory_gb else None,
        mem_bandwidth_gb_s=round(bw.best_gb_s, 2),
        dense_bf16_tflops=peak(der.bf16_tflops if der else None),
        dense_fp8_tflops=None,
        dense_int8_tops=peak(der.int8_tops if der else None),
        fp32_tflops=peak(der.fp32_tflops if der else None),
        interconnect=None,
        interconnect_gb_s=None,
        tdp_w=None,
        source="; ".join(parts),
        bw_median_gb_s=round(bw.median_gb_s, 2),
        gemm_median_tflops=round(result.matmul.median_gflop_s / 1000, 4) if result.matmul else None,
    )


# --- the profile: when, how well, and whether to save it ---------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """How trustworthy a bandwidth measurement of this machine is: when it was taken, its best, median,
    min and max pass, the relative ``spread`` ((max − min) / median) of its fastest ``spread_of`` passes
    (the rule, :func:`fastest_majority`) and ``spread_all`` of every pass, and whether it was ``stable``
    (passes agree and the host was quiet) or saved with ``--force``. A profile saved before the rule judged
    the fastest majority has no ``spread_of``: its ``spread`` is of all its passes (read into both)."""

    measured_at: str  # ISO 8601 UTC, e.g. 2026-12-04T19:30:00Z
    bandwidth_gb_s: float  # the best pass (the saved figure)
    median_gb_s: float
    min_gb_s: float
    max_gb_s: float
    passes: int
    spread: float | None  # None: one pass shows no spread
    method: str
    stable: bool
    forced: bool = False
    host_other_cpu_share: float | None = None
    host_worst_1s_other_cpu_share: float | None = None
    #: why it is not stable (passes disagree / host busy), None when stable
    unstable_because: str | None = None
    #: where measured_at came from: "measured" (this profile) or "file time" (an older local_device.json)
    measured_at_source: str = "measured"
    #: rounds of passes tried before these (1: the first agreed, or only one was run)
    rounds: int = 1
    #: (max − min) / median of every pass (``spread`` is of the fastest ``spread_of``)
    spread_all: float | None = None
    spread_of: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Profile":
        names = {f for f in cls.__dataclass_fields__}  # type: ignore[attr-defined]
        kw = {k: v for k, v in d.items() if k in names}
        if "spread_of" not in d:  # saved before the fastest-majority rule: its spread is of every pass
            kw.update(spread_all=d.get("spread"), spread_of=d.get("passes"))
        return cls(**kw)

    @property
    def when(self) -> str:
        """``2026-12-04 19:30 UTC``"""
        return self.measured_at.replace("T", " ")[:16] + " UTC"


def bandwidth_interval(bw: BandwidthResult) -> Interval | None:
    """The median of the passes with its 95 % interval (and min/max), for the console and ``--json``."""
    return median_interval(bw.runs_gb_s)


def _now_iso(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def host_verdict(host: dict[str, Any] | None) -> str | None:
    """Why the host was too busy for hw (it uses every core), or None when quiet or not measured."""
    if not host or not host.get("available") or not host.get("during"):
        return None
    share = host["during"].get("other_cpu_share") or 0.0
    burst = host.get("worst_1s_other_cpu_share")
    parts = []
    if share > HW_BUSY_SHARE:
        parts.append(f"{share * 100:.0f} % of the cores on average (more than {HW_BUSY_SHARE * 100:.0f} %)")
    if isinstance(burst, (int, float)) and burst > HW_BURST_SHARE:
        parts.append(f"{burst * 100:.0f} % in its worst 1-second windows (more than {HW_BURST_SHARE * 100:.0f} %)")
    if not parts:
        return None
    tops = [t for t in host["during"].get("top_other") or [] if (t.get("cpu_share") or 0) >= 0.01]
    named = f"; busiest: {', '.join(t['comm'] + ' (' + format(t['cpu_share'] * 100, '.0f') + ' %)' for t in tops)}" \
        if tops else ""
    return "other work took " + " and ".join(parts) + " while hw measured" + named


def profile_of(result: HwResult, host: dict[str, Any] | None = None, *, forced: bool = False,
               now: float | None = None) -> Profile:
    """The profile of a measurement: its bandwidth passes' best, median, spread, and stability."""
    bw = result.bandwidth
    med = bw.median_gb_s
    n = len(bw.runs_gb_s)
    fast = fastest_majority(bw.runs_gb_s)
    spread, spread_all = pass_spreads(bw.runs_gb_s)
    why = []
    if spread is None:
        why.append(f"one pass cannot show a spread (--repeats {n}; use at least 3)")
    elif spread > STABLE_SPREAD:
        tried = (f" in each of {len(result.rounds)} rounds (spreads "
                 + ", ".join(_pct(r.get("spread")) for r in result.rounds) + "; the least spread is shown)"
                 if len(result.rounds) > 1 else "")
        why.append(f"the passes disagree: the fastest {len(fast)} of {n} spread {spread * 100:.0f} % of their median "
                   f"(best {bw.best_gb_s:.1f}, slowest of them {fast[-1]:.1f} GB/s; all {n}: median {med:.1f}, "
                   f"min {bw.min_gb_s:.1f} GB/s, spread {_pct(spread_all)}; hw accepts {STABLE_SPREAD * 100:.0f} % "
                   f"for the fastest {len(fast)}){tried}")
    busy = host_verdict(host)
    if busy:
        why.append(busy)
    during = (host or {}).get("during") or {}
    return Profile(measured_at=_now_iso(now), bandwidth_gb_s=bw.best_gb_s, median_gb_s=med, min_gb_s=bw.min_gb_s,
                   max_gb_s=bw.max_gb_s, passes=n, spread=spread, spread_all=spread_all, spread_of=len(fast),
                   method=bw.method, stable=not why, forced=forced,
                   host_other_cpu_share=during.get("other_cpu_share"),
                   host_worst_1s_other_cpu_share=(host or {}).get("worst_1s_other_cpu_share"),
                   unstable_because="; ".join(why) or None, rounds=max(1, len(result.rounds)))


def load_profile(path: Path | None = None) -> Profile | None:
    """The profile of the saved ``local`` device; for a file saved before profiles existed, rebuilt from
    its stored passes with the file's modification time as ``measured_at``. None when nothing is saved."""
    import json

    from phasescope.theory.devices import local_device_path

    path = path or local_device_path()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    m = doc.get("measurement") or {}
    try:
        if isinstance(m.get("profile"), dict):
            return Profile.from_dict(m["profile"])
        bw = m.get("bandwidth") or {}
        runs = [float(x) for x in bw.get("runs_gb_s") or []]
        if not runs:
            return None
        med = statistics.median(runs)
        spread, spread_all = pass_spreads(runs)
        ok = spread is not None and spread <= STABLE_SPREAD
        k = len(fastest_majority(runs))
        return Profile(measured_at=_now_iso(path.stat().st_mtime), bandwidth_gb_s=max(runs), median_gb_s=med,
                       min_gb_s=min(runs), max_gb_s=max(runs), passes=len(runs), spread=spread,
                       spread_all=spread_all, spread_of=k, method=str(bw.get("method") or "?"), stable=ok,
                       unstable_because=None if ok else
                       f"the passes disagree: the fastest {k} of {len(runs)} spread {_pct(spread)} of their median",
                       measured_at_source="file time")
    except (TypeError, ValueError, OSError):
        return None


@dataclass(frozen=True)
class Decision:
    save: bool
    #: why it was not saved (None when saved)
    reason: str | None
    #: what happened, in one sentence (replaced / kept / first profile / forced)
    note: str


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{x * 100:.0f} %"


def _sp(x: float | None) -> float:
    return float("inf") if x is None else x


def spread_words(p: Profile) -> str:
    """``the fastest 6 spread 2 % (all 10: 17 %)``, or ``spread 4 %`` for a profile whose spread is of
    every pass (saved before the fastest-majority rule, or all of its passes judged)."""
    if p.spread_of is None or p.spread_of >= p.passes:
        return f"spread {_pct(p.spread)}"
    return f"the fastest {p.spread_of} spread {_pct(p.spread)} (all {p.passes}: {_pct(p.spread_all)})"


def describe(p: Profile) -> str:
    """``27.3 GB/s (best of 10 passes, median 25.1, the fastest 6 spread 2 % (all 10: 9 %)), measured
    2026-12-04 19:30 UTC``"""
    return (f"{p.bandwidth_gb_s:.1f} GB/s (best of {p.passes} passes, median {p.median_gb_s:.1f}, "
            f"{spread_words(p)}), measured {p.when}")


def decide(new: Profile, old: Profile | None, *, force: bool = False) -> Decision:
    """Save ``new`` as ``local``? (module docstring: only when stable and not worse than a stable ``old``,
    or with ``force``, which still says what it replaces)."""
    old_stable = old is not None and old.stable and not old.forced
    worse = []
    if old_stable and _sp(new.spread) > _sp(old.spread):
        worse.append(f"its fastest passes spread {_pct(new.spread)}, more than the saved profile's {_pct(old.spread)}")
    if old_stable and new.bandwidth_gb_s < (1 - SLOWER_BY) * old.bandwidth_gb_s:
        slower = 1 - new.bandwidth_gb_s / old.bandwidth_gb_s
        worse.append(f"its best pass ({new.bandwidth_gb_s:.1f} GB/s) is {slower * 100:.0f} % "
                     f"below the saved one's ({old.bandwidth_gb_s:.1f} GB/s), and other work only ever slows a pass")
    if force:
        if old is None:
            return Decision(True, None,
                            "saved (--force)" + (f" although {new.unstable_because}" if not new.stable else ""))
        if old_stable and (not new.stable or worse):
            what = new.unstable_because if not new.stable else "; ".join(worse)
            return Decision(True, None,
                            f"--force: replaced a stable profile ({describe(old)}) with a noisier one: {what}")
        return Decision(True, None, f"--force: replaced the saved profile ({describe(old)})")
    kept = f"; the saved profile is kept ({describe(old)})" if old is not None else "; nothing is saved"
    if not new.stable:
        return Decision(False, f"{new.unstable_because}{kept}", "not saved")
    if worse:
        return Decision(False, "this measurement is noisier than the saved one: " + "; ".join(worse) + kept,
                        "not saved")
    if old is None:
        return Decision(True, None, "saved: the passes agree")
    return Decision(True, None, f"saved: the passes agree; replaced the saved profile ({describe(old)})")


def profile_sentence(p: Profile, *, now: float | None = None) -> str:
    """```local` measured 2026-12-04 19:30 UTC, 3 h ago: 27.3 GB/s, best of 10 passes, the fastest 6 spread
    2 % (all 10: 9 %)`` (+ that it was forced or its passes disagreed)."""
    import calendar

    age = ""
    try:
        t = calendar.timegm(time.strptime(p.measured_at, "%Y-%m-%dT%H:%M:%SZ"))
        d = (time.time() if now is None else now) - t
        if d >= 0:
            age = (f", {d / 86400:.0f} d ago" if d >= 2 * 86400 else f", {d / 3600:.0f} h ago" if d >= 2 * 3600
                   else f", {d / 60:.0f} min ago")
    except (ValueError, OverflowError):
        pass
    s = (f"`local` measured {p.when}{age}" + (" (file time)" if p.measured_at_source == "file time" else "")
         + f": {p.bandwidth_gb_s:.1f} GB/s, best of {p.passes} passes, {spread_words(p)}")
    if not p.stable:
        s += " — " + ("saved with --force although " if p.forced else "") + (p.unstable_because or "unstable")
    return s


def local_profile_note(device: Any) -> str:
    """The sentence a card adds where it names the device: when ``local`` was measured and its spread
    (from the run's stored ``profile`` when it has one, else the saved file). "" for any other device."""
    dev_id = device.get("id") if isinstance(device, dict) else getattr(device, "id", None)
    if dev_id != LOCAL_DEVICE_ID:
        return ""
    prof = device.get("profile") if isinstance(device, dict) else None
    p = Profile.from_dict(prof) if isinstance(prof, dict) else load_profile()
    return f" {profile_sentence(p)}." if p is not None else ""


def profile_for(device: Any) -> dict[str, Any] | None:
    """The saved profile of ``local`` as a dict, to store with a run that used it (None for any other device)."""
    dev_id = device.get("id") if isinstance(device, dict) else getattr(device, "id", None)
    if dev_id != LOCAL_DEVICE_ID:
        return None
    p = load_profile()
    return p.to_dict() if p is not None else None


def local_profile_clause(device: Any) -> str:
    """:func:`local_profile_note` as a clause to append to a source text: ``"; `local` measured …"`` or ""."""
    note = local_profile_note(device).strip().rstrip(".")
    return f"; {note}" if note else ""
