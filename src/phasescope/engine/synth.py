"""``phasescope engine synth SHAPE``: a GGUF with a model's exact tensor shapes, a real tokenizer and
synthetic weights, so the embedded engine can time any catalog shape without downloading it.

The weights' values change neither the bytes a decode step reads nor the FLOPs a prefill does, so a
file with Llama-3.2-1B's shapes at Q8_0 runs at Llama-3.2-1B-at-Q8_0 speed; its text is meaningless.
The values are kept numerically sane (small seeded normals, norms at 1) so llama-server never meets
a NaN or an infinity.

How a file is made (:func:`synthesize`):

1. :func:`plan_synth` — pure: the GGUF architecture, the tensor table (names, shapes, types) llama.cpp's
   loader expects for that architecture (dense, MoE, GQA, tied embeddings), the metadata, the
   tokenizer (one of the vocabulary-only GGUFs in the pinned llama.cpp source, ``models/ggml-vocab-*.gguf``,
   padded with unused tokens up to the shape's vocabulary size), and the sizes.
2. The native file: F32, F16, BF16 or Q8_0, written directly by gguf-py's writer, tensor by tensor from
   a seeded pool (so an 8B file never sits in memory).
3. Any other type (Q4_K_M, Q6_K, …): the Q8_0 file requantized by the built ``llama-quantize``
   (``--allow-requantize``; the type mix of ``_M``/``_S`` follows tensor names, not the input's type).

Files are cached in ``<engine_dir>/models/synthetic/`` keyed by shape, type and vocabulary (plus a hash
of the shapes and of this writer's format), written to a temporary name and renamed. Before writing,
the size is estimated and the request refused (:class:`~phasescope.errors.InputError`, exit 2) when
the disk has no room for it or the machine's memory could not hold the model.

The header says what it is: ``general.name`` is ``synthetic <shape> <TYPE>`` and the custom keys
``phasescope.synthetic`` (true), ``phasescope.synthetic.shape``, ``.vocab`` and ``.seed`` are set;
:func:`synthetic_info` reads them back (the probe card and stored runs use it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from phasescope.engine.synth_plan import (  # noqa: F401 - the planning half, re-exported
    _GGML,
    ARCHITECTURES,
    FORMAT_VERSION,
    KEY_SEED,
    KEY_SHAPE,
    KEY_SYNTHETIC,
    KEY_VOCAB,
    NATIVE_TYPES,
    SEED,
    VOCABS,
    WEIGHT_STD,
    SynthPlan,
    TensorPlan,
    bytes_to_write,
    check_room,
    choose_vocab,
    estimate_final_bytes,
    plan_synth,
    synth_dir,
    synthetic_name,
    vocab_dir,
)
from phasescope.errors import EngineError, InputError
from phasescope.theory.models.spec import ModelSpec


@dataclass
class SynthResult:
    path: Path
    shape_id: str
    qtype: str
    vocab: str
    size_bytes: int
    cached: bool
    seconds: float
    plan: SynthPlan

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "shape": self.shape_id, "quant": self.qtype, "vocab": self.vocab,
                "size_bytes": self.size_bytes, "cached": self.cached, "seconds": round(self.seconds, 3),
                "arch": self.plan.arch, "params": self.plan.n_params, "synthetic": True}


# --- writing ----------------------------------------------------------------------------------------
#: GGUF scalar value types → struct format (gguf.GGUFValueType ids)
_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NP_FMT = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}


def read_tokenizer_kv(path: Path) -> list[tuple[str, Any, int, int | None]]:
    """The ``tokenizer.*`` keys of a GGUF file: (key, value, type, array item type), in file order.

    A plain parser of the GGUF key/value section (gguf-py's reader takes ~30 s on a 128k vocabulary);
    arrays of numbers come back as lists, arrays of strings as lists of str."""
    import struct

    import numpy as np

    buf = path.read_bytes()
    if buf[:4] != b"GGUF":
        raise EngineError(f"{path} is not a GGUF file")
    pos = 4
    (_version, _n_tensors, n_kv) = struct.unpack_from("<IQQ", buf, pos)
    pos += 20

    def string(p: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", buf, p)
        return buf[p + 8:p + 8 + n].decode("utf-8", "surrogateescape"), p + 8 + n

    def value(vtype: int, p: int) -> tuple[Any, int]:
        if vtype == 8:
            return string(p)
        if vtype in _SCALAR_FMT:
            fmt = _SCALAR_FMT[vtype]
            return struct.unpack_from(fmt, buf, p)[0], p + struct.calcsize(fmt)
        raise EngineError(f"{path}: unsupported GGUF value type {vtype}")

    out: list[tuple[str, Any, int, int | None]] = []
    for _ in range(n_kv):
        key, pos = string(pos)
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        sub: int | None = None
        if vtype == 9:
            sub, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if sub == 8:
                vals = []
                for _ in range(n):
                    v, pos = string(pos)
                    vals.append(v)
                val: Any = vals
            elif sub in _NP_FMT:
                arr = np.frombuffer(buf, dtype=_NP_FMT[sub], count=n, offset=pos)
                pos += arr.nbytes
                val = [bool(x) for x in arr] if sub == 7 else arr.tolist()
            else:
                raise EngineError(f"{path}: unsupported GGUF array type {sub}")
        else:
            val, pos = value(vtype, pos)
        if key.startswith("tokenizer."):
            out.append((key, val, vtype, sub))
    return out


def _read_vocab(name: str) -> list[tuple[str, Any, Any, Any]]:
    """The tokenizer keys of a pinned vocabulary GGUF, typed for gguf-py's writer."""
    import gguf

    path = vocab_dir() / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise EngineError(f"the pinned llama.cpp source has no {path.name} (looked in {path.parent}); "
                          "run `phasescope engine install`")
    return [(k, v, gguf.GGUFValueType(t), gguf.GGUFValueType(s) if s is not None else None)
            for k, v, t, s in read_tokenizer_kv(path)]


def _pad_vocab(items: list[tuple[str, Any, Any, Any]], n_vocab: int) -> list[tuple[str, Any, Any, Any]]:
    """Pad the per-token arrays (tokens, token_type, scores) with unused tokens up to ``n_vocab``."""
    import gguf

    toks = next((v for k, v, _, _ in items if k == "tokenizer.ggml.tokens"), None)
    if toks is None:
        raise EngineError("the vocabulary GGUF has no tokenizer.ggml.tokens")
    n = len(toks)
    if n > n_vocab:
        raise InputError(f"the tokenizer has {n:,} tokens, more than the shape's vocabulary of {n_vocab:,}")
    extra = n_vocab - n
    out = []
    for key, val, vtype, sub in items:
        if extra and key == "tokenizer.ggml.tokens":
            val = list(val) + [f"[PAD{i}]" for i in range(n, n_vocab)]
        elif extra and key == "tokenizer.ggml.token_type":
            val = list(val) + [int(gguf.TokenType.UNUSED)] * extra
        elif extra and key == "tokenizer.ggml.scores":
            val = list(val) + [-1000.0] * extra
        out.append((key, val, vtype, sub))
    return out


def _pool(qtype: str, seed: int, nbytes: int = 8 << 20) -> bytes:
    """A seeded block of valid ``qtype`` data (~``nbytes``, whole blocks) the tensors are cut from."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if qtype == "Q8_0":
        nblk = nbytes // 34
        # int8 uniform in ±127 has sd ≈ 73: the scale makes the weights' sd ≈ WEIGHT_STD
        q = rng.integers(-127, 128, size=(nblk, 32), dtype=np.int8)
        d = np.full((nblk, 1), WEIGHT_STD / 73.3, dtype=np.float16)
        return np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=1).tobytes()
    x = rng.standard_normal(nbytes // _GGML[qtype][2], dtype=np.float32) * WEIGHT_STD
    if qtype == "F32":
        return x.tobytes()
    if qtype == "F16":
        return x.astype(np.float16).tobytes()
    if qtype == "BF16":
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    raise ValueError(qtype)


def _vector_bytes(t: TensorPlan) -> bytes:
    import numpy as np

    if ".bias" in t.name:
        return np.zeros(t.shape, dtype=np.float32).tobytes()
    return np.ones(t.shape, dtype=np.float32).tobytes()  # norms at 1: activations keep their scale


def write_native(plan: SynthPlan, path: Path, *, progress: Callable[[int, int], None] | None = None) -> None:
    """Write the native file of ``plan`` to ``path`` (gguf-py's writer; tensors streamed from the pool)."""
    import gguf
    import numpy as np

    items = _pad_vocab(_read_vocab(plan.vocab), int(plan.spec.vocab_size or 0))
    w = gguf.GGUFWriter(str(path), plan.arch)
    for key, val in plan.metadata.items():
        if isinstance(val, bool):
            w.add_bool(key, val)
        elif isinstance(val, float):
            w.add_float32(key, val)
        elif isinstance(val, int):
            w.add_uint32(key, val)
        else:
            w.add_string(key, str(val))
    for key, val, vtype, sub in items:
        w.add_key_value(key, val, vtype, sub_type=sub)
    for t in plan.tensors:
        w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes,
                          raw_dtype=gguf.GGMLQuantizationType(_GGML[t.type][0]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    fout = w.fout[0]
    pools: dict[str, bytes] = {}
    done, total = 0, plan.native_bytes
    for i, t in enumerate(plan.tensors):
        w.write_padding(fout, fout.tell())
        if t.type == "F32" and len(t.shape) == 1:
            fout.write(_vector_bytes(t))
        else:
            pool = pools.get(t.type)
            if pool is None:
                pool = pools[t.type] = _pool(t.type, SEED)
            blk = _GGML[t.type][2]
            # start each tensor at its own whole-block offset of the pool, so tensors differ
            start = (i * 7919 * blk) % len(pool)
            left = t.nbytes
            while left:
                chunk = pool[start:start + left]
                fout.write(chunk)
                left -= len(chunk)
                start = 0
        w.write_padding(fout, t.nbytes)
        done += t.nbytes
        if progress is not None:
            progress(done, total)
    w.close()


def _quantize(src: Path, dst: Path, qtype: str, log: Path, name: str) -> None:
    from phasescope.engine.binary import find_tool

    tool = find_tool("llama-quantize")
    # the type's own name in the header (llama-quantize copies the source's other keys, the synthetic ones too)
    cmd = [str(tool), "--allow-requantize", "--override-kv", f"general.name=str:{name}", str(src), str(dst), qtype]
    with log.open("w") as lf:
        proc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 or not dst.exists():
        dst.unlink(missing_ok=True)
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        raise EngineError(f"llama-quantize to {qtype} failed: {(lines or [f'exit {proc.returncode}'])[-1]}; log: {log}")


def synthesize(shape: str | ModelSpec, quant: str = "Q8_0", *, vocab: str | None = None, force: bool = False,
               say: Callable[[str], None] | None = None,
               free_disk: int | None = None, free_memory: int | None = None) -> SynthResult:
    """The synthetic GGUF of SHAPE at QUANT: the cached file, else written (and quantized) now."""
    tell = say or (lambda _m: None)
    t0 = time.monotonic()
    plan = plan_synth(shape, quant, vocab=vocab)
    out = plan.path()
    if out.exists() and not force:
        return SynthResult(out, plan.shape_id, plan.qtype, plan.vocab, out.stat().st_size, True,
                           time.monotonic() - t0, plan)
    if force:
        plan.native_path.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
    check_room(plan, free_disk=free_disk, free_memory=free_memory)
    out.parent.mkdir(parents=True, exist_ok=True)
    src = plan.native_path
    if not src.exists():
        tell(f"writing synthetic {plan.shape_id} {plan.native_type} ({plan.native_bytes / 1e9:.2f} GB, "
             f"{plan.n_params / 1e9:.2f} B params, tokenizer {plan.vocab})")
        tmp = src.with_name(src.name + f".tmp{os.getpid()}")
        try:
            write_native(plan, tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, src)
    if plan.needs_quantize:
        tell(f"quantizing to {plan.qtype} with llama-quantize (about {plan.final_bytes / 1e9:.2f} GB)")
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        try:
            _quantize(src, tmp, plan.qtype, out.with_name(out.name + ".log"), synthetic_name(plan.shape_id, plan.qtype))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, out)
    return SynthResult(out, plan.shape_id, plan.qtype, plan.vocab, out.stat().st_size, False,
                       time.monotonic() - t0, plan)


# --- reading back ---------------------------------------------------------------------------------
def synthetic_info_from_metadata(md: dict[str, Any]) -> dict[str, Any] | None:
    """``{"synthetic": True, "shape", "vocab", "name"}`` when GGUF metadata marks a synthetic file, else None."""
    if not md.get(KEY_SYNTHETIC):
        return None
    return {"synthetic": True, "weights": "synthetic weights", "shape": md.get(KEY_SHAPE),
            "vocab": md.get(KEY_VOCAB), "name": md.get("general.name")}


def synthetic_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`synthetic_info_from_metadata` of a GGUF file's header (None if unreadable or not synthetic)."""
    try:
        from phasescope.theory.gguf_header import read_gguf_header

        header = read_gguf_header(Path(path))
    except Exception:  # noqa: BLE001 - any unreadable file is simply not known to be synthetic
        return None
    return synthetic_info_from_metadata(header.metadata)


# --- the embedded engine on a synthetic model (``--synthetic SHAPE``) ------------------------------------
_ACTIVE: SynthResult | None = None


def active() -> SynthResult | None:
    """The synthetic model the embedded engine starts on inside :func:`serving`, else None."""
    return _ACTIVE


def alias_of(res: SynthResult) -> str:
    """The model name the engine serves a synthetic file under: ``synthetic-<shape>-<type>``."""
    return f"synthetic-{res.shape_id}-{res.qtype.lower()}"


def tag_of(res: SynthResult) -> dict[str, Any]:
    """What a stored run made on a synthetic model carries in its params (``params.synthetic``)."""
    return {"weights": "synthetic weights", "shape": res.shape_id, "quant": res.qtype, "vocab": res.vocab,
            "arch": res.plan.arch, "file": res.path.name, "size_bytes": res.size_bytes}


@contextlib.contextmanager
def serving(res: SynthResult) -> Iterator[dict[str, Any]]:
    """Inside the block the embedded engine (started with no model path) serves ``res`` under
    :func:`alias_of`. Process-wide: a command runs one at a time. Runs opened inside it are tagged by
    :func:`phasescope.lifecycle.use_synthetic`, which wraps this (the engine sits below the run output)."""
    global _ACTIVE
    prev, _ACTIVE = _ACTIVE, res
    try:
        yield tag_of(res)
    finally:
        _ACTIVE = prev


def synthetic_of_props(props: Any) -> dict[str, Any] | None:
    """:func:`synthetic_info` of the file a llama-server's ``/props`` names, when it is on this machine."""
    path = props.get("model_path") if isinstance(props, dict) else None
    if not path or not os.path.isfile(str(path)):
        return None
    return synthetic_info(str(path))
