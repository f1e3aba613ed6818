"""CPU per streamed event of the client's SSE receive path, without the network.

A stand-in response whose ``content.readany()`` hands out one vLLM-format ``/v1/completions``
event per read (as at high concurrency, where every read carries one event) drives
:func:`phasescope.apis._http._read_sse` and the OpenAI protocol's ``on_message``/``finish``:
framing, JSON decoding, timestamping, Event records and the between-tokens watchdog. aiohttp's own
socket → StreamReader path and the event loop are not in this number (see docs/commands/bench.md
for the whole-client profile).

Run: ``.venv/bin/python benchmarks/client_recv_cpu.py [streams]`` (prints µs of CPU per event).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from phasescope.apis import _http, _records
from phasescope.apis.base import GenRequest, Target, Timeouts
from phasescope.apis.openai import _Completions

OUT_TOKENS = 16


def _event(d: dict) -> bytes:
    return b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"


CHUNKS = [_event({"id": "cmpl-abc123", "object": "text_completion", "created": 1764560000, "model": "fake-model",
                  "choices": [{"index": 0, "text": "word ", "logprobs": None, "finish_reason": None,
                               "stop_reason": None}]}) for _ in range(OUT_TOKENS)]
CHUNKS.append(_event({"id": "cmpl-abc123", "object": "text_completion", "created": 1764560000, "model": "fake-model",
                      "choices": [], "usage": {"prompt_tokens": 32, "total_tokens": 48, "completion_tokens": 16}}))
CHUNKS.append(b"data: [DONE]\n\n")


class _Content:
    def __init__(self) -> None:
        self.i = 0

    async def readany(self) -> bytes:
        if self.i < len(CHUNKS):
            self.i += 1
            return CHUNKS[self.i - 1]
        return b""

    def at_eof(self) -> bool:
        return self.i >= len(CHUNKS)

    async def read(self) -> bytes:
        return b""


class _Resp:
    def __init__(self) -> None:
        self.content = _Content()


async def _main(streams: int) -> float:
    tgt = Target(base_url="http://127.0.0.1:1", api="openai", model="m", timeouts=Timeouts())
    dog = _http._Watchdog()
    rec = None
    t0 = time.process_time()
    for _ in range(streams):
        req = GenRequest(prompt="x", max_tokens=OUT_TOKENS)
        rec = _records.new_record(tgt, req)
        proto = _Completions(tgt, req, rec)
        await _http._read_sse(_Resp(), proto, dog)  # type: ignore[arg-type]
        proto.finish()
    dt = time.process_time() - t0
    dog.close()
    assert rec is not None and rec.output_tokens == OUT_TOKENS and len(rec.token_events()) == OUT_TOKENS
    return dt / (streams * len(CHUNKS))


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    runs = [asyncio.run(_main(streams)) for _ in range(3)]
    print(f"receive path: {min(runs) * 1e6:.2f} us CPU per event (best of 3; {streams} streams x {len(CHUNKS)} reads)")


if __name__ == "__main__":
    main()
