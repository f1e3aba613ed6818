"""A small, fast GGUF header reader: key/value metadata and tensor infos, never the tensor data.

The ``gguf`` package's ``GGUFReader`` materialises every array (a 262k-entry tokenizer vocabulary takes
~11 s); here arrays are skipped and only their element type and length are kept, so a header reads in
well under a second. Format (ggml ``docs/gguf.md``, gguf-py ``gguf/gguf_reader.py``):

    magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
    n_kv × (string key | u32 value_type | value)         string = u64 length + UTF-8 bytes
    n_tensors × (string name | u32 n_dims | n_dims × u64 dims | u32 ggml_type | u64 offset)

Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 item type +
u64 count + items), 10 u64, 11 i64, 12 f64.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phasescope.errors import InputError, UnknownModelError
from phasescope.theory.quant import GGML_TYPES, ggml_tensor_bytes

_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING = 8
_ARRAY = 9

#: arrays at most this long are decoded (per-layer hyper-parameters); longer ones (vocabularies) are skipped
MAX_DECODED_ARRAY = 4096


@dataclass(frozen=True)
class GGUFArray:
    """A skipped array: its element type and length (``values`` only for short arrays)."""

    item_type: int
    length: int
    values: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        return ggml_tensor_bytes(self.ggml_type, self.n_elements)

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.ggml_type, (f"type{self.ggml_type}", 1, 0))[0]


@dataclass
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)


class _Cursor:
    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.pos = 0
        self.size = size

    def need(self, n: int) -> None:
        if self.pos + n > self.size:
            raise EOFError

    def unpack(self, fmt: str, n: int) -> Any:
        self.need(n)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self) -> str:
        n = self.unpack("<Q", 8)
        self.need(n)
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_string(self) -> None:
        n = self.unpack("<Q", 8)
        self.need(n)
        self.pos += n

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            fmt, n = _SCALARS[vtype]
            return self.unpack(fmt, n)
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = self.unpack("<I", 4)
            length = self.unpack("<Q", 8)
            if length <= MAX_DECODED_ARRAY and item_type != _ARRAY:
                return GGUFArray(item_type, length, tuple(self.value(item_type) for _ in range(length)))
            if item_type in _SCALARS:
                n = _SCALARS[item_type][1] * length
                self.need(n)
                self.pos += n
            elif item_type == _STRING:
                unpack_from = struct.unpack_from
                buf, pos = self.buf, self.pos
                for _ in range(length):
                    (k,) = unpack_from("<Q", buf, pos)
                    pos += 8 + k
                if pos > self.size:
                    raise EOFError
                self.pos = pos
            else:
                for _ in range(length):
                    self.value(item_type)
            return GGUFArray(item_type, length, None)
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Read metadata and tensor infos of a GGUF file (I/O). Bad or truncated files raise UnknownModelError."""
    from phasescope.safeio import user_file  # a regular file only: a FIFO or a device is refused, never mapped

    p = user_file(path, "GGUF file")
    try:
        with p.open("rb") as fh:
            size = p.stat().st_size
            if size < 24:
                raise UnknownModelError(f"{p} is not a GGUF file (too short)")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(mm, size, str(p))
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None


def _parse(buf: Any, size: int, path: str) -> GGUFHeader:
    if bytes(buf[:4]) != b"GGUF":
        raise UnknownModelError(f"{path} is not a GGUF file (magic {bytes(buf[:4])!r})")
    cur = _Cursor(buf, size)
    cur.pos = 4
    try:
        version = cur.unpack("<I", 4)
        if version not in (2, 3):
            raise UnknownModelError(f"{path}: unsupported GGUF version {version}")
        n_tensors = cur.unpack("<Q", 8)
        n_kv = cur.unpack("<Q", 8)
        if n_tensors > 10_000_000 or n_kv > 1_000_000:
            raise UnknownModelError(f"{path}: implausible GGUF header (tensors={n_tensors}, kv={n_kv})")
        header = GGUFHeader(path=path, version=version)
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.unpack("<I", 4)
            header.metadata[key] = cur.value(vtype)
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I", 4)
            if n_dims > 8:
                raise UnknownModelError(f"{path}: tensor {name!r} has {n_dims} dims")
            dims = tuple(cur.unpack("<Q", 8) for _ in range(n_dims))
            ggml_type = cur.unpack("<I", 4)
            offset = cur.unpack("<Q", 8)
            header.tensors.append(GGUFTensor(name, dims, ggml_type, offset))
    except (EOFError, struct.error):  # struct.error: a length field pointing past the end
        raise UnknownModelError(f"{path}: truncated GGUF header") from None
    except (OverflowError, MemoryError, UnicodeDecodeError):
        raise UnknownModelError(f"{path}: malformed GGUF header (implausible lengths)") from None
    except ValueError as exc:
        raise UnknownModelError(f"{path}: malformed GGUF header ({exc})") from None
    return header
