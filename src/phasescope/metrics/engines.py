"""The engines' Prometheus tables, read from :mod:`phasescope.apis.engines`.

What each engine exports on ``/metrics`` is part of its wire format, so the tables live in ``apis/``
(detection reads them too); this module keeps the ``phasescope.metrics.engines`` names working.
"""

from __future__ import annotations

from phasescope.apis.engines import (CANONICAL, LLAMACPP, PROFILES, SGLANG, TGI, VLLM, EngineProfile, Source,
                                     SourceKind, detect_engine, engine_aliases)

__all__ = ["CANONICAL", "LLAMACPP", "PROFILES", "SGLANG", "TGI", "VLLM", "EngineProfile", "Source", "SourceKind",
           "detect_engine", "engine_aliases"]
