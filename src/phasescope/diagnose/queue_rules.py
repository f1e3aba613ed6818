"""The queueing rule (experiment ``queue``, else batching's server-timed levels): did requests wait
before their prefill, was it this experiment's own doing (more requests than the server runs at once),
and did the KV pool fill while they waited? Kept apart from :mod:`phasescope.diagnose.rules` as
:mod:`~phasescope.diagnose.conversation_rules` is; :data:`phasescope.diagnose.rules.RULES` runs it.

The share of TTFT spent waiting is always Σ waiting ÷ Σ TTFT over the requests (time-weighted), never
the median of per-request shares.

With the server's spans (``explain --otlp-listen``) each finding carries the spans' own account as evidence
(:mod:`phasescope.diagnose.span_rules`), and where the spans and explain's inference disagree — a queue
inferred that the spans put near 0, or none inferred where the spans put most of TTFT in the queue — the
rule says "cannot tell" with both figures instead of a finding; where explain cannot tell and the spans
can, the spans' figure is the finding.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from phasescope.diagnose.findings import Diagnosis, Evidence, Finding, Undecided
from phasescope.diagnose.knobs import advice_for, tailored
from phasescope.diagnose.span_rules import (QUEUE, attribution, queue_disagreement, queue_verdict, span_evidence,
                                            spans_figure)
from phasescope.diagnose.thresholds import QUEUE_DOMINATES

if TYPE_CHECKING:
    from phasescope.diagnose.rules import Ceilings


def _capacity(q: Any) -> tuple[int | None, str]:
    """How many requests the server runs at once: its reported slots, else the most /metrics saw running."""
    if getattr(q, "slots", None):
        return int(q.slots), q.slots_source or "the server's slots"
    if q.running_max:
        return int(q.running_max), "the most requests /metrics showed running at once"
    return None, ""


def _queue_share(q: Any) -> float | None:
    """The share of all TTFT spent waiting (Σ waiting ÷ Σ TTFT), never the median of per-request shares:
    two requests that waited 37 s beside four that waited 15 ms spent 92 % of their TTFT waiting."""
    return getattr(q, "ttft_queue_share_total", None)


def rule_queue(r: dict[str, Any], diag: Diagnosis, ceil: Ceilings | None) -> None:
    q, b = r.get("queue"), r.get("batching")
    found = False
    qa, ba = attribution(diag, "queue"), attribution(diag, "batching")
    if q is not None and q.queueing and (why := queue_disagreement(True, q.reason, qa, "queue")) is not None:
        diag.undecided.append(Undecided("ttft-queueing", why))
        found = True
    elif q is not None and q.queueing:
        cap, cap_src = _capacity(q)
        ev = []
        if q.metrics_available:
            ev.append(Evidence("requests waiting (max)", q.waiting_max, "", f"/metrics {q.metrics_source or ''}, {len(q.samples)} samples".strip()))
            ev.append(Evidence("share of samples with a queue", 100 * (q.waiting_share or 0), "%", "/metrics"))
        if q.running_max is not None:
            ev.append(Evidence("requests running at once (max)", q.running_max, "", "/metrics"))
        qs = _queue_share(q)
        if qs is not None:
            n = len(getattr(q, "ttft_queue_shares", None) or []) or "all"
            ev.append(Evidence("share of TTFT not spent in prefill (Σ waiting ÷ Σ TTFT)", 100 * qs, "%",
                               f"queue: client TTFT − server-timed prefill, summed over {n} requests"))
            if q.ttft_queue_share is not None and getattr(q, "ttft_queue_shares", None):
                sh = q.ttft_queue_shares
                ev.append(Evidence("per-request share of TTFT not in prefill (median, min–max)",
                                   f"{q.ttft_queue_share:.0%} ({min(sh):.0%}–{max(sh):.0%})", "",
                                   f"queue: {len(sh)} requests"))
        ev.append(Evidence(f"TTFT p99 at concurrency {q.concurrency}", q.ttft_p99_s, "s", "queue: client TTFT"))
        if q.kv_usage_max is not None:
            ev.append(Evidence("KV-cache usage (max)", 100 * q.kv_usage_max, "%", "/metrics"))
        ev += span_evidence(qa, "queue")
        waited = []
        if q.waiting_share is not None and (q.waiting_max or 0) > 0:
            waited.append(f"up to {q.waiting_max:.0f} waited in /metrics ({q.waiting_share:.0%} of samples)")
        if qs is not None:
            waited.append(f"waiting was {qs:.0%} of TTFT")
        costly = (qs or 0) >= QUEUE_DOMINATES or (qs is None and (q.waiting_share or 0) >= QUEUE_DOMINATES)
        self_caused = cap is not None and q.concurrency is not None and q.concurrency > cap
        if self_caused:
            knee = b.knee_concurrency if b is not None else None
            lv_cap = next((x for x in (b.levels if b is not None else []) if x.concurrency == cap), None)
            lv_1 = next((x for x in (b.levels if b is not None else []) if x.concurrency == 1), None)
            gain = (lv_cap.output_tok_s / lv_1.output_tok_s) if lv_cap and lv_1 and lv_cap.output_tok_s and \
                lv_1.output_tok_s and cap > 1 else None
            # a limit worth raising: batching still paid right up to it, and it is small
            limited = (knee is not None and knee == cap and gain is not None and gain >= 1.15 ** math.log2(cap)
                       and cap < q.concurrency)
            cause = (f"The server runs at most {cap} requests at once ({cap_src}); this experiment sent {q.concurrency} "
                     f"on purpose, so the others waited: {'; '.join(waited) or q.reason}.")
            if limited:
                cause += (f" Batching still gave {gain:.1f}× the single-stream throughput at {cap}, the knee is at that "
                          f"limit: more concurrent requests per server would add throughput.")
                ev.append(Evidence(f"throughput gain at concurrency {cap} over 1", gain, "×", "batching"))
            diag.findings.append(Finding(
                "ttft-queueing", "problem" if limited else "info", cause, ev,
                tailored("queueing", diag.engine, diag.settings) if limited else []))
        else:
            cause = (f"At {q.concurrency} concurrent requests{f' (the server runs {cap} at once)' if cap else ''}, "
                     f"requests waited before their prefill started: {'; '.join(waited) or q.reason}.")
            diag.findings.append(Finding("ttft-queueing", "problem" if costly else "info", cause, ev,
                                         tailored("queueing", diag.engine, diag.settings)))
        found = True
        if q.kv_pool_full and (q.waiting_max or 0) > 0:
            diag.findings.append(Finding(
                "kv-pool-full", "problem",
                "The KV-cache pool was full while requests waited: the pool, not compute, limits concurrency.",
                [Evidence("KV-cache usage (max)", 100 * (q.kv_usage_max or 0), "%", "/metrics"),
                 Evidence("requests waiting (max)", q.waiting_max, "", "/metrics")],
                advice_for("kv_pool_full", diag.engine)))
    elif b is not None:
        top = next((x for x in reversed(b.levels) if getattr(x, "queue_share_total", None) is not None), None)
        # waiting is what lies outside prefill beyond the unloaded overhead (a slow network is no queue);
        # a result saved before that share existed is judged on the whole time outside prefill
        wait = None if top is None else (top.wait_share_total if getattr(top, "wait_share_total", None) is not None
                                         else top.queue_share_total)
        said = (f"{wait:.0%} of TTFT at {top.concurrency} concurrent requests waiting beyond the unloaded overhead"
                if top is not None and wait is not None else "")
        if top is not None and wait is not None and (why := queue_disagreement(wait >= QUEUE_DOMINATES, said, ba,
                                                                               "batching")) is not None:
            diag.undecided.append(Undecided("ttft-queueing", why))
            found = True
        elif top is not None and wait is not None and wait >= QUEUE_DOMINATES:
            slots = b.max_concurrency_bound if b.bound_source and "slots" in b.bound_source else None
            mine = slots is not None and top.concurrency > slots
            cause = (f"At {top.concurrency} concurrent requests most of TTFT is waiting, not prefill"
                     + (f" — more than the server's {slots} slots, as this experiment sent on purpose." if mine else "."))
            diag.findings.append(Finding(
                "ttft-queueing", "info" if mine else "problem", cause,
                [Evidence(f"median TTFT at concurrency {top.concurrency}", top.ttft_p50_s, "s", "batching: client TTFT"),
                 Evidence("median TTFT − server-timed prefill", top.queue_p50_s, "s", "batching: client TTFT − server prompt time"),
                 Evidence("share of TTFT not spent in prefill (Σ waiting ÷ Σ TTFT)", 100 * top.queue_share_total, "%",
                          f"batching: concurrency {top.concurrency}, {top.n} requests")]
                + ([Evidence("share of TTFT spent waiting beyond the unloaded overhead", 100 * wait, "%",
                             f"batching: minus the {b.unloaded_overhead_s * 1e3:.0f} ms outside prefill at concurrency "
                             f"{b.levels[0].concurrency}")]
                   if getattr(b, "unloaded_overhead_s", None) else []) + span_evidence(ba, "batching"),
                [] if mine else tailored("queueing", diag.engine, diag.settings)))
            found = True
    if not found and q is not None and q.queueing is False:
        why = queue_disagreement(False, q.reason, qa, "queue")
        if why is not None:
            diag.undecided.append(Undecided("ttft-queueing", why))
    elif not found and q is not None and q.queueing is None:
        if queue_verdict(qa) == QUEUE and qa is not None:  # explain cannot tell; the server's own spans can
            diag.findings.append(Finding(
                "ttft-queueing", "info",
                f"At {q.concurrency} concurrent requests, the server's own spans put {spans_figure(qa)}: requests "
                f"waited before their prefill (explain's own channels could not tell: {q.reason or 'no queue signal'}).",
                span_evidence(qa, "queue"), tailored("queueing", diag.engine, diag.settings)))
        else:
            diag.undecided.append(Undecided("ttft-queueing", q.reason or "no queue signal"))
