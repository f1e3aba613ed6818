"""The plan of a synthetic GGUF (pure: no file is read or written): which GGUF architecture, which
tensors (names, shapes in numpy order, types) llama.cpp's loader expects for a catalog shape (dense and
MoE, GQA, tied embeddings), which pinned tokenizer, the header's metadata, the sizes, and the checks that
refuse a file the disk or the memory could not hold. :mod:`phasescope.engine.synth` writes what this plans.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phasescope.errors import InputError
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
    """Everything :func:`~phasescope.engine.synth.synthesize` will write, decided before a byte is written (pure)."""

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
        "general.name": synthetic_name(spec.id, native),  # the Q8_0 source serves q8_0 requests too
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


def synthetic_name(shape_id: str, qtype: str) -> str:
    """``general.name`` of a synthetic file: ``synthetic <shape> <TYPE>``."""
    return f"synthetic {shape_id} {qtype}"


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
