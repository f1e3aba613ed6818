"""The skeleton every session workload shares: conversations (:mod:`.conversation`) and agentic sessions
(:mod:`.agentic`) differ only in what one session sends.

:class:`SessionRun` owns the rest, once: the records (measured and warm-up) and the run's sink, fed on a
background thread as each request completes; the connection watch that aborts a run after
``abort_after_errors`` refused connections; warm-ups (one short single-message request each, before t0);
prewarmed connections; the start clock (``start_gate``); closed-loop users (each runs sessions back to back)
or open-loop arrivals (each session at its offset); the duration (no request starts after it, in-flight ones
get ``drain_timeout_s``); Ctrl-C or a stop (a partial result); and the wind-down.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Coroutine, Sequence

from phasescope.apis import Session, registry
from phasescope.apis.base import GenRequest, Target
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import RequestRecord

SendFn = Callable[[Session, Target, GenRequest], Awaitable[RequestRecord]]


async def wait_for_tasks(tasks: set[asyncio.Task[Any]], stop: asyncio.Event, timeout: float | None) -> None:
    """Wait until every task in ``tasks`` (a set the sessions may still add to) is done, ``stop`` is set, or
    ``timeout`` seconds pass (None: no limit)."""
    loop = asyncio.get_running_loop()
    pending = {t for t in tasks if not t.done()}
    if not pending:
        return
    stopper = loop.create_task(stop.wait())
    deadline = None if timeout is None else loop.time() + timeout
    try:
        while pending and not stop.is_set():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            await asyncio.wait(pending | {stopper}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            pending = {t for t in tasks if not t.done()}
    finally:
        stopper.cancel()


class SessionRun:
    """One session workload's run (module docstring). A workload's session body calls :meth:`send`,
    :meth:`done`, :meth:`pause` and :meth:`past_duration`; :meth:`run` does the rest."""

    def __init__(self, target: Target, *, send: SendFn, writer: Any = None,
                 on_record: Callable[[RequestRecord], None] | None = None, stop: asyncio.Event | None = None,
                 abort_after_errors: int = 8, duration_s: float | None = None) -> None:
        from phasescope.load.health import HealthMonitor
        from phasescope.load.runner import ConnectionWatch, RunResult, new_session
        from phasescope.measure.records import ThreadedSink

        self.res = RunResult()
        self.stop = stop or asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.sink = ThreadedSink(writer, on_error=lambda why: self.loop.call_soon_threadsafe(self.stop.set))
        self.monitor = HealthMonitor()
        self.send_lags: list[int] = []
        self.conn_watch = ConnectionWatch(abort_after_errors)
        chat = registry.find(target.api)
        #: tags every request of the run carries (Ollama's /api/chat: ``ollama_chat``)
        self.chat_tags: dict[str, Any] = dict(chat.chat_tags) if chat is not None else {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.http = new_session()
        self.t0 = 0
        self._send_fn, self._target, self._on_record, self._duration_s = send, target, on_record, duration_s

    def done(self, rec: RequestRecord, warm: bool = False) -> None:
        """Keep a finished request: in the result, on disk (background thread), and for the run's watchers."""
        res = self.res
        (res.warmup_records if warm else res.records).append(rec)
        if not warm:
            self.send_lags.append(max(0, rec.t_start_ns - (rec.t_scheduled_ns or rec.t_start_ns)))
            if self.conn_watch.see(rec, res):
                self.stop.set()
        self.sink.put(rec)
        if self._on_record is not None and not warm:
            self._on_record(rec)

    async def send(self, req: GenRequest) -> RequestRecord:
        """Send one request, scheduled now; the record carries the request's tags and ``t_slot_ns``."""
        from phasescope.load.runner import send_recorded

        t_slot = now_ns()
        rec = await send_recorded(self._send_fn, self.http, self._target, req, t_slot)
        rec.t_scheduled_ns = t_slot
        rec.tags = {**req.tags, **(rec.tags or {}), "t_slot_ns": t_slot}
        return rec

    async def pause(self, seconds: float) -> bool:
        """Sleep, or return False at once when the run stops."""
        if seconds <= 0:
            return not self.stop.is_set()
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
            return False
        except asyncio.TimeoutError:
            return True

    def past_duration(self) -> bool:
        """True (and the result says so) once ``duration_s`` has passed since t0."""
        if self._duration_s is not None and now_ns() - self.t0 >= self._duration_s * 1e9:
            self.res.hit_duration = True
            return True
        return False

    def ended(self) -> bool:
        """The run stopped or its duration passed: start nothing new."""
        return self.stop.is_set() or self.past_duration()

    async def run(self, sessions: Sequence[Any], body: Callable[[Any], Coroutine[Any, Any, None]], *, users: int,
                  offsets_s: Sequence[float] | None = None, warmups: Sequence[WorkItem] = (), run_id: str = "run",
                  ignore_eos: bool = True, start_gate: Callable[[], Awaitable[int]] | None = None,
                  prewarm_connections: int = 0, drain_timeout_s: float | None = 60.0) -> Any:
        """Warm up, start the clock, run ``body`` over the sessions (``users`` closed-loop users, or each
        session at its offset in ``offsets_s`` from t0), drain, wind down; return the RunResult."""
        from phasescope.load.runner import prewarm, wind_down

        res, stop = self.res, self.stop
        try:
            for i, w in enumerate(warmups):
                if stop.is_set():
                    break
                req = GenRequest(prompt=w.prompt, max_tokens=w.output_len, stream=True, ignore_eos=ignore_eos,
                                 id=f"{run_id}-w{i}", tags={**self.chat_tags, "warmup": True})
                rec = await self.send(req)
                rec.tags.pop("reply_text", None)
                self.done(rec, True)
            if stop.is_set():
                res.interrupted = res.aborted is None
                return res
            if prewarm_connections > 0:
                await prewarm(self.http, self._target, prewarm_connections)
            self.t0 = await start_gate() if start_gate is not None else now_ns()
            res.t0_ns = self.t0
            res.wall_t0_ns = wall_ns() - (now_ns() - self.t0)
            self.monitor.start()
            if offsets_s is not None:  # open loop: each session at its offset
                for sp, off in zip(sessions, offsets_s):
                    delay = self.t0 + int(off * 1e9) - now_ns()
                    if delay > 0 and not await self.pause(delay / 1e9):
                        break
                    if self.ended():
                        break
                    self.tasks.add(self.loop.create_task(body(sp)))
            else:
                queue = list(sessions)

                async def closed_user() -> None:
                    while queue and not self.ended():
                        await body(queue.pop(0))

                for _ in range(min(users, len(queue))):
                    self.tasks.add(self.loop.create_task(closed_user()))
            left = None
            if self._duration_s is not None and drain_timeout_s is not None:
                # no request starts after the duration; in-flight ones get the drain time
                left = max(0.0, self._duration_s - (now_ns() - self.t0) / 1e9) + drain_timeout_s
            await wait_for_tasks(self.tasks, stop, left)
            if stop.is_set():
                res.interrupted = res.aborted is None
        finally:
            await wind_down(res, self.tasks, self.monitor, self.send_lags, self.sink, self.http)
            await self.http.close()
        return res
