"""bench's twin (phasescope.planning.twin) on a simulated clock: a probe of a known server calibrates the twin, a
bench of the same server is within its band, a bench of the server at half its capacity is flagged with the
sentence, and a busy host makes TTFT "cannot tell" (issue 36 item 4)."""

from __future__ import annotations

from phasescope.planning.costmodel import CostModel
from phasescope.planning.metrics import to_records
from phasescope.planning.sim import SchedulerConfig, simulate
from phasescope.planning import twin
from phasescope.planning.twin import console_lines, twin_block
from phasescope.planning.workload import Workload

#: the designed server: 8 ms decode steps, 50 µs per prompt token, 1 ms per step, 8 slots
TRUTH = CostModel(name="truth", weight_bytes=1.0, kv_bytes_per_token=0.0, flops_per_token=1.0, attn_flops_per_pair=0.0,
                  lm_head_flops=0.0, bandwidth_bytes_s=1.0, peak_flops=1.0, bw_eff=1 / 0.007, flops_eff=1 / 5e-5,
                  step_overhead_s=0.001, kv_pool_tokens=10_000_000, overlap="max")
SLOTS = 8


def _recs(cost: CostModel, w: Workload, slots: int) -> list:
    res = simulate(cost, w, SchedulerConfig(max_num_seqs=slots))
    return list(to_records(res, model="m"))


def _probe() -> list:
    # lone requests, one at a time, at prompt lengths from 200 to 2,000 tokens (a probe's sizes)
    return _recs(TRUTH, Workload(concurrency=1, num_requests=12, input_len=1100, range_ratio=0.8, output_len=64, seed=1),
                 SLOTS)


def _bench_summary(c: int, **kw: object) -> dict:
    return {"request_rate": "inf", "max_concurrency": c, "load_shape": "poisson", "warnings": [], **kw}


def _bench(cost: CostModel, c: int, slots: int) -> list:
    return _recs(cost, Workload(concurrency=c, num_requests=96, input_len=512, output_len=64, seed=2), slots)


def _twin(bench_recs: list, c: int, **kw: object) -> tuple[dict, list]:
    return twin_block(_bench_summary(c, **kw), bench_recs, _probe(), calib_id="p1", calib_kind="probe",
                      calib_summary={"server_build": {"total_slots": SLOTS}})


def test_unchanged_server_is_within_the_band_and_flags_nothing() -> None:
    block, warns = _twin(_bench(TRUTH, 16, SLOTS), 16)
    assert block["available"] and block["slots_assumed"] == SLOTS
    assert {r["metric"]: r["verdict"] for r in block["metrics"]} == {
        "ttft_p50": "within", "ttft_p99": "within", "tpot_p50": "within", "e2el_p50": "within"}
    assert block["flagged"] == [] and warns == []


