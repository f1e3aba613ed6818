"""Writing results safely: one place for the write boundary and for user-file reading.

* :func:`write_text` — every summary, CSV and report file: the text is made encodable and
  redacted (:func:`phasescope.redact.clean`), written to a temporary file beside the target and
  renamed over it, so a full disk or a bad label never leaves a 0-byte or half-written file; a
  failure is one :class:`~phasescope.errors.OutputError` naming the path and the cause.
* :func:`new_run_dir` — a fresh output folder per run, created exclusively with a run id that
  has enough entropy that two runs started in the same second never share one.
* :func:`prepare_out_dir` — a user's ``--out``: a folder (created if missing), never a file.
* :func:`read_user_json` / :func:`iter_user_jsonl` / :func:`open_user_file` — every user file: a
  regular file only (a FIFO, a device such as ``/dev/zero`` or a socket is refused before it is opened
  for reading, and the open itself never blocks), a size limit, and for JSON a nesting limit, an
  integer-digit limit and finite numbers only (``NaN``, ``Infinity``, ``1e999`` refused); encoding
  errors, truncation and wrong top-level types become one :class:`~phasescope.errors.InputError`
  line (exit 2) naming the file and the limit.
* :func:`loads_bounded` — the same JSON limits as a plain function raising :class:`Refused` (a
  ``ValueError``): server bodies go through it too (:mod:`phasescope.apis._json`), where a breach is
  the server's failure (exit 3).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import secrets as _secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Iterator

from phasescope.errors import InputError, OutputError

#: user JSON files larger than this are refused (a config.json is kilobytes; a ShareGPT dump ~700 MB)
MAX_JSON_BYTES = 2 * 1024**3
#: nesting deeper than this is refused before parsing (json recurses; 100,000 deep is a RecursionError)
MAX_JSON_DEPTH = 200
#: an integer with more digits than this is refused (a 64-bit count has at most 20; Python's own
#: limit of 4,300 digits would be a ValueError deep inside, and a huge count overflows every float)
MAX_INT_DIGITS = 20
#: one line of a JSONL or CSV file longer than this is refused (a ShareGPT conversation is kilobytes)
MAX_LINE_BYTES = 64 * 1024**2


class Refused(ValueError):
    """JSON text past one of the limits of :func:`loads_bounded`; ``reason`` says which, with the limit."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


#: bytes a run's folder must take before the run starts (a few records' worth): a disk already full is
#: found before anything is sent, not at the first record
SPACE_CHECK_BYTES = 16384


def check_space(folder: str | os.PathLike[str], name: str = "records.jsonl") -> None:
    """Refuse a folder that cannot take :data:`SPACE_CHECK_BYTES` more (a full disk, a quota, a file
    size limit): :class:`OutputError` naming ``folder/name``, which nothing has been written to yet.
    A scratch file is written and removed; a disk that fills later is still caught at its record."""
    import errno

    p = Path(folder)
    probe = p / f".{name}.{_secrets.token_hex(4)}.space"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise OutputError(f"cannot write records to {p / name}: {os_cause(exc)}",
                          hint="found before the run started: no record was written and no run stored") from None
    try:
        view = memoryview(bytes(SPACE_CHECK_BYTES))
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS):
            raise OutputError(f"cannot write records to {p / name}: {os_cause(exc)}",
                              hint="found before the run started: no record was written and no run "
                                   "stored") from None
        raise
    finally:
        os.close(fd)
        try:
            probe.unlink()
        except OSError:
            pass


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


def _int(text: str, limit: int = MAX_INT_DIGITS) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > limit:
        raise Refused(f"an integer of {digits:,} digits (at most {limit} allowed)")
    return int(text)


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise Refused(f"the number {text[:24]}{'…' if len(text) > 24 else ''} is out of range (finite numbers only)")
    return v


def _constant(text: str) -> float:
    raise Refused(f"{text} is not a number (finite numbers only)")


