"""``load_model_spec``: one door from what a user types (catalog id, served name, config.json, .gguf) to a
ModelSpec. It sits above :mod:`~phasescope.theory.models.catalog` and :mod:`~phasescope.theory.models.names`,
so neither imports the other's caller."""

from __future__ import annotations

from pathlib import Path

from phasescope.errors import InputError
from phasescope.safeio import user_file
from phasescope.theory.models import names
from phasescope.theory.models.catalog import get_catalog_ids_match, get_catalog_model
from phasescope.theory.models.gguf import spec_from_gguf
from phasescope.theory.models.hf_config import spec_from_config_file
from phasescope.theory.models.spec import ModelSpec


def load_model_spec(spec: str) -> ModelSpec:
    """A ModelSpec from a catalog id, a ``config.json`` path (or its directory), or a ``.gguf`` path."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("empty model spec")
    s = spec.strip()
    p = Path(s).expanduser()
    try:
        return _load_model_spec(s, p)
    except OSError as exc:  # a name too long for a path, a file we may not read
        raise InputError(f"cannot read the model spec {s[:80]!r}: {exc.strerror or exc}") from None


def _load_model_spec(s: str, p: Path) -> ModelSpec:
    if p.exists() and not p.is_dir():
        user_file(p, "model file")  # a FIFO or a device (/dev/zero) is named as such, never read
    if s.lower().endswith(".gguf"):
        return spec_from_gguf(p)
    if s.lower().endswith(".json") or p.is_dir():
        return spec_from_config_file(p)
    if p.is_file():
        with p.open("rb") as fh:
            magic = fh.read(4)
        if magic == b"GGUF":
            return spec_from_gguf(p)
        return spec_from_config_file(p)
    if s.startswith((".", "/", "~")) or s.lower().endswith((".json", ".gguf")):
        raise InputError(f"file not found: {s}")  # a path that does not exist
    if get_catalog_ids_match(s):
        return get_catalog_model(s)
    # a name as a server reports it: its cached config.json, else the catalog shape it normalises to
    spec = names.spec_for_served_name(s)
    if spec is not None:
        return spec
    raise names.no_shape_error(s)