def test_half_the_slots_is_flagged_as_queueing_with_the_sentence() -> None:
    # the server now runs 4 slots, the probe saw 8: at concurrency 16 every request waits twice as long
    block, warns = _twin(_bench(TRUTH, 16, SLOTS // 2), 16)
    v = {r["metric"]: r["verdict"] for r in block["metrics"]}
    assert v["ttft_p50"] == "above" and v["e2el_p50"] == "above"
    assert v["tpot_p50"] == "within"  # each request decodes as fast as before: the wait is in the queue
    w = next(x for x in warns if x.evidence["metric"] == "ttft_p50")
    assert w.kind == "twin_shortfall"
    assert w.message.startswith("at concurrency 16 this server's TTFT p50 is ")
    assert "what its own probe (p1) predicts" in w.message
    assert "check max sequences / slots (the twin assumed 8)" in (w.fix or "")
    lines = console_lines(block)
    assert lines[0].startswith("Twin (probe p1, 8 slots assumed)")
    assert any(ln.split()[0] == "ttft_p50" and ln.endswith("above") for ln in lines[1:])


def test_half_the_speed_is_flagged_on_decode() -> None:
    slow = TRUTH.rescaled(prefill=2.0, decode=2.0)
    block, warns = _twin(_bench(slow, 4, SLOTS), 4)
    v = {r["metric"]: r["verdict"] for r in block["metrics"]}
    assert v["tpot_p50"] == "above" and "tpot_p50" in block["flagged"]
    assert any("decode runs slower than at calibration" in (w.fix or "") for w in warns)


def test_a_busy_host_makes_ttft_cannot_tell() -> None:
    block, warns = _twin(_bench(TRUTH, 16, SLOTS // 2), 16, warnings=[{"kind": "host_busy", "message": "busy"}])
    v = {r["metric"]: r["verdict"] for r in block["metrics"]}
    assert v["ttft_p50"] == "cannot tell" and v["ttft_p99"] == "cannot tell"
    assert not any(w.evidence["metric"].startswith("ttft") for w in warns)


def test_no_successful_request_gives_no_twin_and_the_console_says_why() -> None:
    block, warns = twin_block(_bench_summary(4), [], _probe(), calib_id="p1")
    assert block["available"] is False and warns == []
    assert console_lines(block) == ["Twin: none — no successful request to compare"]


def test_the_report_draws_predicted_against_measured(tmp_path) -> None:
    from phasescope.report.html import write_report
    from phasescope.store import RunInfo

    block, _ = _twin(_bench(TRUTH, 16, SLOTS // 2), 16)
    recs = _bench(TRUTH, 16, SLOTS // 2)
    info = RunInfo(id="b1", kind="bench", status="complete", started_at=1e9, model="m", summary={"twin": block})
    res = write_report([(info, recs)], tmp_path / "r.html")
    assert "twin" in res.plots and "twin" not in res.skipped
    page = (tmp_path / "r.html").read_text()
    assert 'id="plot-twin"' in page and "predicted (twin band)" in page and "calibrated from p1" in page


def test_a_busy_host_widens_every_band_by_its_share_and_beyond_80_percent_cannot_tell() -> None:
    busy = [{"kind": "host_busy", "message": "busy"}]
    recs = _bench(TRUTH, 16, SLOTS // 2)
    calm, _ = _twin(recs, 16)
    half, _ = _twin(recs, 16, warnings=busy, host={"during": {"other_cpu_share": 0.5}})
    full, _ = _twin(recs, 16, warnings=busy, host={"during": {"other_cpu_share": 0.9}})
    top = {r["metric"]: r["band_ms"][1] for r in calm["metrics"]}
    for r in half["metrics"]:  # every metric's top doubles: the client and the server both waited for a core
        want = 2 * top[r["metric"]]
        assert abs(r["band_ms"][1] - want) < 1e-6 * want, r
    v = {r["metric"]: r["verdict"] for r in full["metrics"]}
    # loaded hosts (96-97 % busy, the probe as busy) read an unchanged fake's E2E p50 565-601 ms against a 433-562 ms
    # band, and its TPOT p50 11-12 ms against 8-11 ms: "above" on a server that had not changed. Beyond 80 % the
    # client's timing at concurrency N measures the host: every metric "cannot tell", each saying so
    assert set(v.values()) == {"cannot tell"}, v
    assert all("busy host" in r["why"] for r in full["metrics"]), full["metrics"]
    assert half["host_other_share"] == 0.5 and half["host_busy"] is True


def test_a_band_too_wide_to_tell_a_match_from_a_shortfall_says_cannot_tell_not_within() -> None:
    """The embedded engine beside a busy clean-clone run (host 50 % busy, the probe noisy too) drew TTFT p50 bands
    of 1.8-10.8 s and "within" for a measured 4.7-5.9 s: a band 6x wide matches anything. Past
    twin.WITHIN_MAX_SPAN (top ÷ bottom) the twin says "cannot tell" and why; a shortfall above even that top
    is still flagged."""
    busy = [{"kind": "host_busy", "message": "busy"}]
    recs = _bench(TRUTH, 16, SLOTS)
    calm, _ = _twin(recs, 16)
    wide, _ = _twin(recs, 16, warnings=busy, host={"during": {"other_cpu_share": 0.75}})  # every top × 4
    assert all(r["band_ms"][1] / r["band_ms"][0] <= twin.WITHIN_MAX_SPAN for r in calm["metrics"])
    assert {r["verdict"] for r in calm["metrics"]} == {"within"}
    for r in wide["metrics"]:
        assert r["band_ms"][1] / r["band_ms"][0] > twin.WITHIN_MAX_SPAN, r
        assert r["verdict"] == "cannot tell" and "too wide" in r["why"], r
    slow = _bench(TRUTH.rescaled(prefill=1.0, decode=8.0), 4, SLOTS)
    v = {r["metric"]: r["verdict"] for r in _twin(slow, 4, warnings=busy, host={"during": {"other_cpu_share": 0.75}})[0]["metrics"]}
    assert v["tpot_p50"] == "above", v
