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
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp

from phasescope import errors as E
from phasescope.apis.base import Target


async def discover_spec(session: aiohttp.ClientSession, target: Target, detected: Any, model_spec: str | None) -> tuple[Any, str | None]:
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
        except (E.PhasescopeError, AttributeError):
            pass
    try:
        if props:
            return M.from_llamacpp_props(props, meta=getattr(detected, "model_meta", None)), None
        if detected is not None and getattr(detected, "model_meta", None):
            return M.from_llamacpp_meta(detected.model_meta, model=target.model or "llama.cpp model"), None
        if target.engine == "ollama" and target.model:
            async with session.post(target.base_url + "/api/show", json={"model": target.model},
                                    timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status == 200:
                    return M.from_ollama_show(await r.json(content_type=None), model=target.model), None
    except (E.PhasescopeError, aiohttp.ClientError, ValueError, OSError) as exc:
        return None, f"model shape not discoverable ({exc})"
    return None, "model unknown: pass --model-spec (catalog id, config.json or .gguf)"


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


def ceilings(spec: Any, device: Any, sizes: list[dict[str, Any]]) -> dict[str, Any]:
    from phasescope.theory import roofline as R

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
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError) as exc:
            row["decode_ceiling_tok_s"] = None
            row["decode_note"] = str(exc)
        try:
            floor = R.prefill_floor_s(spec, device, int(n or 0))
            row["prefill_floor_s"] = floor
            measured = (s.get("server") or {}).get("prefill_s") or s.get("ttft_s")
            row["prefill_efficiency"] = (floor / measured) if (floor and measured) else None
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError) as exc:
            row["prefill_floor_s"] = None
            row["prefill_note"] = str(exc)
        rows.append(row)
    return {
        "model_spec": {"id": getattr(spec, "id", None), "origin": getattr(spec, "origin", None), "source": getattr(spec, "source", None)},
        "device": {"id": getattr(device, "id", None), "name": getattr(device, "name", None),
                   "mem_bandwidth_gb_s": getattr(device, "mem_bandwidth_gb_s", None),
                   "dense_bf16_tflops": getattr(device, "dense_bf16_tflops", None)},
        "sizes": rows,
    }
