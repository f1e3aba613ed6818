"""Where every millisecond of one request went: a waterfall from the client's own clock and the
server's own account of it: its span (``server_span``, joined from OTLP by :mod:`phasescope.apis.otlp`) where
there is one, else its per-response timings (issue 35, items 2–4).

Per request (:func:`request_waterfall`), on the client's monotonic clock, in integer nanoseconds so the
phases add up to the client's E2E (start → last token) *exactly*:

* ``connect_s`` — request start → connection ready (:func:`~phasescope.measure.derive.connect_s`; 0 on a
  pooled connection): the client's own share before a byte leaves;
* ``network_s`` — connection ready → response headers, *only* when the headers came back before the
  server's prefill could have begun (``t_headers ≤ first token − prefill``), and at most the run's fastest
  such round trip (:func:`network_estimate_ns`): llama-server answers the headers only once one of its HTTP
  worker threads took the request, so a busy server's headers come late and the excess is its wait
  (queue), not the network. Headers that came with the first token say nothing about the network: 0, and
  ``network_note``;
* ``prefill_s`` — the server's own prompt time (llama.cpp ``timings.prompt_ms``, Ollama
  ``prompt_eval_duration``: ``server.prefill_s``), split into ``cached_tokens`` (``cache_n``, served from
  the prefix cache, taking no prefill time) and ``computed_tokens`` (``prompt_n``);
* ``queue_s`` — **derived**: client TTFT − connect − network − prefill, the wait in the server before its
  prefill began. Never negative: where the server's prefill reads longer than what is left of TTFT (clocks
  of two processes), the prefill shown is cut to it and ``clamped`` is True;
* ``decode_s`` — first token → last token, as the client saw them (``server_decode_s`` beside it: the
  server's own ``predicted_ms``).

``network_client_s`` = connect + network, the share the server never saw. Without server timings
(an OpenAI-compatible server without spans) ``queue_s`` and ``prefill_s`` are None and
``server_s`` (TTFT − network and client) holds both; such a request counts in ``unattributed``.

With a span (``source: "span"``, not derived): queue and prefill are the server's
``queue_s``/``prefill_s``; network and client is the rest of the client's TTFT (connect inside it), and
``client_minus_server_ttft_s`` = client TTFT − the span's TTFT (the client's share as the server sees it).
A span that times the queue but no prefill (TGI: its ``prefill`` span is per batch,
:mod:`phasescope.apis.otlp_names`) gives the queue; prefill is then **derived**, the client's TTFT less connect,
the span's validation and its queue — the network inside it, so ``network_s`` is 0 — and ``derived`` is True.

Bounds beside each phase, where the caller knows the model and the device (:class:`Bounds`; from
:func:`phasescope.theory.ceilings.waterfall_bounds`): the prefill floor of the *computed* tokens and
the decode time at the batch-1 decode ceiling for the tokens after the first.

Run level (:func:`run_waterfall`): bands of TTFT — ``p50`` = requests with TTFT in [p50, p90), ``p90`` =
[p90, p99), ``p99`` = [p99, max] (an empty band takes the one request nearest its percentile). In each
band the phases are summed and the shares are **shares of sums** (Σ queue ÷ Σ TTFT over the band's
requests, never a median of per-request shares), each with a percentile-bootstrap interval over the
band's requests (:func:`phasescope.measure.interval.bootstrap_ratio_of_sums`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from phasescope.measure import derive
from phasescope.measure.records import RequestRecord

NS = 1_000_000_000
#: the TTFT bands of the run-level waterfall, with each band's upper edge (None: to the slowest)
BANDS: tuple[tuple[str, float, float | None], ...] = (("p50", 50.0, 90.0), ("p90", 90.0, 99.0),
                                                      ("p99", 99.0, None))
#: the TTFT phases a band's shares split TTFT into
TTFT_PHASES = ("queue", "prefill", "network_client")


@dataclass(frozen=True)
class Bounds:
    """The physical bounds beside the phases: ``prefill_floor_s(computed_tokens)`` and
    ``decode_ceiling_tok_s(context_tokens)`` (batch 1); either returns None when unknown."""

    prefill_floor_s: Callable[[int], float | None]
    decode_ceiling_tok_s: Callable[[int], float | None]


def keep_spans(summary: dict[str, Any], records: Sequence[RequestRecord], received: int, listen: str | None) -> None:
    """After ``--otlp-listen`` (probe, bench): the spans' count and address in ``summary["waterfall"]``, and each
    joined span by record id in ``summary["server_spans"]`` — the records were stored as they completed, before
    their spans came, so the run keeps the spans and :func:`attach_spans` puts each back on its record."""
    summary["waterfall"]["spans_received"] = received
    summary["waterfall"]["otlp_listen"] = listen
    summary["server_spans"] = {r.id: r.server_span for r in records if r.server_span}


def attach_spans(records: Sequence[RequestRecord], summary: dict[str, Any] | None) -> None:
    """Put each stored run's joined span (``summary["server_spans"]``, by record id: probe's and bench's
    ``--otlp-listen``) back on its record as ``server_span``, where the record has none."""
    spans = (summary or {}).get("server_spans")
    if not isinstance(spans, dict):
        return
    for r in records:
        sp = spans.get(r.id)
        if r.server_span is None and isinstance(sp, dict):
            r.server_span = sp


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _headers_ns(r: RequestRecord, first: int, pre: int | None) -> int | None:
    """Connection ready → headers, when the headers came before the server's prefill began; else None."""
    if r.t_headers_ns is None or r.t_conn_ready_ns is None:
        return None
    h = r.t_headers_ns - r.t_conn_ready_ns
    return h if 0 <= h and r.t_headers_ns <= first - (pre or 0) else None


