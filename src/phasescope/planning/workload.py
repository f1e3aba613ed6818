"""Simulated workloads: when requests arrive, how long their prompts and answers are, who shares a prefix.

Arrival offsets come from ``bench``'s own schedule builder (:func:`phasescope.load.schedule.build_schedule`,
so the same seed sends at the same instants in ``bench`` and in ``plan``). They follow
``vllm bench serve`` (``vllm/benchmarks/serve.py:get_request``):
inter-arrival gaps are Gamma(shape = burstiness, scale = 1 / (rate · burstiness)) — burstiness 1
is a Poisson process, ``constant`` spaces them exactly 1/rate apart, and no rate sends everything
at t = 0. ``concurrency`` caps requests in flight (vLLM's ``--max-concurrency`` semaphore); with no
rate it is a closed loop of N users, each sending its next request as the previous one finishes.
Lengths: fixed, or uniform in [L·(1−r), L·(1+r)] as vLLM's random dataset ``--random-range-ratio``.
A trace replays (arrival offset, prompt tokens, output tokens) triples, e.g. from measured records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from phasescope.errors import InputError

ARRIVALS = ("poisson", "gamma", "constant")


@dataclass
class Workload:
    """What the simulated clients send. Either ``num_requests`` or ``duration_s`` bounds it."""

    rate: float | None = None
    concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    input_len: int = 1000
    output_len: int = 128
    range_ratio: float = 0.0
    prefix_len: int = 0
    prefix_share: float = 0.0
    seed: int = 0
    #: closed loop: spread the users' first sends evenly over this many seconds (0 = all at once,
    #: as vllm bench serve); equal-length requests otherwise stay in lockstep forever
    ramp_s: float = 0.0
    #: replay: (arrival offset s, prompt tokens, output tokens[, prefix-hit tokens]) per request
    trace: Sequence[Sequence[float]] | None = field(default=None, repr=False)
    #: session workloads (:mod:`phasescope.planning.sessions`): the share of prompt tokens a cache that
    #: keeps everything would serve, and what the sessions were
    implied_hit_share: float | None = None
    session_facts: dict | None = field(default=None, repr=False)
    #: closed-loop conversations (:class:`phasescope.planning.sessions.ConversationLoop`): the simulator
    #: sends each session's next turn when the previous reply is complete, plus the think time
    sessions: Any = field(default=None, repr=False)

    def validate(self) -> None:
        if self.sessions is not None:
            if self.sessions.requests < 1:
                raise InputError("the conversation holds no turns")
            return
        if self.trace is not None:
            if not len(self.trace):
                raise InputError("the trace holds no requests")
            return
        if self.arrival not in ARRIVALS:
            raise InputError(f"unknown arrival process {self.arrival!r} (use one of {', '.join(ARRIVALS)})")
        if self.rate is not None and not self.rate > 0:
            raise InputError("--rate must be > 0 requests/s")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError("--concurrency must be ≥ 1")
        if self.rate is None and self.concurrency is None and self.duration_s is not None:
            raise InputError("--duration needs --rate or --concurrency (otherwise every request arrives at t = 0)")
        if self.num_requests is None and self.duration_s is None:
            raise InputError("give --num-requests or --duration")
        if self.num_requests is not None and self.num_requests < 1:
            raise InputError("--num-requests must be ≥ 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise InputError("--duration must be > 0 s")
        if self.input_len < 1 or self.output_len < 1:
            raise InputError("--input-len and --output-len must be ≥ 1 token")
        if not 0 <= self.range_ratio < 1:
            raise InputError("--range-ratio must be in [0, 1)")
        if not 0 <= self.prefix_share <= 1:
            raise InputError("--prefix-share must be in [0, 1]")
        if self.prefix_len < 0 or self.prefix_len > self.input_len:
            raise InputError("--prefix-len must be between 0 and --input-len")
        if self.burstiness <= 0:
            raise InputError("--burstiness must be > 0")

    @property
    def closed_loop(self) -> bool:
        """N users with one request each in flight (``--concurrency`` without a rate; conversations
        are closed per session, driven by :attr:`sessions`)."""
        return self.trace is None and self.sessions is None and self.rate is None and self.concurrency is not None


@dataclass
class RequestPlan:
    """Arrays, one row per request, in send order. ``arrival_s`` is NaN in a closed loop (sent when a
    user is free). ``prefix_tokens`` is the shared-prefix length of requests that carry it."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_tokens: np.ndarray
    #: conversations: the session and turn of each request (−1 elsewhere), filled as turns are sent
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    #: set for a closed loop bounded by time: more requests are drawn on demand (:meth:`grow`)
    _rng: np.random.Generator | None = field(default=None, repr=False)
    _workload: Workload | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.input_tokens.size)

    @property
    def growable(self) -> bool:
        return self._rng is not None

    def grow(self) -> None:
        """Double the number of requests (closed loop bounded by ``duration_s`` only)."""
        assert self._rng is not None and self._workload is not None
        n = max(len(self), 16)
        inp, out, pre = _draw_lengths(self._rng, self._workload, n)
        self.arrival_s = np.concatenate([self.arrival_s, np.full(n, np.nan)])
        self.input_tokens = np.concatenate([self.input_tokens, inp])
        self.output_tokens = np.concatenate([self.output_tokens, out])
        self.prefix_tokens = np.concatenate([self.prefix_tokens, pre])


