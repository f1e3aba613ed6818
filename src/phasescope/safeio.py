"""Writing results safely: one place for the write boundary and for user-file reading.

* :func:`write_text` — every summary, CSV and report file: the text is made encodable and
  redacted (:func:`phasescope.redact.clean`), written to a temporary file beside the target and
  renamed over it, so a full disk or a bad label never leaves a 0-byte or half-written file; a
  failure is one :class:`~phasescope.errors.OutputError` naming the path and the cause.
* :func:`new_run_dir` — a fresh output folder per run, created exclusively with a run id that
  has enough entropy that two runs started in the same second never share one.
* :func:`prepare_out_dir` — a user's ``--out``: a folder (created if missing), never a file.
* :func:`read_user_json` / :func:`iter_user_jsonl` — every user file: size and nesting limits,
  encoding errors, truncation and wrong top-level types become one
  :class:`~phasescope.errors.InputError` line.
"""

from __future__ import annotations

import errno
import json
import os
import secrets as _secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from phasescope.errors import InputError, OutputError

#: user JSON files larger than this are refused (a config.json is kilobytes; a ShareGPT dump ~700 MB)
MAX_JSON_BYTES = 2 * 1024**3
#: nesting deeper than this is refused before parsing (json recurses; 100,000 deep is a RecursionError)
MAX_JSON_DEPTH = 200


def os_cause(exc: BaseException) -> str:
    """A short cause for an OSError: ``No space left on device`` rather than a repr."""
    if isinstance(exc, OSError):
        if exc.errno == errno.EFBIG:
            return "file too large (disk quota or size limit reached)"
        return exc.strerror or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def write_text(path: str | os.PathLike[str], text: str, *, what: str = "file", json_doc: bool = False) -> Path:
    """Write ``text`` (encodable, redacted) to ``path`` atomically; :class:`OutputError` on failure.
    ``json_doc``: ``text`` is a JSON document already redacted value by value
    (:func:`phasescope.jsonutil.dumps`): no text-level pass that could rewrite a key equal to a secret."""
    from phasescope.redact import clean, encodable

    p = Path(path)
    data = (encodable(text) if json_doc else clean(text)).encode("utf-8")
    tmp = p.with_name(f".{p.name}.{_secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
        os.replace(tmp, p)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(f"cannot write the {what} {p}: {os_cause(exc)}") from None
    return p


def new_run_id(prefix: str = "") -> str:
    """``<prefix><UTC second>-<8 hex>``: sortable by time, 32 random bits against collisions."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}{stamp}-{_secrets.token_hex(4)}"


def new_run_dir(parent: str | os.PathLike[str], prefix: str) -> Path:
    """Create (exclusively) and return a new folder ``parent/<prefix><stamp>-<hex>``."""
    base = Path(parent)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {base}: {os_cause(exc)}") from None
    for _ in range(20):
        d = base / new_run_id(prefix)
        try:
            d.mkdir()  # exclusive: fails if another run took the name
            return d
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"cannot create the output folder {d}: {os_cause(exc)}") from None
    raise OutputError(f"cannot create a fresh output folder under {base}")


def prepare_out_dir(path: str | os.PathLike[str], *, flag: str = "--out") -> Path:
    """A user's output folder: created if missing; a file there is bad input (exit 2)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{flag} {p} is a file, not a folder", hint="name a folder (it is created if missing)")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"{flag} {p}: a file is in the way of this folder") from None
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {p}: {os_cause(exc)}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into the output folder {p}: permission denied")
    return p


# --- reading user files ------------------------------------------------------------------------
def _too_deep(text: str, limit: int) -> bool:
    """Nesting of ``[``/``{`` outside strings deeper than ``limit`` (a linear scan, no recursion)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_str = False
    esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def parse_user_json(text: str, *, where: str, expect: type | tuple[type, ...] | None = dict,
                    max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text from a user file; every failure is one :class:`InputError` naming ``where``."""
    if _too_deep(text, max_depth):
        raise InputError(f"{where}: JSON nested deeper than {max_depth} levels")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: malformed JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    if expect is not None and not isinstance(obj, expect):
        names = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        kinds = {"dict": "a JSON object", "list": "a JSON array"}
        raise InputError(f"{where}: expected {kinds.get(names, names)}, got {_json_type(obj)}")
    return obj


def _json_type(obj: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(obj), type(obj).__name__)


def user_file(path: str | os.PathLike[str], what: str) -> Path:
    """The user's file ``path`` (``~`` expanded), or one :class:`InputError` saying it is missing or a folder."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"{what} not found: {p}")
    if p.is_dir():
        raise InputError(f"{what} {p} is a folder, not a file")
    return p


def read_user_text(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_JSON_BYTES) -> str:
    p = user_file(path, what)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{what} {p} is too large ({size:,} bytes; limit {max_bytes:,})")
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {p}: not UTF-8 text (bad byte at offset {exc.start})") from None


def read_user_json(path: str | os.PathLike[str], *, what: str, expect: type | tuple[type, ...] | None = dict,
                   max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and parse a user's JSON file (limits above); one :class:`InputError` for any problem."""
    text = read_user_text(path, what=what, max_bytes=max_bytes)
    return parse_user_json(text, where=str(Path(path).expanduser()), expect=expect)


def iter_user_jsonl(path: str | os.PathLike[str], *, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file. A missing or binary file,
    a line that is not JSON, nested too deep, or not an object is one :class:`InputError`."""
    p = user_file(path, what)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
    with fh:
        for ln, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if ln == 1 else "utf-8").strip()
            except UnicodeDecodeError:
                raise InputError(f"{p}:{ln}: not UTF-8 text") from None
            if not line:
                continue
            yield ln, parse_user_json(line, where=f"{p}:{ln}", expect=dict)
