"""compare's gate and run-level intervals (issue 29 items 6-7) on synthetic stored runs.

Every expected verdict follows from the distributions the runs are drawn from (seeded): the gate
logic is tested here, never a measured duration. One run of ``bench --trials N`` is built as N
blocks of records tagged ``tags.trial`` with ``summary.trials``, as bench stores it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import sequential_run  # noqa: E402

from phasescope.cli import run as cli_run  # noqa: E402
from phasescope.errors import EXIT_CODES, EXIT_INCONCLUSIVE, EXIT_INPUT, EXIT_OK, EXIT_REGRESSION  # noqa: E402
from phasescope.measure.records import RequestRecord  # noqa: E402
from phasescope.report.compare import MIN_EFFECT, compare_runs  # noqa: E402
from phasescope.report.gate import decide  # noqa: E402
from phasescope.report.runlevel import welch_interval  # noqa: E402
from phasescope.store import RunInfo, open_store  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def trial_records(ttfts: list[float], seed: int, *, n: int = 30, itl_s: float = 0.01,
                  jitter: float = 0.02) -> list[RequestRecord]:
    """One trial run: trial t's requests drawn around ``ttfts[t]`` (the run-to-run offset)."""
    out: list[RequestRecord] = []
    for t, ttft in enumerate(ttfts, start=1):
        for r in sequential_run(n, seed=seed * 100 + t, ttft_s=ttft, itl_s=itl_s, jitter=jitter):
            r.tags["trial"] = t
            r.id = f"t{t}-{r.id}"
            out.append(r)
    return out


def trial_summary(k: int, host: float | None = None, partial: tuple[int, ...] = ()) -> dict[str, Any]:
    s: dict[str, Any] = {"trials": [{"trial": t, "status": "partial" if t in partial else "complete",
                                     "partial": t in partial} for t in range(1, k + 1)], "num_trials": k}
    if host is not None:
        s["host"] = {"during": {"other_cpu_share": host}, "threshold": 0.25}
    return s


def info(run_id: str, summary: dict[str, Any] | None = None, warnings: list[dict[str, Any]] | None = None) -> RunInfo:
    s = dict(summary or {})
    if warnings:
        s["warnings"] = warnings
    return RunInfo(id=run_id, kind="bench", status="complete", started_at=0.0, model="m", engine="vllm",
                   engine_version="1", device="local", api="openai", target="http://127.0.0.1:9", summary=s)


def row(cmp: Any, metric: str) -> Any:
    return next(m for m in cmp.metrics if m.metric == metric)


# --- run-level intervals -----------------------------------------------------------------------------
def test_trials_use_run_level_intervals_that_see_run_to_run_noise() -> None:
    # each trial sits at its own level (the host's load drifted between trials); B is the same server,
    # its trials 6 % higher on average. Pooled over requests the shift looks clear (tight per-request
    # jitter); across trials it is well inside the run-to-run spread.
    ra = trial_records([0.050, 0.053, 0.047], seed=1)
    rb = trial_records([0.053, 0.0562, 0.0498], seed=2)
    pooled = compare_runs(info("a"), ra, info("b"), rb)  # no summary.trials: request-level bootstrap
    assert pooled.run_level["method"] == "bootstrap"
    assert row(pooled, "ttft_s").verdict == "worse"
    cmp = compare_runs(info("a", trial_summary(3)), ra, info("b", trial_summary(3)), rb)
    r = row(cmp, "ttft_s")
    assert cmp.run_level == {"method": "trials", "a": 3, "b": 3}
    assert r.method == "trials" and r.trials_a == r.trials_b == 3 and r.verdict == "within noise"
    assert r.a == pytest.approx(0.05, rel=0.03) and r.a_ci[0] < r.a < r.a_ci[1]
    assert r.ci_low < r.diff < r.ci_high and r.ci_low < 0 < r.ci_high
    assert decide(cmp, ["ttft_s"]).verdict == "pass"


