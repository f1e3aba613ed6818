"""Speculative decoding on the roofline (issue 33): what one verified step costs, and when it stops paying.

One verified step of a speculating server, at batch ``B`` with ``k`` tokens drafted per sequence per step
(``k`` = drafted ÷ verified steps, as measured):

* the **draft** proposes ``k`` tokens one after another, each a forward pass of the draft model: it reads its
  own weights once per drafted token, ``draft_bytes_per_step = k · (W_d + B · KV_d)`` bytes and
  ``k · B · F_d`` FLOPs (:func:`draft_bytes_per_step`). n-gram / prompt-lookup speculation (llama.cpp
  ``--spec-type ngram-*``, vLLM ``"method": "ngram"``, SGLang ``NGRAM``) has no draft model: 0 bytes,
  0 FLOPs. EAGLE/MTP heads are small draft models: pass their own shape;
* the **target** verifies ``k + 1`` tokens per sequence in one pass: ``W + B · KV`` bytes (the weights once,
  whatever ``k``) and ``B · (k + 1) · F`` FLOPs.

Each pass takes ``max(bytes ÷ bandwidth, FLOPs ÷ peak)`` (Pope et al. §2–3, as
:func:`phasescope.theory.roofline.decode_roofs`), the draft's ``k`` passes in series before the verify, and
the step emits ``tokens_per_step`` = 1 + accepted-per-step tokens per sequence. Without speculation a step
at the same batch costs ``max((W + B · KV) ÷ BW, B · F ÷ peak)`` and emits one token. So

    gain(B) = tokens_per_step × t_plain(B) ÷ (t_draft(B) + t_verify(B))

is the per-stream speed with speculation over the speed without (> 1: it pays). While the verify pass is
bandwidth-bound its ``k + 1`` tokens ride on one weight read; past the device's ridge (``B · (k + 1)``
tokens per pass turn it compute-bound) each step costs about ``k + 1`` times the FLOPs of a plain one and
speculation loses once that outgrows ``tokens_per_step``. :func:`break_even_batch` is the smallest batch with
``gain < 1``.

The decode ceiling per verified step (``probe``/``explain``, :func:`phasescope.probing.ceilings.speculative_roof_tok_s`)
counts the same draft: bandwidth ÷ (target bytes per step + ``draft_bytes_per_step``) × tokens per step.
:func:`draft_model_of` reads a draft model's cost from its shape (``--draft-model-spec``: catalog id,
config.json or .gguf; the embedded engine's ``-md`` GGUF). Pure: no I/O beyond that shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DraftModel", "SpecStep", "break_even_batch", "draft_bytes_per_step", "draft_model_of", "spec_step"]


def draft_bytes_per_step(drafted_per_step: float | None, draft_weight_bytes: float | None,
                         draft_kv_bytes_per_seq: float = 0.0, batch: float = 1.0) -> float:
    """Bytes the draft model reads per verified step: ``k · (W_d + B · KV_d)`` (module docstring); 0 with no
    draft model (n-gram speculation, ``draft_weight_bytes`` None or 0) or nothing drafted."""
    if not drafted_per_step or drafted_per_step <= 0 or not draft_weight_bytes or draft_weight_bytes <= 0:
        return 0.0
    return float(drafted_per_step) * (float(draft_weight_bytes) + batch * max(0.0, draft_kv_bytes_per_seq or 0.0))


def _pass_s(bytes_: float, flops: float, bw: float, peak: float | None) -> float:
    t = bytes_ / bw
    return max(t, flops / peak) if peak else t


@dataclass(frozen=True)
class SpecStep:
    """One verified step at ``batch`` against a plain decode step at the same batch (module docstring)."""

    batch: float
    tokens_per_step: float
    drafted_per_step: float
    plain_step_s: float
    draft_s: float
    verify_s: float
    #: "compute" when the verify pass is compute-bound, else "bandwidth"
    verify_binding: str
    draft_bytes_per_step: float

    @property
    def spec_step_s(self) -> float:
        return self.draft_s + self.verify_s

    @property
    def gain(self) -> float:
        """Per-stream speed with speculation ÷ without (> 1: speculation pays at this batch)."""
        return self.tokens_per_step * self.plain_step_s / self.spec_step_s


def spec_step(*, batch: float, tokens_per_step: float, drafted_per_step: float, weight_bytes: float,
              flops_per_token: float, bandwidth_bytes_s: float, peak_flops: float | None,
              kv_bytes_per_seq: float = 0.0, draft_weight_bytes: float | None = None,
              draft_flops_per_token: float | None = None, draft_kv_bytes_per_seq: float = 0.0) -> SpecStep:
    """:class:`SpecStep` of one verified step (module docstring); ``peak_flops`` None: bandwidth roof only."""
    if bandwidth_bytes_s <= 0 or weight_bytes <= 0:
        raise ValueError("bandwidth and weight bytes must be > 0")
    b, k = max(1.0, float(batch)), max(0.0, float(drafted_per_step))
    target_bytes = weight_bytes + b * kv_bytes_per_seq
    plain = _pass_s(target_bytes, b * flops_per_token, bandwidth_bytes_s, peak_flops)
    d_bytes = draft_bytes_per_step(k, draft_weight_bytes, draft_kv_bytes_per_seq, b)
    draft = 0.0
    if d_bytes > 0:
        # k passes of the draft, one drafted token per sequence each
        draft = k * _pass_s(d_bytes / k, b * (draft_flops_per_token or 0.0), bandwidth_bytes_s, peak_flops)
    v_flops = b * (k + 1.0) * flops_per_token
    verify = _pass_s(target_bytes, v_flops, bandwidth_bytes_s, peak_flops)
    binding = "compute" if peak_flops and v_flops / peak_flops > target_bytes / bandwidth_bytes_s else "bandwidth"
    return SpecStep(b, float(tokens_per_step), k, plain, draft, verify, binding, d_bytes)


def break_even_batch(max_batch: int = 4096, **kw: float | None) -> int | None:
    """The smallest whole batch at which speculation stops paying (``gain < 1``) under :func:`spec_step`'s
    model with ``kw`` (all but ``batch``), or None when it pays up to ``max_batch``."""
    for b in range(1, max_batch + 1):
        if spec_step(batch=b, **kw).gain < 1.0:  # type: ignore[arg-type]
            return b
    return None


@dataclass(frozen=True)
class DraftModel:
    """A draft model's cost per drafted token: its weight bytes read, FLOPs, and the KV bytes one sequence reads
    at ``context`` tokens (0 when its shape is unknown), with where they came from."""

    weight_bytes: float
    flops_per_token: float | None
    kv_bytes_per_seq: float
    source: str
    id: str | None = None

    def bytes_per_step(self, drafted_per_step: float | None, batch: float = 1.0) -> float:
        """:func:`draft_bytes_per_step` of this draft."""
        return draft_bytes_per_step(drafted_per_step, self.weight_bytes, self.kv_bytes_per_seq, batch)


def draft_model_of(spec: Any, context: int = 64) -> DraftModel:
    """The :class:`DraftModel` of a ModelSpec (:mod:`phasescope.theory.models`): the bytes one decode step of it
    reads (exact from a GGUF), its FLOPs and KV per token at ``context``. Raises ValueError when its size is unknown."""
    from phasescope.theory import roofline as R

    w = R.weight_bytes_read(spec)
    try:
        f: float | None = R.decode_flops_per_token(spec, context)
    except ValueError:
        f = None
    kv = R.kv_bytes_per_sequence(spec, context) if getattr(spec, "shape_known", False) else 0.0
    return DraftModel(float(w), f, float(kv), f"{getattr(spec, 'name', None) or spec.id} ({getattr(spec, 'source', '?')})",
                      getattr(spec, "id", None))
