"""Console tables for ``bench``'s scale-out sections: per-endpoint breakdown and Ray actors (print only)."""

from __future__ import annotations

import math
from typing import Any

from phasescope.cli._common import console


def _f(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.{nd}f}"
    return str(v)


def _print_endpoint_server_metrics(eps: list[dict[str, Any]]) -> None:
    """Each endpoint's own /metrics summary (``endpoints[i].server_metrics``), one row per endpoint;
    why an endpoint has none is printed under the table."""
    from rich.table import Table

    t = Table(title="per endpoint: server /metrics", box=None, pad_edge=False)
    for c in ("endpoint", "/metrics", "max run", "max wait", "KV peak", "preempt", "gen tok", "srv TTFT p50",
              "cli-srv TTFT"):
        t.add_column(c, justify="left" if c in ("endpoint", "/metrics") else "right", no_wrap=c == "endpoint")
    why = []
    for e in eps:
        sm = e.get("server_metrics") or {}
        if not sm.get("available"):
            t.add_row(str(e.get("endpoint")), "none", *["-"] * 7)
            why.append(f"  no /metrics from {e.get('endpoint')}: {sm.get('reason') or 'not scraped'}")
            continue
        ss = sm.get("summary") or {}
        cmp_ = e.get("ttft_client_vs_server") or {}
        t.add_row(str(e.get("endpoint")), str(sm.get("engine")), _f(ss.get("max_running"), 0),
                  _f(ss.get("max_waiting"), 0), _f(ss.get("kv_usage_peak"), 3), _f(ss.get("preemptions"), 0),
                  _f(ss.get("generation_tokens"), 0), _f(ss.get("server_ttft_p50_ms")),
                  _f(cmp_.get("client_minus_server_mean_ms")))
    console.print(t)
    for w in why:
        console.print(w, highlight=False, soft_wrap=True)


def print_scale_out(s: dict[str, Any]) -> None:
    """The ``endpoints`` and ``ray`` sections of a bench summary, when present."""
    from rich.table import Table

    eps = s.get("endpoints") or []
    if eps:
        t = Table(title="per endpoint", box=None, pad_edge=False)
        for c in ("endpoint", "share", "ok", "failed", "req/s", "out tok/s", "p50 TTFT ms", "p99 TTFT ms",
                  "p50 ITL ms", "p99 ITL ms"):
            t.add_column(c, justify="left" if c == "endpoint" else "right")
        for e in eps:
            share = e.get("share")
            t.add_row(str(e.get("endpoint")), "-" if share is None else f"{100 * share:.0f}%", _f(e.get("completed")),
                      _f(e.get("failed")), _f(e.get("request_throughput"), 2), _f(e.get("output_throughput")),
                      _f(e.get("median_ttft_ms")), _f(e.get("p99_ttft_ms")), _f(e.get("median_itl_ms"), 2),
                      _f(e.get("p99_itl_ms"), 2))
        console.print(t)
        if any(e.get("server_metrics") for e in eps):
            _print_endpoint_server_metrics(eps)
    ray = s.get("ray")
    if ray:
        t = Table(title=f"Ray actors ({ray.get('cluster')}; clock alignment ± "
                        f"{_f(ray.get('clock_alignment_uncertainty_ms'), 3)} ms)", box=None, pad_edge=False)
        for c in ("actor", "node", "status", "records", "lost", "loop lag p99 ms", "CPU %", "send lag p99 ms",
                  "offset ms"):
            t.add_column(c, justify="left" if c in ("actor", "node", "status") else "right")
        for a in ray.get("actors") or []:
            h = a.get("health") or {}
            off = (a.get("clock") or {}).get("offset_ns")
            t.add_row(str(a.get("name")), f"{a.get('node_ip')} pid {a.get('pid')}", str(a.get("status")),
                      _f(a.get("records_returned")), _f(a.get("lost")), _f(h.get("loop_lag_ms_p99"), 2),
                      _f(h.get("cpu_percent"), 0), _f(h.get("send_lag_ms_p99"), 2),
                      "-" if off is None else f"{off / 1e6:.3f}")
        console.print(t)
