"""The device catalog: memory size, memory bandwidth and dense compute peaks of GPUs, CPUs and accelerators.

Rows live in the package data file ``phasescope/data/devices.csv`` (every row carries a ``source`` column
saying where each figure comes from).
All figures are vendor ceilings, not measurements — except the device ``local``, which ``phasescope hw``
measures on this machine and saves as JSON in the phasescope config directory:

* ``$PHASESCOPE_HOME`` when set, else ``$XDG_CONFIG_HOME/phasescope``, else ``~/.config/phasescope``;
* file ``local_device.json`` there (see :func:`local_device_path`).

Reading the catalog is I/O on package data; the arithmetic on a :class:`Device` lives in
:mod:`phasescope.theory.roofline` and is pure.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import os
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from phasescope.errors import InputError, UnknownDeviceError

#: the six devices of the seed article's decode-ceiling table, in its order
DEFAULT_DEVICE_IDS: tuple[str, ...] = (
    "cpu-ddr5-5600-2ch",
    "a10g",
    "l40s",
    "rtx-4090",
    "a100-80gb-sxm",
    "h100-sxm",
)

#: short names people type → catalog ids
DEVICE_ALIASES: dict[str, str] = {
    "cpu": "cpu-ddr5-5600-2ch",
    "ddr5": "cpu-ddr5-5600-2ch",
    "ddr4": "cpu-ddr4-3200-2ch",
    "4090": "rtx-4090",
    "rtx4090": "rtx-4090",
    "3090": "rtx-3090",
    "rtx3090": "rtx-3090",
    "4080": "rtx-4080",
    "5090": "rtx-5090",
    "rtx5090": "rtx-5090",
    "a100": "a100-80gb-sxm",
    "a100-80gb": "a100-80gb-sxm",
    "a100-40gb": "a100-40gb-sxm",
    "h100": "h100-sxm",
    "h200": "h200-sxm",
    "b200": "b200",
    "mi300": "mi300x",
    "m2-ultra": "apple-m2-ultra",
    "m2-max": "apple-m2-max",
    "m3-max": "apple-m3-max",
    "m3-ultra": "apple-m3-ultra",
    "m4-max": "apple-m4-max",
    "m4-pro": "apple-m4-pro",
}

LOCAL_DEVICE_ID = "local"


@dataclass(frozen=True)
class Device:
    """One device. Units: GB = 1e9 bytes, GB/s = 1e9 B/s, TFLOPS = 1e12 FLOP/s (dense, no sparsity).

    ``None`` means "not published / not applicable" (e.g. a CPU's memory size, FP8 on Ampere).
    ``dense_bf16_tflops`` is the 16-bit tensor peak (FP16 where the chip has no BF16, see ``source``).
    ``interconnect_gb_s`` is the first bandwidth figure in ``interconnect`` (as stated there, often
    bidirectional; PCIe without a figure: Gen3 x16 32, Gen4 64, Gen5 128 GB/s bidirectional).
    """

    id: str
    name: str
    vendor: str
    kind: str  # gpu | cpu | apple | accelerator | custom | local
    memory_gb: float | None
    mem_bandwidth_gb_s: float
    dense_bf16_tflops: float | None
    dense_fp8_tflops: float | None
    dense_int8_tops: float | None
    fp32_tflops: float | None
    interconnect: str | None
    interconnect_gb_s: float | None
    tdp_w: float | None
    source: str
    #: ``phasescope hw`` only: the median pass of the bandwidth kernel and of the FP32 GEMM (the machine's typical
    #: state, against its best; the CPU cost model rescales to it, :mod:`phasescope.planning.cpu`)
    bw_median_gb_s: float | None = None
    gemm_median_tflops: float | None = None

    @property
    def mem_bandwidth_bytes_s(self) -> float:
        return self.mem_bandwidth_gb_s * 1e9

    @property
    def memory_bytes(self) -> float | None:
        return None if self.memory_gb is None else self.memory_gb * 1e9

    def peak_flops(self, compute: str = "bf16") -> float | None:
        """Dense peak in FLOP/s for a math path (``bf16``, ``fp8``, ``int8``, ``fp32``).

        Falls back to the 16-bit peak when the chip lacks the requested path (FP8 on Ampere runs as
        weight-only dequantization to BF16), and to FP32 when even that is missing.
        """
        table = {
            "bf16": self.dense_bf16_tflops,
            "fp16": self.dense_bf16_tflops,
            "fp8": self.dense_fp8_tflops,
            "int8": self.dense_int8_tops,
            "fp32": self.fp32_tflops,
        }
        value = table.get(compute)
        if value is None:
            value = self.dense_bf16_tflops if self.dense_bf16_tflops is not None else self.fp32_tflops
        return None if value is None else value * 1e12

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FLOAT_FIELDS = {
    "memory_gb",
    "mem_bandwidth_gb_s",
    "dense_bf16_tflops",
    "dense_fp8_tflops",
    "dense_int8_tops",
    "fp32_tflops",
    "interconnect_gb_s",
    "tdp_w",
    "bw_median_gb_s",
    "gemm_median_tflops",
}


def _row_to_device(row: dict[str, str]) -> Device:
    kwargs: dict[str, Any] = {}
    for f in fields(Device):
        raw = (row.get(f.name) or "").strip()
        if f.name in _FLOAT_FIELDS:
            kwargs[f.name] = float(raw) if raw else None
        else:
            kwargs[f.name] = raw or None
    if kwargs["mem_bandwidth_gb_s"] is None:
        raise ValueError(f"device {kwargs['id']} has no bandwidth")
    kwargs["source"] = kwargs["source"] or ""
    return Device(**kwargs)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Device]:
    text = files("phasescope").joinpath("data/devices.csv").read_text(encoding="utf-8")
    return {d.id: d for d in (_row_to_device(r) for r in csv.DictReader(io.StringIO(text)))}


def list_devices(include_local: bool = True) -> list[Device]:
    """Every catalog device in file order, plus ``local`` when ``phasescope hw`` has saved one."""
    out = list(_catalog().values())
    if include_local:
        local = load_local_device()
        if local is not None:
            out.append(local)
    return out


def default_devices() -> list[Device]:
    """The seed article's six devices (CPU DDR5 90, A10G 600, L40S 864, RTX 4090 1008, A100 2039, H100 3350)."""
    return [get_device(i) for i in DEFAULT_DEVICE_IDS]


def get_device(device_id: str) -> Device:
    """A device by catalog id (case-insensitive, aliases like ``h100``/``4090``) or ``local``.

    Raises :class:`UnknownDeviceError` (exit 2) with close matches, or when ``local`` was never measured.
    """
    key = device_id.strip().lower().replace("_", "-").replace(" ", "-")
    if key == LOCAL_DEVICE_ID:
        local = load_local_device()
        if local is None:
            raise UnknownDeviceError(
                "no local device measured yet", hint=f"run `phasescope hw` first (saves {local_device_path()})"
            )
        return local
    cat = _catalog()
    key = DEVICE_ALIASES.get(key, key)
    if key in cat:
        return cat[key]
    close = difflib.get_close_matches(key, list(cat) + list(DEVICE_ALIASES), n=3, cutoff=0.5)
    hint = ("did you mean " + ", ".join(close) + "?") if close else "see `phasescope devices`"
    raise UnknownDeviceError(f"unknown device {device_id!r}", hint=hint)


#: GPU model names as NVML / dcgm-exporter's ``modelName`` label print them, normalised by
#: :func:`_norm_model_name` (vendor words and the ``-`` of ``--replace-blanks-in-model-name`` dropped),
#: → catalog id. Only names whose figures are exactly a catalog row's; anything else stays unknown.
MODEL_NAMES: dict[str, str] = {
    "H100 80GB HBM3": "h100-sxm",
    "H100 SXM5 80GB": "h100-sxm",
    "H100 PCIE": "h100-pcie",
    "H100 NVL": "h100-nvl",
    "H200": "h200-sxm",
    "H20": "h20",
    "B200": "b200",
    "GB200": "gb200",
    "A100 SXM4 80GB": "a100-80gb-sxm",
    "A100 SXM4 40GB": "a100-40gb-sxm",
    "A100 80GB PCIE": "a100-80gb-pcie",
    "L40S": "l40s",
    "L4": "l4",
    "A10G": "a10g",
    "A10": "a10",
    "T4": "t4",
    "V100 SXM2 32GB": "v100-sxm2-32gb",
    "RTX 3090": "rtx-3090",
    "RTX 4080": "rtx-4080",
    "RTX 4090": "rtx-4090",
    "RTX 5090": "rtx-5090",
    "RTX 6000 ADA GENERATION": "rtx-6000-ada",
    "RTX PRO 6000 BLACKWELL WORKSTATION EDITION": "rtx-pro-6000-blackwell",
    "INSTINCT MI300X": "mi300x",
    "INSTINCT MI325X": "mi325x",
    "INSTINCT MI250X": "mi250x",
    "RADEON RX 7900 XTX": "rx-7900-xtx",
}


def _norm_model_name(name: str) -> str:
    s = " ".join(name.upper().replace("-", " ").replace("_", " ").split())
    for word in ("NVIDIA ", "TESLA ", "GEFORCE ", "AMD "):
        if s.startswith(word):
            s = s[len(word):]
    return s


def device_id_for_model_name(name: str | None) -> str | None:
    """The catalog id of a GPU as telemetry names it (``"NVIDIA H100 80GB HBM3"`` → ``h100-sxm``,
    ``"NVIDIA A100-SXM4-80GB"`` → ``a100-80gb-sxm``), or ``None`` when the catalog has no exact row."""
    if not name:
        return None
    return MODEL_NAMES.get(_norm_model_name(name))


def custom_device(
    bandwidth_gb_s: float,
    *,
    name: str | None = None,
    memory_gb: float | None = None,
    dense_bf16_tflops: float | None = None,
) -> Device:
    """A device given only by its memory bandwidth (``--bandwidth-gb-s``), for hardware not in the catalog."""
    if not bandwidth_gb_s > 0:
        raise InputError(f"bandwidth must be > 0 GB/s, got {bandwidth_gb_s}")
    return Device(
        id="custom",
        name=name or f"custom {bandwidth_gb_s:g} GB/s",
        vendor="user",
        kind="custom",
        memory_gb=memory_gb,
        mem_bandwidth_gb_s=float(bandwidth_gb_s),
        dense_bf16_tflops=dense_bf16_tflops,
        dense_fp8_tflops=None,
        dense_int8_tops=None,
        fp32_tflops=None,
        interconnect=None,
        interconnect_gb_s=None,
        tdp_w=None,
        source="given on the command line (--bandwidth-gb-s)",
    )


# --- the measured local device ----------------------------------------------------------------------------


def config_dir() -> Path:
    """phasescope's per-user config directory: ``$PHASESCOPE_HOME``, ``$XDG_CONFIG_HOME/phasescope`` or
    ``~/.config/phasescope`` (first that is set)."""
    env = os.environ.get("PHASESCOPE_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg).expanduser() / "phasescope"
    return Path.home() / ".config" / "phasescope"


def local_device_path() -> Path:
    """Where ``phasescope hw`` saves the measured device ``local``."""
    return config_dir() / "local_device.json"


def save_local_device(device: Device, extra: dict[str, Any] | None = None) -> Path:
    """Write ``device`` (id forced to ``local``) plus ``extra`` measurement details; returns the path."""
    path = local_device_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = device.to_dict()
    data["id"] = LOCAL_DEVICE_ID
    doc = {"device": data, "measurement": extra or {}}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def load_local_device() -> Device | None:
    """The saved ``local`` device, or None when ``phasescope hw`` has not been run (or the file is unreadable)."""
    path = local_device_path()
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        data = doc["device"]
        kwargs = {f.name: data.get(f.name) for f in fields(Device)}
        kwargs["id"] = LOCAL_DEVICE_ID
        if not kwargs.get("mem_bandwidth_gb_s"):
            return None
        return Device(**kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        return None
