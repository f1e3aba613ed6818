"""bench's twin on the behaviour fake (issue 36 item 4): probe the fake, then bench it unchanged (the twin
flags nothing) and bench a slower fake on the same URL behind the probe's back (the twin flags the shortfall).
The fake's designed truth is a 2× slower prefill and a 4× slower decode: 4× stays above the band even when other
work takes up to half the cores more than during the probe; beyond that the twin says the host changed
(``HOST_MAX_DELTA``), which is the answer a test beside other tests must accept. The verdicts come from intervals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from typer.testing import CliRunner

from phasescope.cli import app
from phasescope.planning import twin
from phasescope.testing.behaviour_fake import Behaviour, BehaviourFake, running_behaviour_fake

#: the fake's designed server: 50 µs per prompt token, 8 ms decode steps, 8 slots
FAST = dict(slots=8, prefix_cache=False, overhead_s=0.002, prefill_s_per_token=5e-5, decode_step_s=0.008, metrics=False)
SLOW = {**FAST, "prefill_s_per_token": 1e-4, "decode_step_s": 0.032}


def _json(args: list[str]) -> dict[str, Any]:
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _bench(url: str) -> dict[str, Any]:
    return _json(["bench", url, "--api", "openai", "-n", "16", "--max-concurrency", "2", "--input-len", "512",
                  "--output-len", "24", "--no-server-metrics", "--json"])


def test_twin_flags_a_slower_server_and_nothing_on_the_same_server(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "runs.db"))
    with running_behaviour_fake(Behaviour(**FAST)) as fake:
        url, port = fake.url, fake.port
        nothing = _json(["bench", url, "--api", "openai", "-n", "4", "--input-len", "64", "--output-len", "4",
                         "--no-server-metrics", "--json"])
        probe = _json(["probe", url, "--api", "openai", "-p", "256,1024", "-n", "24", "--repeat", "3", "--json"])
        same = _bench(url)
    # no stored probe yet: one line of why, nothing predicted
    assert nothing["twin"]["available"] is False and "no stored probe" in nothing["twin"]["why"]
    t = same["twin"]
    assert t["available"] and t["calibration_run_id"] == probe["run_id"] and t["calibration_kind"] == "probe"
    assert t["flagged"] == [], _rows(t)
    assert not any(w["kind"] == "twin_shortfall" for w in same["warnings"])
    with BehaviourFake(Behaviour(**SLOW), port=port).running() as slow:
        assert slow.url == url
        half = _bench(url)
    h = half["twin"]
    assert h["calibration_run_id"] == probe["run_id"]
    verdicts = {r["metric"]: r["verdict"] for r in h["metrics"]}
    if h["host_share_delta"] > twin.HOST_MAX_DELTA:  # other work moved in between: no verdict, and it says why
        assert set(verdicts.values()) == {"cannot tell"} and h["flagged"] == [], _rows(h)
        assert all("the host, not the server, changed" in r["why"] for r in h["metrics"]), _rows(h)
        return
    if h["host_busy"]:  # a busy host widens every band (past 80 %: every metric "cannot tell", saying why)
        assert "below" not in verdicts.values(), _rows(h)  # a slower server is never called faster
        if (h["host_other_share"] or 1.0) > twin.BUSY_MAX_SHARE:
            assert set(verdicts.values()) == {"cannot tell"} and h["flagged"] == [], _rows(h)
        if verdicts["tpot_p50"] != "above":
            return
    assert verdicts["tpot_p50"] == "above" and "tpot_p50" in h["flagged"], _rows(h)
    w = next(w for w in half["warnings"] if w["kind"] == "twin_shortfall" and w["evidence"]["metric"] == "tpot_p50")
    assert "at concurrency 2 this server's TPOT p50 is" in w["message"] and probe["run_id"] in w["message"]


def test_twin_from_a_run_that_is_not_there_is_one_line_and_exit_2(tmp_path) -> None:
    env = {**os.environ, "PHASESCOPE_STORE": str(tmp_path / "runs.db")}
    p = subprocess.run([sys.executable, "-m", "phasescope", "bench", "http://127.0.0.1:9", "-n", "1", "--twin-from",
                        "nope"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2, p.stderr
    assert "no run 'nope'" in p.stderr and "Traceback" not in p.stderr


def _rows(b: dict[str, Any]) -> str:
    """The twin's verdicts in one line (a failed assertion's message)."""
    return f"host {b.get('host_other_share')} Δ{b.get('host_share_delta')}: " + "; ".join(
        f"{r['metric']} {r['predicted_ms']:.0f} [{r['band_ms'][0]:.0f}-{r['band_ms'][1]:.0f}] vs "
        f"[{r['measured_ci_ms'][0]:.0f}-{r['measured_ci_ms'][1]:.0f}] {r['verdict']}" for r in b.get("metrics") or [])


def _bench_llamacpp(url: str) -> dict[str, Any]:
    return _json(["bench", url, "--api", "llamacpp", "-n", "24", "--max-concurrency", "8", "--input-len", "1024",
                  "--output-len", "48", "--no-server-metrics", "--json"])


def test_twin_flags_half_the_slots_behind_the_probes_back(monkeypatch, tmp_path) -> None:
    # llama-server's /props says total_slots: the probe stores 8, the server later runs 4 (--parallel halved).
    # Designed truth: decode steps cost 8 ms whatever the batch, so at concurrency 8 four slots decode half as
    # many tokens per step: each request waits a whole wave for a slot, E2E about 1.9x (10 µs per prompt token)
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "runs.db"))
    eight = {**FAST, "flavour": "llamacpp", "slots": 8, "prefill_s_per_token": 1e-5}
    with running_behaviour_fake(Behaviour(**eight)) as fake:
        url, port = fake.url, fake.port
        probe = _json(["probe", url, "--api", "llamacpp", "-p", "1024,4096", "-n", "16", "--repeat", "5", "--json"])
        same = _bench_llamacpp(url)
    with BehaviourFake(Behaviour(**{**eight, "slots": 4}), port=port).running():
        half = _bench_llamacpp(url)
    assert probe["server_build"]["total_slots"] == 8 and half["server_build"]["total_slots"] == 4
    t, h = same["twin"], half["twin"]
    assert t["policy"] == "llamacpp" and t["slots_assumed"] == 8 and t["flagged"] == [], _rows(t)
    assert h["slots_assumed"] == 8 and h["slots_source"].startswith("the calibration run")
    verdicts = {r["metric"]: r["verdict"] for r in h["metrics"]}
    # every request waits for a slot: E2E and TTFT above the band, unless the host is busy (its share widens every
    # band, and past 80 % every metric reads "cannot tell"); decode runs at the calibrated speed, never "above"
    assert "below" not in verdicts.values() and verdicts["tpot_p50"] != "above", _rows(h)
    if h["host_busy"] and verdicts["e2el_p50"] != "above":
        return  # nothing claimed, nothing to warn about
    assert verdicts["e2el_p50"] == "above", _rows(h)
    assert verdicts["ttft_p50"] in ("above", "cannot tell"), _rows(h)
    assert any(w["kind"] == "twin_shortfall" and "check max sequences / slots (the twin assumed 8)" in w["fix"]
               for w in half["warnings"])
