"""A leaner receive path for streamed requests: an asyncio ``Protocol`` per connection + httptools.

With aiohttp, every streamed event costs a trip through its ``StreamReader``: the parser feeds
the reader, a future wakes the request's task, the task steps its coroutine, ``readany()``
returns the chunk. At 1,000+ streams on one core that round trip is most of the client's CPU
per event (``benchmarks/recv_path_ab.py`` measures both paths on the same fake). Here the bytes go
from the socket through ``httptools``' response parser (llhttp, the parser uvicorn uses) straight
into :class:`~phasescope.apis._http._SseFramer` inside ``data_received``: the event is decoded and
stamped in the callback that read it, and the request's coroutine only waits for its end.

Only what the hot loop needs goes this way — streamed SSE generation requests to ``http://``
targets; everything else (non-streamed bodies, NDJSON, ``https://``, info endpoints) stays on the
aiohttp session this one wraps. The record is the same either way: ``t_start_ns`` just before the
request's bytes are written (or its connection opened), ``t_conn_ready_ns`` when the connection is
open or taken from the pool, ``t_headers_ns`` when the status line and headers are parsed, every
event stamped right after its JSON is decoded; errors map to the same
:mod:`phasescope.errors` classes (:func:`phasescope.apis._http.exchange` handles both paths).

Keep-alive connections are pooled per host and port (idle ones closed after 4 s, as
:func:`~phasescope.apis._session.new_session` does); a pooled connection the server had already
closed before answering is retried on another, as aiohttp's path does. Needs ``httptools`` (a
dependency on CPython; aiohttp's path is the fallback); :func:`available` says whether it is installed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from phasescope import errors as E
from phasescope.apis._errors import ERR_BODY_MAX, connect_timeout, cut_mid_response, http_error, nothing_listening
from phasescope.measure.clock import now_ns

if TYPE_CHECKING:
    import aiohttp

    from phasescope.apis._http import Protocol, _Watchdog  # noqa: F401  (types only)

#: idle keep-alive connections are closed after this long (servers drop theirs after 5 s)
KEEPALIVE_S = 4.0
#: after the stream is logically done, the rest of its response (the last chunk) is waited for this long
_DRAIN_S = 0.25
#: connects in flight at once while :meth:`FastPool.warm` opens a run's connections
WARM_PARALLEL = 64


def available() -> bool:
    """Is httptools installed (the raw path's parser)?"""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


class _Stale(Exception):
    """A pooled connection closed before any byte of the answer: safe to send again."""


class Redirected(Exception):
    """The server answered 3xx: aiohttp's path follows redirects, so the request goes there
    (:func:`phasescope.apis._http.exchange`), and so does every later request to that URL."""


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, pool: "FastPool", key: tuple[str, int]) -> None:
        import httptools

        self.pool, self.key = pool, key
        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.fut: asyncio.Future[None] | None = None
        self.proto: Any = None
        self.framer: Any = None
        self.got_bytes = False
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.err_body: bytearray | None = None
        self.error: BaseException | None = None
        self.complete = False
        self.close_delimited = False
        self.interim = False  # parsing an interim 1xx answer (100 Continue, 103 Early Hints): skipped
        self.idle_since = 0.0
        self.drain: asyncio.TimerHandle | None = None

    # -- the request ------------------------------------------------------------------------------
    def start(self, proto: "Protocol", framer: Any, raw: bytes) -> asyncio.Future[None]:
        self.proto, self.framer = proto, framer
        self.got_bytes, self.status, self.headers = False, 0, []
        self.err_body, self.error, self.complete = None, None, False
        self.close_delimited = self.interim = False
        self.fut = fut = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return fut

    def abort(self) -> None:
        """The request was cancelled or failed mid-answer: this connection's state is unknown."""
        self.fut = None
        if self.drain is not None:
            self.drain.cancel()
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.error is not None:
            return
        try:
            self.parser.feed_data(data)
        except Exception as exc:  # noqa: BLE001  (a parser error, or one our callbacks stored)
            if self.error is None:
                self.error = E.StreamBrokenError(
                    f"{self.proto.target.display_url}{self.proto.path}: malformed HTTP response: "
                    f"{type(exc).__name__}") if self.proto is not None else exc
        if self.error is not None:
            self._settle(self.error)
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.forget(self)
        if self.drain is not None:
            self.drain.cancel()
        fut = self.fut
        if fut is None or fut.done():
            return
        proto = self.proto
        if not self.got_bytes:
            fut.set_exception(_Stale())
        elif proto is not None and proto.done:
            fut.set_result(None)
        elif self.close_delimited and self.error is None:
            # no Content-Length, not chunked: the end of the bytes is the end of the answer, as
            # aiohttp reads it (a last event without its blank line, then the protocol's verdict)
            self.on_message_complete()
            self.pool.forget(self)  # in case it was handed back: this connection is gone
        else:
            fut.set_exception(cut_mid_response(proto.target, proto.path, proto.rec,
                                               type(exc).__name__ if exc else "ServerDisconnected"))

    # -- httptools callbacks --------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # an interim answer (RFC 9110 §15.2: 100 Continue, 103 Early Hints) precedes the real
            # one on the same connection: skipped, as aiohttp's reader skips it
            self.interim, self.headers = True, []
            return
        rec = self.proto.rec
        rec.t_headers_ns = now_ns()
        self.status = rec.http_status = status
        names = {k.lower(): v.lower() for k, v in self.headers}
        self.close_delimited = "content-length" not in names and "chunked" not in names.get("transfer-encoding", "")
        if self.status >= 300:  # an error's body is kept for its message; a redirect's is dropped
            self.err_body = bytearray()

    def on_body(self, body: bytes) -> None:
        if self.interim:
            return
        if self.err_body is not None:
            if len(self.err_body) < ERR_BODY_MAX:
                self.err_body += body[: ERR_BODY_MAX - len(self.err_body)]
            return
        proto = self.proto
        if proto.done:
            return  # what follows the logical end is read and dropped
        try:
            self.framer.feed(body)
        except E.PhasescopeError as exc:
            self.error = exc
            raise
        if proto.done:
            self.proto.rec.t_done_ns = now_ns()
            self._settle(None)
            if not self.complete:  # the last chunk is still to come: wait briefly, then drop the connection
                self.drain = asyncio.get_running_loop().call_later(_DRAIN_S, self.transport.close)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim, self.headers = False, []
            return
        self.complete = True
        proto = self.proto
        err: BaseException | None = None
        if self.err_body is not None:
            from multidict import CIMultiDict

            proto.rec.t_done_ns = now_ns()
            if self.status < 400:
                err = Redirected()
            else:
                err = http_error(self.status, bytes(self.err_body), CIMultiDict(self.headers), proto.target, proto.path)
        elif not proto.done:
            try:
                self.framer.eof()  # a last event without its blank line, then "ended before completion"
            except E.PhasescopeError as exc:
                err = exc
        self._settle(err)
        if self.drain is not None:
            self.drain.cancel()
            self.drain = None
        if self.error is None and self.parser.should_keep_alive():  # a whole answer, error or not
            self.pool.release(self)
        else:
            self.transport.close()

    def _settle(self, err: BaseException | None) -> None:
        fut = self.fut
        if fut is None or fut.done():
            return
        if err is None:
            fut.set_result(None)
        else:
            fut.set_exception(err)


