"""What every fake server shares: a real aiohttp server bound to 127.0.0.1 on a free port, started
inside a running loop (``async with``) or on a thread of its own (``with fake.running():``).

:class:`LoopbackServer` is the one copy of that lifecycle; :class:`~phasescope.testing.FakeServer`,
:class:`~phasescope.testing.gpu_fake.FakeDcgmExporter`,
:class:`~phasescope.testing.metrics_fake.MetricsFakeServer` and
:class:`~phasescope.testing.behaviour_fake.BehaviourFake` only say which routes they serve
(:meth:`LoopbackServer._routes`) and what they do around start and stop.

Every server notes when its process read the latest bytes of each connection, before any HTTP
parsing (:func:`rx_ns`): the arrival time of a request on a keep-alive connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, Iterator, Protocol, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

S = TypeVar("S", bound="LoopbackServer")


class _StampingHandler(RequestHandler):
    """aiohttp's connection protocol, noting when the server process read the latest bytes of the
    connection (before any HTTP parsing): the arrival time of a request on a keep-alive connection."""

    def data_received(self, data: bytes) -> None:
        self._ps_rx_ns = time.perf_counter_ns()
        super().data_received(data)


class _StampingServer(Server):
    def __call__(self) -> RequestHandler:
        return _StampingHandler(self, loop=self._loop, **self._kwargs)


def rx_ns(request: web.Request, fallback: int) -> int:
    """When the server process read the request's bytes (``time.perf_counter_ns``), else ``fallback``."""
    return int(getattr(request.protocol, "_ps_rx_ns", None) or fallback)


class LoopbackServer:
    """Start, stop, ``async with`` and ``running()`` of an aiohttp app on ``host``:``port`` (0 = free)."""

    host: str = "127.0.0.1"
    port: int = 0
    #: the name of the thread :meth:`running` serves from
    thread_name: str = "fake-server"
    #: the largest request body the app reads
    client_max_size: int = 1024**2
    _runner: web.AppRunner | None = None

    def _routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    def _middlewares(self) -> list[Any]:
        return []

    async def _on_start(self) -> None:
        """After the socket is bound (``self.port`` is known)."""

    async def _on_stop(self) -> None:
        """After the HTTP server is closed."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self: S) -> S:
        app = web.Application(client_max_size=self.client_max_size, middlewares=self._middlewares())
        self._routes(app.router)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        if type(self._runner.server) is Server:  # stamp byte arrival (see _StampingHandler)
            self._runner.server.__class__ = _StampingServer
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        await self._on_start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._on_stop()

    async def __aenter__(self: S) -> S:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def running(self: S) -> Iterator[S]:
        """Serve from a background thread with its own event loop (for sync tests and CLI runs)."""
        with serve_on_thread(self, self.thread_name):
            yield self


class _Startable(Protocol):
    async def start(self) -> object: ...
    async def stop(self) -> None: ...


T = TypeVar("T", bound=_Startable)


@contextlib.contextmanager
def serve_on_thread(server: T, name: str) -> Iterator[T]:
    """Run ``server`` (anything with ``async start()``/``stop()``: every fake here and the lean fake) on a
    daemon thread with its own event loop until the block ends; stalled handlers are cancelled so they
    cannot outlive the loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    err: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as e:  # pragma: no cover - start failure
            err.append(e)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:  # stalled handlers (the "stall" fault) must not outlive the loop
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    th = threading.Thread(target=run, name=name, daemon=True)
    th.start()
    if not ready.wait(10):
        raise RuntimeError(f"{type(server).__name__} did not start within 10 s")
    if err:
        raise err[0]
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)


async def serve_until_signal(server: _Startable) -> None:
    """A fake's command line: start, print ``READY <url>`` (what scripts and benchmarks wait for), serve
    until SIGTERM or SIGINT, stop."""
    import signal

    await server.start()
    print(f"READY {getattr(server, 'url')}", flush=True)  # noqa: B009 (_Startable declares no url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
