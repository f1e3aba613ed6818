"""``phasescope hw`` measuring this machine for real (it compiles and runs a C bandwidth kernel) and
``ceiling -d local`` reading what it saved. Moved from tests/unit/test_theory_cli.py (it starts processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")


def test_hw_saves_local_device_used_by_ceiling(capsys, monkeypatch, _home: Path) -> None:
    # real kernels on a shared machine: their passes may disagree, so --force saves them whatever the spread
    # (the rule for saving is tested on synthetic passes in test_hw_profile.py)
    code, out, _ = run(["hw", "--size-mb", "8", "--repeats", "2", "--matmul-n", "128", "--force", "--json"],
                       capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    assert doc["saved"] is True and doc["profile"]["forced"] is True and "reason" not in doc
    bw = doc["measurement"]["bandwidth"]
    assert bw["best_gb_s"] >= bw["median_gb_s"] >= bw["min_gb_s"] > 0
    assert bw["method"] in ("c-threads", "numpy-threads") and len(bw["runs_gb_s"]) == 2
    assert doc["measurement"]["matmul"]["best_gflop_s"] > 0
    assert doc["device"]["mem_bandwidth_gb_s"] == pytest.approx(bw["best_gb_s"], rel=1e-3)
    # compute peaks: derived from flags x cores x clock, never below the measured GEMM
    assert doc["device"]["fp32_tflops"] * 1000 >= doc["measurement"]["matmul"]["best_gflop_s"] * 0.999
    assert "measured by `phasescope hw`" in doc["device"]["source"]
    assert Path(doc["saved_to"]) == _home / "local_device.json"
    code, out, _ = run(["ceiling", "--weights-gb", "1", "-d", "local", "--json"], capsys, monkeypatch)
    row = json.loads(out)["devices"][0]
    assert row["device"] == "local"
    assert row["bandwidth_roof_tok_s"] == pytest.approx(doc["device"]["mem_bandwidth_gb_s"] / 1.0)

    # --if-missing (make demo): a saved device is reused, nothing is re-measured
    code, out, err = run(["hw", "--if-missing", "--json"], capsys, monkeypatch)
    again = json.loads(out)
    assert code == 0 and again["skipped"] is True and again["measurement"] is None
    assert again["device"]["mem_bandwidth_gb_s"] == pytest.approx(doc["device"]["mem_bandwidth_gb_s"])
    assert "already measured" in err


def test_hw_if_missing_measures_when_nothing_saved(capsys, monkeypatch, _home: Path) -> None:
    code, out, _ = run(["hw", "--if-missing", "--size-mb", "8", "--repeats", "3", "--matmul-n", "64", "--json"],
                       capsys, monkeypatch)
    doc = json.loads(out)
    assert code == 0 and doc.get("skipped") is None and doc["measurement"]["bandwidth"]["best_gb_s"] > 0
    # saved exactly when its passes agreed and the host was quiet; otherwise it says why and saves nothing
    assert doc["saved"] is doc["stable"] and (_home / "local_device.json").exists() is doc["saved"]
    assert (doc["saved"] and "reason" not in doc) or (not doc["saved"] and doc["reason"])
