"""When speculative decoding pays and when it does not (issue 33): rule ``speculation``.

Reads the requests' own draft counts (llama.cpp's ``timings.draft_n`` / ``draft_n_accepted``, via
:func:`phasescope.measure.derive.spec_decode`): each request's acceptance rate is one sample, and the claim rests on
their median's 95 % interval against :data:`~phasescope.diagnose.thresholds.SPEC_ACCEPT_LOW` — below it entirely:
``speculation-low-acceptance`` with the engine's flags; above it entirely: nothing to say; across it, or fewer than
:data:`~phasescope.diagnose.thresholds.SPEC_MIN_REQUESTS` requests with counts: "cannot tell". Requests whose
speculation is only inferred from the arrival pattern carry no drafted count, so they decide nothing here.

Batch too large (:func:`rule_speculation_batch`, run after it): explain's ``batching`` experiment runs several
concurrency levels; where its requests carry draft counts, each level's tokens per verified step (one sample per
request, its median's 95 % interval) and drafted tokens per step are *measured*. No experiment runs the same load
with speculation off, so whether speculation still pays at a level is *predicted*:
:func:`phasescope.theory.speculation.spec_step` weighs a verified step (the draft's ``k`` passes, then one target
pass over ``B·(k+1)`` tokens) against a plain step at the same batch on the device's two roofs (the explain
ceilings' bandwidth, peak FLOPs, bytes and FLOPs per token, and the draft model's when it is known), with the
measured tokens per step: gain = tokens per step × plain step ÷ speculative step. The gain's interval is the one
the tokens-per-step interval gives (the roofs are theory, with no interval of their own). At the lowest level
whose whole interval lies below 1: ``speculation-batch-too-large`` with the predicted break-even batch and the
engine's flags — unless even one stream loses at the interval's upper end (a verify pass compute-bound at batch 1,
or a draft dearer than its accepted tokens): then ``speculation-step-too-costly``, since the batch is not the cause; an interval that spans 1 (and none below): "cannot tell" (``speculation-batch``) with the
spread; every level above 1: nothing to say. Without the compute roof (model or device unknown, or a device with
no peak FLOPs) or with fewer than :data:`~phasescope.diagnose.thresholds.SPEC_MIN_REQUESTS` counted requests at
every level: "cannot tell", saying what is missing. Requests with only inferred speculation carry no drafted
count, so they decide nothing here either.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.diagnose.findings import Diagnosis, Evidence, Finding, Undecided
from phasescope.diagnose.knobs import advice_for
from phasescope.diagnose.thresholds import SPEC_ACCEPT_LOW, SPEC_MIN_REQUESTS
from phasescope.measure.derive import decode_tok_s, spec_decode, spec_decode_run
from phasescope.measure.interval import Interval, median_interval
from phasescope.theory.speculation import SpecStep, break_even_batch, spec_step


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def rule_speculation(r: dict[str, Any], diag: Diagnosis, ceil: Any, records: Sequence[Any] = ()) -> None:
    ok = [rec for rec in records if getattr(rec, "ok", False)]
    per = [(rec, sd) for rec in ok if (sd := spec_decode(rec)) and sd.get("acceptance_rate") is not None]
    if not per:
        return
    rates = [float(sd["acceptance_rate"]) for _, sd in per]
    run = spec_decode_run(rec for rec, _ in per) or {}
    src = f"server draft counts ({run.get('source', 'llamacpp_timings')}), {len(per)} requests"
    if len(per) < SPEC_MIN_REQUESTS:
        diag.undecided.append(Undecided(
            "speculation", f"only {len(per)} request(s) carried draft counts (acceptance {', '.join(_pct(x) for x in rates)}); "
            f"{SPEC_MIN_REQUESTS} are needed to tell whether speculation keeps enough of its drafts"))
        return
    iv = median_interval(rates)
    if iv is None:
        return
    band = f"median {_pct(iv.value)}, 95 % interval {_pct(iv.low)}–{_pct(iv.high)}"
    if iv.low >= SPEC_ACCEPT_LOW:
        return  # speculation keeps enough of its drafts: nothing to change
    if iv.high >= SPEC_ACCEPT_LOW:
        diag.undecided.append(Undecided(
            "speculation", f"per-request acceptance {band} over {iv.n} requests spans the {_pct(SPEC_ACCEPT_LOW)} "
            f"break-even: cannot tell whether speculation pays (more requests narrow it)"))
        return
    ev = [Evidence("acceptance rate of drafted tokens (per request, median)", 100 * iv.value, "%", src),
          Evidence("95 % interval of that median, upper end", 100 * iv.high, "%", src)]
    if run.get("acceptance_rate") is not None:
        ev.append(Evidence("acceptance rate of drafted tokens (run)", 100 * float(run["acceptance_rate"]), "%", src))
    if run.get("tokens_per_step") is not None:
        ev.append(Evidence("tokens per verified step", float(run["tokens_per_step"]), "", src))
    if run.get("drafted") is not None:
        ev.append(Evidence("tokens drafted / accepted", f"{run['drafted']} / {run['accepted']}", "", src))
    diag.findings.append(Finding(
        "speculation-low-acceptance", "problem",
        f"Speculative decoding keeps too few of its drafts to pay: drafted tokens accepted per request {band}, below the "
        f"{_pct(SPEC_ACCEPT_LOW)} at which drafting and verifying cost what the accepted tokens save.",
        ev, advice_for("spec_low_acceptance", diag.engine)))


# --- batch too large ---------------------------------------------------------------------------------------
BATCH_ID = "speculation-batch"


def _level_records(records: Sequence[Any]) -> dict[int, list[Any]]:
    """The batching experiment's measured, successful requests that carry draft counts, by concurrency."""
    out: dict[int, list[Any]] = {}
    for rec in records:
        t = getattr(rec, "tags", None) or {}
        if t.get("experiment") != "batching" or t.get("phase") != "measure" or not getattr(rec, "ok", False):
            continue
        sd = spec_decode(rec)
        if sd and sd.get("drafted") and sd.get("tokens_per_step"):
            out.setdefault(int(t.get("concurrency") or 1), []).append(rec)
    return out