def test_welch_interval_matches_the_textbook_case() -> None:
    # equal variances and sizes: Welch's df = 2(n − 1) = 4, t = 2.776; se = sqrt(2·s²/n)
    d, lo, hi = welch_interval([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    half = 2.776 * (2 * 1.0 / 3) ** 0.5
    assert d == pytest.approx(1.0) and lo == pytest.approx(1.0 - half, rel=1e-3) and hi == pytest.approx(1.0 + half,
                                                                                                         rel=1e-3)


def test_one_side_without_trials_falls_back_and_says_so() -> None:
    ra = trial_records([0.05, 0.05, 0.05], seed=3)
    cmp = compare_runs(info("a", trial_summary(3)), ra, info("b"), sequential_run(30, seed=9))
    assert cmp.run_level["method"] == "bootstrap" and "only run A" in cmp.run_level["why"]
    assert any("run-to-run noise" in w.message for w in cmp.warnings)


def test_partial_trial_is_left_out_of_the_run_level_values() -> None:
    # trial 3 was cut by Ctrl-C: its (slow) requests are kept in the store but not in the means
    ra = trial_records([0.05, 0.05, 0.20], seed=4)
    cmp = compare_runs(info("a", trial_summary(3, partial=(3,))), ra, info("b", trial_summary(3)),
                       trial_records([0.05, 0.05, 0.05], seed=5))
    r = row(cmp, "ttft_s")
    assert r.trials_a == 2 and r.a == pytest.approx(0.05, rel=0.03)


# --- minimum effect ----------------------------------------------------------------------------------
def test_clear_but_small_shift_is_below_the_minimum_effect() -> None:
    # ITL +3 %, very tight: the interval excludes 0, but the default minimum effect (5 %) ignores it
    a = sequential_run(60, seed=1, jitter=0.002)
    b = sequential_run(60, seed=2, jitter=0.002, itl_s=0.0103)
    cmp = compare_runs(info("a"), a, info("b"), b)
    r = row(cmp, "itl_p50_s")
    assert r.ci_low > 0 and r.min_effect == MIN_EFFECT["itl_p50_s"] == 0.05 and r.verdict == "within noise"
    assert decide(cmp, ["itl_p50_s"]).verdict == "pass"
    strict = compare_runs(info("a"), a, info("b"), b, min_change=0.01)  # --min-change sets one for all
    assert row(strict, "itl_p50_s").verdict == "worse" and decide(strict, ["itl_p50_s"]).verdict == "worse"
    assert MIN_EFFECT["itl_p99_s"] > MIN_EFFECT["itl_p50_s"]  # tails move more between runs


# --- the gate's three answers ------------------------------------------------------------------------
def test_doubled_itl_fails_the_gate_with_trials() -> None:
    ra = trial_records([0.05, 0.052, 0.049], seed=6, itl_s=0.01)
    rb = trial_records([0.05, 0.051, 0.05], seed=7, itl_s=0.02)
    cmp = compare_runs(info("a", trial_summary(3)), ra, info("b", trial_summary(3)), rb)
    g = decide(cmp)
    assert g.verdict == "worse" and g.exit_code == EXIT_REGRESSION
    assert {m.metric for m in g.worse} >= {"itl_p50_s", "itl_p99_s", "tpot_s", "decode_tok_s"}
    assert "ttft_s" not in {m.metric for m in g.worse}


def test_different_host_loads_are_inconclusive_not_a_pass() -> None:
    # the bug: all metrics "not comparable", and the gate exited 0
    ra = trial_records([0.05, 0.05, 0.05], seed=8)
    rb = trial_records([0.05, 0.05, 0.05], seed=9, itl_s=0.02)
    a, b = info("a", trial_summary(3, host=0.02)), info("b", trial_summary(3, host=0.70))
    cmp = compare_runs(a, ra, b, rb)
    assert all(m.verdict == "not comparable" for m in cmp.metrics)
    g = decide(cmp)
    assert g.verdict == "inconclusive" and g.exit_code == EXIT_INCONCLUSIVE and not g.worse
    assert "host contention" in (g.reason or "") and all("not comparable" in why for _, why in g.inconclusive)
    # --allow-incomparable gates on the numbers: ITL doubled is worse
    g2 = decide(cmp, allow_incomparable=True)
    assert g2.verdict == "worse" and "itl_p50_s" in {m.metric for m in g2.worse}
    same = compare_runs(a, ra, b, trial_records([0.05, 0.05, 0.05], seed=10))
    assert decide(same, allow_incomparable=True).verdict == "pass"


def test_a_busy_host_makes_the_tails_not_comparable_while_medians_still_gate() -> None:
    # the gate check of stop 38: two benches of one server, both on a host 40-45 % busy (so the two loads
    # are within HOST_NOISE of each other), and run B's ITL tail 40 % higher in every trial because other
    # work preempted more of its token steps. The old gate failed the pair "worse" on ITL p99: a host's
    # scheduling read as a regression. Tails on a busy host are not comparable; medians still are.
    ra = trial_records([0.05, 0.05, 0.05], seed=40, jitter=0.10)
    rb = trial_records([0.05, 0.05, 0.05], seed=41, jitter=0.25)
    a, b = info("a", trial_summary(3, host=0.40)), info("b", trial_summary(3, host=0.45))
    cmp = compare_runs(a, ra, b, rb)
    tail = row(cmp, "itl_p99_s")
    assert tail.raw_verdict == "worse"  # the numbers alone do differ: the rule, not the data, decides
    assert tail.verdict == "not comparable" and "host was busy" in (tail.why or "")
    assert row(cmp, "ttft_p99_s").verdict == "not comparable"
    assert row(cmp, "itl_p50_s").verdict != "not comparable"
    g = decide(cmp)
    assert g.verdict == "inconclusive" and g.exit_code == EXIT_INCONCLUSIVE and not g.worse
    assert any(m.metric == "itl_p99_s" and "host was busy" in why for m, why in g.inconclusive)
    # a real doubling of ITL on the same busy host still fails on the medians
    slow = compare_runs(a, ra, b, trial_records([0.05, 0.05, 0.05], seed=42, itl_s=0.02, jitter=0.10))
    gs = decide(slow)
    assert gs.verdict == "worse" and "itl_p50_s" in {m.metric for m in gs.worse}
    assert "itl_p99_s" not in {m.metric for m in gs.worse}
    # on a quiet host the same tail difference is a regression the gate must catch
    quiet = compare_runs(info("a", trial_summary(3, host=0.02)), ra, info("b", trial_summary(3, host=0.03)), rb)
    assert row(quiet, "itl_p99_s").verdict == "worse" and decide(quiet).verdict == "worse"
    # a client_saturated warning (the client's own loop lagged) says the same of the tails
    sat = [{"kind": "client_saturated", "message": "loop lag", "evidence": {}}]
    lag = compare_runs(info("a", trial_summary(3, host=0.02)), ra,
                       info("b", trial_summary(3, host=0.03), warnings=sat), rb)
    assert row(lag, "itl_p99_s").verdict == "not comparable" and "client" in (row(lag, "itl_p99_s").why or "")


def test_unstable_trials_are_inconclusive() -> None:
    # B's trials disagree (TTFT 50 / 50 / 150 ms): the gate cannot pass on TTFT
    ra = trial_records([0.05, 0.05, 0.05], seed=11)
    rb = trial_records([0.05, 0.05, 0.15], seed=12)
    cmp = compare_runs(info("a", trial_summary(3)), ra, info("b", trial_summary(3)), rb)
    r = row(cmp, "ttft_s")
    assert r.unstable and "trials of run B disagree" in (r.unstable_why or "")
    g = decide(cmp, ["ttft_s"])
    assert g.verdict == "inconclusive" and "unstable" in (g.reason or "")
    assert decide(cmp, ["itl_p50_s"]).verdict == "pass"  # only the gated metrics count
    assert decide(cmp, ["ttft_s"], allow_incomparable=True).verdict == "pass"


def test_an_unstable_warning_of_a_run_without_trials_is_inconclusive() -> None:
    a, b = sequential_run(30, seed=1), sequential_run(30, seed=2)
    warn = [{"kind": "unstable", "message": "ttft_s disagrees", "evidence": {"figure": "median_ttft_ms"}}]
    cmp = compare_runs(info("a", warnings=warn), a, info("b"), b)
    assert row(cmp, "ttft_s").unstable and not row(cmp, "itl_p50_s").unstable
    assert decide(cmp, ["ttft_s"]).verdict == "inconclusive"
    assert decide(cmp, ["itl_p50_s"]).verdict == "pass"


def test_a_proven_regression_beats_an_inconclusive_row() -> None:
    # ITL doubled (comparable) while TTFT is unstable: the gate fails on ITL
    ra = trial_records([0.05, 0.05, 0.05], seed=13, itl_s=0.01)
    rb = trial_records([0.05, 0.05, 0.15], seed=14, itl_s=0.02)
    cmp = compare_runs(info("a", trial_summary(3)), ra, info("b", trial_summary(3)), rb)
    g = decide(cmp, ["ttft_s", "itl_p50_s"])
    assert g.verdict == "worse" and [m.metric for m in g.worse] == ["itl_p50_s"] and g.inconclusive


def test_nothing_judged_is_inconclusive() -> None:
    a, b = sequential_run(2, seed=1), sequential_run(2, seed=2)  # 2 requests a side: too few samples
    cmp = compare_runs(info("a"), a, info("b"), b)
    g = decide(cmp)
    assert g.verdict == "inconclusive" and "too few samples" in (g.reason or "")


# --- the CLI: exit codes, JSON, the table ----------------------------------------------------------------
def _store(st: Path, recs: list[RequestRecord], summary: dict[str, Any]) -> str:
    s = open_store(st)
    with s.recording("bench", "http://127.0.0.1:9", {"n": 1}, model="m", engine="vllm", engine_version="1") as run:
        for r in recs:
            run.add(r)
        run.finish(summary)
    return run.id


def _cli(capsys: Any, *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = cli_run(["compare", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_cli_gate_exit_codes_and_verdict(tmp_path: Path, capsys: Any) -> None:
    st = tmp_path / "store"
    a = _store(st, trial_records([0.05, 0.051, 0.049], seed=20), trial_summary(3, host=0.02))
    same = _store(st, trial_records([0.05, 0.05, 0.05], seed=21), trial_summary(3, host=0.03))
    slow = _store(st, trial_records([0.05, 0.05, 0.05], seed=22, itl_s=0.02), trial_summary(3, host=0.03))
    busy = _store(st, trial_records([0.05, 0.05, 0.05], seed=23), trial_summary(3, host=0.80))
    code, d = _cli(capsys, a, same, "--store", str(st), "--fail-on", "worse")
    assert code == EXIT_OK and d["gate"]["verdict"] == "pass" and not d["gate"]["failed"]
    assert d["run_level"]["method"] == "trials"
    code, d = _cli(capsys, a, slow, "--store", str(st), "--fail-on", "worse")
    assert code == EXIT_REGRESSION == 5 and d["gate"]["verdict"] == "worse" and "itl_p50_s" in d["gate"]["worse"]
    code, d = _cli(capsys, a, busy, "--store", str(st), "--fail-on", "worse")
    assert code == EXIT_INCONCLUSIVE == 6 and d["gate"]["verdict"] == "inconclusive" and d["gate"]["failed"]
    assert "host contention" in d["gate"]["reason"] and d["gate"]["inconclusive"]
    code, d = _cli(capsys, a, busy, "--store", str(st), "--fail-on", "worse", "--allow-incomparable")
    assert code == EXIT_OK and d["gate"]["verdict"] == "pass"
    # the console says why, on stderr
    capsys.readouterr()
    assert cli_run(["compare", a, busy, "--store", str(st), "--fail-on", "worse"]) == 6
    err = capsys.readouterr().err
    assert "gate inconclusive (exit 6)" in err and "host contention" in err
    # without --fail-on the verdict is still said, and nothing fails
    code, d = _cli(capsys, a, slow, "--store", str(st))
    assert code == 0 and d["gate"]["verdict"] == "worse" and not d["gate"]["failed"]
    capsys.readouterr()
    assert cli_run(["compare", a, slow, "--store", str(st), "--allow-incomparable"]) == EXIT_INPUT


def test_every_exit_code_means_one_thing_and_the_readme_says_which() -> None:
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", README.read_text(encoding="utf-8"), flags=re.M)
    table = {int(c): m.strip() for c, m in rows}
    assert len(rows) == len(table), "a code listed twice"
    assert set(table) == set(EXIT_CODES), (sorted(table), sorted(EXIT_CODES))
    assert len(set(EXIT_CODES)) == len(EXIT_CODES.values()) == len(set(EXIT_CODES.values()))
    assert "regression" in table[EXIT_REGRESSION] and "inconclusive" in table[EXIT_INCONCLUSIVE]
    assert "bug" in table[1] and "regression" not in table[1]


def test_compare_help_names_the_gate_codes(capsys: Any) -> None:
    assert cli_run(["compare", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit 5" in out.lower() and "exit 6" in out.lower() and "--allow-incomparable" in out


def test_a_steady_state_run_is_compared_inside_its_window() -> None:
    # closed loop of 4: the first wave is a warm-up burst (TTFT 10×); the bench reported the window
    # without it, and compare must read the same window, not the burst
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_bench_trials import closed_loop

    from phasescope.report.compare import steady_records

    burst = closed_loop(60, 4, burst_ttft=0.5, ttft=0.02, seed=1)
    calm = closed_loop(60, 4, burst_ttft=0.02, ttft=0.02, seed=2)
    a = info("a", {"steady_state": {"used": True}, "max_concurrency": 4})
    b = info("b", {"steady_state": {"used": True}, "max_concurrency": 4})
    kept = steady_records(a, burst)
    assert 0 < len(kept) < len(burst) and not {r.id for r in burst[:4]} & {r.id for r in kept}
    assert steady_records(info("x"), burst) == burst  # no --steady-state: every record
    assert row(compare_runs(info("a"), burst, info("b"), calm), "ttft_p99_s").verdict == "better"
    assert row(compare_runs(a, burst, b, calm), "ttft_p99_s").verdict == "within noise"


def test_a_bench_unstable_warning_names_its_figures() -> None:
    # bench --trials says every figure that disagrees in one warning (evidence.figures)
    a, b = sequential_run(30, seed=1), sequential_run(30, seed=2)
    warn = [{"kind": "unstable", "message": "2 figures disagree", "evidence": {
        "figure": "p95_ttft_ms", "figures": ["p95_ttft_ms", "p99_itl_ms"]}}]
    cmp = compare_runs(info("a", warnings=warn), a, info("b"), b)
    assert row(cmp, "itl_p99_s").unstable and not row(cmp, "ttft_s").unstable  # p95 has no compare metric


def test_a_saturated_host_makes_ttft_and_prefill_medians_not_comparable() -> None:
    # this session's gate_repeat run: two benches of one 20 ms-TTFT fake, both runs 92-93 % busy (so their
    # loads are within HOST_NOISE and the share cannot tell them apart, it saturates near 100 %), and the
    # wait for a core added 2-8 ms to each request's TTFT, a different amount in each run: B's median TTFT
    # 15 % higher in every trial. The old gate failed the pair "worse" on TTFT p50 and prefill. A short phase
    # on a busy host measures the wait for a core, so it is not comparable; ITL, TPOT, decode still gate.
    ra = trial_records([0.020, 0.020, 0.020], seed=50, jitter=0.02)
    rb = trial_records([0.023, 0.023, 0.023], seed=51, jitter=0.02)
    a, b = info("a", trial_summary(3, host=0.92)), info("b", trial_summary(3, host=0.93))
    cmp = compare_runs(a, ra, b, rb)
    ttft = row(cmp, "ttft_s")
    assert ttft.raw_verdict == "worse"  # the numbers alone differ
    assert ttft.verdict == "not comparable" and "host was busy" in (ttft.why or "")
    assert row(cmp, "prefill_tok_s").verdict == "not comparable"
    assert row(cmp, "itl_p50_s").verdict != "not comparable"
    g = decide(cmp)
    assert g.verdict == "inconclusive" and not g.worse
    # a doubled ITL on the same saturated host still fails on the ITL median
    slow = decide(compare_runs(a, ra, b, trial_records([0.020, 0.020, 0.020], seed=52, itl_s=0.02)))
    assert slow.verdict == "worse" and "itl_p50_s" in {m.metric for m in slow.worse}
    # on a quiet host the same TTFT shift is a regression the gate catches
    quiet = compare_runs(info("a", trial_summary(3, host=0.02)), ra, info("b", trial_summary(3, host=0.03)), rb)
    assert row(quiet, "ttft_s").verdict == "worse" and decide(quiet).verdict == "worse"
