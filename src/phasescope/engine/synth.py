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
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Callable

from phasescope.errors import EngineError, InputError
from phasescope.theory.models.spec import ModelSpec

#: bump when the files this module writes change (part of every cache key)
FORMAT_VERSION = 1
SEED = 36
#: the custom metadata keys (llama.cpp ignores keys it does not know)
KEY_SYNTHETIC = "phasescope.synthetic"
KEY_SHAPE = "phasescope.synthetic.shape"
KEY_VOCAB = "phasescope.synthetic.vocab"
KEY_SEED = "phasescope.synthetic.seed"
#: weight standard deviation: small enough that activations stay far from f16's range
WEIGHT_STD = 0.02

#: types gguf-py writes directly; anything else goes through llama-quantize from the Q8_0 file
NATIVE_TYPES = ("F32", "F16", "BF16", "Q8_0")

#: the pinned source's vocabulary-only GGUFs: name → token count (checked when the file is read)
VOCABS: dict[str, int] = {
    "llama-bpe": 128256,
    "llama-spm": 32000,
    "qwen2": 151936,
    "phi-3": 32064,
    "starcoder": 49152,
    "gemma-4": 262144,
    "command-r": 256000,
    "gpt-2": 50257,
    "deepseek-llm": 102400,
}

#: HF architecture → GGUF architecture this module can write
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "MixtralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3moe",
    "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3",
}

#: rope base per GGUF architecture (the value does not change the cost; a usual one keeps it ordinary)
_ROPE_BASE = {"llama": 500000.0, "qwen2": 1000000.0, "qwen3": 1000000.0, "qwen3moe": 1000000.0, "gemma3": 1000000.0}

# ggml type ids and block sizes (ggml/src/ggml-common.h): (id, elements per block, bytes per block)
_GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34), "BF16": (30, 1, 2)}
#: general.file_type (llama_ftype) of each native type
_FTYPE = {"F32": 0, "F16": 1, "Q8_0": 7, "BF16": 32}


