"""Plan metrics, records, calibration, planner and the CLI (pure: no server)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from phasescope.cli import app
from phasescope.errors import InputError
from phasescope.load.summary import summarize
from phasescope.measure import derive
from phasescope.measure.records import read_records, write_records
from phasescope.planning.calibrate import calibrate
from phasescope.planning.costmodel import CostModel
from phasescope.planning.metrics import parse_slo, summarize_sim, to_records, weighted_percentile
from phasescope.planning.planner import PlanSpec, capacity, parse_sweep, sweep
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning.workload import Workload

from plan_synth import on_one_clock

COST = CostModel(name="test", step_overhead_s=0.002, kv_pool_tokens=400_000)


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 99.9, 100])
def test_weighted_percentile_matches_numpy_on_the_expanded_sample(q: float) -> None:
    rng = np.random.default_rng(1)
    v = rng.random(200)
    w = rng.integers(0, 7, 200)
    assert weighted_percentile(v, w, q) == pytest.approx(float(np.percentile(np.repeat(v, w), q)))


def test_summary_matches_metrics_derived_from_the_emitted_records() -> None:
    res = simulate(COST, Workload(num_requests=120, rate=6.0, input_len=1500, output_len=60, range_ratio=0.5, seed=4))
    s = summarize_sim(res)
    recs = list(to_records(res, model="m"))
    itl = [x for r in recs for x in derive.itl_s(r)]
    ttft = [derive.ttft_s(r) for r in recs]
    tpot = [derive.tpot_s(r) for r in recs]
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itl, 99) * 1e3, rel=1e-6)
    assert s["mean_itl_ms"] == pytest.approx(np.mean(itl) * 1e3, rel=1e-6)
    assert s["median_ttft_ms"] == pytest.approx(np.median(ttft) * 1e3, rel=1e-6)
    assert s["p90_tpot_ms"] == pytest.approx(np.percentile(tpot, 90) * 1e3, rel=1e-6)
    # the bench summary reads simulated records like measured ones
    b = summarize(recs)
    assert b["completed"] == 120
    assert b["median_ttft_ms"] == pytest.approx(s["median_ttft_ms"], rel=1e-6)
    assert b["p99_itl_ms"] == pytest.approx(s["p99_itl_ms"], rel=1e-6)


def test_records_round_trip_through_jsonl(tmp_path) -> None:
    res = simulate(COST, Workload(num_requests=5, rate=2.0, input_len=100, output_len=8))
    recs = list(to_records(res, model="m", limit=3))
    assert len(recs) == 3
    p = tmp_path / "r.jsonl"
    write_records(p, recs)
    back = read_records(p)
    assert [r.to_dict() for r in back] == [r.to_dict() for r in recs]
    r = back[0]
    assert r.prompt_tokens_source == "requested" and r.output_tokens == 8 and r.api == "sim"
    assert r.server["prefill_s"] == pytest.approx(derive.ttft_s(r))


def test_slo_parse_and_goodput() -> None:
    assert parse_slo("ttft:500, itl:50") == {"ttft": 500.0, "itl": 50.0}
    assert parse_slo("e2e:10") == {"e2el": 10.0}
    for bad in ("ttft", "foo:1", "ttft:x", "ttft:-1"):
        with pytest.raises(InputError):
            parse_slo(bad)
    res = simulate(COST, Workload(num_requests=50, rate=4.0, input_len=1000, output_len=50, seed=2))
    loose = summarize_sim(res, {"ttft": 1e6, "itl": 1e6})
    tight = summarize_sim(res, {"ttft": 1e-3, "itl": 1e-3})
    assert loose["slo"]["met"] and not tight["slo"]["met"]
    assert loose["request_goodput"] == pytest.approx(loose["request_throughput"])
    assert tight["request_goodput"] == 0.0


def test_calibration_recovers_a_known_cost_model() -> None:
    truth = COST.with_(overlap="sum", bw_eff=0.35, flops_eff=0.2, step_overhead_s=0.001, kv_pool_tokens=10**6)
    # a probe: one request at a time, two prompt lengths
    recs = []
    for L in (200, 800, 2000):
        res = simulate(truth, Workload(num_requests=3, concurrency=1, input_len=L, output_len=40))
        recs += list(to_records(res, model="m"))
    # different requests ran at different times in separate simulations: shift so they do not overlap
    t = 0
    for r in recs:
        shift = t - r.t_start_ns
        r.t_start_ns += shift
        r.t_conn_ready_ns = r.t_start_ns
        r.t_done_ns += shift
        for e in r.events:
            e.t_ns += shift
        t = r.t_done_ns + 1_000_000
    base = truth.with_(bw_eff=0.8, flops_eff=0.6)
    cal = calibrate(recs, base)
    assert cal.n_prefill_points == 9 and cal.n_decode_points == 9
    assert cal.cost.flops_eff == pytest.approx(0.2, rel=0.03)
    for L in (200, 2000):
        assert cal.cost.prefill_time_s(L) == pytest.approx(truth.prefill_time_s(L), rel=0.03)
    assert cal.cost.decode_step_s(1, 500) == pytest.approx(truth.decode_step_s(1, 500), rel=0.03)
    assert cal.residuals["decode_rel_err_median"] < 0.03


def test_calibration_separates_decode_math_with_a_batched_probe() -> None:
    truth = COST.with_(overlap="sum", bw_eff=0.35, flops_eff=0.2, decode_flops_eff=0.07, step_overhead_s=0.001,
                       kv_pool_tokens=10**6)
    groups = []
    for L in (200, 800):
        for _ in range(2):
            groups.append(list(to_records(simulate(truth, Workload(num_requests=1, concurrency=1, input_len=L, output_len=40)), model="m")))
    groups.append(list(to_records(simulate(truth, Workload(num_requests=4, concurrency=4, input_len=200, output_len=40)), model="m")))
    recs = on_one_clock(groups)
    cal = calibrate(recs, truth.with_(bw_eff=0.8, flops_eff=0.6, decode_flops_eff=None))
    assert cal.fitted["n_batched_decode_points"] >= 3  # the first of the four started alone
    assert cal.cost.decode_flops_eff == pytest.approx(0.07, rel=0.05)
    assert cal.cost.flops_eff == pytest.approx(0.2, rel=0.05)
    assert cal.cost.decode_step_s(4, 4 * 300) == pytest.approx(truth.decode_step_s(4, 4 * 300), rel=0.03)
    # without the batch the decode math cannot be told apart: one efficiency for both
    solo = calibrate(on_one_clock([list(to_records(simulate(truth, Workload(num_requests=1, concurrency=1, input_len=L,
                                                                          output_len=40)), model="m")) for L in (200, 800)]),
                     truth.with_(bw_eff=0.8, flops_eff=0.6, decode_flops_eff=None))
    assert solo.cost.decode_flops_eff is None


def test_sweep_and_capacity() -> None:
    spec = PlanSpec(COST, Workload(num_requests=100, rate=2.0, input_len=2000, output_len=100), SchedulerConfig(),
                    slo={"ttft": 400.0, "itl": 60.0})
    name, vals = parse_sweep("max-num-batched-tokens=512,8192")
    assert name == "max_num_batched_tokens"
    rows = sweep(spec, name, vals)["rows"]
    assert [r["value"] for r in rows] == [512, 8192]
    assert rows[0]["p99_itl_ms"] < rows[1]["p99_itl_ms"]
    with pytest.raises(InputError):
        parse_sweep("nonsense=1")
    cap = capacity(replace(spec, workload=replace(spec.workload, rate=None, concurrency=1)))
    n = cap["max_users"]
    assert n >= 1
    met = {p["value"]: p["slo_met"] for p in cap["probes"]}
    assert met[n] is True
    assert met.get(n + 1) is False or not any(v > n and ok for v, ok in met.items())


def test_cli_plan_json_and_errors(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--rate", "2", "-n", "60",
                                 "--input-len", "2000", "--output-len", "50", "--slo", "ttft:1000,itl:100", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "plan" and doc["summary"]["completed"] == 60 and doc["run_id"]
    assert doc["cost_model"]["kv_pool_tokens"] > 100_000
    from phasescope.store import open_store

    store = open_store(tmp_path / "store")
    assert len(store.load_records(doc["run_id"])) == 60
    bad = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "nope"])
    assert bad.exit_code != 0
    bad2 = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--disaggregate", "1-1"])
    assert bad2.exit_code != 0


def test_cli_disaggregation_on_one_gpu_does_not_pay(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    r = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--rate", "1", "-n", "100",
                                 "--input-len", "3000", "--output-len", "100", "--disaggregate", "1:1", "--json", "--no-save"])
    assert r.exit_code == 0, r.output
    dz = json.loads(r.stdout)["disaggregation"]
    assert dz["shared_device"] is True and dz["pays"] is False
