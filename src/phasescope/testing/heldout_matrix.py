"""The held-out scenario matrix for ``explain`` (issue 30): scenarios the rules were *not* tuned on,
graded by the same :func:`~phasescope.testing.explain_matrix.judge` as the project's own matrix.

It differs from :mod:`phasescope.testing.explain_matrix`'s matrix on purpose:

* other servers — the behaviour fake's SGLang, TGI and llama-server flavours (their own metric
  families, no slot count or a reported one, TGI without cached-token counts), beside vLLM;
* designed noise — every step lasts an extra seeded Exp(mean) time, 20–100 % of a decode step;
* other speeds and sizes — 3, 5, 8, 12, 40 and 70 ms per token (not 5/25/150 alone), 2, 3, 12, 16,
  40, 48 and 64 slots, prefill at 1/20–1/100 of a step per token, chunks of 8–512 tokens;
* magnitudes near each rule's threshold, on both sides — a network delay of 50 ms and of 120 ms
  (``ttft-fixed-overhead`` counts from 100 ms), batching costs of 5 % / 25 % / 70 % of a step per
  extra sequence (no knee through 16 / a knee right at the 15 % per doubling / a knee at 2), a context
  cost too small to show / near the 10 % that counts / large, 12 slots against 16 requests, prefill
  chunks that cost one decode step and chunks of 512 tokens;
* combinations the pair matrix does not run (three effects at once, effects on a slow CPU-like server).

Each :class:`Cell` states its truth: ``must`` — effects present and big enough that ``explain`` must
name them or say "cannot tell" with a reason; ``may`` — effects present but near their threshold (naming
them is right, so is silence); every other effect is absent and a finding that claims it is wrong
(see :func:`~phasescope.testing.explain_matrix.judge`; it also knows the findings no scenario here makes
true: no KV pool fills, no model loads, batching always gains). ``why`` says in words why the truth is
what it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from phasescope.testing.behaviour_fake import Behaviour
from phasescope.testing.explain_matrix import judge

__all__ = ["CELLS", "SUBSET", "Cell", "chunk_steps", "grade", "knee_shows_at"]


@dataclass
class Cell:
    """One held-out scenario: the server (``behaviour``), explain's budget and the truth."""

    name: str
    behaviour: Behaviour
    budget_s: float
    must: tuple[str, ...] = ()
    may: tuple[str, ...] = ()
    #: the lowest batching level at which a knee of ``batch``/``queue`` in ``must`` shows (None: judge's default)
    knee_shows_at: int | None = None
    why: str = ""
    tags: dict[str, Any] = field(default_factory=dict)


#: a prefill chunk that costs less than this share of a decode step cannot raise a token gap to the 3×
#: a stall is claimed from: one decode step plus the chunk is at most 1.5 steps
SMALL_CHUNK_STEPS = 0.5


def chunk_steps(b: Behaviour, at_position: int = 2000) -> float | None:
    """What one prefill chunk adds to a decode step, in decode steps (at ``at_position`` prompt tokens,
    where the quadratic term is paid); None without chunked prefill."""
    n = b.chunked_prefill_tokens
    if n is None:
        return None
    return (b.prefill_s_per_token * n + b.prefill_s_per_token2 * 2 * at_position * n) / b.decode_step_s


def grade(cell: Cell, doc: dict[str, Any]) -> tuple[str, list[str]]:
    """``right`` / ``cannot tell`` / ``wrong`` and the reasons, for one ``explain --json`` document:
    :func:`~phasescope.testing.explain_matrix.judge`, and one check the pair matrix leaves out: where the
    prefill is split in chunks under :data:`SMALL_CHUNK_STEPS` of a step, a stall finding is false even
    when it says the prefill was split (no gap of 3× can come from the prefill)."""
    g, why = judge(cell.must, doc, may=cell.may, knee_shows_at=cell.knee_shows_at)
    cs = chunk_steps(cell.behaviour)
    if ("stall" not in cell.must + cell.may and cs is not None and cs < SMALL_CHUNK_STEPS
            and any(f.get("id") == "prefill-interference" for f in doc.get("findings", []))):
        why = list(why) + [
            f"prefill-interference: chunks of {cell.behaviour.chunked_prefill_tokens} tokens add {cs:.2f} of a decode "
            f"step; no stall of 3× the usual gap can come from them"]
        return "wrong", why
    return g, why


