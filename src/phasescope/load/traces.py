"""Production traces replayed with their prefix structure (``bench --dataset mooncake|burstgpt``, issue 17).

* **Mooncake / Bailian** JSONL (``--dataset mooncake --dataset-path FILE``), one request a line:
  ``timestamp`` (ms since the first request), ``input_length``, ``output_length`` and ``hash_ids``
  — one id per ``--block-size`` tokens of the prompt (512 in Mooncake's traces; the last block may
  be partial). Two requests that share ids share those prompt blocks (ids are prefix-chained in
  Mooncake's traces: an equal id means an equal prefix up to it). Here every distinct id becomes one
  block of text of exactly ``block_size`` server tokens, built once and reused, so the server sees
  the trace's real prefix sharing; :func:`implied_hit_rate` is the share of prompt tokens a prefix
  cache that keeps everything would serve (leading ids already seen, × block size).
* **BurstGPT** CSV (``--dataset burstgpt``): columns ``Timestamp`` (seconds), ``Model``,
  ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type`` (HPMLL/BurstGPT). Rows with
  0 response tokens are the trace's failures and are skipped. No prefix structure: prompts are unique.

Every replay says what it left out and why (``trace.skipped`` in ``bench --json``, one line in the
console): rows the reader skipped (BurstGPT's 0-response failures, 0-token requests), rows outside the
``--trace-start``/``--trace-duration`` window, rows beyond ``--num-prompts``. A Mooncake replay also
explains the gap between the hit rate the trace implies and the one the server reported
(:func:`hit_rate_gap`): a prefix can only be served once some request computed it, so requests that
arrived while the request carrying their blocks was still prefilling cannot hit, and llama.cpp keeps
one prompt per slot, reusing only the prefix of the slot a request lands on.

``examples/traces/`` holds a small sample of each format (``mooncake.jsonl``, ``burstgpt.csv``, the
plain ``requests.jsonl`` of ``--load-shape trace`` and a ``sharegpt.json`` of conversation turns),
documented in ``examples/traces/README.md`` and replayed by ``tests/integration/test_sample_traces.py``.

Both become the schedule's trace entries (arrival offsets and lengths), so ``--trace-speed`` (replay
N× faster), ``--trace-start S`` and ``--trace-duration S`` (a window in trace seconds) work as for
``--load-shape trace --trace FILE`` (which keeps working, and takes the window too).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from phasescope.errors import InputError
from phasescope.load.schedule import MAX_TRACE_SPAN_S, TraceEntry, check_span  # noqa: F401 (re-exported)
from phasescope.load.workload import WorkItem, part_salt

DATASETS = ("mooncake", "burstgpt")
#: Mooncake's block size (tokens per hash id)
DEFAULT_BLOCK_SIZE = 512


@dataclass(frozen=True)
class HashedEntry(TraceEntry):
    """A trace entry with its prompt's block ids (Mooncake); ``hash_ids`` empty for BurstGPT."""

    hash_ids: tuple[int, ...] = ()


