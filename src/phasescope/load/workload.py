"""What each request asks for: prompts and output lengths, built without any download.

A workload is a list of :class:`WorkItem` (prompt text or token ids, the expected prompt length and
the output length to ask for). Sources:

* **random** — ``input_len``/``output_len`` with ``range_ratio`` r: lengths drawn uniformly from
  ``[⌊L·(1−r)⌋, ⌈L·(1+r)⌉]`` (vLLM ``--random-range-ratio``), an optional shared prefix of
  ``prefix_len`` tokens per group (``prefix_groups`` distinct prefixes, request i in group
  ``i % groups``; vLLM ``--random-prefix-len``, SGLang ``generated-shared-prefix``). Prompt texts
  are built to an exact token count by a :class:`PromptMaker` (the server's tokenizer endpoint,
  see :mod:`phasescope.prompting`), never by a hub tokenizer.
* **sharegpt** — a ShareGPT-format JSON file (list of ``{"conversations": [{"from", "value"}...]}``):
  first human turn = prompt, first reply's length = output length; shuffled with the seed; filters
  as vLLM's ``sample_sharegpt_requests`` (drop prompt or output < 4 tokens, prompt > 1024 or
  prompt+output > 2048 tokens) unless a fixed output length is given.
* **jsonl** — one ``{"prompt": str, "output_len"|"max_tokens": int?}`` per line.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from phasescope.errors import InputError

DATASETS = ("random", "sharegpt", "jsonl")


@dataclass
class WorkItem:
    """One request's content. ``input_len`` is the prompt length in server tokens when known;
    ``input_len_source`` says how it is known (``tokenize`` | ``calibrated`` | ``estimate`` | ``file``)."""

    prompt: str
    output_len: int
    input_len: int | None = None
    input_len_source: str = "estimate"
    prompt_token_ids: list[int] | None = None
    group: int | None = None
    tags: dict[str, Any] = field(default_factory=dict)


class PromptMaker(Protocol):
    """Makes a prompt of exactly ``n_tokens`` server tokens; ``salt`` makes it unique."""

    source: str

    async def make(self, n_tokens: int, salt: int, *, first: bool = True) -> tuple[str, list[int] | None]: ...

    async def count(self, text: str) -> int | None: ...


def length_range(length: int, range_ratio: float) -> tuple[int, int]:
    """vLLM's range: ``[⌊L·(1−r)⌋, ⌈L·(1+r)⌉]``, lower bound at least 1 (0 allowed only for L=0)."""
    if not 0 <= range_ratio < 1:
        raise InputError("--range-ratio must be in [0, 1)")
    lo = int(math.floor(length * (1 - range_ratio)))
    hi = int(math.ceil(length * (1 + range_ratio)))
    return (max(lo, 1 if length > 0 else 0), max(hi, 1 if length > 0 else 0))


def draw_lengths(n: int, length: int, range_ratio: float, rng: random.Random) -> list[int]:
    lo, hi = length_range(length, range_ratio)
    return [rng.randint(lo, hi) for _ in range(n)]


async def random_workload(
    n: int,
    *,
    input_len: int,
    output_len: int,
    maker: PromptMaker,
    range_ratio: float = 0.0,
    output_range_ratio: float | None = None,
    prefix_len: int = 0,
    prefix_groups: int = 1,
    seed: int = 0,
    run_salt: str | None = None,
) -> list[WorkItem]:
    """``n`` prompts of exact lengths (prefix + unique part = drawn input length + prefix_len).

    ``seed`` fixes the drawn lengths (and, through the schedule, the arrival times); ``run_salt``
    (the run id) changes every prompt's *text*, so a repeated run with the same seed is not a
    prefix-cache hit of the previous one. ``run_salt=None`` (``--reuse-prompts``) gives the same
    prompts for the same seed, run after run. Within one run, requests of one prefix group still
    share their prefix. A maker's ``overhead`` (tokens the server adds: BOS on text, a chat
    template) is subtracted from each prompt, so the server counts the drawn length."""
    if n < 1:
        raise InputError("the workload needs at least one request")
    if input_len < 1 or output_len < 1:
        raise InputError("--input-len and --output-len must be at least 1")
    if prefix_len < 0 or prefix_groups < 1:
        raise InputError("--prefix-len must be ≥ 0 and --prefix-groups ≥ 1")
    rng = random.Random(seed)
    in_lens = draw_lengths(n, input_len, range_ratio, rng)
    out_lens = draw_lengths(n, output_len, range_ratio if output_range_ratio is None else output_range_ratio, rng)
    overhead = int(getattr(maker, "overhead", 0) or 0)
    prefixes: list[tuple[str, list[int] | None]] = []
    for g in range(prefix_groups if prefix_len else 0):
        prefixes.append(await maker.make(max(1, prefix_len - overhead), salt=prompt_salt(seed, run_salt, "p", g)))
    items: list[WorkItem] = []
    for i in range(n):
        g = i % prefix_groups if prefix_len else None
        n_unique = in_lens[i] if g is not None else max(1, in_lens[i] - overhead)
        text, ids = await maker.make(n_unique, salt=prompt_salt(seed, run_salt, "u", i), first=g is None)
        if g is not None:
            ptext, pids = prefixes[g]
            text = ptext + text
            ids = pids + ids if (pids is not None and ids is not None) else None
        items.append(
            WorkItem(
                prompt=text,
                output_len=out_lens[i],
                input_len=in_lens[i] + (prefix_len if g is not None else 0),
                input_len_source=maker.source,
                prompt_token_ids=ids,
                group=g,
            )
        )
    return items


