"""The timed HTTP exchange every client shares: timestamps, timeouts, framing.

A client module describes its wire format with a :class:`Protocol` subclass (how to build the
body, how to read one streamed message or a whole JSON body). :func:`exchange` does the rest the
same way for every API:

* ``t_start_ns`` is read just before the request is handed to aiohttp (the body is serialised
  before that, so JSON encoding is not in TTFT);
* ``t_conn_ready_ns`` comes from an aiohttp ``TraceConfig`` (``on_connection_create_end`` for a new
  connection, ``on_connection_reuseconn`` for a pooled one): curl's ``time_pretransfer``. Sessions
  must be made with :func:`~phasescope.apis._session.new_session` (or carry :func:`~phasescope.apis._session.trace_config`) for this to be set;
* ``t_headers_ns`` when ``session.post`` returns (status line and headers read);
* each message of the stream is framed out of ``resp.content`` reads by hand (SSE ``\\n\\n`` blocks
  or NDJSON lines); several messages arriving in one read are each parsed and timestamped in turn,
  the timestamp taken right after that message's ``json.loads``;
* timeouts: connect (aiohttp ``sock_connect``), first token (start → first token-carrying
  message) and between tokens (silence between reads after the first token) — enforced by one
  rescheduled timer (:class:`_Watchdog`), not a ``wait_for`` per read, so the hot loop costs a
  float store per read;
* every failure becomes ``ok=False`` with ``error_kind`` from :func:`phasescope.errors.error_kind`
  and a one-line ``error_message`` (:mod:`._errors`; a transport exception by its kind in
  :data:`~phasescope.apis._errors.TRANSPORT_ERRORS`); nothing raises to the caller except cancellation.

Beside it: sessions and the pre-transfer hook (:mod:`._session`), error mapping (:mod:`._errors`),
record filling (:mod:`._records`), plain JSON requests for info endpoints (:mod:`._json`).

One job: one request's bytes in, timestamped events out — the watchdog, the ``Protocol`` a client
implements, :func:`exchange`, its SSE/NDJSON readers and their JSON decoding, which share the hot
loop's state and are tuned together (benchmarks/client_recv_cpu.py).
"""


from __future__ import annotations

import asyncio
import json
import json.scanner
import math
from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis._errors import (ERR_BODY_MAX, TRANSPORT, connect_timeout, cut_mid_response, error_message_of,
                                     fail, http_error, nothing_listening, transport_kind)
from phasescope.apis._fast import Redirected
from phasescope.apis._session import MAX_STALE_RETRIES, POOLED
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.otlp import traceparent_for
from phasescope.measure.clock import now_ns, wall_ns
from phasescope.measure.records import Event, RequestRecord

#: a streamed event (or NDJSON line) larger than this without its end is a broken stream
_MAX_EVENT_BYTES = 16 * 1024**2


# --- timeouts --------------------------------------------------------------------------------
class _Watchdog:
    """One timer per request that cancels the running task when a deadline passes.

    The deadline is a ``now_ns()`` number: ``arm(kind, seconds)`` sets it (and reschedules the
    timer only when the new deadline is sooner), and the receive loop moves it on with one store
    (``dog.deadline_ns = t + period_ns``) per read that brought a token. The timer re-schedules
    itself lazily when it fires before the current deadline, so nothing is re-armed per event.
    """

    __slots__ = ("loop", "task", "kind", "deadline_ns", "handle", "fired", "overall")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.kind: str | None = None
        self.deadline_ns: float = float("inf")
        self.handle: asyncio.TimerHandle | None = None
        self.fired: str | None = None
        self.overall: asyncio.TimerHandle | None = None

    def arm_overall(self, seconds: float | None) -> None:
        """The request's overall deadline: whatever the stream does, it ends here."""
        if seconds is None or self.task is None or not math.isfinite(seconds):
            return
        self.overall = self.loop.call_later(max(0.0, seconds), self._fire_overall)

    def _fire_overall(self) -> None:
        self.overall = None
        if self.fired:
            return
        self.fired = "deadline"
        assert self.task is not None
        self.task.cancel()

    def arm(self, kind: str, seconds: float | None) -> None:
        if seconds is None or self.task is None:
            self.kind, self.deadline_ns = None, float("inf")
            if kind == "done" and self.overall is not None:  # the answer is complete
                self.overall.cancel()
                self.overall = None
            return
        self.kind = kind
        delay = float(seconds)
        self.deadline_ns = now_ns() + delay * 1e9
        when = self.loop.time() + delay
        if self.handle is None:
            self.handle = self.loop.call_at(when, self._fire)
        elif self.handle.when() > when:  # a sooner deadline (first token → between tokens)
            self.handle.cancel()
            self.handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.handle = None
        if self.kind is None or self.fired:
            return
        left_ns = self.deadline_ns - now_ns()
        if left_ns <= 0:
            self.fired = self.kind
            assert self.task is not None
            self.task.cancel()
        else:
            self.handle = self.loop.call_later(left_ns / 1e9, self._fire)

    def close(self) -> None:
        self.kind = None
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.overall is not None:
            self.overall.cancel()
            self.overall = None


