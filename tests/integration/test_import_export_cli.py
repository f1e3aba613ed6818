"""`phasescope import`, `compare` and `report` of other tools' result files beside a phasescope run, and
`export --format llmd` read back by `import`, through the CLI (in process; the run store on disk, no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phasescope.measure.aggregate import METRICS, point_value, samples_of
from phasescope.measure.records import Event, RequestRecord
from phasescope.report.imported import load_result, metric_values
from phasescope.store import open_store
from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
NS = 1_000_000_000


def _bench_run(store: Path, ttft_s: float = 0.057, gap_s: float = 0.0105, n: int = 12) -> str:
    """A stored bench run of ``n`` streamed requests: 128-token prompts, 16 tokens one per event."""
    st = open_store(store)
    with st.recording("bench", "http://127.0.0.1:9", {"concurrency": 4, "max_tokens": 16}, model="fake-model",
                      api="openai", engine="llamacpp") as rec:
        for i in range(n):
            t0 = i * 60_000_000
            first = t0 + round((ttft_s + 0.001 * (i % 3)) * NS)
            ev = [Event(first + k * round(gap_s * NS), n_tokens=1) for k in range(16)]
            rec.add(RequestRecord(id=f"q{i}", api="openai", target="http://127.0.0.1:9", model="fake-model", ok=True,
                                  t_start_ns=t0, events=ev, t_done_ns=ev[-1].t_ns, prompt_tokens=128,
                                  prompt_tokens_source="usage", prompt_tokens_requested=128, max_tokens=16,
                                  output_tokens=16, output_tokens_source="usage"))
        rec.finish({"concurrency": 4})
        return rec.id


def test_import_compare_report_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "runs"
    monkeypatch.setenv("COLUMNS", "200")
    rid = _bench_run(store)
    code, out, err = run(["import", str(DATA / "vllm_save_detailed.json"), "--store", str(store), "--json"], capsys,
                         monkeypatch)
    assert code == 0, err
    imp = json.loads(out)
    assert imp["kind"] == "import" and imp["n_records"] == 8 and imp["source"]["tool"] == "vllm bench serve"
    doc = json.loads((DATA / "vllm_save_detailed.json").read_text())
    # compare the stored phasescope run against the imported id: the B values are the file's
    code, out, err = run(["compare", rid, imp["id"], "--store", str(store), "--json"], capsys, monkeypatch)
    assert code == 0, err
    cmp = json.loads(out)
    rows = {m["metric"]: m for m in cmp["metrics"]}
    assert rows["ttft_s"]["b"] * 1000 == pytest.approx(doc["median_ttft_ms"])
    assert rows["tpot_s"]["b"] * 1000 == pytest.approx(doc["median_tpot_ms"])
    assert rows["ttft_s"]["verdict"] in ("better", "worse", "within noise")  # per-request data: a real interval
    assert "throughput_tok_s" in cmp["not_comparable"]  # no start times in the file: said
    # a summary-only file named directly (not stored): its numbers, no interval, and the ITL caveat
    code, out, err = run(["compare", rid, str(DATA / "vllm_save_result.json"), "--store", str(store), "--json"],
                         capsys, monkeypatch)
    assert code == 0, err
    cmp = json.loads(out)
    rows = {m["metric"]: m for m in cmp["metrics"]}
    assert not [w for w in cmp["warnings"] if w["kind"] == "no_success"]  # a summary has no requests to fail
    assert cmp["run_level"]["method"] == "summary"
    assert rows["ttft_p99_s"]["b"] * 1000 == pytest.approx(doc["p99_ttft_ms"])
    assert rows["e2e_s"]["b"] * 1000 == pytest.approx(doc["median_e2el_ms"])
    assert rows["ttft_s"]["verdict"] == "too few samples" and "summary numbers only" in rows["ttft_s"]["why"]
    assert rows["itl_p99_s"]["verdict"] == "not comparable" and "per chunk" in rows["itl_p99_s"]["why"]
    assert [r.kind for r in open_store(store).list_runs()].count("import") == 1  # the file was not stored
    # the table says the same in words
    code, out, err = run(["compare", rid, str(DATA / "guidellm_benchmarks.json"), "--store", str(store)], capsys,
                         monkeypatch)
    assert code == 0, err
    assert "token-weighted" in out.replace("\n", " ") or "weights each request" in out.replace("\n", " ")
    # report draws the phasescope run and the imported ones
    html = tmp_path / "r.html"
    code, out, err = run(["report", rid, imp["id"], str(DATA / "aiperf_profile_export.jsonl"), "-o", str(html),
                          "--store", str(store), "--json"], capsys, monkeypatch)
    assert code == 0, err
    res = json.loads(out)
    assert html.exists() and len(res["compared"]) == 2


def test_bad_result_files_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmarks": "nope"}')
    for argv in (["import", str(bad)], ["import", str(tmp_path / "missing.json")],
                 ["compare", str(bad), str(DATA / "vllm_save_result.json")],
                 ["import", str(DATA / "vllm_save_result.json"), "--format", "aiperf"]):
        code, out, err = run([*argv, "--store", str(tmp_path / "s")], capsys, monkeypatch)
        assert code == 2, (argv, out, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_export_llmd_round_trips_through_import(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "runs"
    rid = _bench_run(store)
    out_file = tmp_path / "br.json"
    code, out, err = run(["export", rid, "--format", "llmd", "-o", str(out_file), "--store", str(store)], capsys,
                         monkeypatch)
    assert code == 0, err
    doc = json.loads(out_file.read_text())
    assert doc["version"] == "0.2" and doc["scenario"]["load"]["standardized"]["tool"] == "phasescope"
    imp = load_result(out_file)
    assert imp.source == "llmd" and imp.model == "fake-model"
    got = metric_values(imp.summary)
    recs = open_store(store).load_records(rid)
    want = {m.key: point_value(samples_of(recs), m) for m in METRICS}
    for key in ("ttft_s", "ttft_p99_s", "tpot_s", "itl_p50_s", "itl_p99_s", "e2e_s", "throughput_tok_s"):
        assert got[key] == pytest.approx(want[key], rel=1e-9), key
    assert imp.summary["completed"] == 12 and imp.summary["failed"] == 0
    # written by phasescope: its ITL is per token, so nothing is marked not comparable
    assert all(d["comparable"] for d in imp.summary["definitions"].values())
    code, out, err = run(["export", rid, "--format", "csv", "--store", str(store)], capsys, monkeypatch)
    assert code == 2 and "--format must be llmd" in err
