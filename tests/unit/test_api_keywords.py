"""The Python API's keywords are the CLI's flags (phasescope.api): every option of every command that has an
API function — read from the click command tree, so a flag added later is checked too — is accepted in
snake case and reaches the command as that flag; the API's older spellings still work; a misspelt keyword is
an InputError with the nearest name, never a TypeError. The commands themselves are not run here (the command
line the API builds is recorded instead); tests/unit/test_results.py runs plan, ceiling, probe and bench."""

from __future__ import annotations

from typing import Any

import pytest

import phasescope
from phasescope import api
from phasescope.cli import command_tree

SKIP = set(api.OUTPUT_FLAGS)


@pytest.fixture
def argv(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each call's command line, the command not run."""
    seen: list[list[str]] = []

    def record(command: str, kind: Any, cmd: Any, words: list[str], overrides: dict[str, Any], progress: Any) -> Any:
        seen.append([command, *words] + [f"{k}={v}" for k, v in overrides.items()])
        return "result"

    monkeypatch.setattr(api, "_execute", record)
    tree = command_tree()  # built once here (the API builds it per call, registries read afresh)
    monkeypatch.setattr(api, "_command", lambda name: tree.commands[name])
    return seen


def _api_commands() -> dict[str, Any]:
    tree = command_tree()
    return {name: cmd for name, cmd in tree.commands.items() if name in api.__all__}


def test_the_commands_with_an_api_function() -> None:
    assert set(_api_commands()) == {"probe", "bench", "explain", "plan", "tune", "ceiling"}
    for name in _api_commands():
        assert getattr(phasescope, name) is not None and name in phasescope.__all__


def _sample(p: Any) -> Any:
    return ["7"] if getattr(p, "multiple", False) else "7"


def test_every_flag_of_every_command_is_a_keyword(argv: list[list[str]]) -> None:
    checked = 0
    for name, cmd in _api_commands().items():
        fn = getattr(api, name)
        for p in cmd.params:
            if p.param_type_name == "argument":
                assert fn(**{p.name: "x"}) == "result"
                assert argv[-1][-2:] == ["--", "x"], (name, p.name, argv[-1])
                continue
            for opt in (*p.opts, *p.secondary_opts):
                if opt in SKIP:
                    continue
                kw = opt.lstrip("-").replace("-", "_")
                value = True if p.is_flag else _sample(p)
                assert fn(**{kw: value}) == "result", (name, kw)
                line = argv[-1]
                assert opt in line or (p.is_flag and set(line) & set(p.opts + p.secondary_opts)), (name, kw, line)
                if not p.is_flag:
                    assert line[line.index(opt) + 1] == "7", (name, kw, line)
                checked += 1
    assert checked > 150  # the six commands' flags, long and short


@pytest.mark.parametrize("call, words", [
    (lambda: api.bench(duration=5), ["--duration", "5"]),  # issue 32: "unknown option" before
    (lambda: api.bench(duration_s=5, shape="ramp"), ["--duration", "5", "--load-shape", "ramp"]),  # the old names
    (lambda: api.bench(load_shape="ramp", store=False, nvml=False), ["--load-shape", "ramp", "--no-store", "--no-nvml"]),
    (lambda: api.plan(n=20, save=False), ["-n", "20", "--no-save"]),
    (lambda: api.plan(num_requests=20, no_save=True, duration_s=3), ["--num-requests", "20", "--no-save", "--duration", "3"]),
    (lambda: api.explain(budget=60), ["--budget", "60"]),  # a TypeError before
    (lambda: api.explain(budget_s=60, experiments=["queue", "batching"]), ["--budget", "60s", "--only", "queue,batching"]),
    (lambda: api.probe(prompt_tokens=[64, 512], warmup=False, save=False),
     ["--prompt-tokens", "64", "--prompt-tokens", "512", "--no-warmup", "--no-save"]),
    (lambda: api.probe("http://h:1", connect_timeout_s=3, out_dir="o"), ["--connect-timeout", "3", "--out", "o", "--", "http://h:1"]),
    (lambda: api.ceiling("llama-3.1-8b", ["h100-sxm", "l40s"], quant="fp8"),
     ["--model", "llama-3.1-8b", "--device", "h100-sxm", "--device", "l40s", "--quant", "fp8"]),
    (lambda: api.tune(param=["ub=32,512"], workload="bench"), ["--param", "ub=32,512", "--workload", "bench"]),
])
def test_flags_and_old_spellings_reach_the_command(call: Any, words: list[str], argv: list[list[str]]) -> None:
    call()
    line = argv[-1][1:]
    for w in words:
        assert w in line, (w, line)
    assert [x for x in line if x.startswith("-")] == [w for w in words if w.startswith("-")], line


def test_a_config_field_no_flag_sets_is_passed_as_given(argv: list[list[str]]) -> None:
    api.bench(abort_after_errors=3)
    assert argv[-1] == ["bench", "abort_after_errors=3"]


@pytest.mark.parametrize("call, near", [
    (lambda: api.bench(num_promts=8), "num_prompts"), (lambda: api.probe(max_token=8), "max_tokens"),
    (lambda: api.explain(budgett="1m"), "budget"), (lambda: api.plan(modle="x"), "model"),
    (lambda: api.ceiling("llama-3.1-8b", contxt=8), "context"), (lambda: api.tune(parm=["ub=1"]), "param"),
])
def test_a_misspelt_keyword_is_an_input_error_with_the_nearest_name(call: Any, near: str, argv: list[list[str]]) -> None:
    with pytest.raises(phasescope.InputError) as exc:
        call()
    msg = str(exc.value)
    assert f"did you mean {near!r}?" in msg and msg.count(",") < 3, msg  # the nearest name, not the list
    assert not argv  # nothing ran


def test_keywords_lists_the_flags_then_the_old_names() -> None:
    kws = api.keywords("bench")
    assert {"duration", "load_shape", "num_prompts", "no_store"} <= set(kws) and "json" not in kws
    assert kws.index("duration") < kws.index("duration_s")  # the flags first
