"""Faithful fake LLM servers on 127.0.0.1 that log when they really sent each event.

Real aiohttp HTTP servers, bound to 127.0.0.1 on a free port, speaking the wire formats of vLLM
0.33, SGLang 0.5.23, llama-server (llama.cpp 0c1e57098), Ollama 0.33, Anthropic's Messages API and
OpenAI's Responses API as their sources define them (edge cases included), for the APIs we cannot run here and for fault
injection. Every request's ground truth is logged with ``time.perf_counter_ns`` (CLOCK_MONOTONIC,
so it is comparable with a client's ``now_ns`` in another process on the same machine).
One job: the server's configuration and its request loop; each wire format and the spec-decode
schedule live in ``testing/wire/``, and what stays here is the constructor's documented knobs.

Constructor (all keyword arguments)::

    FakeServer(
        flavor="vllm",            # vllm | sglang | llamacpp | ollama | anthropic | responses — which server to
                                  # imitate (the last two: a server with only /v1/messages or /v1/responses)
        model="fake-model",       # served model name; other names get the server's 404
        ttft_s=0.02,              # fixed delay from request body read to the first token
        prefill_tok_s=None,       # if set, + evaluated_prompt_tokens / prefill_tok_s (TTFT grows with prompt)
        itl_s=0.005,              # time per output token after the first (absolute deadlines, no drift)
        tokens_per_event=1,       # tokens packed into one SSE/NDJSON event (vLLM --stream-interval, spec decode)
        reasoning_tokens=0,       # the first N output tokens are reasoning (delta.reasoning / reasoning_content / thinking)
        reasoning_format="field", # "field": reasoning in its own delta field (chat; a server with a reasoning
                                  # parser, which also counts it in usage); "think": inside the text, token 0
                                  # "<think>" and token N−1 "</think>" (no parser: llama.cpp --reasoning-format none)
        eos_after=None,           # the model "stops" after N tokens unless ignore_eos (Ollama has no ignore_eos)
        api_key=None,             # require "Authorization: Bearer <key>" (401 otherwise)
        fault=None,               # see FAULTS
        fault_after=2,            # token events sent before cut / malformed / error_event / stall
        fault_count=None,         # only the first N requests get the fault (None = all) — for retry tests
        fault_skip=0,             # the first N generation requests are answered well (a server that dies later)
        retry_after=1,            # Retry-After seconds for overloaded / unavailable (None = header omitted)
        stall_s=3600.0,           # how long "stall" stays silent
        ping_s=None,              # during a stall, SSE keep-alive comments ":\n\n" every ping_s (llama.cpp sse_ping_interval)
        load_s=0.0,               # Ollama: load_duration (and delay) of the first request
        max_model_len=32768,
        log_path=None,            # also append each request's ground truth as JSONL here
        prefix_cache=False,       # vLLM/SGLang: automatic prefix caching in 16-token blocks (usage cached_tokens,
                                  # vllm:prefix_cache_{queries,hits}_total / sglang:cached_tokens_total)
        glue_every=None,          # every k-th output token glues onto the word before (no leading space): the
                                  # reply re-tokenizes to fewer tokens than were generated, as real models' can
        spec_draft=0,             # speculative decoding: draft tokens proposed per verified step (0 = off)
        spec_accepted=None,       # accepted drafts per step, cycled (default: all of spec_draft); each step is
                                  # one event of accepted + 1 tokens, one itl_s apart; the truth is
                                  # spec_counts(n): vLLM exports vllm:spec_decode_num_{drafts,draft_tokens,
                                  # accepted_tokens}_total, SGLang sglang:spec_accept_length / _rate, llama.cpp
                                  # timings.draft_n / draft_n_accepted and llamacpp:spec_decode_* counters
    )

Use it as ``async with FakeServer(...) as srv:`` (inside a loop), ``with FakeServer(...).running()
as srv:`` (from sync code: it runs its own loop in a thread), or as a separate process::

    python -m phasescope.testing --flavor vllm --ttft-ms 20 --itl-ms 5 --log gt.jsonl
    # prints "READY http://127.0.0.1:PORT" on stdout, serves until SIGTERM/SIGINT

``srv.url`` is ``http://127.0.0.1:PORT``; ``srv.log`` is a list of :class:`GroundTruth`, one per
generation request, keyed by the client's ``X-Request-Id`` header (phasescope clients send their
record id there). ``GroundTruth.t_events_ns`` holds the send time (just after the write returned)
of every token-carrying event, ``tokens_per_event`` their token counts.

The server is this module's :class:`FakeServer` (its state and the steps every format shares: auth,
faults, prompt caches, the token schedule, streaming) over one handler module per wire format in
:mod:`phasescope.testing.wire`, and the loopback lifecycle of :mod:`phasescope.testing._serve`.

Tokenizer: one token per whitespace-led word (``" the"``), plus a BOS token for llama.cpp text
prompts; token-id prompts (lists of ints) count as given. ``/tokenize`` uses the same rule. Chat
messages go through :func:`~phasescope.testing.wire.common.chat_template_ids` (3 template tokens per
request, 4 more per assistant message), so a conversation's next turn extends the previous prompt exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import asdict
from typing import Any, AsyncIterator, Awaitable, Callable

from aiohttp import web

from phasescope.testing._serve import LoopbackServer, rx_ns, serve_until_signal
from phasescope.testing.wire import anthropic, llamacpp, metrics, ollama, openai, responses, spec
from phasescope.testing.wire.common import (BOS_ID, FAULTS, FLAVORS, MID_STREAM, REASONING_FORMATS, GroundTruth,
                                            bind, fake_tokenize, words)

__all__ = ["FAULTS", "FLAVORS", "FakeServer", "GroundTruth", "fake_tokenize", "main"]

#: flavor → the module of its wire format
_WIRE = {"vllm": openai, "sglang": openai, "llamacpp": llamacpp, "ollama": ollama, "anthropic": anthropic,
         "responses": responses}


class FakeServer(LoopbackServer):
    """A fake LLM server of one flavor (see the module docstring for the constructor)."""

    thread_name = "fake-llm"
    client_max_size = 64 * 1024 * 1024

    def __init__(
        self,
        *,
        flavor: str = "vllm",
        model: str = "fake-model",
        ttft_s: float = 0.02,
        prefill_tok_s: float | None = None,
        itl_s: float = 0.005,
        tokens_per_event: int = 1,
        reasoning_tokens: int = 0,
        reasoning_format: str = "field",
        eos_after: int | None = None,
        api_key: str | None = None,
        fault: str | None = None,
        fault_after: int = 2,
        fault_count: int | None = None,
        fault_skip: int = 0,
        retry_after: float | None = 1,
        stall_s: float = 3600.0,
        ping_s: float | None = None,
        load_s: float = 0.0,
        max_model_len: int = 32768,
        log_path: str | None = None,
        prefix_cache: bool = False,
        glue_every: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        error_text: str = "internal engine error",
        spec_draft: int = 0,
        spec_accepted: tuple[int, ...] | list[int] | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}")
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")
        self.flavor = flavor
        self.wire = _WIRE[flavor]
        self.model = model
        self.ttft_s = ttft_s
        self.prefill_tok_s = prefill_tok_s
        self.itl_s = itl_s
        self.tokens_per_event = max(1, int(tokens_per_event))
        self.reasoning_tokens = reasoning_tokens
        if reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"reasoning_format must be one of {REASONING_FORMATS}")
        self.reasoning_format = reasoning_format
        self.eos_after = eos_after
        self.api_key = api_key
        self.fault = fault
        self.fault_after = fault_after
        self.fault_count = fault_count
        self.fault_skip = fault_skip
        self._fault_seen = 0  # generation requests that asked for a fault (fault_skip counts them)
        self.retry_after = retry_after
        self.stall_s = stall_s
        self.ping_s = ping_s
        self.load_s = load_s
        self.max_model_len = max_model_len
        self.glue_every = glue_every
        self.error_text = error_text  # the "http500" body's message (a hostile one may carry escapes)
        self.log_path = log_path
        self.host = host
        self.port = port
        self.log: list[GroundTruth] = []
        self.requests = 0  # generation requests received
        self._faulted = 0
        self._echo_auth = ""
        self._loaded = False
        self._last_prompt: list[int] = []
        self._runner: web.AppRunner | None = None
        self._logfh: Any = None
        self._running = 0
        self._counters = {"prompt": 0, "gen": 0, "req": 0, "pc_queries": 0, "pc_hits": 0,
                          "spec_drafts": 0, "spec_draft_tokens": 0, "spec_accepted": 0}
        self.spec_draft, self.spec_accepted = spec.check(spec_draft, spec_accepted)
        self.prefix_cache = prefix_cache
        self._blocks: set[int] = set()  # hashes of cached 16-token block chains (vLLM APC)


    # -- routes ---------------------------------------------------------------------------
    def _routes(self, router: web.UrlDispatcher) -> None:
        self.wire.add_routes(self, router)
        if self.flavor == "llamacpp":  # llama-server speaks the OpenAI-compatible API too
            openai.add_openai_routes(self, router)
        if self.flavor in ("vllm", "sglang", "llamacpp"):  # each serves /v1/responses
            router.add_post("/v1/responses", bind(self, responses.respond))
        if self.flavor in ("vllm", "llamacpp"):  # and /v1/messages (vLLM's Anthropic endpoint, llama-server's)
            router.add_post("/v1/messages", bind(self, anthropic.messages))
        if self.flavor in ("vllm", "sglang", "llamacpp"):
            metrics.add_routes(self, router)

    async def _on_start(self) -> None:
        if self.log_path:
            self._logfh = open(self.log_path, "a", encoding="utf-8")

    async def _on_stop(self) -> None:
        if self._logfh is not None:
            self._logfh.close()
            self._logfh = None

    # -- helpers --------------------------------------------------------------------------
    def _err_body(self, status: int, message: str, etype: str) -> Any:
        return self.wire.err_body(status, message, etype)

    def _auth(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        h = request.headers.get("Authorization", "")
        if self.flavor == "anthropic":  # Anthropic reads x-api-key only
            h = request.headers.get("x-api-key", "")
            if h != self.api_key:
                return web.json_response(self._err_body(401, "invalid x-api-key", "authentication_error"), status=401)
            return None
        if h != f"Bearer {self.api_key}":
            return web.json_response(self._err_body(401, "Invalid API Key" if h else "Missing API key", "authentication_error"), status=401)
        return None

    def _take_fault(self) -> str | None:
        if self.fault is None:
            return None
        self._fault_seen += 1
        if self._fault_seen <= self.fault_skip:
            return None
        if self.fault_count is not None and self._faulted >= self.fault_count:
            return None
        self._faulted += 1
        return self.fault

    def _pre_fault(self, fault: str | None, gt: GroundTruth) -> web.Response | None:
        if fault == "forbidden":
            gt.status = 403
            return web.json_response(self._err_body(403, "Forbidden: key lacks access to this model", "permission_error"), status=403)
        if fault in ("overloaded", "unavailable"):
            status = 429 if fault == "overloaded" else 503
            gt.status = status
            msg = "server busy, please try again.  maximum pending requests exceeded" if self.flavor == "ollama" else "Too many requests in the queue"
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
            return web.json_response(self._err_body(status, msg, "unavailable_error"), status=status, headers=headers)
        if fault == "echo_key":
            gt.status = 401
            auth = self._echo_auth
            return web.json_response(self._err_body(401, f"Invalid API key: {auth}", "authentication_error")
                                     | {"received_headers": {"Authorization": auth}}, status=401,
                                     headers={"WWW-Authenticate": f'Bearer realm="fake", error="invalid_token", token="{auth}"'})
        if fault == "http500":
            gt.status = 500
            return web.json_response(self._err_body(500, self.error_text, "server_error"), status=500)
        return None

    def _prompt_ids(self, prompt: Any, *, bos: bool) -> list[int]:
        if isinstance(prompt, list) and all(isinstance(x, int) for x in prompt):
            return list(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return list(prompt[0])
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        ids = fake_tokenize(text)
        return ([BOS_ID] + ids) if bos else ids

    def _cache(self, ids: list[int], use_cache: bool) -> int:
        """Prefix-cache hit length (llama.cpp/Ollama single slot); at least one token is evaluated."""
        n = 0
        if use_cache:
            for a, b in zip(ids, self._last_prompt):
                if a != b:
                    break
                n += 1
            n = min(n, max(0, len(ids) - 1))
        self._last_prompt = list(ids)
        return n

    def _apc(self, ids: list[int]) -> int:
        """vLLM-style automatic prefix caching: full 16-token blocks whose whole chain (this block
        and every block before it) was seen before are hits; the prompt's blocks are then cached."""
        if not self.prefix_cache or self.flavor not in ("vllm", "sglang"):
            return 0
        bs, h, hit, chain = 16, 0, 0, True
        for i in range(0, len(ids) - len(ids) % bs, bs):
            h = hash((h, tuple(ids[i:i + bs])))
            if chain and h in self._blocks:
                hit += bs
            else:
                chain = False
                self._blocks.add(h)
        hit = min(hit, max(0, len(ids) - 1))
        self._counters["pc_queries"] += len(ids)
        self._counters["pc_hits"] += hit
        return hit

    def _ttft(self, evaluated: int) -> float:
        t = self.ttft_s
        if self.prefill_tok_s:
            t += evaluated / self.prefill_tok_s
        return t

    def _n_out(self, max_tokens: int, ignore_eos: bool) -> int:
        n = max(0, int(max_tokens))
        if self.eos_after is not None and not ignore_eos:
            n = min(n, self.eos_after)
        return n

    def _spec_steps(self, n_out: int) -> list[tuple[int, int, int]]:
        return spec.steps(n_out, self.spec_draft, self.spec_accepted, self.reasoning_tokens)

    def spec_counts(self, n_out: int) -> tuple[int, int, int]:
        """The truth of ``n_out`` tokens' speculation: (drafted, accepted, steps that drafted)."""
        return spec.counts(n_out, self.spec_draft, self.spec_accepted, self.reasoning_tokens)

    async def answer_unstreamed(self, gt: GroundTruth, ttft: float, n_out: int) -> None:
        """A non-streamed answer, every wire's: wait out its TTFT and decode steps, then count its
        ``n_out`` tokens and record its ground truth; the caller writes the body."""
        await asyncio.sleep(ttft + self.itl_s * max(0, n_out - 1))
        self.count_generated(gt, n_out)
        self._record(gt)

    def count_generated(self, gt: GroundTruth, n: int) -> None:
        """A request's ``n`` generated tokens: its ground truth's output count and the /metrics counters
        (speculation's too)."""
        gt.output_tokens = n
        self._counters["gen"] += n
        d, a, steps = self.spec_counts(n)
        self._counters["spec_draft_tokens"] += d
        self._counters["spec_accepted"] += a
        self._counters["spec_drafts"] += steps
        gt.spec_drafted, gt.spec_accepted = d, a

    def _schedule(self, n_out: int) -> list[tuple[int, int]]:
        """(first token index, count) per event."""
        out: list[tuple[int, int]] = []
        if n_out <= 0:
            return out
        if self.spec_draft:
            return [(i, k) for i, k, _ in self._spec_steps(n_out)]
        out.append((0, 1))  # the first token always goes alone (prefill's output)
        i = 1
        while i < n_out:
            k = min(self.tokens_per_event, n_out - i)
            # reasoning and content never share an event
            if i < self.reasoning_tokens < i + k:
                k = self.reasoning_tokens - i
            out.append((i, k))
            i += k
        return out

    def think_text(self, start: int, stop: int) -> str:
        """Output tokens ``start`` … ``stop − 1`` with the reasoning inside the text: token 0 is
        ``<think>``, token ``reasoning_tokens − 1`` is ``</think>``, the rest are words."""
        r = self.reasoning_tokens
        parts = []
        for i in range(start, stop):
            if r >= 2 and i == 0:
                parts.append("<think>")
            elif r >= 2 and i == r - 1:
                parts.append("</think>")
            else:
                parts.append(self.words(i, i + 1))
        return "".join(parts)

    def words(self, start: int, stop: int) -> str:
        """The text of output tokens ``start`` … ``stop − 1`` (:func:`~phasescope.testing.wire.common.words`)."""
        return words(start, stop, self.glue_every)

    def _record(self, gt: GroundTruth) -> None:
        self.log.append(gt)
        if self._logfh is not None:
            self._logfh.write(json.dumps(asdict(gt)) + "\n")
            self._logfh.flush()

    async def _sleep_until(self, t0: float, offset_s: float) -> None:
        delay = t0 + offset_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)

    # -- the steps every generation handler shares --------------------------------------------
    async def _begin(
        self, request: web.Request, *, bad_json_status: int, bad_json_body: Any, check_auth: bool = True
    ) -> tuple[GroundTruth, Any, web.StreamResponse | None]:
        """Every generation handler's first steps: the ground-truth entry (stamped on arrival), the
        auth check and the JSON body. Returns ``(gt, body, None)``, or ``(gt, None, response)`` for a
        refused request, already recorded."""
        t_recv = time.perf_counter_ns()
        gt = GroundTruth(id=request.headers.get("X-Request-Id", uuid.uuid4().hex[:16]), path=request.path, t_recv_ns=t_recv,
                         t_rx_ns=rx_ns(request, t_recv))
        if check_auth and (resp := self._auth(request)) is not None:
            gt.status = 401
            self._record(gt)
            return gt, None, resp
        try:
            body = await request.json()
        except ValueError:
            gt.status = bad_json_status
            self._record(gt)
            return gt, None, web.json_response(bad_json_body, status=bad_json_status)
        return gt, body, None

    def _refuse(self, gt: GroundTruth, status: int, body: Any) -> web.Response:
        """An error answer to a generation request, recorded."""
        gt.status = status
        self._record(gt)
        return web.json_response(body, status=status)

    def _admit(self, gt: GroundTruth) -> tuple[str | None, web.Response | None]:
        """This request's fault, and the error answer (recorded) when the fault refuses it outright."""
        fault = self._take_fault()
        gt.fault = fault
        resp = self._pre_fault(fault, gt)
        if resp is not None:
            self._record(gt)
        return fault, resp

    @contextlib.asynccontextmanager
    async def _stream(self, request: web.Request, gt: GroundTruth, headers: dict[str, str]) -> AsyncIterator[web.StreamResponse]:
        """A streamed answer: headers out (stamped), counted as running until it ends; a client that
        goes away (Ctrl-C, timeout) is not a server error; the ground truth is recorded at the end."""
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        gt.t_headers_ns = time.perf_counter_ns()
        self._running += 1
        try:
            yield resp
        except ConnectionResetError:
            gt.fault = gt.fault or "client_gone"
        finally:
            self._running -= 1
            self._record(gt)

    async def _token_events(
        self, request: web.Request, resp: web.StreamResponse, gt: GroundTruth, *, fault: str | None, t0: float,
        ttft: float, n_out: int, emit: Callable[[int, int, int], Awaitable[None]],
        error_bytes: bytes | None = None, malformed: bytes | None = None, ping: bytes | None = None,
    ) -> tuple[int, float] | None:
        """Send the ``n_out`` tokens of a stream on schedule (absolute deadlines from ``t0``), each
        event by ``emit(first token index, tokens, tokens sent so far)``, with this request's
        mid-stream fault. ``error_bytes``, ``malformed`` and ``ping``: this endpoint's error event,
        broken event and keep-alive (default: the flavor's wire module's, and ``:`` comments).
        Returns ``(tokens sent, time of the first event)``, or None when a fault ended the stream."""
        if fault == "stall" and self.fault_after <= 0:
            await self._stall(resp, ping)
        t_first = t0 + ttft
        sent = 0
        for ev_i, (i, k) in enumerate(self._schedule(n_out)):
            # one verified step per event when speculating, else one token per itl_s
            await self._sleep_until(t0, ttft + (ev_i if self.spec_draft else i + k - 1) * self.itl_s)
            if ev_i == 0:
                t_first = time.perf_counter()
            if fault in MID_STREAM and ev_i == self.fault_after:
                await self._fault_mid(fault, request, resp, error_bytes, malformed, ping)
                return None
            sent += k
            await emit(i, k, sent)
            gt.t_events_ns.append(time.perf_counter_ns())
            gt.tokens_per_event.append(k)
        return sent, t_first

    async def _stall(self, resp: web.StreamResponse, ping: bytes | None = None) -> None:
        end = time.perf_counter() + self.stall_s
        while True:
            left = end - time.perf_counter()
            if left <= 0:
                return
            if self.ping_s and self.wire.SSE:
                await asyncio.sleep(min(self.ping_s, left))
                await resp.write(ping or b":\n\n")
            else:
                await asyncio.sleep(left)

    async def _fault_mid(self, fault: str, request: web.Request, resp: web.StreamResponse,
                         error_bytes: bytes | None = None, malformed: bytes | None = None,
                         ping: bytes | None = None) -> None:
        if fault == "cut":
            if request.transport is not None:
                request.transport.close()
            return
        if fault == "malformed":
            await resp.write(malformed or self.wire.MALFORMED_EVENT)
            await resp.write_eof()
            return
        if fault == "error_event":
            await resp.write(error_bytes or self.wire.error_event(self))
            await resp.write_eof()
            return
        if fault == "stall":
            await self._stall(resp, ping)
            return
        if fault == "no_done":
            await resp.write_eof()


