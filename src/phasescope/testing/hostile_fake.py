"""A misbehaving OpenAI-compatible server on raw asyncio streams, for the modes aiohttp's server
cannot produce (issue 31): an interim ``100 Continue`` before every answer, info endpoints that
stall, never end, nest 100,000 levels deep or hold a 5,000-digit integer, and non-stream bodies
that trickle forever, and a server that takes every POST and never sends a byte back (``post_silent``;
``gen_silent``: only generation, its ``/tokenize`` answers).

    async with HostileServer(mode="continue") as srv: ...      # inside a loop
    with HostileServer(mode="models_deep").running() as srv: ... # from sync code (its own thread)

Modes (:data:`MODES`); everything not named by the mode answers as a small healthy vLLM-like server
(``/v1/models``, ``/v1/completions`` streamed and not, no ``/tokenize``, ``/metrics`` 404).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any, Iterator

MODES = (
    "ok",  # a healthy server (the baseline)
    "continue",  # "HTTP/1.1 100 Continue" before every answer to a POST
    "props_stall",  # GET /props: never answers (llama.cpp detection)
    "models_stall",  # GET /v1/models: never answers
    "models_deep",  # GET /v1/models: 100,000 levels of [
    "models_endless",  # GET /v1/models: headers, then a body that never ends
    "models_huge_int",  # GET /v1/models: an integer of 5,000 digits
    "body_endless",  # POST non-stream: headers, then a body that never ends; streams never send a token
    "post_silent",  # every POST (/tokenize, generation) is read and never answered: not a byte comes back
    "gen_silent",  # /tokenize answers (vLLM's shape, one token per word); generation is never answered
)
TOKEN = " the"


class HostileServer:
    host = "127.0.0.1"

    def __init__(self, *, mode: str = "ok", model: str = "hostile-model", port: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode, self.model, self.port = mode, model, port
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: (method, path, streamed) of every request, in arrival order
        self.requests: list[tuple[str, str, bool]] = []
        #: time.monotonic() of each request's arrival, parallel to :attr:`requests`
        self.arrived: list[float] = []
        #: the word → id map of ``gen_silent``'s /tokenize (ids from 1; 0 stands for the BOS)
        self._vocab: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> "HostileServer":
        self._server = await asyncio.start_server(self._conn, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for task in list(self._tasks):  # connections held open by a stalling mode
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def __aenter__(self) -> "HostileServer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator["HostileServer"]:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        t = threading.Thread(target=serve, name="hostile-fake", daemon=True)
        t.start()
        ready.wait(10)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            t.join(5)

    # -- the wire ---------------------------------------------------------------------------------
    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                self.requests.append((method, path, b'"stream":true' in body.replace(b" ", b"")))
                self.arrived.append(time.monotonic())
                await self._answer(method, path.split("?", 1)[0], body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _response(status: int, body: bytes, ctype: str = "application/json", reason: str = "OK") -> bytes:
        return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: keep-alive\r\n\r\n").encode() + body

    async def _forever(self) -> None:
        await asyncio.sleep(3600)

    async def _answer(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> None:
        mode = self.mode
        if method == "POST" and mode == "post_silent":
            return await self._forever()
        if method == "POST" and path == "/tokenize" and mode == "gen_silent":
            text = str(json.loads(body or b"{}").get("prompt") or "")
            ids = [0] + [self._vocab.setdefault(word, len(self._vocab) + 1) for word in text.split()]
            w.write(self._response(200, json.dumps({"count": len(ids), "max_model_len": 32768,
                                                    "tokens": ids}).encode()))
            return await w.drain()
        if method == "GET" and path == "/props" and mode == "props_stall":
            return await self._forever()
        if method == "GET" and path == "/v1/models":
            if mode == "models_stall":
                return await self._forever()
            if mode == "models_deep":
                deep = b"[" * 100_000 + b"]" * 100_000
                w.write(self._response(200, b'{"object":"list","data":' + deep + b"}"))
                return await w.drain()
            if mode == "models_huge_int":
                w.write(self._response(200, b'{"object":"list","data":[{"id":"m","created":' + b"9" * 5000 + b"}]}"))
                return await w.drain()
            if mode == "models_endless":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                w.write(b"1\r\n{\r\n")
                while True:
                    w.write(b"400\r\n" + b" " * 1024 + b"\r\n")
                    await w.drain()
                    await asyncio.sleep(0.001)
            models = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "vllm"}]}
            w.write(self._response(200, json.dumps(models).encode()))
            return await w.drain()
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            if mode == "continue":
                w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            req = json.loads(body or b"{}")
            n = max(1, int(req.get("max_tokens") or 16))
            prompt = req.get("prompt")
            n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split()) + 1
            if mode == "gen_silent":
                return await self._forever()
            if mode == "body_endless":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: "
                        + (b"text/event-stream" if req.get("stream") else b"application/json")
                        + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:  # keep-alive whitespace / SSE comments, never a token
                    w.write(b"2\r\n:\n\r\n" if req.get("stream") else b"1\r\n \r\n")
                    await w.drain()
                    await asyncio.sleep(0.05)
            usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
            if not req.get("stream"):
                obj = {"id": "c", "object": "text_completion", "model": self.model,
                       "choices": [{"index": 0, "text": TOKEN * n, "finish_reason": "length"}], "usage": usage}
                w.write(self._response(200, json.dumps(obj).encode()))
                return await w.drain()
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

            def chunk(data: bytes) -> bytes:
                return f"{len(data):x}\r\n".encode() + data + b"\r\n"

            for i in range(n):
                ev: dict[str, Any] = {"id": "c", "object": "text_completion", "model": self.model,
                      "choices": [{"index": 0, "text": TOKEN, "finish_reason": "length" if i == n - 1 else None}]}
                if i == n - 1:
                    ev["usage"] = usage
                w.write(chunk(b"data: " + json.dumps(ev).encode() + b"\n\n"))
            w.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            return await w.drain()
        w.write(self._response(404, b'{"error":"not found"}', reason="Not Found"))
        await w.drain()


__all__ = ["MODES", "HostileServer"]
