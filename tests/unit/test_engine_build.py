"""Pure parts of the engine install: tool discovery errors, configure flags,
quant-type names, log parsing. Running fake binaries: tests/integration/test_engine_build_scripts.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from phasescope.engine import build, paths
from phasescope.engine.binary import find_llama_server
from phasescope.engine.quantize import normalize_type, output_path
from phasescope.engine.server import build_args, describe_exit, last_error_line
from phasescope.errors import EngineError, InputError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_scripts import script  # noqa: E402  (its `cache` fixture comes through tests/conftest.py)




def test_missing_tools_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    with pytest.raises(EngineError) as ei:
        build.find_tools()
    msg = str(ei.value)
    assert "cmake" in msg and "C compiler" in msg and "C++ compiler" in msg and "ninja" in msg


def test_tools_next_to_python_come_first_and_make_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    sysbin = tmp_path / "sys"
    script(venv_bin / "cmake", "exit 0")
    for tool in ("cc", "c++", "make", "cmake"):
        script(sysbin / tool, "exit 0")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(sysbin))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    tools = build.find_tools()
    assert tools.cmake == venv_bin / "cmake"
    assert tools.generator == "Unix Makefiles" and tools.notes  # no ninja anywhere: slower, and it says so
    script(venv_bin / "ninja", "exit 0")
    tools = build.find_tools()
    assert tools.generator == "Ninja" and tools.make_program == venv_bin / "ninja"


def test_cmake_args_keep_the_network_and_amx_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_compiler_accepts", lambda cc, flags: True)
    monkeypatch.setattr(build, "_is_x86", lambda: True)
    tools = build.Tools(Path("/x/cmake"), "Ninja", Path("/x/ninja"), Path("/x/cc"), Path("/x/c++"))
    args = build.cmake_args(tools)
    for flag in ("-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"):
        assert flag in args
    assert f"-DCMAKE_C_FLAGS={build.AMX_OFF}" in args and f"-DCMAKE_CXX_FLAGS={build.AMX_OFF}" in args
    monkeypatch.setattr(build, "_is_x86", lambda: False)  # e.g. aarch64: the x86 flags would break the build
    assert "-DCMAKE_C_FLAGS=" in build.cmake_args(tools)


def test_expected_build_time_scales_with_jobs_and_generator() -> None:
    assert build.expected_build_s(2, "Ninja") == pytest.approx(335.0)  # 630 core-s / 2 + 20 (measured 315 s)
    assert build.expected_build_s(4, "Ninja") < build.expected_build_s(2, "Ninja")
    assert build.expected_build_s(2, "Unix Makefiles") > 2 * build.expected_build_s(2, "Ninja") - 40


def test_find_llama_server_order(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = script(paths.bin_dir() / "llama-server", "exit 0")
    assert find_llama_server() == cached
    env_exe = script(tmp_path / "env" / "llama-server", "exit 0")
    monkeypatch.setenv("PHASESCOPE_LLAMA_SERVER", str(env_exe))
    assert find_llama_server() == env_exe.resolve()
    arg_exe = script(tmp_path / "arg" / "llama-server", "exit 0")
    assert find_llama_server(arg_exe) == arg_exe.resolve()
    with pytest.raises(EngineError, match="--llama-server"):
        find_llama_server(tmp_path / "missing")


def test_quant_type_names(cache: Path) -> None:
    assert normalize_type("q8_0") == "Q8_0"
    with pytest.raises(InputError, match="unknown quantization type"):
        normalize_type("Q9")
    p = output_path(Path("/m/gemma-3-270m-q4_k_m.gguf"), "Q4_0", pure=True)
    assert p.name == "gemma-3-270m-q4_k_m-Q4_0-pure.gguf" and p.parent == paths.quant_dir()


def test_server_command_line_is_loopback_with_metrics_and_template() -> None:
    args = build_args(Path("/b/llama-server"), Path("/m.gguf"), 8080, parallel=4, ctx_size=16384, threads=2,
                      alias="gemma-3-270m", extra_args=("--flash-attn", "on"))
    joined = " ".join(args)
    assert "--host 127.0.0.1" in joined and "--port 8080" in joined and "--metrics" in args
    assert "--no-jinja --chat-template gemma" in joined and "--parallel 4 --ctx-size 16384" in joined
    assert args[-2:] == ["--flash-attn", "on"]


def test_log_parsing_and_exit_descriptions(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("load: loading\ngguf_init: failed to read tensor data\nmain: exiting\n")
    assert last_error_line(log) == "gguf_init: failed to read tensor data"
    log.write_text("just one line\n")
    assert last_error_line(log) == "just one line"
    assert last_error_line(tmp_path / "none.log") is None
    log.write_text("# cmd\n0.00.001.0 I srv x\n0.00.003.664 E gguf_init: failed to read key-value pairs\n"
                   "0.00.003.8 E srv  load_model: failed\n0.00.003.9 I srv cleaning up\n")
    assert last_error_line(log) == "gguf_init: failed to read key-value pairs ... srv  load_model: failed"
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(1) == "exit status 1"
    assert os.path.basename(str(paths.stamp_path())) == "installed.json"
