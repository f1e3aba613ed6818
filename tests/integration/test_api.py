"""The Python API's surface (docs/api.md): exported names, one clear error for an unknown option, and
``phasescope.probe`` / ``plan`` / ``tune`` being the API functions themselves whatever was imported first
(each case in a fresh interpreter, since import order is what would break it): no implementation package
shares an API function's name, so no module-type trick keeps the name callable. (Before the packages were
renamed, ``import phasescope.tune.run`` turned ``phasescope.tune`` into a module that could not be called.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

import phasescope


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("first", ["", "import phasescope.probing.runner as r\n", "from phasescope.probing import runner\n",
                                   "import phasescope.planning.sim\n", "from phasescope.planning.api import run_plan\n",
                                   "import phasescope.tuning.run\n"])
def test_probe_and_plan_are_the_api_functions_whatever_was_imported_first(first: str) -> None:
    out = _fresh(first + "import types, phasescope, phasescope.api as api\n"
                 "print(phasescope.probe is api.probe, phasescope.plan is api.plan, phasescope.tune is api.tune,\n"
                 "      type(phasescope) is types.ModuleType)\n"
                 "doc = phasescope.plan(model='llama-3.1-8b', device='h100-sxm', rate=2, num_requests=20, save=False)\n"
                 "print(doc['kind'], doc['summary']['completed'] if 'completed' in doc['summary'] else doc['summary'].get('n'))\n"
                 "import phasescope.probing.runner as r; print(r.__name__, phasescope.probe is api.probe)\n")
    lines = out.split("\n")
    assert lines[0] == "True True True True", out
    assert lines[1].startswith("plan "), out
    assert lines[2] == "phasescope.probing.runner True", out
    import pkgutil

    subpackages = {m.name for m in pkgutil.iter_modules(phasescope.__path__)}
    assert not subpackages & set(phasescope.__all__), subpackages & set(phasescope.__all__)


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
