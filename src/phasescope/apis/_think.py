"""``<think>…</think>`` spans inside streamed answer text: which content events are reasoning.

Servers that do not split a reasoning model's output (llama.cpp ``--reasoning-format none``, vLLM or
SGLang without ``--reasoning-parser``, any OpenAI-compatible proxy) stream the reasoning inside
``content`` between ``<think>`` and ``</think>`` (DeepSeek-R1, Qwen3, QwQ). A parser hands each content
text to :meth:`ThinkSpans.kind`, which says whether the event is ``reasoning`` or ``content`` (answer);
the event is recorded with that kind and its own timestamp, nothing is derived here.

The rules (as vLLM's ``deepseek_r1`` reasoning parser reads the same text):

* ``<think>`` opens a span only at the start of the output (whitespace before it allowed);
* everything up to ``</think>`` is reasoning; the event that carries ``</think>`` is reasoning unless
  answer text follows the tag in the same event (then it is the first answer event);
* a ``</think>`` with no ``<think>`` before it (chat templates that put ``<think>`` in the prompt:
  DeepSeek-R1-0528, Qwen3-Thinking-2507) makes every earlier content event reasoning, so those events'
  kinds change when the tag arrives;
* after the span, nothing is parsed: the rest is answer;
* a tag split across events (``"<thi"`` + ``"nk>"``) is found: the unfinished tail is carried over.

The per-event cost once the answer runs is one ``"<" in text`` test (``quiet``), and none after a span.
"""

from __future__ import annotations

from phasescope.measure.records import EVENT_CONTENT, EVENT_REASONING, Event

OPEN = "<think>"
CLOSE = "</think>"

START = 0  # nothing but whitespace (or the start of a tag) seen yet
INSIDE = 1  # inside an opened span
WATCH = 2  # answer text seen without a span: a bare </think> still makes it reasoning
DONE = 3  # a span closed: the rest is answer


def _tag_tail(s: str, tag: str) -> str:
    """The longest end of ``s`` that is a proper beginning of ``tag`` (a tag cut by the event boundary)."""
    for n in range(min(len(tag) - 1, len(s)), 0, -1):
        if tag.startswith(s[-n:]):
            return s[-n:]
    return ""


class ThinkSpans:
    """One stream's ``<think>`` state (module docstring)."""

    __slots__ = ("state", "carry", "head", "first")

    def __init__(self) -> None:
        self.state = START
        self.carry = ""  # the unfinished tag at the end of the last event
        self.head = ""  # START: the text so far (whitespace and a tag's beginning only)
        self.first = -1  # index in events of the first content event this splitter classified

    def quiet(self, text: str) -> bool:
        """True when ``text`` is answer text for sure without parsing it (the hot path's test)."""
        return self.state == DONE or (self.state == WATCH and not self.carry and "<" not in text)

    def kind(self, text: str, events: list[Event]) -> str:
        """The kind of the content event that carries ``text`` and is about to be appended to
        ``events``; earlier events' kinds may change (a span found late)."""
        if self.first < 0:
            self.first = len(events)
        st = self.state
        if st == DONE:
            return EVENT_CONTENT
        if st == START:
            self.head += text
            h = self.head.lstrip()
            if h.startswith(OPEN):
                self.state = INSIDE
                self._flip(events)  # whitespace or half a tag before it: reasoning too
                rest = h[len(OPEN):]
                self.head = ""
                return self._inside(rest, events)
            if OPEN.startswith(h):  # only whitespace, or a tag's beginning: undecided, answer for now
                return EVENT_CONTENT
            self.state = WATCH
            s, self.head = self.head, ""
            return self._watch(s, events)
        s, self.carry = self.carry + text, ""
        if st == INSIDE:
            return self._inside(s, events)
        return self._watch(s, events)

    def _inside(self, s: str, events: list[Event]) -> str:
        i = s.find(CLOSE)
        if i < 0:
            self.carry = _tag_tail(s, CLOSE)
            return EVENT_REASONING
        self.state = DONE
        return EVENT_CONTENT if s[i + len(CLOSE):] else EVENT_REASONING

    def _watch(self, s: str, events: list[Event]) -> str:
        i = s.find(CLOSE)
        if i < 0:
            self.carry = _tag_tail(s, CLOSE)
            return EVENT_CONTENT
        self._flip(events)  # the span began at the start of the output, its <think> in the prompt
        self.state = DONE
        return EVENT_CONTENT if s[i + len(CLOSE):] else EVENT_REASONING

    def _flip(self, events: list[Event]) -> None:
        for e in events[max(self.first, 0):]:
            if e.kind == EVENT_CONTENT:
                e.kind = EVENT_REASONING
