"""Host contention: how much of this machine's CPU other work took while a run measured.

On the embedded engine, or any server on 127.0.0.1, the server and the client share the cores
with everything else the machine runs; a busy neighbour shows up as slow prefill, jittery ITL and
a decode rate far below its ceiling — numbers that look like findings about the server but are
not. So every probe, bench and explain run samples ``/proc`` before and during the run:

* ``/proc/loadavg`` — the 1-minute load average (runnable + uninterruptible tasks);
* ``/proc/stat`` (first line) — CPU time of the whole machine, split into busy, idle and
  ``steal`` (time the hypervisor gave this VM's vCPUs to someone else);
* ``/proc/<pid>/stat`` — utime + stime of **this client** (this process and its children:
  ``--workers`` processes) and of **the server** (the process tree listening on the target's
  port, when the target is on this machine — the embedded engine's llama-server or a loopback
  server).

The share of the machine taken by *other* work over a window is::

    other = Δbusy(machine) − Δcpu(client tree) − Δcpu(server tree)      (clock ticks)
    other_cpu_share = (other + Δsteal) / (Δwall × cores)

computed from the whole machine's counters, so a short-lived process between two samples is
counted too. :func:`judge` turns it into a ``host_busy`` warning on two readings of the run:

* **the average** over the whole run: other work (plus steal) above :data:`BUSY_SHARE` (25 %) of the
  machine's CPU time;
* **the bursts**: the share in the run's worst 1-second windows — the busiest
  :data:`BURST_FRACTION` (10 %) of the sliding 1 s windows over the 0.5 s samples (their 90th
  percentile, so one stray sample does not decide it) — above :data:`BURST_SHARE` (50 %). A job that
  spins one of two cores 1 s on, 1 s off averages 25 % and reads 50 % in its bursts; every repeat that
  lands in a burst runs slower, and the repeats disagree although the average looks acceptable.

Both are stricter when the measured server runs **on this machine** (the embedded engine, or a
loopback server whose listening process is found here): it competes with the other work for the same
cores, so what other work takes comes out of the server's own time: :data:`BUSY_SHARE_LOCAL` (15 %) on
average and :data:`BURST_SHARE_LOCAL` (30 %) in bursts. A remote server loses nothing to this machine's
neighbours; only the client does, and it needs little CPU.

A background thread (:class:`HostSampler`) reads the counters every 0.5 s (about
1.6 ms of CPU per sample with ~110 processes on the 2-core dev machine, 0.3 % of one core:
``benchmarks/host_sampler_cost.py``); the busiest other processes are named in the evidence.

Linux only; elsewhere (no ``/proc``) the sampler records ``available: false`` and judges nothing.

One job: how busy this machine was with other work while a run measured — the ``/proc`` parsers, the
windows between samples (whole run and 1-second bursts) and the judgement all read the same samples.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from phasescope.measure.warnings import MeasurementWarning, warn

#: the judgement: other work (plus hypervisor steal) above this share of the machine's CPU time → host_busy
BUSY_SHARE = 0.25
#: the same for a server on this machine (it competes with the other work for the same cores)
BUSY_SHARE_LOCAL = 0.15
#: the share other work may take in the run's worst 1-second windows (remote server / server on this machine)
BURST_SHARE = 0.50
BURST_SHARE_LOCAL = 0.30
#: the length of a burst window, and which of them are "the worst": the busiest 10 % (their 90th percentile)
BURST_WINDOW_S = 1.0
BURST_FRACTION = 0.10
#: seconds between samples of the background thread
INTERVAL_S = 0.5
#: the "before" window measured just before a run starts
BEFORE_S = 0.3

_PROC = "/proc"


def _ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


TICKS = _ticks_per_s()


# --- raw readings --------------------------------------------------------------------------
@dataclass
class CpuStat:
    """The machine-wide counters of ``/proc/stat`` (clock ticks, summed over cores)."""

    busy: int  # user + nice + system + irq + softirq (guest time is already inside user/nice)
    idle: int  # idle + iowait
    steal: int

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.steal


def parse_stat(text: str) -> CpuStat:
    """The aggregate ``cpu`` line of ``/proc/stat``."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            return CpuStat(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_proc_stat(text: str) -> tuple[str, int, int]:
    """``/proc/<pid>/stat`` → (comm, ppid, utime + stime ticks). The comm may hold spaces and
    parentheses, so the fields are read after the *last* ``)``."""
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    f = rest.split()
    # rest starts at field 3 (state): ppid = field 4, utime = 14, stime = 15
    return comm, int(f[1]), int(f[11]) + int(f[12])


