"""Metrics derived from a :class:`~phasescope.measure.records.RequestRecord` — one hop from the
name to its definition. Seconds everywhere; ``None`` when the record cannot give the number.

Definitions (compare ``vllm bench serve``, ``vllm/benchmarks/serve.py:calculate_metrics``):

* ``ttft_s`` — request start → first event carrying output tokens (content *or* reasoning).
  Role-only, empty and usage-only events are not tokens. Same as vLLM 0.33's TTFT.
* ``ttft_net_s`` — connection ready (pre-transfer) → first token: TTFT minus connection setup,
  as the seed does with curl's ``time_starttransfer - time_pretransfer``. vLLM has no such metric.
* ``e2e_s`` — request start → last token-carrying event (vLLM's E2EL excludes the usage chunk
  and ``[DONE]`` the same way); for non-streamed responses, start → body received.
* ``tpot_s`` — (e2e − ttft) / (output_tokens − 1), first token excluded; identical to vLLM's TPOT.
* ``decode_tok_s`` — (output_tokens − 1) / (last token event − first token event): the decode
  rate one user sees. 1/TPOT.
* ``event_gaps_s`` — gaps between consecutive token-carrying events. This is what vLLM calls
  "ITL"; we keep it under its honest name because one event may carry several tokens.
* ``itl_s`` — per-token inter-token latency: an event carrying k tokens after a gap g contributes
  k samples of g/k, so coalesced or speculative multi-token events do not inflate it. When
  per-event counts are unknown but the total is known, tokens are spread evenly over events.
* ``prefill_tok_s`` (client) — prompt_tokens / ttft_s (includes queueing and network).
* ``ttfo_s`` — request start → first *answer* event (kind ``content``: not reasoning), the "time to
  first output token" reasoning models are judged by. Equal to ``ttft_s`` when the stream had no
  reasoning; None when no answer token came (the stream ended inside its reasoning).
* ``reasoning_tokens`` / ``answer_tokens`` — the output split: the server's reasoning count when it
  sent one (``usage.completion_tokens_details.reasoning_tokens``, SGLang's ``usage.reasoning_tokens``),
  else the tokens of the ``reasoning`` events (:func:`token_event_counts`); answer = output − reasoning.
  0 reasoning tokens when the stream had none.
* ``reasoning_tok_s`` / ``answer_tok_s`` — the decode rate inside each phase, as ``decode_tok_s``:
  (tokens − 1) / (last event − first event) of that kind; None with fewer than 2 tokens or one event.
* ``server_prefill_tok_s`` / ``server_decode_tok_s`` — from server timings (llama.cpp
  ``timings``, Ollama ``prompt_eval_*``/``eval_*``), evaluated tokens only: llama.cpp's
  ``prompt_n`` and Ollama's duration both exclude cached prompt tokens. Decode is
  (predicted_n − 1) / decode_s, as llama.cpp's ``predicted_per_second``.
* ``spec_decode`` — speculative decoding of one request, :func:`spec_summary` of (drafted, accepted,
  verified steps): from llama.cpp ``timings.draft_n`` / ``draft_n_accepted`` (steps = decoded − accepted,
  decoded = ``predicted_n`` − 1: each verified step emits its accepted tokens plus one of its own), else
  ``inferred`` from the arrival pattern when every event carries its own count and at least a quarter of
  the decode events carry several tokens and their counts vary (a fixed count is ``--stream-interval``
  coalescing, not speculation; one event per step: steps = decode events; drafted unknown).
  None when the request shows no speculation. ``acceptance_rate`` = accepted ÷ drafted;
  ``mean_accepted_len`` = accepted ÷ steps (draft tokens kept per verified step, bonus token excluded);
  ``tokens_per_step`` = (accepted + steps) ÷ steps = 1 + ``mean_accepted_len`` (vLLM's "mean acceptance
  length", SGLang's ``spec_accept_length``). :func:`spec_decode_run` sums the counts over records.
"""

from __future__ import annotations

from typing import Any, Iterable

