"""The server's current settings, as far as anyone tells: what the server reports and what the user
passes with ``--server-flags "…"``. Advice is only given for a change that differs from these.

Sources, strongest first (a later source never overwrites an earlier one's value):

1. ``--server-flags "…"`` — the command line the server was started with (llama.cpp ``-b 512 -ub
   256 -np 4``, vLLM ``--max-num-seqs 64 --max-num-batched-tokens 2048 --quantization fp8``, SGLang
   ``--chunked-prefill-size``, Ollama ``OLLAMA_NUM_PARALLEL=2``), and for the embedded engine the
   command line phasescope started it with;
2. llama.cpp ``/props`` (``total_slots``, ``n_ctx``, ``model_ftype``, ``model_path``, ``n_batch``/``n_ubatch``
   where the build reports them); vLLM ``/metrics`` ``cache_config_info`` labels
   (``enable_prefix_caching``, ``cache_dtype``), ``/v1/models`` ``max_model_len``; Ollama ``/api/show``
   (``details.quantization_level``, ``parameters``);
3. documented defaults (llama.cpp ``-b 2048 -ub 512``), marked as such.

Where the server computes — ``backend`` ``cpu`` or ``gpu`` — comes from the same sources: ``-ngl 0`` (or
``--device none``) on its command line is a CPU server, ``-ngl N > 0`` a GPU one, and the embedded
engine is phasescope's own CPU-only llama.cpp build. Advice for one backend (``-ngl 99``, ``-ub 1024 on
GPU``) is only given where the backend is that one or unknown (:mod:`phasescope.diagnose.knobs`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

#: llama.cpp's documented defaults (common/common.h): used when nothing else says, marked "default"
LLAMACPP_DEFAULTS = {"n_batch": 2048, "n_ubatch": 512}

#: GGUF types from larger to smaller (the ladder advice walks down one step at a time)
QUANT_LADDER = ("fp32", "fp16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")

_FTYPE_WORDS = {  # llama.cpp /props model_ftype strings ("Q4_K - Medium") → canonical names
    "small": "s", "medium": "m", "large": "l",
}


def canonical_quant(text: str | None) -> str | None:
    """``"Q4_K - Medium"``, ``"Q4_K_M"``, ``"q4_k_m"``, ``gemma-3-270m-q4_k_m.gguf`` → ``q4_k_m``; None if unknown."""
    if not text:
        return None
    s = str(text).strip().lower()
    m = re.match(r"^([a-z0-9_]+)\s*-\s*(small|medium|large)$", s)
    if m:
        s = f"{m.group(1)}_{_FTYPE_WORDS[m.group(2)]}"
    from phasescope.theory.quant import QUANT_FORMATS, get_quant

    try:
        return get_quant(s).name
    except Exception:  # noqa: BLE001 - not a bare type name: look for one inside a file name
        pass
    for name in sorted(QUANT_FORMATS, key=len, reverse=True):
        if re.search(rf"(?:^|[-_.]){re.escape(name)}(?:$|[-_.])", s):
            return name
    return None


@dataclass
class ServerSettings:
    """Known current values (``None`` = nobody said); ``sources[field]`` says who said it."""

    n_batch: int | None = None
    n_ubatch: int | None = None
    n_parallel: int | None = None
    ctx_size: int | None = None
    model_file_type: str | None = None  # canonical, e.g. q4_k_m
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    chunked_prefill: bool | None = None
    max_model_len: int | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    prefix_caching: bool | None = None
    flash_attn: str | None = None
    threads: int | None = None
    n_gpu_layers: int | None = None
    #: where the model computes: ``cpu`` | ``gpu`` (None: nobody said)
    backend: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def set(self, name: str, value: Any, source: str) -> None:
        if value is None or getattr(self, name) is not None:
            return
        setattr(self, name, value)
        self.sources[name] = source

    def src(self, name: str) -> str:
        return self.sources.get(name, "unknown")

    def shown(self, name: str) -> str:
        """``2048 (llama.cpp default)`` — a current value and where it came from."""
        return f"{getattr(self, name)} ({self.src(name)})"


def _int(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def _layers(v: Any) -> int | None:
    """``-ngl`` values: a count, or ``all``/``auto`` (llama.cpp accepts both; all = every layer)."""
    t = str(v).strip().lower()
    if t == "all":
        return 999
    if t == "auto":
        return -1  # the build decides: not a number phasescope can state
    return _int(v)


def _bool(v: Any) -> bool | None:
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    return None


#: flag → (field, converter); both llama.cpp short and long forms, vLLM/SGLang/TGI spellings
_FLAGS: dict[str, tuple[str, Any]] = {
    "-b": ("n_batch", _int), "--batch-size": ("n_batch", _int),
    "-ub": ("n_ubatch", _int), "--ubatch-size": ("n_ubatch", _int),
    "-np": ("n_parallel", _int), "--parallel": ("n_parallel", _int),
    "-c": ("ctx_size", _int), "--ctx-size": ("ctx_size", _int),
    "-fa": ("flash_attn", str), "--flash-attn": ("flash_attn", str),
    "--max-num-seqs": ("max_num_seqs", _int), "--max-running-requests": ("max_num_seqs", _int),
    "--max-concurrent-requests": ("max_num_seqs", _int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", _int),
    "--chunked-prefill-size": ("max_num_batched_tokens", _int),
    "--max-batch-prefill-tokens": ("max_num_batched_tokens", _int),
    "--max-model-len": ("max_model_len", _int), "--context-length": ("max_model_len", _int),
    "--quantization": ("quantization", str), "--quantize": ("quantization", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str), "-ctk": ("kv_cache_dtype", str),
    "--cache-type-k": ("kv_cache_dtype", str),
    "-t": ("threads", _int), "--threads": ("threads", _int),
    "-ngl": ("n_gpu_layers", _layers), "--n-gpu-layers": ("n_gpu_layers", _layers),
    "--gpu-layers": ("n_gpu_layers", _layers), "-dev": ("device_list", str), "--device": ("device_list", str),
}
_SWITCHES = {
    "--enable-chunked-prefill": ("chunked_prefill", True), "--no-enable-chunked-prefill": ("chunked_prefill", False),
    "--enable-prefix-caching": ("prefix_caching", True), "--no-enable-prefix-caching": ("prefix_caching", False),
    "--disable-radix-cache": ("prefix_caching", False), "--no-cache-prompt": ("prefix_caching", False),
}
_ENV: dict[str, tuple[str, Any]] = {"OLLAMA_NUM_PARALLEL": ("n_parallel", _int), "OLLAMA_CONTEXT_LENGTH": ("ctx_size", _int),
        "OLLAMA_KV_CACHE_TYPE": ("kv_cache_dtype", str), "OLLAMA_FLASH_ATTENTION": ("flash_attn", str)}


def parse_server_flags(text: str | None, settings: ServerSettings | None = None,
                       source: str = "--server-flags") -> ServerSettings:
    """Read a server command line (``-b 512 --parallel=4 OLLAMA_NUM_PARALLEL=2 -m x-Q4_K_M.gguf``).

    Unknown flags are ignored (they change nothing phasescope advises on); a value that does not
    parse raises ``InputError`` with the flag named."""
    from phasescope.errors import InputError

    s = settings or ServerSettings()
    if not text:
        return s
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"--server-flags: {exc}") from None
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        key, val = (w.split("=", 1) + [None])[:2] if w.startswith("-") and "=" in w else (w, None)
        if not w.startswith("-") and "=" in w:
            env, v = w.split("=", 1)
            if env in _ENV:
                name, conv = _ENV[env]
                s.set(name, conv(v), source)
            continue
        if key in _SWITCHES:
            name, v = _SWITCHES[key]
            s.set(name, v, source)
            continue
        if key in ("-m", "--model"):
            if val is None and i < len(words):
                val, i = words[i], i + 1
            s.set("model_file_type", canonical_quant(val), source)
            continue
        if key in _FLAGS:
            if val is None:
                if i >= len(words):
                    raise InputError(f"--server-flags: {key} needs a value")
                val, i = words[i], i + 1
            name, conv = _FLAGS[key]
            if name == "device_list":  # llama.cpp --device none (no GPU at all); vLLM's old --device cpu|cuda
                dv = str(val).strip().lower()
                be = "cpu" if dv in ("none", "cpu") else ("gpu" if dv.startswith(("cuda", "rocm")) else None)
                if be:
                    s.set("backend", be, f"{source} {key} {val}")
                continue
            v = conv(val)
            if v is None:
                raise InputError(f"--server-flags: {key} {val!r} is not a number")
            if name == "quantization" or name == "kv_cache_dtype":
                v = str(v).lower()
            if name == "n_gpu_layers" and v == -1:
                continue  # -ngl auto: the server's own choice, unknown here
            s.set(name, v, source)
    if s.n_gpu_layers is not None:
        s.set("backend", "gpu" if s.n_gpu_layers > 0 else "cpu",
              f"{s.src('n_gpu_layers')} -ngl {s.n_gpu_layers}")
    return s


#: what the embedded engine is (phasescope.engine.build configures llama.cpp with the CPU backend only)
EMBEDDED_BACKEND_SOURCE = "the embedded engine: phasescope's CPU-only llama.cpp build"


def from_llamacpp_props(props: dict[str, Any] | None, s: ServerSettings) -> ServerSettings:
    if not isinstance(props, dict):
        return s
    src = "llama.cpp /props"
    s.set("n_parallel", _int(props.get("total_slots")), f"{src} total_slots")
    dgs = props.get("default_generation_settings") or {}
    for name in ("n_batch", "n_ubatch"):
        s.set(name, _int(props.get(name) if props.get(name) is not None else dgs.get(name)), f"{src} {name}")
    s.set("model_file_type", canonical_quant(props.get("model_ftype")), f"{src} model_ftype")
    s.set("model_file_type", canonical_quant(props.get("model_path")), f"{src} model_path")
    return s


def from_vllm_info(info: dict[str, dict[str, str]], models: list[dict[str, Any]], s: ServerSettings) -> ServerSettings:
    cc = info.get("vllm:cache_config_info") or info.get("cache_config_info") or {}
    if cc:
        s.set("prefix_caching", _bool(cc.get("enable_prefix_caching")), "/metrics vllm:cache_config_info")
        dt = cc.get("cache_dtype")
        s.set("kv_cache_dtype", dt.lower() if dt else None, "/metrics vllm:cache_config_info")
    for name, labels in info.items():  # scheduler/model info gauges where a build exports them
        for key, field_ in (("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens"),
                            ("enable_chunked_prefill", "chunked_prefill"), ("quantization", "quantization")):
            if key in labels:
                v = labels[key]
                conv = _bool(v) if field_ == "chunked_prefill" else (_int(v) if field_.startswith("max") else v.lower())
                s.set(field_, conv, f"/metrics {name}")
    for m in models:
        if m.get("max_model_len"):
            s.set("max_model_len", _int(m["max_model_len"]), "/v1/models max_model_len")
            break
    return s


def from_ollama_show(show: dict[str, Any] | None, s: ServerSettings) -> ServerSettings:
    if not isinstance(show, dict):
        return s
    det = show.get("details") or {}
    s.set("model_file_type", canonical_quant(det.get("quantization_level")), "Ollama /api/show details.quantization_level")
    for line in str(show.get("parameters") or "").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            k, v = parts[0], parts[-1]
            if k == "num_ctx":
                s.set("ctx_size", _int(v), "Ollama /api/show parameters num_ctx")
            elif k == "num_batch":
                s.set("n_batch", _int(v), "Ollama /api/show parameters num_batch")
    return s


def from_device(s: ServerSettings, device: str | None) -> ServerSettings:
    """The backend from the ``--device`` the ceilings use, when nothing stronger said: a catalog GPU
    is a GPU server, a catalog CPU a CPU one (``local`` says nothing: ``hw`` measures only the CPU)."""
    if not device or s.backend is not None:
        return s
    try:
        from phasescope.theory.devices import get_device

        kind = get_device(device).kind
    except Exception:  # noqa: BLE001 - an unknown device was reported where it was given
        return s
    if kind in ("gpu", "cpu"):
        s.set("backend", kind, f"--device {device}")
    return s


def with_defaults(s: ServerSettings, engine: str | None) -> ServerSettings:
    if engine == "llamacpp":
        for k, v in LLAMACPP_DEFAULTS.items():
            s.set(k, v, "llama.cpp default")
    return s


def next_smaller_quant(current: str | None) -> str | None:
    """One step down :data:`QUANT_LADDER` from ``current`` (by bits per weight); None at the bottom."""
    if current is None:
        return None
    from phasescope.theory.quant import bits_per_weight

    try:
        cur = bits_per_weight(current)
    except Exception:  # noqa: BLE001
        return None
    smaller = [q for q in QUANT_LADDER if bits_per_weight(q) < cur - 0.3]
    return smaller[0] if smaller else None


async def discover_settings(session: Any, target: Any, *, props: dict[str, Any] | None = None,
                            server_flags: str | None = None, engine_args: list[str] | None = None) -> ServerSettings:
    """Everything known about the server's current settings (see the module docstring)."""
    s = parse_server_flags(server_flags)
    if engine_args:
        parse_server_flags(shlex.join(engine_args), s, source="the embedded engine's command line")
        s.set("backend", "cpu", EMBEDDED_BACKEND_SOURCE)
    engine = getattr(target, "engine", None)
    try:
        if engine == "llamacpp":
            from phasescope.apis.llamacpp import get_props

            from_llamacpp_props(props if props is not None else await get_props(session, target), s)
        elif engine == "ollama" or getattr(target, "api", None) == "ollama":
            from phasescope.apis.ollama import show_model

            from_ollama_show(await show_model(session, target), s)
        else:
            from phasescope.apis.openai import list_models, metrics_info_labels

            from_vllm_info(await metrics_info_labels(session, target), await list_models(session, target), s)
    except Exception:  # noqa: BLE001 - settings are optional context for advice, never a failure
        pass
    return with_defaults(s, engine)