def parse_waited(text: str) -> int:
    """``/proc/<pid>/stat`` → cutime + cstime: the CPU ticks of the children the process has waited for
    (fields 16 and 17). The client's own tree counts them, so a child that ran and exited between two
    samples (``hw``'s compiled kernel, a ``--workers`` process) stays the client's, not "other work"."""
    f = text.rpartition(")")[2].split()
    return int(f[13]) + int(f[14]) if len(f) > 14 else 0


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def read_processes(proc: str = _PROC) -> dict[int, tuple[str, int, int]]:
    """Every readable process: pid → (comm, ppid, cpu ticks)."""
    out: dict[int, tuple[str, int, int]] = {}
    for pid in _pids(proc):
        text = _read(f"{proc}/{pid}/stat")
        if text is None:
            continue
        try:
            out[pid] = parse_proc_stat(text)
        except (ValueError, IndexError):
            continue
    return out


def _pids(proc: str = _PROC) -> list[int]:
    """The process ids listed under ``proc`` (none when it cannot be read)."""
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


def tree(roots: Iterable[int], procs: Mapping[int, tuple[str, int, int]]) -> set[int]:
    """``roots`` and all their descendants among ``procs``."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = [r for r in roots if r]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def listening_pids(port: int, proc: str = _PROC) -> set[int]:
    """Processes holding a socket that listens on TCP ``port`` (``/proc/net/tcp{,6}`` inode →
    ``/proc/<pid>/fd``). Only processes this user may inspect are found."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        text = _read(f"{proc}/net/{name}")
        for line in (text or "").splitlines()[1:]:
            f = line.split()
            if len(f) < 10 or f[3] != "0A":  # 0A = LISTEN
                continue
            try:
                if int(f[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f[9])
            except (ValueError, IndexError):
                continue
    if not inodes:
        return set()
    want = {f"socket:[{i}]" for i in inodes}
    out: set[int] = set()
    for pid in _pids(proc):
        d = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{d}/{fd}") in want:
                    out.add(pid)
                    break
            except OSError:
                continue
    return out


def loopback_port(url: str | None) -> int | None:
    """The port of a target on this machine (127.0.0.0/8, ::1, localhost), else None."""
    if not url:
        return None
    try:
        u = urlsplit(url)
        host = (u.hostname or "").lower()
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None
    if host == "localhost" or host == "::1" or host.startswith("127."):
        return port
    return None


def read_loadavg(proc: str = _PROC) -> float | None:
    text = _read(f"{proc}/loadavg")
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


# --- one sample and the judgement ------------------------------------------------------------
@dataclass
class Sample:
    """One reading: wall time, machine counters, and per-process ticks."""

    t_s: float
    stat: CpuStat
    procs: dict[int, tuple[str, int, int]]
    loadavg: float | None = None
    #: cutime + cstime of the client's root process (:func:`parse_waited`)
    client_waited: int = 0


@dataclass
class Window:
    """Contention over one window between two samples (see the module docstring)."""

    seconds: float
    cores: int
    machine_busy_share: float  # all busy time / capacity
    client_cpu_share: float
    server_cpu_share: float | None
    other_cpu_share: float  # (busy − client − server + steal) / capacity, clipped to [0, 1]
    steal_share: float
    top_other: list[dict[str, Any]] = field(default_factory=list)
    #: the ticks behind ``other_cpu_share`` (other work + steal) and the capacity, to merge windows
    other_ticks: int = 0
    capacity_ticks: int = 0
    #: the share of the cores other processes still running at the window's end used (named or not)
    alive_other_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3), "cores": self.cores,
            "machine_busy_share": round(self.machine_busy_share, 4),
            "client_cpu_share": round(self.client_cpu_share, 4),
            "server_cpu_share": None if self.server_cpu_share is None else round(self.server_cpu_share, 4),
            "other_cpu_share": round(self.other_cpu_share, 4), "steal_share": round(self.steal_share, 4),
            "top_other": self.top_other,
            "alive_other_share": None if self.alive_other_share is None else round(self.alive_other_share, 4),
        }


