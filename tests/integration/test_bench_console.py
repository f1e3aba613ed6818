"""bench's console table says only what the run measured: no 'concurrency cap' queue without a cap, no
'achieved send rate' for an all-at-once burst, and the event-gap block folded when it is the ITL."""

from __future__ import annotations

from typer.testing import CliRunner

from phasescope.cli import app
from phasescope.testing.fakeserver import FakeServer


def _bench(url: str, *extra: str) -> str:
    r = CliRunner().invoke(app, ["bench", url, "-n", "6", "--input-len", "16", "--output-len", "4", "--no-store",
                                 *extra], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_the_table_shows_what_this_run_measured(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PHASESCOPE_RUNS_DIR", str(tmp_path))
    with FakeServer(flavor="vllm", ttft_s=0.01, itl_s=0.002).running() as srv:
        burst = _bench(srv.url)
        capped = _bench(srv.url, "--max-concurrency", "2", "--request-rate", "50")
    assert "Client-side queue" not in burst and "Client-side queue (concurrency cap)" in capped
    line = next(ln for ln in burst.splitlines() if ln.startswith("Achieved send rate"))
    assert "all at once" in line, line
    rate = next(ln for ln in capped.splitlines() if ln.startswith("Achieved send rate"))
    assert float(rate.split()[-1]) > 0, rate
    # one token per SSE event on vLLM: the gap block would repeat the ITL block number for number
    gap = next(ln for ln in burst.splitlines() if ln.startswith("Gap between streamed events"))
    assert "= ITL" in gap, gap
