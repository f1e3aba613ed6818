"""Finding the engine binaries: an explicit path, ``$PHASESCOPE_LLAMA_SERVER``, or the build cache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from phasescope.errors import EngineError
from phasescope.engine.paths import ENV_LLAMA_SERVER, bin_dir


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_llama_server(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The llama-server to run.

    Order: ``explicit`` (``--llama-server PATH``), then ``$PHASESCOPE_LLAMA_SERVER``, then the
    binary ``phasescope engine install`` built in the cache. Raises :class:`EngineError` saying
    what to do when none is there.
    """
    for source, value in (("--llama-server", explicit), (ENV_LLAMA_SERVER, os.environ.get(ENV_LLAMA_SERVER))):
        if value:
            path = Path(value).expanduser()
            if not _executable(path):
                raise EngineError(f"{source} {path}: no executable llama-server there")
            return path.resolve()
    cached = bin_dir() / "llama-server"
    if _executable(cached):
        return cached
    raise EngineError(
        f"llama-server is not built (looked for {cached}); run `phasescope engine install` "
        f"or pass --llama-server PATH / set {ENV_LLAMA_SERVER}"
    )


def find_tool(name: str, llama_server: Path | None = None) -> Path:
    """A sibling binary (``llama-bench``, ``llama-quantize``...): next to llama-server, else in the cache."""
    candidates = []
    if llama_server is not None:
        candidates.append(llama_server.parent / name)
    env = os.environ.get(ENV_LLAMA_SERVER)
    if env:
        candidates.append(Path(env).expanduser().parent / name)
    candidates.append(bin_dir() / name)
    for c in candidates:
        if _executable(c):
            return c
    raise EngineError(f"{name} is not built (looked for {candidates[-1]}); run `phasescope engine install`")


def binary_version(path: Path, timeout_s: float = 30.0) -> str:
    """The version ``<binary> --version`` prints, e.g. ``0.5.0-dev (build 1, commit 0c1e570)``.

    Raises :class:`EngineError` when the binary does not run (missing libraries, wrong CPU...).
    """
    try:
        proc = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except OSError as exc:
        raise EngineError(f"{path} does not run: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{path} --version did not finish within {timeout_s:.0f} s") from exc
    text = (proc.stdout + "\n" + proc.stderr).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    version = next((ln for ln in lines if ln.startswith("version:")), None)
    if proc.returncode != 0 or version is None:
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise EngineError(f"{path} --version failed: {last}")
    return version.split(":", 1)[1].strip()
