"""``explain --otlp-listen`` (issue 35): the server's own spans, joined to explain's records, and where each
experiment's time to first token went by them.

The receiver (:mod:`phasescope.apis.otlp`) runs for the whole suite; every request already carries the
``traceparent`` it continues (:mod:`phasescope.apis._http`). After the suite, :func:`explain_spans` sets
per experiment the run-level attribution of :func:`phasescope.measure.waterfall.run_waterfall` over that
experiment's successful requests (bands p50/p90/p99 of TTFT, shares with bootstrap intervals), plus
``all``: the same shares over every such request with a span — Σ queue ÷ Σ TTFT, the definition of the
queue experiment's own ``ttft_queue_share_total``, so the two can be set side by side
(:mod:`phasescope.diagnose.span_rules`).
"""

from __future__ import annotations

from typing import Any, Sequence

from phasescope.measure.records import RequestRecord


def _records_of(records: Sequence[RequestRecord], name: str) -> list[RequestRecord]:
    """The successful requests of experiment ``name``: its ``measure`` phase where it tags one (the queue's
    load), else all of them but the warm-up."""
    mine = [r for r in records if r.ok and (r.tags or {}).get("experiment") == name]
    measured = [r for r in mine if (r.tags or {}).get("phase") == "measure"]
    return measured or [r for r in mine if (r.tags or {}).get("phase") != "warmup"]


def experiment_attribution(records: Sequence[RequestRecord], bounds: Any = None) -> dict[str, Any] | None:
    """:func:`~phasescope.measure.waterfall.run_waterfall` over ``records`` with ``all`` added (shares over every
    request with a span), or None when none of them has a span."""
    from phasescope.measure.waterfall import band_attribution, network_estimate_ns, request_waterfall, run_waterfall

    if not any(isinstance(r.server_span, dict) for r in records):
        return None
    wf = run_waterfall(records, bounds)
    net = network_estimate_ns(records)
    rows = [w for w in (request_waterfall(r, bounds, network_ns=net) for r in records) if w is not None
            and w["source"] == "span"]
    wf["all"] = band_attribution(rows) if rows else None
    return wf


def explain_spans(records: Sequence[RequestRecord], names: Sequence[str], received: int, listen: str | None,
                  bounds: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the report's ``waterfall``, its ``server_spans``): spans received, joined and missing over the successful
    requests, the attribution per experiment in ``names`` that has spans (``experiments``), and each joined
    span by record id."""
    ok = [r for r in records if r.ok]
    joined = sum(1 for r in ok if isinstance(r.server_span, dict))
    per: dict[str, Any] = {}
    for name in names:
        att = experiment_attribution(_records_of(records, name), bounds)
        if att is not None:
            per[name] = att
    doc = {"otlp_listen": listen, "spans_received": received, "spans_joined": joined,
           "spans_missing": len(ok) - joined, "experiments": per}
    return doc, {r.id: r.server_span for r in ok if r.server_span}
