"""Issue 22: the raw receive path (phasescope.apis._fast: asyncio Protocol + httptools) gives the
same records as aiohttp's, never stamps an event before the server wrote it, reuses its keep-alive
connections, resends on a stale one, and is what load runs use when httptools is installed.

The fault matrix and the timeouts run on both paths in test_api_faults.py; the CLI runs of
test_i21_faults.py (a key echoed in a 401 body, an endless stream) go through it too, since bench
takes the raw path whenever httptools is installed.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from phasescope.apis import _fast, get_client, new_session
from phasescope.apis.base import GenRequest, Target, Timeouts
from phasescope.testing import FakeServer


@contextlib.asynccontextmanager
async def _serving(protocol: type[asyncio.Protocol]):
    """A raw asyncio server of ``protocol`` on 127.0.0.1, and an OpenAI target pointing at it."""
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    try:
        yield Target(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", api="openai", model="m",
                     timeouts=Timeouts())
    finally:
        server.close()

pytestmark = pytest.mark.skipif(not _fast.available(), reason="httptools not installed")


def shape(rec):
    """The record as a user reads it, minus its id and clock readings: every field, events without
    their times, the server's timings by name only (their values are the fake's measured durations)."""
    d = rec.to_dict()
    d["events"] = [e[1:] for e in d["events"]]
    d["server"] = sorted(d["server"]) if d.get("server") else d.get("server")
    return {k: v for k, v in d.items() if k not in ("id", "wall_start_ns") and not k.startswith("t_")}


@pytest.mark.parametrize("flavor,api", [("vllm", "openai"), ("vllm", "chat"), ("sglang", "chat"), ("llamacpp", "llamacpp")])
def test_same_records_as_aiohttp_and_never_before_the_server_wrote(flavor, api):
    async def go():
        async with FakeServer(flavor=flavor, ttft_s=0.01, itl_s=0.003, tokens_per_event=1) as srv:
            t = Target(srv.url, api=api, model="fake-model", engine=flavor, timeouts=Timeouts())
            out = {}
            async with new_session() as s:  # llama.cpp's fake caches the BOS token after the first request
                await get_client(api).send(s, t, GenRequest(prompt="warm", max_tokens=1))
            for fast in (False, True):
                async with new_session(fast=fast) as s:
                    # a new first word per request: no prompt cache makes the two passes differ
                    out[fast] = [await get_client(api).send(s, t, GenRequest(prompt=f"w{fast}{n} b c d e", max_tokens=n))
                                 for n in (1, 7, 12)]
                    if fast:
                        pool = s.fast_pool
                        # three requests one after another: one connection, back in the pool
                        assert len(pool.live) == 1 and sum(len(v) for v in pool.idle.values()) == 1
            return out, {g.id: g for g in srv.log}

    out, truth = asyncio.run(go())
    for a, b in zip(out[False], out[True]):
        assert b.ok, b.error_message
        assert shape(a) == shape(b)
        g = truth[b.id]
        ev = [e.t_ns for e in b.token_events()]
        assert len(ev) == len(g.t_events_ns)
        # causality: an event is stamped after the server's write returned, and in order
        assert all(c >= s for c, s in zip(ev, g.t_events_ns)), [(c - s) / 1e6 for c, s in zip(ev, g.t_events_ns)]
        assert b.t_start_ns <= b.t_conn_ready_ns <= b.t_headers_ns <= ev[0] <= b.t_done_ns
        assert b.t_start_ns <= g.t_recv_ns  # the request left before the server saw it


def test_ndjson_and_unstreamed_requests_stay_on_aiohttp():
    async def go():
        async with FakeServer(flavor="ollama", ttft_s=0.005, itl_s=0.002) as srv:
            t = Target(srv.url, api="ollama", model="fake-model", engine="ollama", timeouts=Timeouts())
            async with new_session(fast=True) as s:
                a = await get_client("ollama").send(s, t, GenRequest(prompt="a b c", max_tokens=5))
                pool_after_ndjson = len(s.fast_pool.live)
            async with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=0.002) as srv2:
                t2 = Target(srv2.url, api="openai", model="fake-model", timeouts=Timeouts())
                async with new_session(fast=True) as s:
                    b = await get_client("openai").send(s, t2, GenRequest(prompt="a b c", max_tokens=5, stream=False))
                    pool_after_body = len(s.fast_pool.live)
            return a, pool_after_ndjson, b, pool_after_body

    a, n1, b, n2 = asyncio.run(go())
    assert a.ok and a.output_tokens == 5 and n1 == 0
    assert b.ok and b.output_tokens == 5 and n2 == 0


def _three_token_stream() -> bytes:
    """A vLLM-style /v1/completions SSE body: three one-word tokens (the last with its finish), then [DONE]."""
    body = b"".join(b'data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":" w",'
                    b'"finish_reason":' + (b'"length"' if i == 2 else b"null") + b"}]}\n\n" for i in range(3))
    return body + b"data: [DONE]\n\n"


class _OneAnswerThenDrop(asyncio.Protocol):
    """An SSE server that answers the first request on a connection with keep-alive, then drops
    the connection when the next request arrives on it, without a byte: a stale pooled connection."""

    served = 0

    def connection_made(self, transport):
        self.transport, self.n = transport, 0

    def data_received(self, data):
        if b"\r\n\r\n" not in data:
            return
        self.n += 1
        if self.n > 1:
            self.transport.close()
            return
        type(self).served += 1
        body = _three_token_stream()
        chunk = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + chunk)


def test_a_stale_pooled_connection_is_resent_on_a_fresh_one():
    async def go():
        async with _serving(_OneAnswerThenDrop) as t, new_session(fast=True) as s:
            return [await get_client("openai").send(s, t, GenRequest(prompt="x", max_tokens=3)) for _ in range(3)]

    _OneAnswerThenDrop.served = 0
    recs = asyncio.run(go())
    assert [r.ok for r in recs] == [True] * 3, [r.error_message for r in recs]
    assert all(len(r.token_events()) == 3 for r in recs)
    assert _OneAnswerThenDrop.served == 3  # each resent request was answered on a new connection


def test_a_cancelled_request_does_not_poison_the_pool():
    """The caller cancels mid-stream (Ctrl-C, a run's deadline): the connection is dropped, and the
    next request gets a clean one."""
    async def go():
        async with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=0.05) as srv:
            t = Target(srv.url, api="openai", model="fake-model", timeouts=Timeouts())
            async with new_session(fast=True) as s:
                task = asyncio.create_task(get_client("openai").send(s, t, GenRequest(prompt="a", max_tokens=50)))
                await asyncio.sleep(0.15)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                after = await get_client("openai").send(s, t, GenRequest(prompt="a b", max_tokens=4))
                return after, len(s.fast_pool.live)

    after, live = asyncio.run(go())
    assert after.ok and len(after.token_events()) == 4 and live == 1


def test_load_runs_take_the_raw_path_unless_told_not_to(monkeypatch):
    from phasescope.load.runner import new_session as load_session

    async def kind():
        s = load_session()
        try:
            return type(s).__name__
        finally:
            await s.close()

    assert asyncio.run(kind()) == "FastSession"
    monkeypatch.setenv("PHASESCOPE_HTTPTOOLS", "0")
    assert asyncio.run(kind()) == "ClientSession"


@pytest.mark.parametrize("switch,path", [("1", "raw"), ("0", "aiohttp")])
def test_bench_says_which_receive_path_read_its_streams(switch, path, tmp_path, monkeypatch):
    """The summary's runner_health and the Client health line name the path (and loop) a run used,
    and the run's numbers come out whole on either."""
    import json
    import os
    import subprocess
    import sys

    with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=0.002).running() as srv:
        env = {**os.environ, "PHASESCOPE_HTTPTOOLS": switch}
        p = subprocess.run([sys.executable, "-m", "phasescope", "bench", srv.url, "-n", "6", "--max-concurrency", "3",
                            "--input-len", "8", "--output-len", "5", "--no-store", "--out", str(tmp_path / "b"),
                            "--no-server-metrics"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    h = s["runner_health"]
    assert h["receive_path"] == path and h["event_loop"] in ("uvloop", "asyncio")
    assert s["completed"] == 6 and s["failed"] == 0
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("Client health"))
    assert ("raw path (httptools)" in line) == (path == "raw") and h["event_loop"] in line


def test_ollamas_ndjson_streams_are_not_said_to_be_read_on_the_raw_path(tmp_path):
    """Ollama's NDJSON streams stay on aiohttp even when httptools is installed: the Client health
    line and runner_health say the path the streams took, not the session's kind (they said "raw")."""
    import json
    import subprocess
    import sys

    with FakeServer(flavor="ollama", ttft_s=0.005, itl_s=0.002).running() as srv:
        p = subprocess.run([sys.executable, "-m", "phasescope", "bench", srv.url, "-n", "4", "--max-concurrency", "2",
                            "--input-len", "8", "--output-len", "4", "--no-store", "--out", str(tmp_path / "b"),
                            "--no-server-metrics"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert s["completed"] == 4 and s["runner_health"]["receive_path"] == "aiohttp"
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("Client health"))
    assert "raw path" not in line, line


class _CloseDelimited(asyncio.Protocol):
    """Answers with no Content-Length and no chunking (the body ends when the connection does), as
    HTTP/1.0-style proxies do: ``mode`` "finish" = finish_reason but no [DONE], the last event
    without its blank line; "error" = a 500 whose JSON body ends at the close."""

    mode = "finish"

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if b"\r\n\r\n" not in data:
            return
        if self.mode == "error":
            self.transport.write(b'HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n'
                                 b'Connection: close\r\n\r\n{"error": {"message": "engine fell over"}}')
        else:
            ev = [b'data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":" w",'
                  b'"finish_reason":' + (b'"length"' if i == 2 else b"null") + b"}]}" for i in range(3)]
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                                 + b"\n\n".join(ev))  # no blank line after the last one
        self.transport.close()


@pytest.mark.parametrize("mode", ["finish", "error"])
def test_a_body_that_ends_with_the_connection_reads_as_aiohttp_reads_it(mode):
    async def go():
        _CloseDelimited.mode = mode
        async with _serving(_CloseDelimited) as t:
            out = []
            for fast in (False, True):
                async with new_session(fast=fast) as s:
                    out.append(await get_client("openai").send(s, t, GenRequest(prompt="x", max_tokens=3)))
            return out

    a, b = asyncio.run(go())
    assert shape(a) == shape(b)
    if mode == "finish":
        assert b.ok and len(b.token_events()) == 3, b.error_message
    else:
        assert b.error_kind == "http" and b.http_status == 500 and "engine fell over" in b.error_message


def test_a_redirect_is_followed_as_aiohttp_follows_it():
    """A 307 (a proxy moving the API) is followed on aiohttp's path, for this and later requests."""
    async def go():
        async with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=0.002) as srv:
            hits = []

            class Mover(asyncio.Protocol):
                def connection_made(self, transport):
                    self.transport = transport

                def data_received(self, data):
                    if b"\r\n\r\n" in data:
                        hits.append(1)
                        self.transport.write(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {srv.url}/v1/completions\r\n"
                                             f"Content-Length: 0\r\n\r\n".encode())

            loop = asyncio.get_running_loop()
            mover = await loop.create_server(Mover, "127.0.0.1", 0)
            t = Target(f"http://127.0.0.1:{mover.sockets[0].getsockname()[1]}", api="openai", model="fake-model",
                       timeouts=Timeouts())
            try:
                async with new_session(fast=True) as s:
                    recs = [await get_client("openai").send(s, t, GenRequest(prompt="a b", max_tokens=4)) for _ in range(2)]
                    return recs, len(hits), s.fast_pool.redirected
            finally:
                mover.close()

    recs, hits, redirected = asyncio.run(go())
    assert [r.ok for r in recs] == [True, True], [r.error_message for r in recs]
    assert all(len(r.token_events()) == 4 and r.http_status == 200 for r in recs)
    assert hits == 3 and len(redirected) == 1  # the raw try, then aiohttp's two requests (each redirected)


