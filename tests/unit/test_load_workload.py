"""Workloads (random, shared prefix, ShareGPT, JSONL) and sweep helpers — pure logic."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from phasescope.errors import InputError
from phasescope.prompting import WordPromptMaker
from phasescope.load.sweep import find_knee, parse_slo, saturation, sweep_rates, table_row, within_slo
from phasescope.load.workload import jsonl_workload, random_workload, sharegpt_workload


async def _count_words(text: str) -> int:
    return len(text.split())


def test_random_lengths_and_prefix_groups() -> None:
    items = asyncio.run(random_workload(12, input_len=20, output_len=8, maker=WordPromptMaker(), range_ratio=0.5,
                                        prefix_len=5, prefix_groups=3, seed=1))
    assert len(items) == 12
    for i, it in enumerate(items):
        assert it.group == i % 3
        assert 10 + 5 <= it.input_len <= 30 + 5  # type: ignore[operator]
        assert len(it.prompt.split()) == it.input_len  # one word per token with the word maker
        assert 4 <= it.output_len <= 12
        assert it.input_len_source == "estimate"
    # same group → same 5-word prefix; different groups differ
    pre = [" ".join(it.prompt.split()[:5]) for it in items]
    assert pre[0] == pre[3] == pre[6] and pre[0] != pre[1]
    again = asyncio.run(random_workload(12, input_len=20, output_len=8, maker=WordPromptMaker(), range_ratio=0.5,
                                        prefix_len=5, prefix_groups=3, seed=1))
    assert [it.prompt for it in again] == [it.prompt for it in items]  # seeded
    assert len({it.prompt for it in items}) == 12  # unique suffixes


def test_sharegpt_filters_like_vllm(tmp_path: Path) -> None:
    convs = [
        {"conversations": [{"from": "human", "value": "w " * 10}, {"from": "gpt", "value": "x " * 20}]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "y " * 20}]},  # prompt < 4
        {"conversations": [{"from": "human", "value": "w " * 1100}, {"from": "gpt", "value": "y " * 5}]},  # > 1024
        {"conversations": [{"from": "human", "value": "only one turn"}]},
    ]
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(convs))
    items = asyncio.run(sharegpt_workload(p, 3, count=_count_words, seed=0))
    assert len(items) == 3 and all(it.input_len == 10 and it.output_len == 20 for it in items)
    fixed = asyncio.run(sharegpt_workload(p, 2, count=_count_words, output_len=7))
    assert all(it.output_len == 7 for it in fixed)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError):
        asyncio.run(sharegpt_workload(bad, 1, count=_count_words))
    with pytest.raises(InputError):
        asyncio.run(sharegpt_workload(tmp_path / "missing.json", 1, count=_count_words))


def test_jsonl_prompts(tmp_path: Path) -> None:
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "a b c", "output_len": 5}\n\n{"prompt": "d e", "max_tokens": 9}\n{"prompt": "f"}\n')
    items = asyncio.run(jsonl_workload(p, None, default_output_len=3, count=_count_words))
    assert [(it.prompt, it.output_len, it.input_len) for it in items] == [("a b c", 5, 3), ("d e", 9, 2), ("f", 3, 1)]
    assert len(asyncio.run(jsonl_workload(p, 7, default_output_len=3))) == 7  # cycled
    for text in ('{"x": 1}\n', '{"prompt": "a", "output_len": "many"}\n', "nope\n"):
        p.write_text(text)
        with pytest.raises(InputError):
            asyncio.run(jsonl_workload(p, None, default_output_len=3))


def test_sweep_helpers() -> None:
    assert parse_slo(["ttft:500", "itl:50"]) == {"ttft": 500.0, "itl": 50.0}
    assert parse_slo("ttft:500 itl:50") == {"ttft": 500.0, "itl": 50.0}
    with pytest.raises(InputError):
        parse_slo(["qps:5"])
    assert sweep_rates(1.0, 5.0, 3) == pytest.approx([2.0, 3.0, 4.0])
    assert sweep_rates(5.0, 5.0, 3) == []
    slo = {"ttft": 100.0, "itl": 20.0}
    assert within_slo({"p99_ttft_ms": 90.0, "p99_itl_ms": 19.0}, slo) is True
    assert within_slo({"p99_ttft_ms": 90.0, "p99_itl_ms": 21.0}, slo) is False
    assert within_slo({"p99_ttft_ms": None, "p99_itl_ms": 1.0}, slo) is False
    assert within_slo({}, {}) is None
    rows = [
        table_row("synchronous", None, {"request_throughput": 1.0, "p99_ttft_ms": 50, "p99_itl_ms": 10}, slo),
        table_row("throughput", None, {"request_throughput": 9.0, "p99_ttft_ms": 900, "p99_itl_ms": 90}, slo),
        table_row("rate", 3.0, {"request_throughput": 3.0, "p99_ttft_ms": 80, "p99_itl_ms": 15}, slo),
        table_row("rate", 5.0, {"request_throughput": 4.9, "p99_ttft_ms": 99, "p99_itl_ms": 19}, slo),
        table_row("rate", 7.0, {"request_throughput": 6.0, "p99_ttft_ms": 300, "p99_itl_ms": 40}, slo),
    ]
    knee = find_knee(rows, slo)
    assert knee is not None and knee["requested_rate"] == 5.0
    assert saturation(rows) == 7.0  # 6.0 < 0.9 × 7
    assert find_knee(rows, {}) is None