def prompt_salt(seed: int, run_salt: str | None, part: str, i: int) -> int:
    """The salt of prompt part ``part`` number ``i``: the seed's own (``run_salt=None``, the old
    reproducible prompts) or a hash of seed, run salt and position (unique per run)."""
    if run_salt is None:
        return seed * 1_000_003 + (7_919 * (i + 1) if part == "p" else 104_729 * (i + 1) + 13)
    import hashlib

    h = hashlib.blake2b(f"{seed}:{run_salt}:{part}:{i}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


def part_salt(seed: int, run_salt: str | None, part: str, i: int) -> int:
    """A salt for prompt part ``part`` number ``i`` that differs for every (part, i) — also under
    ``--reuse-prompts`` (``run_salt=None``: the same salts run after run for the same seed). The
    conversation and trace workloads build many kinds of parts (system prompts, turns, tool outputs,
    hash blocks), which :func:`prompt_salt`'s seed-only form would give equal texts."""
    import hashlib

    h = hashlib.blake2b(f"{seed}:{run_salt or '-'}:{part}:{i}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


def _load_json(path: Path) -> Any:
    from phasescope.safeio import read_user_json  # the one reader for user files

    return read_user_json(path, what="dataset file", expect=None)


async def sharegpt_workload(
    path: str | Path,
    n: int,
    *,
    count: Callable[[str], Awaitable[int | None]],
    output_len: int | None = None,
    seed: int = 0,
    count_source: str = "tokenize",
) -> list[WorkItem]:
    """Sample ``n`` conversations from a ShareGPT file (vLLM's rules, see module docstring)."""
    p = Path(path)
    data = _load_json(p)
    if not isinstance(data, list):
        raise InputError(f"{p}: a ShareGPT file is a JSON list of conversations")
    convs = [d for d in data if isinstance(d, dict) and isinstance(d.get("conversations"), list)
             and len(d["conversations"]) >= 2]
    if not convs:
        raise InputError(f"{p}: no conversation with at least two turns")
    rng = random.Random(seed)
    rng.shuffle(convs)
    items: list[WorkItem] = []
    for d in convs:
        if len(items) >= n:
            break
        prompt = str(d["conversations"][0].get("value", ""))
        completion = str(d["conversations"][1].get("value", ""))
        p_len = await count(prompt)
        if output_len is None:
            c_len = await count(completion)
            if p_len is None or c_len is None:
                raise InputError("ShareGPT output lengths need a token counter; pass --output-len")
            if p_len < 4 or c_len < 4 or p_len > 1024 or p_len + c_len > 2048:
                continue
            o_len = c_len
        else:
            o_len = output_len
        items.append(WorkItem(prompt=prompt, output_len=o_len, input_len=p_len,
                              input_len_source=count_source if p_len is not None else "estimate"))
    if not items:
        raise InputError(f"{p}: no conversation passed the length filters")
    return _cycle(items, n)


async def jsonl_workload(
    path: str | Path,
    n: int | None,
    *,
    default_output_len: int,
    count: Callable[[str], Awaitable[int | None]] | None = None,
    count_source: str = "tokenize",
) -> list[WorkItem]:
    """Read ``{"prompt": ..., "output_len"|"max_tokens": ...}`` lines (in file order)."""
    from phasescope.load.schedule import iter_jsonl_objects

    p = Path(path)
    items: list[WorkItem] = []
    for ln, d in iter_jsonl_objects(p, what="dataset file"):
        if not isinstance(d.get("prompt"), str):
            raise InputError(f"{p}:{ln}: each line needs a string \"prompt\"")
        ol = d.get("output_len", d.get("max_tokens", default_output_len))
        try:
            ol = int(ol)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{p}:{ln}: output_len must be an integer") from None
        if not 1 <= ol <= 10_000_000:
            raise InputError(f"{p}:{ln}: output_len must be from 1 to 10,000,000 (got {ol})")
        il = d.get("input_len")
        if il is not None and (isinstance(il, bool) or not isinstance(il, int) or il < 0):
            raise InputError(f"{p}:{ln}: input_len must be a non-negative integer")
        src = "file" if il is not None else "estimate"
        if il is None and count is not None:
            il = await count(d["prompt"])
            src = count_source if il is not None else "estimate"
        items.append(WorkItem(prompt=d["prompt"], output_len=ol, input_len=il, input_len_source=src))
        if n is not None and len(items) >= n:
            break
    if not items:
        raise InputError(f"{p}: no prompts in the file")
    return _cycle(items, n) if n is not None else items


def _cycle(items: list[WorkItem], n: int | None) -> list[WorkItem]:
    """Repeat a short dataset to ``n`` items (same objects; requests get distinct ids anyway)."""
    if n is None or len(items) >= n:
        return items[: n] if n is not None else items
    return [items[i % len(items)] for i in range(n)]