def network_estimate_ns(records: Sequence[RequestRecord]) -> int | None:
    """The run's network round trip: the fastest headers' round trip of its successful requests (the
    others' excess is the server's wait for an HTTP worker); None when no request shows one."""
    best: int | None = None
    for r in records:
        first = derive.first_token_ns(r)
        if not r.ok or first is None:
            continue
        pre_s = _num((r.server or {}).get("prefill_s"))
        h = _headers_ns(r, first, int(round(pre_s * NS)) if pre_s is not None and pre_s >= 0 else None)
        if h is not None and (best is None or h < best):
            best = h
    return best


def request_waterfall(r: RequestRecord, bounds: Bounds | None = None, *,
                      network_ns: int | None = None) -> dict[str, Any] | None:
    """One request's waterfall (module docstring); None when it produced no token. ``network_ns``: the
    run's network round trip (:func:`network_estimate_ns`), the most of a request's headers' round trip
    counted as network (None: all of it)."""
    first = derive.first_token_ns(r)
    if first is None:
        return None
    last = derive.last_token_ns(r) or first
    start = r.t_start_ns
    ttft = first - start
    conn = max(0, min(ttft, (r.t_conn_ready_ns - start) if r.t_conn_ready_ns is not None else 0))
    span = r.server_span if isinstance(r.server_span, dict) else None
    if span is not None and _num(span.get("queue_s")) is not None:
        return _span_waterfall(r, span, bounds, first, last)
    srv = r.server or {}
    pre_s = _num(srv.get("prefill_s"))
    pre = int(round(pre_s * NS)) if pre_s is not None and pre_s >= 0 else None
    net = 0
    note = None
    h = _headers_ns(r, first, pre)
    if h is not None:
        # the headers' round trip holds the server's own wait for an HTTP worker too (llama-server answers
        # them only once a worker thread took the request): the run's fastest one is the network
        net = min(h, ttft - conn, h if network_ns is None else network_ns)
        if network_ns is not None and h > network_ns:
            note = "the headers' round trip beyond the run's fastest is the server's wait: counted as queue"
    elif r.t_headers_ns is not None and r.t_conn_ready_ns is not None:
        note = "headers came with the first token: the network is inside the server's share"
    else:
        note = "no header timestamp: the network is inside the server's share"
    rest = ttft - conn - net  # the server's share of TTFT, ≥ 0
    out: dict[str, Any] = {"id": r.id, "derived": True, "source": "timings" if pre is not None else "client",
                           "ttft_s": ttft / NS, "e2e_s": (last - start) / NS,
                           "connect_s": conn / NS, "network_s": net / NS, "network_client_s": (conn + net) / NS,
                           "network_note": note, "decode_s": (last - first) / NS,
                           "server_decode_s": _num(srv.get("decode_s"))}
    prompt_n = srv.get("prompt_n") if isinstance(srv.get("prompt_n"), int) else None
    cached = derive.cached_prompt_tokens(r)
    if prompt_n is None and r.prompt_tokens is not None:
        prompt_n = max(0, r.prompt_tokens - (cached or 0))
    out["cached_tokens"], out["computed_tokens"] = cached, prompt_n
    if pre is None:
        out.update(queue_s=None, prefill_s=None, server_s=rest / NS, clamped=False)
    else:
        shown = min(pre, rest)
        out.update(queue_s=(rest - shown) / NS, prefill_s=shown / NS, server_s=rest / NS,
                   server_prefill_s=pre_s, clamped=shown < pre)
    return _with_bounds(r, out, bounds)


