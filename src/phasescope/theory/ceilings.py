"""A run beside its physical ceilings: the model spec, the device and the roofline rows for them.

Shared by the runners (``probe`` and ``bench``): no request is made here (an Ollama server's
``/api/show`` is asked by the caller, :func:`phasescope.probing.ceilings.discover_spec`).

Model spec, first that works: ``--model-spec`` (catalog id | config.json | .gguf); llama.cpp
``/props`` ``model_path`` (a GGUF readable here); the served model name when it is a catalog id;
``/props`` or ``/v1/models`` ``meta`` (size, n_params); Ollama's ``/api/show``. Device: ``--device``
or the ``local`` device measured by ``phasescope hw`` (:func:`get_device`). :func:`ceilings`: the
decode ceiling, prefill floor and efficiencies per prompt size
(:mod:`phasescope.probing.ceilings`' docstring).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeGuard

from phasescope import errors as E

if TYPE_CHECKING:
    from phasescope.apis.base import Target


async def discover_spec(target: Target, detected: Any, model_spec: str | None, *,
                        show_ollama: Callable[[], Awaitable[Any]] | None = None) -> tuple[Any, str | None]:
    """(ModelSpec or None, reason when None), first that works (module docstring); ``show_ollama``
    asks an Ollama server for the model (``POST /api/show``, from :mod:`phasescope.apis`), without
    it an Ollama server's shape comes from its name only."""
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
        if target.engine == "ollama" and target.model and show_ollama is not None:
            shown = await show_ollama()
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


def _pair(ci: Any) -> TypeGuard[Sequence[float]]:
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
                                            and floor is not None and _pair(ci) and ci[0] > 0 else None)
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


def waterfall_bounds(spec: Any, device: Any) -> Any:
    """The bounds the request waterfall sets beside its phases (:class:`phasescope.measure.waterfall.Bounds`):
    the prefill floor of the computed prompt tokens and the batch-1 decode ceiling at the prompt's context."""
    from phasescope.measure.waterfall import Bounds
    from phasescope.theory import roofline as R

    def prefill(n: int) -> float | None:
        try:
            return R.prefill_floor_s(spec, device, int(n))
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
            return None

    def decode(ctx: int) -> float | None:
        try:
            return R.decode_ceiling(spec, device, context=int(ctx), batch=1).ceiling_tok_s
        except (E.PhasescopeError, ValueError, TypeError, ZeroDivisionError):
            return None

    return Bounds(prefill_floor_s=prefill, decode_ceiling_tok_s=decode)