def window(a: Sample, b: Sample, *, cores: int, client: set[int], server: set[int] | None,
           ticks_per_s: int = TICKS, top: int = 3) -> Window:
    """The contention between samples ``a`` and ``b``. ``client`` / ``server``: pids whose CPU
    time is the measurement's own (processes that appear only in ``b`` count from zero)."""
    # the capacity comes from the machine counters themselves (all states), so the share does not
    # depend on how exactly the sampler's sleep matched the wall clock
    cap = max(1, b.stat.total - a.stat.total)
    dt = max(1e-9, b.t_s - a.t_s)

    def dticks(pids: Iterable[int]) -> int:
        s = 0
        for p in pids:
            if p in b.procs:
                s += max(0, b.procs[p][2] - (a.procs[p][2] if p in a.procs and a.procs[p][1] == b.procs[p][1] else 0))
        return s

    own = client | (server or set())
    c = dticks(client - (server or set()))  # the embedded engine is the client's child: count it once, as server
    c += max(0, b.client_waited - a.client_waited)  # children the client waited for since the last sample
    sv = dticks(server) if server else 0
    busy = max(0, b.stat.busy - a.stat.busy)
    steal = max(0, b.stat.steal - a.stat.steal)
    other = max(0, busy - c - sv)
    others = sorted(((dticks([p]), p) for p in b.procs if p not in own), reverse=True)
    top_other = [{"pid": p, "comm": b.procs[p][0], "cpu_share": round(t / cap, 4)} for t, p in others[:top] if t > 0]
    alive = sum(t for t, _ in others)  # other work done by processes still there at the end (all, not only the top)
    return Window(seconds=dt, cores=cores, machine_busy_share=min(1.0, busy / cap),
                  client_cpu_share=min(1.0, c / cap), server_cpu_share=None if server is None else min(1.0, sv / cap),
                  other_cpu_share=min(1.0, (other + steal) / cap), steal_share=min(1.0, steal / cap),
                  top_other=top_other, other_ticks=min(cap, other + steal), capacity_ticks=cap,
                  alive_other_share=min(1.0, alive / cap))


def burst_shares(steps: Sequence[tuple[float, int, int]], window_s: float = BURST_WINDOW_S) -> list[float]:
    """The share of other work in every sliding ``window_s`` window over consecutive sample steps.

    ``steps``: one ``(seconds, other_ticks, capacity_ticks)`` per window between two consecutive
    samples, in order. Each window ends at a step and reaches back over whole steps until it spans
    ``window_s`` (90 % of it: a 0.5 s sampler that wakes a little early still pairs its steps); its
    share is Σ other ÷ Σ capacity. A run shorter than one window is one window."""
    out: list[float] = []
    need = 0.9 * window_s
    for j in range(len(steps)):
        dt = oth = cap = 0.0
        i = j
        while i >= 0:
            dt += steps[i][0]
            oth += steps[i][1]
            cap += steps[i][2]
            if dt >= need:
                break
            i -= 1
        if dt >= need and cap > 0:
            out.append(min(1.0, oth / cap))
    if not out and steps:
        cap = sum(s[2] for s in steps)
        if cap > 0:
            out.append(min(1.0, sum(s[1] for s in steps) / cap))
    return out


def worst_windows(shares: Sequence[float], fraction: float = BURST_FRACTION) -> float | None:
    """The share in the worst ``fraction`` of the windows: their lower edge, the (1 − fraction)
    quantile (linear between order statistics; the maximum for a run of a few windows)."""
    if not shares:
        return None
    a = sorted(shares)
    pos = (1.0 - fraction) * (len(a) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(a) - 1)
    return a[lo] + (a[hi] - a[lo]) * (pos - lo)


def thresholds(server_local: bool) -> tuple[float, float]:
    """(average, burst) shares above which other work makes a run ``host_busy`` (module docstring)."""
    return (BUSY_SHARE_LOCAL, BURST_SHARE_LOCAL) if server_local else (BUSY_SHARE, BURST_SHARE)


