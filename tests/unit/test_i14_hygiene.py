"""Issue 14 on synthetic data: compare cannot be fooled, counts are exact, warnings are typed and
stored, one API-key rule, and the load line says what was sent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import sequential_run  # noqa: E402

from phasescope.cli import app  # noqa: E402
from phasescope.load.summary import summarize  # noqa: E402
from phasescope.measure.warnings import KINDS  # noqa: E402
from phasescope.report.compare import compare_runs, gate, parse_metrics, to_markdown  # noqa: E402
from phasescope.store import RunInfo, open_store  # noqa: E402

runner = CliRunner()


def info(run_id: str, summary: dict | None = None, **kw: object) -> RunInfo:
    base: dict[str, object] = dict(id=run_id, kind="bench", status="complete", started_at=0.0, model="m",
                                   engine="llamacpp", engine_version="b1", device="local", api="openai",
                                   target="http://127.0.0.1:9", summary=summary)
    base.update(kw)
    return RunInfo(**base)  # type: ignore[arg-type]


def cached(recs: list, frac: float, ttft_s: float | None = None) -> list:
    for r in recs:
        r.cached_prompt_tokens = round(frac * (r.prompt_tokens or 0))
    return recs


def by_metric(cmp) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {m.metric: m.verdict for m in cmp.metrics}


# --- compare ------------------------------------------------------------------------------------
def test_cold_vs_cached_ttft_is_not_comparable() -> None:
    # B answered from the prefix cache: TTFT 10x lower. Without the check this reads "better".
    a = cached(sequential_run(30, seed=1, ttft_s=0.5), 0.0)
    b = cached(sequential_run(30, seed=2, ttft_s=0.05), 0.98)
    cmp = compare_runs(info("a"), a, info("b"), b, n_boot=500)
    v = by_metric(cmp)
    assert v["ttft_s"] == "not comparable" and v["prefill_tok_s"] == "not comparable"
    assert v["ttft_p99_s"] == "not comparable"
    assert v["decode_tok_s"] == "within noise"  # decode is not affected by the cache
    assert cmp.warnings[0].kind == "runs_not_comparable" and "prefix-cache hit rate 0.000 → 0.980" in cmp.warnings[0].message
    assert "ttft_s" in cmp.not_comparable
    # the same two runs, both cold: a real TTFT improvement
    cmp2 = compare_runs(info("a"), cached(a, 0.0), info("b"), cached(b, 0.0), n_boot=500)
    assert by_metric(cmp2)["ttft_s"] == "better"


def test_host_contention_and_engine_build_make_runs_not_comparable() -> None:
    a, b = sequential_run(20, seed=1), sequential_run(20, seed=2, itl_s=0.02)
    quiet = {"host": {"available": True, "threshold": 0.25, "during": {"other_cpu_share": 0.02}}}
    busy = {"host": {"available": True, "threshold": 0.25, "during": {"other_cpu_share": 0.6}}}
    assert by_metric(compare_runs(info("a", quiet), a, info("b", quiet), b, n_boot=300))["itl_p50_s"] == "worse"
    v = by_metric(compare_runs(info("a", quiet), a, info("b", busy), b, n_boot=300))
    assert set(v.values()) <= {"not comparable", "too few samples"}
    # both busy alike: the contention does not differ, the verdict stands
    assert by_metric(compare_runs(info("a", busy), a, info("b", busy), b, n_boot=300))["itl_p50_s"] == "worse"
    v = by_metric(compare_runs(info("a", {"server_build": {"total_slots": 4, "model_file": "x.gguf"}}), a,
                               info("b", {"server_build": {"total_slots": 8, "model_file": "x.gguf"}}), b, n_boot=300))
    assert v["itl_p50_s"] == "not comparable"
    v = by_metric(compare_runs(info("a"), a, info("b", engine_version="b2"), b, n_boot=300))
    assert v["itl_p50_s"] == "not comparable"
    flags = lambda f: {"server_build": {"user_flags": f}}  # noqa: E731 - bench --engine-flags
    cmp = compare_runs(info("a", flags("--max-num-seqs 64")), a, info("b", flags("--max-num-seqs 256")), b, n_boot=300)
    assert by_metric(cmp)["itl_p50_s"] == "not comparable"
    assert "server user_flags --max-num-seqs 64 → --max-num-seqs 256" in cmp.warnings[0].message


def test_token_counts_that_differ_make_the_prefill_side_not_comparable() -> None:
    a = sequential_run(20, seed=1)
    b = sequential_run(20, seed=2)
    for r in b:
        r.prompt_tokens = 270  # the server counted 5 % more tokens: another workload
    cmp = compare_runs(info("a"), a, info("b"), b, n_boot=300)
    v = by_metric(cmp)
    assert v["ttft_s"] == "not comparable" and v["decode_tok_s"] == "within noise"
    assert any("mean prompt tokens (server count) 256.0 → 270.0" in w.message for w in cmp.warnings)


def test_gate_and_metric_names() -> None:
    a, b = sequential_run(25, seed=1), sequential_run(25, seed=2, itl_s=0.013)
    cmp = compare_runs(info("a"), a, info("b"), b, n_boot=500)
    assert {m.metric for m in gate(cmp, parse_metrics("itl_p99,itl_p50"))} == {"itl_p99_s", "itl_p50_s"}
    assert gate(cmp, parse_metrics("ttft,ttft_p99")) == []
    same = compare_runs(info("a"), a, info("b"), sequential_run(25, seed=3), n_boot=500)
    assert gate(same, parse_metrics("itl_p99")) == []
    from phasescope.errors import InputError

    with pytest.raises(InputError, match="unknown metric 'nope'"):
        parse_metrics("ttft,nope")
    md = to_markdown(cmp, gate(cmp))
    assert md.startswith("### phasescope compare") and "| ITL p99 ↓ |" in md and "**worse**" in md
    assert "**Regression:**" in md


def _store_run(st: Path, recs: list, summary: dict, **kw: object) -> str:
    s = open_store(st)
    with s.recording("bench", "http://127.0.0.1:9", {"n": 1}, model="m", engine="llamacpp", engine_version="b1") as run:
        for r in recs:
            run.add(r)
        run.finish(summary)
    return run.id


def test_compare_cli_fail_on_worse_json_and_md(tmp_path: Path) -> None:
    st = str(tmp_path / "store")
    a = _store_run(tmp_path / "store", sequential_run(25, seed=1), {})
    b = _store_run(tmp_path / "store", sequential_run(25, seed=2, itl_s=0.013), {})
    c = _store_run(tmp_path / "store", sequential_run(25, seed=3), {})
    bad = runner.invoke(app, ["compare", a, b, "--store", st, "--fail-on", "worse", "--metrics", "itl_p99,ttft_p99"])
    assert bad.exit_code == 5, bad.output  # EXIT_REGRESSION (1 is a phasescope bug)
    ok = runner.invoke(app, ["compare", a, c, "--store", st, "--fail-on", "worse", "--metrics", "itl_p99"])
    assert ok.exit_code == 0, ok.output
    # only the chosen metrics gate: ITL got worse, TTFT did not
    assert runner.invoke(app, ["compare", a, b, "--store", st, "--fail-on", "worse", "--metrics", "ttft"]).exit_code == 0
    js = runner.invoke(app, ["compare", a, b, "--store", st, "--fail-on", "worse", "--json"])
    d = json.loads(js.stdout)
    assert js.exit_code == 5 and d["gate"]["failed"] and d["gate"]["verdict"] == "worse" and "itl_p99_s" in d["gate"]["worse"]
    md = runner.invoke(app, ["compare", a, b, "--store", st, "--format", "md"])
    assert md.exit_code == 0 and md.stdout.startswith("### phasescope compare") and "| group | metric |" in md.stdout
    err = runner.invoke(app, ["compare", a, b, "--store", st, "--fail-on", "better"])
    assert err.exit_code != 0 and "--fail-on takes `worse`" in str(err.exception)


# --- store: counts and warnings ---------------------------------------------------------------
def test_runs_and_show_count_warmups_apart_and_old_warnings_load(tmp_path: Path) -> None:
    st = tmp_path / "store"
    recs = sequential_run(40, seed=1, warmup=1)
    rid = _store_run(st, recs, {"warnings": ["an old plain-string warning",
                                             {"kind": "host_busy", "message": "m", "evidence": {}, "fix": None}],
                                "host": {"available": True, "during": {"other_cpu_share": 0.1}}})
    shown = json.loads(runner.invoke(app, ["show", rid, "--store", str(st), "--json"]).stdout)["run"]
    assert shown["requests"] == {"measured": 40, "warmup": 1} and shown["n_records"] == 41
    assert [w["kind"] for w in shown["warnings"]] == ["note", "host_busy"]
    assert shown["warnings"][0]["message"] == "an old plain-string warning"
    assert shown["host"]["during"]["other_cpu_share"] == 0.1
    listed = json.loads(runner.invoke(app, ["runs", "--store", str(st), "--json"]).stdout)["runs"]
    assert listed[0]["requests"] == {"measured": 40, "warmup": 1}
    text = runner.invoke(app, ["runs", "--store", str(st)]).stdout
    row = next(ln for ln in text.splitlines() if rid in ln)
    assert " 40 " in row and " 1 " in row and " 41 " not in row
    shown_text = runner.invoke(app, ["show", rid, "--store", str(st)]).stdout
    assert "40 measured + 1 warm-up" in shown_text
    assert "warnings (2):" in shown_text and "[note] an old plain-string warning" in shown_text


# --- exact counts ---------------------------------------------------------------------------
def test_one_extra_prompt_token_is_a_mismatch_for_token_id_prompts() -> None:
    # a BOS the client did not count: 257 where 256 was asked, prompt sent as token ids
    recs = sequential_run(5, seed=1)
    for r in recs:
        r.prompt_tokens = 257
        r.tags["prompt_source"] = "tokenize"
    w = [x for x in summarize(recs)["count_warnings"] if x["kind"] == "token_count_mismatch"]
    assert w and "+1" in w[0]["message"] and w[0]["evidence"]["mismatched"] == 5
    for r in recs:  # a calibrated text prompt promises only about the length: 1 in 256 is within it
        r.tags["prompt_source"] = "calibrated"
    assert not [x for x in summarize(recs)["count_warnings"] if x["kind"] == "token_count_mismatch"]


def test_every_warning_kind_the_issue_names_exists() -> None:
    assert {"host_busy", "high_variance", "prefix_cache_hits", "client_saturated", "token_count_mismatch",
            "cold_start", "too_few_samples", "above_ceiling", "runs_not_comparable"} <= set(KINDS)


# --- one API-key rule -------------------------------------------------------------------------
def _api_key_envvars() -> dict[str, object]:
    out: dict[str, object] = {}
    root = get_command(app)

    def walk(cmd: object, name: str) -> None:
        if hasattr(cmd, "commands"):
            for sub_name, sub in cmd.commands.items():  # type: ignore[attr-defined]
                walk(sub, f"{name} {sub_name}".strip())
            return
        for p in cmd.params:  # type: ignore[attr-defined]
            if "--api-key" in getattr(p, "opts", []):
                out[name] = p.envvar

    walk(root, "")
    return out


def test_every_command_reads_the_api_key_the_same_way() -> None:
    found = _api_key_envvars()
    assert {"probe", "bench", "explain", "experiment", "watch"} <= set(found)
    assert all(list(v) == ["PHASESCOPE_API_KEY", "OPENAI_API_KEY"] for v in found.values()), found  # type: ignore[call-overload]


def test_load_line_says_all_at_once_not_poisson() -> None:
    from phasescope.cli.cmd_bench import _load_words

    s = {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "load_shape": "poisson", "workers": 1}
    assert "inf" not in _load_words(s) and "poisson" not in _load_words(s).lower()
    assert "all requests sent at once" in _load_words(s)
    assert "closed loop, 4 requests in flight" in _load_words(s | {"max_concurrency": 4})
    assert _load_words(s | {"request_rate": 5.0}).startswith("5.0 req/s, Poisson arrivals")


def test_html_report_shows_each_runs_warnings(tmp_path: Path) -> None:
    from phasescope.report.html import write_report

    st = tmp_path / "store"
    rid = _store_run(st, sequential_run(6, seed=1), {"warnings": [
        {"kind": "host_busy", "message": "other work took 61 % <of> the cores", "evidence": {}, "fix": "rerun"},
        "legacy text warning"]})
    s = open_store(st)
    info = s.get(rid)
    out = tmp_path / "r.html"
    write_report([(info, s.load_records(rid))], out)
    page = out.read_text()
    assert "Measurement warnings" in page and "other work took 61 % &lt;of&gt; the cores" in page
    assert "host_busy" in page and "legacy text warning" in page and "fix: rerun" in page


def test_compare_repeats_each_runs_own_host_busy() -> None:
    busy = {"warnings": [{"kind": "host_busy", "message": "other work took 70 %", "evidence": {}, "fix": "rerun"}],
            "host": {"available": True, "threshold": 0.25, "during": {"other_cpu_share": 0.7}}}
    a, b = sequential_run(10, seed=1), sequential_run(10, seed=2)
    cmp = compare_runs(info("a", busy), a, info("b", busy), b, n_boot=200)
    assert [w.message for w in cmp.warnings if w.kind == "host_busy"] == [
        "run A (a): other work took 70 %", "run B (b): other work took 70 %"]


def test_experiment_warmups_are_counted_apart_too(tmp_path: Path) -> None:
    recs = sequential_run(5, seed=1)
    for r in recs[:2]:
        r.tags = {"experiment": "x", "phase": "warmup"}
    rid = _store_run(tmp_path / "store", recs, {})
    assert open_store(tmp_path / "store").get(rid).to_dict()["requests"] == {"measured": 3, "warmup": 2}


@pytest.mark.parametrize("kw, flag", [
    ({}, "--num-prompts"),
    ({"duration_s": 5.0}, "--duration"),
    ({"dataset": "conversation"}, "--sessions"),
    ({"dataset": "mooncake", "dataset_path": "t.jsonl"}, "--trace-duration"),
])
def test_too_few_samples_names_the_flag_that_sends_more_of_this_workload(kw: dict, flag: str) -> None:
    """A conversation's requests are its sessions' turns and a trace's its entries: telling such a run to
    raise --num-prompts names a flag that sends nothing more (it only caps a trace)."""
    from phasescope.load.bench import BenchConfig
    from phasescope.load.hygiene import bench_warnings

    cfg = BenchConfig(url="http://127.0.0.1:9", **kw)
    w = [x for x in bench_warnings(cfg, {"completed": 6, "percentiles": [50, 99]}, [], [])
         if x.kind == "too_few_samples"]
    assert len(w) == 1 and flag in w[0].fix
    others = {"--num-prompts", "--duration", "--sessions", "--trace-duration"} - {flag}
    assert not [f for f in others if f in w[0].fix], w[0].fix


def test_compare_says_a_run_against_itself_and_runs_help_lists_every_status(tmp_path: Path) -> None:
    """compare X X printed a table of 'within noise' verdicts with ±33 tok/s intervals and no word that
    a run is no evidence about itself (it stays allowed: it shows A's own numbers). And --status accepts every stored status, so its help names them all."""
    st = str(tmp_path / "store")
    a = _store_run(tmp_path / "store", sequential_run(25, seed=1), {})
    same = runner.invoke(app, ["compare", a, a, "--store", st])
    assert same.exit_code == 0 and "same run" in same.output, same.output
    from phasescope.store import RUN_STATUSES

    helptext = " ".join(runner.invoke(app, ["runs", "--help"]).output.split())
    assert all(s in helptext for s in RUN_STATUSES), helptext


@pytest.mark.parametrize("argv", [["runs"], ["show", "r1"], ["compare", "r1", "r2"], ["report", "r1"]])
def test_a_reading_command_on_a_store_path_that_does_not_exist_says_so_and_creates_nothing(
        argv: list, tmp_path: Path) -> None:
    """`runs --store /typo/x.db` created an empty store and said "no runs": a typo in --store would
    leave a fresh database behind and hide the real runs."""
    from phasescope.errors import InputError

    st = tmp_path / "nostore" / "x.db"
    extra = ["-o", str(tmp_path / "r.html")] if argv[0] == "report" else []
    res = runner.invoke(app, [*argv, "--store", str(st), *extra])
    if argv[0] == "runs":  # a listing stays an empty list for scripts (exit 0), and says why
        assert res.exit_code == 0 and "no run store at" in res.output, res.output
        js = runner.invoke(app, ["runs", "--store", str(st), "--json"])
        assert js.exit_code == 0 and json.loads(js.stdout)["runs"] == []
    else:
        assert isinstance(res.exception, InputError) and "no run store at" in str(res.exception), res.output
    assert not (tmp_path / "nostore").exists()