@dataclass(frozen=True)
class TensorPlan:
    """One tensor to write. ``shape`` is in numpy order (rows, cols): GGUF's ``ne`` reversed."""

    name: str
    shape: tuple[int, ...]
    type: str  # F32 | F16 | BF16 | Q8_0

    @property
    def n_elements(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        _, blk, size = _GGML[self.type]
        return self.n_elements // blk * size


@dataclass
class SynthPlan:
    """Everything :func:`synthesize` will write, decided before a byte is written (pure)."""

    shape_id: str
    spec: ModelSpec
    arch: str
    qtype: str  # the requested llama-quantize type name, upper case
    native_type: str  # the type of the directly written file
    vocab: str
    tensors: list[TensorPlan]
    metadata: dict[str, Any]
    key: str
    #: bytes of the native file (exact, without the header) and the estimated final file
    native_bytes: int = 0
    final_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def needs_quantize(self) -> bool:
        return self.qtype != self.native_type

    def path(self, qtype: str | None = None) -> Path:
        return synth_dir() / f"{self.key}-{qtype or self.qtype}.gguf"

    @property
    def native_path(self) -> Path:
        return self.path(self.native_type)


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


def synth_dir() -> Path:
    from phasescope.engine.paths import models_dir

    return models_dir() / "synthetic"


def vocab_dir() -> Path:
    from phasescope.engine.paths import llama_cpp_source_dir

    return llama_cpp_source_dir() / "models"


# --- planning (pure) ----------------------------------------------------------------------------
def normalize_quant(name: str) -> str:
    from phasescope.engine.quantize import normalize_type

    return normalize_type(name)


def resolve_shape(shape: str | ModelSpec) -> ModelSpec:
    """A ModelSpec for SHAPE: a catalog id (or anything ``--model-spec`` takes), or a spec as is."""
    if isinstance(shape, ModelSpec):
        return shape
    from phasescope.theory.models import load_model_spec

    return load_model_spec(shape)


def choose_vocab(spec: ModelSpec, arch: str, explicit: str | None = None) -> str:
    """The pinned vocabulary for a shape: its family's tokenizer when one is pinned, else the largest
    that fits (a tokenizer may be padded with unused tokens up to the shape's vocabulary, never cut)."""
    V = spec.vocab_size or 0
    if explicit:
        name = explicit.removeprefix("ggml-vocab-").removesuffix(".gguf")
        if name not in VOCABS:
            raise InputError(f"unknown --vocab {explicit!r}; choose one of {', '.join(sorted(VOCABS))}")
        if VOCABS[name] > V:
            raise InputError(f"--vocab {name} has {VOCABS[name]:,} tokens, more than the shape's vocabulary of {V:,}")
        return name
    hf = spec.architecture or ""
    prefs: list[str] = []
    if arch in ("qwen2", "qwen3", "qwen3moe"):
        prefs = ["qwen2"]
    elif arch == "gemma3":
        prefs = ["gemma-4", "command-r"]
    elif hf.startswith("Phi3"):
        prefs = ["phi-3"]
    elif arch == "llama":
        prefs = ["llama-bpe", "starcoder", "llama-spm"] if V != 49152 else ["starcoder"]
    for name in prefs:
        if VOCABS[name] <= V:
            return name
    fits = sorted((n for n, c in VOCABS.items() if c <= V), key=lambda n: -VOCABS[n])
    if not fits:
        raise InputError(f"{spec.id}: no pinned tokenizer has at most {V:,} tokens (the smallest has "
                         f"{min(VOCABS.values()):,})")
    return fits[0]


def _gguf_arch(spec: ModelSpec) -> str:
    hf = spec.architecture or ""
    arch = ARCHITECTURES.get(hf)
    if arch is None:
        known = ", ".join(sorted({a for a in ARCHITECTURES}))
        raise InputError(f"{spec.id}: synthetic models cannot be written for {hf or 'an unknown architecture'} yet "
                         f"(supported: {known})")
    if spec.is_mla:
        raise InputError(f"{spec.id}: synthetic models do not support MLA attention yet")
    if arch == "llama" and spec.is_moe and spec.n_shared_experts:
        raise InputError(f"{spec.id}: synthetic llama MoE with shared experts is not supported yet")
    if arch == "qwen3moe" and not spec.is_moe:
        raise InputError(f"{spec.id}: a qwen3moe shape needs experts")
    if spec.is_moe and arch not in ("llama", "qwen3moe"):
        raise InputError(f"{spec.id}: synthetic MoE is supported for llama (Mixtral) and qwen3moe shapes only")
    return arch


def _need(spec: ModelSpec, *names: str) -> None:
    missing = [n for n in names if not getattr(spec, n)]
    if missing:
        raise InputError(f"{spec.id}: its shape lacks {', '.join(missing)}; a synthetic model needs every layer shape")


def _weight_type(native: str, shape: tuple[int, ...]) -> str:
    """The type of a matrix: the native type, else F16 when its rows are not whole Q8_0 blocks."""
    if native == "Q8_0" and shape[-1] % 32:
        return "F16"
    return native


def shape_key(spec: ModelSpec, vocab: str) -> str:
    """``<id>-<vocab>-<hash>``: the cache key of a shape (the hash covers every field the file depends on)."""
    fields = {k: getattr(spec, k) for k in (
        "architecture", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
        "intermediate_size", "tie_word_embeddings", "n_experts", "n_experts_per_tok", "moe_intermediate_size",
        "sliding_window", "n_sliding_layers", "max_position_embeddings")}
    h = hashlib.sha256(json.dumps([FORMAT_VERSION, SEED, vocab, fields], sort_keys=True).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in spec.id)[:60]
    return f"synthetic-{safe}-{vocab}-{h}"


def plan_synth(shape: str | ModelSpec, quant: str = "Q8_0", *, vocab: str | None = None) -> SynthPlan:
    """Decide the file for SHAPE at QUANT (pure: reads the catalog, nothing on disk)."""
    spec = resolve_shape(shape)
    qtype = normalize_quant(quant)
    arch = _gguf_arch(spec)
    _need(spec, "n_layers", "hidden_size", "n_heads", "n_kv_heads", "vocab_size")
    if not spec.is_moe or arch == "llama":
        _need(spec, "intermediate_size")
    native = qtype if qtype in NATIVE_TYPES else "Q8_0"
    voc = choose_vocab(spec, arch, vocab)
    L, d, V = int(spec.n_layers or 0), int(spec.hidden_size or 0), int(spec.vocab_size or 0)
    nq, nkv = int(spec.n_heads or 0), int(spec.n_kv_heads or 0)
    hd = int(spec.head_dim or d // nq)
    ff = int(spec.intermediate_size or 0)
    E, K = spec.n_experts, spec.n_experts_per_tok
    moe_ff = int(spec.moe_intermediate_size or ff)

    tensors: list[TensorPlan] = []

    def mat(name: str, rows: int, cols: int, experts: int = 0) -> None:
        shp = (experts, rows, cols) if experts else (rows, cols)
        tensors.append(TensorPlan(name, shp, _weight_type(native, shp)))

    def vec(name: str, n: int) -> None:
        tensors.append(TensorPlan(name, (n,), "F32"))

    mat("token_embd.weight", V, d)
    vec("output_norm.weight", d)
    if not spec.tie_word_embeddings:
        mat("output.weight", V, d)
    for i in range(L):
        b = f"blk.{i}"
        vec(f"{b}.attn_norm.weight", d)
        mat(f"{b}.attn_q.weight", nq * hd, d)
        mat(f"{b}.attn_k.weight", nkv * hd, d)
        mat(f"{b}.attn_v.weight", nkv * hd, d)
        mat(f"{b}.attn_output.weight", d, nq * hd)
        if arch == "qwen2":
            vec(f"{b}.attn_q.bias", nq * hd)
            vec(f"{b}.attn_k.bias", nkv * hd)
            vec(f"{b}.attn_v.bias", nkv * hd)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            vec(f"{b}.attn_q_norm.weight", hd)
            vec(f"{b}.attn_k_norm.weight", hd)
        if arch == "gemma3":
            vec(f"{b}.post_attention_norm.weight", d)
        vec(f"{b}.ffn_norm.weight", d)
        if spec.is_moe:
            mat(f"{b}.ffn_gate_inp.weight", E, d)
            mat(f"{b}.ffn_gate_exps.weight", moe_ff, d, experts=E)
            mat(f"{b}.ffn_up_exps.weight", moe_ff, d, experts=E)
            mat(f"{b}.ffn_down_exps.weight", d, moe_ff, experts=E)
        else:
            mat(f"{b}.ffn_gate.weight", ff, d)
            mat(f"{b}.ffn_up.weight", ff, d)
            mat(f"{b}.ffn_down.weight", d, ff)
        if arch == "gemma3":
            vec(f"{b}.post_ffw_norm.weight", d)
    # the router is small and llama.cpp keeps it in F32 in real files; Q8_0 it would still load
    tensors = [replace(t, type="F32") if t.name.endswith("ffn_gate_inp.weight") else t for t in tensors]

    ctx = min(int(spec.max_position_embeddings or 131072), 131072)
    md: dict[str, Any] = {
        "general.name": f"synthetic {spec.id} {qtype}",
        "general.description": (f"synthetic weights with the shapes of {spec.id} (phasescope engine synth): "
                                "timings are real, text is meaningless"),
        "general.file_type": _FTYPE[native],
        "general.quantization_version": 2,
        KEY_SYNTHETIC: True,
        KEY_SHAPE: spec.id,
        KEY_VOCAB: voc,
        KEY_SEED: SEED,
        f"{arch}.context_length": ctx,
        f"{arch}.embedding_length": d,
        f"{arch}.block_count": L,
        f"{arch}.feed_forward_length": ff or moe_ff,
        f"{arch}.attention.head_count": nq,
        f"{arch}.attention.head_count_kv": nkv,
        f"{arch}.attention.key_length": hd,
        f"{arch}.attention.value_length": hd,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.dimension_count": hd,
        f"{arch}.rope.freq_base": _ROPE_BASE.get(arch, 10000.0),
        f"{arch}.vocab_size": V,
    }
    if spec.is_moe:
        md[f"{arch}.expert_count"] = E
        md[f"{arch}.expert_used_count"] = K
        if arch == "qwen3moe":
            md[f"{arch}.expert_feed_forward_length"] = moe_ff
    if arch == "gemma3" and spec.sliding_window:
        md[f"{arch}.attention.sliding_window"] = int(spec.sliding_window)
    notes = []
    if VOCABS[voc] < V:
        notes.append(f"tokenizer {voc} ({VOCABS[voc]:,} tokens) padded with unused tokens to {V:,}")
    plan = SynthPlan(shape_id=spec.id, spec=spec, arch=arch, qtype=qtype, native_type=native, vocab=voc,
                     tensors=tensors, metadata=md, key=shape_key(spec, voc), notes=notes)
    plan.native_bytes = sum(t.nbytes for t in tensors)
    plan.final_bytes = estimate_final_bytes(plan)
    return plan


def estimate_final_bytes(plan: SynthPlan) -> int:
    """The final file's tensor bytes: exact for native types, ``params × bits/8`` of the type's mix otherwise
    (llama.cpp's measured whole-file averages, :mod:`phasescope.theory.quant`), norms at F32."""
    if not plan.needs_quantize:
        return plan.native_bytes
    from phasescope.errors import UnknownQuantError
    from phasescope.theory.quant import get_quant

    try:
        bits = get_quant(plan.qtype.lower()).bits_per_weight
    except UnknownQuantError:
        bits = 8.5  # an unknown mix: no more than its Q8_0 source
    vecs = sum(t.nbytes for t in plan.tensors if t.type == "F32")
    mats = sum(t.n_elements for t in plan.tensors if t.type != "F32")
    return int(mats * bits / 8) + vecs


# --- room checks ----------------------------------------------------------------------------------
HEADER_ROOM = 64 << 20  # the tokenizer and tensor table, generously
DISK_MARGIN = 1 << 30  # leave 1 GiB free
MEMORY_SHARE = 0.9  # a model above 90 % of the available memory would page


def mem_available() -> int | None:
    """``MemAvailable`` from /proc/meminfo (bytes), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def disk_free(path: Path) -> int | None:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def bytes_to_write(plan: SynthPlan) -> int:
    """What a run would still write: the native file unless cached, the quantized one unless cached."""
    n = 0
    if not plan.native_path.exists():
        n += plan.native_bytes + HEADER_ROOM
    if plan.needs_quantize and not plan.path().exists():
        n += plan.final_bytes + HEADER_ROOM
    return n


def check_room(plan: SynthPlan, *, free_disk: int | None = None, free_memory: int | None = None) -> None:
    """Refuse (InputError, one line) when the files would not fit on disk or the model in memory."""
    gb = 1e9
    need_disk = bytes_to_write(plan)
    free_disk = disk_free(synth_dir()) if free_disk is None else free_disk
    if need_disk and free_disk is not None and need_disk + DISK_MARGIN > free_disk:
        raise InputError(
            f"synthetic {plan.shape_id} {plan.qtype} needs about {need_disk / gb:.1f} GB on disk"
            + (f" (its {plan.native_type} source {plan.native_bytes / gb:.1f} GB + the {plan.qtype} file)"
               if plan.needs_quantize and not plan.native_path.exists() else "")
            + f" but {synth_dir()} has {free_disk / gb:.1f} GB free; free some space or pick a smaller shape or type")
    free_memory = mem_available() if free_memory is None else free_memory
    if free_memory is not None and plan.final_bytes > MEMORY_SHARE * free_memory:
        raise InputError(
            f"synthetic {plan.shape_id} {plan.qtype} is about {plan.final_bytes / gb:.1f} GB of weights but this "
            f"machine has {free_memory / gb:.1f} GB of memory available; it would not run from memory "
            "(pick a smaller shape or a smaller type, e.g. --quant q4_k_m)")


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


def _quantize(src: Path, dst: Path, qtype: str, log: Path) -> None:
    from phasescope.engine.binary import find_tool

    tool = find_tool("llama-quantize")
    cmd = [str(tool), "--allow-requantize", str(src), str(dst), qtype]
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
            _quantize(src, tmp, plan.qtype, out.with_name(out.name + ".log"))
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
    """The synthetic model the embedded engine starts on inside :func:`use_synthetic`, else None."""
    return _ACTIVE


def alias_of(res: SynthResult) -> str:
    """The model name the engine serves a synthetic file under: ``synthetic-<shape>-<type>``."""
    return f"synthetic-{res.shape_id}-{res.qtype.lower()}"


def tag_of(res: SynthResult) -> dict[str, Any]:
    """What a stored run made on a synthetic model carries in its params (``params.synthetic``)."""
    return {"weights": "synthetic weights", "shape": res.shape_id, "quant": res.qtype, "vocab": res.vocab,
            "arch": res.plan.arch, "file": res.path.name, "size_bytes": res.size_bytes}


@contextlib.contextmanager
def use_synthetic(res: SynthResult) -> Iterator[dict[str, Any]]:
    """Inside the block the embedded engine (started with no model path) serves ``res`` under
    :func:`alias_of`, and every run opened (:func:`phasescope.lifecycle.run_output`) carries
    ``params.synthetic`` (:func:`tag_of`). Process-wide: a command runs one at a time."""
    global _ACTIVE
    from phasescope.lifecycle import run_tags

    prev, _ACTIVE = _ACTIVE, res
    try:
        with run_tags(synthetic=tag_of(res)):
            yield tag_of(res)
    finally:
        _ACTIVE = prev


def synthetic_of_props(props: Any) -> dict[str, Any] | None:
    """:func:`synthetic_info` of the file a llama-server's ``/props`` names, when it is on this machine."""
    path = props.get("model_path") if isinstance(props, dict) else None
    if not path or not os.path.isfile(str(path)):
        return None
    return synthetic_info(str(path))
