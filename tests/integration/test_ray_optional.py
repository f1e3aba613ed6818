"""Ray is optional: nothing imports it until ``--ray`` is used, and then a missing Ray is one line.
Also the ``bench [URL] [ADDRESS] --ray`` positional rules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from phasescope.errors import InputError
from phasescope.cli._scale_out import check_scale_out_flags
from phasescope.load.ray import driver as ray_driver

NO_RAY = "import sys; sys.modules['ray'] = None; sys.argv = ['phasescope'] + sys.argv[1:]; " \
         "import runpy; runpy.run_module('phasescope', run_name='__main__')"


def test_core_imports_do_not_import_ray() -> None:
    code = ("import sys; import phasescope.cli, phasescope.load.bench, phasescope.load.ray, "
            "phasescope.load.routing; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_ray_flag_without_ray_installed_is_one_line_with_the_install_command() -> None:
    p = subprocess.run([sys.executable, "-c", NO_RAY, "bench", "http://127.0.0.1:9", "--ray", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == "phasescope: error: --ray needs Ray: pip install 'phasescope[ray]'"


@pytest.fixture
def no_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_driver, "import_ray", lambda local=False: None)


@pytest.mark.parametrize("url, extra, want", [
    (None, None, (None, None)),  # embedded engine, local cluster
    ("http://h:8000", None, ("http://h:8000", None)),
    ("10.0.0.5:6379", None, (None, "10.0.0.5:6379")),  # no scheme → the Ray address
    ("http://h:8000", "ray://head:10001", ("http://h:8000", "ray://head:10001")),
    ("auto", "https://h", ("https://h", "auto")),  # either order when the target has its scheme
    ("h:8000", "head:6379", ("h:8000", "head:6379")),  # two bare values: URL then ADDRESS
    ("http://h:8000", "local", ("http://h:8000", None)),
])
def test_ray_positionals(no_import: None, url: str | None, extra: str | None, want: tuple[str | None, str | None]) -> None:
    u, _, _, ray, addr = check_scale_out_flags(url, extra, [], "round-robin", True)
    assert ray and (u, addr) == want


def test_scale_out_flag_errors(no_import: None) -> None:
    with pytest.raises(InputError, match="two target URLs"):
        check_scale_out_flags("http://a", "http://b", [], "round-robin", True)
    with pytest.raises(InputError, match="needs --ray"):
        check_scale_out_flags("http://a", "head:6379", [], "round-robin", False)
    with pytest.raises(InputError, match="unknown --route"):
        check_scale_out_flags("http://a", None, ["http://b"], "fastest", False)
    with pytest.raises(InputError, match="given twice"):
        check_scale_out_flags("http://a:1", None, ["http://a:1/"], "random", False)
    with pytest.raises(InputError, match="--sweep"):
        check_scale_out_flags("http://a", None, ["http://b"], "random", False, sweep=True)
    assert check_scale_out_flags(None, None, ["http://b"], "random", False, sweep=True)[1] == ["http://b"]
