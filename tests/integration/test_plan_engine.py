"""`phasescope plan --calibrate-from` on records measured from the real embedded llama-server.

No timing assertions (machines are noisy; accuracy lives in benchmarks/plan_validation.py): the
test checks that real records flow through calibration into a simulation of the same server.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis.base import GenRequest, Target
from phasescope.measure.records import write_records
from phasescope.planning.build import cost_from_theory
from phasescope.planning.calibrate import calibrate
from phasescope.theory.models import load_model_spec


async def _probe(target: Target) -> list:
    rng = random.Random(3)
    client = get_client("llamacpp")
    recs = []
    async with new_session() as session:
        for n in (32, 32, 128, 128):
            ids = [rng.randrange(1000, 200000) for _ in range(n)]
            req = GenRequest(prompt="", prompt_token_ids=ids, prompt_tokens_expected=n, max_tokens=6,
                             ignore_eos=True, cache_prompt=False)
            recs.append(await client.send(session, target, req))
    return recs


@pytest.mark.engine
def test_calibrate_from_real_llama_server_records(engine, tmp_path) -> None:
    target = Target(base_url=engine.url, api="llamacpp", model=engine.model_alias, engine="llamacpp")
    recs = asyncio.run(_probe(target))
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    spec = load_model_spec(str(engine.model_path))
    base = cost_from_theory(spec, "cpu", kv_pool_tokens=engine.ctx_size)
    cal = calibrate(recs, base)
    assert cal.n_prefill_points == 4 and cal.n_decode_points == 4
    assert cal.cost.flops_eff > 0 and cal.cost.bw_eff > 0
    assert cal.api_overhead_s >= 0
    # the calibrated model reproduces its own probe points' order: longer prompts take longer
    assert cal.cost.prefill_time_s(128) > cal.cost.prefill_time_s(32)

    path = tmp_path / "probe.jsonl"
    write_records(path, recs)
    out = subprocess.run(
        [sys.executable, "-m", "phasescope", "plan", "--calibrate-from", str(path), "--model", str(engine.model_path),
         "--device", "cpu", "--concurrency", "2", "-n", "6", "--input-len", "64", "--output-len", "8",
         "--json", "--no-save"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["calibration"]["n_prefill_points"] == 4
    assert doc["config"]["scheduler"]["policy"] == "llamacpp"  # llama.cpp timings select the slot scheduler
    assert doc["config"]["scheduler"]["max_num_seqs"] == 4
    assert doc["summary"]["completed"] == 6


def test_calibrate_from_missing_file_is_one_line_error(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "phasescope", "plan", "--calibrate-from", str(tmp_path / "nope.jsonl"), "--no-save"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().startswith("phasescope: error:") and "Traceback" not in out.stderr
