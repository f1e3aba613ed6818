"""Measured vs physical: decode ceiling, efficiency and prefill floor for the probed model/device.

Model spec, first that works: ``--model-spec`` (catalog id | config.json | .gguf); the served
model name when it is a catalog id; llama.cpp ``/props`` ``model_path`` (a GGUF readable here)
or ``/v1/models`` ``meta`` (size, n_params); Ollama ``POST /api/show``. Device: ``--device`` or the
``local`` device measured by ``phasescope hw``. Either missing → no ceilings, with the reason.

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

Tolerance: :data:`ABOVE_CEILING_TOLERANCE` (client timing of bursty streams can read a few % high).
"""

from __future__ import annotations

import os
from typing import Any

from phasescope import errors as E
from phasescope.apis import Session
from phasescope.apis.base import Target
from phasescope.measure.warnings import MeasurementWarning, warn

#: measured ÷ bandwidth roof above which a decode speed is flagged (2 % for timing noise)
ABOVE_CEILING_TOLERANCE = 1.02
#: the fewest bits per weight any real format stores (IQ1_S ≈ 1.56)
MIN_BITS_PER_WEIGHT = 1.5


async def discover_spec(session: Session, target: Target, detected: Any, model_spec: str | None) -> tuple[Any, str | None]:
    """(ModelSpec or None, reason when None)."""
    try:
        from phasescope.theory import models as M
    except ImportError as exc:  # theory not available
        return None, f"theory module unavailable ({exc})"
    if model_spec:
        return M.load_model_spec(model_spec), None  # bad input → InputError, the user asked for it
    props = getattr(detected, "props", None) if detected is not None else None
    path = props.get("model_path") if isinstance(props, dict) else None
    if path and os.path.isfile(str(path)):  # the served GGUF itself: exact bytes and shapes
        try:
            return M.spec_from_gguf(str(path)), None
        except (E.PhasescopeError, OSError, ValueError):
            pass
    if target.model:
        try:
            if M.get_catalog_ids_match(target.model):
                return M.load_model_spec(target.model), None
            named = M.spec_for_served_name(target.model)  # its cached config.json, or a normalised name
            if named is not None:
                return named, None
        except (E.PhasescopeError, AttributeError, OSError, ValueError):
            pass
    try:
        if props:
            return M.from_llamacpp_props(props, meta=getattr(detected, "model_meta", None)), None
        if detected is not None and getattr(detected, "model_meta", None):
            return M.from_llamacpp_meta(detected.model_meta, model=target.model or "llama.cpp model"), None
        if target.engine == "ollama" and target.model:
            from phasescope.apis.ollama import show_model

            shown = await show_model(session, target, timeout_s=30)
            if shown is not None:
                return M.from_ollama_show(shown, model=target.model), None
    except (E.PhasescopeError, ValueError, OSError) as exc:
        return None, f"model shape not discoverable ({exc})"
    if target.model:  # why --model did not help: it names the request, and this name is no catalog id
        near = M.near_misses(target.model)
        return None, (f"no shape for {target.model}: pass --model-spec config.json|.gguf|catalog-id"
                      + (f" (near: {', '.join(near)})" if near else ""))
    return None, "model shape unknown: pass --model-spec (catalog id, config.json or .gguf)"


def is_loopback(url: str) -> bool:
    """True when the server runs on this machine (so ``hw``'s ``local`` device describes it)."""
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def get_device(device: str | None, *, same_machine: bool = True) -> tuple[Any, str | None]:
    """The device for the ceilings: the one asked for, else ``local`` — but only for a server on
    this machine; a remote server's hardware is not this box's, so we ask instead of guessing."""
    try:
        from phasescope.theory import devices as Dv
    except ImportError as exc:
        return None, f"theory module unavailable ({exc})"
    if device:
        return Dv.get_device(device), None  # unknown id → InputError: the user asked for it
    if not same_machine:
        return None, "device unknown for a remote server: pass --device ID (see `phasescope devices`)"
    try:
        return Dv.get_device("local"), None
    except E.PhasescopeError:
        return None, "device unknown: pass --device ID or run `phasescope hw` once to measure this machine"


def _pair(ci: Any) -> bool:
    return isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)


