"""JSON helpers used by every output: NaN/inf → null, dataclasses → dicts, numpy scalars → numbers."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Return a structure ``json.dumps`` accepts, with non-finite floats as ``None``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, (str, bytes)):  # numpy scalars
        return to_jsonable(obj.item())
    return obj


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """JSON text of ``obj``, encodable and with every secret masked in its string values
    (:func:`phasescope.redact.redact_obj`: keys and numbers are data, never rewritten — a key ``mean``
    leaves ``mean_ttft_ms`` and ``1234`` leaves ``12345`` alone): every JSON document phasescope
    prints or writes passes through here."""
    from phasescope.redact import encodable, redact_obj

    return encodable(json.dumps(redact_obj(to_jsonable(obj)), indent=indent, ensure_ascii=False, allow_nan=False))
