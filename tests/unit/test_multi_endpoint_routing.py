"""Routing policies and the per-endpoint breakdown, on synthetic records (no network)."""

from __future__ import annotations

import pickle

import pytest

from phasescope.apis.base import Target
from phasescope.errors import InputError
from phasescope.load.routing import MultiTarget, Router, endpoint_breakdown, make_multi_target, send_ref_for
from phasescope.load.summary import summarize
from phasescope.measure.records import Event, RequestRecord

EPS = [Target(base_url=f"http://127.0.0.1:{p}", api="openai", model="m") for p in (8001, 8002, 8003)]


def _multi(route: str, seed: int = 0) -> MultiTarget:
    t = make_multi_target(EPS, route, seed)
    assert isinstance(t, MultiTarget)
    return t


def test_one_endpoint_stays_a_plain_target_and_duplicates_are_refused() -> None:
    assert make_multi_target(EPS[:1]) is EPS[0] and send_ref_for(EPS[0]) is None
    with pytest.raises(InputError, match="given twice"):
        make_multi_target([EPS[0], Target(base_url="http://127.0.0.1:8001/", api="openai")])
    with pytest.raises(InputError, match="unknown --route"):
        make_multi_target(EPS, "fastest")


def test_multi_target_pickles_for_workers_and_actors() -> None:
    t = _multi("random", 3)
    t2 = pickle.loads(pickle.dumps(t))
    assert [e.base_url for e in t2.endpoints] == [e.base_url for e in EPS] and t2.route == "random"
    assert t2.base_url == EPS[0].base_url and send_ref_for(t2) == "phasescope.load.routing:send"
    assert t.display_url == ", ".join(e.display_url for e in EPS)


def test_round_robin_and_random_depend_only_on_the_index() -> None:
    rr = Router(_multi("round-robin"))
    assert [rr.pick(i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    a, b = Router(_multi("random", 7)), Router(_multi("random", 7))
    picks = [a.pick(i) for i in range(300)]
    assert picks == [b.pick(i) for i in reversed(range(300))][::-1]  # order of calls does not matter
    assert {0, 1, 2} == set(picks) and all(60 < picks.count(j) < 140 for j in range(3))
    assert picks != [Router(_multi("random", 8)).pick(i) for i in range(300)]  # the seed does


def test_least_outstanding_picks_the_emptiest_and_rotates_ties() -> None:
    r = Router(_multi("least-outstanding"))
    r.outstanding = [3, 1, 2]
    assert r.pick(0) == 1
    r.outstanding = [0, 0, 0]
    assert {r.pick(None) for _ in range(6)} == {0, 1, 2}


def _rec(i: int, ep: str, ttft_ms: float) -> RequestRecord:
    t0 = 1_000_000_000 + i * 10_000_000
    ev = [Event(t0 + int(ttft_ms * 1e6) + k * 2_000_000, n_tokens=1) for k in range(4)]
    return RequestRecord(id=f"r{i}", api="openai", target=ep, t_start_ns=t0, t_scheduled_ns=t0, events=ev,
                         t_done_ns=ev[-1].t_ns, ok=True, output_tokens=4, output_tokens_source="usage",
                         tags={"index": i, "endpoint": ep}, wall_start_ns=t0)


def test_breakdown_is_summarize_per_endpoint_in_target_order() -> None:
    t = _multi("round-robin")
    recs = [_rec(i, EPS[i % 2].display_url, 10.0 * (1 + i % 2)) for i in range(10)]
    recs.append(RequestRecord(id="w", api="openai", target=EPS[2].display_url, ok=True,
                              tags={"warmup": True, "endpoint": EPS[2].display_url}))
    out = endpoint_breakdown(recs, t)
    assert [e["endpoint"] for e in out] == [e.display_url for e in EPS]
    assert [e["share"] for e in out] == [0.5, 0.5, 0.0]  # warm-ups are not measured requests
    assert out[0]["median_ttft_ms"] == pytest.approx(10.0) and out[1]["median_ttft_ms"] == pytest.approx(20.0)
    assert out[2]["completed"] == 0 and out[2]["mean_ttft_ms"] is None
    want = summarize([r for r in recs if r.target == EPS[1].display_url])
    assert {k: out[1][k] for k in want} == want
    assert endpoint_breakdown(recs, EPS[0]) == []
