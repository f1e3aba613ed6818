"""measure/aggregate: one rule for which records count, one statistic, and every output that
aggregates records (probe's summary, bench's summary, show's table, the report's data, compare)
printing the same number for the same records — as properties over generated runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phasescope.load.summary import summarize  # noqa: E402
from phasescope.measure import aggregate as A  # noqa: E402
from phasescope.measure import derive as D  # noqa: E402
from phasescope.measure.records import Event, RequestRecord  # noqa: E402
from phasescope.probing.summary import size_summary  # noqa: E402

NS = 1_000_000_000
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def record(i: int, t0_ns: int, ttft_ms: float, gaps_ms: list[float], prompt: int, *, tags: dict | None = None,
           ok: bool = True) -> RequestRecord:
    first = t0_ns + int(ttft_ms * 1e6)
    ts = [first]
    for g in gaps_ms:
        ts.append(ts[-1] + int(g * 1e6))
    return RequestRecord(
        id=f"r{i}", api="openai", target="http://127.0.0.1:9", model="m", prompt_tokens_requested=prompt,
        max_tokens=len(ts), tags=dict(tags or {}), wall_start_ns=1_700_000_000 * NS + t0_ns, t_start_ns=t0_ns,
        t_conn_ready_ns=t0_ns + 1000, events=[Event(t, "content", 1, 3) for t in ts] if ok else [],
        t_done_ns=ts[-1] + 1000, prompt_tokens=prompt, prompt_tokens_source="usage",
        output_tokens=len(ts) if ok else None, output_tokens_source="usage", ok=ok,
        error_kind=None if ok else "http", error_message=None if ok else "boom")


req = st.tuples(st.floats(1, 2000), st.lists(st.floats(0.5, 80), min_size=0, max_size=12), st.integers(1, 8192))


@st.composite
def runs(draw: st.DrawFn, min_size: int = 1) -> list[RequestRecord]:
    """One probe-like group: requests one after another, some failed."""
    specs = draw(st.lists(req, min_size=min_size, max_size=9))
    fails = draw(st.lists(st.booleans(), min_size=len(specs), max_size=len(specs)))
    out, t = [], 10 * NS
    for i, ((ttft, gaps, prompt), fail) in enumerate(zip(specs, fails)):
        r = record(i, t, ttft, gaps, prompt, tags={"prompt_tokens_target": 64}, ok=not (fail and i > 0))
        out.append(r)
        t = (r.t_done_ns or t) + NS // 100
    return out


@st.composite
def warmups(draw: st.DrawFn) -> list[RequestRecord]:
    specs = draw(st.lists(req, min_size=1, max_size=3))
    how = draw(st.lists(st.sampled_from([{"warmup": True}, {"phase": "warmup"}]), min_size=len(specs), max_size=len(specs)))
    return [record(100 + i, (1 + i) * NS, ttft, gaps, prompt, tags={**tag, "prompt_tokens_target": 64})
            for i, ((ttft, gaps, prompt), tag) in enumerate(zip(specs, how))]


def same(a: object, b: object) -> bool:
    """Equal to the last bit (None equal to None)."""
    return a == b


def test_is_measured_is_the_one_warmup_rule() -> None:
    r = record(0, 0, 10, [5], 16)
    assert A.is_measured(r)
    for tags in ({"warmup": True}, {"phase": "warmup"}, {"warmup": 1, "phase": "measure"}):
        r.tags = tags
        assert not A.is_measured(r)
    r.tags = {"warmup": False, "phase": "measure"}
    assert A.is_measured(r)
    # the run store counts warm-ups by the same rule
    from phasescope.store.recording import is_warmup as _is_warmup

    for tags in ({"warmup": True}, {"phase": "warmup"}, {"phase": "measure"}, {}):
        r.tags = tags
        assert _is_warmup(r) is (not A.is_measured(r))


@SETTINGS
@given(runs(), st.randoms(use_true_random=False))
def test_aggregates_do_not_depend_on_record_order(recs: list[RequestRecord], rnd) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(recs)
    rnd.shuffle(shuffled)
    assert A.point_summary(shuffled) == A.point_summary(recs)
    assert A.metric_table(shuffled) == A.metric_table(recs)


@SETTINGS
@given(runs(), warmups(), st.randoms(use_true_random=False))
def test_warmups_are_never_counted(recs: list[RequestRecord], warm: list[RequestRecord], rnd) -> None:  # type: ignore[no-untyped-def]
    mixed = recs + warm
    rnd.shuffle(mixed)
    assert A.point_summary(mixed) == A.point_summary(recs)
    assert A.metric_table(mixed) == A.metric_table(recs)
    assert size_summary(64, mixed) == size_summary(64, recs)
    keep = ("completed", "failed", "num_requests", "median_ttft_ms", "median_itl_ms", "median_tpot_ms", "p99_ttft_ms",
            "total_input_tokens", "total_output_tokens")
    a, b = summarize(mixed), summarize(recs)
    assert {k: a[k] for k in keep} == {k: b[k] for k in keep}


@SETTINGS
@given(runs())
def test_probe_bench_show_and_the_report_print_one_number(recs: list[RequestRecord]) -> None:
    from phasescope.report.data import run_points
    from phasescope.store import RunInfo

    point = A.point_summary(recs)
    probe = size_summary(64, recs)
    shown = {r["metric"]: r["value"] for r in A.metric_table(recs)}
    bare = RunInfo(id="r1", kind="bench", status="complete", started_at=0.0)
    src, (rep,) = run_points(bare, recs)
    assert src == "records"
    for key in ("ttft_s", "prefill_tok_s", "decode_tok_s", "tpot_s", "itl_p50_s", "itl_p99_s", "e2e_s"):
        assert same(probe[key], point[key]) and same(rep[key], point[key]), key
        assert same(shown.get(key), point[key]), key
    # the report reading the stored probe summary prints probe's numbers
    stored = RunInfo(id="r2", kind="probe", status="complete", started_at=0.0, summary={"sizes": [probe]})
    src, (rep,) = run_points(stored, [])
    assert src == "summary" and all(same(rep[k], probe[k]) for k in ("ttft_s", "prefill_tok_s", "itl_p50_s"))
    # bench's vLLM-style keys are the same medians in ms: one multiplication, no other rounding
    s = summarize(recs)
    for key, name in (("ttft_s", "ttft"), ("itl_p50_s", "itl"), ("tpot_s", "tpot")):
        want = None if point[key] is None else point[key] * 1000.0
        assert same(s[f"median_{name}_ms"], want), name


@SETTINGS
@given(runs())
def test_percentile_bounds(recs: list[RequestRecord]) -> None:
    p = A.point_summary(recs)
    ok = A.successful(recs)
    ttfts = [D.ttft_s(r) for r in ok]
    assert p["n_ok"] == len(ok) and p["n_err"] == len(recs) - len(ok)
    assert min(ttfts) <= p["ttft_s"] <= p["ttft_p99_s"] <= max(ttfts)
    rates = [D.prefill_tok_s(r) for r in ok]
    assert min(rates) <= p["prefill_tok_s"] <= max(rates)
    if p["itl_p50_s"] is not None:
        itl = [x for r in ok for x in D.itl_s(r)]
        assert min(itl) <= p["itl_p50_s"] <= p["itl_p99_s"] <= max(itl)


def test_prefill_rate_is_the_median_of_per_request_rates_not_a_ratio_of_medians() -> None:
    # two requests of 100 tokens, TTFT 100 ms and 300 ms: rates 1000 and 333.3 tok/s, median 666.7;
    # median(prompt) / median(TTFT) = 100 / 0.2 s = 500 tok/s is no request's rate (the old probe number)
    a = record(0, 10 * NS, 100.0, [10.0, 10.0], 100, tags={"prompt_tokens_target": 100})
    b = record(1, 12 * NS, 300.0, [10.0, 10.0], 100, tags={"prompt_tokens_target": 100})
    rates = sorted(D.prefill_tok_s(r) for r in (a, b))
    want = rates[0] + (rates[1] - rates[0]) * 0.5
    assert size_summary(100, [a, b])["prefill_tok_s"] == pytest.approx(want, rel=1e-12)
    assert size_summary(100, [a, b])["prefill_tok_s"] == pytest.approx(666.67, rel=1e-3)


def test_median_is_percentile_50_everywhere() -> None:
    xs = [0.1, 0.2, 0.30000000000000004, 0.7]
    assert A.median(xs) == A.percentile(xs, 50)
    d = A.distribution(xs, (50, 99), scale=1000.0)
    assert d["median"] == A.median(xs) * 1000.0 == d["p50"]
    assert A.median([]) is None and A.distribution([], (50,))["median"] is None
