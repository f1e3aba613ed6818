"""What every wire format of the fake shares: the ground-truth record, the fault names, the tokenizer."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FAULTS = (
    "forbidden",  # 403 on generation endpoints
    "overloaded",  # 429 + Retry-After
    "unavailable",  # 503 + Retry-After (vLLM admission, Ollama queue full, llama.cpp loading)
    "http500",  # 500 with the server's error body
    "cut",  # connection closed mid-stream after fault_after token events
    "malformed",  # a non-JSON event after fault_after token events
    "error_event",  # the server's mid-stream error event after fault_after token events
    "stall",  # silence for stall_s after fault_after token events (0 → before the first token)
    "no_done",  # stream ends cleanly but without [DONE]/finish_reason/done:true
    # hostile servers (issue 21): each must neither hang phasescope nor leak the key
    "echo_key",  # 401 on generation endpoints whose body echoes the request's Authorization header
    "endless",  # streams tokens past max_tokens forever: no finish_reason, no [DONE]
    "silent",  # sends the response headers, then nothing at all (for stall_s)
    # issue 31: streams that succeed in form but carry no token, and counts that cannot be
    "done_only",  # a stream of nothing but [DONE] (OpenAI formats) / done:true (Ollama)
    "empty_text",  # every token event's text is empty ("" deltas), then a normal end
    "neg_usage",  # a normal stream whose usage says prompt_tokens -5, completion_tokens -300
)
#: the faults that strike inside a stream, after ``fault_after`` token events
MID_STREAM = ("cut", "malformed", "error_event", "stall", "no_done")

FLAVORS = ("vllm", "sglang", "llamacpp", "ollama", "anthropic", "responses")
#: how a fake streams reasoning: its own field (a server's reasoning parser), or <think> inside the text
REASONING_FORMATS = ("field", "think")

WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", " and", " runs", " far"]
_WORD_RE = re.compile(r"\s*\S+")
BOS_ID = 2
#: a truncated SSE event (the "malformed" fault of the SSE formats)
SSE_MALFORMED = b'data: {"choices": [{"index": 0, "delta": {"content": "x"\n\n'


def fake_tokenize(text: str) -> list[int]:
    """The fakes' tokenizer: one id per whitespace-led word."""
    return [100 + zlib.crc32(w.encode()) % 50000 for w in _WORD_RE.findall(text)]


def fake_token_count(text: str) -> int:
    """``len(fake_tokenize(text))`` without making the ids (the lean fake only counts)."""
    return len(_WORD_RE.findall(text))


def chat_template_ids(messages: Any) -> list[int]:
    """The fakes' chat template: system/user/tool contents as they are, each assistant message
    wrapped as ``[1, 2, 3] + content + [4]`` (its turn's opening and end tokens), and ``[1, 2, 3]``
    (the generation prompt) at the end. So a single user message costs its words + 3, and a
    conversation's turn N+1 starts with exactly turn N's prompt (what a prefix cache can reuse)."""
    ids: list[int] = []
    for m in messages if isinstance(messages, list) else []:
        content = m.get("content", "") if isinstance(m, dict) else ""
        text = content if isinstance(content, str) else json.dumps(content)
        if isinstance(m, dict) and m.get("role") == "assistant":
            ids += [1, 2, 3] + fake_tokenize(text) + [4]
        else:
            ids += fake_tokenize(text)
    return ids + [1, 2, 3]


def words(start: int, stop: int, glue_every: int | None = None) -> str:
    """The text of output tokens ``start`` … ``stop − 1`` (one word each). With ``glue_every`` = k,
    every k-th token (k − 1, 2k − 1, …) loses its leading space and glues onto the word before, as
    a real model's generated ids need not be the canonical tokenization of their text: the reply
    then re-tokenizes (:func:`fake_tokenize`) to fewer tokens than were generated."""
    if not glue_every:
        return "".join(WORDS[j % len(WORDS)] for j in range(start, stop))
    return "".join(WORDS[j % len(WORDS)].lstrip() if j % glue_every == glue_every - 1 else WORDS[j % len(WORDS)]
                   for j in range(start, stop))


@dataclass
class GroundTruth:
    id: str
    path: str
    t_recv_ns: int  # handler entered (headers parsed)
    t_rx_ns: int = 0  # the server process read the request's bytes (before HTTP parsing)
    t_body_ns: int = 0  # request body read and parsed
    t_headers_ns: int | None = None  # response headers written
    t_events_ns: list[int] = field(default_factory=list)  # token-carrying events, after write
    tokens_per_event: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    status: int = 200
    fault: str | None = None
    reasoning_tokens: int = 0  # the first N output tokens were reasoning (as a delta field or inside <think>)
    spec_drafted: int = 0  # speculative decoding: draft tokens proposed for this request (FakeServer.spec_counts)
    spec_accepted: int = 0  # … and kept

    @property
    def t_first_token_ns(self) -> int | None:
        return self.t_events_ns[0] if self.t_events_ns else None

    @property
    def t_first_answer_ns(self) -> int | None:
        """When the first event of answer tokens (the first token past the reasoning) was sent: TTFO's truth."""
        start = 0
        for t, k in zip(self.t_events_ns, self.tokens_per_event):
            if start >= self.reasoning_tokens:
                return t
            start += k
        return None


def bind(srv: Any, handler: Callable[[Any, web.Request], Awaitable[web.StreamResponse]]) -> Handler:
    """``handler(srv, request)`` as the ``async def handler(request)`` aiohttp routes to."""

    async def bound(request: web.Request) -> web.StreamResponse:
        return await handler(srv, request)

    return bound
