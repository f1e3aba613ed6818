"""``phasescope engine status``: what is installed, where, and which binary a command would run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from phasescope.errors import EngineError
from phasescope.engine import paths
from phasescope.engine.binary import binary_version, find_llama_server
from phasescope.engine.build import read_stamp
from phasescope.engine.model import bundled_model_status


def _file_info(p: Path) -> dict[str, Any]:
    return {"path": str(p), "exists": p.exists(), "size_bytes": p.stat().st_size if p.exists() else None}


def engine_status(llama_server: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A JSON-able description of the engine cache. Never raises for a missing part: it reports it.

    Keys: ``engine_dir``, ``source`` (pinned sdist, sha256, whether downloaded/unpacked),
    ``build`` (build dir, per-binary path/exists/size, the stamp), ``llama_server`` (the binary that
    would run: path, where it came from — ``argument`` | ``env`` | ``cache`` — its version, or
    ``error``), ``ready`` (bool: a runnable llama-server and a verified model), ``model`` (the bundled
    GGUF), ``quantized`` (files made by ``engine quantize``), ``synthetic`` (files made by ``engine synth``), ``logs_dir``.
    """
    sdist = paths.download_dir() / paths.SDIST_FILE
    server: dict[str, Any] = {"path": None, "source": None, "version": None, "error": None}
    try:
        binary = find_llama_server(llama_server)
        server["path"] = str(binary)
        server["source"] = (
            "argument" if llama_server else "env" if os.environ.get(paths.ENV_LLAMA_SERVER) else "cache"
        )
        server["version"] = binary_version(binary)
    except EngineError as exc:
        server["error"] = str(exc)
    model = bundled_model_status()
    quant = sorted(paths.quant_dir().glob("*.gguf")) if paths.quant_dir().exists() else []
    synth_dir = paths.models_dir() / "synthetic"
    synth = sorted(synth_dir.glob("*.gguf")) if synth_dir.exists() else []
    return {
        "engine_dir": str(paths.engine_dir()),
        "ready": server["version"] is not None and bool(model["verified"]),
        "source": {
            "package": f"{paths.SDIST_NAME}=={paths.SDIST_VERSION}",
            "sha256": paths.SDIST_SHA256,
            "sdist": _file_info(sdist),
            "unpacked": paths.llama_cpp_source_dir().exists(),
            "llama_cpp_dir": str(paths.llama_cpp_source_dir()),
        },
        "build": {
            "dir": str(paths.build_dir()),
            "binaries": {t: _file_info(paths.bin_dir() / t) for t in paths.TARGETS},
            "stamp": read_stamp(),
        },
        "llama_server": server,
        "model": model,
        "quantized": [_file_info(q) for q in quant],
        "synthetic": [_file_info(q) for q in synth],
        "logs_dir": str(paths.logs_dir()),
    }
