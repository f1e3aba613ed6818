"""Measured vs physical: decode ceiling, efficiency and prefill floor for the probed model/device.

Model spec, first that works: ``--model-spec`` (catalog id | config.json | .gguf); the served
model name when it is a catalog id; llama.cpp ``/props`` ``model_path`` (a GGUF readable here)
or ``/v1/models`` ``meta`` (size, n_params); Ollama ``POST /api/show``. Device: ``--device`` or the
``local`` device measured by ``phasescope hw``. Either missing → no ceilings, with the reason. The
spec, the device and the rows are :mod:`phasescope.theory.ceilings`' (bench uses them too); this
module adds the ``/api/show`` request and the above-ceiling warnings.

* decode ceiling (tok/s, batch 1) = :func:`phasescope.theory.roofline.decode_ceiling` at the
  prompt's context length — min of the bandwidth roof (bytes read per token / bandwidth) and the
  compute roof; efficiency = measured decode tok/s ÷ ceiling;
* prefill floor (s) = :func:`phasescope.theory.roofline.prefill_floor_s` = prefill FLOPs ÷ dense
  peak; efficiency = floor ÷ measured prefill time (server-side when known, else client TTFT).

A measured decode above the *bandwidth* roof is physically impossible (every weight byte is read once
per token), so it means an input is wrong. :func:`above_ceiling` returns an ``above_ceiling``
:class:`~phasescope.measure.warnings.MeasurementWarning` naming the likely culprit:

* ``device_bandwidth`` — the model bytes are exact (read from the served GGUF / ``--weights-gb``), or no
  weight format could explain the speed (it would need < 1.5 bits per weight): the device is not the one
  the server runs on, or ``phasescope hw`` measured it low (a busy machine);
* ``quant`` — the spec is 16-bit but the speed implies ~``b`` bits per weight: the server runs a quantized
  file (pass ``--model-spec`` with the served ``.gguf``/config);
* ``model_bytes`` — otherwise: the spec overstates the bytes read per token (another model, MoE).

Speculative decoding (issue 33): one verified step reads the weights once and emits ``accepted + 1``
tokens, so the roof is per step — :func:`speculative_roof_tok_s` = bandwidth ÷ (bytes per step + the
draft's own bytes per step) × tokens per step; n-gram speculation has no draft model (0 draft bytes), so
its roof is the plain one × tokens per step. :func:`above_ceiling` checks against it when the size has a
``spec_decode`` with more than one token per step, so a healthy speculating server is never "above".

Tolerance: :data:`ABOVE_CEILING_TOLERANCE` (client timing of bursty streams can read a few % high).
"""

from __future__ import annotations

from typing import Any

from phasescope import errors as E
from phasescope.apis import Session
from phasescope.apis.base import Target
from phasescope.measure.warnings import MeasurementWarning, warn
from phasescope.theory import ceilings as T
from phasescope.theory.ceilings import ceilings, get_device, is_loopback

__all__ = ["ABOVE_CEILING_TOLERANCE", "MIN_BITS_PER_WEIGHT", "NO_DRAFT_NOTE", "above_ceiling", "add_per_step_ceilings",
           "above_ceiling_warnings", "ceilings", "discover_spec", "drafted_per_step", "explain_above_ceiling",
           "get_device", "is_loopback", "speculative_roof_tok_s"]

#: measured ÷ bandwidth roof above which a decode speed is flagged (2 % for timing noise)
ABOVE_CEILING_TOLERANCE = 1.02
#: the fewest bits per weight any real format stores (IQ1_S ≈ 1.56)
MIN_BITS_PER_WEIGHT = 1.5


async def discover_spec(session: Session, target: Target, detected: Any, model_spec: str | None) -> tuple[Any, str | None]:
    """(ModelSpec or None, reason when None): :func:`phasescope.theory.ceilings.discover_spec`, with
    Ollama's ``POST /api/show`` asked through ``session`` when the server is Ollama."""

    async def show() -> Any:
        from phasescope.apis.ollama import show_model

        return await show_model(session, target, timeout_s=30)

    return await T.discover_spec(target, detected, model_spec, show_ollama=show)


