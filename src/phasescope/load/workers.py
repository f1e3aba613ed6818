"""``--workers N``: one schedule spread over N processes on this machine, records merged exactly.

Why: one asyncio loop saturates a CPU core long before a server saturates (peers.md §3.4:
guidellm#487, inference-perf#86, mlc-llm PR #2727); past that, the client's own delay leaks into
TTFT/ITL. Each worker is a separate process with its own event loop, aiohttp session and record
file (``records/worker-<i>.jsonl``).

Records: a worker's sink is its own file (a :class:`~phasescope.measure.records.RecordWriter`,
flushed per record). The parent follows every worker's file as it grows (complete lines only; every
50 ms) and writes each new record to the run's sink (:func:`phasescope.lifecycle.run_output`: the store
and/or ``--out``) at once, so the run's JSONL grows as the run goes, in arrival order, and Ctrl-C leaves
it usable. A file, not a pipe, because a worker killed mid-write (OOM, ``kill -9``) can only leave a
partial last line in its own file — which is skipped — where a half-written message in a shared pipe
would corrupt every other worker's; the worker's death marks the run partial and everything it finished
is in the run. Ctrl-C belongs to the parent (:func:`phasescope.signals.ignore_sigint` in each worker),
which tells the workers to stop through an event.

Clocks: every duration is a difference of one process's ``perf_counter_ns`` readings, never
across processes. Processes are aligned only on the wall clock: the parent picks a wall-clock
start ``t0_wall`` once every worker has imported and sent its warm-ups; each worker converts it
to its own monotonic clock (``t0 = now_ns() + (t0_wall − wall_ns())``). Summaries of merged
records place each request on the wall clock through ``wall_start_ns`` (see
:func:`phasescope.load.summary.summarize`).

Split: request ``i`` goes to worker ``i % N`` with its offset unchanged (so the union of sends is
the schedule); a ``--max-concurrency`` cap C is split as evenly as possible (C // N, +1 for the
first C % N workers), so the total in flight never exceeds C.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import multiprocessing as mp
import queue as queue_mod
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from phasescope.apis.base import Target
from phasescope.errors import InputError, TargetError
from phasescope.load.health import RunnerHealth
from phasescope.load.runner import RunResult, SendFn, run_load
from phasescope.load.schedule import Schedule
from phasescope.load.workload import WorkItem
from phasescope.measure.aggregate import is_measured
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.derive import itl_s, ttft_s
from phasescope.measure.records import RecordSink, RecordWriter, RequestRecord

#: progress messages from workers: (ok, ttft_s | None, mean per-token itl_s | None, error_kind | None)
Progress = tuple[bool, "float | None", "float | None", "str | None"]


def split_concurrency(cap: int | None, n: int) -> list[int | None]:
    if cap is None:
        return [None] * n
    if cap < n:
        raise InputError(f"--max-concurrency {cap} is smaller than --workers {n}; each worker needs at least one slot")
    return [cap // n + (1 if i < cap % n else 0) for i in range(n)]


def resolve_send(send_ref: str | None, target: Target) -> SendFn:
    """``None`` → the client for ``target.api``; ``"pkg.mod:attr"`` → that function (tests, fault injection)."""
    if send_ref is None:
        from phasescope.apis import get_client

        return get_client(target.api).send  # type: ignore[no-any-return]
    mod, _, attr = send_ref.partition(":")
    return getattr(importlib.import_module(mod), attr or "send")  # type: ignore[no-any-return]


def progress_of(rec: RequestRecord) -> Progress:
    itls = itl_s(rec) if rec.ok else []
    return (rec.ok, ttft_s(rec) if rec.ok else None, (sum(itls) / len(itls)) if itls else None, rec.error_kind)


def _worker_main(idx: int, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None, path: str,
                 run_id: str, send_ref: str | None, kw: dict[str, Any], ready_q: Any, go: Any, t0_wall: Any,
                 stop_ev: Any, result_q: Any) -> None:
    from phasescope.signals import ignore_sigint

    ignore_sigint()  # the parent owns Ctrl-C and tells us via stop_ev
    try:
        from phasescope.load.loop import run_async

        res = run_async(_worker_async(idx, part, items, target, cap, path, run_id, send_ref, kw, ready_q, go,
                                        t0_wall, stop_ev))
        result_q.put((idx, _result_meta(res), None))
    except BaseException as exc:  # report, never hang the parent
        result_q.put((idx, None, f"{type(exc).__name__}: {exc}"))


async def _worker_async(idx: int, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None,
                        path: str, run_id: str, send_ref: str | None, kw: dict[str, Any], ready_q: Any, go: Any,
                        t0_wall: Any, stop_ev: Any) -> RunResult:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    async def watch_stop() -> None:
        # poll, never block on the mp.Event: a process that exits while waiting on it would
        # deadlock the parent's Event.set() (multiprocessing.Condition waits for acknowledgements)
        while not stop_ev.is_set():
            await asyncio.sleep(0.05)
        stop.set()

    watcher = loop.create_task(watch_stop())

    async def gate() -> int:
        ready_q.put(idx)
        while not await loop.run_in_executor(None, go.wait, 0.2):
            pass
        return now_ns() + (int(t0_wall.value) - wall_ns())

    try:
        with RecordWriter(path) as own:  # the parent follows this file (module docstring)
            return await run_load(part, items, target, send=resolve_send(send_ref, target), max_concurrency=cap,
                                  writer=own, stop=stop, worker=f"w{idx}",
                                  run_id=f"{run_id}-w{idx}", start_gate=gate, **kw)
    finally:
        watcher.cancel()


class _Follow:
    """The records appended to a worker's JSONL since the last :meth:`read` (complete lines only: a
    line still being written, or cut by a killed worker, waits — and is never taken)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None
        self._buf = b""

    def read(self) -> list[RequestRecord]:
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except FileNotFoundError:
                return []
        lines = (self._buf + self._fh.read()).split(b"\n")
        self._buf = lines.pop()
        out = []
        for ln in lines:
            try:
                d = json.loads(ln.decode("utf-8", "replace"))
                out.append(RequestRecord.from_dict(d))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def _result_meta(res: RunResult) -> dict[str, Any]:
    return {"t0_ns": res.t0_ns, "wall_t0_ns": res.wall_t0_ns, "t_end_ns": res.t_end_ns, "scheduled": res.scheduled,
            "sent": res.sent, "cancelled": res.cancelled, "aborted": res.aborted, "interrupted": res.interrupted,
            "hit_duration": res.hit_duration, "health": asdict(res.health)}