class _CountingServer(asyncio.Protocol):
    """Counts accepted connections; answers every POST with a 3-token SSE stream (keep-alive)."""
    accepted = 0

    def connection_made(self, transport):
        type(self).accepted += 1
        self.transport, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, rest = self.buf.split(b"\r\n\r\n", 1)
            n = next((int(ln.split(b":", 1)[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")), 0)
            if len(rest) < n:
                return
            self.buf = rest[n:]
            body = _three_token_stream()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("fast", [True, False])
def test_the_warm_up_opens_the_connections_the_streams_then_use(fast):
    """Before t0, a load run opens its first wave's connections (runner.prewarm). On the raw path
    they must be the raw pool's: warming only aiohttp's pool left every first-wave stream to open its
    own connection inside its TTFT (measured at 1,024 streams: starts spread over 370 ms, up to 15 ms
    of connect in one TTFT)."""
    from phasescope.apis import warm_up

    async def go():
        async with _serving(_CountingServer) as t, new_session(fast=fast) as s:
            warmed = await warm_up(s, t, 6)
            before = _CountingServer.accepted
            recs = await asyncio.gather(*(get_client("openai").send(s, t, GenRequest(prompt="x", max_tokens=3))
                                          for _ in range(6)))
            return warmed, before, _CountingServer.accepted, recs

    _CountingServer.accepted = 0
    warmed, before, after, recs = asyncio.run(go())
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    assert before == 6, before
    if fast:  # six concurrent streams, six warmed connections: none opened inside a TTFT
        assert warmed == 6 and after == 6, (warmed, after)
