"""Issue 31: probe and explain end as bench does (docs/commands/bench.md, runs.md): a run that stops
early with some measured request succeeded is ``partial``, one in which none succeeded is ``failed``,
and both exit 3 with one line — on real fake servers on 127.0.0.1 that fail after a few requests.

Before: probe stored a run whose warm-up failed as ``partial``; explain on a server that died after
its calibration ran every experiment into errors and ended ``complete``, exit 0 (136 of 139 requests
failed), and one whose every experiment request was refused did the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phasescope.testing.fakeserver import FakeServer

PS = [sys.executable, "-m", "phasescope"]


def _cli(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "store"), PHASESCOPE_HOME=str(tmp_path / "home"))
    p = subprocess.run(PS + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    return p.returncode, p.stdout, p.stderr


def _one_run(tmp_path: Path) -> dict:
    code, out, err = _cli(["runs", "--json"], tmp_path)
    assert code == 0, err
    d = json.loads(out)
    runs = d["runs"] if isinstance(d, dict) else d
    assert len(runs) == 1, runs
    return runs[0]


def _records(run: dict) -> list[dict]:
    return [json.loads(ln) for ln in Path(run["records_path"]).read_text().splitlines() if ln.strip()]


def _error_lines(err: str) -> list[str]:
    assert "Traceback" not in err and "phasescope bug" not in err, err
    return [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")]


PROBE = ["probe", "-p", "16", "-n", "6", "-r", "2"]
EXPLAIN = ["explain", "--budget", "20s", "--only", "prompt-scaling,batching", "--no-nvml",
           "--ttft-timeout", "5", "--itl-timeout", "5"]


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("skip", "status"), [(0, "failed"), (2, "partial")])
def test_probe_that_stops_at_a_failure_is_partial_or_failed_by_what_succeeded(skip: int, status: str,
                                                                              tmp_path: Path) -> None:
    """skip 0: the warm-up is cut (nothing succeeded); skip 2: the warm-up and the first round's request
    succeed, the next one is cut."""
    with FakeServer(fault="cut", fault_skip=skip, ttft_s=0.002, itl_s=0.001).running() as srv:
        code, out, err = _cli([*PROBE, srv.url], tmp_path)
    assert code == 3, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "connection cut" in lines[0], err
    run = _one_run(tmp_path)
    assert run["status"] == status and "connection cut" in (run["error"] or ""), run
    recs = _records(run)
    assert len(recs) == skip + 1 and [r["ok"] for r in recs] == [True] * skip + [False], recs


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("skip", "status"), [(3, "failed"), (6, "partial")])
def test_explain_on_a_server_that_dies_stops_after_8_failures_in_a_row(skip: int, status: str,
                                                                       tmp_path: Path) -> None:
    """The first ``skip`` requests are answered (the calibration's three, then 0 or 3 of prompt-scaling's),
    then every stream is cut: after 8 in a row (bench's dead-server rule) explain stops, runs no further
    experiment, keeps the report and every record, and says so (exit 3) — ``partial`` when an experiment
    request had succeeded, ``failed`` when none had (the calibration only sizes the run)."""
    with FakeServer(fault="cut", fault_skip=skip, ttft_s=0.002, itl_s=0.001).running() as srv:
        code, out, err = _cli([*EXPLAIN, srv.url, "--json"], tmp_path)
        sent = srv.requests
    assert code == 3, err[-2000:]
    lines = _error_lines(err)
    assert len(lines) == 1 and "8 requests in a row" in lines[0] and f"kept as {status}" in lines[0], err
    run = _one_run(tmp_path)
    assert run["status"] == status and "8 requests in a row" in (run["error"] or ""), run
    recs = _records(run)
    failed = [r for r in recs if not r["ok"] and r.get("error_kind") != "stopped_by_client"]
    assert len(failed) >= 8 and sum(r["ok"] for r in recs) == skip, [(r["ok"], r.get("error_kind")) for r in recs]
    assert len(recs) == sent, (len(recs), sent)  # every request sent is on disk
    from phasescope.store import open_store

    summary = open_store(tmp_path / "store").get(run["id"]).summary
    assert summary["status"] == status and "8 requests in a row" in summary["stop_reason"]
    assert "batching" in summary["skipped"], summary["skipped"]  # the experiment after the stop did not run


@pytest.mark.timeout(200)
@pytest.mark.parametrize(("fault", "skip", "words"), [("cut", 0, "calibration"), ("http500", 3, "no experiment request")])
def test_explain_in_which_nothing_succeeded_is_failed(fault: str, skip: int, words: str, tmp_path: Path) -> None:
    """cut from the start: the calibration fails; http500 after it: every experiment request is refused
    (refusals are answers, so no dead-server stop) — no experiment request succeeded either way."""
    with FakeServer(fault=fault, fault_skip=skip, ttft_s=0.002, itl_s=0.001).running() as srv:
        code, out, err = _cli([*EXPLAIN, srv.url], tmp_path)
    assert code == 3, err[-2000:]
    lines = _error_lines(err)
    assert len(lines) == 1 and words in lines[0], err
    run = _one_run(tmp_path)
    assert run["status"] == "failed" and run["error"], run
    assert _records(run), run  # the records are kept