def run_workers(
    schedule: Schedule,
    items: Sequence[WorkItem],
    target: Target,
    *,
    n_workers: int,
    records_dir: str | Path,
    max_concurrency: int | None = None,
    run_id: str = "run",
    send_ref: str | None = None,
    sink: RecordSink | None = None,
    on_progress: Callable[[RequestRecord], None] | None = None,
    stop: threading.Event | None = None,
    on_start: Callable[[], None] | None = None,
    ready_timeout_s: float = 120.0,
    **kw: Any,
) -> RunResult:
    """Run ``schedule`` over ``n_workers`` processes; blocks until all finish (or ``stop``).

    ``kw`` goes to :func:`run_load` (``abort_after_errors``, ``drain_timeout_s``, ``ignore_eos``,
    ``extra_body``). Records land in ``records_dir/worker-<i>.jsonl`` and in ``sink`` as they arrive
    (module docstring); ``on_progress`` gets each measured one. They come back merged in wall-clock order.
    A write failure of ``sink`` (a full disk) stops the workers and is ``write_error``.
    """
    if n_workers < 1:
        raise InputError("--workers must be at least 1")
    caps = split_concurrency(max_concurrency, n_workers)
    parts = schedule.partition(n_workers)
    rdir = Path(records_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    ready_q, result_q = ctx.Queue(), ctx.Queue()
    go, stop_ev = ctx.Event(), ctx.Event()
    t0_wall = ctx.Value("q", 0)
    paths = [rdir / f"worker-{i}.jsonl" for i in range(n_workers)]
    for path in paths:  # a reused folder must not mix runs (RecordWriter appends)
        path.unlink(missing_ok=True)
    procs = [
        ctx.Process(target=_worker_main, name=f"phasescope-bench-w{i}", daemon=True,
                    args=(i, parts[i], list(items), target, caps[i], str(paths[i]), run_id, send_ref, kw, ready_q,
                          go, t0_wall, stop_ev, result_q))
        for i in range(n_workers)
    ]
    from phasescope.signals import children_start_deaf

    with children_start_deaf():  # a Ctrl-C while they boot must not kill one half-started
        for p in procs:
            p.start()
    metas: dict[int, dict[str, Any]] = {}
    failures: list[str] = []
    follow = [_Follow(p) for p in paths]
    records: list[RequestRecord] = []
    write_error: list[str] = []

    def take(rec: RequestRecord) -> None:
        records.append(rec)
        if sink is not None and not write_error:
            try:
                sink.write(rec)
            except Exception as exc:  # noqa: BLE001 - a full disk stops the run; what reached disk stays
                from phasescope.errors import PhasescopeError
                from phasescope.safeio import os_cause

                write_error.append(str(exc) if isinstance(exc, PhasescopeError) else
                                   f"cannot write records to {getattr(exc, 'ps_path', None) or 'the records file'}: "
                                   f"{os_cause(exc)}")
                stop_ev.set()
        if on_progress is not None and not (rec.tags or {}).get("warmup"):
            on_progress(rec)

    def pump(block_s: float) -> None:
        if block_s:
            time.sleep(block_s)
        for f in follow:
            for rec in f.read():
                take(rec)

    def drain_results() -> None:
        while True:
            try:
                i, meta, err = result_q.get_nowait()
            except queue_mod.Empty:
                return
            if err is not None:
                failures.append(f"worker {i}: {err}")
                metas[i] = {}
            else:
                metas[i] = meta

    try:
        # wait until every worker is imported and warmed up, then start all at one wall instant
        ready: set[int] = set()
        deadline = time.monotonic() + ready_timeout_s
        while len(ready) + len(metas) < n_workers:
            drain_results()
            if stop is not None and stop.is_set():
                break
            try:
                ready.add(ready_q.get(timeout=0.1))
            except queue_mod.Empty:
                if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                    break
        pump(0.0)  # warm-up records
        if on_start is not None:
            on_start()
        t0_wall.value = wall_ns() + 50_000_000  # 50 ms ahead so every worker sees it before t0
        go.set()
        while len(metas) < n_workers:
            if stop is not None and stop.is_set():
                stop_ev.set()
            pump(0.05)
            drain_results()
            if len(metas) < n_workers and not any(p.is_alive() for p in procs):
                drain_results()
                if len(metas) < n_workers:
                    failures.append("a worker process died without a result")
                    break
        pump(0.0)
    finally:
        go.set()
        stop_ev.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        pump(0.0)
        for f in follow:
            f.close()

    res = RunResult(worker=None)
    records.sort(key=lambda r: r.wall_start_ns)
    res.records = [r for r in records if is_measured(r)]
    res.warmup_records = [r for r in records if not is_measured(r)]
    healths = []
    for m in metas.values():
        if not m:
            continue
        res.scheduled += m["scheduled"]
        res.sent += m["sent"]
        res.cancelled += m["cancelled"]
        res.aborted = res.aborted or m["aborted"]
        res.interrupted = res.interrupted or m["interrupted"]
        res.hit_duration = res.hit_duration or m["hit_duration"]
        healths.append(RunnerHealth(**m["health"]))
        res.wall_t0_ns = m["wall_t0_ns"] if not res.wall_t0_ns else min(res.wall_t0_ns, m["wall_t0_ns"])
    res.health = RunnerHealth.merge(healths)
    if stop is not None and stop.is_set() and res.aborted is None:
        res.interrupted = True
    if failures:
        if not records:
            raise TargetError("bench workers failed: " + "; ".join(failures))
        res.aborted = res.aborted or "; ".join(failures)
    if write_error:
        res.write_error = write_error[0]
        res.aborted = res.aborted or f"stopped: {write_error[0]}"
        res.interrupted = False
    return res
