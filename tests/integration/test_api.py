"""The Python API's surface (docs/api.md): exported names, one clear error for an unknown option, and
``phasescope.probe`` / ``phasescope.plan`` staying the API functions although they are also the names
of subpackages (each case in a fresh interpreter, since import order is what breaks it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import phasescope


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("first", ["", "import phasescope.probe.runner as r\n", "from phasescope.probe import runner\n",
                                   "import phasescope.plan.sim\n", "from phasescope.plan.api import run_plan\n"])
def test_probe_and_plan_stay_the_api_functions_whatever_was_imported_first(first: str) -> None:
    out = _fresh(first + "import inspect, phasescope\n"
                 "print(callable(phasescope.probe), 'url' in inspect.signature(phasescope.probe).parameters)\n"
                 "doc = phasescope.plan(model='llama-3.1-8b', device='h100-sxm', rate=2, num_requests=20, save=False)\n"
                 "print(doc['kind'], doc['summary']['completed'] if 'completed' in doc['summary'] else doc['summary'].get('n'))\n"
                 "import phasescope.probe.runner as r; print(r.__name__)\n")
    lines = out.split("\n")
    assert lines[0] == "True True", out
    assert lines[1].startswith("plan "), out
    assert lines[2] == "phasescope.probe.runner", out


def test_every_exported_name_is_there_and_errors_share_one_base() -> None:
    for name in phasescope.__all__:
        assert getattr(phasescope, name) is not None, name
    for err in (phasescope.InputError, phasescope.TargetError, phasescope.ConnectError, phasescope.AuthError,
                phasescope.EngineError, phasescope.OutputError):
        assert issubclass(err, phasescope.PhasescopeError)


@pytest.mark.parametrize("call", [lambda: phasescope.bench(num_promts=3), lambda: phasescope.plan(modle="x")])
def test_an_unknown_option_is_one_clear_input_error(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(phasescope.InputError, match="unknown option"):
        call()


def test_ceiling_is_the_ceiling_command() -> None:
    from phasescope.theory.report import ceiling_report, resolve_devices, resolve_model

    got = phasescope.ceiling("llama-3.1-8b", "h100-sxm", dtype="fp8", tp=2)
    want = ceiling_report(resolve_model(model="llama-3.1-8b", dtype="fp8"), resolve_devices(["h100-sxm"], None),
                          quant="fp8", tp=2)
    assert got == want
    row = got["devices"][0]
    assert row["decode_ceiling_tok_s"] <= row["bandwidth_roof_tok_s"]


def test_the_flat_surface_is_cheap_to_import() -> None:
    # every public name lives on the package (__all__); importing it loads no CLI, console, HTTP or numeric stack
    out = _fresh("import sys, phasescope\n"
                 "print(sorted(m for m in ('rich', 'typer', 'aiohttp', 'numpy', 'phasescope.cli', "
                 "'phasescope.experiments.suite') if m in sys.modules))\n"
                 "print(all(getattr(phasescope, n) is not None for n in phasescope.__all__))\n"
                 "print(issubclass(phasescope.ExplainReport, phasescope.Result), phasescope.ProbeResult.command)\n")
    assert out.split("\n")[:3] == ["[]", "True", "True probe"], out
