"""The runs / show / compare / report commands: JSON contracts, baselines and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import sequential_run  # noqa: E402

from phasescope.cli import app  # noqa: E402
from phasescope.store import open_store  # noqa: E402

runner = CliRunner()


def record_run(store: Path, seed: int, ttft: float = 0.05, model: str = "m", kind: str = "probe", **params: object) -> str:
    s = open_store(store)
    with s.recording(kind, "http://user:pw@127.0.0.1:8080/v1", dict(params), model=model, engine="llamacpp") as run:
        for r in sequential_run(12, seed=seed, ttft_s=ttft):
            run.add(r)
        run.finish({"ttft_s": ttft})
    return run.id


def cli(*args: str) -> object:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout) if "--json" in args else res.stdout


def test_runs_show_compare_report(tmp_path: Path) -> None:
    st = tmp_path / "store"
    assert cli("runs", "--store", str(st), "--json")["runs"] == []  # type: ignore[index]
    a = record_run(st, 1, concurrency=1)
    b = record_run(st, 2, ttft=0.08, concurrency=1)
    c = record_run(st, 3, model="other", kind="bench")
    listed = cli("runs", "--store", str(st), "--json")["runs"]  # type: ignore[index]
    assert [r["id"] for r in listed] == [c, b, a]
    assert listed[0]["target"] == "http://127.0.0.1:8080/v1" and "summary" not in listed[0]
    assert [r["id"] for r in cli("runs", "--store", str(st), "--kind", "probe", "--json")["runs"]] == [b, a]  # type: ignore[index]
    assert [r["id"] for r in cli("runs", "--store", str(st), "--model", "oth", "--json")["runs"]] == [c]  # type: ignore[index]
    text = cli("runs", "--store", str(st))
    assert a in text and "probe" in text  # type: ignore[operator]

    shown = cli("show", a, "--store", str(st), "--json")
    assert shown["run"]["id"] == a and shown["run"]["summary"] == {"ttft_s": 0.05}  # type: ignore[index]
    assert any(m["metric"] == "ttft_s" for m in shown["metrics"])  # type: ignore[index]
    assert "TTFT" in cli("show", a, "--store", str(st))  # type: ignore[operator]

    cmp = cli("compare", a, b, "--store", str(st), "--json")
    ttft = next(m for m in cmp["metrics"] if m["metric"] == "ttft_s")  # type: ignore[index]
    assert ttft["verdict"] == "worse" and ttft["change"] > 0.3
    assert cmp["a"]["id"] == a and cmp["b"]["id"] == b  # type: ignore[index]
    assert "worse" in cli("compare", a, b, "--store", str(st))  # type: ignore[operator]

    # baselines: first use marks, later uses compare; --set re-marks
    first = cli("compare", a, "--baseline", "main", "--store", str(st), "--json")
    assert first["baselines"] == {"main": a}  # type: ignore[index]
    vs = cli("compare", b, "--baseline", "main", "--store", str(st), "--json")
    assert (vs["a"]["id"], vs["b"]["id"], vs["baseline"]) == (a, b, "main")  # type: ignore[index]
    latest = cli("compare", "--baseline", "main", "--store", str(st), "--json")
    assert latest["b"]["id"] == b  # type: ignore[index]  # the latest other run of the baseline's kind
    cli("compare", b, "--baseline", "main", "--set", "--store", str(st), "--json")
    assert [r["baselines"] for r in cli("runs", "--store", str(st), "--json")["runs"]] == [[], ["main"], []]  # type: ignore[index]

    out = tmp_path / "r.html"
    rep = cli("report", a, b, "-o", str(out), "--store", str(st), "--json")
    assert rep["path"] == str(out) and out.exists() and "ttft_distribution" in rep["plots"]  # type: ignore[index]
    assert rep["compared"] == [f"{b} vs {a}"]  # type: ignore[index]  # two runs: the comparison view


@pytest.mark.parametrize(
    "args,needle",
    [
        (["show", "r1999"], "no run 'r1999'"),
        (["compare", "r1999"], "compare needs two run ids"),
        (["compare", "--baseline", "nope"], "no baseline named 'nope'"),
        (["runs", "--status", "weird"], "--status must be one of"),
        (["compare", "a", "b", "--confidence", "2"], "--confidence"),
    ],
)
def test_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    open_store(tmp_path / "s")  # an (empty) store: the error under test, not "no run store at"
    res = subprocess.run([sys.executable, "-m", "phasescope", *args, "--store", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("phasescope: error: ") and needle in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