def speculative_roof_tok_s(plain_roof_tok_s: float, tokens_per_step: float | None, *,
                           step_bytes: float | None = None, draft_bytes_per_step: float | None = None) -> float:
    """The bandwidth roof per verified step (module docstring): ``plain × step_bytes ÷ (step_bytes +
    draft bytes) × tokens_per_step`` = bandwidth ÷ (bytes per step + the draft's) × tokens per step; the plain
    roof when nothing speculates (``tokens_per_step`` None, or ≤ 1 with no draft to pay for). A draft whose
    tokens are all rejected (1 token per step) puts the roof below the plain one. Without ``step_bytes`` a
    draft's cost cannot be weighed and is taken as 0 (:func:`phasescope.theory.speculation.draft_bytes_per_step`
    gives it: ``k`` × the draft's bytes; n-gram speculation has no draft: 0)."""
    if not tokens_per_step:
        return plain_roof_tok_s
    share = 1.0
    if draft_bytes_per_step and draft_bytes_per_step > 0 and step_bytes and step_bytes > 0:
        share = step_bytes / (step_bytes + draft_bytes_per_step)
    if tokens_per_step <= 1 and share == 1.0:
        return plain_roof_tok_s
    return plain_roof_tok_s * share * max(1.0, tokens_per_step)


def above_ceiling(
    measured_tok_s: float | None,
    *,
    bandwidth_roof_tok_s: float | None,
    device_id: str | None,
    device_bandwidth_gb_s: float | None,
    bytes_per_token: float | None,
    weight_format: str | None = None,
    bits_per_weight: float | None = None,
    bytes_exact: bool = False,
    where: str = "decode",
    tokens_per_step: float | None = None,
    draft_bytes_per_step: float | None = None,
) -> list[MeasurementWarning]:
    """``[above_ceiling warning]`` when ``measured_tok_s`` beats the bandwidth roof, else ``[]``
    (module docstring: which input is likely wrong). With ``tokens_per_step`` > 1 (speculative decoding)
    the roof is :func:`speculative_roof_tok_s`'s per-step one."""
    if bandwidth_roof_tok_s and tokens_per_step and (tokens_per_step > 1 or draft_bytes_per_step):
        bandwidth_roof_tok_s = speculative_roof_tok_s(bandwidth_roof_tok_s, tokens_per_step, step_bytes=bytes_per_token,
                                                      draft_bytes_per_step=draft_bytes_per_step)
        if bytes_per_token:  # bytes read per emitted token: the step's (and its draft's) over its tokens
            bytes_per_token = (bytes_per_token + (draft_bytes_per_step or 0.0)) / max(1.0, tokens_per_step)
    if not measured_tok_s or not bandwidth_roof_tok_s or measured_tok_s <= bandwidth_roof_tok_s * ABOVE_CEILING_TOLERANCE:
        return []
    ratio = measured_tok_s / bandwidth_roof_tok_s
    implied_bw = measured_tok_s * bytes_per_token / 1e9 if bytes_per_token else None
    max_bytes = device_bandwidth_gb_s * 1e9 / measured_tok_s if device_bandwidth_gb_s else None
    implied_bits = bits_per_weight / ratio if bits_per_weight else None
    if bytes_exact or (implied_bits is not None and implied_bits < MIN_BITS_PER_WEIGHT):
        likely = "device_bandwidth"
    elif bits_per_weight and bits_per_weight >= 12:
        likely = "quant"
    else:
        likely = "model_bytes"
    dev = device_id or "the device"
    said: dict[str, Any] = {"where": where, "measured": measured_tok_s, "ratio": ratio, "ceiling": bandwidth_roof_tok_s}
    if likely == "device_bandwidth":
        said["why"] = (f"; reading {bytes_per_token / 1e9:,.3g} GB per token at that speed needs {implied_bw:,.0f} GB/s, "
                       f"more than {dev}'s {device_bandwidth_gb_s:,.1f} GB/s" if implied_bw and device_bandwidth_gb_s else "")
        said["because"] = ("the model bytes are exact" if bytes_exact
                           else f"no weight format stores {implied_bits:.2f} bits per weight")
    elif likely == "quant":
        said.update(device_gb_s=device_bandwidth_gb_s, max_gb=max_bytes / 1e9, implied_bits=implied_bits,
                    format=weight_format or "the spec", bits=bits_per_weight)
    else:
        said["why"] = (f"; at {device_bandwidth_gb_s:,.1f} GB/s the server can read at most {max_bytes / 1e9:,.3g} GB per "
                       f"token, the spec says {bytes_per_token / 1e9:,.3g} GB" if max_bytes and bytes_per_token else "")
    ev = {
        "measured_tok_s": measured_tok_s,
        "bandwidth_ceiling_tok_s": bandwidth_roof_tok_s,
        "ratio": ratio,
        "device": device_id,
        "device_bandwidth_gb_s": device_bandwidth_gb_s,
        "bytes_per_token": bytes_per_token,
        "implied_bandwidth_gb_s": implied_bw,
        "weight_format": weight_format,
        "bits_per_weight": bits_per_weight,
        "implied_bits_per_weight": implied_bits,
        "bytes_exact": bytes_exact,
        "likely_wrong": likely,
        "tokens_per_step": tokens_per_step,
        "draft_bytes_per_step": draft_bytes_per_step,
    }
    return [warn("above_ceiling", likely, ev, **said)]


