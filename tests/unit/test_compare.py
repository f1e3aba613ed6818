"""compare: noise-aware verdicts on synthetic runs with known distributions, and its warnings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import concurrent_run, sequential_run  # noqa: E402

from phasescope.report.compare import compare_runs
from phasescope.report.comparability import param_changes  # noqa: E402
from phasescope.measure.aggregate import group_records, metric_table  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402


def info(run_id: str, **kw: object) -> RunInfo:
    base: dict[str, object] = dict(id=run_id, kind="probe", status="complete", started_at=0.0, model="synthetic-model",
                                   engine="llamacpp", engine_version="b1", device="local", api="openai",
                                   target="http://127.0.0.1:9")
    base.update(kw)
    return RunInfo(**base)  # type: ignore[arg-type]


def verdicts(cmp) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {(m.metric + (f"[{m.group}]" if m.group else "")): m.verdict for m in cmp.metrics}


def test_same_distribution_is_within_noise() -> None:
    # 20 independent pairs drawn from one distribution; with a 95% interval per metric, nearly
    # every verdict must be "within noise" (the odd chance miss is allowed, a systematic one is not)
    total = noise = 0
    for k in range(20):
        a = sequential_run(30, seed=2 * k)
        b = sequential_run(30, seed=2 * k + 1)
        cmp = compare_runs(info("a"), a, info("b"), b, n_boot=1000, seed=k)
        assert cmp.warnings == []
        v = [m.verdict for m in cmp.metrics]
        assert {m.metric for m in cmp.metrics} >= {"ttft_s", "decode_tok_s", "itl_p50_s", "itl_p99_s", "e2e_s",
                                                  "throughput_tok_s", "tpot_s"}
        total += len(v)
        noise += v.count("within noise")
    assert noise / total >= 0.88, (noise, total)


def test_real_shift_is_worse_and_better() -> None:
    for k in range(5):
        a = sequential_run(30, seed=100 + k)
        slow = sequential_run(30, seed=200 + k, ttft_s=0.065, itl_s=0.0125)  # TTFT +30 %, ITL +25 %
        v = verdicts(compare_runs(info("a"), a, info("b"), slow, seed=k))
        for m in ("ttft_s", "decode_tok_s", "itl_p50_s", "e2e_s", "tpot_s", "throughput_tok_s", "prefill_tok_s"):
            assert v[m] == "worse", (k, m, v)
        v = verdicts(compare_runs(info("b"), slow, info("a"), a, seed=k))
        assert v["ttft_s"] == "better" and v["decode_tok_s"] == "better" and v["itl_p50_s"] == "better"


def test_change_and_ci_are_consistent() -> None:
    a = sequential_run(40, seed=1)
    b = sequential_run(40, seed=2, ttft_s=0.075)
    m = next(x for x in compare_runs(info("a"), a, info("b"), b).metrics if x.metric == "ttft_s")
    assert m.a is not None and m.b is not None and m.diff is not None and m.change is not None
    assert m.ci_low is not None and m.ci_high is not None
    assert m.ci_low <= m.diff <= m.ci_high
    assert m.change == pytest.approx(0.5, abs=0.08)  # medians 0.05 → 0.075
    assert m.n_a == m.n_b == 40


def test_min_change_hides_negligible_but_clear_shift() -> None:
    # very low noise: a 0.5 % shift is statistically clear but below min_change
    a = sequential_run(60, seed=1, jitter=0.001)
    b = sequential_run(60, seed=2, jitter=0.001, ttft_s=0.05025)
    m = next(x for x in compare_runs(info("a"), a, info("b"), b).metrics if x.metric == "ttft_s")
    assert m.ci_low is not None and m.ci_low > 0 and m.verdict == "within noise"
    m = next(x for x in compare_runs(info("a"), a, info("b"), b, min_change=0.0).metrics if x.metric == "ttft_s")
    assert m.verdict == "worse"


def test_groups_by_prompt_size_and_concurrency() -> None:
    a = sequential_run(10, seed=1, sizes=(256, 2048), ttft_per_token_s=1e-5)
    b = sequential_run(10, seed=2, sizes=(256, 2048), ttft_per_token_s=2e-5)
    cmp = compare_runs(info("a"), a, info("b"), b)
    groups = {m.group for m in cmp.metrics}
    assert groups == {"prompt_tokens=256", "prompt_tokens=2048"}
    v = verdicts(cmp)
    assert v["ttft_s[prompt_tokens=2048]"] == "worse"  # 0.0705 → 0.091
    assert v["decode_tok_s[prompt_tokens=2048]"] == "within noise"
    c = concurrent_run((1, 4), 16, seed=3)
    assert set(group_records(c)) == {(("concurrency", 1),), (("concurrency", 4),)}


def test_warmup_and_errors() -> None:
    recs = sequential_run(5, seed=1, warmup=2, errors=3)
    rows = metric_table(recs)
    ttft = next(r for r in rows if r["metric"] == "ttft_s")
    assert ttft["n"] == 5  # warm-up and failed requests excluded
    assert ttft["value"] == pytest.approx(0.05, rel=0.2)
    assert next(r for r in rows if r["metric"] == "errors")["value"] == 3


def test_experiment_warmup_phase_left_out() -> None:
    recs = sequential_run(4, seed=1)
    for r in recs[:2]:
        r.tags = {"experiment": "x", "phase": "warmup"}
    for r in recs[2:]:
        r.tags = {"experiment": "x", "phase": "measure"}
    rows = metric_table(recs)
    assert {r["group"] for r in rows} == {"experiment=x, phase=measure"}
    assert next(r for r in rows if r["metric"] == "ttft_s")["n"] == 2


def test_few_samples() -> None:
    a, b = sequential_run(2, seed=1), sequential_run(2, seed=2, ttft_s=1.0)
    assert set(verdicts(compare_runs(info("a"), a, info("b"), b)).values()) == {"too few samples"}


def test_warnings_for_other_differences() -> None:
    a = sequential_run(10, seed=1, sizes=(256,))
    b = sequential_run(10, seed=2, sizes=(512,), model="other")
    cmp = compare_runs(
        info("a", params={"concurrency": 1, "ctx": 4096}),
        a,
        info("b", model="other", engine_version="b2", device="h100", status="partial", error="interrupted",
             params={"concurrency": 4, "ctx": 8192}),
        b,
    )
    text = "\n".join(w.message for w in cmp.warnings)
    for needle in ("model synthetic-model → other", "engine build b1 → b2",
                   "device differs: local → h100", "prompt lengths differ: 256 → 512",
                   "differ in 2 parameters", "run B (b) is partial: interrupted"):
        assert needle in text, text
    assert cmp.param_changes == {"concurrency": [1, 4], "ctx": [4096, 8192]}
    assert compare_runs(info("a"), a, info("b"), sequential_run(10, seed=3)).warnings == []


def test_param_changes_flatten() -> None:
    assert param_changes({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 0}) == {"a.c": [2, 3]}  # d: unknown for A


def test_json_shape() -> None:
    a, b = sequential_run(5, seed=1), sequential_run(5, seed=2)
    d = compare_runs(info("a"), a, info("b"), b).to_dict()
    assert set(d) == {"a", "b", "confidence", "min_change", "min_effect", "run_level", "param_changes", "warnings",
                      "not_comparable", "metrics"}
    assert set(d["metrics"][0]) == {"metric", "label", "unit", "group", "higher_is_better", "a", "b", "n_a", "n_b",
                                    "change", "diff", "ci_low", "ci_high", "verdict", "why", "method", "trials_a",
                                    "trials_b", "a_ci", "b_ci", "min_effect", "unstable", "unstable_why",
                                    "raw_verdict"}
    assert d["run_level"]["method"] == "bootstrap" and d["min_effect"]["itl_p99_s"] == 0.10


def test_another_server_engine_is_not_called_other_flags() -> None:
    # llamacpp → vllm is another server, not "the engine ran with other flags or another model file"
    from phasescope.report.comparability import comparability

    a = info("a", engine="llamacpp", engine_version="b1", summary={"server_build": {"engine": "llamacpp", "version": "b1"}})
    b = info("b", engine="vllm", engine_version="0.33.0", summary={"server_build": {"engine": "vllm", "version": "0.33.0"}})
    msgs = [w.message for w, _ in comparability(a, [], b, [])]
    eng = [m for m in msgs if m.startswith("server engine")]
    assert eng and "another server" in eng[0] and "other flags" not in eng[0], msgs
    assert not any(m.startswith("server version") for m in msgs), msgs  # versions of two servers are not a change
    # the same engine with another build option still reads as flags
    a2 = info("a", summary={"server_build": {"engine": "llamacpp", "n_ctx": 4096}})
    b2 = info("b", summary={"server_build": {"engine": "llamacpp", "n_ctx": 8192}})
    assert any("other flags" in w.message for w, _ in comparability(a2, [], b2, []))


def test_the_interval_reads_in_the_unit_of_the_values_beside_it():
    from phasescope.report.console import fmt_ci, fmt_value

    # A 312 ms, B 420 ms, interval −54 ms … +1.57 s: the row reads in ms throughout
    assert fmt_value(0.312, "s").endswith(" ms") and fmt_value(0.420, "s").endswith(" ms")
    assert fmt_ci(-0.0543, 1.57, "s", ref=0.420) == "-54.3 … +1,570 ms"
    assert fmt_ci(-0.0543, 1.57, "s") == "-0.0543 … +1.57 s"  # no values beside it: the larger end's scale


def test_runs_table_does_not_call_a_tune_or_a_sweep_an_empty_run():
    from rich.console import Console

    from phasescope.report.console import runs_table
    from phasescope.store import RunInfo

    runs = [RunInfo("t1", "tune", "complete", 0.0, 1.0, summary={"settings": [{}, {}, {}]}),
            RunInfo("p1", "plan", "complete", 0.0, 1.0, summary={"sweep": {"param": "rate", "rows": [{}, {}, {}]}}),
            RunInfo("p2", "plan", "complete", 0.0, 1.0, summary={"completed": 20}, n_records=20, n_warmup=0)]
    con = Console(width=250, record=True)
    con.print(runs_table(runs))
    lines = {ln.split()[0]: ln for ln in con.export_text().splitlines() if ln.split() and ln.split()[0] in ("t1", "p1", "p2")}
    assert "3 settings" in lines["t1"] and "3 points (sim)" in lines["p1"]
    assert " 20 " in lines["p2"] and "sim" not in lines["p2"]


def test_a_label_or_an_output_folder_is_not_a_changed_parameter() -> None:
    """Free text (--label) and where the files went (--out, the store) change nothing that is measured:
    a pair of runs differing in concurrency and label differs in one parameter, not two."""
    pa = {"max_concurrency": 4, "label": "a1", "out_dir": "/tmp/x", "store": True, "percentiles": [99],
          "timeouts": {"ttft_s": 60}}
    pb = {"max_concurrency": 8, "label": "a2", "out_dir": None, "store": False, "percentiles": [50, 99],
          "timeouts": {"ttft_s": 60}}
    assert param_changes(pa, pb) == {"max_concurrency": [4, 8]}
    a, b = info("A", params=pa), info("B", params=pb)
    cmp = compare_runs(a, [], b, [])
    assert not [w for w in cmp.warnings if "parameters" in w.message], [w.message for w in cmp.warnings]


def test_an_api_asked_as_auto_compares_as_the_api_the_run_used() -> None:
    """bench records the --api it was given ("auto"), probe the one it used: a probe and a bench that
    both spoke /v1/completions did not change API."""
    a = info("A", api="openai", params={"api": "openai", "max_concurrency": 1})
    b = info("B", api="openai", params={"api": "auto", "max_concurrency": 1})
    assert compare_runs(a, [], b, []).param_changes == {}
    c = info("C", api="chat", params={"api": "auto", "max_concurrency": 1})
    assert compare_runs(a, [], c, []).param_changes == {"api": ["openai", "chat"]}


def test_a_field_one_run_does_not_record_is_unknown_not_different() -> None:
    """An imported `vllm bench serve` file records no API, engine or target: compare says so, and never prints
    "openai → ?" as if the runs had differed."""
    a, b = sequential_run(10, seed=1, sizes=(256,)), sequential_run(10, seed=2, sizes=(256,))
    cmp = compare_runs(info("a"), a, info("b", api=None, engine=None, target=None), b)
    text = "\n".join(w.message for w in cmp.warnings)
    assert "→ ?" not in text and "differs:" not in text, text
    for needle in ("API is not recorded in run B (openai in the other), so whether it differs is unknown",
                   "engine is not recorded in run B (llamacpp in the other)",
                   "target host is not recorded in run B (http://127.0.0.1:9 in the other)"):
        assert needle in text, text
