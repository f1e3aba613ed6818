"""``phasescope tune``: settings expansion, the tune id, resume, the noise rule and the finding."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from phasescope.errors import InputError
from phasescope.tuning import launch
from phasescope.tuning.run import plan_resume, stored_settings
from phasescope.tuning.spec import TuneSpec, check_template, expand, parse_param, setting_key, tune_id
from phasescope.measure import interval as I
from phasescope.tuning.table import Verdict, compare_metric, finding, row_intervals, with_ratios

# --- expansion ------------------------------------------------------------------------------------
_values = st.lists(st.integers(1, 9999).map(str), min_size=1, max_size=4, unique=True)
_params = st.lists(st.tuples(st.sampled_from(["ub", "b", "parallel", "threads", "ctx"]), _values), min_size=1,
                   max_size=3, unique_by=lambda t: t[0])


@given(_params)
@hsettings(max_examples=200, deadline=None)
def test_grid_is_every_combination_once_with_the_baseline_first(params):
    got = expand(params)
    assert len(got) == math.prod(len(v) for _, v in params)
    assert len({s.key for s in got}) == len(got)  # no setting twice
    assert [s.index for s in got] == list(range(len(got)))
    assert got[0].params == {n: v[0] for n, v in params}
    for s in got:
        assert list(s.params) == [n for n, _ in params]
        assert all(s.params[n] in v for n, v in params)


@given(_params)
@hsettings(max_examples=200, deadline=None)
def test_one_at_a_time_changes_exactly_one_parameter_from_the_baseline(params):
    got = expand(params, one_at_a_time=True)
    base = {n: v[0] for n, v in params}
    assert got[0].params == base
    assert len(got) == 1 + sum(len(v) - 1 for _, v in params)
    assert len({s.key for s in got}) == len(got)
    for s in got[1:]:
        diff = [n for n in base if s.params[n] != base[n]]
        assert len(diff) == 1
    # every non-baseline value of every parameter is visited
    for n, vs in params:
        assert {s.params[n] for s in got} == set(vs)


def test_grid_order_last_parameter_fastest():
    got = expand([("ub", ["32", "512"]), ("parallel", ["1", "4"])])
    assert [s.label() for s in got] == ["ub=32 parallel=1", "ub=32 parallel=4", "ub=512 parallel=1",
                                        "ub=512 parallel=4"]


@pytest.mark.parametrize("text, msg", [
    ("foo=1,2", "unknown parameter 'foo'"),
    ("ub", "expected NAME=V1,V2"),
    ("ub=", "no empty name or value"),
    ("ub=32,,64", "no empty name or value"),
    ("=32", "no empty name or value"),
    ("ub=32,x", "'x' is not an integer"),
    ("ub=0", "must be ≥ 1"),
    ("ub=32,32", "repeated"),
    ("fa=maybe", "not one of on, off, auto"),
    ("quant=Q9_9", "unknown quantization type"),
])
def test_bad_params_are_one_clear_input_error(text, msg):
    with pytest.raises(InputError, match=msg):
        parse_param(text, engine=True)


def test_param_aliases_and_normalised_values():
    assert parse_param("-ub=32,512", engine=True) == ("ub", ["32", "512"])
    assert parse_param("ubatch-size=1_024", engine=True) == ("ub", ["1024"])
    assert parse_param("np=1,4", engine=True) == ("parallel", ["1", "4"])
    assert parse_param("quant=q8_0,Q4_0", engine=True) == ("quant", ["Q8_0", "Q4_0"])
    assert parse_param("FA=On", engine=True) == ("fa", ["on"])
    # with a template any placeholder-like name is accepted as it is
    assert parse_param("mnbt=512,2048", engine=False) == ("mnbt", ["512", "2048"])
    with pytest.raises(InputError, match="letters, digits"):
        parse_param("a b=1", engine=False)


def test_a_parameter_given_twice_is_refused():
    with pytest.raises(InputError, match="given twice"):
        expand([("ub", ["32"]), ("ub", ["64"])])


@pytest.mark.parametrize("template, names, msg", [
    ("vllm serve M --mnbt {mnbt}", ["mnbt"], r"must contain \{port\}"),
    ("vllm serve M --port {port}", ["mnbt"], r"no placeholder \{mnbt\}"),
    ("vllm serve M --port {port} --x {x}", [], r"\{x\} has no --param"),
    ("vllm serve M --port {port} {mnbt", ["mnbt"], "malformed template"),
    ("vllm --port {port} {0}", [], "not a placeholder name"),
])
def test_bad_templates(template, names, msg):
    with pytest.raises(InputError, match=msg):
        check_template(template, names)


def test_template_rendering_fills_port_and_takes_env_words():
    argv, env = launch.render("OLLAMA_NUM_PARALLEL={n} ollama serve --x '{n} a' --port {port}", {"n": "4"}, 4321)
    assert env == {"OLLAMA_NUM_PARALLEL": "4"}
    assert argv == ["ollama", "serve", "--x", "4 a", "--port", "4321"]
    argv, env = launch.render("python -m x --json {{a}} --port {port}", {}, 1)
    assert argv[-3:] == ["{a}", "--port", "1"] and env == {}


def test_engine_kwargs_map_each_knob_to_its_flag():
    kw = launch.engine_kwargs({"ub": "32", "b": "256", "fa": "off", "cache-reuse": "64", "parallel": "2",
                               "threads": "1", "ctx": "2048"})
    assert kw["parallel"] == 2 and kw["threads"] == 1 and kw["ctx_size"] == 2048
    ex = kw["extra_args"]
    for flag, v in (("--ubatch-size", "32"), ("--batch-size", "256"), ("--flash-attn", "off"), ("--cache-reuse", "64")):
        assert ex[ex.index(flag) + 1] == v
    assert launch.engine_kwargs({"ub": "4096"})["extra_args"][-2:] == ["--batch-size", "4096"]  # -ub ≤ -b


# --- the tune id ------------------------------------------------------------------------------------
def test_tune_id_is_the_specs_hash():
    a = TuneSpec(params=[("ub", ["32", "512"])], workload="probe", workload_args={"repeat": 3})
    same = TuneSpec(params=[("ub", ["32", "512"])], workload="probe", workload_args={"repeat": 3})
    assert tune_id(a) == tune_id(same) and tune_id(a).startswith("tune-")
    for other in (TuneSpec(params=[("ub", ["32", "256"])], workload_args={"repeat": 3}),
                  TuneSpec(params=[("ub", ["32", "512"])], workload_args={"repeat": 4}),
                  TuneSpec(params=[("ub", ["32", "512"])], workload="bench", workload_args={"repeat": 3}),
                  TuneSpec(params=[("ub", ["32", "512"])], workload_args={"repeat": 3}, one_at_a_time=True),
                  TuneSpec(params=[("ub", ["32", "512"])], workload_args={"repeat": 3}, salt="x")):
        assert tune_id(other) != tune_id(a)
    assert TuneSpec.from_dict(a.to_dict()) == a


# --- resume -----------------------------------------------------------------------------------------
def test_plan_resume_continues_with_the_fourth_of_six():
    s = expand([("ub", ["32", "64", "128"]), ("parallel", ["1", "4"])])
    done = {x.key: object() for x in s[:3]}
    finished, todo = plan_resume(s, done)
    assert [x.index for x in finished] == [0, 1, 2]
    assert [x.index for x in todo] == [3, 4, 5]
    # a hole in the middle (a failed setting) is run again, in order
    done = {s[0].key: 1, s[2].key: 1}
    assert [x.index for x in plan_resume(s, done)[1]] == [1, 3, 4, 5]


def test_stored_settings_are_complete_runs_tagged_with_this_tune(tmp_path, monkeypatch):
    from phasescope.lifecycle import run_output, run_tags
    from phasescope.store import open_store

    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))

    def one(tid, params, status):
        with run_tags(tune={"id": tid, "setting": params, "key": setting_key(params)}):
            with run_output("probe", "http://127.0.0.1:9", {"sizes": [8]}) as out:
                if status == "running":  # left without finish: kept as partial
                    return out.store_id
                out.finish({"x": 1}, status=status)
                return out.store_id

    a = one("tune-a", {"ub": "32"}, "complete")
    one("tune-a", {"ub": "64"}, "partial")
    one("tune-a", {"ub": "128"}, "running")
    one("tune-a", {"ub": "256"}, "failed")
    one("tune-b", {"ub": "64"}, "complete")
    with run_output("probe", "http://127.0.0.1:9", {"sizes": [8]}) as out:  # not in a tune
        out.finish({}, status="complete")
    store = open_store(None)
    got = stored_settings(store, "tune-a")
    assert list(got) == ["ub=32"] and got["ub=32"].id == a
    info = store.get(a)
    assert info.params["sizes"] == [8] and info.params["tune"]["setting"] == {"ub": "32"}  # tags merged, params kept


# --- the noise rule and the finding ----------------------------------------------------------------------
def _r(key: str, xs: list[float], unstable: tuple[str, ...] = ()) -> dict:
    return {"metrics": {key: sorted(xs)[len(xs) // 2] if xs else None}, "samples": {key: xs},
            "unstable": list(unstable)}


def test_compare_metric_needs_non_overlapping_intervals_not_only_ranges():
    k = "decode_tok_s"
    assert compare_metric(_r(k, [1.0, 1.01, 1.02]), _r(k, [1.5, 1.52, 1.51]), k) == Verdict.CHANGED
    assert compare_metric(_r(k, [1.0, 1.01, 1.02]), _r(k, [0.5, 0.51, 0.52]), k) == Verdict.CHANGED
    # the ranges do not overlap (every repeat of one above every repeat of the other), but 3 and 2 samples
    # this spread give 95 % intervals that do: the old range rule called it a change
    assert compare_metric(_r(k, [1.0, 1.1, 1.2]), _r(k, [1.5, 1.6]), k) == Verdict.NOISE
    assert compare_metric(_r(k, [1.0, 1.1, 1.2]), _r(k, [1.15, 1.6]), k) == Verdict.NOISE
    assert compare_metric(_r(k, [1.0]), _r(k, [5.0, 6.0]), k) == Verdict.UNKNOWN
    assert compare_metric(_r(k, []), _r(k, []), k) == Verdict.UNKNOWN
    # a figure the setting's run flagged unstable carries no claim, however far apart
    assert compare_metric(_r(k, [1.0, 1.01, 1.02]), _r(k, [5.0, 5.1, 5.2], ("decode_tok_s",)), k) == Verdict.UNSTABLE


def _row(i, label, decode, ttft):
    med = sorted(decode)[len(decode) // 2]
    return {"index": i, "label": label, "status": "ok",
            "metrics": {"decode_tok_s": med, "ttft_p50_s": sorted(ttft)[len(ttft) // 2], "itl_p99_s": None},
            "samples": {"decode_tok_s": decode, "ttft_p50_s": ttft}}


_samples = st.lists(st.floats(1.0, 100.0), min_size=1, max_size=5)


@given(_samples, _samples, _samples, _samples)
@hsettings(max_examples=300, deadline=None)
def test_the_finding_never_claims_more_than_the_spread(d0, d1, t0, t1):
    rows = [_row(0, "q=a", d0, t0), _row(1, "q=b", d1, t1)]
    with_ratios(rows)
    (line,) = finding(rows)
    iv = [row_intervals(r["metrics"], r["samples"]) for r in rows]
    decode_claim = ("raised decode" in line) or ("lowered decode" in line)
    # a claim exactly where both intervals are known and do not overlap
    assert decode_claim == (I.compare(iv[0]["decode_tok_s"], iv[1]["decode_tok_s"]) != I.CANNOT_TELL)
    ttft_claim = ("raised TTFT" in line) or ("lowered TTFT" in line)
    assert ttft_claim == (I.compare(iv[0]["ttft_p50_s"], iv[1]["ttft_p50_s"]) != I.CANNOT_TELL)
    if decode_claim:  # the direction and the ratio are the table's
        a, b = rows[0]["metrics"]["decode_tok_s"], rows[1]["metrics"]["decode_tok_s"]
        assert ("raised decode" in line) == (b > a)
        assert f"{b / a:.2f}×" in line
        assert f"{rows[1]['vs_baseline']['decode_tok_s']:.2f}×" in line
        lo, hi = rows[1]["vs_baseline_ci"]["decode_tok_s"]
        assert lo <= rows[1]["vs_baseline"]["decode_tok_s"] <= hi
    assert "ITL p99: not measured" in line


def test_finding_example_sentence():
    rows = [_row(0, "quant=Q8_0", [40.0, 41.0, 42.0], [0.20, 0.21, 0.22]),
            _row(1, "quant=Q4_0", [64.0, 66.0, 67.0], [0.205, 0.21, 0.23])]
    with_ratios(rows)
    (line,) = finding(rows)
    assert line.startswith("quant=Q4_0 vs quant=Q8_0: raised decode 1.61× (41 tok/s → 66 tok/s)")
    # TTFT's repeats spread ±5 %: no claim, and the spread it rests on is shown
    assert ("TTFT: cannot tell, within the repeat spread (210 ms [200 ms–220 ms, n=3] → 210 ms [205 ms–230 ms, "
            "n=3])") in line


def test_failed_rows_are_said_and_a_failed_baseline_compares_nothing():
    ok = _row(0, "a=1", [1.0, 2.0], [1.0, 2.0])
    bad = {"index": 1, "label": "a=2", "status": "failed", "reason": "did not start", "metrics": None}
    rows = [ok, bad]
    with_ratios(rows)
    assert finding(rows) == ["a=2: failed (did not start)"] and bad["vs_baseline"] is None
    rows = [dict(bad, index=0), dict(ok, index=1)]
    with_ratios(rows)
    assert finding(rows) == ["the baseline setting did not run: nothing to compare with"]


def test_recommend_picks_the_highest_throughput_within_the_slo():
    from phasescope.tuning.table import recommend

    def r(i, ttft99, itl99, tp, status="ok"):
        return {"index": i, "label": f"x={i}", "params": {"x": str(i)}, "status": status,
                "metrics": {"ttft_p99_s": ttft99, "itl_p99_s": itl99, "throughput_tok_s": tp}}

    rows = [r(0, 0.2, 0.010, 100.0), r(1, 0.6, 0.010, 300.0), r(2, 0.3, 0.020, 200.0), r(3, 0.1, 0.005, 999.0, "failed")]
    assert recommend(rows, None) is None
    got = recommend(rows, {"ttft": 500.0, "itl": 30.0})
    assert got["index"] == 2 and "2 of 3 settings" in got["reason"] and "200 tok/s" in got["reason"]
    assert recommend(rows, {"ttft": 500.0, "itl": 15.0})["index"] == 0
    none = recommend(rows, {"ttft": 50.0})
    assert none["index"] is None and "none of the 3 measured settings" in none["reason"]


def test_a_figure_its_run_flagged_unstable_carries_no_finding_and_the_table_marks_it():
    from rich.console import Console

    from phasescope.tuning.render import render
    from phasescope.tuning.table import unstable_metrics

    # the setting's stored probe run: its 128-token decode rate's repeats still disagreed
    summary = {"sizes": [{"prompt_tokens": 128, "unstable": ["decode_tok_s"]}],
               "warnings": [{"kind": "unstable", "evidence": {"figure": "decode_tok_s"}}]}
    assert unstable_metrics(summary) == ["decode_tok_s"] and unstable_metrics(None) == []
    base = _row(0, "ub=32", [40.0, 40.2, 40.1], [0.20, 0.201, 0.2])
    other = _row(1, "ub=512", [20.0, 60.0, 30.0], [0.10, 0.101, 0.1])
    other["unstable"] = unstable_metrics(summary)
    rows = [base, other]
    with_ratios(rows)
    (line,) = finding(rows)
    assert ("decode: cannot tell, the repeats of ub=512 disagree (40 tok/s → 30 tok/s [20 tok/s–60 tok/s, "
            "n=3])") in line
    assert "lowered TTFT 0.50×" in line  # TTFT's intervals are tight and far apart
    for r in rows:
        ivs = row_intervals(r["metrics"], r["samples"])
        r["intervals"] = {k: iv.to_json() for k, iv in ivs.items()}
        r.update(params={}, run_id=None)
    c = Console(width=100, record=True, color_system=None)
    c.print(render({"tune_id": "t", "workload": "probe", "mode": "grid", "settings": rows, "finding": [line]}))
    out = c.export_text()
    assert "!" in out and "flagged the figure unstable" in out, out
    assert "±" in out and "the 95 % interval of a figure wider than ±10 %" in out, out
