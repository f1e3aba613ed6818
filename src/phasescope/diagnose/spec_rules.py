"""When speculative decoding pays and when it does not (issue 33): rule ``speculation``.

Reads the requests' own draft counts (llama.cpp's ``timings.draft_n`` / ``draft_n_accepted``, via
:func:`phasescope.measure.derive.spec_decode`): each request's acceptance rate is one sample, and the claim rests on
their median's 95 % interval against :data:`~phasescope.diagnose.thresholds.SPEC_ACCEPT_LOW` — below it entirely:
``speculation-low-acceptance`` with the engine's flags; above it entirely: nothing to say; across it, or fewer than
:data:`~phasescope.diagnose.thresholds.SPEC_MIN_REQUESTS` requests with counts: "cannot tell". Requests whose
speculation is only inferred from the arrival pattern carry no drafted count, so they decide nothing here.

Not built: "the batch is too large for speculation" needs the same load with speculation off to compare against;
no experiment measures that pair, so the rule claims nothing about concurrency; its advice names the ``tune`` run
that measures it (``--param spec=none,ngram`` under a bench load).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.diagnose.findings import Diagnosis, Evidence, Finding, Undecided
from phasescope.diagnose.knobs import advice_for
from phasescope.diagnose.thresholds import SPEC_ACCEPT_LOW, SPEC_MIN_REQUESTS
from phasescope.measure.derive import spec_decode, spec_decode_run
from phasescope.measure.interval import median_interval


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
