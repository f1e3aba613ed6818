"""When each request is sent: the arrival process, computed up front as data.

``build_schedule(...)`` returns a :class:`Schedule` — a list of :class:`ScheduledRequest` with send
offsets (seconds after the run's t0) — so the runner, the multi-process splitter and a future Ray
scale-out all consume the same plan, and a seed reproduces it exactly.

Load shapes (names and formulas as in ``vllm bench serve``, ``vllm/benchmarks/serve.py:get_request``):

* **Poisson / gamma** (``rate`` finite, ``shape="poisson"``): inter-arrival gaps are
  ``Gamma(k=burstiness, θ=1/(rate·burstiness))`` so the mean gap is ``1/rate`` for any burstiness;
  ``burstiness=1`` is a Poisson process, ``<1`` burstier, ``>1`` more even.
* **Constant** (``shape="constant"``, or ``burstiness=inf``): gaps of exactly ``1/rate``.
* **Linear ramp** (``shape="ramp"``): request ``i`` of ``n`` is drawn at rate
  ``r_i = r_start + (r_end − r_start)·i/(n−1)`` (vLLM's ``--ramp-up-strategy linear``);
  gaps are Poisson/gamma at ``r_i``.
* **All at once** (``rate=inf``): every offset is 0; with ``max_concurrency`` this is the closed
  loop — a request is sent as soon as a slot frees (vLLM's ``--max-concurrency`` with the default
  infinite rate).
* **Trace replay** (``shape="trace"``): offsets (and optionally lengths) from a JSONL trace.

Bounds: ``num_prompts`` and/or ``duration_s`` (arrivals at offsets ≥ duration are dropped; with a
closed loop and no ``num_prompts`` the schedule *repeats* until the runner's duration expires).
Warm-up requests come first, flagged ``warmup=True``, with their own workload items (numbered after
the measured ones: ``num_items`` or the number of measured requests); the runner sends them before
t0 and the summary excludes them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from phasescope.errors import InputError

SHAPES = ("poisson", "constant", "ramp", "trace")
#: at most this many requests are planned up front; a longer schedule continues lazily (its
#: :attr:`Schedule.tail`), so ``-n 1000000000 --duration 2`` costs the memory of this many
MATERIALIZE = 100_000
#: distinct workload items (prompts) built for a lazily continued schedule: its requests cycle them
LAZY_ITEMS = 4096
_CHUNK = 1024


@dataclass(frozen=True)
class _Arrivals:
    """The arrival process as a picklable recipe (multi-process and Ray parts regenerate it): the
    same draws, in the same chunks, as the up-front plan, so a seed reproduces every offset."""

    seed: int
    rate: float
    burstiness: float
    shape: str
    num_prompts: int | None
    duration_s: float | None
    num_items: int | None
    skip: int = 0  # the first ``skip`` requests are in Schedule.requests already
    mod: int = 1  # partition: this part yields the requests with index % mod == rem
    rem: int = 0

    def item_of(self, i: int) -> int:
        return i if not self.num_items else i % self.num_items

    def __iter__(self) -> Iterator[ScheduledRequest]:
        finite = math.isfinite(self.rate)
        rng = np.random.default_rng(self.seed)
        i, t = 0, 0.0
        gaps: list[float] = []
        gi = 0
        while self.num_prompts is None or i < self.num_prompts:
            if finite:
                if gi >= len(gaps):
                    gaps = _gaps(rng, np.full(_CHUNK, self.rate), self.burstiness, self.shape).tolist()
                    gi = 0
                g = gaps[gi]
                gi += 1
            else:
                g = 0.0
            if self.duration_s is not None and t >= self.duration_s:
                return
            if i >= self.skip and i % self.mod == self.rem:
                yield ScheduledRequest(i, t, self.item_of(i))
            i += 1
            t += float(g)
            if not finite and self.num_prompts is None:
                return  # an unbounded all-at-once plan is the closed loop (repeat), not this

    def count(self) -> int | None:
        """Requests this recipe yields, when known without generating them (all-at-once)."""
        if self.num_prompts is None or (math.isfinite(self.rate) and self.duration_s is not None):
            return None
        return len(range(self.skip + ((self.rem - self.skip) % self.mod), self.num_prompts, self.mod))


@dataclass(frozen=True)
class ScheduledRequest:
    """One planned request.

    index      position in the measured run (warm-ups are numbered separately, from 0)
    offset_s   intended send time after t0 (0 for closed loop / ``rate=inf``)
    item       index of the workload item (prompt + output length) to send
    warmup     sent before t0 and excluded from the summary
    input_len / output_len  per-request overrides from a trace (``None`` = the item's)
    """

    index: int
    offset_s: float
    item: int
    warmup: bool = False
    input_len: int | None = None
    output_len: int | None = None


@dataclass
class Schedule:
    """The plan: warm-ups, the measured requests and how to bound them."""

    requests: list[ScheduledRequest]
    warmups: list[ScheduledRequest] = field(default_factory=list)
    duration_s: float | None = None
    #: closed loop bounded only by duration: cycle through ``requests`` until the duration ends
    repeat: bool = False
    shape: str = "poisson"
    rate: float = math.inf
    burstiness: float = 1.0
    seed: int = 0
    #: the requests after ``requests``, generated as the runner reaches them (None: none)
    tail: _Arrivals | None = None
    #: a ``--trace`` replay: rows read, rows replayed, and rows skipped by reason (the summary's ``trace``)
    trace_facts: dict[str, Any] | None = None

    @property
    def total(self) -> int | None:
        """Measured requests planned: ``len(requests)`` plus the tail's; None when only the
        duration bounds it (or the schedule repeats)."""
        if self.repeat:
            return None
        if self.tail is None:
            return len(self.requests)
        n = self.tail.count()
        return None if n is None else len(self.requests) + n

    @property
    def requested_rate(self) -> float | None:
        """Mean requested arrival rate (req/s) of the measured part; None when unbounded (inf)."""
        if not math.isfinite(self.rate) and self.shape != "trace":
            return None
        offs = [r.offset_s for r in self.requests]
        if len(offs) < 2 or offs[-1] <= offs[0]:
            return None if not math.isfinite(self.rate) else self.rate
        return (len(offs) - 1) / (offs[-1] - offs[0])

    def iter_requests(self) -> Iterator[ScheduledRequest]:
        """The measured requests; endless when ``repeat`` (the runner stops at its duration)."""
        if not self.repeat:
            yield from self.requests
            if self.tail is not None:
                yield from self.tail
            return
        n = len(self.requests)
        if n == 0:
            return
        k = 0
        while True:
            base = self.requests[k % n]
            yield ScheduledRequest(k, 0.0, base.item, False, base.input_len, base.output_len)
            k += 1

    def partition(self, n_parts: int) -> list["Schedule"]:
        """Split round-robin into ``n_parts`` schedules with the same t0 (multi-process / Ray).

        Request ``i`` goes to part ``i % n``; offsets are kept, so the union of the parts' send
        times is exactly this schedule's. Warm-ups are split the same way.
        """
        if n_parts < 1:
            raise InputError("the number of parts must be at least 1")
        parts = []
        for p in range(n_parts):
            parts.append(
                Schedule(
                    requests=[r for r in self.requests if r.index % n_parts == p],
                    warmups=[w for w in self.warmups if w.index % n_parts == p],
                    duration_s=self.duration_s,
                    repeat=self.repeat,
                    shape=self.shape,
                    rate=self.rate / n_parts if math.isfinite(self.rate) else self.rate,
                    burstiness=self.burstiness,
                    seed=self.seed,
                    tail=None if self.tail is None else replace(self.tail, mod=n_parts, rem=p),
                )
            )
        return parts


@dataclass(frozen=True)
class TraceEntry:
    offset_s: float
    input_len: int | None = None
    output_len: int | None = None


def _gaps(rng: np.random.Generator, rates: np.ndarray, burstiness: float, shape: str) -> np.ndarray:
    """Inter-arrival gaps (s) for per-request rates; gamma with mean 1/rate (vLLM's formula)."""
    if shape == "constant" or math.isinf(burstiness):
        return 1.0 / rates
    theta = 1.0 / (rates * burstiness)
    return rng.gamma(shape=burstiness, scale=theta)


def build_schedule(
    num_prompts: int | None = None,
    *,
    rate: float = math.inf,
    burstiness: float = 1.0,
    shape: str = "poisson",
    ramp_start_rate: float | None = None,
    ramp_end_rate: float | None = None,
    duration_s: float | None = None,
    max_concurrency: int | None = None,
    num_items: int | None = None,
    warmup: int = 0,
    trace: Sequence[TraceEntry] | None = None,
    trace_speed: float = 1.0,
    seed: int = 0,
) -> Schedule:
    """Compute the arrival plan. See the module docstring for each shape's formula.

    ``num_items``: how many distinct workload items exist (request ``i`` uses item ``i % num_items``;
    ``None`` = one item per request). The first arrival is at offset 0 (vLLM sends the first
    request immediately, then sleeps the first gap).
    """
    if shape not in SHAPES:
        raise InputError(f"unknown load shape {shape!r} (choose from {', '.join(SHAPES)})")
    if num_prompts is not None and num_prompts < 1:
        raise InputError("--num-prompts must be at least 1")
    if duration_s is not None and not duration_s > 0:
        raise InputError("--duration must be positive")
    if not rate > 0:
        raise InputError("--request-rate must be positive (or inf)")
    if not burstiness > 0:
        raise InputError("--burstiness must be positive")
    if max_concurrency is not None and max_concurrency < 1:
        raise InputError("--max-concurrency must be at least 1")
    if warmup < 0:
        raise InputError("--warmup must be ≥ 0")
    rng = np.random.default_rng(seed)

    def item_of(i: int) -> int:
        return i if not num_items else i % num_items

    common = dict(duration_s=duration_s, shape=shape, burstiness=burstiness, seed=seed)

    def finish(sched: Schedule) -> Schedule:
        # warm-ups get their own items after the measured ones, so no measured prompt was already
        # seen by the server (a prefix-cache hit would flatter the first requests' TTFT)
        base = num_items or len(sched.requests)
        sched.warmups = [ScheduledRequest(i, 0.0, base + i, True) for i in range(warmup)]
        return sched

    if shape == "trace":
        if not trace:
            raise InputError("trace replay needs a non-empty trace file")
        if not trace_speed > 0:
            raise InputError("--trace-speed must be positive")
        t0 = min(e.offset_s for e in trace)
        entries = sorted(trace, key=lambda e: e.offset_s)
        reqs = []
        for i, e in enumerate(entries):
            off = (e.offset_s - t0) / trace_speed
            if duration_s is not None and off >= duration_s:
                break
            if num_prompts is not None and i >= num_prompts:
                break
            reqs.append(ScheduledRequest(i, off, item_of(i), False, e.input_len, e.output_len))
        return finish(Schedule(requests=reqs, rate=math.inf, **common))  # type: ignore[arg-type]

    if shape == "ramp":
        if ramp_start_rate is None or ramp_end_rate is None:
            raise InputError("a ramp needs --ramp-start-rate and --ramp-end-rate")
        if not (ramp_start_rate > 0 and ramp_end_rate > 0):
            raise InputError("ramp rates must be positive")
        if num_prompts is None:
            raise InputError("a ramp needs --num-prompts (the ramp spans the requests, as in vLLM)")
        n = num_prompts
        if n > MATERIALIZE:
            raise InputError(f"a ramp spans at most {MATERIALIZE:,} requests (got --num-prompts {n:,}); "
                             "use --load-shape poisson/constant for longer runs")
        prog = np.arange(n) / max(n - 1, 1)
        rates = ramp_start_rate + (ramp_end_rate - ramp_start_rate) * prog
        gaps = _gaps(rng, rates, burstiness, "poisson")
        offs = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        reqs = [ScheduledRequest(i, float(o), item_of(i)) for i, o in enumerate(offs)
                if duration_s is None or o < duration_s]
        return finish(Schedule(requests=reqs, rate=float(np.mean(rates)), **common))  # type: ignore[arg-type]

    if math.isinf(rate):
        if num_prompts is None:
            if duration_s is None:
                raise InputError("bound the run with --num-prompts and/or --duration")
            if max_concurrency is None:
                raise InputError("--duration alone with an infinite rate needs --max-concurrency (closed loop)")
            n = num_items or max_concurrency
            reqs = [ScheduledRequest(i, 0.0, item_of(i)) for i in range(n)]
            return finish(Schedule(requests=reqs, repeat=True, rate=rate, **common))  # type: ignore[arg-type]
    elif num_prompts is None and duration_s is None:
        # finite rate: Poisson / gamma / constant arrivals
        raise InputError("bound the run with --num-prompts and/or --duration")
    # all at once with --num-prompts, or a finite rate: the first MATERIALIZE requests up front,
    # the rest (if any) generated lazily from the same recipe
    could_overflow = num_prompts is None or num_prompts > MATERIALIZE
    # a schedule that may continue lazily cycles a bounded pool of prompts (LAZY_ITEMS)
    recipe = _Arrivals(seed, rate, burstiness, shape, num_prompts, duration_s,
                       (num_items or LAZY_ITEMS) if could_overflow else num_items)
    reqs = []
    for r in recipe:
        reqs.append(r)
        if len(reqs) > MATERIALIZE:
            break
    tail = None
    if len(reqs) > MATERIALIZE:
        reqs = reqs[:MATERIALIZE]
        tail = replace(recipe, skip=MATERIALIZE)
    elif could_overflow and not num_items and len(reqs) > LAZY_ITEMS:
        # it fitted after all: one item per request, as for any planned schedule
        reqs = [ScheduledRequest(r.index, r.offset_s, r.index) for r in reqs]
    sched = Schedule(requests=reqs, rate=rate, tail=tail, **common)  # type: ignore[arg-type]
    if tail is not None:
        sched.warmups = [ScheduledRequest(i, 0.0, tail.num_items + i, True) for i in range(warmup)]  # type: ignore[operator]
        return sched
    return finish(sched)


def iter_jsonl_objects(path: Path, *, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file; a missing file, a line
    that is not JSON or not an object is an :class:`InputError` naming the file and line."""
    from phasescope.safeio import iter_user_jsonl  # the one reader for user files

    yield from iter_user_jsonl(path, what=what)


def read_trace(path: str | Path) -> list[TraceEntry]:
    """Read a JSONL trace: one object per request with its arrival time and optional lengths.

    Arrival: ``offset_s`` (seconds), or ``timestamp`` in **milliseconds** (the Mooncake trace
    convention), or ``timestamp_s``. Lengths: ``input_len``/``input_length``,
    ``output_len``/``output_length``. Offsets are made relative to the earliest entry.
    """
    p = Path(path)
    out: list[TraceEntry] = []
    def num(v: Any, key: str, ln: int) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"{p}:{ln}: {key} must be a finite number, not {json.dumps(v)[:40]}")
        return float(v)

    def length(v: Any, key: str, ln: int) -> int | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000_000:
            raise InputError(f"{p}:{ln}: {key} must be an integer from 1 to 10,000,000, not {json.dumps(v)[:40]}")
        return v

    for ln, d in iter_jsonl_objects(p, what="trace file"):
        if "offset_s" in d:
            off = num(d["offset_s"], "offset_s", ln)
        elif "timestamp_s" in d:
            off = num(d["timestamp_s"], "timestamp_s", ln)
        elif "timestamp" in d:
            off = num(d["timestamp"], "timestamp", ln) / 1000.0
        else:
            raise InputError(f"{p}:{ln}: needs offset_s, timestamp_s or timestamp (ms)")
        il = d.get("input_len", d.get("input_length"))
        ol = d.get("output_len", d.get("output_length"))
        out.append(TraceEntry(off, length(il, "input_len", ln), length(ol, "output_len", ln)))
    if not out:
        raise InputError(f"trace file is empty: {p}")

    check_span(out, p)
    return out


#: the longest a trace may span (trace seconds, before --trace-speed): the bound of --trace-start
MAX_TRACE_SPAN_S = 366 * 86400


def check_span(entries: Sequence[TraceEntry], path: str | Path) -> None:
    """Refuse a trace whose arrivals span more than :data:`MAX_TRACE_SPAN_S` (far-future timestamps
    would keep a replay waiting for years, and their nanoseconds overflow): one line, exit 2."""
    if not entries:
        return
    offs = [e.offset_s for e in entries]
    lo, hi = min(offs), max(offs)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo > MAX_TRACE_SPAN_S:
        raise InputError(f"{path}: the trace's arrivals span {hi - lo:,.0f} s, more than {MAX_TRACE_SPAN_S:,} s "
                         "(366 days): its timestamps are not seconds or milliseconds from the trace's start",
                         hint="fix the timestamps, or cut a window with --trace-start/--trace-duration")
