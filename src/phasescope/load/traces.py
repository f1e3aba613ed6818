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
from phasescope.load.schedule import TraceEntry
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
    """BurstGPT CSV → (entries, rows skipped for 0 response tokens)."""
    from phasescope.safeio import iter_user_lines  # the one reader for user files: regular, bounded, UTF-8

    p = Path(path).expanduser()
    out: list[HashedEntry] = []
    skipped = 0
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
            skipped += 1
            continue
        out.append(HashedEntry(ts, min(il, 10_000_000), min(ol, 10_000_000)))
    if not out:
        raise InputError(f"BurstGPT trace has no usable row: {p}")
    check_span(out, p)
    return out, skipped


#: the longest a trace may span (trace seconds, before --trace-speed): the bound of --trace-start
MAX_TRACE_SPAN_S = 366 * 86400


def check_span(entries: Sequence[TraceEntry], path: str | Path) -> None:
    """Refuse a trace whose arrivals span more than :data:`MAX_TRACE_SPAN_S` (far-future timestamps
    would keep a replay waiting for years, and their nanoseconds overflow): one line, exit 2."""
    if not entries:
        return
    offs = [e.offset_s for e in entries]
    lo, hi = min(offs), max(offs)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo > MAX_TRACE_SPAN_S:
        raise InputError(f"{path}: the trace's arrivals span {hi - lo:,.0f} s, more than {MAX_TRACE_SPAN_S:,} s "
                         "(366 days): its timestamps are not seconds or milliseconds from the trace's start",
                         hint="fix the timestamps, or cut a window with --trace-start/--trace-duration")


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


def read_trace_dataset(cfg: Any) -> tuple[list[HashedEntry], dict[str, Any]]:
    """The windowed entries of ``cfg.dataset`` (mooncake | burstgpt) and facts for the summary."""
    if not cfg.dataset_path:
        raise InputError(f"--dataset {cfg.dataset} needs --dataset-path FILE")
    skipped = 0
    if cfg.dataset == "mooncake":
        entries = read_mooncake(cfg.dataset_path, block_size=int(cfg.block_size))
    else:
        entries, skipped = read_burstgpt(cfg.dataset_path)
    total = len(entries)
    entries = window(entries, start_s=cfg.trace_start, duration_s=cfg.trace_duration)
    if cfg.num_prompts is not None:
        entries = entries[: cfg.num_prompts]
    facts = {"dataset": cfg.dataset, "path": str(cfg.dataset_path), "entries_in_file": total,
             "entries_replayed": len(entries), "rows_skipped": skipped, "trace_speed": cfg.trace_speed,
             "trace_start_s": cfg.trace_start, "trace_duration_s": cfg.trace_duration,
             "block_size": int(cfg.block_size) if cfg.dataset == "mooncake" else None,
             "span_s": (entries[-1].offset_s - entries[0].offset_s) if entries else 0.0}
    if cfg.dataset == "mooncake":
        facts["implied_hit_rate"] = implied_hit_rate(entries, int(cfg.block_size))
        facts["distinct_blocks"] = len({h for e in entries for h in e.hash_ids})
    return entries, facts


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


def trace_section(facts: dict[str, Any], records: Sequence[Any], summary: dict[str, Any]) -> dict[str, Any]:
    """``trace`` of ``bench --json``: what was replayed, and for Mooncake the hit rate the trace
    implies next to what the server reported (``prefix_cache.hit_rate``)."""
    out = dict(facts)
    pc = summary.get("prefix_cache") or {}
    out["measured_hit_rate"] = pc.get("hit_rate")
    imp = facts.get("implied_hit_rate")
    out["hit_rate_gap"] = (pc["hit_rate"] - imp) if (imp is not None and pc.get("hit_rate") is not None) else None
    return out