# --- a separate process (benchmarks: client and server must not share an event loop) -------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m phasescope.testing")
    ap.add_argument("--flavor", default="vllm", choices=FLAVORS)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--tokens-per-event", type=int, default=1)
    ap.add_argument("--reasoning-tokens", type=int, default=0, help="the first N output tokens are reasoning")
    ap.add_argument("--reasoning-format", default="field", choices=REASONING_FORMATS,
                    help="field: delta.reasoning / reasoning_content; think: <think>…</think> inside the text")
    ap.add_argument("--log", default=None, help="JSONL ground-truth log")
    ap.add_argument("--uvloop", action="store_true", help="use uvloop if installed")
    ap.add_argument("--prefill-tok-s", type=float, default=None, help="TTFT grows by evaluated prompt tokens / this")
    ap.add_argument("--prefix-cache", action="store_true", help="vLLM/SGLang automatic prefix caching (16-token blocks)")
    ap.add_argument("--fault", default=None, choices=FAULTS, help="fault mode for every generation request")
    ap.add_argument("--fault-after", type=int, default=2)
    ap.add_argument("--fault-skip", type=int, default=0, help="answer the first N generation requests well")
    ap.add_argument("--api-key", default=None, help="require this Bearer key")
    ap.add_argument("--spec-draft", type=int, default=0, help="speculative decoding: draft tokens per step (0 = off)")
    ap.add_argument("--spec-accepted", default=None, help="accepted drafts per step, comma-separated, cycled")
    ap.add_argument("--echo-args", action="store_true", help="print the command line at start, as vLLM prints its args")
    a = ap.parse_args(argv)
    if a.echo_args:
        print(f"fake-llm: args {sys.argv[1:] if argv is None else argv}", file=sys.stderr, flush=True)
    srv = FakeServer(flavor=a.flavor, model=a.model, port=a.port, ttft_s=a.ttft_ms / 1000, itl_s=a.itl_ms / 1000,
                     tokens_per_event=a.tokens_per_event, log_path=a.log, prefill_tok_s=a.prefill_tok_s,
                     prefix_cache=a.prefix_cache, fault=a.fault, fault_after=a.fault_after, api_key=a.api_key,
                     fault_skip=a.fault_skip, reasoning_tokens=a.reasoning_tokens,
                     reasoning_format=a.reasoning_format, spec_draft=a.spec_draft,
                     spec_accepted=[int(x) for x in a.spec_accepted.split(",")] if a.spec_accepted else None)

    asyncio.run(serve_until_signal(srv))


if __name__ == "__main__":  # pragma: no cover
    main()
