"""Simulated request records for the plan tests, laid out as one measured run would be."""

from __future__ import annotations

from phasescope.measure.records import RequestRecord


def on_one_clock(groups: list[list[RequestRecord]]) -> list[RequestRecord]:
    """Record groups, each from its own simulation (each starting at its own t = 0), one after another
    on one clock with 1 ms between them, as if one run had measured them in turn. Shifts every
    timestamp of the records in place and returns them concatenated."""
    out: list[RequestRecord] = []
    t = 0
    for g in groups:
        shift = t - min(r.t_start_ns for r in g)
        for r in g:
            r.t_start_ns += shift
            r.t_conn_ready_ns = r.t_start_ns
            r.t_headers_ns = r.t_start_ns
            r.t_done_ns += shift
            for e in r.events:
                e.t_ns += shift
        t = max(r.t_done_ns for r in g) + 1_000_000
        out += g
    return out
