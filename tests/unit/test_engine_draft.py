"""``--engine-draft-model`` (issue 33 item 2: the embedded engine speculates with a draft model, llama-server
``-md``): checked before anything starts — one line, exit 2 — and passed to the engine as ``--spec-draft-model``."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasescope.engine.spec import check_engine_draft, spec_args
from phasescope.errors import InputError


def _gguf(tmp_path: Path) -> Path:
    p = tmp_path / "draft.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 28)
    return p


def test_a_gguf_is_taken_by_its_absolute_path_and_becomes_llama_servers_md(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _gguf(tmp_path)
    path = check_engine_draft("draft.gguf", None)
    assert path == str(tmp_path / "draft.gguf")
    assert spec_args(None, path) == ["--spec-draft-model", path, "--spec-type", "draft-simple"]
    assert check_engine_draft(None, None) is None


@pytest.mark.parametrize("case, why", [("url", "embedded engine only"), ("missing", "cannot read"),
                                       ("not_gguf", "not a GGUF")])
def test_bad_draft_models_are_one_input_error(case: str, why: str, tmp_path: Path) -> None:
    f = _gguf(tmp_path)
    if case == "missing":
        f = tmp_path / "nope.gguf"
    elif case == "not_gguf":
        f = tmp_path / "config.json"
        f.write_text("{}")
    with pytest.raises(InputError, match=why):
        check_engine_draft(str(f), "http://127.0.0.1:9" if case == "url" else None)


@pytest.mark.parametrize("cmd", ["probe", "bench"])
def test_the_cli_refuses_a_draft_model_with_a_url_in_one_line(cmd: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from phasescope.cli import run

    assert run([cmd, "http://127.0.0.1:9", "--engine-draft-model", str(_gguf(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "--engine-draft-model applies to the embedded engine only" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_tune_varies_the_draft_model_as_a_parameter(tmp_path: Path) -> None:
    # issue 33 item 2: tune exposes the draft model too (`--param draft=none,FILE.gguf`)
    from phasescope.tuning import launch
    from phasescope.tuning.spec import canonical_name, _check_value, ENGINE_PARAMS

    f = _gguf(tmp_path)
    p = ENGINE_PARAMS[canonical_name("draft")]
    assert _check_value(p, "none") == "none" and _check_value(p, str(f)) == str(f)
    with pytest.raises(InputError, match="--param draft: .*not a GGUF"):
        _check_value(p, str(tmp_path / "x.json") if (tmp_path / "x.json").write_text("{}") else "")
    assert launch.engine_kwargs({"draft": str(f)})["draft_model"] == str(f)
    assert launch.engine_kwargs({"draft": "none"})["draft_model"] is None
