"""Speculative decoding on the project's fakes with a designed acceptance: each verified step drafts 4
tokens and keeps 3, 1, 0, 2 of them in turn (truth: FakeServer.spec_counts, the fake's own counters).
bench and probe report the run-level acceptance from what each server exports — vLLM's
spec_decode counters, SGLang's spec_accept_length / spec_accept_rate gauges, llama.cpp's
timings.draft_n / draft_n_accepted — and it matches the truth within 2 %. Nothing here asserts a
duration: the numbers come from counters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phasescope.cli import run as cli_run
from phasescope.probing import probe
from phasescope.testing.fakeserver import FakeServer

DRAFT, ACCEPTED = 4, (3, 1, 0, 2)


def _truth(log: list[Any]) -> tuple[int, int]:
    return sum(g.spec_drafted for g in log), sum(g.spec_accepted for g in log)


def _bench(capsys: Any, url: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = cli_run(["bench", url, "-n", "8", "-c", "2", "--input-len", "32", "--output-len", "41", "--json",
                    "--metrics-interval", "0.1", "--no-store", "--no-twin"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_bench_acceptance_matches_the_fakes_truth(flavor: str, capsys: Any, tmp_path: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeServer(flavor=flavor, ttft_s=0.002, itl_s=0.004, spec_draft=DRAFT, spec_accepted=ACCEPTED).running() as srv:
        code, d = _bench(capsys, srv.url)
        drafted, accepted = _truth(list(srv.log))
    assert code == 0, d.get("warnings")
    sd = d["spec_decode"]
    assert sd["source"].startswith(f"{flavor}:spec_")
    assert drafted > 0
    # the designed acceptance (6 of 16 per cycle), through whatever the server exports
    assert sd["acceptance_rate"] == pytest.approx(accepted / drafted, rel=0.02)
    assert sd["tokens_per_step"] == pytest.approx(1 + sum(ACCEPTED) / len(ACCEPTED), rel=0.05)
    assert set(sd) >= {"drafted", "accepted", "acceptance_rate", "mean_accepted_len", "tokens_per_step", "source"}


def test_bench_without_speculation_has_no_spec_decode(capsys: Any, tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.002).running() as srv:
        code, d = _bench(capsys, srv.url)
    assert code == 0 and "spec_decode" not in d


def test_probe_reads_llamacpp_draft_counts_per_request(tmp_path: Any) -> None:
    with FakeServer(flavor="llamacpp", ttft_s=0.002, itl_s=0.002, spec_draft=DRAFT,
                    spec_accepted=ACCEPTED).running() as srv:
        res = probe(srv.url, api="openai", sizes=[50], max_tokens=33, repeat=2, warmup=False, save=False,
                    out_dir=tmp_path / "o")
        log = [g for g in srv.log if g.spec_drafted]
    drafted, accepted = _truth(log)
    sd = res["spec_decode"]
    assert sd["source"] == "llamacpp_timings"
    assert (sd["drafted"], sd["accepted"]) == (drafted, accepted)  # exact: the server's own per-request counts
    assert res["sizes"][0]["spec_decode"]["accepted"] == accepted
    # 32 decoded tokens per request, each step emitting its accepted drafts + 1
    assert sd["tokens_per_step"] == pytest.approx((accepted + sd["steps"]) / sd["steps"])
