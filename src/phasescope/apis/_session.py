"""Client sessions and the pre-transfer hook that stamps ``t_conn_ready_ns`` on every record.

``t_conn_ready_ns`` comes from an aiohttp ``TraceConfig`` (``on_connection_create_end`` for a new
connection, ``on_connection_reuseconn`` for a pooled one): curl's ``time_pretransfer``. Sessions
must be made with :func:`new_session` (or carry :func:`trace_config`) for it to be set. The hook
also notes which attempts run on a reused keep-alive connection (:data:`POOLED`), so that
:func:`phasescope.apis._http.exchange` resends a request only when a stale pooled connection failed it.
"""

from __future__ import annotations

import weakref
from typing import Any

import aiohttp

from phasescope.measure.clock import now_ns
from phasescope.measure.records import RequestRecord

#: the client session every ``apis`` function takes (callers outside ``apis/`` name this, never
#: aiohttp): from :func:`new_session` (timed requests), :func:`fresh_session` (a new connection per
#: request) or :func:`plain_session` (info requests and scrapes)
Session = aiohttp.ClientSession


async def _on_conn_ready(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        rec.t_conn_ready_ns = now_ns()
        POOLED.discard(id(rec))


async def _on_conn_reused(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        rec.t_conn_ready_ns = now_ns()
        POOLED.add(id(rec))


#: ids of records whose current attempt runs on a reused keep-alive connection (see exchange)
POOLED: set[int] = set()
#: at most this many sends of one request when each failure was a stale pooled connection
MAX_STALE_RETRIES = 4


_TRACE: aiohttp.TraceConfig | None = None


def trace_config() -> aiohttp.TraceConfig:
    """The one TraceConfig that stamps ``t_conn_ready_ns`` (shared; add it to your own sessions)."""
    global _TRACE
    if _TRACE is None:
        tc = aiohttp.TraceConfig()
        tc.on_connection_create_end.append(_on_conn_ready)
        tc.on_connection_reuseconn.append(_on_conn_reused)
        tc.freeze()
        _TRACE = tc
    return _TRACE


def raw_path_enabled() -> bool:
    """Load runs read streams on the raw path (:mod:`phasescope.apis._fast`) when httptools is
    installed (a dependency on CPython) and ``PHASESCOPE_HTTPTOOLS`` is not ``0``."""
    import os

    from phasescope.apis._fast import available

    return os.environ.get("PHASESCOPE_HTTPTOOLS", "1") != "0" and available()


def new_session(*, limit: int = 0, connect_timeout_s: float | None = 10.0, fast: bool = False) -> Any:
    """A ClientSession ready for :func:`phasescope.apis._http.exchange`: our trace hook, no connection cap by default
    (``limit=0``; aiohttp's default of 100 silently queues requests above 100 streams), no total
    timeout (timeouts are per request), no auto-decompression surprises. ``fast=True``: a
    :class:`~phasescope.apis._fast.FastSession` (needs httptools) that reads streamed SSE generation
    requests on the raw path and sends everything else through the aiohttp session it wraps."""
    # keepalive_timeout 4 s: llama-server and uvicorn (vLLM, SGLang) close idle keep-alive connections
    # after 5 s; aiohttp's default 15 s keeps reusing connections the server already dropped.
    conn = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=4.0)
    session = aiohttp.ClientSession(
        connector=conn,
        trace_configs=[trace_config()],
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
    )
    if fast:  # streamed SSE requests to http:// go over the raw path; the rest over this session
        from phasescope.apis._fast import FastSession

        return FastSession(session)
    return session


def plain_session() -> Session:
    """A plain session for info requests and scrapes (``/metrics``, a dcgm-exporter): aiohttp's
    defaults, no trace hook (nothing it sends is a timed generation request)."""
    return aiohttp.ClientSession()


#: records of requests in flight, by record id: the client appends each token event as it reads it,
#: so a caller can watch its own streams (the client's view) without asking the server. Filled by
#: the sessions of :func:`fresh_session` (``live=True``).
LIVE: "weakref.WeakValueDictionary[str, RequestRecord]" = weakref.WeakValueDictionary()
_LIVE_TRACE: aiohttp.TraceConfig | None = None


async def _on_request_start(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        LIVE[rec.id] = rec


def live_trace() -> aiohttp.TraceConfig:
    """The TraceConfig that puts each request's record in :data:`LIVE` as it starts."""
    global _LIVE_TRACE
    if _LIVE_TRACE is None:
        tc = aiohttp.TraceConfig()
        tc.on_request_start.append(_on_request_start)
        tc.freeze()
        _LIVE_TRACE = tc
    return _LIVE_TRACE


def live_tokens(req_id: str) -> int:
    """Token events received so far by the request ``req_id`` (0 before its first token)."""
    rec = LIVE.get(req_id)
    if rec is None:
        return 0
    return len(rec.token_events())


def fresh_session(connect_timeout_s: float | None = 10.0, *, live: bool = True) -> Session:
    """A session that opens one fresh connection per request (``force_close``), with the trace
    hook and (``live``) the :data:`LIVE` registry.

    Experiments leave connections idle for seconds between phases; llama-server (cpp-httplib)
    closes idle keep-alive connections after 5 s, and a request written onto such a socket fails
    before its first byte (seen as ``stream_broken``, 0 events). Loopback connects cost well under
    a millisecond, and ``t_conn_ready_ns`` keeps that time visible in every record."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=True),
        trace_configs=[trace_config(), live_trace()] if live else [trace_config()],
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
    )
