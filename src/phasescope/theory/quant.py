"""Weight formats → bits per weight, KV-cache dtypes → bytes per element, GGUF type ids → names.

Pure tables (no I/O). Sources, all from ``theory.md §4``:

* GGUF block types: llama.cpp ``ggml/src/ggml-common.h`` block structs (``static_assert``-ed sizes),
  e.g. Q8_0 = 34 B per 32 weights = 8.5 bits, Q6_K = 210 B / 256 = 6.5625, Q4_K = 144 B / 256 = 4.5.
* GGUF *mixes* (``_S``/``_M``/``_L``, some tensors kept at higher precision): whole-file averages measured on
  Llama-3.1-8B in llama.cpp ``tools/quantize/README.md`` (Q4_K_M 4.8944, Q5_K_M 5.7036, ...); mixes not in that
  table are converted from the GiB sizes in ``tools/quantize/quantize.cpp`` QUANT_OPTIONS for Llama-3-8B
  (8.03e9 params; e.g. Q3_K_M 3.74 GiB → 4.00 bits) and marked ``derived``.
* Other formats from their definitions: FP16/BF16 16, FP8 8 (+ per-tensor scale), INT8 8, INT4 GPTQ/AWQ at
  group 128 = 4 + 16/128 (fp16 scale) + 4/128 (zero) ≈ 4.156, bitsandbytes NF4 ≈ 4.127, MXFP4 4.25
  (32 × E2M1 + one E8M0 scale), NVFP4 4.5.

A real GGUF file is better than any table: :func:`phasescope.theory.models.load_model_spec` sums its
tensor sizes exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from phasescope.errors import UnknownQuantError


@dataclass(frozen=True)
class QuantFormat:
    """One weight storage format.

    ``bits_per_weight`` is the average stored bits per parameter including block scales; ``compute`` is
    the math path a GPU uses for the matmuls (``bf16`` for weight-only formats that are dequantized,
    ``fp8``/``int8`` when the tensor cores consume the format directly) — it picks the compute peak.
    """

    name: str
    bits_per_weight: float
    compute: str
    note: str


def _q(name: str, bits: float, compute: str, note: str) -> QuantFormat:
    return QuantFormat(name=name, bits_per_weight=bits, compute=compute, note=note)


#: canonical name → format (lower case; look up through :func:`get_quant`, which also takes aliases)
QUANT_FORMATS: dict[str, QuantFormat] = {
    q.name: q
    for q in [
        _q("fp32", 32.0, "fp32", "IEEE float32"),
        _q("fp16", 16.0, "bf16", "IEEE float16 (runs on the 16-bit tensor path)"),
        _q("bf16", 16.0, "bf16", "bfloat16"),
        _q("fp8", 8.0, "fp8", "FP8 E4M3/E5M2, per-tensor scale (negligible)"),
        _q("fp8_block128", 8.002, "fp8", "FP8 with one fp32 scale per 128x128 block (DeepSeek-V3): 8 + 32/16384"),
        _q("int8", 8.0, "int8", "INT8 W8A8 / weight-only with per-channel scale (negligible)"),
        _q("int4", 4.125, "bf16", "INT4 symmetric, group 128, fp16 scale: 4 + 16/128"),
        _q("gptq", 4.156, "bf16", "GPTQ 4-bit group 128: 4 + 16/128 scale + 4/128 zero"),
        _q("awq", 4.156, "bf16", "AWQ 4-bit group 128: 4 + 16/128 scale + 4/128 zero"),
        _q("nf4", 4.127, "bf16", "bitsandbytes NF4: block 64, double-quantized scales"),
        _q("mxfp4", 4.25, "bf16", "OCP MXFP4: 32 x E2M1 + one E8M0 scale = 17 B / 32"),
        _q("nvfp4", 4.5, "bf16", "NVFP4 (ggml): 64 weights in 36 B"),
        # GGUF single-type blocks (ggml-common.h)
        _q("f16", 16.0, "bf16", "GGUF F16"),
        _q("q8_0", 8.5, "bf16", "GGUF Q8_0: 34 B / 32 weights (file average 8.5008)"),
        _q("q6_k", 6.5625, "bf16", "GGUF Q6_K: 210 B / 256 (file average 6.5633)"),
        _q("q5_0", 5.5, "bf16", "GGUF Q5_0: 22 B / 32"),
        _q("q5_1", 6.0, "bf16", "GGUF Q5_1: 24 B / 32"),
        _q("q5_k", 5.5, "bf16", "GGUF Q5_K block: 176 B / 256"),
        _q("q4_0", 4.5, "bf16", "GGUF Q4_0: 18 B / 32"),
        _q("q4_1", 5.0, "bf16", "GGUF Q4_1: 20 B / 32"),
        _q("q4_k", 4.5, "bf16", "GGUF Q4_K block: 144 B / 256"),
        _q("q3_k", 3.4375, "bf16", "GGUF Q3_K block: 110 B / 256"),
        _q("q2_k", 3.1593, "bf16", "GGUF Q2_K file average (block alone 2.625)"),
        _q("iq4_nl", 4.5, "bf16", "GGUF IQ4_NL: 18 B / 32"),
        _q("iq4_xs", 4.4597, "bf16", "GGUF IQ4_XS file average (block 4.25)"),
        _q("iq3_m", 3.66, "bf16", "GGUF IQ3_M mix: 3.66 bpw (quantize.cpp)"),
        _q("iq3_s", 3.44, "bf16", "GGUF IQ3_S: 3.44 bpw (quantize.cpp)"),
        _q("iq3_xs", 3.3, "bf16", "GGUF IQ3_XS: 3.3 bpw (quantize.cpp)"),
        _q("iq3_xxs", 3.06, "bf16", "GGUF IQ3_XXS: 3.06 bpw (quantize.cpp)"),
        _q("iq2_m", 2.7, "bf16", "GGUF IQ2_M: 2.7 bpw (quantize.cpp)"),
        _q("iq2_s", 2.5, "bf16", "GGUF IQ2_S: 2.5 bpw (quantize.cpp)"),
        _q("iq2_xs", 2.31, "bf16", "GGUF IQ2_XS: 2.31 bpw (quantize.cpp)"),
        _q("iq2_xxs", 2.06, "bf16", "GGUF IQ2_XXS: 2.06 bpw (quantize.cpp)"),
        _q("iq1_m", 1.75, "bf16", "GGUF IQ1_M: 1.75 bpw (quantize.cpp)"),
        _q("iq1_s", 1.56, "bf16", "GGUF IQ1_S: 1.56 bpw (quantize.cpp)"),
        # GGUF mixes: measured whole-file averages (Llama-3.1-8B, tools/quantize/README.md)
        _q("q5_k_m", 5.7036, "bf16", "GGUF Q5_K_M mix, file average (Llama-3.1-8B)"),
        _q("q5_k_s", 5.5704, "bf16", "GGUF Q5_K_S mix, file average (Llama-3.1-8B)"),
        _q("q4_k_m", 4.8944, "bf16", "GGUF Q4_K_M mix, file average (Llama-3.1-8B; ~4.85 on LLaMA-7B shapes)"),
        _q("q4_k_s", 4.6672, "bf16", "GGUF Q4_K_S mix, file average (Llama-3.1-8B)"),
        _q("q3_k_l", 4.2979, "bf16", "GGUF Q3_K_L mix, file average (Llama-3.1-8B)"),
        _q("q3_k_m", 4.00, "bf16", "GGUF Q3_K_M mix [derived: 3.74 GiB for Llama-3-8B in quantize.cpp]"),
        _q("q3_k_s", 3.65, "bf16", "GGUF Q3_K_S mix [derived: 3.41 GiB for Llama-3-8B in quantize.cpp]"),
        _q("q2_k_s", 3.17, "bf16", "GGUF Q2_K_S mix [derived: 2.96 GiB for Llama-3-8B in quantize.cpp]"),
        _q("mxfp4_moe", 4.25, "bf16", "GGUF MXFP4 MoE file type: experts MXFP4, the rest higher precision"),
        _q("tq1_0", 1.6875, "bf16", "GGUF TQ1_0 ternary: 54 B / 256"),
        _q("tq2_0", 2.0625, "bf16", "GGUF TQ2_0 ternary: 66 B / 256"),
    ]
}

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "float8": "fp8",
    "w8a8": "int8",
    "int4_awq": "awq",
    "awq_int4": "awq",
    "gptq_int4": "gptq",
    "bnb_nf4": "nf4",
    "bitsandbytes": "nf4",
    "q4_k_m_gguf": "q4_k_m",
    "q5_k_gguf": "q5_k",
    "q8": "q8_0",
    "q6": "q6_k",
    "q3_k_gguf": "q3_k",
    "mostly_f16": "fp16",
    "mostly_bf16": "bf16",
    "all_f32": "fp32",
}


#: names without underscores (``bf-16`` → ``bf16``, ``Q4KM`` → ``q4_k_m``)
_COMPACT: dict[str, str] = {n.replace("_", ""): n for n in QUANT_FORMATS}


def _norm(name: str) -> str:
    n = re.sub(r"[\s\-.]+", "_", name.strip().lower())
    if n.startswith("mostly_") and n not in _ALIASES:
        n = n[len("mostly_") :]
    return _ALIASES.get(n, n)


def get_quant(name: str) -> QuantFormat:
    """The :class:`QuantFormat` for a name (case/dash-insensitive, aliases allowed), else UnknownQuantError."""
    key = _norm(name)
    fmt = QUANT_FORMATS.get(key) or QUANT_FORMATS.get(_COMPACT.get(key.replace("_", ""), ""))
    if fmt is None:
        known = ", ".join(sorted(QUANT_FORMATS))
        raise UnknownQuantError(f"unknown quantization or dtype {name!r}", hint=f"known: {known}")
    return fmt


def bits_per_weight(name: str) -> float:
    """Average stored bits per weight of a format (theory.md §4 table), e.g. ``q4_k_m`` → 4.8944."""
    return get_quant(name).bits_per_weight


def bytes_per_weight(name: str) -> float:
    """``bits_per_weight(name) / 8``."""
    return bits_per_weight(name) / 8.0


def list_quants() -> list[QuantFormat]:
    """All known weight formats, sorted by bits per weight (largest first)."""
    return sorted(QUANT_FORMATS.values(), key=lambda q: (-q.bits_per_weight, q.name))


# --- KV cache element types -------------------------------------------------------------------------------

#: bytes per cached K/V element. fp8 = 1 B (+ per-tensor scale); llama.cpp ``--cache-type-k/v q8_0`` stores
#: 34 B per 32 elements, ``q4_0`` 18 B / 32 (ggml-common.h block sizes; theory.md §2/§4).
KV_DTYPES: dict[str, float] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}

_KV_ALIASES = {
    "f32": "fp32",
    "float32": "fp32",
    "f16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "auto": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
    "int8": "fp8",
}


def kv_bytes_per_element(name: str) -> float:
    """Bytes per K or V element for a KV-cache dtype (fp16/bf16 2, fp8 1, q8_0 1.0625, q4_0 0.5625)."""
    key = re.sub(r"[\s\-.]+", "_", name.strip().lower())
    key = _KV_ALIASES.get(key, key)
    if key not in KV_DTYPES:
        raise UnknownQuantError(
            f"unknown KV-cache dtype {name!r}", hint="known: " + ", ".join(sorted(KV_DTYPES))
        )
    return KV_DTYPES[key]


# --- GGUF ids ---------------------------------------------------------------------------------------------

#: ``general.file_type`` (llama.h ``enum llama_ftype``) → quant name understood by :func:`get_quant`
GGUF_FILE_TYPES: dict[int, str] = {
    0: "fp32",
    1: "fp16",
    2: "q4_0",
    3: "q4_1",
    7: "q8_0",
    8: "q5_0",
    9: "q5_1",
    10: "q2_k",
    11: "q3_k_s",
    12: "q3_k_m",
    13: "q3_k_l",
    14: "q4_k_s",
    15: "q4_k_m",
    16: "q5_k_s",
    17: "q5_k_m",
    18: "q6_k",
    19: "iq2_xxs",
    20: "iq2_xs",
    21: "q2_k_s",
    22: "iq3_xs",
    23: "iq3_xxs",
    24: "iq1_s",
    25: "iq4_nl",
    26: "iq3_s",
    27: "iq3_m",
    28: "iq2_s",
    29: "iq2_m",
    30: "iq4_xs",
    31: "iq1_m",
    32: "bf16",
    36: "tq1_0",
    37: "tq2_0",
    38: "mxfp4_moe",
    39: "nvfp4",
}


def gguf_file_type_name(file_type: int) -> str:
    """Name of a GGUF ``general.file_type`` id (e.g. 15 → ``q4_k_m``); ``ftype<N>`` when unknown."""
    return GGUF_FILE_TYPES.get(int(file_type), f"ftype{int(file_type)}")


#: ggml tensor type id → (name, block size in elements, bytes per block) — ggml-common.h / gguf-py constants
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}


def ggml_tensor_bytes(type_id: int, n_elements: int) -> int:
    """Stored bytes of a tensor: ``n_elements / block_size × bytes_per_block`` (ggml-common.h)."""
    if type_id not in GGML_TYPES:
        raise UnknownQuantError(f"unknown ggml tensor type id {type_id}")
    _name, block, size = GGML_TYPES[type_id]
    return (n_elements // block) * size
