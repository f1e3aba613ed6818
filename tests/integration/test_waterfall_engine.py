"""The llama.cpp waterfall on the embedded engine: each request's prefill is the server's own
``timings.prompt_ms`` (read back from the stored record's raw timings), its computed and cached tokens are
``prompt_n`` and ``cache_n``, queue is never negative, and ``show --request`` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


def _cli(args: list[str], env: dict[str, str]) -> str:
    p = subprocess.run([sys.executable, "-m", "phasescope", *args], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_llamacpp_waterfalls_prefill_is_the_servers_prompt_ms(engine, tmp_path):
    env = dict(os.environ, PHASESCOPE_STORE=str(tmp_path / "runs.db"), PHASESCOPE_HOME=str(tmp_path / "home"))
    probe = json.loads(_cli(["probe", engine.url, "--prompt-tokens", "64,512", "--max-tokens", "8", "--repeat", "3",
                             "--json"], env))
    wf = probe["waterfall"]
    assert wf["spans_joined"] == 0 and wf["unattributed"] == 0 and wf["requests"] >= 6
    from phasescope.measure.aggregate import measured
    from phasescope.measure.waterfall import request_waterfall
    from phasescope.store import open_store

    recs = measured(open_store(tmp_path / "runs.db").load_records(probe["run_id"]))
    for r in recs:
        w = request_waterfall(r)
        assert w is not None
        raw = r.server["raw"]
        assert w["clamped"] is False, w
        assert w["prefill_s"] == pytest.approx(raw["prompt_ms"] / 1e3, abs=1e-9)
        assert (w["computed_tokens"], w["cached_tokens"]) == (raw["prompt_n"], raw["cache_n"])
        assert w["queue_s"] >= 0
        assert w["connect_s"] + w["network_s"] + w["queue_s"] + w["prefill_s"] + w["decode_s"] == \
            pytest.approx(w["e2e_s"], abs=1e-9)
    shown = _cli(["show", probe["run_id"], "--request", recs[-1].id], env)
    assert "prefill" in shown and "queue (derived)" in shown
