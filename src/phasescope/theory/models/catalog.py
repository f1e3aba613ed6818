"""The model catalog (package data ``phasescope/data/models.csv``, a source per row): look-up by id or
repository name. What the user typed becomes a ModelSpec in :func:`phasescope.theory.models.load.load_model_spec`.
"""

from __future__ import annotations

import csv
import difflib
import io
from functools import lru_cache
from importlib.resources import files

from phasescope.errors import UnknownModelError
from phasescope.theory.models.spec import ModelSpec


def _i(row: dict[str, str], key: str) -> int | None:
    v = (row.get(key) or "").strip()
    return int(float(v)) if v else None


def _row_to_spec(row: dict[str, str]) -> ModelSpec:
    return ModelSpec(
        id=row["id"],
        name=row.get("hf_repo") or row["id"],
        origin="catalog",
        source=row.get("source") or "",
        architecture=row.get("architecture") or None,
        n_layers=_i(row, "num_hidden_layers"),
        hidden_size=_i(row, "hidden_size"),
        n_heads=_i(row, "num_attention_heads"),
        n_kv_heads=_i(row, "num_key_value_heads"),
        head_dim=_i(row, "head_dim"),
        vocab_size=_i(row, "vocab_size"),
        intermediate_size=_i(row, "intermediate_size"),
        tie_word_embeddings=(row.get("tie_word_embeddings") or "").strip().lower() == "true",
        max_position_embeddings=_i(row, "max_position_embeddings"),
        total_params=_i(row, "num_parameters"),
        active_params=_i(row, "active_parameters"),
        decode_read_params=_i(row, "decode_read_params"),
        n_experts=_i(row, "n_routed_experts") or 0,
        n_experts_per_tok=_i(row, "n_experts_per_tok") or 0,
        n_shared_experts=_i(row, "n_shared_experts") or 0,
        moe_intermediate_size=_i(row, "moe_intermediate_size"),
        n_moe_layers=_i(row, "n_moe_layers") or 0,
        routed_expert_params=_i(row, "routed_expert_params") or 0,
        sliding_window=_i(row, "sliding_window"),
        n_sliding_layers=_i(row, "n_sliding_layers") or 0,
        kv_lora_rank=_i(row, "kv_lora_rank"),
        qk_rope_head_dim=_i(row, "qk_rope_head_dim"),
        q_lora_rank=_i(row, "q_lora_rank"),
        qk_nope_head_dim=_i(row, "qk_nope_head_dim"),
        v_head_dim=_i(row, "v_head_dim"),
        dtype=(row.get("dtype") or "bf16").strip() or "bf16",
        expert_dtype=(row.get("expert_dtype") or "").strip() or None,
        notes=tuple(n for n in [(row.get("attention_notes") or "").strip()] if n),
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, ModelSpec]:
    text = files("phasescope").joinpath("data/models.csv").read_text(encoding="utf-8")
    return {r["id"]: _row_to_spec(r) for r in csv.DictReader(io.StringIO(text))}


def list_models() -> list[ModelSpec]:
    """Every catalog model, in file order."""
    return list(_catalog().values())


def get_catalog_model(model_id: str) -> ModelSpec:
    """A catalog model by id (case-insensitive; the HF repo name works too), else UnknownModelError."""
    cat = _catalog()
    key = model_id.strip().lower()
    if key in cat:
        return cat[key]
    for spec in cat.values():
        if spec.name.lower() == key or spec.name.lower().split("/")[-1] == key:
            return spec
    close = difflib.get_close_matches(key, list(cat), n=3, cutoff=0.5)
    hint = ("did you mean " + ", ".join(close) + "?") if close else "see `phasescope models`, or pass a config.json / .gguf path"
    raise UnknownModelError(f"unknown model {model_id!r}", hint=hint)


def get_catalog_ids_match(s: str) -> bool:
    """True when ``s`` is exactly a catalog id or HF repo name (case-insensitive); no fuzzy matching."""
    key = s.strip().lower()
    return any(key in (m.id, m.name.lower()) for m in _catalog().values())