def judge(host: Mapping[str, Any] | None, *, threshold: float | None = None) -> list[MeasurementWarning]:
    """``host_busy`` when other work took more than the average threshold of the cores over the run,
    or more than the burst threshold in its worst 1-second windows (module docstring). The thresholds
    are the ones the ``host`` section names (a server on this machine gets the stricter pair); an older
    record without them is judged on its average against ``threshold`` (default :data:`BUSY_SHARE`)."""
    if not host or not host.get("available"):
        return []
    during = host.get("during") or {}
    share = during.get("other_cpu_share")
    if share is None:
        return []
    local = bool(host.get("server_local"))
    avg_thr, burst_thr = thresholds(local)
    if threshold is not None:
        avg_thr = threshold
    elif isinstance(host.get("threshold"), (int, float)):
        avg_thr = float(host["threshold"])
    if isinstance(host.get("burst_threshold"), (int, float)):
        burst_thr = float(host["burst_threshold"])
    burst = host.get("worst_1s_other_cpu_share")
    by_avg = share > avg_thr
    by_burst = isinstance(burst, (int, float)) and burst > burst_thr
    if not (by_avg or by_burst):
        return []
    cores = during.get("cores") or host.get("cores")
    # name only processes that used a visible share; a process that ended before the last sample cannot be
    # named, so say so rather than point at idle ones ("busiest: kdamond.0 (0 %)")
    tops = [t for t in during.get("top_other") or [] if (t.get("cpu_share") or 0) >= 0.005]
    names = ", ".join(f"{t['comm']} ({t['cpu_share'] * 100:.0f} %)" for t in tops)
    named = f"; busiest: {names}" if names else ""
    alive = during.get("alive_other_share")  # all processes still running, not only the named top three
    if (alive if isinstance(alive, (int, float)) else sum(t["cpu_share"] for t in tops)) < share / 2:
        named += "; most of it from processes that ended before the run did"
    frac = host.get("burst_fraction") or BURST_FRACTION
    took = f"other work on this machine took {share * 100:.0f} % of its {cores} cores' CPU time"
    bursty = isinstance(burst, (int, float)) and burst > 1.2 * share + 0.02
    if bursty:
        took += (f" on average and {burst * 100:.0f} % in its worst 1-second windows (the busiest "
                 f"{frac * 100:.0f} % of the run)")
    elif isinstance(burst, (int, float)):
        took += f" ({burst * 100:.0f} % in its worst 1-second windows: steadily)"
    limits = []
    if by_avg:
        limits.append(f"more than the {avg_thr * 100:.0f} % phasescope accepts on average")
    if by_burst:
        limits.append(f"{'and' if by_avg else 'more than'} the {burst_thr * 100:.0f} % it accepts in bursts")
    where = (" when the server runs on this machine and competes for the same cores" if local else "")
    peak = host.get("peak_other_cpu_share")
    ev = {"other_cpu_share": share, "threshold": avg_thr, "cores": cores,
          "worst_1s_other_cpu_share": burst, "burst_threshold": burst_thr,
          "max_1s_other_cpu_share": host.get("max_1s_other_cpu_share"), "server_local": local,
          "rule": [r for r, on in (("average", by_avg), ("bursts", by_burst)) if on],
          "steal_share": during.get("steal_share"), "loadavg_1m": host.get("loadavg_1m_start"),
          "peak_other_cpu_share": peak, "top_other": during.get("top_other") or []}
    return [warn("host_busy", "contention", ev, took=took, limits=" ".join(limits), where=where, named=named,
                 bursty=", and the requests or repeats that ran inside a burst disagree with the rest" if bursty else "")]