def _b(flavour: str, step: float, seed: int, *, slots: int = 48, chunk: int | None = 16, prefill_x: float = 80,
       jitter: float = 0.3, **kw: Any) -> Behaviour:
    """A healthy server of ``flavour``: ``slots`` (reported only by llama-server's /props), chunked prefill
    in ``chunk``-token pieces (None: one step per prompt), prefill at 1/``prefill_x`` of a decode step per
    token, flat decode, batching without a knee, prefix cache on, 4 ms of per-request overhead, and every
    step ``jitter`` × ``step`` longer on average (exponential, seeded). TGI reports no cached tokens."""
    return Behaviour(flavour=flavour, slots=slots, prefix_cache=True, chunked_prefill_tokens=chunk,
                     decode_step_s=step, prefill_s_per_token=step / prefill_x, overhead_s=0.004,
                     max_model_len=16384, jitter_s=jitter * step, jitter_seed=seed,
                     report_cached_tokens=flavour != "tgi", **kw)


def knee_shows_at(b: Behaviour, levels: tuple[int, ...] = (1, 2, 4, 8, 16), gain: float = 1.15) -> int | None:
    """The lowest batching level at which the knee of ``b``'s per-sequence step cost shows (one level past
    the knee), or None when there is none through ``levels``. A step lasts ``decode_step_s + jitter_s +
    decode_s_per_seq·(B − 1)``: the jitter is paid once per step whatever the batch, so it moves the knee
    out (+0.7 step per sequence under a jitter of 0.3 step gains 1.18× from 2 to 4, not 1.10×)."""
    def tput(n: int) -> float:
        return n / (b.decode_step_s + b.jitter_s + b.decode_s_per_seq * (n - 1))
    for i, lo in enumerate(levels[:-1]):
        if not any(tput(hi) >= tput(lo) * gain ** math.log2(hi / lo) for hi in levels[i + 1:]):
            return levels[i + 1]
    return None


def _budget(step: float) -> float:
    """explain's budget for a decode step: the slow servers need longer for the same samples."""
    return 22.0 if step <= 0.008 else 28.0 if step <= 0.012 else 45.0 if step <= 0.04 else 60.0


def _cell(name: str, b: Behaviour, why: str, must: tuple[str, ...] = (), may: tuple[str, ...] = (),
          knee: int | None = None) -> Cell:
    return Cell(name=name, behaviour=b, budget_s=_budget(b.decode_step_s), must=must, may=may, knee_shows_at=knee,
                why=why)


def _with(b: Behaviour, **kw: Any) -> Behaviour:
    for k, v in kw.items():
        setattr(b, k, v)
    return b


