"""The output seam (phasescope.cli._output): a format registered in one place renders every command's result.

The test registers a throw-away format from this file alone — no command module touched — and sees
``plan``, ``ceiling`` and ``probe`` (its server call replaced by a fixed document) print through it, its
name in ``--help``; a bad ``--format`` or ``--json`` with another format is one line and exit 2."""

from __future__ import annotations

import importlib
import json
import re
from typing import Any, Iterator

import pytest

from phasescope.cli import _output, run

PLAN = ["plan", "--model", "llama-3.1-8b", "--device", "h100-sxm", "-n", "20", "--no-save"]
CEILING = ["ceiling", "--model", "llama-3.1-8b", "-d", "h100-sxm"]


@pytest.fixture
def oneline() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def render(result: Any) -> None:  # the whole format: one line per result
        seen.append(result)
        print(f"ONELINE {result.command} {len(result.to_json())} keys")

    _output.register_format("oneline", render, "one line per result (a test's)")
    try:
        yield seen
    finally:
        _output.FORMATS.pop("oneline", None)


def test_a_format_registered_in_one_place_renders_every_command(oneline: list[Any], capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("phasescope.probing"), "probe",
                        lambda url, **kw: {"target": url, "sizes": [], "verdict": None, "run_id": None})
    for argv, command in ((PLAN, "plan"), (CEILING, "ceiling"), (["probe", "http://127.0.0.1:9"], "probe")):
        assert run([*argv, "--format", "oneline"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"ONELINE {command} ") and out.count("\n") == 1, out
        assert oneline[-1].command == command
    assert [type(r).__name__ for r in oneline] == ["PlanResult", "CeilingReport", "ProbeResult"]
    assert run(["plan", "--help"]) == 0
    assert "oneline (one line per result" in re.sub(r"[│\s]+", " ", capsys.readouterr().out)  # --help reads the registry


def test_json_is_the_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*CEILING, "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert run([*CEILING, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == a and a["devices"][0]["device"] == "h100-sxm"


@pytest.mark.parametrize("extra, says", [(["--format", "jsno"], "--format 'jsno': did you mean 'json'?"),
                                         (["--json", "--format", "console"], "--json is --format json")])
def test_a_bad_format_is_one_line_and_exit_2(extra: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*CEILING, *extra]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and says in out.err, out.err