def _lengths(rng: np.random.Generator, n: int, mean: int, ratio: float) -> np.ndarray:
    if ratio <= 0:
        return np.full(n, mean, dtype=np.int64)
    lo, hi = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def _arrivals(w: Workload) -> np.ndarray:
    """Send offsets from ``bench``'s own schedule builder (``phasescope.load.schedule``), so a
    simulated workload and ``phasescope bench`` with the same seed send at the same instants."""
    from phasescope.load.schedule import build_schedule

    assert w.rate is not None
    sched = build_schedule(
        w.num_requests,
        rate=w.rate,
        burstiness=1.0 if w.arrival == "poisson" else w.burstiness,
        shape="constant" if w.arrival == "constant" else "poisson",
        duration_s=w.duration_s,
        seed=w.seed,
    )
    return np.array([r.offset_s for r in sched.requests if not r.warmup], dtype=float)


def build_requests(w: Workload) -> RequestPlan:
    """Draw the requests of a workload, deterministically under ``w.seed``.

    With ``duration_s`` and a rate, arrivals stop at the duration (a closed loop instead stops
    sending then; the simulator enforces that, so enough requests are drawn here to cover it)."""
    w.validate()
    rng = np.random.default_rng(w.seed)
    if w.sessions is not None:  # the simulator fills each row when it sends the turn
        n = int(w.sessions.requests)
        z = np.zeros(n, dtype=np.int64)
        return RequestPlan(np.full(n, np.nan), z.copy(), z.copy(), z.copy(),
                           session=np.full(n, -1, dtype=np.int64), turn=np.full(n, -1, dtype=np.int64))
    if w.trace is not None:
        rows = [list(r) for r in w.trace]
        t0 = min(float(r[0]) for r in rows)
        arr = np.array([float(r[0]) - t0 for r in rows])
        order = np.argsort(arr, kind="stable")
        inp = np.array([int(r[1]) for r in rows], dtype=np.int64)[order]
        out = np.array([max(1, int(r[2])) for r in rows], dtype=np.int64)[order]
        pre = np.array([int(r[3]) if len(r) > 3 else 0 for r in rows], dtype=np.int64)[order]
        return RequestPlan(arr[order], inp, out, np.minimum(pre, inp))
    if w.rate is not None:
        arr = _arrivals(w)
        n = int(arr.size)
    else:
        if w.num_requests is not None:
            n = w.num_requests
        else:  # closed loop bounded by time: the simulator stops issuing at the duration
            assert w.concurrency is not None and w.duration_s is not None
            n = max(int(w.concurrency) * 4, 64)
        arr = np.full(n, np.nan if w.concurrency is not None else 0.0)
    inp, out, pre = _draw_lengths(rng, w, n)
    plan = RequestPlan(arr.astype(float), inp, out, pre)
    if w.closed_loop and w.num_requests is None:
        plan._rng, plan._workload = rng, w
    return plan


def _draw_lengths(rng: np.random.Generator, w: Workload, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inp = _lengths(rng, n, w.input_len, w.range_ratio)
    out = _lengths(rng, n, w.output_len, w.range_ratio)
    if w.prefix_len > 0 and w.prefix_share > 0:
        hit = rng.random(n) < w.prefix_share
        pre = np.where(hit, np.minimum(w.prefix_len, inp), 0).astype(np.int64)
    else:
        pre = np.zeros(n, dtype=np.int64)
    return inp, out, pre