def read_mooncake(path: str | Path, *, block_size: int = DEFAULT_BLOCK_SIZE) -> list[HashedEntry]:
    """Mooncake JSONL → entries (offset in seconds). Each line needs ``timestamp`` (ms) and
    ``input_length``; ``output_length`` and ``hash_ids`` are optional (no ids: a unique prompt)."""
    from phasescope.load.schedule import iter_jsonl_objects

    p = Path(path)
    if not 1 <= block_size <= 1_000_000:
        raise InputError(f"--block-size must be from 1 to 1,000,000 (got {block_size})")
    out: list[HashedEntry] = []
    for ln, d in iter_jsonl_objects(p, what="Mooncake trace"):
        ts = d.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise InputError(f"{p}:{ln}: timestamp must be a non-negative number of milliseconds")
        il, ol = d.get("input_length"), d.get("output_length", None)
        for key, v, need in (("input_length", il, True), ("output_length", ol, False)):
            if v is None and not need:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000_000:
                raise InputError(f"{p}:{ln}: {key} must be an integer from 1 to 10,000,000")
        ids = d.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**64
                                                for h in ids):
            raise InputError(f"{p}:{ln}: hash_ids must be a list of integers from 0 to 2^64 - 1")
        if len(ids) > -(-il // block_size):
            raise InputError(f"{p}:{ln}: {len(ids)} hash_ids cover more than input_length {il} at "
                             f"--block-size {block_size} (the trace's block size may differ)")
        out.append(HashedEntry(float(ts) / 1000.0, il, ol, tuple(ids)))
    if not out:
        raise InputError(f"Mooncake trace is empty: {p}")
    check_span(out, p)
    return out


#: BurstGPT's column names
BURST_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def read_burstgpt(path: str | Path) -> tuple[list[HashedEntry], int]:
    """BurstGPT CSV → (entries, rows skipped: 0 response or 0 request tokens)."""
    out, why = read_burstgpt_rows(path)
    return out, sum(why.values())


#: why a BurstGPT row is not replayed, in words (``trace.skipped`` keys)
SKIP_WORDS = {
    "zero_response_tokens": "with 0 response tokens (requests that failed in the trace)",
    "zero_request_tokens": "with 0 request tokens",
    "outside_window": "outside the --trace-start/--trace-duration window",
    "beyond_num_prompts": "beyond --num-prompts",
}


def read_burstgpt_rows(path: str | Path) -> tuple[list[HashedEntry], dict[str, int]]:
    """BurstGPT CSV → (entries, {reason: rows skipped}) with the reasons of :data:`SKIP_WORDS`."""
    from phasescope.safeio import iter_user_lines  # the one reader for user files: regular, bounded, UTF-8

    p = Path(path).expanduser()
    out: list[HashedEntry] = []
    why = {"zero_response_tokens": 0, "zero_request_tokens": 0}
    lines = (line + "\n" for _, line in iter_user_lines(p, what="BurstGPT trace"))
    rd = csv.DictReader(lines)
    cols = [c.strip() for c in (rd.fieldnames or [])]
    missing = [c for c in BURST_COLUMNS if c not in cols]
    if missing:
        raise InputError(f"{p}: not a BurstGPT CSV (missing column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)}; expected Timestamp, Model, Request tokens, Response tokens, ...)")
    for ln, row in enumerate(rd, 2):
        row = {(k or "").strip(): v for k, v in row.items()}
        try:
            ts = float(row["Timestamp"])
            il = int(float(row["Request tokens"]))
            ol = int(float(row["Response tokens"]))
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{p}:{ln}: Timestamp, Request tokens and Response tokens must be numbers") from None
        if not math.isfinite(ts) or ts < 0:
            raise InputError(f"{p}:{ln}: Timestamp must be a non-negative number of seconds")
        if ol <= 0 or il <= 0:
            why["zero_response_tokens" if ol <= 0 else "zero_request_tokens"] += 1
            continue
        out.append(HashedEntry(ts, min(il, 10_000_000), min(ol, 10_000_000)))
    if not out:
        left = ", ".join(f"{n} {SKIP_WORDS[k]}" for k, n in why.items() if n)
        raise InputError(f"BurstGPT trace has no usable row: {p}" + (f" ({left})" if left else ""))
    check_span(out, p)
    return out, why


def window(entries: Sequence[TraceEntry], *, start_s: float | None = None, duration_s: float | None = None,
           ) -> list[Any]:
    """Entries sorted by arrival, within ``[first + start_s, first + start_s + duration_s)`` of trace
    time (before ``--trace-speed``), their offsets kept (the schedule makes them relative)."""
    if start_s is not None and not (math.isfinite(start_s) and start_s >= 0):
        raise InputError("--trace-start must be a non-negative number of seconds")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError("--trace-duration must be a positive number of seconds")
    es = sorted(entries, key=lambda e: e.offset_s)
    if not es:
        return []
    lo = es[0].offset_s + (start_s or 0.0)
    hi = math.inf if duration_s is None else lo + duration_s
    out = [e for e in es if lo <= e.offset_s < hi]
    if not out:
        raise InputError(f"no trace request in the window --trace-start {start_s or 0:g} s"
                         + (f" --trace-duration {duration_s:g} s" if duration_s is not None else "")
                         + f" (the trace spans {es[-1].offset_s - es[0].offset_s:g} s)")
    return out


def trace_facts(cfg: Any, *, dataset: str, path: Any, entries_in_file: int, rows_in_file: int,
                entries_replayed: int, why: dict[str, int], span_s: float, rows_skipped: int = 0,
                block_size: int | None = None) -> dict[str, Any]:
    """The ``trace`` section's facts of any replayed trace — a plain ``--trace`` file, Mooncake, BurstGPT
    — built in one place: what the file held, what was replayed, what was skipped and why (``why``:
    rows by reason; reasons with 0 rows are left out), the speed and window it was replayed at."""
    skipped = {k: n for k, n in why.items() if n}
    return {"dataset": dataset, "path": str(path), "entries_in_file": entries_in_file,
            "rows_in_file": rows_in_file, "skipped": skipped, "skipped_total": sum(skipped.values()),
            "entries_replayed": entries_replayed, "rows_skipped": rows_skipped,
            "trace_speed": cfg.trace_speed, "trace_start_s": cfg.trace_start, "trace_duration_s": cfg.trace_duration,
            "block_size": block_size, "span_s": span_s}


def implied_hit_rate(entries: Sequence[HashedEntry], block_size: int) -> float | None:
    """The share of prompt tokens an unbounded prefix cache serves when the entries arrive in order:
    for each request, its leading hash ids already seen (the chain stops at the first new one), ×
    block size (the last block counts its real length), over all prompt tokens."""
    seen: set[int] = set()
    hit = total = 0
    for e in entries:
        il = int(e.input_len or 0)
        total += il
        for j, h in enumerate(e.hash_ids):
            if h not in seen:
                break
            hit += min(block_size, il - j * block_size)
        seen.update(e.hash_ids)
    return hit / total if total else None


async def trace_items(entries: Sequence[HashedEntry], *, maker: Any, block_size: int, seed: int,
                      run_salt: str | None, warmups: int, warmup_len: int, output_len: int) -> list[WorkItem]:
    """One item per entry (in order), then ``warmups`` unique warm-up items. Each distinct hash id
    becomes one block of exactly ``block_size`` tokens (built once, reused); a prompt is its blocks
    in order, the last one cut to the entry's length, and a unique tail where ``input_length``
    exceeds the blocks. With a token-id maker (``/v1/completions``) the ids are sent, so block
    boundaries are exact; with text they are joined as text."""
    blocks: dict[int, tuple[str, list[int] | None]] = {}
    items: list[WorkItem] = []
    for i, e in enumerate(entries):
        il = int(e.input_len or 1)
        texts: list[str] = []
        ids: list[int] | None = []
        left = il
        for h in e.hash_ids:
            if left <= 0:
                break
            if h not in blocks:
                blocks[h] = await maker.make(block_size, salt=part_salt(seed, run_salt, "h", h), first=False)
            t, b = blocks[h]
            take = min(block_size, left)
            if take < block_size:  # a partial last block: the block's first ids; as text, its own text
                if b is not None:
                    b = b[:take]
                else:
                    t, b = await maker.make(take, salt=part_salt(seed, run_salt, f"h{h}:", take), first=False)
            texts.append(t)
            ids = ids + b if (ids is not None and b is not None) else None
            left -= take
        if left > 0:  # no ids, or more prompt than blocks: a unique tail
            t, b = await maker.make(left, salt=part_salt(seed, run_salt, "tail", i), first=False)
            texts.append(t)
            ids = ids + b if (ids is not None and b is not None) else None
        text = "".join(texts)
        items.append(WorkItem(prompt=text, output_len=int(e.output_len or output_len), input_len=il,
                              input_len_source=getattr(maker, "source", "estimate"), prompt_token_ids=ids))
    for w in range(warmups):
        t, b = await maker.make(warmup_len, salt=part_salt(seed, run_salt, "warm", w))
        items.append(WorkItem(prompt=t, output_len=output_len, input_len=warmup_len,
                              input_len_source=getattr(maker, "source", "estimate"), prompt_token_ids=b))
    return items


def trace_section(facts: dict[str, Any], records: Sequence[Any], summary: dict[str, Any],
                  entries: Sequence[HashedEntry] = ()) -> dict[str, Any]:
    """``trace`` of ``bench --json``: what was replayed and what was skipped (``skipped``, with
    ``skipped_sentence``), and for Mooncake the hit rate the trace implies next to what the server
    reported (``prefix_cache.hit_rate``), with why they differ (:func:`hit_rate_gap`)."""
    out = dict(facts)
    pc = summary.get("prefix_cache") or {}
    out["measured_hit_rate"] = pc.get("hit_rate")
    imp = facts.get("implied_hit_rate")
    out["hit_rate_gap"] = (pc["hit_rate"] - imp) if (imp is not None and pc.get("hit_rate") is not None) else None
    out["skipped_sentence"] = skipped_sentence(facts)
    if imp is not None and entries:
        out.update(hit_rate_gap(entries, records, int(facts.get("block_size") or DEFAULT_BLOCK_SIZE),
                                implied=imp, measured=pc.get("hit_rate"), engine=summary.get("engine")))
    return out


def skipped_sentence(facts: dict[str, Any]) -> str:
    """"3 of 4 rows replayed; 1 skipped: 1 with 0 response tokens (…)" — every replay says it."""
    sk = facts.get("skipped") or {}
    rows = facts.get("rows_in_file", facts.get("entries_in_file"))
    head = f"{facts.get('entries_replayed')} of {rows} rows replayed"
    if not sk:
        return head + "; none skipped"
    n = sum(sk.values())
    return head + f"; {n} skipped: " + ", ".join(f"{c} {SKIP_WORDS.get(k, k)}" for k, c in sk.items())


def hit_rate_gap(entries: Sequence[HashedEntry], records: Sequence[Any], block_size: int, *,
                 implied: float, measured: float | None, engine: str | None) -> dict[str, Any]:
    """Why the server's hit rate differs from the trace's implied one (which assumes each request
    arrives after every earlier one is done). A block can only be served once a request carrying it
    finished its prefill (its first token): ``reachable_hit_rate`` counts each request's leading ids
    whose block was computed before the request was sent (by the records' own clocks), and
    ``concurrent_hit_share`` is the share of the implied hit tokens that were not (their block was
    still being prefilled when the request arrived). ``hit_rate_gap_reason``: the sentence."""
    by_item: dict[int, Any] = {}
    for r in records:
        tags = getattr(r, "tags", None) or {}
        if tags.get("warmup") or not getattr(r, "ok", False):
            continue
        i = tags.get("item")
        if isinstance(i, int) and 0 <= i < len(entries):
            by_item[i] = r
    from phasescope.measure.derive import first_token_ns

    ready: dict[int, int] = {}  # block id → when its first carrier had its first token
    for i, r in by_item.items():
        t = first_token_ns(r)
        if t is None:
            continue
        for h in entries[i].hash_ids:
            ready[h] = min(ready.get(h, t), t)
    seen: set[int] = set()
    total = hit = reach = 0
    for i, e in enumerate(entries):
        il = int(e.input_len or 0)
        r = by_item.get(i)
        sent = getattr(r, "t_start_ns", None) if r is not None else None
        if r is None or sent is None:
            seen.update(e.hash_ids)
            continue
        total += il
        ok_reach = True
        for j, h in enumerate(e.hash_ids):
            if h not in seen:
                break
            size = min(block_size, il - j * block_size)
            hit += size
            ok_reach = ok_reach and ready.get(h, 1 << 62) <= sent
            reach += size if ok_reach else 0
        seen.update(e.hash_ids)
    out: dict[str, Any] = {"reachable_hit_rate": reach / total if total else None,
                           "concurrent_hit_share": (hit - reach) / hit if hit else None,
                           "hit_rate_gap_reason": None}
    if measured is None or not total or measured >= implied - 0.05:
        return out
    parts = []
    rr = out["reachable_hit_rate"] or 0.0
    if hit and hit > reach:
        parts.append(f"{(hit - reach) / hit * 100:.0f} % of the implied hits were blocks another request was still "
                     f"prefilling when the request arrived (the requests ran concurrently; a prefix cannot be served "
                     f"before it is computed), so at most {rr * 100:.1f} % was reachable")
    if engine == "llamacpp":
        parts.append("llama.cpp keeps one prompt per slot and reuses only the prefix of the slot a request lands on: "
                     "requests with other prefixes that ran in between overwrite it (vLLM/SGLang keep blocks across "
                     "requests)")
    elif measured < rr - 0.05:
        parts.append("the rest is the server's own cache: blocks evicted between requests, or hits counted in "
                     "blocks of its own size (a partial block is not a hit)")
    if not parts:
        parts.append("the server's cache served less than the trace's block structure allows")
    out["hit_rate_gap_reason"] = (f"the trace implies {implied * 100:.1f} % if every request arrived after the "
                                  f"earlier ones were done; the server reported {measured * 100:.1f} %: "
                                  + "; ".join(parts))
    return out


def trace_console_lines(tr: dict[str, Any]) -> list[str]:
    """The console's trace lines of ``bench``: what was skipped, then (Mooncake) implied vs measured hit
    rate and why."""
    lines = [f"Trace rows: {tr.get('skipped_sentence') or skipped_sentence(tr)}."]
    if tr.get("implied_hit_rate") is not None:
        meas = tr.get("measured_hit_rate")
        lines.append(f"Trace prefix sharing: the trace implies a hit rate of {tr['implied_hit_rate'] * 100:.1f} % "
                     f"({tr.get('distinct_blocks')} distinct blocks of {tr.get('block_size')} tokens); the server "
                     f"reported " + (f"{meas * 100:.1f} %" if meas is not None else "no count")
                     + (f". Why: {tr['hit_rate_gap_reason']}." if tr.get("hit_rate_gap_reason") else "."))
    return lines