def _span_waterfall(r: RequestRecord, span: dict[str, Any], bounds: Bounds | None, first: int,
                    last: int) -> dict[str, Any]:
    """The waterfall from the server's own span (``server_span``): queue and prefill as the server
    timed them, network and client = the rest of the client's TTFT (module docstring)."""
    start = r.t_start_ns
    ttft = first - start
    q = max(0, int(round(float(span["queue_s"]) * NS)))
    conn0 = max(0, min(ttft, (r.t_conn_ready_ns - start) if r.t_conn_ready_ns is not None else 0))
    derived = _num(span.get("prefill_s")) is None
    if derived:  # the queue but no prefill (TGI): prefill = TTFT − connect − validation − queue, the network inside
        v = max(0, int(round((_num(span.get("validation_s")) or 0.0) * NS)))
        shown_q = min(q, ttft - conn0)
        p = shown_p = max(0, ttft - conn0 - shown_q - v)
    else:
        p = max(0, int(round(float(span["prefill_s"]) * NS)))
        shown_p = min(p, ttft)
        shown_q = min(q, ttft - shown_p)
    nc = ttft - shown_p - shown_q
    conn = max(0, min(nc, conn0))
    srv_ttft = _num(span.get("ttft_s"))
    cached = derive.cached_prompt_tokens(r)
    computed = None if r.prompt_tokens is None else max(0, r.prompt_tokens - (cached or 0))
    out: dict[str, Any] = {"id": r.id, "derived": derived, "source": "span", "ttft_s": ttft / NS,
                           "e2e_s": (last - start) / NS, "connect_s": conn / NS, "network_s": (nc - conn) / NS,
                           "network_client_s": nc / NS,
                           "network_note": ("the span times no prefill: prefill is the client's TTFT less connect and "
                                            "the span's validation and queue, the network inside it" if derived else
                                            "the client's TTFT less the server's queue and prefill"),
                           "client_minus_server_ttft_s": (ttft / NS - srv_ttft) if srv_ttft is not None else None,
                           "queue_s": shown_q / NS, "prefill_s": shown_p / NS, "server_s": (shown_q + shown_p) / NS,
                           "server_prefill_s": None if derived else float(span["prefill_s"]),
                           "server_queue_s": float(span["queue_s"]), "engine": span.get("engine"),
                           "clamped": shown_p < p or shown_q < q, "decode_s": (last - first) / NS,
                           "server_decode_s": _num(span.get("decode_s")), "cached_tokens": cached,
                           "computed_tokens": computed}
    return _with_bounds(r, out, bounds)


def _with_bounds(r: RequestRecord, out: dict[str, Any], bounds: Bounds | None) -> dict[str, Any]:
    prompt_n = out.get("computed_tokens")
    out["prefill_floor_s"] = out["decode_floor_s"] = None
    if bounds is not None:
        if prompt_n:
            out["prefill_floor_s"] = _safe(bounds.prefill_floor_s, int(prompt_n))
        n_out = derive.output_tokens(r)
        ceil = _safe(bounds.decode_ceiling_tok_s, int(r.prompt_tokens or 0))
        if n_out and n_out > 1 and ceil:
            out["decode_floor_s"] = (n_out - 1) / ceil
    pf, df = out["prefill_floor_s"], out["decode_floor_s"]
    out["prefill_vs_floor"] = (out["prefill_s"] / pf) if pf and out["prefill_s"] is not None else None
    out["decode_vs_floor"] = (out["decode_s"] / df) if df else None
    return out


