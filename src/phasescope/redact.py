"""The one redaction step: no secret leaves the process, and no data is rewritten on the way.

Every secret phasescope is handed (``--api-key``, ``$OPENAI_API_KEY``, a URL's password or
``?key=`` value, a ``tune --serve`` template's ``--api-key``) is :func:`register`\\ ed once, where it
enters (the CLI boundary, a :class:`~phasescope.apis.base.Target`). Texts leave the process through
two doors, each with its rule:

* **where a secret can appear** — headers, a server's error body, URLs, commands, a server-supplied
  name (a model id): :func:`redact_field` masks every registered secret as a substring, and a short
  ("weak") one as a whole token;
* **free text** — the console (:func:`install_console_guard`), JSON documents
  (:func:`phasescope.jsonutil.dumps`), CSV/HTML reports (:func:`phasescope.safeio.write_text`):
  :func:`redact` masks a registered secret only as a *whole token* (not inside ``mean_ttft_ms`` or
  ``12345``), and only a strong one (at least :data:`STRONG_SECRET_LEN` characters, not all digits);
  JSON documents are redacted value by value (:func:`redact_obj`): keys and numbers are never touched.

Whether or not the secret is known, any ``Bearer <token>`` and ``api_key=…``/``token=…`` URL
parameter is masked too. A weak key (``1234``, ``mean``) cannot be masked in free text without
rewriting data: :func:`weak_key_warning` is the one line the CLI prints about it.

Terminal safety: every server-supplied string shown on a terminal goes through :func:`printable`
(control characters dropped: no ``ESC ]0;…`` title, no ``ESC [2J`` clear screen), and the console guard
drops the escape sequences phasescope itself never writes.
"""

from __future__ import annotations

import io
import re
import sys
import threading
from typing import Any, TextIO
from urllib.parse import quote, quote_plus

MASK = "***"
#: secrets shorter than this are not masked at all: masking "1" or "ab" would wreck every text
MIN_SECRET_LEN = 3
#: a secret at least this long (and not all digits) is masked in free text too, as a whole token
STRONG_SECRET_LEN = 8
#: what may not touch a secret for it to count as a whole token
_WORD = "A-Za-z0-9_"

_lock = threading.Lock()
#: (form, pattern of the form as a whole token, strong?) longest first
_secrets: tuple[tuple[str, re.Pattern[str], bool], ...] = ()