def _bits(spec: Any) -> tuple[str | None, float | None]:
    from phasescope.theory import roofline as R
    from phasescope.theory.quant import get_quant

    try:
        if spec.total_params:
            return spec.dtype, R.weight_bytes_total(spec) * 8 / spec.total_params
        if spec.dtype:
            return spec.dtype, get_quant(spec.dtype).bits_per_weight
    except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
        pass
    return getattr(spec, "dtype", None), None


def drafted_per_step(sd: dict[str, Any] | None) -> float | None:
    """Tokens drafted per verified step of a ``spec_decode`` dict (drafted ÷ steps), None when not counted."""
    if not sd or not sd.get("drafted") or not sd.get("steps"):
        return None
    return float(sd["drafted"]) / float(sd["steps"])


def _draft_at(draft_spec: Any, context: int) -> Any:
    """The :class:`~phasescope.theory.speculation.DraftModel` of ``draft_spec`` at ``context``, None without one."""
    if draft_spec is None:
        return None
    from phasescope.theory.speculation import draft_model_of

    try:
        return draft_model_of(draft_spec, context)
    except (E.PhasescopeError, ValueError, TypeError):
        return None


def above_ceiling_warnings(spec: Any, device: Any, sizes: list[dict[str, Any]],
                           draft_spec: Any = None) -> list[MeasurementWarning]:
    """``probe``: one :func:`above_ceiling` check per prompt size (client and server decode tok/s); with
    ``draft_spec`` (``--draft-model-spec``) a speculating size's roof pays for the draft's bytes per step."""
    from phasescope.theory import roofline as R

    out: list[MeasurementWarning] = []
    fmt, bits = _bits(spec)
    exact = getattr(spec, "origin", None) in ("gguf", "weights") or getattr(spec, "file_weight_bytes", None) is not None
    for s in sizes:
        n = int(s.get("prompt_tokens") or s.get("prompt_tokens_target") or 0)
        sd = s.get("spec_decode") or {}
        tps = sd.get("tokens_per_step")
        try:
            roofs = R.decode_ceiling(spec, device, context=n, batch=1)
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
            continue
        draft = _draft_at(draft_spec, n) if tps else None
        d_bytes = draft.bytes_per_step(drafted_per_step(sd)) if draft is not None else None
        for label, v in (("client", s.get("decode_tok_s")), ("server", (s.get("server") or {}).get("decode_tok_s"))):
            ws = above_ceiling(v, bandwidth_roof_tok_s=roofs.bandwidth_tok_s, device_id=getattr(device, "id", None),
                               device_bandwidth_gb_s=getattr(device, "mem_bandwidth_gb_s", None),
                               bytes_per_token=roofs.step_bytes, weight_format=fmt, bits_per_weight=bits,
                               bytes_exact=exact, where=f"decode at {n:,}-token prompt ({label})",
                               tokens_per_step=tps, draft_bytes_per_step=d_bytes)
            out.extend(ws)
            if ws:
                break  # one warning per size: the server figure says the same
    return out


#: what the ceilings say when the server speculates and no draft model was named
NO_DRAFT_NOTE = ("no draft model named (--draft-model-spec): its cost per step is counted as 0 — exact for n-gram "
                 "speculation, which has none; a draft model's own reads would lower the per-step ceiling")


