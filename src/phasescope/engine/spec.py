"""The embedded engine's speculative decoding (issue 33): llama-server flags from a short name.

``spec`` = one of :data:`SPEC_TYPES` adds ``--spec-type <name>``
(``common/speculative.cpp``'s names at the pin; ``ngram`` is short for ``ngram-mod``: n-gram lookup in
the context, no draft model. ``ngram-simple`` at its defaults (12-token lookup, 48-token draft) drafted
nothing on a 221-token repetitive prompt with the bundled Gemma; ``ngram-mod`` drafted 62 and kept 62 of
64 decoded tokens, 167 tok/s against 33 without); ``draft_model`` adds ``--spec-draft-model`` (``-md``, type
``draft-simple`` unless ``spec`` names another). Off by default, so the engine serves as before.
Each response then carries ``timings.draft_n`` / ``draft_n_accepted`` and ``/slots`` says ``speculative: true``.
"""

from __future__ import annotations

import os

from phasescope.errors import EngineError

__all__ = ["SPEC_ALIASES", "SPEC_TYPES", "check_engine_draft", "check_engine_spec", "spec_args"]

#: ``--spec-type`` values at the pinned llama.cpp (``common/speculative.cpp``), and their short names
SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple")
SPEC_ALIASES = {"ngram": "ngram-mod", "draft": "draft-simple", "none": "none", "off": "none"}


def spec_args(spec: str | None = None, draft_model: str | os.PathLike[str] | None = None) -> list[str]:
    """The speculative-decoding flags for ``spec`` (a :data:`SPEC_TYPES` name or alias) and a draft model
    (module docstring); ``[]`` when both are None or ``spec`` is ``none``/``off``."""
    name = None
    if spec is not None:
        key = str(spec).strip().lower()
        name = SPEC_ALIASES.get(key, key)
        if name not in SPEC_TYPES and name != "none":
            raise EngineError(f"unknown speculation {spec!r}: expected none, ngram, draft or one of {', '.join(SPEC_TYPES)}")
        if name == "none":
            name = None
    out: list[str] = []
    if draft_model is not None:
        out += ["--spec-draft-model", str(draft_model)]
        name = name or "draft-simple"
    elif name == "draft-simple":
        raise EngineError("speculation 'draft' needs a draft model (llama-server -md), which phasescope does not bundle: use ngram")
    if name:
        out += ["--spec-type", name]
    return out


def check_engine_spec(spec: str | None, url: str | None) -> str | None:
    """``--engine-spec``: its canonical :data:`SPEC_TYPES` name (None for none/off/unset); an
    :class:`~phasescope.errors.InputError` when a URL is given (it only starts the embedded engine), the
    name is unknown, or it needs a draft model."""
    from phasescope.errors import InputError

    if spec is None:
        return None
    if url is not None:
        raise InputError("--engine-spec applies to the embedded engine only (omit the URL)")
    try:
        args = spec_args(spec)
    except EngineError as exc:
        raise InputError(f"--engine-spec: {exc}") from None
    return args[-1] if args else None


def check_engine_draft(path: str | os.PathLike[str] | None, url: str | None) -> str | None:
    """``--engine-draft-model``: the draft GGUF's absolute path (llama-server ``--spec-draft-model``, ``-md``);
    an :class:`~phasescope.errors.InputError` when a URL is given (it only starts the embedded engine) or the
    file is missing or not a GGUF. The draft must share the model's vocabulary; llama-server checks that
    when it starts and its last line says why it refused."""
    from phasescope.errors import InputError

    if path is None:
        return None
    if url is not None:
        raise InputError("--engine-draft-model applies to the embedded engine only (omit the URL)")
    p = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise InputError(f"--engine-draft-model: cannot read {p}: {exc.strerror or exc}") from None
    if magic != b"GGUF":
        raise InputError(f"--engine-draft-model: {p} is not a GGUF file (llama-server -md needs one)")
    return p