def overrun_margin(max_tokens: int) -> int:
    """Tokens accepted past ``max_tokens`` before a stream that does not end is cut: a few
    servers send one or two extra (a stop token, a final delta), none sends 10 % more."""
    return max(8, int(max_tokens) // 10)


def request_deadline_s(to: Any, max_tokens: int | None) -> float | None:
    """A request's overall deadline: connect + first token + (its token budget + margin) × the
    between-tokens timeout. None when a timeout it depends on is disabled."""
    if to.first_token_s is None or to.between_tokens_s is None:
        return None
    n = int(max_tokens or 0)
    return float(to.connect_s or 0.0) + float(to.first_token_s) + (n + overrun_margin(n)) * float(to.between_tokens_s)


def _check_overrun(proto: "Protocol") -> None:
    """Raise :class:`~phasescope.errors.OverrunError` when the stream brought more than max_tokens + margin tokens."""
    rec = proto.rec
    limit = int(proto.req.max_tokens or 0)
    got = sum((e.n_tokens or 1) for e in rec.events if e.kind in _TOKEN_KINDS)
    if got > limit + overrun_margin(limit):
        rec.overrun = got - limit
        raise E.OverrunError(
            f"{proto.target.display_url}{proto.path}: the server sent {got} tokens for max_tokens={limit} without "
            f"ending the stream; stopped reading", hint="the server ignores max_tokens or never finishes its stream")


# --- the protocol a client implements --------------------------------------------------------
class Protocol:
    """Per-request parser state. Subclasses set ``path``, ``framing`` and implement the hooks.

    ``on_message(obj, t_ns)`` handles one decoded streamed message; it appends Events to
    ``self.rec`` and sets ``self.done`` when the stream is logically complete (``[DONE]``,
    ``done: true``, ``stop: true``). ``on_body(obj)`` handles a non-streamed JSON body.
    ``finish()`` fills counts after a successful stream. Raise :class:`~phasescope.errors.MalformedEventError` or
    :class:`~phasescope.errors.ServerStreamError` for bad or error messages.
    """

    path = "/"
    framing = "sse"  # sse | ndjson
    #: headers this protocol adds to every request (Anthropic's ``x-api-key`` and ``anthropic-version``)
    extra_headers: dict[str, str] = {}

    def __init__(self, target: Target, req: GenRequest, rec: RequestRecord) -> None:
        self.target = target
        self.req = req
        self.rec = rec
        self.done = False
        self.got_token = False

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    def on_message(self, obj: Any, t_ns: int) -> None:
        raise NotImplementedError

    def on_done_marker(self, t_ns: int) -> None:
        self.done = True

    def on_eof(self) -> None:
        """Stream ended without the protocol's end marker: broken unless overridden."""
        raise E.StreamBrokenError(
            f"{self.target.display_url}{self.path}: stream ended before completion "
            f"({len(self.rec.token_events())} token events received)"
        )

    def on_body(self, obj: Any) -> None:
        raise NotImplementedError

    def message(self, obj: Any, what: str) -> dict[str, Any]:
        """``obj`` as a message object, for formats whose error is a top-level ``"error"`` (llama.cpp,
        Ollama): a non-object raises :class:`~phasescope.errors.MalformedEventError`, ``{"error": ...}``
        :class:`~phasescope.errors.ServerStreamError` with the server's own sentence. ``what``: ``event``, ``line``
        (streamed) or ``response`` (a whole body)."""
        if isinstance(obj, dict) and "error" not in obj:
            return obj  # every message of a healthy stream: no string work (runs once per event)
        where = f"{self.target.display_url}{self.path}"
        if not isinstance(obj, dict):
            raise E.MalformedEventError(f"{where}: malformed {what} (not an object)")
        during = "" if what == "response" else " mid-stream"
        raise E.ServerStreamError(f"{where}: server error{during}: {error_message_of(obj)}")

    def finish(self) -> None:
        pass


#: ``str`` decoder: SSE and NDJSON are UTF-8 by definition, so decoding the bytes ourselves skips
#: ``json.loads``' encoding detection (same result: it decodes UTF-8 with ``surrogatepass`` too)
_json_decoder = json.JSONDecoder()
_json_decode = _json_decoder.decode
#: the decoder's own C scanner, called directly on a message that starts with its value: the same
#: object ``decode`` returns, without its two whitespace regex matches and two Python frames per
#: event (``decode`` still handles whitespace around the value, trailing data and every error)
_json_scan = getattr(json.scanner, "c_make_scanner", None)
_json_scan = _json_scan(_json_decoder) if _json_scan is not None else None


def _scan_json(s: str) -> Any:
    """``json.loads(s)``, the common case (no whitespace around one value) on the C scanner alone."""
    if _json_scan is None:
        return _json_decode(s)
    try:
        obj, end = _json_scan(s, 0)
    except StopIteration:  # leading whitespace or no value: decode says which
        return _json_decode(s)
    return obj if end == len(s) else _json_decode(s)


def _decode_json(payload: bytes, target: Target, path: str) -> Any:
    try:
        return _scan_json(payload.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, 4,300+ digits, nested too deep
        shown = payload[:120].decode("utf-8", "replace")
        raise E.MalformedEventError(f"{target.display_url}{path}: malformed event (not JSON): {shown!r}") from None


def _settle(rec: RequestRecord, proto: Protocol) -> None:
    """A response that ended in good form: negative server counts dropped (then counted from the
    events), and :class:`~phasescope.errors.NoTokenError` when it carried no token at all."""
    from phasescope.apis._records import fill_fallback_counts
    from phasescope.measure.derive import distrust_bad_counts, no_token_reason

    if distrust_bad_counts(rec):
        fill_fallback_counts(rec, proto.req)
    why = no_token_reason(rec)
    if why is not None:
        raise E.NoTokenError(f"{proto.target.display_url}{proto.path}: {why}")


async def exchange(session: aiohttp.ClientSession, proto: Protocol) -> RequestRecord:
    """Send ``proto``'s request and fill ``proto.rec``; never raises for server-side failures."""
    target, req, rec = proto.target, proto.req, proto.rec
    url = target.base_url + proto.path
    data = json.dumps(proto.body(), separators=(",", ":")).encode()
    headers = target.headers()
    if proto.extra_headers:
        headers.update(proto.extra_headers)
    headers["X-Request-Id"] = rec.id
    headers["traceparent"] = traceparent_for(rec.id)  # a server that traces continues it (phasescope.apis.otlp)
    to = target.timeouts
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=to.connect_s, connect=None, sock_read=None)
    dog = _Watchdog()
    rec.wall_start_ns = wall_ns()
    dog.arm_overall(request_deadline_s(to, req.max_tokens))
    pool = getattr(session, "fast_pool", None)  # a FastSession (phasescope.apis._fast)
    try:
        sent = False
        if pool is not None and pool.takes(url, proto):
            dog.arm("first_token", to.first_token_s)
            try:
                await pool.send(url, proto, data, headers, dog, _SseFramer(proto, dog), MAX_STALE_RETRIES)
                sent = True
            except Redirected:  # 3xx: aiohttp's path follows it
                rec.t_headers_ns = rec.t_done_ns = rec.http_status = None
        if not sent:
            await _send_aiohttp(session, proto, url, data, headers, timeout, dog)
        if rec.t_done_ns is None:
            rec.t_done_ns = now_ns()
        proto.finish()
        _settle(rec, proto)  # success means tokens; a negative count is not one
        rec.ok = True
    except asyncio.CancelledError:
        if not dog.fired:
            raise
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()
        rec.t_done_ns = now_ns()
        if dog.fired == "deadline":
            exc: E.PhasescopeError = E.RequestDeadline(
                f"{target.display_url}{proto.path}: the request ran past its overall deadline of "
                f"{request_deadline_s(to, req.max_tokens):g} s ({len(rec.token_events())} token events received)",
                hint="raise --ttft-timeout/--itl-timeout")
        elif dog.fired == "first_token":
            exc = E.FirstTokenTimeout(
                f"{target.display_url}{proto.path}: no first token within {to.first_token_s:g} s",
                hint="raise --ttft-timeout",
            )
        elif dog.fired == "body":
            exc = E.InterTokenTimeout(
                f"{target.display_url}{proto.path}: the answer's body did not end within "
                f"{to.between_tokens_s if to.between_tokens_s is not None else to.first_token_s:g} s of its headers",
                hint="raise --itl-timeout")
        else:
            exc = E.InterTokenTimeout(
                f"{target.display_url}{proto.path}: stream silent for more than {to.between_tokens_s:g} s between tokens",
                hint="raise --itl-timeout",
            )
        fail(rec, exc)
    except E.PhasescopeError as exc:
        if rec.t_done_ns is None:
            rec.t_done_ns = now_ns()
        fail(rec, exc)
    except TRANSPORT as exc:  # the one table's kinds (apis/_errors.py)
        rec.t_done_ns = now_ns()
        kind = transport_kind(exc)
        if kind == "connect_timeout":
            fail(rec, connect_timeout(target))
        elif kind == "not_listening":
            assert isinstance(exc, aiohttp.ClientConnectorError)
            fail(rec, nothing_listening(target.display_url, exc.os_error))
        elif kind == "cut":
            fail(rec, cut_mid_response(target, proto.path, rec, type(exc).__name__))
        else:
            fail(rec, E.TargetError(f"{target.display_url}{proto.path}: {type(exc).__name__}: {exc}"))
    finally:
        dog.close()
    return rec


async def _send_aiohttp(session: aiohttp.ClientSession, proto: Protocol, url: str, data: bytes,
                        headers: dict[str, str], timeout: aiohttp.ClientTimeout, dog: _Watchdog) -> None:
    """The request over aiohttp: send (resending on a stale pooled connection), status, body or stream."""
    target, req, rec, to = proto.target, proto.req, proto.rec, proto.target.timeouts
    for attempt in range(MAX_STALE_RETRIES):
        dog.arm("first_token", to.first_token_s)
        rec.t_conn_ready_ns = None
        rec.t_start_ns = now_ns()
        try:
            resp_cm = session.post(url, data=data, headers=headers, timeout=timeout, trace_request_ctx=rec)
            resp = await resp_cm.__aenter__()
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # a pooled keep-alive connection the server had already closed (llama-server
            # closes some after a stream): no byte of the request was answered, so send it
            # again, as curl and browsers do. The next pooled connection may be stale too,
            # so retry while failures come from reused connections; a fresh one's is real.
            if id(rec) in POOLED and attempt < MAX_STALE_RETRIES - 1:
                continue
            raise
        finally:
            POOLED.discard(id(rec))
        break
    try:
        rec.t_headers_ns = now_ns()
        rec.http_status = resp.status
        if resp.status >= 400:
            body = await resp.content.read(ERR_BODY_MAX)
            rec.t_done_ns = now_ns()
            raise http_error(resp.status, body, resp.headers, target, proto.path)
        if not req.stream:
            # an unstreamed answer is computed before its headers: once they are here, the body comes
            # at once. A body that trickles or never ends is cut after --itl-timeout (not at the
            # overall deadline, ~14 min by default for a 1-token calibration request), and one past
            # the body limit is refused
            from phasescope.apis._json import read_body

            dog.arm("body", to.between_tokens_s if to.between_tokens_s is not None else to.first_token_s)
            raw = await read_body(resp, url)
            rec.t_done_ns = now_ns()
            proto.on_body(_decode_json(raw, target, proto.path))
        elif proto.framing == "ndjson":
            await _read_ndjson(resp, proto, dog)
        else:
            await _read_sse(resp, proto, dog)
    finally:
        await resp_cm.__aexit__(None, None, None)


async def _drain(content: aiohttp.StreamReader) -> None:
    """After the logical end, read the terminating chunk so the connection can be reused."""
    if content.at_eof():
        return
    try:
        await asyncio.wait_for(content.read(), 0.25)
    except TRANSPORT:
        pass


def _token_in(events: list[Event], n_before: int) -> bool:
    """Did this read bring a token? Only token events restart the between-tokens clock:
    keep-alive comments, role chunks or progress events do not count as the stream being alive."""
    for i in range(n_before, len(events)):
        if events[i].kind in _TOKEN_KINDS:
            return True
    return False


_TOKEN_KINDS = frozenset(("content", "reasoning"))


def _rearm(proto: Protocol, dog: _Watchdog, between: float | None, t_ns: int) -> None:
    """A token arrived at ``t_ns``: the first one switches the timer to between-tokens (a sooner
    deadline, so the timer is rescheduled); later ones only move the deadline number."""
    if proto.got_token:
        if dog.kind == "between_tokens":
            dog.deadline_ns = t_ns + between * 1e9 if between is not None else float("inf")
        return
    proto.got_token = True
    dog.arm("between_tokens", between)


def _guard(proto: Protocol, n_events: int, cap: int, n_buf: int, unit: str) -> None:
    """Only when a read passed ``cap`` events or ``_MAX_EVENT_BYTES`` unframed (tested inline: no string
    work per read; formatting the URL per read was ~10 % of the CPU at 1,024 streams, issue 22): stop
    more than max_tokens + margin tokens (:class:`~phasescope.errors.OverrunError`) or an endless ``unit``."""
    if n_events > cap and not proto.done:
        _check_overrun(proto)
    if n_buf > _MAX_EVENT_BYTES:
        raise E.MalformedEventError(f"{proto.target.display_url}{proto.path}: one streamed {unit} is over "
                                    f"{_MAX_EVENT_BYTES // 1024**2} MiB without an end; stopped reading")


async def _ended(proto: Protocol, dog: _Watchdog, content: aiohttp.StreamReader, rec: RequestRecord) -> bool:
    """The stream stopped: stamp ``t_done_ns``; True when the answer was complete (then no timeout may
    fail it, and what follows is drained), False when the bytes ran out first."""
    rec.t_done_ns = now_ns()
    if proto.done:
        dog.arm("done", None)
        await _drain(content)
        return True
    return False


class _SseFramer:
    """SSE ``data:`` events out of raw chunks, pushed in by whichever transport read them.

    ``feed(chunk)`` runs once per read, i.e. per event at high concurrency: events are cut out of
    the buffer by offset (no re-slicing of the remainder per event), each stamped with
    ``perf_counter_ns`` right after its JSON is decoded, and the between-tokens deadline moves
    with one store when the read brought a token. Comments (``:``), ``event:``/``id:`` lines are
    ignored. aiohttp's reader (:func:`_read_sse`) awaits ``readany()`` and feeds it; the raw
    transport (:mod:`phasescope.apis._fast`) feeds it from the parser's body callback.
    """

    __slots__ = ("proto", "dog", "rec", "target", "path", "between", "events", "on_message", "cap", "buf")

    def __init__(self, proto: Protocol, dog: _Watchdog) -> None:
        self.proto, self.dog, self.rec = proto, dog, proto.rec
        self.target, self.path = proto.target, proto.path
        self.between = proto.target.timeouts.between_tokens_s
        self.events = proto.rec.events
        self.on_message = proto.on_message
        # past this many events the tokens are counted: more than max_tokens + margin ends the read
        self.cap = int(proto.req.max_tokens or 0) + overrun_margin(int(proto.req.max_tokens or 0))
        self.buf = b""

    def feed(self, chunk: bytes) -> None:
        events = self.events
        n_before = len(events)
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self.buf + chunk if self.buf else chunk
        on_message, clock, scan = self.on_message, now_ns, _json_scan
        pos = 0
        t = 0
        while True:
            i = buf.find(b"\n\n", pos)
            if i < 0:
                break
            block = buf[pos:i]
            pos = i + 2
            if block[:6] == b"data: " and b"\n" not in block:
                payload = block[6:]
            else:
                payload = _sse_data(block)
                if payload is None:
                    continue
            if payload == b"[DONE]":
                self.proto.on_done_marker(clock())
                continue
            try:
                s = payload.decode("utf-8", "surrogatepass")
                if scan is not None:  # the C scanner alone (see _scan_json)
                    obj, end = scan(s, 0)
                    if end != len(s):
                        obj = _json_decode(s)
                else:
                    obj = _json_decode(s)
            except (ValueError, StopIteration):
                obj = _decode_json(payload, self.target, self.path)  # whitespace, or the one-line error
            t = clock()
            on_message(obj, t)
        self.buf = buf = buf[pos:] if pos else buf
        if len(events) > n_before and _token_in(events, n_before):
            _rearm(self.proto, self.dog, self.between, t)
        if (len(events) > self.cap or len(buf) > _MAX_EVENT_BYTES) and not self.proto.done:
            _guard(self.proto, len(events), self.cap, len(buf), "event")

    def eof(self) -> None:
        """The bytes ran out: a last event without its blank line still counts, then the
        protocol judges a stream that never said it was done (:meth:`Protocol.on_eof`)."""
        proto = self.proto
        if self.buf.strip():
            payload = _sse_data(self.buf)
            self.buf = b""
            if payload is not None and payload != b"[DONE]":
                proto.on_message(_decode_json(payload, self.target, self.path), now_ns())
        self.rec.t_done_ns = now_ns()
        if not proto.done:
            proto.on_eof()


async def _read_sse(resp: aiohttp.ClientResponse, proto: Protocol, dog: _Watchdog) -> None:
    """aiohttp's reads fed to :class:`_SseFramer` until the stream is done or its bytes run out."""
    framer = _SseFramer(proto, dog)
    feed = framer.feed
    content = resp.content
    while True:
        chunk = await content.readany()
        if not chunk:
            break
        feed(chunk)
        if proto.done:
            break
    if await _ended(proto, dog, content, proto.rec):
        return
    framer.eof()


def _sse_data(block: bytes) -> bytes | None:
    if block.startswith(b"data:") and b"\n" not in block:
        d = block[5:]
        return d[1:] if d[:1] == b" " else d
    parts = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            d = line[5:]
            parts.append(d[1:] if d[:1] == b" " else d)
    if not parts:
        return None
    return b"\n".join(parts)


async def _read_ndjson(resp: aiohttp.ClientResponse, proto: Protocol, dog: _Watchdog) -> None:
    """One JSON message per line; the same hot-loop shape as :func:`_read_sse`."""
    rec, target, path = proto.rec, proto.target, proto.path
    between = target.timeouts.between_tokens_s
    events = rec.events
    on_message = proto.on_message
    clock = now_ns
    cap = int(proto.req.max_tokens or 0) + overrun_margin(int(proto.req.max_tokens or 0))
    buf = b""
    content = resp.content
    while not proto.done:
        chunk = await content.readany()
        if not chunk:
            break
        n_before = len(events)
        buf = buf + chunk if buf else chunk
        pos = 0
        t = 0
        while True:
            i = buf.find(b"\n", pos)
            if i < 0:
                break
            line = buf[pos:i].strip()
            pos = i + 1
            if not line:
                continue
            obj = _decode_json(line, target, path)
            t = clock()
            on_message(obj, t)
        buf = buf[pos:] if pos else buf
        if len(events) > n_before and _token_in(events, n_before):
            _rearm(proto, dog, between, t)
        if len(events) > cap or len(buf) > _MAX_EVENT_BYTES:
            _guard(proto, len(events), cap, len(buf), "line")
    if await _ended(proto, dog, content, rec):
        return
    if buf.strip():
        obj = _decode_json(buf.strip(), target, path)
        proto.on_message(obj, now_ns())
    rec.t_done_ns = now_ns()
    if not proto.done:
        proto.on_eof()