def _safe(fn: Callable[[int], float | None], n: int) -> float | None:
    try:
        v = fn(n)
    except (ArithmeticError, ValueError, TypeError):
        return None
    return float(v) if v else None


def _band_members(rows: list[dict[str, Any]], lo_q: float, hi_q: float | None) -> list[dict[str, Any]]:
    import numpy as np

    t = np.asarray([w["ttft_s"] for w in rows], dtype=float)
    lo = float(np.percentile(t, lo_q))
    hi = float(np.percentile(t, hi_q)) if hi_q is not None else None
    sel = [w for w in rows if w["ttft_s"] >= lo and (hi is None or w["ttft_s"] < hi)]
    if not sel:
        sel = [min(rows, key=lambda w: abs(w["ttft_s"] - lo))]
    return sel


def band_attribution(rows: Sequence[dict[str, Any]], *, seed: int = 0) -> dict[str, Any]:
    """Sums and shares of sums of the phases over ``rows`` (request waterfalls with server timings)."""
    from phasescope.measure.interval import bootstrap_ratio_of_sums

    n = len(rows)
    sums = {p: sum(float(w[f"{p}_s"]) for w in rows) for p in (*TTFT_PHASES, "decode", "ttft")}
    out: dict[str, Any] = {"n": n, "ttft_s": sums["ttft"] / n}
    for p in (*TTFT_PHASES, "decode"):
        out[f"{p}_s"] = sums[p] / n  # the band's mean: Σ phase ÷ n
    shares: dict[str, Any] = {}
    ttft = [float(w["ttft_s"]) for w in rows]
    for p in TTFT_PHASES:
        iv = bootstrap_ratio_of_sums([float(w[f"{p}_s"]) for w in rows], ttft, seed=seed)
        shares[p] = None if iv is None else {"value": iv.value, "ci": [iv.low, iv.high], "n": iv.n}
    out["shares"] = shares
    with_floor = [w for w in rows if w.get("prefill_floor_s") and w.get("prefill_s") is not None]
    out["prefill_vs_floor"] = (sum(w["prefill_s"] for w in with_floor) / sum(w["prefill_floor_s"] for w in with_floor)
                               if with_floor else None)
    with_dfloor = [w for w in rows if w.get("decode_floor_s")]
    out["decode_vs_floor"] = (sum(w["decode_s"] for w in with_dfloor) / sum(w["decode_floor_s"] for w in with_dfloor)
                              if with_dfloor else None)
    return out


def run_waterfall(records: Sequence[RequestRecord], bounds: Bounds | None = None, *, seed: int = 0) -> dict[str, Any]:
    """The ``waterfall`` key of probe/bench ``--json`` (module docstring): per TTFT band the mean
    ``queue_s``, ``prefill_s``, ``decode_s``, ``network_client_s`` and the shares of TTFT with intervals;
    ``spans_joined`` (successful requests with a server span), ``spans_missing`` (those without one),
    ``unattributed`` (with neither a span nor the server's timings), ``derived`` (True when some queue — or, from
    a span that times no prefill, some prefill — is TTFT less what was measured), and ``sentence``."""
    net = network_estimate_ns(records)
    ws = [w for w in (request_waterfall(r, bounds, network_ns=net) for r in records if r.ok) if w is not None]
    timed = [w for w in ws if w["prefill_s"] is not None]
    joined = sum(1 for w in ws if w["source"] == "span")
    prefill_derived = any(w["source"] == "span" and w["derived"] for w in timed)
    out: dict[str, Any] = {"derived": joined < len(timed) or prefill_derived, "source": "span" if joined and joined == len(timed) else
                           ("span+timings" if joined else "timings"), "spans_joined": joined,
                           "spans_missing": len(ws) - joined, "unattributed": len(ws) - len(timed),
                           "requests": len(timed), "bands": {}}
    if not timed:
        out["sentence"] = None
        out["reason"] = ("no request carried the server's own timings (llama.cpp `timings`, Ollama durations) or a span"
                         if ws else "no successful request")
        return out
    for name, lo, hi in BANDS:
        out["bands"][name] = band_attribution(_band_members(timed, lo, hi), seed=seed)
    slow = sorted(timed, key=lambda w: w["ttft_s"], reverse=True)[:5]
    out["slowest"] = slow
    out["sentence"] = attribution_sentence(out["bands"]["p99"], "p99", derived=joined < len(timed),
                                           prefill_derived=prefill_derived)
    return out