class FastPool:
    """Keep-alive connections per (host, port) for the raw path."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[_Conn]] = {}
        self.live: set[_Conn] = set()
        self.heads: dict[str, tuple[tuple[str, int], bytes]] = {}
        #: URLs that answered with a redirect: aiohttp's path (which follows it) sends to them
        self.redirected: set[str] = set()
        #: requests sent this way (what a run's ``receive_path`` reports)
        self.streams = 0
        self._reaper: asyncio.TimerHandle | None = None

    def takes(self, url: str, proto: "Protocol") -> bool:
        """Does this request go the raw way? Streamed SSE over plain http only."""
        return (proto.req.stream and proto.framing == "sse" and url.startswith("http://")
                and url not in self.redirected)

    def _head(self, url: str) -> tuple[tuple[str, int], bytes]:
        got = self.heads.get(url)
        if got is None:
            u = urlsplit(url)
            host, port = u.hostname or "127.0.0.1", u.port or 80
            target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            hostport = u.netloc.rsplit("@", 1)[-1]
            got = self.heads[url] = ((host, port), f"POST {target} HTTP/1.1\r\nHost: {hostport}\r\n".encode("latin-1"))
        return got

    async def send(self, url: str, proto: "Protocol", data: bytes, headers: dict[str, str], dog: "_Watchdog",
                   framer: Any, retries: int) -> None:
        """Send on a pooled or new connection; ``framer`` (an ``_SseFramer`` of this request) gets
        the body; up to ``retries`` sends while a reused connection turns out stale."""
        key, line = self._head(url)
        raw = line + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1") + \
            f"Content-Length: {len(data)}\r\n\r\n".encode() + data
        rec, to = proto.rec, proto.target.timeouts
        loop = asyncio.get_running_loop()
        self.streams += 1
        for attempt in range(retries):
            rec.t_conn_ready_ns = None
            rec.t_start_ns = now_ns()
            conn = self._take(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(loop, key, proto, to.connect_s)
            rec.t_conn_ready_ns = now_ns()
            framer.buf = b""
            fut = conn.start(proto, framer, raw)
            try:
                await fut
            except _Stale:
                if reused and attempt < retries - 1:
                    continue
                raise cut_mid_response(proto.target, proto.path, rec, "ServerDisconnected") from None
            except Redirected:
                self.redirected.add(url)
                raise
            except BaseException:
                if conn.fut is fut:  # still ours (a whole error answer went back to the pool)
                    conn.abort()
                raise
            if proto.done:
                dog.arm("done", None)
            return

    async def _connect(self, loop: asyncio.AbstractEventLoop, key: tuple[str, int], proto: "Protocol",
                       connect_s: float | None) -> _Conn:
        target = proto.target
        try:
            coro = loop.create_connection(lambda: _Conn(self, key), key[0], key[1])
            _, conn = await (asyncio.wait_for(coro, connect_s) if connect_s else coro)
        except asyncio.TimeoutError:
            raise connect_timeout(target) from None
        except OSError as exc:
            raise nothing_listening(target.display_url, exc) from None
        self.live.add(conn)
        return conn

    async def warm(self, url: str, n: int, timeout_s: float = 10.0) -> int:
        """Open ``n`` keep-alive connections to ``url``'s host and port and leave them idle in the
        pool (a load run's warm-up before t0, so no first-wave stream connects inside its TTFT);
        at most :data:`WARM_PARALLEL` connects at once (a burst of thousands of SYNs overflows a
        listen backlog of 100, and a dropped SYN is retried only after a second). How many opened."""
        key, _ = self._head(url)
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(WARM_PARALLEL)

        async def one() -> bool:
            async with gate:
                try:
                    _, conn = await asyncio.wait_for(
                        loop.create_connection(lambda: _Conn(self, key), key[0], key[1]), timeout_s)
                except (OSError, asyncio.TimeoutError):
                    return False
            self.live.add(conn)
            self.release(conn)
            return True

        return sum(await asyncio.gather(*(one() for _ in range(n))))

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        stack = self.idle.get(key)
        while stack:
            conn = stack.pop()
            if not conn.transport.is_closing():
                return conn
        return None

    def release(self, conn: _Conn) -> None:
        conn.fut, conn.proto, conn.framer = None, None, None
        conn.idle_since = asyncio.get_running_loop().time()
        self.idle.setdefault(conn.key, []).append(conn)
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().call_later(1.0, self._reap)

    def forget(self, conn: _Conn) -> None:
        self.live.discard(conn)
        stack = self.idle.get(conn.key)
        if stack and conn in stack:
            stack.remove(conn)

    def _reap(self) -> None:
        """Close connections idle past KEEPALIVE_S (the server would drop them first)."""
        self._reaper = None
        now = asyncio.get_running_loop().time()
        for stack in self.idle.values():
            for conn in [c for c in stack if now - c.idle_since > KEEPALIVE_S]:
                stack.remove(conn)
                conn.transport.close()
        if any(self.idle.values()):
            self._reaper = asyncio.get_running_loop().call_later(1.0, self._reap)

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for conn in list(self.live):
            if conn.transport is not None:
                conn.transport.close()
        self.live.clear()
        self.idle.clear()


class FastSession:
    """An aiohttp session plus a :class:`FastPool`: :func:`~phasescope.apis._http.exchange` sends
    streamed SSE generation requests over the pool and everything else over the session (every
    other attribute is the session's)."""

    def __init__(self, session: "aiohttp.ClientSession") -> None:
        self.session = session
        self.fast_pool = FastPool()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    async def close(self) -> None:
        self.fast_pool.close()
        await self.session.close()

    async def __aenter__(self) -> "FastSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