from phasescope.measure.records import RequestRecord

NS = 1e9


def first_token_ns(r: RequestRecord) -> int | None:
    for e in r.events:
        if e.kind in ("content", "reasoning"):
            return e.t_ns
    return None


def last_token_ns(r: RequestRecord) -> int | None:
    for e in reversed(r.events):
        if e.kind in ("content", "reasoning"):
            return e.t_ns
    return None


def ttft_s(r: RequestRecord) -> float | None:
    t = first_token_ns(r)
    if t is None:
        return None
    return (t - r.t_start_ns) / NS


def first_answer_ns(r: RequestRecord) -> int | None:
    """The first answer (non-reasoning) token event's time; None when the stream had none."""
    for e in r.events:
        if e.kind == "content":
            return e.t_ns
    return None


def ttfo_s(r: RequestRecord) -> float | None:
    """Time to first output token: request start → first answer event (module docstring)."""
    t = first_answer_ns(r)
    if t is None:
        return None
    return (t - r.t_start_ns) / NS


def ttft_net_s(r: RequestRecord) -> float | None:
    t = first_token_ns(r)
    if t is None or r.t_conn_ready_ns is None:
        return None
    return (t - r.t_conn_ready_ns) / NS


def connect_s(r: RequestRecord) -> float | None:
    """Request start → connection ready (0 for a reused pooled connection)."""
    if r.t_conn_ready_ns is None:
        return None
    return (r.t_conn_ready_ns - r.t_start_ns) / NS


def queue_s(r: RequestRecord) -> float | None:
    """Client-side wait: scheduled send time → actual start (concurrency cap or late loop)."""
    if r.t_scheduled_ns is None:
        return None
    return max(0, r.t_start_ns - r.t_scheduled_ns) / NS


def e2e_s(r: RequestRecord) -> float | None:
    t = last_token_ns(r)
    if t is None:
        t = r.t_done_ns
    if t is None:
        return None
    return (t - r.t_start_ns) / NS


def client_output_count(r: RequestRecord) -> int | None:
    """Output tokens as the client saw them: Σ per-event counts when all known, else # token events."""
    tok = r.token_events()
    if not tok:
        return None
    if all(e.n_tokens is not None for e in tok):
        return sum(int(e.n_tokens or 0) for e in tok)
    return len(tok)


def output_tokens(r: RequestRecord) -> int | None:
    """Output tokens of a request: the server's count when it sent one, else the client's
    (:func:`client_output_count`); None when neither knows. The one rule every summary, table and
    experiment counts output tokens by."""
    return r.output_tokens if r.output_tokens is not None else client_output_count(r)


def output_tokens_sourced(r: RequestRecord) -> tuple[int, str]:
    """(:func:`output_tokens`, where the count came from): the record's ``output_tokens_source``
    (``usage``, ``server``...; ``unknown`` when unsaid), or ``events`` when counted from the stream
    (0 tokens when there were none)."""
    if r.output_tokens is not None:
        return int(r.output_tokens), r.output_tokens_source or "unknown"
    return (client_output_count(r) or 0), "events"


def input_tokens_sourced(r: RequestRecord) -> tuple[int | None, str]:
    """(prompt tokens, where the count came from): the server's count, else the length that was asked
    for (``requested``), else (None, ``unknown``)."""
    if r.prompt_tokens is not None:
        return int(r.prompt_tokens), r.prompt_tokens_source or "unknown"
    if r.prompt_tokens_requested is not None:
        return int(r.prompt_tokens_requested), "requested"
    return None, "unknown"


def token_event_counts(r: RequestRecord) -> list[tuple[int, float]]:
    """(time, output tokens) per token-carrying event: each event's own count when every event has
    one, else the request's :func:`output_tokens` spread evenly over its events."""
    tok = r.token_events()
    if not tok:
        return []
    if all(e.n_tokens is not None for e in tok):
        return [(e.t_ns, e.n_tokens or 0) for e in tok]
    per = output_tokens_sourced(r)[0] / len(tok)
    return [(e.t_ns, per) for e in tok]


