"""The Ray actor: one ordinary async runner (:func:`phasescope.load.runner.run_load`) in a Ray worker process.

A plain class; :func:`phasescope.load.ray.driver.run_ray` wraps it with ``ray.remote()`` at run time,
so importing this module needs no Ray. The driver calls its methods (a threaded actor): ``info`` and
``ping`` (clock alignment, :mod:`phasescope.load.ray.clock`), ``start`` (the runner on its own event
loop in its own thread, with its own aiohttp session — exactly the single-process code path), ``go``
(t0 on this actor's clock), ``poll`` (records completed since the last poll) and ``stop``.

Every record (warm-ups too) goes, the moment its request completes, to the runner's sink: a
:class:`~phasescope.measure.records.QueueSink` the driver drains through ``poll``; the driver writes it
to the run's sink (:func:`phasescope.lifecycle.run_output`). Requests in flight are tracked so that a
dead actor's unfinished requests can be recorded as ``worker_lost`` by the driver.
"""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import threading
from typing import Any, Sequence

from phasescope.apis.base import Target
from phasescope.load.runner import run_load
from phasescope.load.schedule import Schedule
from phasescope.load.workers import _result_meta, resolve_send
from phasescope.load.workload import WorkItem
from phasescope.measure.clock import now_ns
from phasescope.measure.records import QueueSink, RequestRecord

POLL_S = 0.1  #: longest an actor holds a completed record before the driver has it


class LoadActor:
    """One async runner in a Ray worker process. Methods are called by the driver (threaded actor)."""

    def __init__(self, idx: int, name: str) -> None:
        self.idx = idx
        self.name = name
        self._q: "queue.SimpleQueue[RequestRecord]" = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._astop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._go = threading.Event()
        self._stop_req = threading.Event()
        self._t0: int | None = None
        self._thread: threading.Thread | None = None
        self._meta: dict[str, Any] | None = None
        self._error: str | None = None
        self._finished = threading.Event()
        self._in_flight: set[int] = set()
        self._sent = 0

    def ping(self) -> int:
        return now_ns()

    def info(self) -> dict[str, Any]:
        import platform

        from phasescope import _version

        try:
            import ray

            ip = ray.util.get_node_ip_address()
            node_id = ray.get_runtime_context().get_node_id()
            ray_version = ray.__version__
        except Exception:  # pragma: no cover - inside an actor ray is importable
            ip, node_id, ray_version = None, None, None
        return {"name": self.name, "node_ip": ip, "node_id": node_id, "hostname": socket.gethostname(), "pid": os.getpid(),
                "phasescope": _version.__version__, "ray": ray_version, "python": platform.python_version(),
                "cpu_count": os.cpu_count()}

    def start(self, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None, run_id: str,
              send_ref: str | None, kw: dict[str, Any]) -> None:
        self._thread = threading.Thread(target=self._run, args=(part, items, target, cap, run_id, send_ref, kw),
                                        name=f"phasescope-{self.name}", daemon=True)
        self._thread.start()

    def _run(self, *args: Any) -> None:
        try:
            self._meta = asyncio.run(self._main(*args))
        except BaseException as exc:  # reported through poll(), never lost
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._ready.set()
            self._finished.set()

    async def _main(self, part: Schedule, items: Sequence[WorkItem], target: Target, cap: int | None, run_id: str,
                    send_ref: str | None, kw: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._astop = asyncio.Event()
        if self._stop_req.is_set():
            self._astop.set()
        base = resolve_send(send_ref, target)

        async def tracked(session: Any, tgt: Target, req: Any) -> RequestRecord:
            idx = (req.tags or {}).get("index")
            measured = idx is not None and not str(req.id or "").endswith(f"-w{idx}")
            if measured:
                self._in_flight.add(int(idx))
                self._sent += 1
            try:
                return await base(session, tgt, req)  # type: ignore[no-any-return]
            finally:
                if measured:
                    self._in_flight.discard(int(idx))

        async def gate() -> int:
            self._ready.set()
            while not await loop.run_in_executor(None, self._go.wait, 0.2):
                pass
            return self._t0 if self._t0 is not None else now_ns()

        res = await run_load(part, items, target, send=tracked, max_concurrency=cap,
                             writer=QueueSink(self._q), stop=self._astop,
                             worker=self.name, run_id=run_id, start_gate=gate, **kw)
        return _result_meta(res) | {"t0_ns": res.t0_ns}

    def go(self, t0_ns: int) -> None:
        self._t0 = int(t0_ns)
        self._go.set()

    def stop(self) -> None:
        self._stop_req.set()
        self._go.set()
        if self._loop is not None and self._astop is not None:
            try:
                self._loop.call_soon_threadsafe(self._astop.set)
            except RuntimeError:  # loop already closed
                pass

    def poll(self, timeout_s: float = POLL_S, max_batch: int = 2000) -> dict[str, Any]:
        """Records completed since the last poll (waits up to ``timeout_s`` for the first one).
        ``done`` is the run's metadata once the runner returned and every record was handed over."""
        recs: list[RequestRecord] = []
        finished_before = self._finished.is_set()
        try:
            recs.append(self._q.get(timeout=timeout_s))
        except queue.Empty:
            pass
        while len(recs) < max_batch:
            try:
                recs.append(self._q.get_nowait())
            except queue.Empty:
                break
        done = finished_before and self._q.empty() and len(recs) < max_batch
        return {"records": recs, "ready": self._ready.is_set(), "in_flight": sorted(self._in_flight),
                "sent": self._sent, "done": done, "meta": self._meta if done else None,
                "error": self._error if done else None}