CELLS: list[Cell] = [
    # -- healthy servers of other kinds, under designed noise: every finding of a problem is false ------
    _cell("sglang healthy @12ms", _b("sglang", 0.012, 101),
          "48 unreported slots (explain sends at most 16), chunks of 16 tokens cost 0.2 of a step"),
    _cell("tgi healthy @40ms", _with(_b("tgi", 0.040, 102, slots=64, chunk=64, prefill_x=100, jitter=0.2),
                                     prefill_s_per_token2=0.040 / 100 / 4000),
          "64 slots, chunks of 64 cost 0.64 of a step, attention's quadratic prefill term, no cached-token counts"),
    _cell("llamacpp healthy @8ms", _b("llamacpp", 0.008, 103, slots=40, jitter=0.4),
          "40 reported slots: the queue experiment sends 32, batching reaches 16"),
    _cell("vllm heavy jitter @3ms", _b("vllm", 0.003, 104, jitter=1.0),
          "a step's noise as large as the step itself"),
    _cell("llamacpp cpu-like @70ms", _b("llamacpp", 0.070, 105, slots=40, chunk=8, prefill_x=20),
          "a slow server: chunks of 8 at 1/20 of a step per token cost 0.4 of a step"),
    # -- one effect, on a server the pair matrix never ran ---------------------------------------------
    _cell("sglang stall @12ms", _b("sglang", 0.012, 111, chunk=None), "no chunked prefill", must=("stall",)),
    _cell("llamacpp stall @8ms", _b("llamacpp", 0.008, 112, slots=40, chunk=None),
          "llama-server's own way: a prompt under -b is one batch", must=("stall",)),
    _cell("tgi nocache @12ms", _with(_b("tgi", 0.012, 113), prefix_cache=False),
          "prefix cache off and no cached-token counts to read: TTFT alone tells", must=("nocache",)),
    _cell("llamacpp nocache @8ms", _with(_b("llamacpp", 0.008, 114, slots=40), prefix_cache=False),
          "prefix cache off (cache_n stays 0)", must=("nocache",)),
    _cell("sglang 3 slots @12ms", _b("sglang", 0.012, 115, slots=3),
          "3 unreported slots: throughput flat from 4 (the knee at 4 shows at 8)", must=("queue",), knee=8),
    _cell("llamacpp 2 slots @8ms", _b("llamacpp", 0.008, 116, slots=2),
          "2 reported slots: batching stops at 2, the queue experiment sends 4", must=("queue",)),
    _cell("tgi ctx x3 @12ms", _with(_b("tgi", 0.012, 117), decode_s_per_ctx_token=0.012 / 300),
          "decode +1/300 of a step per context token (3x the pair matrix's)", must=("ctx",)),
    _cell("vllm batch 0.7 @12ms", _with(_b("vllm", 0.012, 118), decode_s_per_seq=0.7 * 0.012),
          "+0.7 step per extra sequence; with 0.3 step of jitter per step the gains are 1.30x, 1.18x, 1.10x: "
          "the knee at 4 shows at 8", must=("batch",), knee=8),
    _cell("sglang net 150ms @5ms", _with(_b("sglang", 0.005, 119), network_rtt_s=0.15),
          "every answer starts 150 ms late (the rule counts from 100 ms)", must=("net",)),
    # -- near the thresholds, on both sides ----------------------------------------------------------------
    _cell("tgi net 50ms @5ms", _with(_b("tgi", 0.005, 121), network_rtt_s=0.05),
          "every answer starts 50 ms late: under the 100 ms ttft-fixed-overhead counts from, so claiming it is wrong"),
    _cell("llamacpp net 120ms @8ms", _with(_b("llamacpp", 0.008, 122, slots=40), network_rtt_s=0.12),
          "every answer starts 120 ms late, just over the 100 ms", must=("net",)),
    _cell("sglang batch 0.05 @12ms", _with(_b("sglang", 0.012, 123), decode_s_per_seq=0.05 * 0.012),
          "+5 % of a step per extra sequence: still 1.54x from 8 to 16, so any knee claim is wrong"),
    _cell("llamacpp batch 0.25 16 slots @8ms", _with(_b("llamacpp", 0.008, 124, slots=16), decode_s_per_seq=0.25 * 0.008),
          "+25 % of a step per sequence: 8 to 16 gains 1.16x, a hair over the 1.15x knee; 16 reported slots, "
          "so the queue experiment's 32 queue", may=("batch", "queue")),
    _cell("vllm ctx small @12ms", _with(_b("vllm", 0.012, 125), decode_s_per_ctx_token=0.012 / 30000),
          "decode +1/30000 of a step per context token: ~9 % at 2,700 tokens, near the 10 % that counts", may=("ctx",)),
    _cell("sglang ctx tiny @12ms", _with(_b("sglang", 0.012, 126), decode_s_per_ctx_token=0.012 / 400000),
          "decode +1/400000 of a step per context token: under 4 % even at 16k, so a slowdown claim is wrong"),
    _cell("sglang 12 slots @12ms", _b("sglang", 0.012, 127, slots=12),
          "12 unreported slots: the queue experiment's 16 queue (4 wait), batching still gains 1.5x from 8 to 16",
          may=("queue",)),
    _cell("vllm chunk = 1 step @12ms", _b("vllm", 0.012, 128, chunk=64, prefill_x=64),
          "chunks of 64 cost one decode step: the prefill is split, so an unchunked stall is wrong"),
    _cell("sglang chunk 512 @12ms", _b("sglang", 0.012, 129, chunk=512),
          "chunks of 512 cost 6.4 steps: split, yet each piece stalls the streams", may=("stall",)),
    # -- combinations the pair matrix does not run -----------------------------------------------------------
    _cell("llamacpp 2 slots+stall+nocache @8ms", _with(_b("llamacpp", 0.008, 131, slots=2, chunk=None), prefix_cache=False),
          "three effects: 2 reported slots, no chunking, no prefix cache", must=("queue", "stall", "nocache")),
    _cell("sglang ctx+batch 0.7+nocache @5ms",
          _with(_b("sglang", 0.005, 132), decode_s_per_ctx_token=0.005 / 1000, decode_s_per_seq=0.7 * 0.005,
                prefix_cache=False),
          "three effects; the batching knee at 4 shows at 8 (see the batch 0.7 cell)", must=("ctx", "batch", "nocache"),
          knee=8),
    _cell("tgi stall+ctx @12ms", _with(_b("tgi", 0.012, 133, chunk=None), decode_s_per_ctx_token=0.012 / 1000),
          "no chunking, decode +1/1000 of a step per context token", must=("stall", "ctx")),
    _cell("vllm 3 slots+ctx tiny, jitter 1.0 @3ms",
          _with(_b("vllm", 0.003, 134, slots=3, jitter=1.0), decode_s_per_ctx_token=0.003 / 400000),
          "3 unreported slots (knee at 4 shows at 8) under noise as large as a step; a context cost too small to claim",
          must=("queue",), knee=8),
    _cell("sglang stall+nocache @40ms", _with(_b("sglang", 0.040, 135, chunk=None), prefix_cache=False),
          "a slower GPU: no chunking, no prefix cache", must=("stall", "nocache")),
    _cell("llamacpp net 150ms+batch 0.7 16 slots @8ms",
          _with(_b("llamacpp", 0.008, 136, slots=16), network_rtt_s=0.15, decode_s_per_seq=0.7 * 0.008),
          "the network's 150 ms hides the batching cost: 4→8 gains 1.17x, 8→16 1.10x, the knee shows at 16; "
          "16 reported slots, so the queue experiment's 32 queue", must=("net", "batch"), may=("queue",), knee=16),
    _cell("tgi 2 slots+net 150ms @5ms", _with(_b("tgi", 0.005, 137, slots=2), network_rtt_s=0.15),
          "2 unreported slots behind a 150 ms network: requests in flight on the wire keep the slots busy, "
          "so the knee shows at 16", must=("queue", "net"), knee=16),
    _cell("vllm stall+batch 0.05+ctx small @12ms",
          _with(_b("vllm", 0.012, 138, chunk=None), decode_s_per_seq=0.05 * 0.012, decode_s_per_ctx_token=0.012 / 30000),
          "no chunking; a batching cost too small for a knee; a context cost near the threshold",
          must=("stall",), may=("ctx",)),
    _cell("llamacpp stall+ctx @70ms", _with(_b("llamacpp", 0.070, 139, slots=40, chunk=None, prefill_x=20),
                                            decode_s_per_ctx_token=0.070 / 300),
          "a slow CPU-like server: no chunking, decode +1/300 of a step per context token", must=("stall", "ctx")),
]

#: the cells ``make test`` runs (~45 s on a quiet 2-core machine): llama-server behind a 120 ms network
#: (the cell that once read the network as a queue), and three effects at once on SGLang
SUBSET = ["llamacpp net 120ms @8ms", "sglang ctx+batch 0.7+nocache @5ms"]

_names = [c.name for c in CELLS]
assert len(set(_names)) == len(_names), "held-out cell names must be unique"
assert set(SUBSET) <= set(_names)
