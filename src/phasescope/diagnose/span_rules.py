"""The server's own spans as evidence (``explain --otlp-listen``, issue 35 item 3).

Where an experiment's requests were joined to the server's spans, ``diag.spans[experiment]`` holds where their
TTFT went (:func:`phasescope.experiments.spans.experiment_attribution`): per TTFT band and over ``all`` of them,
the shares of queue, prefill and network-and-client, each Σ phase ÷ Σ TTFT with a bootstrap interval over
requests. The rules that infer a queue or a prefill cost from the client's clock read these as evidence,
labelled as the server's; and where the two disagree they say so with both figures rather than claim either:

* the queue rule (:mod:`~phasescope.diagnose.queue_rules`): the spans *say a queue* when the whole interval of the queue's share of all TTFT lies at or above
  :data:`~phasescope.diagnose.thresholds.QUEUE_DOMINATES`; *no queue* when it lies wholly below
  :data:`SPAN_QUEUE_NONE`; otherwise they say neither (the interval straddles: cannot tell), and only stand
  beside explain's own figures;
* the prompt-cost rule (:func:`phasescope.diagnose.rules.rule_prompt_cost`), whose requests go one at a time:
  where the spans *say a queue* there, the TTFT growth explain reads as prefill is not the prefill's alone, and
  the rule says so (:func:`prefill_disagreement`) instead of stating a prefill rate; the fixed overhead it finds
  outside prefill is split by the spans into queue and network-and-client (evidence).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from phasescope.diagnose.findings import Diagnosis, Evidence
from phasescope.diagnose.thresholds import QUEUE_DOMINATES

#: a queue share of TTFT whose whole interval lies below this is "no queue" by the spans
SPAN_QUEUE_NONE = 0.10

QUEUE, NO_QUEUE, CANNOT_TELL = "queue", "no queue", "cannot tell"


def attribution(diag: Diagnosis, experiment: str) -> dict[str, Any] | None:
    """The spans' attribution of ``experiment`` (None without spans for it)."""
    att = (diag.spans or {}).get(experiment)
    return att if isinstance(att, dict) and att.get("all") else None


def _pct(share: dict[str, Any] | None) -> str:
    if not share:
        return "?"
    v, (lo, hi) = share["value"], share["ci"]
    return (f"{v * 100:.0f} % ({lo * 100:.0f}–{hi * 100:.0f} %)" if share.get("n", 0) >= 2
            else f"{v * 100:.0f} % (1 request: no spread known)")


def queue_verdict(att: dict[str, Any] | None) -> str:
    """``queue`` / ``no queue`` by the spans' interval of the queue's share of all TTFT, else ``cannot tell``."""
    share = ((att or {}).get("all") or {}).get("shares", {}).get("queue")
    if not share or share.get("n", 0) < 2:
        return CANNOT_TELL
    lo, hi = share["ci"]
    if lo >= QUEUE_DOMINATES:
        return QUEUE
    if hi < SPAN_QUEUE_NONE:
        return NO_QUEUE
    return CANNOT_TELL


def spans_figure(att: dict[str, Any]) -> str:
    """"the queue at 71 % (65–78 %) of all TTFT over 12 requests, prefill 24 % (…), network and client 5 % (…)"."""
    a = att["all"]
    sh = a["shares"]
    return (f"the queue at {_pct(sh['queue'])} of all TTFT over {a['n']} requests, prefill {_pct(sh['prefill'])}, "
            f"network and client {_pct(sh['network_client'])}")


def _source(att: dict[str, Any], experiment: str) -> str:
    return (f"{experiment}: the server's own OTLP spans, {att.get('spans_joined', 0)} of "
            f"{att.get('spans_joined', 0) + att.get('spans_missing', 0)} requests joined")


def span_evidence(att: dict[str, Any] | None, experiment: str) -> list[Evidence]:
    """The spans' figures as evidence: where p99 TTFT went (the run-level sentence), and the queue's share of
    all TTFT with its interval."""
    if not att:
        return []
    out = []
    if att.get("sentence"):
        out.append(Evidence("where p99 TTFT went", att["sentence"], "", _source(att, experiment)))
    shares = (att.get("all") or {}).get("shares", {})
    for key, label in (("queue", "queue"), ("prefill", "prefill"), ("network_client", "network and client")):
        sh = shares.get(key)
        if sh and (key == "queue" or experiment != "queue"):  # the queue's own evidence: its share alone
            lo, hi = sh["ci"]
            out.append(Evidence(f"{label} share of all TTFT (Σ {label} ÷ Σ TTFT; 95 % interval "
                                f"{100 * lo:.0f}–{100 * hi:.0f} %)", 100 * sh["value"], "%", _source(att, experiment)))
    return out


def queue_disagreement(inferred: bool, explain_said: str, att: dict[str, Any] | None, experiment: str) -> str | None:
    """The "cannot tell" sentence when explain's own inference (``inferred``: a queue or none, ``explain_said``
    its figures) and the spans' verdict disagree; None when they do not (or the spans decide nothing)."""
    v = queue_verdict(att)
    if att is None or v == CANNOT_TELL or (v == QUEUE) == inferred:
        return None
    if inferred:
        return (f"explain and the server's spans disagree: explain inferred a queue in the {experiment} experiment ({explain_said}), but "
                f"the server's spans put {spans_figure(att)} — wholly below {SPAN_QUEUE_NONE * 100:.0f} %. Cannot tell which "
                f"holds: a wait the spans do not see (in front of the engine: a proxy, the API server's own backlog, "
                f"or a span clock that starts at admission) or an inference that misleads")
    return (f"explain and the server's spans disagree: explain found no queue in the {experiment} experiment ({explain_said}), but the "
            f"server's spans put {spans_figure(att)} — at or above {QUEUE_DOMINATES * 100:.0f} %. Cannot tell which holds: "
            f"a queue the client's clock and /metrics missed, or spans that count more than waiting as queue")


def prefill_disagreement(explain_said: str, att: dict[str, Any] | None, experiment: str = "prompt-scaling") -> str | None:
    """The "cannot tell" sentence when explain reads TTFT's growth as prefill (``explain_said``) but the spans put
    most of that TTFT in the queue (their interval at or above :data:`QUEUE_DOMINATES`); None otherwise."""
    if att is None or queue_verdict(att) != QUEUE:
        return None
    return (f"explain and the server's spans disagree: explain read the TTFT growth in {experiment} as prefill "
            f"({explain_said}), but the server's spans put {spans_figure(att)} — the queue at or above "
            f"{QUEUE_DOMINATES * 100:.0f} % though the requests went one at a time. Cannot tell the prefill rate: "
            f"something else held the requests (other traffic on the server?)")
