"""The one redaction step: no secret leaves the process, whatever text carries it.

Every secret phasescope is handed (``--api-key``, ``$OPENAI_API_KEY``, a URL's password or
``?key=`` value) is :func:`register`\\ ed once, where it enters (the CLI boundary, a
:class:`~phasescope.apis.base.Target`). Every text that leaves the process passes through
:func:`redact` on its way out:

* the console — :func:`install_console_guard` wraps ``sys.stdout``/``sys.stderr`` for the CLI;
* every file — records (:meth:`phasescope.measure.records.RequestRecord.to_json`), JSON documents (:func:`phasescope.jsonutil.dumps`),
  summaries, CSV and HTML reports (:func:`phasescope.safeio.write_text`), the run store.

:func:`redact` replaces each registered secret (and its URL-quoted form) by ``***`` wherever it
appears — a server's 401 body that echoes the ``Authorization`` header, a URL, a header dump —
and, whether or not the secret is known, any ``Bearer <token>`` and ``api_key=…``/``token=…``
URL parameter. It is idempotent and cheap when nothing matches (plain ``in`` tests first).
"""

from __future__ import annotations

import io
import re
import sys
import threading
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

MASK = "***"
#: secrets shorter than this are not registered: masking "1" or "ab" would wreck every text
MIN_SECRET_LEN = 4

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()

#: a bearer token: 8+ token characters with a digit or punctuation in them (not "Bearer token" in prose)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+|%20|\+)(?!\*\*\*)(?=[A-Za-z]*[0-9._~+/=:\-])[A-Za-z0-9._~+/=:\-]{8,}")
_QUERY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|password|secret)=)(?!\*\*\*)[^&#\s\"']+")


def register(secret: Any) -> None:
    """Remember ``secret`` so that :func:`redact` masks it (and its URL-quoted forms) everywhere."""
    global _secrets
    if not isinstance(secret, str):
        return
    s = secret.strip()
    if len(s) < MIN_SECRET_LEN:
        return
    forms = {s, quote(s, safe=""), quote_plus(s)}
    with _lock:
        new = set(_secrets) | {f for f in forms if len(f) >= MIN_SECRET_LEN}
        # longest first, so a secret containing another is masked whole
        _secrets = tuple(sorted(new, key=len, reverse=True))


def register_url(url: Any) -> None:
    """Register a URL's password and query values (which may be keys)."""
    if not isinstance(url, str) or "://" not in url:
        return
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
        if parts.password:
            register(parts.password)
        for _, v in parse_qsl(parts.query):
            if len(v) >= 6:
                register(v)
    except ValueError:
        return


def secrets() -> tuple[str, ...]:
    return _secrets


def forget_all() -> None:
    """Tests only: drop every registered secret."""
    global _secrets
    with _lock:
        _secrets = ()


def redact(text: str) -> str:
    """``text`` with every registered secret, bearer token and key-like URL parameter masked."""
    if not text:
        return text
    for s in _secrets:
        if s in text:
            text = text.replace(s, MASK)
    low = None
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    if "=" in text:
        low = text.lower()
        if any(k in low for k in ("key=", "token=", "password=", "secret=")):
            text = _QUERY.sub(lambda m: m.group(1) + MASK, text)
    return text


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-like structure with :func:`redact` applied to every string (keys too)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj


def encodable(text: str) -> str:
    """``text`` that UTF-8 can encode: lone surrogates (undecodable bytes from argv or a file
    name, via ``surrogateescape``) become U+FFFD instead of failing a write halfway."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if _only_escapes(text) else \
            text.encode("utf-8", "replace").decode("utf-8")


def _only_escapes(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def clean(text: str) -> str:
    """What every text leaving the process becomes: encodable, then redacted."""
    return redact(encodable(text))


class _RedactingStream(io.TextIOBase):
    """A text stream that redacts (and makes encodable) everything written to the stream under it."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, s: str) -> int:  # type: ignore[override]
        self._inner.write(clean(s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install_console_guard() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` so nothing printed can carry a secret (idempotent)."""
    for name in ("stdout", "stderr"):
        cur = getattr(sys, name)
        if cur is not None and not isinstance(cur, _RedactingStream):
            setattr(sys, name, _RedactingStream(cur))
