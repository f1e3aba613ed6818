"""The one check of the ceiling inputs a user names (``--model-spec``, ``--device``), run before a
command sends its first request or starts a server.

``probe``, ``explain``/``experiment`` and ``tune`` (its probe workload) resolve these only once the
measurement is done, to set it against its ceilings; an id that does not exist would then throw the
whole measurement away. :func:`check_ceiling_inputs` raises the same one-line
:class:`~phasescope.errors.InputError` (unknown device, unknown model, unreadable file, ``local``
never measured) up front. :data:`CEILING_FLAGS` is how the reports name these flags.
"""

from __future__ import annotations

def load_draft_spec(text: str | None) -> object | None:
    """``--draft-model-spec``: the draft model's ModelSpec (catalog id, config.json or .gguf), None when not
    given; an unreadable or unknown one is one :class:`~phasescope.errors.InputError` line naming the flag."""
    if text is None:
        return None
    from phasescope.errors import InputError, PhasescopeError
    from phasescope.theory.models import load_model_spec

    if not str(text).strip():
        raise InputError("--draft-model-spec is empty: give a catalog id, a config.json or a .gguf")
    try:
        return load_model_spec(text)
    except PhasescopeError as exc:
        raise InputError(f"--draft-model-spec: {exc}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--draft-model-spec {text!r}: {exc}") from None


#: the flags that give probe its ceilings, for every hint that says how to get them: ``--model`` is only
#: the name requested (its shape is found only when that name is a catalog id, or llama.cpp/Ollama
#: describe the served file), so the hints name ``--model-spec``
CEILING_FLAGS = "--model-spec, --device"


def check_ceiling_inputs(model_spec: str | None = None, device: str | None = None) -> None:
    """Raise :class:`~phasescope.errors.InputError` when a given ``model_spec`` or ``device`` cannot
    be resolved; ``None`` or empty (discover it, as the commands read it) is always fine."""
    if model_spec:
        from phasescope.theory.models import load_model_spec

        load_model_spec(model_spec)
    if device:
        from phasescope.theory.devices import get_device

        get_device(device)
