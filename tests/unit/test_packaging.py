"""pyproject.toml: a plain install gets bench's fast client (uvloop's loop, httptools' receive path)
wherever those install, and ``[fast]`` stays the alias older install lines name (issue 32 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")
requirements = pytest.importorskip("packaging.requirements")

PROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
LINUX = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
         "platform_python_implementation": "CPython", "implementation_name": "cpython"}
WINDOWS = {**LINUX, "sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"}
PYPY = {**LINUX, "platform_python_implementation": "PyPy", "implementation_name": "pypy"}


def _req(lines: list[str], name: str) -> requirements.Requirement:
    reqs = [requirements.Requirement(x) for x in lines]
    found = [r for r in reqs if r.name == name]
    assert len(found) == 1, (name, lines)
    return found[0]


def _installs(r: requirements.Requirement, env: dict[str, str]) -> bool:
    return r.marker is None or r.marker.evaluate(env)


@pytest.mark.parametrize("name", ["uvloop", "httptools"])
def test_a_plain_install_gets_the_fast_client_on_cpython_linux(name: str) -> None:
    r = _req(PROJECT["dependencies"], name)
    assert _installs(r, LINUX) and not _installs(r, PYPY), r  # C extensions: CPython only


def test_uvloop_is_left_out_where_it_does_not_install() -> None:
    assert not _installs(_req(PROJECT["dependencies"], "uvloop"), WINDOWS)


def test_the_fast_extra_is_kept_as_an_alias() -> None:
    fast = {requirements.Requirement(x).name for x in PROJECT["optional-dependencies"]["fast"]}
    assert fast == {"uvloop", "httptools"}