#: a bearer token: 8+ token characters with a digit or punctuation in them (not "Bearer token" in prose)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+|%20|\+)(?!\*\*\*)(?=[A-Za-z]*[0-9._~+/=:\-])[A-Za-z0-9._~+/=:\-]{8,}")
_QUERY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|password|secret)=)(?!\*\*\*)[^&#\s\"']+")


def is_weak(secret: str) -> bool:
    """A secret too short or too word-like to mask in free text without rewriting data."""
    s = secret.strip()
    return len(s) < STRONG_SECRET_LEN or s.isdigit()


def register(secret: Any) -> bool:
    """Remember ``secret`` so that the redaction steps mask it (and its URL-quoted forms).
    True when it is weak (:func:`is_weak`): masked only where it can appear, not in free text."""
    global _secrets
    if not isinstance(secret, str):
        return False
    s = secret.strip()
    if not s:
        return False
    weak = is_weak(s)
    if len(s) < MIN_SECRET_LEN:
        return True
    forms = {s, quote(s, safe=""), quote_plus(s)}
    with _lock:
        have = {f: (pat, strong) for f, pat, strong in _secrets}
        for f in forms:
            if len(f) < MIN_SECRET_LEN:
                continue
            old = have.get(f)
            strong = not weak or (old is not None and old[1])
            have[f] = (re.compile(f"(?<![{_WORD}]){re.escape(f)}(?![{_WORD}])"), strong)
        # longest first, so a secret containing another is masked whole
        _secrets = tuple(sorted(((f, p, st) for f, (p, st) in have.items()), key=lambda t: len(t[0]), reverse=True))
    return weak


def register_tainted(text: Any) -> None:
    """A server-supplied name (a model id) that holds a registered secret is itself a secret: register
    it whole (strong), so free text — where a secret is masked only as a whole token — masks it too."""
    global _secrets
    if not isinstance(text, str) or not text or not _secrets:
        return
    if any(s in text for s, _, _ in _secrets) and redact_field(text) != text:
        s = text.strip()
        with _lock:
            pat = re.compile(f"(?<![{_WORD}]){re.escape(s)}(?![{_WORD}])")
            keep = tuple(t for t in _secrets if t[0] != s)
            _secrets = tuple(sorted(keep + ((s, pat, True),), key=lambda t: len(t[0]), reverse=True))


def weak_key_warning(secret: Any, what: str = "the API key") -> str | None:
    """The one warning line for a key too short to redact safely, or None."""
    if not isinstance(secret, str) or not secret.strip() or not is_weak(secret):
        return None
    n = len(secret.strip())
    if n < MIN_SECRET_LEN:
        return (f"warning: {what} has {n} character{'s' if n != 1 else ''}: too short to redact safely; "
                "phasescope cannot mask it in anything it prints or writes")
    return (f"warning: {what} is {'all digits' if secret.strip().isdigit() else f'{n} characters'}: too short "
            "to redact safely from free text; it is masked in headers, URLs, error bodies and server-supplied "
            f"names only (a key of at least {STRONG_SECRET_LEN} characters, not all digits, is masked everywhere)")


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
    return tuple(f for f, _, _ in _secrets)


def forget_all() -> None:
    """Tests only: drop every registered secret."""
    global _secrets
    with _lock:
        _secrets = ()


def _patterns(text: str) -> str:
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    if "=" in text:
        low = text.lower()
        if any(k in low for k in ("key=", "token=", "password=", "secret=")):
            text = _QUERY.sub(lambda m: m.group(1) + MASK, text)
    return text


def redact(text: str) -> str:
    """Free text with every strong registered secret masked as a whole token, and every bearer token
    and key-like URL parameter masked. Never touches a secret-looking part of a longer word or number."""
    if not text:
        return text
    for s, pat, strong in _secrets:
        if strong and s in text:
            text = pat.sub(MASK, text)
    return _patterns(text)


def redact_field(text: str) -> str:
    """A text where a secret can appear (a header, an error body, a URL, a command, a server-supplied
    name): every registered secret masked — a strong one wherever it occurs, a weak one as a whole token."""
    if not text:
        return text
    for s, pat, strong in _secrets:
        if s in text:
            text = text.replace(s, MASK) if strong else pat.sub(MASK, text)
    return _patterns(text)


#: C0 controls except tab and newline, DEL, and the C1 range (``\x9b`` is a one-byte CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: a whole escape sequence (CSI, OSC up to its terminator, or ESC + one byte), so no payload is left over
_ESCAPE_SEQ = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?")


def printable(text: Any, *, one_line: bool = False) -> str:
    """``text`` safe for a terminal: escape sequences and control characters removed (a server's
    ``ESC ]0;title BEL`` or ``ESC [2J`` cannot retitle or clear the user's terminal); with
    ``one_line``, newlines and tabs become spaces."""
    s = text if isinstance(text, str) else str(text)
    if not s:
        return s
    if "\x1b" in s:
        s = _ESCAPE_SEQ.sub("", s)
    s = _CONTROL.sub("", s)
    if one_line:
        s = s.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    return s


def from_server(text: Any, *, one_line: bool = False) -> str:
    """A server-supplied string on its way to a record, the store or a terminal: secrets masked
    (:func:`redact_field`) and control characters dropped (:func:`printable`)."""
    return printable(redact_field(text if isinstance(text, str) else str(text)), one_line=one_line)


def redact_obj(obj: Any, *, field: bool = False) -> Any:
    """A copy of a JSON-like structure with every string *value* redacted (:func:`redact`, or
    :func:`redact_field` with ``field``). Keys and numbers are data: never rewritten."""
    fn = redact_field if field else redact
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v, field=field) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, field=field) for v in obj]
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


#: what phasescope's own console (rich) writes: SGR colours, cursor moves and line erase (live progress),
#: cursor show/hide. Any other escape sequence or control character came from a server's text.
_OWN_CSI = re.compile(r"\x1b\[(?:[0-9;]*[mABCDGK]|\?25[hl])")
_FOREIGN = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?"
                      r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` without the escape sequences and control characters phasescope never writes itself
    (a set-title OSC, a clear-screen CSI, a bell), keeping rich's colours and live-progress moves."""
    if not text or (("\x1b" not in text) and not _FOREIGN.search(text)):
        return text
    return _FOREIGN.sub(lambda m: m.group(0) if _OWN_CSI.fullmatch(m.group(0)) else "", text)


def write_json_text(stream: Any, text: str) -> None:
    """Write a JSON document redacted value by value to ``stream`` (through the console guard's
    verbatim door when ``stream`` is guarded)."""
    w = getattr(stream, "write_verbatim", None)
    if callable(w):
        w(text)
    else:
        stream.write(text)


class _RedactingStream(io.TextIOBase):
    """A text stream that redacts (and makes encodable) everything written to the stream under it."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, s: str) -> int:  # type: ignore[override]
        self._inner.write(terminal_safe(clean(s)))
        return len(s)

    def write_verbatim(self, s: str) -> None:
        """Write an already-redacted document (a ``--json`` one, redacted value by value) as it is:
        no text-level pass that could rewrite a JSON key equal to a secret."""
        self._inner.write(terminal_safe(encodable(s)))

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
