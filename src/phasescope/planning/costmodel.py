"""Step-time cost model of one serving replica: how long one engine step takes for a given batch.

One *step* is one forward pass over a batch that mixes decode tokens (one per running sequence)
and prefill chunks (contiguous slices of prompts). Its time is the roofline of the bytes it moves
and the FLOPs it does (theory.md §1–3, Pope et al. arXiv:2211.05102 §2–3)::

    bytes(step) = W_bytes + KV_tok · (Σ_dec s_i + Σ_chunks (p_j + c_j))
    flops(step) = F_tok · (n_dec + Σ c_j)                       # 2·N per token, linear layers
                + F_attn · (Σ_dec s_i + Σ_chunks (c_j·p_j + c_j(c_j+1)/2))   # 4·L·n_q·d_h per (query, key) pair
                + F_head · n_sampled                            # 2·d·V logits, only for sampled tokens
    t_step = t_overhead + max(bytes / (BW·η_bw), t_math)          (overlap = "max", GPUs)
    t_step = t_overhead + bytes / (BW·η_bw) + t_math              (overlap = "sum", CPUs)
    t_math = flops_prefill / (F·η_f) + flops_decode / (F·η_dec)   (η_dec = η_f unless calibrated apart)
    t_step += t_allreduce(n_tokens)                              (tensor parallel, serial with the math)
    t_step += t_dec_attn + t_dequant + t_prompt                   (llama.cpp on CPU cores, planning.cpu)

(the last line only where :mod:`.cpu` set them: decode attention at its own rate, Q5_0's dequantize math
per decode step, a fixed cost per prompt chunk; zero on GPUs and after calibration)

where ``s_i`` is the context of decoding sequence *i*, chunk *j* covers prompt positions
``p_j+1 … p_j+c_j`` and ``n_sampled`` = decodes + prompts whose last chunk ends this step.
GPUs overlap memory traffic with math (roofline ``max``); llama.cpp on a few CPU cores does not —
its decode step time on the embedded engine grows by ~6 ms per extra sequence from B = 1, which
the additive form reproduces (engine.md §6: llama-batched-bench 46/57/103/130 tok/s at B = 1/2/4/8).

Tensor parallelism over ``tp`` devices (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): all bytes,
FLOPs, bandwidth and FLOP/s here are the *replica's* (the tp devices together): W_bytes is the whole
model's read per step and BW = tp × one device's bandwidth, which is the same as each device reading
W/tp at its own bandwidth (the old model divided the bytes by tp *and* multiplied the bandwidth by tp:
a step ∝ 1/tp², faster than physics). KV bytes per token are the replica's too: K/V heads split over
the ranks, replicated beyond the KV-head count. Each step adds the all-reduces of its tokens::

    t_allreduce(n) = n_ar · [2(tp−1)·α + 2(tp−1)/tp · b_ar·n / β]        n_ar = 2·L, b_ar = hidden × 2 B

(two all-reduces per layer, ring algorithm; derivation in :mod:`phasescope.theory.roofline`). MoE: the
weight bytes of a step with n tokens (decodes + prefill) include the routed experts those n tokens touch,
``E·(1 − (1 − k/E)^n)`` of ``E`` (theory.md §6), so a batch never reads less than physics says.

Mixed steps (``split_mixed_steps``, llama.cpp with one KV stream per slot, i.e. ``--parallel N`` without
``--kv-unified``, as the embedded engine runs): ``llama_batch_allocr::split_equal`` (sequential) builds every
ubatch from an equal number of tokens per sequence, so a step holding B decodes and k prompt chunks runs
as one ubatch of B + k rows (a token of each sequence: priced as a decode step of that many rows, batch
scale included) and then the chunks' remaining tokens as a prefill pass. Measured on the embedded engine
(plan_validation records, 2 Dec 2026): a 252-token chunk next to 3 decodes took 411–464 ms against ~330 ms
alone plus a 45 ms 3-row step, and the 4-token prompt tail next to 3 decodes 60–80 ms, not the ~25 ms of
one merged roofline step; prefill-only and decode-only steps are one pass as before.

Attention (``attn_flops_eff``, calibrated llama.cpp on CPUs): llama.cpp's CPU attention (no flash
attention; per-head KQ, softmax and V products) runs far below its GEMM rate, and as kernels of its own it
does not hide under the matmuls. On the embedded engine one 512-token prompt (131k query-key pairs) took
650–730 ms where two 256-token prompts batched (the same 512 tokens, 66k pairs) took 570 ms: a prompt's
cost is not a function of its tokens alone. When calibrated (lone prompts of two lengths plus batches sent
together, :mod:`.calibrate`), a step's prompt attention FLOPs leave the roofline and are added after it
at their own rate. (A lone decode step also grows with context — ~13.5 ms at 128 tokens, ~16 ms at 512 —
but a batch of 4 does not grow 4× as fast, so decode attention stays in the step's math.)

llama.cpp's batched decode on a few CPU cores is not smooth in B (engine.md §6: 2 streams bimodal, often
no faster than 1): ``decode_batch_scale`` (fitted by :mod:`.calibrate` from steps measured at each batch
size) multiplies the step time of a decode-only step with B sequences: linear in B between the fitted
sizes (anchored at 1.0 for B = 1), held at the largest fitted size's value beyond it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from phasescope.theory.parallel import allreduce_time_s

GB = 1e9
#: share of device memory kept for activations / CUDA graphs when choosing a tensor-parallel degree
#: (vLLM's profile run measures the real peak; 5 % is a planning guess)
ACTIVATION_RESERVE_FRAC = 0.05


@dataclass
class CostModel:
    """Everything the simulator needs to time a step. Units are in the names.

    A replica from the model and device catalogs is :func:`phasescope.planning.build.cost_from_theory`
    (build imports this module, never the other way round).

    ``weight_bytes``: bytes streamed per step per device group (theory.md §2 ``W_read·b_w``).
    ``kv_bytes_per_token``: KV bytes per cached token, all layers (``2·L·n_kv·d_h·b_kv``).
    ``kv_bytes_per_token_local`` / ``kv_window_tokens``: the part of ``kv_bytes_per_token`` held by
    sliding-window layers, which read at most ``window`` tokens (Gemma 2/3, gpt-oss).
    ``flops_per_token``: ``2·N`` (non-embedding parameters; MoE: active ones).
    ``attn_flops_per_pair``: ``4·L·n_q·d_h`` per (query token, attended key) pair.
    ``lm_head_flops``: ``2·d·V`` per sampled token (only the last prompt token needs logits).
    ``kv_pool_tokens``: tokens of KV the pool holds (vLLM: (mem·util − weights − reserve) / KV_tok).
    ``interconnect_bytes_s``: link used to ship KV between disaggregated workers.
    """

    name: str = "custom"
    weight_bytes: float = 16e9
    kv_bytes_per_token: float = 131072.0
    flops_per_token: float = 2 * 7.0e9
    attn_flops_per_pair: float = 4 * 32 * 32 * 128
    lm_head_flops: float = 2 * 4096 * 128256
    bandwidth_bytes_s: float = 3350 * GB
    peak_flops: float = 989.4e12
    bw_eff: float = 0.8
    flops_eff: float = 0.6
    step_overhead_s: float = 0.002
    kv_pool_tokens: int = 400_000
    overlap: str = "max"
    kv_bytes_per_token_local: float = 0.0
    kv_window_tokens: int | None = None
    interconnect_bytes_s: float = 64 * GB
    tp: int = 1
    source: dict[str, Any] = field(default_factory=dict)
    #: efficiency of the decode tokens' math when it differs from prefill's (``None`` = ``flops_eff``):
    #: a batch of a few decode rows runs matrix-vector kernels, far below the GEMM rate of a prompt
    decode_flops_eff: float | None = None
    #: tensor-parallel all-reduces per step (2·L when tp > 1), bytes each moves per token (hidden × 2),
    #: seconds per ring step (α)
    allreduce_per_step: int = 0
    allreduce_bytes_per_token: float = 0.0
    allreduce_latency_s: float = 1e-6
    #: MoE: all routed-expert bytes, experts and experts per token (0: dense; weight_bytes is the batch-1 read)
    routed_expert_bytes: float = 0.0
    n_experts: int = 0
    n_experts_per_tok: int = 0
    #: measured ÷ modelled decode step by batch size, [[B, scale], ...] sorted by B (calibrated llama.cpp)
    decode_batch_scale: list[list[float]] | None = None
    #: llama.cpp with one KV stream per slot (``--parallel N`` without ``--kv-unified``): a step that mixes
    #: decodes and prompt chunks runs as two passes (module docstring, "Mixed steps")
    split_mixed_steps: bool = False
    #: efficiency of a prompt's attention (query, key) FLOPs when calibrated apart from the GEMMs (``None``:
    #: part of ``flops_eff`` as before); then they run as kernels of their own, after the step's roofline
    #: (module docstring, "Attention")
    attn_flops_eff: float | None = None
    #: llama.cpp on CPU cores (:mod:`phasescope.planning.cpu`; 0 / ``None`` elsewhere): decode attention at its
    #: own rate (``None``: part of the decode math), extra seconds of dequantize math per decode step, and a
    #: fixed cost per prompt chunk
    decode_attn_flops_eff: float | None = None
    dequant_s_per_step: float = 0.0
    prefill_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.overlap not in ("max", "sum"):
            raise ValueError(f"overlap must be 'max' or 'sum', not {self.overlap!r}")

    # -- derived rates -------------------------------------------------------------------------
    @property
    def eff_bandwidth_bytes_s(self) -> float:
        return self.bandwidth_bytes_s * self.bw_eff

    @property
    def eff_flops(self) -> float:
        return self.peak_flops * self.flops_eff

    @property
    def eff_decode_flops(self) -> float:
        return self.peak_flops * (self.flops_eff if self.decode_flops_eff is None else self.decode_flops_eff)

    def allreduce_s(self, tokens: float) -> float:
        """Tensor-parallel communication of one step over ``tokens`` tokens (module docstring)."""
        return allreduce_time_s(self.allreduce_per_step, self.allreduce_bytes_per_token, tokens, self.tp,
                                self.interconnect_bytes_s, latency_s=self.allreduce_latency_s)

    def weight_read_bytes(self, tokens: float) -> float:
        """Weight bytes a step over ``tokens`` tokens streams (MoE: experts touched, theory.md §6)."""
        if self.n_experts <= 0 or self.routed_expert_bytes <= 0 or tokens <= 1:
            return self.weight_bytes
        E, k = float(self.n_experts), float(self.n_experts_per_tok)
        frac = 1.0 - (1.0 - k / E) ** tokens
        return self.weight_bytes + self.routed_expert_bytes * (frac - k / E)

    def batch_scale(self, n_decode: int) -> float:
        """``decode_batch_scale`` at ``n_decode`` (linear between fitted sizes, held beyond the last)."""
        pts = self.decode_batch_scale
        if not pts or n_decode <= 0:
            return 1.0
        return float(np.interp(float(n_decode), [float(b) for b, _ in pts], [float(v) for _, v in pts]))

    def kv_read_bytes(self, n_seqs: int, ctx_sum: float) -> float:
        """KV bytes read by ``n_seqs`` sequences holding ``ctx_sum`` tokens in all. Sliding-window
        layers read at most ``window`` tokens each (mean context used: O(1) per step)."""
        if not self.kv_window_tokens or self.kv_bytes_per_token_local <= 0 or n_seqs <= 0:
            return self.kv_bytes_per_token * ctx_sum
        glob = self.kv_bytes_per_token - self.kv_bytes_per_token_local
        local_ctx = n_seqs * min(ctx_sum / n_seqs, float(self.kv_window_tokens))
        return glob * ctx_sum + self.kv_bytes_per_token_local * local_ctx

    def step_time_s(
        self,
        n_decode: int,
        decode_ctx_sum: float,
        prefill_tokens: int = 0,
        prefill_pairs: float = 0.0,
        prefill_kv_tokens: float = 0.0,
        n_prefill_chunks: int = 0,
        n_sampled: int | None = None,
    ) -> float:
        """Seconds for one step (formula in the module docstring).

        ``prefill_pairs`` = Σ_j (c_j·p_j + c_j(c_j+1)/2); ``prefill_kv_tokens`` = Σ_j (p_j + c_j);
        ``n_sampled`` defaults to ``n_decode`` (add one per prompt finishing this step).
        """
        if n_decode <= 0 and prefill_tokens <= 0:
            return 0.0
        sampled = n_decode if n_sampled is None else n_sampled
        if self.split_mixed_steps and n_decode > 0 and prefill_tokens > 0 and n_prefill_chunks > 0:
            # one row per sequence (every decode + each chunk's first token) as a decode pass of that many
            # rows, then the chunks' other tokens as a prefill pass (module docstring, "Mixed steps")
            rows = n_decode + n_prefill_chunks
            t = self.step_time_s(rows, decode_ctx_sum * rows / n_decode)
            rest = prefill_tokens - n_prefill_chunks
            if rest > 0:
                t += self.step_time_s(0, 0.0, rest, prefill_pairs, prefill_kv_tokens, n_prefill_chunks,
                                      max(sampled - n_decode, 0))
            return t
        tokens = max(n_decode, 0) + max(prefill_tokens, 0)
        nbytes = self.weight_read_bytes(tokens) + self.kv_read_bytes(n_decode, decode_ctx_sum)
        nbytes += self.kv_read_bytes(n_prefill_chunks, prefill_kv_tokens)
        a_dec = self.attn_flops_per_pair * decode_ctx_sum
        a_pre = self.attn_flops_per_pair * prefill_pairs
        # serial with the step's roofline: a prompt's attention calibrated apart (its own kernels) and, from
        # planning.cpu, decode attention at its own rate, the dequantize math and the per-prompt cost
        t_serial = 0.0
        if self.attn_flops_eff is not None:
            t_serial = a_pre / (self.peak_flops * self.attn_flops_eff)
            a_pre = 0.0
        if self.decode_attn_flops_eff is not None and n_decode > 0:
            t_serial += a_dec / (self.peak_flops * self.decode_attn_flops_eff)
            a_dec = 0.0
        if n_decode > 0:
            t_serial += self.dequant_s_per_step
        if prefill_tokens > 0:
            t_serial += self.prefill_overhead_s * max(n_prefill_chunks, 1)
        f_dec = (self.flops_per_token + self.lm_head_flops) * n_decode + a_dec
        f_pre = (
            self.flops_per_token * prefill_tokens
            + a_pre
            + self.lm_head_flops * max(sampled - n_decode, 0)
        )
        t_mem = nbytes / self.eff_bandwidth_bytes_s
        t_cmp = f_pre / self.eff_flops + f_dec / self.eff_decode_flops
        core = max(t_mem, t_cmp) if self.overlap == "max" else t_mem + t_cmp
        t = self.step_overhead_s + core + t_serial + self.allreduce_s(tokens)
        if self.decode_batch_scale and prefill_tokens <= 0:
            t *= self.batch_scale(n_decode)
        return t

    # -- closed forms used by tests and tables -------------------------------------------------
    def prefill_time_s(self, prompt_tokens: int, chunk: int | None = None, start: int = 0,
                       breaks: tuple[int, ...] = ()) -> float:
        """Time to prefill ``prompt_tokens`` (positions ``start+1 …``) alone, in chunks of ``chunk``,
        each chunk also cut where the prompt reaches ``prompt_tokens − b`` for ``b`` in ``breaks``
        (llama.cpp's checkpoint breaks, :class:`~phasescope.planning.sim.SchedulerConfig`)."""
        return sum(self.step_time_s(0, 0.0, prefill_tokens=c, prefill_pairs=chunk_pairs(p, c),
                                    prefill_kv_tokens=p + c, n_prefill_chunks=1,
                                    n_sampled=1 if p + c >= prompt_tokens else 0)
                   for p, c in prefill_chunks(prompt_tokens, chunk, start, breaks))

    def decode_step_s(self, batch: int, ctx: float) -> float:
        """One decode step of ``batch`` sequences, each holding ``ctx`` tokens."""
        return self.step_time_s(batch, batch * ctx)

    def kv_transfer_s(self, tokens: int) -> float:
        """Disaggregation: ship ``tokens`` of KV over the interconnect (bytes ÷ link bandwidth)."""
        return tokens * self.kv_bytes_per_token / self.interconnect_bytes_s

    def with_(self, **changes: Any) -> "CostModel":
        return replace(self, **changes)

    def rescaled(self, prefill: float = 1.0, decode: float = 1.0) -> "CostModel":
        """The same replica on a machine whose prompts take ``prefill`` × and whose decode steps take
        ``decode`` × as long (a shared VM's speed drifts 10–40 % over minutes; benchmarks/plan_validation.py
        measures both with reference requests around each workload). Decode's memory, math and per-step
        overhead scale by ``decode`` — a decode-only step, batch scale included, takes exactly ``decode`` × —
        and a prompt's GEMM and attention math by ``prefill``."""
        if prefill <= 0 or decode <= 0 or not (math.isfinite(prefill) and math.isfinite(decode)):
            raise ValueError(f"speed factors must be positive and finite, not {prefill!r}, {decode!r}")
        dec_eff = self.flops_eff if self.decode_flops_eff is None else self.decode_flops_eff
        return replace(self, bw_eff=self.bw_eff / decode, decode_flops_eff=dec_eff / decode,
                       step_overhead_s=self.step_overhead_s * decode, flops_eff=self.flops_eff / prefill,
                       attn_flops_eff=None if self.attn_flops_eff is None else self.attn_flops_eff / prefill,
                       decode_attn_flops_eff=None if self.decode_attn_flops_eff is None
                       else self.decode_attn_flops_eff / decode,
                       dequant_s_per_step=self.dequant_s_per_step * decode,
                       prefill_overhead_s=self.prefill_overhead_s * prefill)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prefill_chunks(prompt_tokens: int, chunk: int | None = None, start: int = 0,
                   breaks: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """(start, size) of the chunks a prompt alone is prefilled in: at most ``chunk`` tokens each, cut
    where the prompt reaches ``prompt_tokens − b`` for each ``b`` in ``breaks`` (llama.cpp's checkpoints)."""
    chunk = chunk or max(prompt_tokens - start, 1)
    out, p = [], start
    while p < prompt_tokens:
        c = min(chunk, prompt_tokens - p)
        for b in breaks:
            brk = prompt_tokens - b
            if p < brk < p + c:
                c = brk - p
                break
        out.append((p, c))
        p += c
    return out


def chunk_pairs(p: int, c: int) -> float:
    """(query, key) pairs of a causal chunk of ``c`` tokens after ``p`` cached ones:
    Σ_{t=p+1}^{p+c} t = c·p + c(c+1)/2."""
    return c * p + c * (c + 1) / 2.0


def min_tp(memory_bytes: float | None, weight_bytes: float, gpu_memory_utilization: float = 0.9) -> int:
    """Smallest power-of-two tensor-parallel degree whose per-device weight share fits with room
    for at least 10 % of memory as KV pool."""
    if not memory_bytes:
        return 1
    tp = 1
    while tp < 64 and weight_bytes / tp > memory_bytes * (gpu_memory_utilization - ACTIVATION_RESERVE_FRAC - 0.1):
        tp *= 2
    return tp
