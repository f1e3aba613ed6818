"""Every hint about missing ceilings names flags that really give probe its ceilings (new-user pass, bug 2).

The report said "probe adds them when model and device are known: --model, --device", but ``--model``
is only the name requested: probe finds the shape from ``--model-spec``, a served name that is a
catalog id, or what the server says about its file. Each hint here is followed literally: the flags
it names, with a value each, are passed to a probe on a fake server, and the probe must then have
its ceilings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phasescope.probing import probe
from phasescope.testing import FakeServer
from cli_helpers import isolated_home  # noqa: F401  (isolated_home: the autouse fixture "_home")

#: a value for each flag a hint might name (the fake serves "fake-model", which is no catalog id)
VALUES = {"--model": "fake-model", "--model-spec": "smollm2-135m", "--device": "h100-sxm"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def _probe(tmp_path: Path, flags: dict[str, str]) -> dict:
    kw = {{"--model": "model", "--model-spec": "model_spec", "--device": "device"}[f]: v for f, v in flags.items()}
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.002).running() as srv:
        return probe(srv.url, api="openai", sizes=[20], max_tokens=4, repeat=1, warmup=False, save=False,
                     out_dir=tmp_path / "out", **kw)


def _follow(hint: str, tmp_path: Path, given: dict[str, str] | None = None) -> dict:
    named = FLAG.findall(hint)
    assert named, f"the hint names no flag: {hint!r}"
    unknown = [f for f in named if f not in VALUES]
    assert not unknown, f"the hint names {unknown}, not a probe ceiling input: {hint!r}"
    return _probe(tmp_path, {**(given or {}), **{f: VALUES[f] for f in named}})


def _report_hints() -> list[str]:
    from phasescope.report.ceiling_plots import plot_ceilings
    from phasescope.report.sections import _bench_card, _probe_card

    return [plot_ceilings([]), _probe_card([{"prompt_tokens": 20}], {}), _bench_card({})]


@pytest.mark.parametrize("which", range(3))
def test_each_report_hint_followed_gives_ceilings(which: int, tmp_path: Path) -> None:
    hint = _report_hints()[which]
    hint = hint[hint.find("probe"):]  # the part that tells what to run
    res = _follow(hint, tmp_path)
    assert res["ceilings"] is not None, (hint, res["ceilings_note"])


def test_probe_note_for_an_unknown_model_names_it_and_the_flag_that_works(tmp_path: Path) -> None:
    given = {"--model": "fake-model", "--device": "h100-sxm"}
    res = _probe(tmp_path, given)
    assert res["ceilings"] is None
    note = res["ceilings_note"]
    assert "fake-model" in note  # why --model did not help: the served name is no catalog id
    assert _follow(note, tmp_path, given)["ceilings"] is not None
