"""report: the "TTFT by turn" section of a conversation bench run, from its stored ``turns`` rows."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report_synth import sequential_run  # noqa: E402

from phasescope.report.html import write_report  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402

TURNS = [
    {"turn": 1, "n": 4, "prompt_tokens_mean": 120.0, "cached_tokens_mean": 0.0, "median_ttft_ms": 40.0,
     "p99_ttft_ms": 52.5, "median_itl_ms": 10.0, "decode_tok_s": 100.0},
    {"turn": 2, "n": 4, "prompt_tokens_mean": 312.0, "cached_tokens_mean": 184.0, "median_ttft_ms": 44.0,
     "p99_ttft_ms": 61.25, "median_itl_ms": 10.5, "decode_tok_s": 95.0},
    {"turn": 3, "n": 3, "prompt_tokens_mean": 1504.0, "cached_tokens_mean": None, "median_ttft_ms": 90.0,
     "p99_ttft_ms": 130.0, "median_itl_ms": 11.0, "decode_tok_s": 90.0},
]


def _info(run_id: str, summary: dict) -> RunInfo:
    return RunInfo(id=run_id, kind="bench", status="complete", started_at=0.0, model="synthetic-model",
                   engine="llamacpp", engine_version="b1", device="local", api="openai",
                   target="http://127.0.0.1:9", summary=summary)


def _section(html: str) -> str:
    m = re.search(r"<h3>TTFT by turn · conv1</h3>(.*?)</table>(.*?)(<h|<div id|<pre)", html, re.S)
    assert m, "no TTFT-by-turn section"
    return m.group(1) + m.group(2)


def test_conversation_run_shows_ttft_by_turn(tmp_path):
    recs = sequential_run(6, seed=1)
    out = tmp_path / "r.html"
    write_report([(_info("conv1", {"median_ttft_ms": 44.0, "turns": TURNS}), recs)], out)
    sec = _section(out.read_text())
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", sec)
    assert rows == [
        ("1", "4", "120", "0", "40.0 ms", "52.5 ms"),
        ("2", "4", "312", "184", "44.0 ms", "61.2 ms"),
        ("3", "3", "1,504", "— (not reported)", "90.0 ms", "130.0 ms"),
    ]
    assert "2.25× turn 1" in sec  # 90 / 40, the last turn against the first


def test_run_without_turns_has_no_section(tmp_path):
    out = tmp_path / "r.html"
    write_report([(_info("plain", {"median_ttft_ms": 44.0}), sequential_run(6, seed=1))], out)
    assert "TTFT by turn" not in out.read_text()
