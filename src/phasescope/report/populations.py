"""Which requests belong together in one plot: the report's populations.

A histogram, a median line or a CDF is honest only over requests that were sent alike. Here:
:func:`ttft_populations` cuts a run's requests by experiment, its phase, the load they ran under and
their nominal prompt size (:func:`size_clusters`: sizes within :data:`SIZE_FACTOR` of each other are
one, sizes apart by design never are), and :func:`decoding_alone` finds the requests that decoded with
no other request in flight (the only ones whose decode rate is one stream's speed at that context).
Pure functions of the records (:mod:`phasescope.measure.derive`); the plots are
:mod:`phasescope.report.plots`'.
"""

from __future__ import annotations

import bisect
from typing import Any

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord
from phasescope.report.figure import is_num, ok_records

#: nominal sizes within this factor of the smallest of their cluster are one size (256 / 258 tokens
#: of one requested length; 128 and 150 of a range-ratio mix), farther apart they are drawn apart
SIZE_FACTOR = 1.25
#: record tags that name a request's nominal prompt size, first found wins
SIZE_TAGS = ("prompt_tokens_target", "prompt_tokens", "size", "context_target", "context_tokens")
#: record tags that name the load a request ran under
LOAD_TAGS = (("concurrency", "c={}"), ("request_rate", "rate={}/s"), ("rate", "rate={}/s"))


def nominal_size(r: RequestRecord) -> float | None:
    """The size a request was sent at: the first of :data:`SIZE_TAGS`, else its requested (or counted) length."""
    for k in SIZE_TAGS:
        if is_num(r.tags.get(k)):
            return float(r.tags[k])
    n = r.prompt_tokens_requested or r.prompt_tokens
    return float(n) if n else None


def _num_or_str(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if is_num(v) else (1, str(v))


def size_clusters(sizes: list[float], factor: float = SIZE_FACTOR) -> list[tuple[float, float]]:
    """The distinct sizes cut into contiguous ranges, each no wider than ``factor`` × its smallest
    size (greedy from the smallest): sizes that differ by tokenisation are one, sizes that differ by
    design (32 and 74 tokens) are never pooled."""
    out: list[tuple[float, float]] = []
    for x in sorted(set(sizes)):
        if out and x <= out[-1][0] * factor:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def _size_text(lo: float, hi: float) -> str:
    return f"{lo:g}-token prompt" if lo == hi else f"{lo:g}–{hi:g}-token prompts"


def ttft_populations(recs: list[RequestRecord]) -> list[tuple[tuple[Any, ...], str, list[float]]]:
    """The run's successful measured requests cut into populations whose TTFTs belong in one
    histogram: apart by experiment (``tags.experiment``) and its phase (``tags.phase``: prefix-cache's
    cold and repeat requests), by load (``concurrency`` / ``request_rate`` tags) and by nominal prompt
    size (:data:`SIZE_TAGS`, else the requested length, clustered by
    :func:`size_clusters`). Each: (sort key, label, TTFTs in ms), in order of experiment, load and
    size. A 200-token and a 2,000-token prompt's TTFTs are never one histogram (they differ ~10×)."""
    rows = [(r, t * 1e3) for r in ok_records(recs) if r.tags.get("warmup") is not True
            and r.tags.get("phase") != "warmup" and (t := derive.ttft_s(r)) is not None]
    exps = list(dict.fromkeys(r.tags.get("experiment") for r, _ in rows))
    split_exp = len(exps) > 1
    # an experiment's phases are populations of their own (prefix-cache's cold and repeat requests)
    phases = list(dict.fromkeys(str(r.tags.get("phase")) for r, _ in rows))
    split_phase = len(phases) > 1
    loads = [(k, fmt) for k, fmt in LOAD_TAGS if len({r.tags.get(k) for r, _ in rows if r.tags.get(k) is not None}) > 1]
    pops: dict[tuple[Any, ...], list[tuple[RequestRecord, float]]] = {}
    for r, t in rows:
        key = (exps.index(r.tags.get("experiment")) if split_exp else 0,
               phases.index(str(r.tags.get("phase"))) if split_phase else 0, tuple(
            _num_or_str(r.tags.get(k)) if r.tags.get(k) is not None else (2, "") for k, _ in loads))
        pops.setdefault(key, []).append((r, t))
    out = []
    for key, members in pops.items():
        head = []
        if split_exp:
            head.append(str(exps[key[0]] or "other requests"))
        if split_phase and phases[key[1]] not in ("measure", "None"):
            head.append(phases[key[1]])
        for (_k, fmt), v in zip(loads, key[2]):
            if v[1] != "":
                head.append(fmt.format(f"{v[1]:g}" if isinstance(v[1], float) else v[1]))
        sizes = [nominal_size(r) for r, _ in members]
        known = [x for x in sizes if x is not None]
        clusters = size_clusters(known)
        if len(clusters) > 1:
            for lo, hi in clusters:
                ts = [t for (r, t), n in zip(members, sizes) if n is not None and lo <= n <= hi]
                out.append((key + (lo,), " · ".join(head + [_size_text(lo, hi)]), ts))
        else:
            what = [_size_text(*clusters[0])] if clusters and not head else []
            out.append((key + (clusters[0][0] if clusters else 0.0,), " · ".join(head + what) or "all requests",
                        [t for _, t in members]))
    return sorted(out, key=lambda p: p[0])


def in_flight_steps(spans: list[tuple[float, float]]) -> tuple[list[float], list[int]]:
    """Step function: how many of the [start, end) spans are open at each change point (from 0, with 0 open).
    A zero-length span opens and closes at one instant and counts nowhere."""
    ev = sorted([(a, 1) for a, b in spans if b > a] + [(b, -1) for a, b in spans if b > a], key=lambda e: (e[0], e[1]))
    xs, ys, n = [0.0], [0], 0
    for t, d in ev:
        n += d
        if xs[-1] == t:
            ys[-1] = n
        else:
            xs.append(t)
            ys.append(n)
    return xs, ys


def decoding_alone(recs: list[RequestRecord]) -> set[int]:
    """``id()`` of each record that decoded alone: no other request of the run was in flight (sent,
    not yet done) at any moment between its first and last token. Only those measure the speed of
    one stream at their context; the others' rate is their share of a batch."""
    times, counts = in_flight_steps([(r.t_start_ns, r.t_done_ns or derive.last_token_ns(r) or r.t_start_ns)
                                     for r in recs])
    out = set()
    for r in recs:
        ft, lt = derive.first_token_ns(r), derive.last_token_ns(r)
        if ft is None or lt is None:
            continue
        i = max(0, bisect.bisect_right(times, ft) - 1)
        j = bisect.bisect_left(times, lt)
        if max(counts[i:max(j, i + 1)], default=1) <= 1:
            out.add(id(r))
    return out
