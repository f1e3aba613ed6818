"""``phasescope engine quantize``: other precisions of a GGUF with llama.cpp's ``llama-quantize``.

Used to show the quantization effect on decode speed on a real engine: decode reads every weight
once per token, so bytes/token ≈ Σ tensor bytes; halving bytes per weight halves the bandwidth
roof's time but not the dequantization compute (see ``benchmarks/engine.py``). Outputs are cached
in ``<engine_dir>/models/quant/<stem>-<TYPE>[-pure].gguf`` (written to a temporary name and renamed,
so a file there is complete). Requantizing an already quantized model (the bundled one is Q4_K_M)
needs ``allow_requantize``; ``pure`` keeps every tensor at the target type (without it llama-quantize
keeps e.g. Gemma's 262k×640 token embedding at Q8_0, so Q4_0 barely shrinks the file).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from phasescope.errors import EngineError, InputError
from phasescope.engine.binary import find_tool
from phasescope.engine.model import check_gguf_file, ensure_bundled_model
from phasescope.engine.paths import quant_dir

#: the llama-quantize type names accepted here (case-insensitive)
QUANT_TYPES = (
    "F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S",
    "Q4_1", "Q4_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4_MOE",
)


@dataclass
class QuantResult:
    type: str
    path: Path
    size_bytes: int
    cached: bool
    seconds: float | None


def normalize_type(name: str) -> str:
    t = name.strip().upper()
    if t not in QUANT_TYPES:
        raise InputError(f"unknown quantization type {name!r}; choose one of {', '.join(QUANT_TYPES)}")
    return t


def output_path(model: Path, qtype: str, pure: bool) -> Path:
    stem = model.name.removesuffix(".gguf")
    return quant_dir() / f"{stem}-{qtype}{'-pure' if pure else ''}.gguf"


def quantize(
    qtype: str,
    *,
    model_path: str | os.PathLike[str] | None = None,
    allow_requantize: bool = False,
    pure: bool = False,
    force: bool = False,
    threads: int | None = None,
) -> QuantResult:
    """Quantize ``model_path`` (default: the bundled model) to ``qtype``; reuse the cached output."""
    t = normalize_type(qtype)
    src = ensure_bundled_model() if model_path is None else check_gguf_file(Path(model_path))
    out = output_path(src, t, pure)
    if out.exists() and not force:
        return QuantResult(t, out, out.stat().st_size, True, None)
    tool = find_tool("llama-quantize")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    cmd = [str(tool)]
    if allow_requantize:
        cmd.append("--allow-requantize")
    if pure:
        cmd.append("--pure")
    cmd += [str(src), str(tmp), t]
    if threads:
        cmd.append(str(threads))
    log = out.with_name(out.name + ".log")
    t0 = time.monotonic()
    with log.open("w") as lf:
        proc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, check=False)
    secs = time.monotonic() - t0
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        text = log.read_text(errors="replace")
        if "requantiz" in text and not allow_requantize:
            raise InputError(
                f"{src.name} is already quantized; pass --allow-requantize to requantize it to {t} (log: {log})"
            )
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        bad = [ln for ln in lines if any(w in ln.lower() for w in ("error", "failed", "invalid", "unknown"))]
        line = (bad or lines or [f"exit status {proc.returncode}"])[-1]
        raise EngineError(f"llama-quantize to {t} failed: {line}; log: {log}")
    os.replace(tmp, out)
    return QuantResult(t, out, out.stat().st_size, False, secs)