def end_ns(r: RequestRecord) -> int:
    """When a request was over on its clock: the later of its last token and its body's end (its
    start when neither is known)."""
    t = last_token_ns(r)
    if r.t_done_ns is not None:
        t = max(t or 0, r.t_done_ns)
    return t if t is not None else r.t_start_ns


def client_queue_s(r: RequestRecord) -> float | None:
    """Client-side queue of a bench request: scheduled send time → a concurrency slot was free
    (``tags.t_slot_ns``, the ``--max-concurrency`` cap's wait); without a slot time, :func:`queue_s`.
    None outside runs that schedule their requests."""
    v = (r.tags or {}).get("t_slot_ns")
    s = int(v) if v is not None else None
    if r.t_scheduled_ns is None or s is None:
        return queue_s(r)
    return max(0, s - r.t_scheduled_ns) / NS


def decode_tok_s(r: RequestRecord) -> float | None:
    n = output_tokens(r)
    a, b = first_token_ns(r), last_token_ns(r)
    if n is None or n < 2 or a is None or b is None or b <= a:
        return None
    return (n - 1) / ((b - a) / NS)


def tpot_s(r: RequestRecord) -> float | None:
    n = output_tokens(r)
    t, e = ttft_s(r), e2e_s(r)
    if n is None or n < 2 or t is None or e is None:
        return None
    return (e - t) / (n - 1)


def event_gaps_s(r: RequestRecord) -> list[float]:
    ts = [e.t_ns for e in r.token_events()]
    return [(b - a) / NS for a, b in zip(ts, ts[1:])]


def itl_s(r: RequestRecord) -> list[float]:
    """Per-token inter-token latencies (see module docstring)."""
    tok = r.token_events()
    if len(tok) < 2:
        return []
    counts: list[float]
    if all(e.n_tokens is not None for e in tok):
        counts = [float(e.n_tokens or 0) for e in tok]
    else:
        total = output_tokens(r) or len(tok)
        # the first event carries the first token; spread the rest evenly over later events
        rest = max(total - 1, len(tok) - 1)
        counts = [1.0] + [rest / (len(tok) - 1)] * (len(tok) - 1)
    out: list[float] = []
    for prev, cur, k in zip(tok, tok[1:], counts[1:]):
        gap = (cur.t_ns - prev.t_ns) / NS
        if k <= 0:
            continue
        whole = int(round(k))
        if abs(k - whole) < 1e-9 and whole >= 1:
            out.extend([gap / whole] * whole)
        else:  # fractional spread: one weighted sample
            out.append(gap / k)
    return out


def _kind_counts(r: RequestRecord, kind: str) -> list[tuple[int, float]]:
    """(time, tokens) of the token events of one kind (:func:`token_event_counts`)."""
    tok = r.token_events()
    return [tc for e, tc in zip(tok, token_event_counts(r)) if e.kind == kind]


def reasoning_tokens(r: RequestRecord) -> int:
    """Reasoning tokens of a request (module docstring): the server's count when it sent one and it
    does not deny reasoning the stream showed (a 0 beside reasoning events is a server that did not
    count), else the reasoning events' tokens; 0 when there was no reasoning."""
    ev = _kind_counts(r, "reasoning")
    if r.reasoning_tokens is not None and (r.reasoning_tokens > 0 or not ev):
        n = int(r.reasoning_tokens)
    else:
        n = int(round(sum(c for _, c in ev)))
    out = output_tokens(r)
    return min(n, out) if out is not None else n


def answer_tokens(r: RequestRecord) -> int | None:
    """Output tokens that are not reasoning: :func:`output_tokens` − :func:`reasoning_tokens`."""
    n = output_tokens(r)
    if n is None:
        return None
    return max(0, n - reasoning_tokens(r))


def _phase_rate(ev: list[tuple[int, float]], n: float) -> float | None:
    if n < 2 or len(ev) < 2 or ev[-1][0] <= ev[0][0]:
        return None
    return (n - 1) / ((ev[-1][0] - ev[0][0]) / NS)