def add_per_step_ceilings(ceil: dict[str, Any] | None, sizes: list[dict[str, Any]], spec: Any = None,
                          device: Any = None, draft_spec: Any = None) -> None:
    """``decode_ceiling_per_step_tok_s`` on each ceilings row whose size speculated: the row's decode ceiling per
    verified step (:func:`speculative_roof_tok_s`: × that size's ``spec_decode.tokens_per_step``, and × target
    bytes ÷ (target + draft bytes) per step), with ``draft_bytes_per_step`` (``k`` × the draft's bytes at the
    row's context, ``k`` = drafted ÷ verified steps; 0 without a draft model, None when the draft is named but
    ``k`` was not counted) and ``ceil["draft_model_spec"]`` (or ``ceil["draft_note"]``: none named)."""
    if not ceil:
        return
    from phasescope.theory import roofline as R

    by_n = {s.get("prompt_tokens"): s for s in sizes}
    any_spec = False
    for row in ceil.get("sizes") or []:
        sd = (by_n.get(row.get("prompt_tokens")) or {}).get("spec_decode") or {}
        tps = sd.get("tokens_per_step")
        if not tps or not row.get("decode_ceiling_tok_s"):
            continue
        any_spec = True
        n = int(row.get("prompt_tokens") or 0)
        draft = _draft_at(draft_spec, n)
        k = drafted_per_step(sd)
        d_bytes: float | None = 0.0
        step = None
        if draft is not None:
            d_bytes = draft.bytes_per_step(k) if k is not None else None
            try:
                step = R.decode_ceiling(spec, device, context=n, batch=1).step_bytes if spec is not None and device is not None else None
            except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
                step = None
        row["draft_bytes_per_step"] = d_bytes
        row["decode_ceiling_per_step_tok_s"] = speculative_roof_tok_s(row["decode_ceiling_tok_s"], tps, step_bytes=step,
                                                                      draft_bytes_per_step=d_bytes)
    if draft_spec is not None:
        d0 = _draft_at(draft_spec, 0)
        ceil["draft_model_spec"] = {"id": getattr(draft_spec, "id", None), "source": getattr(draft_spec, "source", None),
                                    "weight_bytes": d0.weight_bytes if d0 is not None else None}
    elif any_spec:
        ceil["draft_note"] = NO_DRAFT_NOTE


def explain_above_ceiling(results: dict[str, Any], ceil: Any, records: Any = None) -> list[MeasurementWarning]:
    """``explain``: the single-stream decode the diagnosis uses against the explain ceiling; the warning
    is appended to the measuring experiment's ``info.warnings`` and returned. With the run's ``records``
    a speculating server is judged against the per-step roof (its run-level ``tokens_per_step``)."""
    if ceil is None or not getattr(ceil, "decode_ceiling_tok_s", None):
        return []
    try:
        from phasescope.diagnose.rules import _single_stream_decode
        d, src = _single_stream_decode(results)
    except (ImportError, AttributeError, TypeError):  # advisory: never lose an explain run over it
        return []
    bw = getattr(ceil, "bandwidth_gb_s", None)
    w = getattr(ceil, "weight_bytes", None)
    roof = bw * 1e9 / w if bw and w else ceil.decode_ceiling_tok_s
    tps = d_bytes = None
    if records is not None:
        from phasescope.measure.derive import spec_decode_run
        from phasescope.theory.speculation import draft_bytes_per_step

        sd = spec_decode_run(r for r in records if getattr(r, "ok", False)) or {}
        tps = sd.get("tokens_per_step")
        d_bytes = draft_bytes_per_step(drafted_per_step(sd), getattr(ceil, "draft_weight_bytes", None),
                                       getattr(ceil, "draft_kv_bytes_per_seq", None) or 0.0) or None
    ws = above_ceiling(d, bandwidth_roof_tok_s=roof, device_id=getattr(ceil, "device", None), device_bandwidth_gb_s=bw,
                       bytes_per_token=w, where=f"single-stream decode ({src.split(':')[0] or 'explain'})",
                       tokens_per_step=tps, draft_bytes_per_step=d_bytes)
    name = src.split(":")[0] if src else ""
    exp = results.get(name)
    info = getattr(exp, "info", None)
    if ws and info is not None and isinstance(getattr(info, "warnings", None), list):
        info.warnings.extend(ws)
    return ws
