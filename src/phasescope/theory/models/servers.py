"""A ModelSpec from what a running server says about its model (the bodies are fetched by :mod:`phasescope.apis`;
this module only reads them): Ollama ``POST /api/show``, llama-server ``GET /v1/models`` ``meta`` and ``GET /props``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from phasescope.errors import InputError, UnknownModelError
from phasescope.theory.models.gguf import spec_from_gguf, spec_from_gguf_metadata
from phasescope.theory.models.spec import ModelSpec
from phasescope.theory.quant import get_quant


def from_ollama_show(show: dict[str, Any], *, model: str | None = None) -> ModelSpec:
    """A ModelSpec from Ollama's ``POST /api/show`` body (``model_info`` holds GGUF keys; ``details`` the quant)."""
    if not isinstance(show, dict) or not isinstance(show.get("model_info"), dict):
        raise UnknownModelError("Ollama /api/show answer has no model_info")
    md = dict(show["model_info"])
    details = show.get("details") or {}
    qlevel = str(details.get("quantization_level") or "")
    name = model or str(md.get("general.basename") or md.get("general.name") or "ollama-model")
    spec = spec_from_gguf_metadata(md, name=name, source="Ollama /api/show model_info", origin="ollama")
    if qlevel:
        try:
            spec = replace(spec, dtype=get_quant(qlevel).name)
        except InputError:
            spec = replace(spec, notes=spec.notes + (f"unknown quantization_level {qlevel!r}",))
    if spec.is_moe:
        spec = replace(spec, decode_read_params=None,
                       notes=spec.notes + ("MoE: per-token active weights unknown from /api/show",))
    return spec


_LLAMACPP_FTYPE = re.compile(r"^\s*(\w+?)\s*-\s*(\w+)\s*$")


def _llamacpp_ftype(text: Any) -> str | None:
    """llama.cpp's ``llama_model_ftype_name`` text (``"Q4_K - Medium"``, ``"Q8_0"``, ``"F16"``) → a quant name."""
    if not isinstance(text, str) or not text.strip():
        return None
    m = _LLAMACPP_FTYPE.match(text)
    name = f"{m.group(1)}_{m.group(2)[0]}" if m else text.strip()
    try:
        return get_quant(name).name
    except InputError:
        return None


def from_llamacpp_meta(meta: dict[str, Any], *, model: str = "llama.cpp model") -> ModelSpec:
    """A size-only ModelSpec from llama-server's ``GET /v1/models`` ``data[].meta``
    (``n_params``, ``size`` = tensor bytes, ``n_embd``, ``n_vocab``, ``n_ctx_train``, ``ftype``)."""
    if not isinstance(meta, dict) or not meta.get("size") or not meta.get("n_params"):
        raise UnknownModelError("llama.cpp model meta lacks n_params/size")
    n_params = int(meta["n_params"])
    size = float(meta["size"])
    d = meta.get("n_embd")
    vocab = meta.get("n_vocab")
    return ModelSpec(
        id=model,
        name=model,
        origin="llamacpp",
        source="llama-server /v1/models meta (size = tensor bytes)",
        hidden_size=int(d) if d else None,
        vocab_size=int(vocab) if vocab else None,
        max_position_embeddings=int(meta["n_ctx_train"]) if meta.get("n_ctx_train") else None,
        total_params=n_params,
        active_params=n_params,
        decode_read_params=n_params,
        dtype=_llamacpp_ftype(meta.get("ftype")),
        file_weight_bytes=size,
        file_read_bytes_batch1=size,
        notes=(f"ftype {meta.get('ftype')}", "layer shapes unknown: KV and attention terms omitted"),
    )


def from_llamacpp_props(props: dict[str, Any], *, meta: dict[str, Any] | None = None) -> ModelSpec:
    """From llama-server ``GET /props``: the GGUF at ``model_path`` when it is readable here, else ``meta``."""
    path = props.get("model_path") if isinstance(props, dict) else None
    if path and Path(str(path)).is_file():
        return spec_from_gguf(str(path))
    if meta is not None:
        return from_llamacpp_meta(meta, model=Path(str(path)).stem if path else "llama.cpp model")
    raise UnknownModelError("llama-server /props has no readable model_path and no /v1/models meta was given")