def reasoning_tok_s(r: RequestRecord) -> float | None:
    """Decode rate inside the reasoning: (reasoning tokens − 1) / (last − first reasoning event)."""
    return _phase_rate(_kind_counts(r, "reasoning"), reasoning_tokens(r))


def answer_tok_s(r: RequestRecord) -> float | None:
    """Decode rate inside the answer: (answer tokens − 1) / (last − first answer event)."""
    return _phase_rate(_kind_counts(r, "content"), answer_tokens(r) or 0)


def prefill_tok_s(r: RequestRecord) -> float | None:
    t = ttft_s(r)
    if t is None or t <= 0 or not r.prompt_tokens:
        return None
    return r.prompt_tokens / t


def cached_prompt_tokens(r: RequestRecord) -> int | None:
    """Prompt tokens the server says it served from its prefix cache: the usage block's
    ``prompt_tokens_details.cached_tokens`` (vLLM, SGLang, as ``cached_prompt_tokens``), else
    llama.cpp's ``timings.cache_n``; None when the server reports neither (Ollama)."""
    if r.cached_prompt_tokens is not None:
        return int(r.cached_prompt_tokens)
    c = (r.server or {}).get("cache_n")
    return int(c) if isinstance(c, (int, float)) else None


def server_prefill_tok_s(r: RequestRecord) -> float | None:
    s = r.server or {}
    n, d = s.get("prompt_n"), s.get("prefill_s")
    if not n or not d or d <= 0:
        return None
    return float(n) / float(d)


def server_decode_tok_s(r: RequestRecord) -> float | None:
    s = r.server or {}
    n, d = s.get("predicted_n"), s.get("decode_s")
    if not n or n < 2 or not d or d <= 0:
        return None
    # decode_s (llama.cpp predicted_ms, Ollama eval_duration) runs from the end of the prompt to
    # the last token: n − 1 steps ("the first token is free", llama.cpp server-common.h)
    return (float(n) - 1.0) / float(d)


def phase_spans_ns(r: RequestRecord) -> dict[str, int | None] | None:
    """A request's phases on the monotonic clock (ns), for timelines:

    ``arrived`` (scheduled send time, else start) → ``sent`` (request start; the gap is the
    client-side wait, :func:`queue_s`) → ``prefill_start`` (first token − the server's own prompt
    time ``server.prefill_s``, never before ``sent``; None without server timings: then the whole
    TTFT is wait + prefill together) → ``first_token`` → ``last_token`` (decode). None when the
    request produced no token."""
    first = first_token_ns(r)
    if first is None:
        return None
    last = last_token_ns(r) or first
    pre = (r.server or {}).get("prefill_s")
    prefill_start = None
    if isinstance(pre, (int, float)) and not isinstance(pre, bool) and pre >= 0:
        prefill_start = max(r.t_start_ns, first - int(pre * NS))
    arrived = r.t_scheduled_ns if r.t_scheduled_ns is not None and r.t_scheduled_ns <= r.t_start_ns else r.t_start_ns
    return {"arrived": arrived, "sent": r.t_start_ns, "prefill_start": prefill_start, "first_token": first,
            "last_token": last}


# --- what a record may claim (issue 31) --------------------------------------------------------------
#: the server-supplied counts a record keeps; a negative one is not a count
COUNT_FIELDS = ("prompt_tokens", "output_tokens", "cached_prompt_tokens", "reasoning_tokens")


def distrust_bad_counts(r: RequestRecord) -> dict[str, int]:
    """Drop every negative count the server reported (``usage.completion_tokens = -300``), so no total
    or throughput goes negative; returns what was dropped (kept in ``tags["untrusted_counts"]``)."""
    bad: dict[str, int] = {}
    for name in COUNT_FIELDS:
        v = getattr(r, name)
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            bad[name] = v
            setattr(r, name, None)
            if name in ("prompt_tokens", "output_tokens"):
                setattr(r, f"{name}_source", None)
    if bad:
        r.tags = {**(r.tags or {}), "untrusted_counts": bad}
    return bad


