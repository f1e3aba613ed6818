"""The async load runner: one event loop, one aiohttp session, requests sent at their scheduled times.

Timing rules (why the numbers can be trusted):

* Every request gets three client-side instants on this process's monotonic clock:
  ``t_scheduled_ns`` (t0 + planned offset), ``tags["t_slot_ns"]`` (a concurrency slot was free and
  the request was handed to the client) and ``t_start_ns`` (set by the API client just before the
  HTTP stack). **Client queue time** = ``t_slot − t_scheduled`` (the ``--max-concurrency`` cap held
  it back; vLLM's ``client_queue_time``) and **send lag** = ``t_start − max(t_scheduled, t_slot)``
  (the client was late: timer resolution, a busy loop). TTFT/E2E start at ``t_start`` as in
  ``vllm bench serve``, so neither is inside the server latencies.
* Records go to the run's sink (:class:`~phasescope.measure.records.RecordSink`, given by
  :func:`phasescope.lifecycle.run_output`: the ``--out`` JSONL and/or the run store, flushed per record,
  fsync every 0.5 s) through a :class:`~phasescope.measure.records.ThreadedSink`, so disk I/O never
  blocks the event loop, and each record is on disk as soon as its request completes. The runner
  never knows where records land; a write failure (a full disk) stops sending there. (Serializing one record
  holds the GIL for well under Python's 5 ms switch interval; lowering the interval to 0.2 ms was
  tried and measured no better — slightly worse at 128 streams — so it is left alone.)
* The runner watches itself (:class:`phasescope.load.health.HealthMonitor`): event-loop lag sampled every 10 ms, process
  CPU time over wall time, and send lag; :func:`~phasescope.load.health.health_warnings` turns them into warnings that say
  what to change, in the spirit of hyperfine's warnings.
* The cyclic garbage collector is paused for the measured phase (:class:`phasescope.load.loop.QuietGC`): with every
  record kept in memory, a full collection at 1,024 streams took 116 ms and young ones up to 14 ms,
  each a stall of the loop that reads events (the p99 of TTFT and ITL); reference counting still
  frees everything that is not a cycle, and a valve collects the young generation if cycles pile up.
* Stop conditions: schedule exhausted, ``duration_s`` elapsed (no new sends; in-flight requests
  finish), ``stop`` event set (Ctrl-C: in-flight requests are cancelled), or the server looks dead
  (``abort_after_errors`` consecutive connection-level failures) — always leaving a partial result.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Sequence

from phasescope.apis import Session
from phasescope.apis.base import GenRequest, Target
from phasescope.errors import error_kind
from phasescope.load.health import HealthMonitor, RunnerHealth
from phasescope.load.loop import QuietGC
from phasescope.load.schedule import Schedule, ScheduledRequest
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import RecordSink, RequestRecord, ThreadedSink
from phasescope.redact import from_server

SendFn = Callable[[Session, Target, GenRequest], Awaitable[RequestRecord]]
OnRecord = Callable[[RequestRecord], None]

#: error kinds that mean "the server is not there any more" (used for the dead-server stop)
CONNECTION_ERRORS = frozenset({"connect", "connect_timeout", "stream_broken"})
#: error kinds that mean "the server stopped answering": a frozen server (SIGSTOP) times out every
#: request, a broken one ends streams without a token; counted with CONNECTION_ERRORS for the stop
STREAM_FAILURES = CONNECTION_ERRORS | frozenset({"first_token_timeout", "inter_token_timeout", "deadline",
                                                 "malformed_event", "server_error_event", "no_token", "overrun"})
_TIMEOUTS = frozenset({"connect_timeout", "first_token_timeout", "inter_token_timeout", "deadline"})


@dataclass
class RunResult:
    """What one runner (one process) did. ``records`` excludes warm-ups."""

    records: list[RequestRecord] = field(default_factory=list)
    warmup_records: list[RequestRecord] = field(default_factory=list)
    t0_ns: int = 0
    wall_t0_ns: int = 0
    t_end_ns: int = 0
    scheduled: int = 0
    sent: int = 0
    cancelled: int = 0
    aborted: str | None = None  # why the run stopped early (dead server)
    interrupted: bool = False  # Ctrl-C / stop event
    hit_duration: bool = False
    health: RunnerHealth = field(default_factory=RunnerHealth)
    worker: str | None = None
    write_error: str | None = None  # a record could not be written: the run stopped there

    @property
    def partial(self) -> bool:
        return self.interrupted or self.aborted is not None


def make_request(item: WorkItem, sr: ScheduledRequest, *, run_id: str, ignore_eos: bool = True,
                 extra_body: dict[str, Any] | None = None) -> GenRequest:
    out_len = sr.output_len if sr.output_len is not None else item.output_len
    prefix = "w" if sr.warmup else ""
    return GenRequest(
        prompt=item.prompt,
        max_tokens=out_len,
        prompt_token_ids=item.prompt_token_ids,
        prompt_tokens_expected=item.input_len,
        stream=True,
        ignore_eos=ignore_eos,
        id=f"{run_id}-{prefix}{sr.index}",
        tags={"index": sr.index, "item": sr.item, "prompt_source": item.input_len_source,
              **({"group": item.group} if item.group is not None else {})},
        extra_body=dict(extra_body or {}),
    )


def new_session(limit: int = 0) -> Any:
    """One session for the whole run (the API clients' session: pre-transfer trace hook, per-request
    timeouts). ``limit=0``: no connection-pool cap — aiohttp's default of 100 silently queues
    streams above 100 and inflates TTFT (gpustack PR #2324)."""
    from phasescope.apis import new_session as api_session
    from phasescope.apis import raw_path_enabled

    # the raw receive path when httptools is installed (issue 22: aiohttp's per-event wake-up is
    # most of one core's CPU at 1,000+ streams); PHASESCOPE_HTTPTOOLS=0 keeps aiohttp's
    return api_session(limit=limit, fast=raw_path_enabled())


async def run_load(
    schedule: Schedule,
    items: Sequence[WorkItem],
    target: Target,
    *,
    send: SendFn,
    max_concurrency: int | None = None,
    writer: RecordSink | None = None,
    on_record: OnRecord | None = None,
    stop: asyncio.Event | None = None,
    worker: str | None = None,
    run_id: str = "run",
    session: Session | None = None,
    start_gate: Callable[[], Awaitable[int]] | None = None,
    abort_after_errors: int = 8,
    drain_timeout_s: float | None = None,
    ignore_eos: bool = True,
    extra_body: dict[str, Any] | None = None,
    prewarm_connections: int = 0,
) -> RunResult:
    """Send ``schedule`` (items indexed by ``ScheduledRequest.item``) and return every record.

    ``writer``: the run's :class:`~phasescope.measure.records.RecordSink`; every record (warm-ups
    too) is handed to it, on a thread, as its request completes.
    ``start_gate``: awaited after the warm-ups; returns t0 on this process's ``now_ns`` clock
    (multi-process runs align their t0 on the wall clock through it). Default: now.
    ``drain_timeout_s``: after a ``duration_s`` stop, in-flight requests get this long to finish
    before being cancelled (None = wait for them).
    ``prewarm_connections``: open this many keep-alive connections before t0 (see :func:`prewarm`).
    """
    if not items:
        raise ValueError("no workload items")
    res = RunResult(worker=worker)
    stop = stop or asyncio.Event()
    own_session = session is None
    sess = session or new_session()
    loop_ = asyncio.get_running_loop()

    def write_failed(why: str) -> None:  # on the writer thread: stop sending at once
        loop_.call_soon_threadsafe(stop.set)

    bw = ThreadedSink(writer, on_error=write_failed)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    send_lags: list[int] = []
    conn_watch = ConnectionWatch(abort_after_errors)
    in_flight: set[asyncio.Task[None]] = set()
    quiet_gc = QuietGC()
    monitor = HealthMonitor(quiet_gc=quiet_gc)

    async def one(sr: ScheduledRequest, sched_ns: int, holding: bool) -> None:
        if sem is not None and not holding:
            await sem.acquire()
        t_slot = now_ns()
        item = items[sr.item % len(items)]
        req = make_request(item, sr, run_id=run_id, ignore_eos=ignore_eos, extra_body=extra_body)
        try:
            rec = await send_recorded(send, sess, target, req, t_slot)
        finally:
            if sem is not None:
                sem.release()
        rec.t_scheduled_ns = sched_ns
        rec.tags = {**req.tags, **(rec.tags or {}), "t_slot_ns": t_slot}
        if sr.warmup:
            rec.tags["warmup"] = True
        rec.worker = worker
        if not sr.warmup:
            send_lags.append(max(0, rec.t_start_ns - max(sched_ns, t_slot)))
            if conn_watch.see(rec, res):
                stop.set()
            res.records.append(rec)
        else:
            res.warmup_records.append(rec)
        bw.put(rec)
        if on_record is not None and not sr.warmup:
            on_record(rec)

    def spawn(sr: ScheduledRequest, sched_ns: int, holding: bool) -> None:
        t = asyncio.get_running_loop().create_task(one(sr, sched_ns, holding))
        in_flight.add(t)
        t.add_done_callback(in_flight.discard)

    try:
        # warm-ups: before t0, capped like the run, all finished before measuring starts
        for w in schedule.warmups:
            if stop.is_set():
                break
            spawn(w, now_ns(), False)
        if in_flight:
            await _wait_or_stop(set(in_flight), stop)
        if stop.is_set():
            res.interrupted = res.aborted is None
            return res

        if prewarm_connections > 0 and not stop.is_set():
            for ep in getattr(target, "endpoints", None) or [target]:  # every endpoint of a routed target
                await prewarm(sess, ep, prewarm_connections)
        t0 = await start_gate() if start_gate is not None else now_ns()
        res.t0_ns = t0
        res.wall_t0_ns = wall_ns() - (now_ns() - t0)
        quiet_gc.start()
        monitor.start()
        dur_ns = int(schedule.duration_s * 1e9) if schedule.duration_s else None
        closed = sem is not None
        stop_wait = asyncio.get_running_loop().create_task(stop.wait())
        try:
            for sr in schedule.iter_requests():
                if stop.is_set():
                    break
                sched = t0 + int(sr.offset_s * 1e9)
                delay = sched - now_ns()
                if delay > 0:
                    await asyncio.wait({stop_wait}, timeout=delay / 1e9)
                    if stop.is_set():
                        break
                if dur_ns is not None and now_ns() - t0 >= dur_ns:
                    res.hit_duration = True
                    break
                holding = False
                if closed and sr.offset_s == 0.0 and sem is not None:
                    # closed loop: wait for a slot here so tasks are created only as slots free up
                    acq = asyncio.get_running_loop().create_task(sem.acquire())
                    done, _ = await asyncio.wait({acq, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                    if acq not in done:
                        acq.cancel()
                        try:
                            await acq
                        except asyncio.CancelledError:
                            pass
                        else:
                            sem.release()
                        break
                    holding = True
                    if dur_ns is not None and now_ns() - t0 >= dur_ns:
                        sem.release()
                        res.hit_duration = True
                        break
                res.scheduled += 1
                spawn(sr, sched, holding)
                res.sent += 1
                # let the new task start before scheduling more (keeps send order = schedule order)
                await asyncio.sleep(0)
            # drain
            if in_flight and not stop.is_set():
                timeout = drain_timeout_s if res.hit_duration else None
                await _wait_or_stop(set(in_flight), stop, timeout)
        finally:
            stop_wait.cancel()
        if stop.is_set():
            res.interrupted = res.aborted is None
            if res.aborted is not None and in_flight:
                # a dead server fails the rest quickly; give them a moment to record their errors
                await _wait_or_stop(set(in_flight), asyncio.Event(), 5.0)
    finally:
        try:
            await wind_down(res, in_flight, monitor, send_lags, bw, sess)
        finally:
            quiet_gc.stop()
        if own_session:
            await sess.close()
    return res


async def send_recorded(send: Any, session: Session, target: Target, req: GenRequest,
                        t_slot: int) -> RequestRecord:
    """``send(session, target, req)``; a client-side exception becomes a failed record started at
    ``t_slot`` (a client bug must still leave a record). Cancellation passes through."""
    try:
        return await send(session, target, req)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return RequestRecord(id=req.id or "", api=target.api, target=target.display_url, model=target.model,
                             t_start_ns=t_slot, wall_start_ns=wall_ns(), ok=False,
                             error_kind=error_kind(exc), error_message=from_server(f"{type(exc).__name__}: {exc}",
                                                                                     one_line=True))


class ConnectionWatch:
    """Gives up on a server that keeps failing: ``limit`` measured requests in a row failing to
    connect, cut mid-stream, timing out or ending without a token (``STREAM_FAILURES``) set
    ``res.aborted`` with the last one's error; a success resets it. Refusals (HTTP 4xx/5xx, 429) are
    answers, not a dead server: they neither count nor reset."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0

    def see(self, rec: RequestRecord, res: "RunResult") -> bool:
        """Count ``rec``; True when the run must stop now (it just gave up)."""
        if not rec.ok and rec.error_kind in STREAM_FAILURES:
            self.in_a_row += 1
            if self.in_a_row >= self.limit and res.aborted is None:
                # what failed is the evidence: refused connections, timeouts, or streams cut after
                # tokens came back (that server did answer), so the sentence claims no more than that
                what = ("timed out: the server stopped answering" if rec.error_kind in _TIMEOUTS else "failed")
                res.aborted = (f"the server failed {self.in_a_row} requests in a row "
                               f"({rec.error_kind}: {rec.error_message or 'no detail'})"
                               if what == "failed" else
                               f"{self.in_a_row} requests in a row {what} "
                               f"({rec.error_kind}: {rec.error_message or 'no detail'})")
                return True
        elif rec.ok:
            self.in_a_row = 0
        return False


async def wind_down(res: RunResult, in_flight: Iterable[asyncio.Task[Any]], monitor: "HealthMonitor",
                    send_lags: list[int], sink: ThreadedSink, session: Any = None) -> None:
    """The end of every load run, stopped or not: cancel what is still in flight (counted in
    ``res.cancelled``), stamp the end, take the runner's health, and wait until every record reached
    the sink — a write failure makes the run ``aborted`` with why (the records before it are on disk)."""
    pending = [t for t in in_flight if not t.done()]
    res.cancelled = len(pending)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    res.t_end_ns = now_ns()
    res.health = await monitor.stop(send_lags) if monitor._task is not None else RunnerHealth()
    if session is not None:
        pool = getattr(session, "fast_pool", None)  # the path the streams took (Ollama's NDJSON: aiohttp's)
        res.health.receive_path = "raw" if pool is not None and pool.streams else "aiohttp"
    sink.close()
    if sink.error is not None:
        res.write_error = sink.error
        res.aborted = res.aborted or f"stopped: {sink.error}"
        res.interrupted = False


#: most connections opened before t0 (was 512: at ``-c 1024`` the other 512 connects ran inside the
#: first wave's TTFTs — issue 22's profile: ~15 % of the client's CPU, connects of up to 46 ms)
PREWARM_CAP = 4096


def prewarm_count(schedule: Schedule, max_concurrency: int | None, cap: int = PREWARM_CAP) -> int:
    """Connections the first second needs: the cap, else the requests scheduled in the first second
    (all for ``rate=inf``); at most ``cap`` and what the open-file limit leaves (64 kept back)."""
    cap = min(cap, _fd_room())
    if max_concurrency:
        return min(max_concurrency, cap)
    first = sum(1 for r in schedule.requests if r.offset_s < 1.0)
    return min(max(first, 1), cap)


def _fd_room(keep: int = 64) -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return PREWARM_CAP
    return PREWARM_CAP if soft == resource.RLIM_INFINITY or soft < 0 else max(1, int(soft) - keep)


async def prewarm(session: Session, target: Target, n: int, timeout_s: float = 10.0) -> int:
    """Open ``n`` keep-alive connections before t0 (:func:`phasescope.apis.warm_up`), so TCP connects
    of a burst's first wave are not inside its TTFTs (the client's cost, not the server's; AIPerf's
    first-request TTFT includes ~15 ms of connect, peers.md §2). Failures are ignored."""
    from phasescope.apis import warm_up

    return await warm_up(session, target, n, timeout_s)


async def _wait_or_stop(tasks: set[asyncio.Task[None]], stop: asyncio.Event, timeout: float | None = None) -> None:
    """Wait for ``tasks`` until all are done, ``stop`` is set or ``timeout`` passes."""
    if not tasks:
        return
    stopper = asyncio.get_running_loop().create_task(stop.wait())
    try:
        pending = set(tasks)
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending and not stop.is_set():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                break
            done, pending = await asyncio.wait(pending | {stopper}, timeout=left,
                                               return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stopper)
            if not done:
                break
    finally:
        stopper.cancel()