def _roofs(ceil: Any) -> dict[str, Any] | None:
    """spec_step's keyword arguments from the explain ceilings, None without both roofs."""
    bw, w = getattr(ceil, "bandwidth_gb_s", None), getattr(ceil, "weight_bytes", None)
    peak, f = getattr(ceil, "peak_flops", None), getattr(ceil, "flops_per_token", None)
    if not (bw and w and peak and f):
        return None
    return {"weight_bytes": float(w), "flops_per_token": float(f), "bandwidth_bytes_s": float(bw) * 1e9,
            "peak_flops": float(peak), "kv_bytes_per_seq": float(getattr(ceil, "kv_bytes_per_seq", None) or 0.0),
            "draft_weight_bytes": getattr(ceil, "draft_weight_bytes", None),
            "draft_flops_per_token": getattr(ceil, "draft_flops_per_token", None),
            "draft_kv_bytes_per_seq": float(getattr(ceil, "draft_kv_bytes_per_seq", None) or 0.0)}


def _x(v: float) -> str:
    return f"{v:.2f}×"


def rule_speculation_batch(r: dict[str, Any], diag: Diagnosis, ceil: Any, records: Sequence[Any] = ()) -> None:
    by_c = _level_records(records)
    if not by_c:
        return  # no speculation measured across concurrency levels
    levels = sorted(by_c)
    roofs = _roofs(ceil)
    if roofs is None:
        diag.undecided.append(Undecided(
            BATCH_ID, f"the server speculates at concurrency {', '.join(map(str, levels))}; whether the batch is too large "
            f"for speculation needs the compute roof (peak FLOPs of the device, FLOPs per token of the model): pass "
            f"--model-spec and a --device with a compute peak"))
        return
    rows: list[tuple[int, Interval, float, SpecStep, SpecStep, SpecStep, Interval | None]] = []
    for c in levels:
        recs = by_c[c]
        if len(recs) < SPEC_MIN_REQUESTS:
            continue
        tps = median_interval([float(sd["tokens_per_step"]) for rec in recs if (sd := spec_decode(rec))])
        run = spec_decode_run(recs) or {}
        if tps is None or not run.get("drafted") or not run.get("steps"):
            continue
        k = float(run["drafted"]) / float(run["steps"])
        lo, mid, hi = (spec_step(batch=c, tokens_per_step=t, drafted_per_step=k, **roofs)
                       for t in (tps.low, tps.value, tps.high))
        rows.append((c, tps, k, lo, mid, hi, median_interval([decode_tok_s(rec) for rec in recs])))
    if not rows:
        diag.undecided.append(Undecided(
            BATCH_ID, f"fewer than {SPEC_MIN_REQUESTS} requests with draft counts at every concurrency level "
            f"({', '.join(f'{c}: {len(by_c[c])}' for c in levels)}): cannot tell whether the batch is too large for speculation"))
        return
    src = "measured: batching, the requests' draft counts"
    where = str(getattr(ceil, "source", "") or "theory").removeprefix("theory: ").split(", batch")[0]
    theory = f"predicted: the roofs of {where} × the measured tokens per step" + (
        f", draft {getattr(ceil, 'draft_source', None)}" if roofs["draft_weight_bytes"] else ", no draft model counted")

    def spread(row: tuple) -> str:
        c, tps, k, lo, mid, hi, _ = row
        return (f"concurrency {c}: tokens per verified step {tps.value:.2f} ({tps.low:.2f}–{tps.high:.2f}, {tps.n} requests), "
                f"{k:.1f} drafted per step, predicted gain {_x(mid.gain)} ({_x(lo.gain)}–{_x(hi.gain)})")

    losing = [row for row in rows if row[5].gain < 1.0]
    if not losing:
        unclear = [row for row in rows if row[3].gain < 1.0]
        if unclear:
            diag.undecided.append(Undecided(
                BATCH_ID, "cannot tell whether speculation still pays at this concurrency: "
                + "; ".join(spread(row) for row in unclear) + " — the interval spans 1 (more requests per level narrow it; "
                "the gain is predicted from the device's roofs, not measured against speculation off)"))
        return
    c, tps, k, lo, mid, hi, dec = losing[0]
    b_even = break_even_batch(tokens_per_step=tps.value, drafted_per_step=k, **roofs)
    one = spec_step(batch=1, tokens_per_step=tps.high, drafted_per_step=k, **roofs)
    ev: list[Evidence] = []
    for row in rows:
        rc, rt, rk, rlo, rmid, rhi, rdec = row
        ev.append(Evidence(f"tokens per verified step at concurrency {rc} (median, 95 % interval "
                           f"{rt.low:.2f}–{rt.high:.2f}, {rt.n} requests)", rt.value, "", src))
        if rdec is not None:
            ev.append(Evidence(f"per-stream decode at concurrency {rc} (median, 95 % interval "
                               f"{rdec.low:.1f}–{rdec.high:.1f})", rdec.value, "tok/s", "measured: batching, token arrival times"))
        ev.append(Evidence(f"speed with speculation ÷ without at concurrency {rc} (95 % interval "
                           f"{_x(rlo.gain)}–{_x(rhi.gain)}; verify pass {rmid.verify_binding}-bound)", rmid.gain, "×", theory))
    ev.append(Evidence(f"tokens drafted per verified step at concurrency {c}", k, "", src))
    if b_even is not None:
        ev.append(Evidence("break-even batch (speculation stops paying from)", b_even, "requests", theory))
    if mid.draft_bytes_per_step:
        ev.append(Evidence("draft model bytes per verified step", mid.draft_bytes_per_step / 1e9, "GB", theory))
    if one.gain < 1.0:  # it loses even for one stream: the step, not the batch, costs too much
        diag.findings.append(Finding(
            "speculation-step-too-costly", "problem",
            f"Speculation does not pay on this device even for one stream: a verified step of {k + 1:.1f} tokens"
            + (" is compute-bound" if one.verify_binding == "compute" else "")
            + (f"{' and' if one.verify_binding == 'compute' else ','} the draft model's {k:.1f} passes add "
               f"{1e3 * one.draft_s:.1f} ms to it" if one.draft_s > 0 else "")
            + f", more than its {tps.value:.2f} tokens per step give back — predicted {_x(one.gain)} the speed without "
            f"speculation at one stream, even at the upper end of the measured tokens-per-step interval.",
            ev, advice_for("spec_step_too_costly", diag.engine)))
        return
    diag.findings.append(Finding(
        "speculation-batch-too-large", "problem",
        f"At {c} concurrent streams the batch is too large for speculation: each verify pass checks {c} × "
        f"{k + 1:.1f} tokens"
        + (", which makes it compute-bound on this device" if mid.verify_binding == "compute" else "")
        + (f"{' and' if mid.verify_binding == 'compute' else ','} the draft model's {k:.1f} passes add "
           f"{1e3 * mid.draft_s:.1f} ms to each step" if mid.draft_s > 0 else "")
        + f", so a step costs more than its {tps.value:.2f} tokens per step give back — predicted {_x(mid.gain)} the "
        f"speed without speculation ({_x(lo.gain)}–{_x(hi.gain)} over the measured tokens-per-step interval)"
        + ("." if b_even is None else f"; it stops paying from about {b_even} concurrent streams."),
        ev, advice_for("spec_batch_too_large", diag.engine)))
