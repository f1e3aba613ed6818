"""ModelSpec: the shapes a ceiling needs, from whatever the user has.

:func:`load_model_spec` accepts

* a catalog id (``phasescope models``; package data ``phasescope/data/models.csv`` with a source per row),
* a local Hugging Face ``config.json`` (or the directory holding one),
* a local ``.gguf`` file: the header only (:mod:`phasescope.theory.gguf_header`), with exact tensor sizes,

and :func:`from_ollama_show` / :func:`from_llamacpp_meta` turn what a running server says into a spec.
Anything else raises :class:`~phasescope.errors.InputError` / :class:`~phasescope.errors.UnknownModelError`
with one clear sentence.

One module a job:

* :mod:`~phasescope.theory.models.spec` — the :class:`ModelSpec` type and the size-only ``--weights-gb`` spec,
* :mod:`~phasescope.theory.models.params` — parameter counting from shapes (:func:`estimate_params`),
* :mod:`~phasescope.theory.models.hf_config` — the Hugging Face ``config.json`` parser,
* :mod:`~phasescope.theory.models.gguf` — GGUF metadata (a file's header, or the same keys from a server),
* :mod:`~phasescope.theory.models.servers` — adapters for what Ollama and llama-server report,
* :mod:`~phasescope.theory.models.catalog` — the catalog,
* :mod:`~phasescope.theory.models.names` — served names read as catalog shapes, and the local HF cache,
* :mod:`~phasescope.theory.models.load` — :func:`load_model_spec`, the one door from what a user types.

``from phasescope.theory.models import X`` keeps working for every name in ``__all__`` (users import them).
"""

from __future__ import annotations

from phasescope.theory.models.catalog import get_catalog_ids_match, get_catalog_model, list_models
from phasescope.theory.models.load import load_model_spec
from phasescope.theory.models.gguf import spec_from_gguf
from phasescope.theory.models.hf_config import spec_from_config, spec_from_config_file
from phasescope.theory.models.names import (find_cached_config, near_misses, resolve_served_name,
                                            spec_for_served_name)
from phasescope.theory.models.params import estimate_params
from phasescope.theory.models.servers import from_llamacpp_meta, from_llamacpp_props, from_ollama_show
from phasescope.theory.models.spec import ModelSpec, spec_from_weights

__all__ = [
    "ModelSpec",
    "load_model_spec",
    "get_catalog_model",
    "get_catalog_ids_match",
    "list_models",
    "spec_from_config",
    "spec_from_config_file",
    "spec_from_gguf",
    "spec_from_weights",
    "from_ollama_show",
    "from_llamacpp_meta",
    "from_llamacpp_props",
    "estimate_params",
    "resolve_served_name",
    "spec_for_served_name",
    "find_cached_config",
    "near_misses",
]