def loads_bounded(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_int_digits: int = MAX_INT_DIGITS) -> Any:
    """``json.loads`` within limits: nesting at most ``max_depth`` (checked by a linear scan before
    parsing, so no recursion), integers of at most ``max_int_digits`` digits, finite numbers only.
    :class:`Refused` for a breach (its ``reason`` names the limit), ``json.JSONDecodeError`` for text
    that is not JSON; bytes must be UTF-8 (``UnicodeDecodeError`` otherwise)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if _too_deep(text, max_depth):
        raise Refused(f"JSON nested deeper than {max_depth} levels")
    parse_int = _int if max_int_digits == MAX_INT_DIGITS else (lambda t: _int(t, max_int_digits))
    try:
        return json.loads(text, parse_int=parse_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise Refused(f"JSON nested deeper than {max_depth} levels") from None


def parse_user_json(text: str, *, where: str, expect: type | tuple[type, ...] | None = dict,
                    max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text from a user file; every failure is one :class:`InputError` naming ``where``."""
    try:
        obj = loads_bounded(text, max_depth=max_depth)
    except Refused as exc:
        raise InputError(f"{where}: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: malformed JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if expect is not None and not isinstance(obj, expect):
        names = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        kinds = {"dict": "a JSON object", "list": "a JSON array"}
        raise InputError(f"{where}: expected {kinds.get(names, names)}, got {_json_type(obj)}")
    return obj


def _json_type(obj: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(obj), type(obj).__name__)


def user_file(path: str | os.PathLike[str], what: str) -> Path:
    """The user's file ``path`` (``~`` expanded), or one :class:`InputError` saying it is missing, a
    folder, or not a regular file (a FIFO would block the reader, ``/dev/zero`` never ends)."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{what} not found: {p}") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {p} is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {p} is {_kind(st.st_mode)}, not a regular file", hint="name a file on disk")
    return p


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def open_user_file(path: str | os.PathLike[str], *, what: str, max_bytes: int | None = MAX_JSON_BYTES) -> IO[bytes]:
    """Open the user's regular file for binary reading (never blocks: ``O_NONBLOCK``, then checked
    again on the open descriptor, so a FIFO swapped in after :func:`user_file` is refused too); a file
    over ``max_bytes`` is refused with the limit named."""
    p = user_file(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {p} is {_kind(st.st_mode)}, not a regular file", hint="name a file on disk")
        if max_bytes is not None and st.st_size > max_bytes:
            raise InputError(f"{what} {p} is too large ({st.st_size:,} bytes; limit {max_bytes:,})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_user_bytes(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of the user's regular file, at most ``max_bytes`` (a file that grows past it while
    read is refused as well)."""
    p = Path(path).expanduser()
    with open_user_file(p, what=what, max_bytes=max_bytes) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
    if len(data) > max_bytes:
        raise InputError(f"{what} {p} is too large (more than {max_bytes:,} bytes)")
    return data


def read_user_text(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_JSON_BYTES) -> str:
    p = Path(path).expanduser()
    data = read_user_bytes(p, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {p}: not UTF-8 text (bad byte at offset {exc.start})") from None


def read_user_json(path: str | os.PathLike[str], *, what: str, expect: type | tuple[type, ...] | None = dict,
                   max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and parse a user's JSON file (limits above); one :class:`InputError` for any problem."""
    text = read_user_text(path, what=what, max_bytes=max_bytes)
    return parse_user_json(text, where=str(Path(path).expanduser()), expect=expect)


def iter_user_lines(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_JSON_BYTES,
                    max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of the user's UTF-8 text file (newline stripped); the
    file, a line over ``max_line`` bytes or a byte that is not UTF-8 is one :class:`InputError`."""
    p = Path(path).expanduser()
    with open_user_file(p, what=what, max_bytes=max_bytes) as fh:
        ln = 0
        while True:
            try:
                raw = fh.readline(max_line + 1)
            except OSError as exc:
                raise InputError(f"cannot read {what} {p}: {os_cause(exc)}") from None
            if not raw:
                return
            ln += 1
            if len(raw) > max_line:
                raise InputError(f"{p}:{ln}: line longer than {max_line:,} bytes")
            try:
                yield ln, raw.decode("utf-8-sig" if ln == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise InputError(f"{p}:{ln}: not UTF-8 text (bad byte at column {exc.start + 1})") from None


def iter_user_jsonl(path: str | os.PathLike[str], *, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file. A missing or binary file,
    a line that is not JSON, nested too deep, or not an object is one :class:`InputError`."""
    p = Path(path).expanduser()
    for ln, line in iter_user_lines(p, what=what):
        line = line.strip()
        if not line:
            continue
        yield ln, parse_user_json(line, where=f"{p}:{ln}", expect=dict)
