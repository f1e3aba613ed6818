"""``bench``'s ceilings and its honest prompt rate (issue 30).

``bench`` measures under load, so prompt tokens ÷ TTFT is not a prefill speed: TTFT there includes the
wait behind other requests' prefill and decode. The summary keeps the per-request median as
``prompt_tok_per_ttft_s`` ("prompt tokens per TTFT second, under load") and sets the run beside its
physical ceilings where the model and the device are known, with the functions probe uses
(:mod:`phasescope.theory.ceilings`: :func:`~phasescope.theory.ceilings.discover_spec`,
:func:`~phasescope.theory.ceilings.get_device`, :func:`~phasescope.theory.ceilings.ceilings`):

* model: the embedded engine's bundled GGUF (exact bytes and shapes), else the served model name when it
  is a catalog id;
* device: ``local`` (``phasescope hw``) for a server on this machine — the embedded engine always is;
  a remote server's hardware is not this box's, so no device is guessed.

``ceilings`` in ``bench --json``: probe's ``{model_spec, device, sizes: [{prompt_tokens, decode_ceiling_tok_s,
decode_binding, decode_efficiency, prefill_floor_s, prefill_efficiency}]}`` for the run's median prompt
(efficiencies from the per-request medians: one stream's decode vs the batch-1 roof, the prefill floor vs
the median TTFT under load), plus ``batch`` (the mean number of requests in flight, from the records,
capped at the most the server ran at once: /metrics' max running, the embedded engine's slots),
``aggregate_decode_ceiling_tok_s`` at that batch beside the measured ``output_throughput``; or
``{"available": false, "reason": …}``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from phasescope.measure import aggregate, derive
from phasescope.theory.inputs import CEILING_FLAGS

#: the console's words for prompt ÷ TTFT measured under load
PROMPT_RATE_LABEL = "Prompt tokens per TTFT second, under load (tok/s)"


def prompt_tok_per_ttft_s(records: Sequence[Any]) -> float | None:
    """Median over the measured successful requests of prompt tokens ÷ TTFT (not a prefill speed
    under load: TTFT includes waiting)."""
    ok = aggregate.successful(records)
    return aggregate.median([v for v in (derive.prefill_tok_s(r) for r in ok) if v is not None])


def _mean_in_flight(records: Sequence[Any]) -> float | None:
    """Time-averaged requests in flight between the first send and the last token (Little's law)."""
    spans = [(r.t_start_ns, r.t_done_ns) for r in records if r.t_start_ns is not None and r.t_done_ns]
    if not spans:
        return None
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
    return sum(b - a for a, b in spans) / (t1 - t0) if t1 > t0 else 1.0


def _spec(cfg: Any, target: Any) -> tuple[Any, str | None]:
    from phasescope.theory.ceilings import discover_spec

    if getattr(cfg, "url", "x") is None:  # the embedded engine: the bundled GGUF, read here
        try:
            from phasescope.engine.model import bundled_model_path
            from phasescope.theory.models import spec_from_gguf

            return spec_from_gguf(str(bundled_model_path())), None
        except Exception as exc:  # noqa: BLE001 - no ceiling is no failure
            return None, f"the bundled model could not be read ({exc})"
    if getattr(target, "engine", None) == "ollama":
        return None, "model shape unknown for an Ollama server here (`phasescope probe` reads it from /api/show)"
    try:
        return asyncio.run(discover_spec(target, None, None))
    except RuntimeError:  # called inside a running loop: no second loop
        return None, "model shape not discoverable here"
    except Exception as exc:  # noqa: BLE001
        return None, f"model shape not discoverable ({exc})"


def _spec_device(cfg: Any, target: Any) -> tuple[Any, Any, str | None]:
    """(spec, device, None), or (spec or None, None, why not) — never raises."""
    from phasescope.theory import ceilings as C

    spec, why = _spec(cfg, target)
    if spec is None:
        return None, None, why or "model shape unknown"
    try:
        dev, why_dev = C.get_device(None, same_machine=C.is_loopback(getattr(target, "base_url", "") or ""))
    except Exception as exc:  # noqa: BLE001
        dev, why_dev = None, str(exc)
    if dev is None:  # bench takes no --device: say what does
        why_dev = (why_dev or "device unknown").replace("pass --device ID or run", "run").replace(
            "pass --device ID (see `phasescope devices`)", "`phasescope probe --device ID` sets it beside its ceilings")
        return spec, None, why_dev
    return spec, dev, None


def bench_ceilings(cfg: Any, target: Any, records: Sequence[Any], summary: dict[str, Any],
                   spec_dev: tuple[Any, Any, str | None] | None = None) -> dict[str, Any]:
    """``ceilings`` of ``bench --json`` (module docstring); never raises."""
    from phasescope.theory import ceilings as C

    spec, dev, why = spec_dev if spec_dev is not None else _spec_device(cfg, target)
    if spec is None or dev is None:
        return {"available": False, "reason": why}
    ok = aggregate.successful(records)
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    if not prompts:
        return {"available": False, "reason": "no successful request with a prompt token count"}
    n = int(round(aggregate.median(prompts) or 0))
    size = {"prompt_tokens": n,
            "decode_tok_s": aggregate.median([v for v in (derive.decode_tok_s(r) for r in ok) if v is not None]),
            "ttft_s": aggregate.median([v for v in (derive.ttft_s(r) for r in ok) if v is not None])}
    out = C.ceilings(spec, dev, [size])
    out["available"] = True
    b = _mean_in_flight(ok)
    # requests queued in the server are in flight for the client but not in the batch: cap at what ran at once
    ran = ((summary.get("server_metrics") or {}).get("summary") or {}).get("max_running")
    cap = ran if isinstance(ran, (int, float)) and ran > 0 else (
        getattr(cfg, "engine_parallel", None) if getattr(cfg, "url", "x") is None else None)
    if b is not None and cap:
        b = min(b, float(cap))
    out["batch"] = b
    try:
        from phasescope.theory.roofline import decode_ceiling

        agg = decode_ceiling(spec, dev, context=n, batch=max(1.0, b or 1.0)).aggregate_tok_s
    except Exception:  # noqa: BLE001
        agg = None
    out["aggregate_decode_ceiling_tok_s"] = agg
    thr = summary.get("output_throughput")
    out["aggregate_decode_efficiency"] = (thr / agg) if (thr and agg) else None
    return out


def add_bench_ceilings(cfg: Any, target: Any, records: Sequence[Any], summary: dict[str, Any]) -> None:
    """Put ``prompt_tok_per_ttft_s`` and ``ceilings`` in the bench summary (the one call ``bench`` makes)."""
    summary["prompt_tok_per_ttft_s"] = prompt_tok_per_ttft_s(records)
    spec_dev = _spec_device(cfg, target)
    summary["ceilings"] = bench_ceilings(cfg, target, aggregate.measured(records), summary, spec_dev)
    summary["waterfall"] = bench_waterfall(records, spec_dev)


def bench_waterfall(records: Sequence[Any], spec_dev: tuple[Any, Any, str | None]) -> dict[str, Any]:
    """``waterfall`` of ``bench --json`` (:func:`phasescope.measure.waterfall.run_waterfall` over the measured
    requests, each phase beside its floor where the model and the device are known); never raises."""
    from phasescope.measure.waterfall import run_waterfall
    from phasescope.theory.ceilings import waterfall_bounds

    spec, dev, _ = spec_dev
    try:
        bounds = waterfall_bounds(spec, dev) if spec is not None and dev is not None else None
        return run_waterfall(aggregate.measured(records), bounds)
    except Exception as exc:  # noqa: BLE001 - an attribution is advisory; never lose the run
        return {"derived": True, "spans_joined": 0, "spans_missing": None, "bands": {}, "sentence": None,
                "reason": f"waterfall failed: {exc}"}


def console_lines(s: dict[str, Any]) -> list[str]:
    """The console's lines: the honest prompt rate, then the ceilings (or why there are none)."""
    out = []
    v = s.get("prompt_tok_per_ttft_s")
    if v is not None:
        out.append(f"{PROMPT_RATE_LABEL}: median {v:,.1f} — prompt ÷ TTFT per request; TTFT here includes waiting "
                   f"behind other requests, so this is not the prefill speed (`phasescope probe` measures that alone)")
    wf = (s.get("waterfall") or {}).get("sentence")
    if wf:
        out.append(wf)
    c = s.get("ceilings") or {}
    if not c:
        return out
    if not c.get("available"):
        out.append(f"Ceilings: none ({c.get('reason')})")
        return out
    row = (c.get("sizes") or [{}])[0]
    dev = (c.get("device") or {}).get("name") or (c.get("device") or {}).get("id")
    model = (c.get("model_spec") or {}).get("id")
    parts = []
    if row.get("decode_ceiling_tok_s"):
        eff = row.get("decode_efficiency")
        parts.append(f"one stream decodes ≤ {row['decode_ceiling_tok_s']:,.0f} tok/s at batch 1 "
                     f"({row.get('decode_binding')} roof)" + (f", a request here median {eff * 100:.0f} % of it" if eff is not None else ""))
    if c.get("aggregate_decode_ceiling_tok_s") and c.get("batch"):
        e = c.get("aggregate_decode_efficiency")
        parts.append(f"at the run's {c['batch']:.1f} requests decoding at once ≤ "
                     f"{c['aggregate_decode_ceiling_tok_s']:,.0f} output tok/s in all" + (f", measured {e * 100:.0f} % of it" if e is not None else ""))
    if row.get("prefill_floor_s"):
        e = row.get("prefill_efficiency")
        parts.append(f"a {row.get('prompt_tokens')}-token prefill needs ≥ {row['prefill_floor_s'] * 1e3:,.1f} ms "
                     f"(compute roof)" + (f"; the median TTFT under load is {1 / e:,.1f}× that" if e else ""))
    out.append(f"Ceilings ({model} on {dev}): " + "; ".join(parts) if parts else "Ceilings: none computable")
    return out


def card_cell(s: dict[str, Any]) -> str:
    """The report card's ``ceilings`` cell of a bench run (plain text; the card escapes it)."""
    c = s.get("ceilings") or {}
    if not c:
        return f"— (a bench stored before ceilings were added to bench: probe {CEILING_FLAGS})"
    if not c.get("available"):
        return f"— ({c.get('reason')})"
    row = (c.get("sizes") or [{}])[0]
    parts = []
    if row.get("decode_ceiling_tok_s"):
        e = row.get("decode_efficiency")
        parts.append(f"decode ≤ {row['decode_ceiling_tok_s']:,.0f} tok/s per stream at batch 1"
                     + (f" ({e * 100:.0f} % reached)" if e is not None else ""))
    if c.get("aggregate_decode_ceiling_tok_s"):
        e = c.get("aggregate_decode_efficiency")
        parts.append(f"≤ {c['aggregate_decode_ceiling_tok_s']:,.0f} output tok/s at batch {c.get('batch') or 1:.1f}"
                     + (f" ({e * 100:.0f} % reached)" if e is not None else ""))
    if row.get("prefill_floor_s"):
        parts.append(f"{row.get('prompt_tokens')}-token prefill ≥ {row['prefill_floor_s'] * 1e3:,.1f} ms")
    return "; ".join(parts) or "—"