def _pct(share: dict[str, Any] | None) -> str:
    if not share:
        return "?"
    v, (lo, hi) = share["value"], share["ci"]
    if share.get("n", 0) < 2:
        return f"{v * 100:.0f} %"
    return f"{v * 100:.0f} % ({lo * 100:.0f}–{hi * 100:.0f} %)"


def attribution_sentence(band: dict[str, Any], name: str = "p99", *, derived: bool = True,
                         prefill_derived: bool = False) -> str:
    """"Of p99 TTFT, 71 % (65–78 %) was queue, 24 % prefill (1.9× its floor), 5 % network and client"."""
    sh = band["shares"]
    floor = band.get("prefill_vs_floor")
    pre = f"{_pct(sh['prefill'])} prefill" + (f" ({floor:.1f}× its floor)" if floor else "")
    return (f"Of {name} TTFT ({band['n']} request{'s' if band['n'] != 1 else ''}, mean {band['ttft_s'] * 1e3:,.1f} ms), "
            f"{_pct(sh['queue'])} was queue, {pre}, {_pct(sh['network_client'])} network and client "
            + ("(queue derived: TTFT less the server's prompt time and the network)" if derived
               else "(queue from the server's spans; prefill derived: TTFT less that queue, the network inside it)"
               if prefill_derived else "(queue and prefill from the server's spans)"))


def waterfall_lines(w: dict[str, Any]) -> list[str]:
    """One request's waterfall as console lines (``phasescope show RUN --request ID``)."""
    def ms(v: Any) -> str:
        return "—" if v is None else f"{float(v) * 1e3:,.2f} ms"

    lines = [f"request {w['id']}: TTFT {ms(w['ttft_s'])}, E2E {ms(w['e2e_s'])} "
             f"({ {'timings': 'derived from the server timings', 'span': 'from the server span'}.get(w['source'], 'client only: no server timings')})"]
    rows = [("connect", w["connect_s"], ""), ("network", w["network_s"], w.get("network_note") or "")]
    if w["prefill_s"] is None:
        rows.append(("queue + prefill", w["server_s"], "no server timings: not separable"))
    else:
        span = w["source"] == "span"
        rows.append(("queue (derived)", w["queue_s"], "TTFT − connect − network − prefill") if w["derived"] and not span
                    else ("queue", w["queue_s"], "the server span's time in queue"))
        tok = f"{w['computed_tokens']} computed + {w['cached_tokens'] or 0} cached tokens" \
            if w.get("computed_tokens") is not None else ""
        fl = f"; floor {ms(w['prefill_floor_s'])} ({w['prefill_vs_floor']:.1f}×)" if w.get("prefill_vs_floor") else ""
        cl = "; cut to what TTFT leaves" if w.get("clamped") else ""
        rows.append(("prefill (derived)" if w["derived"] and span else "prefill", w["prefill_s"],
                     ("TTFT − connect − the span's validation and queue; " if w["derived"] and span else "") + tok + fl + cl))
    dfl = f"at the decode ceiling {ms(w['decode_floor_s'])} ({w['decode_vs_floor']:.1f}×)" if w.get("decode_vs_floor") else ""
    srv = f"server {ms(w['server_decode_s'])}" if w.get("server_decode_s") is not None else ""
    rows.append(("decode", w["decode_s"], "; ".join(x for x in (srv, dfl) if x)))
    e2e = w["e2e_s"] or 0.0
    for name, v, why in rows:
        share = f"{(v or 0) / e2e * 100:5.1f} %" if e2e > 0 else "    —"
        lines.append(f"  {name:<16} {ms(v):>13}  {share}  {why}".rstrip())
    return lines
