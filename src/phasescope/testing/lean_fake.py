"""A lean ground-truth vLLM fake for the accuracy benchmarks: never the bottleneck.

The aiohttp fake (:mod:`phasescope.testing.fakeserver`) runs a coroutine per stream and an aiohttp
request handler per request; on one core it saturates near 256–512 streams, and its own lag then
lands in every client's measured error. This one is a raw :class:`asyncio.Protocol` per connection
with no coroutine per stream: every token event is an entry in one deadline heap, written by one
timer callback (``loop.call_at``) when it is due. It speaks the subset of vLLM 0.33's OpenAI wire
format the benchmarks use, byte for byte as :mod:`phasescope.testing.wire.openai` does for
``flavor="vllm"``:

* ``POST /v1/completions`` and ``/v1/chat/completions``, streamed (SSE ``data:`` events in chunked
  transfer encoding, ``[DONE]`` at the end; ``stream_options.include_usage`` and
  ``continuous_usage_stats``; the last token's chunk carries ``finish_reason`` and ``stop_reason``;
  chat opens with the role-only delta) or not; the wrong model is vLLM's 404, bad JSON its 400;
* ``GET /v1/models``, ``/health``, ``/version``, ``/metrics`` (the counters phasescope reads),
  ``POST /tokenize``; every response echoes ``X-Request-Id`` (vLLM ``--enable-request-id-headers``);
* the same tokenizer (one token per whitespace-led word; chat: the fakes' template) and the same
  output text (:data:`~phasescope.testing.wire.common.WORDS`).

Ground truth, per generation request (a dict with the keys of
:class:`~phasescope.testing.wire.common.GroundTruth` plus ``t_due_ns``), all on
``time.perf_counter_ns`` — CLOCK_MONOTONIC, the clock phasescope's clients stamp with:
``t_arrived_ns`` when the request's bytes reached the socket (the kernel's receive timestamp,
``SO_TIMESTAMPNS``, of the read that completed it, moved onto the monotonic clock; Linux with the
stdlib loop, else None): the benchmarks' TTFT truth starts here, so a request that waited in the
socket while this fake's loop was busy is the instrument's wait, not the client's;
``t_rx_ns`` when the request's first bytes were read (before any parsing), ``t_recv_ns`` when its
head was parsed (the fake's clock for its answer starts here), ``t_events_ns`` just after each token event's write
returned, ``t_due_ns`` when each was due (``t_recv_ns + ttft + k·itl``, absolute, no drift). Their
difference is the fake's own **write lag**, which the benchmarks print beside every figure so a
saturated instrument is visible (:meth:`LeanFake.write_lag`). The truth goes to ``srv.log`` (a list),
to ``log_path`` as JSONL (serialised in the gaps between due events, written every 0.1 s and at
stop — no write or dump of it ever delays a token event), and
to ``GET /truth`` (JSONL of everything so far) / ``GET /truth/lag`` (the write-lag summary).

One job: a server whose every byte path (parse, schedule, write, log) shares the one deadline heap
and the one timer, so splitting it would spread one hot loop over modules and cost the indirection it
exists to avoid.

``spin_ms``: when the next event is due within this many ms the loop polls (``call_soon``) instead
of sleeping, since an idle selector wakes up to 1 ms late (epoll's millisecond timeout; libuv's
timers are millisecond too). It burns the fake's own core, so it is meant for a fake in its own
pinned process (the CLI's default is 2 ms); in-process fakes (tests) default to 0.

Run it as a process (benchmarks)::

    python -m phasescope.testing.lean_fake --ttft-ms 100 --itl-ms 40 --log truth.jsonl [--loop auto]
    # prints "READY http://127.0.0.1:PORT"; on SIGTERM flushes the log and prints
    # "LAG events=N p50_ms=… p99_ms=… max_ms=…"

or in a test: ``with LeanFake(ttft_s=0.02, itl_s=0.005).running() as srv:`` (its own loop on a thread),
or ``async with LeanFake(...) as srv:`` inside a running loop. ``--loop auto`` uses uvloop when it
is installed (``pip install phasescope[fast]``), the stdlib loop otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import socket
import struct
import sys
import time
import uuid
from email.utils import formatdate
from typing import Any, Iterator

from phasescope.testing._serve import serve_on_thread, serve_until_signal
from phasescope.testing.wire.common import WORDS, chat_template_ids, fake_token_count, fake_tokenize

__all__ = ["LeanFake", "main"]

_now = time.perf_counter_ns
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
_WORD_JSON = [json.dumps(w) for w in WORDS]
_loads = json.JSONDecoder().decode


def _choices(chat: bool, last: bool) -> list[bytes]:
    """The ``choices`` entry of a token event for each word (vLLM: the last token's carries the finish)."""
    fin = '"length","stop_reason":null' if last else "null"
    if chat:
        return [f'{{"index":0,"delta":{{"content":{w}}},"logprobs":null,"finish_reason":{fin}}}'.encode()
                for w in _WORD_JSON]
    return [f'{{"index":0,"text":{w},"logprobs":null,"finish_reason":{fin}}}'.encode() for w in _WORD_JSON]


#: [chat][last] → per-word choice bytes
_CHOICE = {(c, last): _choices(c, last) for c in (False, True) for last in (False, True)}
_MAX_HEAD = 64 * 1024
#: the truth log is serialised only when the next token event is due at least this far ahead
_IDLE_NS = 300_000
_MAX_BODY = 64 * 1024 * 1024


def _err(status: int, message: str, etype: str) -> dict[str, Any]:
    """vLLM's error body (as :func:`phasescope.testing.wire.openai.err_body`)."""
    return {"error": {"message": message, "type": etype, "param": None, "code": status}}


#: Linux's SO_TIMESTAMPNS (the kernel's receive time of each read's bytes, CLOCK_REALTIME)
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform == "linux" else None
_ANC = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_TIMESPEC = struct.Struct("qq")
#: what the replaced read callback uses of asyncio's selector transport (3.11-3.13)
_TRANSPORT_PARTS = ("_read_ready_cb", "_conn_lost", "_fatal_error", "_read_ready__on_eof", "max_size")


def _stamp_reads(tr: Any, conn: "_Conn") -> None:
    """Read this connection with ``recvmsg`` and keep each read's kernel receive timestamp in
    ``conn.t_kernel`` (on the monotonic clock), so the truth can start when a request's bytes reached
    the socket, not when this fake's loop got round to them (a burst of 1,024 requests queues behind
    the fake's own parsing; a vCPU wakes up late). The stdlib selector transport's read callback is
    replaced by the same code reading with ``recvmsg``; where that transport is not there (uvloop,
    not Linux) nothing changes and ``t_arrived_ns`` is None."""
    sock = getattr(tr, "_sock", None)
    if (_SO_TIMESTAMPNS is None or not _ANC or sock is None
            or not all(hasattr(tr, a) for a in _TRANSPORT_PARTS) or not hasattr(sock, "recvmsg")):
        return  # another loop, or a Python whose selector transport has changed shape
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return
    recvmsg, size, unpack = sock.recvmsg, tr.max_size, _TIMESPEC.unpack_from

    def read() -> None:  # asyncio's _SelectorSocketTransport._read_ready__data_received, with recvmsg
        if tr._conn_lost:
            return
        try:
            data, anc, _, _ = recvmsg(size, _ANC)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001  (as asyncio's own read callback)
            tr._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            tr._read_ready__on_eof()
            return
        for lvl, typ, cd in anc:
            if typ == _SO_TIMESTAMPNS and lvl == socket.SOL_SOCKET and len(cd) >= 16:
                sec, ns = unpack(cd)
                conn.t_kernel = sec * 1_000_000_000 + ns - (time.time_ns() - _now())
        try:
            conn.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001
            tr._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    tr._read_ready_cb = read


class _Stream:
    """One streamed answer: what its next event is and when it is due."""

    __slots__ = ("conn", "gt", "head", "chat", "n_out", "sent", "t0_ns", "ttft_ns", "itl_ns",
                 "continuous", "include_usage", "n_prompt", "dead", "cid", "created", "events", "wire")
    # set by the handler once the request is parsed (annotations only: no class attribute shadows a slot)
    head: str
    chat: bool
    n_out: int
    t0_ns: int
    ttft_ns: int
    itl_ns: int
    continuous: bool
    include_usage: bool
    n_prompt: int
    cid: str
    created: int
    wire: Any

    def __init__(self, conn: "_Conn", gt: dict[str, Any]) -> None:
        self.conn = conn
        self.gt = gt
        self.dead = False
        self.sent = 0
        self.events: list[int] = gt["t_events_ns"]


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection: requests parsed by hand (Content-Length bodies; the
    clients this serves never pipeline, but a pipelined request waits its turn)."""

    def __init__(self, srv: "LeanFake") -> None:
        self.srv = srv
        self.tr: asyncio.Transport | None = None
        self.buf = b""
        self.t_rx = 0
        self.t_kernel = 0  # the last read's kernel receive time (0: not stamped)
        self.t_arrived = 0  # ... of the read that completed the request being handled
        self.busy: _Stream | None = None
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]  # uvloop's transports are no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _stamp_reads(transport, self)
        self.srv._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.srv._conns.discard(self)
        st = self.busy
        if st is not None and not st.dead:
            st.dead = True
            st.gt["fault"] = st.gt["fault"] or "client_gone"
            self.srv._finish(st)
        self.busy = None
        self.tr = None

    def data_received(self, data: bytes) -> None:
        t = _now()  # first thing: when the bytes arrived
        if not self.buf:
            self.t_rx = t
        self.buf = self.buf + data if self.buf else data
        self._parse()

    def _parse(self) -> None:
        while self.busy is None and self.buf and self.tr is not None:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > _MAX_HEAD:
                    self._reply(413, _err(413, "request head too large", "BadRequestError"), "")
                    self.tr.close()
                return
            lines = self.buf[:i].decode("latin-1").split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self._reply(400, _err(400, "bad request line", "BadRequestError"), "")
                self.tr.close()
                return
            headers: dict[str, str] = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                headers[k.strip().lower()] = v.strip()
            try:
                n = int(headers.get("content-length") or 0)
            except ValueError:
                n = -1
            if n < 0 or n > _MAX_BODY or "chunked" in headers.get("transfer-encoding", "").lower():
                self._reply(400, _err(400, "a Content-Length body is required", "BadRequestError"), "")
                self.tr.close()
                return
            end = i + 4 + n
            if len(self.buf) < end:
                return
            body = self.buf[i + 4:end]
            self.buf = self.buf[end:]
            t_rx = self.t_rx
            self.t_rx = _now() if self.buf else 0
            self.close_after = headers.get("connection", "").lower() == "close"
            self.t_arrived = self.t_kernel
            self.srv._handle(self, method, target.split("?", 1)[0], headers, body, t_rx, _now())

    def _reply(self, status: int, obj: Any, rid: str, ctype: str = "application/json") -> None:
        if self.tr is None:
            return
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.tr.write(self.srv._head(status, ctype, rid, len(body)) + body)
        self._after_response()

    def _after_response(self) -> None:
        if self.close_after and self.tr is not None:
            self.tr.close()

    def stream_done(self) -> None:
        self.busy = None
        self._after_response()
        if self.buf and self.tr:
            self._parse()


class LeanFake:
    """The lean vLLM fake (see the module docstring)."""

    def __init__(self, *, model: str = "fake-model", ttft_s: float = 0.02, itl_s: float = 0.005,
                 max_model_len: int = 32768, log_path: str | None = None, spin_ms: float = 0.0,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.model = model
        self.ttft_ns = int(ttft_s * 1e9)
        self.itl_ns = int(itl_s * 1e9)
        self.max_model_len = max_model_len
        self.log_path = log_path
        self.spin_ns = int(spin_ms * 1e6)
        self.host = host
        self.port = port
        self.log: list[dict[str, Any]] = []
        self.requests = 0
        self._heap: list[tuple[int, int, _Stream]] = []
        self._seq = 0
        self._cids = int.from_bytes(uuid.uuid4().bytes[:6], "big")
        self._timer: asyncio.Handle | None = None
        self._timer_due = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_Conn] = set()
        self._pending_log: list[str] = []  # serialised, not yet written
        self._unserialised: list[dict[str, Any]] = []  # finished, not yet serialised (see _idle_work)
        self._logfh: Any = None
        self._flusher: asyncio.TimerHandle | None = None
        self._running = 0
        self._counters = {"prompt": 0, "gen": 0}
        self._date = ""
        self._date_s = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> "LeanFake":
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(lambda: _Conn(self), self.host, self.port, backlog=4096,
                                                      reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        if _SO_TIMESTAMPNS is not None:  # now, so bytes that arrive before a connection is accepted carry it too
            for ls in self._server.sockets:
                with contextlib.suppress(OSError):
                    ls.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        if self.log_path:
            self._logfh = open(self.log_path, "a", encoding="utf-8")
            self._flusher = self._loop.call_later(0.1, self._flush_tick)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self._conns):
                if c.tr is not None:
                    c.tr.close()
            await asyncio.sleep(0)
            self._server = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        self.flush()
        if self._logfh is not None:
            self._logfh.close()
            self._logfh = None

    async def __aenter__(self) -> "LeanFake":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator["LeanFake"]:
        """Serve from a background thread with its own event loop."""
        with serve_on_thread(self, "lean-fake"):
            yield self

    # -- truth --------------------------------------------------------------------------------
    def flush(self) -> None:
        self._serialise(None)
        self._write_pending()

    def _write_pending(self) -> None:
        if self._logfh is not None and self._pending_log:
            self._logfh.write("".join(self._pending_log))  # already serialised, one request at a time
            self._logfh.flush()
        self._pending_log.clear()

    def _flush_tick(self) -> None:
        self._idle_work()  # serialise only what fits before the next due event
        self._write_pending()
        if self._loop is not None and self._logfh is not None:
            self._flusher = self._loop.call_later(0.1, self._flush_tick)

    def _record(self, gt: dict[str, Any]) -> None:
        self.log.append(gt)
        if self._logfh is not None:  # serialised when no event is due soon (_idle_work), written in a batch
            self._unserialised.append(gt)

    def _serialise(self, until_ns: int | None) -> None:
        """Serialise finished requests' truth (tens of µs each), all of them or until ``until_ns``."""
        todo, out = self._unserialised, self._pending_log
        k = 0
        while k < len(todo):
            out.append(json.dumps(todo[k]) + "\n")
            k += 1
            if until_ns is not None and _now() >= until_ns:
                break
        del todo[:k]

    def _idle_work(self) -> None:
        """Serialise the truth log only in the gaps between due events (a gap of at least
        ``_IDLE_NS``), so a burst of finished requests never delays a token write."""
        if not self._unserialised:
            return
        if not self._heap:
            self._serialise(None)
            return
        left = self._heap[0][0] - _now()
        if left > _IDLE_NS:
            self._serialise(self._heap[0][0] - _IDLE_NS // 2)

    def write_lag(self) -> dict[str, Any]:
        """The fake's own lag: token-event write time − due time, over every event so far (ms)."""
        a = sorted(t - d for g in self.log for t, d in zip(g["t_events_ns"], g["t_due_ns"]))
        if not a:
            return {"events": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}

        def q(p: float) -> float:
            return a[min(len(a) - 1, int(p * (len(a) - 1) + 0.5))] / 1e6

        return {"events": len(a), "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": a[-1] / 1e6}

    # -- HTTP ---------------------------------------------------------------------------------
    def _head(self, status: int, ctype: str, rid: str, length: int | None) -> bytes:
        s = int(time.time())
        if s != self._date_s:
            self._date_s, self._date = s, formatdate(s, usegmt=True)
        h = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ndate: {self._date}\r\nserver: uvicorn\r\n"
             f"content-type: {ctype}\r\n")
        h += f"content-length: {length}\r\n" if length is not None else "transfer-encoding: chunked\r\n"
        if rid:
            h += f"x-request-id: {rid}\r\n"
        return (h + "\r\n").encode("latin-1")

    def _handle(self, c: _Conn, method: str, path: str, headers: dict[str, str], body: bytes, t_rx: int,
                t_recv: int) -> None:
        rid = headers.get("x-request-id", "")
        if path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                return c._reply(405, _err(405, "Method Not Allowed", "BadRequestError"), rid)
            return self._generate(c, path, rid, body, t_rx, t_recv)
        if method == "GET" and path == "/v1/models":
            card = {"id": self.model, "object": "model", "created": 1767225600, "owned_by": "vllm",
                    "root": self.model, "parent": None, "max_model_len": self.max_model_len}
            return c._reply(200, {"object": "list", "data": [card]}, rid)
        if method == "GET" and path == "/health":
            return c._reply(200, b"", rid)
        if method == "GET" and path == "/version":
            return c._reply(200, {"version": "0.33.0"}, rid)
        if method == "POST" and path == "/tokenize":
            try:
                ids = fake_tokenize(json.loads(body or b"{}").get("prompt", ""))
            except (ValueError, AttributeError):
                return c._reply(400, _err(400, "malformed JSON body", "BadRequestError"), rid)
            return c._reply(200, {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids,
                                  "token_strs": None}, rid)
        if method == "GET" and path == "/metrics":
            lab = f'{{engine="0",model_name="{self.model}"}}'
            text = "".join(
                f"# HELP vllm:{n} {h}\n# TYPE vllm:{n} {k}\nvllm:{n}{lab} {float(v)}\n" for n, k, h, v in (
                    ("num_requests_running", "gauge", "Number of requests in model execution batches.", self._running),
                    ("prompt_tokens_total", "counter", "Number of prefill tokens processed.", self._counters["prompt"]),
                    ("generation_tokens_total", "counter", "Number of generation tokens processed.",
                     self._counters["gen"])))
            return c._reply(200, text.encode(), rid, "text/plain; charset=utf-8")
        if method == "GET" and path == "/truth":
            return c._reply(200, "".join(json.dumps(g) + "\n" for g in self.log).encode(), rid,
                            "application/jsonl")
        if method == "GET" and path == "/truth/lag":
            return c._reply(200, self.write_lag(), rid)
        return c._reply(404, {"detail": "Not Found"}, rid)

    def _generate(self, c: _Conn, path: str, rid: str, raw: bytes, t_rx: int, t_recv: int) -> None:
        gt: dict[str, Any] = {"id": rid or uuid.uuid4().hex[:16], "path": path, "t_recv_ns": t_recv, "t_rx_ns": t_rx,
                              "t_arrived_ns": c.t_arrived or None,
                              "t_body_ns": t_recv, "t_headers_ns": None, "t_events_ns": [], "tokens_per_event": [],
                              "prompt_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "status": 200,
                              "fault": None, "t_due_ns": []}
        try:
            body = _loads(raw.decode("utf-8"))  # a str: no encoding detection (bad UTF-8 is a ValueError too)
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            gt["status"] = 400
            self._record(gt)
            return c._reply(400, _err(400, "malformed JSON body", "invalid_request_error"), rid)
        self.requests += 1
        chat = path.endswith("/chat/completions")
        model = body.get("model")
        if model is not None and model != self.model:
            gt["status"] = 404
            self._record(gt)
            return c._reply(404, _err(404, f"The model `{model}` does not exist.", "NotFoundError"), rid)
        n_prompt = len(chat_template_ids(body.get("messages", []))) if chat else self._prompt_len(body.get("prompt", ""))
        gt["prompt_tokens"] = n_prompt
        self._counters["prompt"] += n_prompt
        n_out = max(0, int(body.get("max_tokens") or body.get("max_completion_tokens") or 16))
        so = body.get("stream_options") or {}
        st = _Stream(c, gt)
        st.chat, st.n_out, st.n_prompt = chat, n_out, n_prompt
        st.include_usage = bool(so.get("include_usage"))
        st.continuous = st.include_usage and bool(so.get("continuous_usage_stats"))
        self._cids += 1  # distinct per request like vLLM's random ids, without a urandom call each
        st.cid = ("chatcmpl-" if chat else "cmpl-") + "%012x" % (self._cids & 0xFFFFFFFFFFFF)
        st.created = int(time.time())
        st.t0_ns, st.ttft_ns, st.itl_ns = t_recv, self.ttft_ns, self.itl_ns
        obj = "chat.completion.chunk" if chat else "text_completion"
        st.head = (f'data: {{"id":"{st.cid}","object":"{obj}","created":{st.created},'
                   f'"model":{json.dumps(self.model)},"choices":[')
        c.busy = st
        self._running += 1
        if not body.get("stream"):
            st.include_usage = False  # marks the non-streamed answer in _fire
            st.head = ""
            self._push(t_recv + self.ttft_ns + self.itl_ns * max(0, n_out - 1), st)
            return
        assert c.tr is not None
        out = self._head(200, "text/event-stream; charset=utf-8", rid, None)
        if chat:  # the role-only opening delta, before the prompt is processed
            out += self._chunk(st, '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                                   '"finish_reason":null}', 0 if st.continuous else None)
        c.tr.write(out)
        gt["t_headers_ns"] = _now()
        st.wire = self._wire(st)  # every event's bytes now, so a due event is one list index and one write
        self._push(t_recv + self.ttft_ns, st)

    def _prompt_len(self, prompt: Any) -> int:
        """Prompt tokens: a token-id list's length (the first of a batch), else the fakes' tokenizer's count."""
        if isinstance(prompt, str):
            return fake_token_count(prompt)
        if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
            return len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return len(prompt[0])
        return fake_token_count(json.dumps(prompt))

    def _usage(self, st: _Stream, n: int) -> str:
        return f'{{"prompt_tokens":{st.n_prompt},"total_tokens":{st.n_prompt + n},"completion_tokens":{n}}}'

    def _chunk(self, st: _Stream, choice: str | None, usage_n: int | None) -> bytes:
        d = st.head + (choice or "") + "]"
        if usage_n is not None:
            d += ',"usage":' + self._usage(st, usage_n)
        data = (d + "}\n\n").encode()
        return b"%x\r\n%s\r\n" % (len(data), data)

    def _wire(self, st: _Stream) -> list[bytes]:
        """The bytes of every token event of a streamed answer, in order, built when the request
        arrives (tens of µs then) so that writing one when it is due costs no formatting: one
        chunk per token (the last one followed by the usage chunk, ``[DONE]`` and the chunked
        body's end), or for ``max_tokens`` 0 the finish chunk alone (no token event)."""
        n = st.n_out
        if n == 0:
            fch = ('{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}' if st.chat
                   else '{"index":0,"text":"","logprobs":null,"finish_reason":"length"}')
            out = [self._chunk(st, fch, None)]
        elif st.continuous:
            out = [self._chunk(st, _CHOICE[(st.chat, i + 1 >= n)][i % 12].decode(), i + 1) for i in range(n)]
        else:
            pre = st.head.encode()
            lp = len(pre) + 4
            chs = (_CHOICE[(st.chat, i + 1 >= n)][i % 12] for i in range(n))
            out = [b"%x\r\n%b%b]}\n\n\r\n" % (lp + len(ch), pre, ch) for ch in chs]
        if st.include_usage:
            out[-1] += self._chunk(st, None, n)
        out[-1] += b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
        return out

    # -- the token clock ----------------------------------------------------------------------
    def _push(self, due: int, st: _Stream) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, st))
        if self._timer is None or due < self._timer_due:
            self._arm(due)

    def _arm(self, due: int) -> None:
        loop = self._loop
        assert loop is not None
        if self._timer is not None:
            self._timer.cancel()
        left = due - _now()
        self._timer_due = due
        if left <= self.spin_ns:
            self._timer = loop.call_soon(self._fire)  # poll: due within spin_ms
        else:
            self._timer = loop.call_at(loop.time() + (left - self.spin_ns) / 1e9, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        pop, emit = heapq.heappop, self._emit
        now = _now()
        while heap and heap[0][0] <= now:
            due, _, st = pop(heap)
            if not st.dead:
                now = emit(st, due) or _now()  # the emit's own clock read after its write, when it wrote
            else:
                now = _now()
        if self._unserialised:
            self._idle_work()
        if heap:
            self._arm(heap[0][0])

    def _emit(self, st: _Stream, due: int) -> int:
        """Write one due event; returns the clock read just after the write (0 when nothing was written)."""
        tr = st.conn.tr
        if tr is None or tr.is_closing():
            return 0  # the client went away: connection_lost records it
        if st.head == "":  # a non-streamed answer, all at once
            self._emit_whole(st, tr)
            return 0
        # the hot path: the event's bytes were built when the request arrived (_wire)
        i = st.sent
        wire = st.wire
        tr.write(wire[i])
        t = _now()
        i += 1
        if st.n_out:
            st.events.append(t)  # a token event (max_tokens 0 sends the finish chunk alone: no token)
            st.sent = i
        if i >= len(wire):
            st.gt["output_tokens"] = st.sent
            self._counters["gen"] += st.sent
            self._finish(st)
            st.conn.stream_done()
        else:
            self._seq += 1
            heapq.heappush(self._heap, (due + st.itl_ns, self._seq, st))  # = t0 + ttft + sent·itl, no drift
        return t

    def _emit_whole(self, st: _Stream, tr: Any) -> None:
        gt = st.gt
        text = "".join(WORDS[j % len(WORDS)] for j in range(st.n_out))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
        if st.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = {"id": st.cid, "object": "chat.completion" if st.chat else "text_completion",
                "created": st.created, "model": self.model, "choices": [choice],
                "usage": json.loads(self._usage(st, st.n_out))}
        gt["output_tokens"] = st.n_out
        self._counters["gen"] += st.n_out
        data = json.dumps(body).encode()
        tr.write(self._head(200, "application/json", gt["id"] if gt["id"] else "", len(data)) + data)
        self._finish(st)
        st.conn.stream_done()

    def _finish(self, st: _Stream) -> None:
        self._running -= 1
        st.dead = True
        gt = st.gt
        n = len(st.events)
        if st.head:  # streamed: when each event was due, and the lag (truth kept per request, not per event)
            gt["t_due_ns"] = [st.t0_ns + st.ttft_ns + k * st.itl_ns for k in range(n)]
            gt["tokens_per_event"] = [1] * n
        self._record(gt)


# --- a separate process (benchmarks) -----------------------------------------------------------
def loop_factory(kind: str) -> Any:
    """``auto``: uvloop's loop when uvloop is installed, else the stdlib's; ``uvloop`` insists."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise SystemExit("phasescope: error: --loop uvloop needs uvloop (pip install 'phasescope[fast]')") from None
            return asyncio.new_event_loop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m phasescope.testing.lean_fake", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--log", default=None, help="JSONL ground-truth log (one line per generation request)")
    ap.add_argument("--spin-ms", type=float, default=2.0, help="poll instead of sleeping this close to a due event")
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    a = ap.parse_args(argv)
    srv = LeanFake(model=a.model, port=a.port, ttft_s=a.ttft_ms / 1000, itl_s=a.itl_ms / 1000, log_path=a.log,
                   spin_ms=a.spin_ms)

    async def run() -> None:
        await serve_until_signal(srv)
        loop = asyncio.get_running_loop()
        lag = srv.write_lag()
        print(f"LAG events={lag['events']} p50_ms={lag['p50_ms']} p99_ms={lag['p99_ms']} max_ms={lag['max_ms']} "
              f"loop={type(loop).__module__}", flush=True)

    # The truth log and every stream's state live until exit: a full collection of them would stall
    # the token clock for tens of ms, and nothing here makes reference cycles that need it.
    import gc

    gc.collect()
    gc.freeze()
    gc.disable()
    with asyncio.Runner(loop_factory=loop_factory(a.loop)) as r:
        r.run(run())


if __name__ == "__main__":  # pragma: no cover
    main()
