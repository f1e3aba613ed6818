"""docs/api.md is true: its Python blocks run as written, in order, against the embedded engine.

The doc's own asserts check the physics it claims (TTFT grows with the prompt, a clean short bench);
this file adds that what it printed was computed, not constant: the probe's result, the stored run and
the raw records agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_every_python_block_of_the_api_doc_runs_on_the_embedded_engine(engine, capsys: pytest.CaptureFixture[str]) -> None:
    code = blocks()
    assert len(code) >= 5, "docs/api.md lost its walk-through"
    ns: dict[str, object] = {"__name__": "api_doc"}
    for i, src in enumerate(code):
        exec(compile(src, f"docs/api.md block {i + 1}", "exec"), ns)  # noqa: S102 — running the doc is the test
    out = capsys.readouterr().out
    result, run, records = ns["result"], ns["run"], ns["measured"]
    sizes = result.sizes  # type: ignore[attr-defined]
    assert type(result).__name__ == "ProbeResult" and result.to_json()["sizes"] == sizes  # type: ignore[attr-defined]
    # the probe's numbers are the ones printed, and the stored run holds its measured requests
    for s in sizes:
        assert f"{s['prompt_tokens']:>5} prompt tokens: TTFT {s['ttft_s'] * 1000:.0f} ms" in out
    assert run.id == result["run_id"] and run.kind == "probe"  # type: ignore[attr-defined,index]
    assert len(records) == sum(s["requests"] for s in sizes), (len(records), sizes)  # type: ignore[arg-type]
    assert "InputError: bench() got unknown option 'num_promts'; did you mean 'num_prompts'?" in out
    assert ns["summary"]["completed"] == 8  # type: ignore[index]

