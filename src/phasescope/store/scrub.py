"""Credentials never reach the store: secret-named keys dropped, URLs redacted, the target's key masked.

Used by :class:`phasescope.store.RunStore` for the row and by :class:`phasescope.store.Recording` for
every record; the text-level patterns (``Bearer …``, ``sk-…``) are :func:`phasescope.redact.redact`'s.
"""

from __future__ import annotations

import re
from typing import Any

from phasescope.jsonutil import to_jsonable

#: parameter/summary keys whose values are secrets (whole key names, so ``max_tokens`` stays)
_SECRET_KEY = re.compile(
    r"^(x[_-])?(api[_-]?key|apikey|token|(access|auth|bearer|refresh|session|id)[_-]?token|secret|client[_-]?secret"
    r"|passw(or)?d|authorization|auth[_-]?header|cookie|credentials?)$",
    re.I,
)
URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)


def redact_target(url: str) -> str:
    from phasescope.apis.base import redact_url

    try:
        return redact_url(url)
    except ValueError:
        return "<unparseable url>"


def scrub(obj: Any, secrets_: tuple[str, ...] = ()) -> Any:
    """A JSON-able copy of ``obj`` with secret-named keys dropped, URLs redacted and every known
    secret string replaced by ``***``."""
    from phasescope.redact import redact_field, register

    for sec in secrets_:
        register(sec)  # idempotent: a Target registered its key already

    def walk(o: Any) -> Any:
        if isinstance(o, dict):  # keys are data: dropped when they name a secret, never rewritten
            return {k: walk(v) for k, v in o.items() if not _SECRET_KEY.search(str(k))}
        if isinstance(o, list):
            return [walk(v) for v in o]
        if isinstance(o, str):  # a strong key wherever it is, a weak one ("1234", "mean") as a whole token
            s = redact_target(o) if URL_RE.match(o) and ("@" in o or "?" in o) else o
            return redact_field(s)
        return o

    return walk(to_jsonable(obj))


def secrets_of(target: Any) -> tuple[str, ...]:
    out: list[str] = []
    key = getattr(target, "api_key", None)
    if key:
        out.append(str(key))
    url = getattr(target, "base_url", None) if target is not None and not isinstance(target, str) else target
    if isinstance(url, str):
        from urllib.parse import parse_qsl, urlsplit

        parts = urlsplit(url)
        if parts.password:
            out.append(parts.password)
        for _, v in parse_qsl(parts.query):
            if len(v) >= 6:  # query values may be keys; short ones (e.g. "1") would wreck text
                out.append(v)
    return tuple(s for s in out if len(s) >= 4)


def scrub_name(name: Any) -> Any:
    """A server-supplied name (a model id) fit for the store: secrets masked, control characters dropped."""
    from phasescope.redact import from_server

    return from_server(name, one_line=True) if isinstance(name, str) else name
