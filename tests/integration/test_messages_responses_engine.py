"""``--api anthropic`` (/v1/messages) and ``--api responses`` (/v1/responses) on the embedded
llama-server, which serves both (llama.cpp ``tools/server/server.cpp`` at 0c1e570 routes them).

Both go through the model's chat template, as ``--api chat`` does, so probe's prompt counts (the
server's usage, not subtracted) are openai's plus the template's tokens, the same number at every
size and for both APIs; bench measures that overhead with one request and subtracts it, so there
``--input-len`` is the prompt count exactly, as openai's token-id prompts are by construction.
Output counts are openai's in both. Kept small (5 CLI runs, ~60 s on 2 busy cores)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


def _json(*args: str, cwd) -> dict:
    p = subprocess.run([sys.executable, "-m", "phasescope", *args, "--json"], capture_output=True, text=True,
                       timeout=240, cwd=cwd)
    assert p.returncode == 0, (args, p.stderr[-2000:])
    return json.loads(p.stdout)


def test_probe_and_bench_count_like_openai(engine, tmp_path):
    probe, bench = {}, {}
    for api in ("openai", "anthropic", "responses"):
        res = _json("probe", engine.url, "--api", api, "-p", "16,40", "-n", "4", "--repeat", "1", "--no-save",
                    "--out", str(tmp_path / f"p-{api}"), cwd=tmp_path)
        assert res["api"] == api
        probe[api] = [(s["prompt_tokens"], s["output_tokens"], s["prompt_tokens_source"]) for s in res["sizes"]]
    for api in ("anthropic", "responses"):
        res = _json("bench", engine.url, "--api", api, "--num-prompts", "2", "--input-len", "24", "--output-len", "4",
                    "--max-concurrency", "2", "--warmup", "0", "--no-store", "--out", str(tmp_path / f"b-{api}"),
                    cwd=tmp_path)
        bench[api] = (res["completed"], res["total_input_tokens"], res["total_output_tokens"])
    # probe: the server's own counts; the two new APIs count alike (one template), openai's plus the
    # same template overhead at both sizes; every output is the 4 asked for, as on openai
    assert probe["anthropic"] == probe["responses"], probe
    overhead = {a[0] - o[0] for a, o in zip(probe["anthropic"], probe["openai"])}
    assert len(overhead) == 1 and 0 < overhead.pop() <= 64, probe
    assert [o for _, o, _ in probe["openai"]] == [o for _, o, _ in probe["anthropic"]] == [4, 4], probe
    assert [p for p, _, _ in probe["openai"]] == [16, 40], probe
    assert all(src == "usage" for rows in probe.values() for _, _, src in rows), probe
    # bench: the overhead subtracted, so --input-len 24 is 24 as the server counts it (openai's by construction)
    assert bench["anthropic"] == bench["responses"] == (2, 48, 8), bench