def no_token_reason(r: RequestRecord) -> str | None:
    """Why a response that ended in good form is still no success, or None: success means tokens.
    A stream with no token-carrying event (only ``[DONE]``, only empty text), or a non-streamed answer
    whose server count says 0 output tokens, had nothing to measure. ``max_tokens=0`` asks for none."""
    if r.max_tokens == 0:
        return None
    if r.stream:
        if any(e.kind in ("content", "reasoning") for e in r.events):
            return None
        kinds = sorted({e.kind for e in r.events})
        return ("the stream ended without a single token "
                + (f"(events: {', '.join(kinds)})" if kinds else "(no event before its end)"))
    if r.output_tokens == 0:
        return "the response carried no output token (the server counted 0)"
    return None


# --- speculative decoding (issue 33) --------------------------------------------------------------------
#: the share of decode events that must carry several tokens before a stream is read as speculating
SPEC_BURST_SHARE = 0.25


def spec_summary(drafted: float | None, accepted: float | None, steps: float | None, source: str) -> dict[str, Any] | None:
    """The contract's ``spec_decode`` dict from counts (module docstring); None without accepted/steps."""
    if accepted is None or not steps or steps <= 0 or accepted < 0:
        return None
    out: dict[str, Any] = {
        "drafted": int(round(drafted)) if drafted is not None else None,
        "accepted": int(round(accepted)),
        "acceptance_rate": (accepted / drafted) if drafted else None,
        "mean_accepted_len": accepted / steps,
        "tokens_per_step": (accepted + steps) / steps,
        "source": source,
        "steps": int(round(steps)),
    }
    return out


def _spec_counts(r: RequestRecord) -> tuple[float | None, float, float, str] | None:
    """(drafted, accepted, steps, source) of one record, or None (module docstring)."""
    raw = (r.server or {}).get("raw") or {}
    d, a = raw.get("draft_n"), raw.get("draft_n_accepted")
    if isinstance(d, (int, float)) and not isinstance(d, bool) and d > 0 and isinstance(a, (int, float)):
        n = (r.server or {}).get("predicted_n")
        if not isinstance(n, (int, float)) or isinstance(n, bool):
            n = output_tokens(r)
        if not n or n < 2:
            return None
        steps = float(n) - 1.0 - float(a)
        if steps <= 0:
            return None
        return float(d), float(a), steps, "llamacpp_timings"
    tok = r.token_events()
    if len(tok) < 3 or not all(e.n_tokens is not None for e in tok):
        return None
    dec = [int(e.n_tokens or 0) for e in tok[1:] if (e.n_tokens or 0) > 0]
    if not dec or sum(1 for k in dec if k > 1) < SPEC_BURST_SHARE * len(dec):
        return None
    if len(set(dec[:-1])) < 2:  # one fixed size (the last event aside) is coalescing (--stream-interval), not
        return None             # speculation, whose accepted count varies from step to step
    return None, float(sum(dec) - len(dec)), float(len(dec)), "inferred"


def spec_decode(r: RequestRecord) -> dict[str, Any] | None:
    """One request's speculative decoding (module docstring), None when it shows none."""
    c = _spec_counts(r)
    return spec_summary(*c) if c else None


def spec_decode_run(records: Iterable[RequestRecord]) -> dict[str, Any] | None:
    """Run-level ``spec_decode``: counts summed over the records that show speculation (counters first:
    a record with llama.cpp timings outranks inferred ones; the two are never mixed)."""
    got = [c for c in (_spec_counts(r) for r in records) if c]
    if not got:
        return None
    best = "llamacpp_timings" if any(c[3] == "llamacpp_timings" for c in got) else "inferred"
    got = [c for c in got if c[3] == best]
    drafted = sum(c[0] for c in got if c[0] is not None) if best != "inferred" else None
    return spec_summary(drafted, sum(c[1] for c in got), sum(c[2] for c in got), best)