# --- the background sampler -------------------------------------------------------------------
class HostSampler:
    """Samples ``/proc`` every ``interval_s`` on a daemon thread between :meth:`start` and
    :meth:`stop`. ``server_url``: the target; when it is on this machine its listening process
    tree is the server (looked up at start, and again at stop for a server started later).

    ``start()`` first measures a short window *before* the run (``before_s``, blocking), so the
    record says whether the machine was already busy. ``stop()`` returns the ``host`` dict stored
    with the run (``summary()`` reads it again later)."""

    def __init__(self, server_url: str | None = None, *, interval_s: float = INTERVAL_S, before_s: float = BEFORE_S,
                 proc: str = _PROC, client_pid: int | None = None, server_pids: Iterable[int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.before_s = before_s
        self.proc = proc
        self.clock = clock
        self.client_pid = client_pid or os.getpid()
        self.port = loopback_port(server_url)
        self.server_roots: set[int] = set(server_pids or [])
        self.available = os.path.isfile(f"{proc}/stat")
        self.cores = os.cpu_count() or 1
        # only the first and the latest sample are kept whole (a long run must not grow memory);
        # each window between two consecutive samples is judged as it arrives, for the peak
        self.first: Sample | None = None
        self.last: Sample | None = None
        self.n_samples = 0
        self.peak = 0.0
        #: (seconds, other ticks, capacity ticks) per step between consecutive samples, for the bursts
        #: (3 numbers per 0.5 s: about 17 MB over a day-long run)
        self.steps: list[tuple[float, int, int]] = []
        self.loads: list[float] = []
        self._before: Window | None = None
        self._loadavg_start: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._result: dict[str, Any] | None = None

    def _sample(self) -> Sample | None:
        text = _read(f"{self.proc}/stat")
        if text is None:
            return None
        try:
            st = parse_stat(text)
        except ValueError:
            return None
        own = _read(f"{self.proc}/{self.client_pid}/stat")
        try:
            waited = parse_waited(own) if own else 0
        except ValueError:
            waited = 0
        return Sample(self.clock(), st, read_processes(self.proc), read_loadavg(self.proc), waited)

    def _server_pids(self, procs: Mapping[int, tuple[str, int, int]]) -> set[int] | None:
        roots = set(self.server_roots)
        if self.port is not None:
            found = listening_pids(self.port, self.proc) - {self.client_pid}
            roots |= found
            self.server_roots |= found
        if not roots:
            return None if self.port is None else set()
        return tree(roots, procs)

    def _client_pids(self, procs: Mapping[int, tuple[str, int, int]]) -> set[int]:
        return tree([self.client_pid], procs)

    def start(self) -> "HostSampler":
        if not self.available:
            return self
        self._loadavg_start = read_loadavg(self.proc)
        a = self._sample()
        if a is not None and self.before_s > 0:
            time.sleep(self.before_s)
            b = self._sample()
            if b is not None:
                self._before = window(a, b, cores=self.cores, client=self._client_pids(b.procs),
                                      server=self._server_pids(b.procs))
                a = b
        if a is not None:
            self._add(a)
        self._thread = threading.Thread(target=self._loop, name="phasescope-host", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            s = self._sample()
            if s is not None:
                with self._lock:
                    self._add(s, cheap=True)

    def stop(self) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.available:
            s = self._sample()
            if s is not None:
                self._add(s)
        self._result = self.summary()
        return self._result

    def _add(self, s: Sample, *, cheap: bool = False) -> None:
        """Take sample ``s``: judge the window since the previous one (for the peak), keep it as the
        latest. ``cheap``: reuse the known server pids instead of scanning sockets again."""
        if self.last is not None:
            server = (tree(self.server_roots, s.procs) if self.server_roots else (set() if self.port else None)) \
                if cheap else self._server_pids(s.procs)
            w = window(self.last, s, cores=self.cores, client=self._client_pids(s.procs), server=server, top=0)
            self.peak = max(self.peak, w.other_cpu_share)
            self.steps.append((w.seconds, w.other_ticks, w.capacity_ticks))
        if self.first is None:
            self.first = s
        self.last = s
        self.n_samples += 1
        if s.loadavg is not None:
            self.loads.append(s.loadavg)

    def summary(self) -> dict[str, Any]:
        """The ``host`` section: before/during windows, the peak sample, load averages, threshold."""
        local = bool(self.server_roots)
        avg_thr, burst_thr = thresholds(local)
        base: dict[str, Any] = {"available": self.available, "cores": self.cores, "threshold": avg_thr,
                                "burst_threshold": burst_thr, "burst_window_s": BURST_WINDOW_S,
                                "burst_fraction": BURST_FRACTION, "server_local": local,
                                "interval_s": self.interval_s}
        if not self.available or self.n_samples < 2 or self.first is None or self.last is None:
            base.update({"before": self._before.to_dict() if self._before else None, "during": None,
                         "samples": self.n_samples, "loadavg_1m_start": self._loadavg_start})
            return base
        last = self.last
        client = self._client_pids(last.procs)
        server = self._server_pids(last.procs)
        during = window(self.first, last, cores=self.cores, client=client, server=server)
        peak = self.peak
        loads = self.loads
        bursts = burst_shares(self.steps)
        worst = worst_windows(bursts)
        local = bool(server)
        avg_thr, burst_thr = thresholds(local)
        base.update({
            "server_local": local, "threshold": avg_thr, "burst_threshold": burst_thr,
            "windows_1s": len(bursts),
            "worst_1s_other_cpu_share": None if worst is None else round(worst, 4),
            "max_1s_other_cpu_share": round(max(bursts), 4) if bursts else None,
            "before": self._before.to_dict() if self._before else None,
            "during": during.to_dict(),
            "peak_other_cpu_share": round(peak, 4),
            "samples": self.n_samples,
            "loadavg_1m_start": self._loadavg_start,
            "loadavg_1m_max": max(loads) if loads else None,
            "server_pids": sorted(self.server_roots),
            "server_found": bool(server),
        })
        return base

    def __enter__(self) -> "HostSampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
