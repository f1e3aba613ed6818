"""The embedded engine: upstream llama.cpp ``llama-server`` built from the pinned source, with the
bundled Gemma 3 270M GGUF — the default target of every phasescope command.

``with running_engine() as eng: ...`` starts it on 127.0.0.1 and always stops it.
"""

from __future__ import annotations

from phasescope.engine.binary import find_llama_server, find_tool
from phasescope.engine.model import BUNDLED_MODEL_ALIAS, bundled_model_path, ensure_bundled_model
from phasescope.engine.server import EngineHandle, running_engine, start_engine

__all__ = [
    "BUNDLED_MODEL_ALIAS",
    "EngineHandle",
    "bundled_model_path",
    "ensure_bundled_model",
    "find_llama_server",
    "find_tool",
    "running_engine",
    "start_engine",
]