def ceilings(spec: Any, device: Any, sizes: list[dict[str, Any]]) -> dict[str, Any]:
    from phasescope.theory import hw as _hw, roofline as R

    rows = []
    for s in sizes:
        n = s.get("prompt_tokens") or s.get("prompt_tokens_target")
        row: dict[str, Any] = {"prompt_tokens": n}
        try:
            roofs = R.decode_ceiling(spec, device, context=int(n or 0), batch=1)
            row["decode_ceiling_tok_s"] = roofs.ceiling_tok_s
            row["decode_binding"] = roofs.binding
            d = s.get("decode_tok_s")
            srv = (s.get("server") or {}).get("decode_tok_s")
            row["decode_efficiency"] = (d / roofs.ceiling_tok_s) if d and roofs.ceiling_tok_s else None
            row["server_decode_efficiency"] = (srv / roofs.ceiling_tok_s) if srv and roofs.ceiling_tok_s else None
            ci = s.get("decode_tok_s_ci")  # the measured rate's 95 % interval over the same exact ceiling
            row["decode_efficiency_ci"] = ([x / roofs.ceiling_tok_s for x in ci] if row["decode_efficiency"] is not None
                                           and _pair(ci) else None)
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError) as exc:
            row["decode_ceiling_tok_s"] = None
            row["decode_note"] = str(exc)
        try:
            floor = R.prefill_floor_s(spec, device, int(n or 0))
            row["prefill_floor_s"] = floor
            srv_pre = (s.get("server") or {}).get("prefill_s")
            measured = srv_pre or s.get("ttft_s")
            row["prefill_efficiency"] = (floor / measured) if (floor and measured) else None
            ci = (s.get("server") or {}).get("prefill_s_ci") if srv_pre else s.get("ttft_s_ci")
            row["prefill_efficiency_ci"] = ([floor / ci[1], floor / ci[0]] if row["prefill_efficiency"] is not None
                                            and _pair(ci) and ci[0] > 0 else None)
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError) as exc:
            row["prefill_floor_s"] = None
            row["prefill_note"] = str(exc)
        rows.append(row)
    return {
        "model_spec": {"id": getattr(spec, "id", None), "origin": getattr(spec, "origin", None),
                       "source": getattr(spec, "source", None), "chosen_by": getattr(spec, "chosen_by", None)},
        "device": {"id": getattr(device, "id", None), "name": getattr(device, "name", None),
                   "mem_bandwidth_gb_s": getattr(device, "mem_bandwidth_gb_s", None),
                   "dense_bf16_tflops": getattr(device, "dense_bf16_tflops", None), "profile": _hw.profile_for(device)},
        "sizes": rows,
    }


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
) -> list[MeasurementWarning]:
    """``[above_ceiling warning]`` when ``measured_tok_s`` beats the bandwidth roof, else ``[]``
    (module docstring: which input is likely wrong)."""
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


def above_ceiling_warnings(spec: Any, device: Any, sizes: list[dict[str, Any]]) -> list[MeasurementWarning]:
    """``probe``: one :func:`above_ceiling` check per prompt size (client and server decode tok/s)."""
    from phasescope.theory import roofline as R

    out: list[MeasurementWarning] = []
    fmt, bits = _bits(spec)
    exact = getattr(spec, "origin", None) in ("gguf", "weights") or getattr(spec, "file_weight_bytes", None) is not None
    for s in sizes:
        n = int(s.get("prompt_tokens") or s.get("prompt_tokens_target") or 0)
        try:
            roofs = R.decode_ceiling(spec, device, context=n, batch=1)
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
            continue
        for label, v in (("client", s.get("decode_tok_s")), ("server", (s.get("server") or {}).get("decode_tok_s"))):
            ws = above_ceiling(v, bandwidth_roof_tok_s=roofs.bandwidth_tok_s, device_id=getattr(device, "id", None),
                               device_bandwidth_gb_s=getattr(device, "mem_bandwidth_gb_s", None),
                               bytes_per_token=roofs.step_bytes, weight_format=fmt, bits_per_weight=bits,
                               bytes_exact=exact, where=f"decode at {n:,}-token prompt ({label})")
            out.extend(ws)
            if ws:
                break  # one warning per size: the server figure says the same
    return out


def explain_above_ceiling(results: dict[str, Any], ceil: Any) -> list[MeasurementWarning]:
    """``explain``: the single-stream decode the diagnosis uses against the explain ceiling; the warning
    is appended to the measuring experiment's ``info.warnings`` and returned."""
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
    ws = above_ceiling(d, bandwidth_roof_tok_s=roof, device_id=getattr(ceil, "device", None), device_bandwidth_gb_s=bw,
                       bytes_per_token=w, where=f"single-stream decode ({src.split(':')[0] or 'explain'})")
    name = src.split(":")[0] if src else ""
    exp = results.get(name)
    info = getattr(exp, "info", None)
    if ws and info is not None and isinstance(getattr(info, "warnings", None), list):
        info.warnings.extend(ws)
    return ws
