"""Device catalog, the measured `local` device, and the quantization tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phasescope.errors import UnknownDeviceError, UnknownQuantError
from phasescope.theory import devices as D
from phasescope.theory.quant import (
    GGUF_FILE_TYPES,
    bits_per_weight,
    ggml_tensor_bytes,
    gguf_file_type_name,
    kv_bytes_per_element,
)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    return tmp_path / "cfg"


def test_device_catalog_rows() -> None:
    devs = D.list_devices(include_local=False)
    assert len(devs) >= 35
    import csv

    ref = Path("/work/shared/reference/hardware.csv")
    if ref.exists():  # every reference row made it, with the same bandwidth
        rows = {r["id"]: r for r in csv.DictReader(ref.open())}
        mine = {d.id: d for d in devs}
        assert set(rows) <= set(mine)
        for i, r in rows.items():
            assert mine[i].mem_bandwidth_gb_s == float(r["mem_bandwidth_gb_s"])
    for d in devs:
        assert d.source and d.mem_bandwidth_gb_s > 0
    h100 = D.get_device("h100-sxm")
    assert (h100.memory_gb, h100.dense_bf16_tflops, h100.dense_fp8_tflops, h100.interconnect_gb_s) == (80, 989.4, 1978.9, 900)
    assert D.get_device("mi300x").interconnect_gb_s == 896  # "7 links x 128 GB/s = 896 GB/s"
    assert D.get_device("a10g").interconnect_gb_s == 64
    assert D.get_device("cpu-ddr5-5600-2ch").memory_gb is None


def test_aliases_and_peaks() -> None:
    assert D.get_device("H100").id == "h100-sxm"
    assert D.get_device("4090").id == "rtx-4090"
    a100 = D.get_device("a100-80gb-sxm")
    assert a100.peak_flops("fp8") == 312e12  # no FP8 on Ampere: falls back to the 16-bit path
    assert a100.peak_flops("int8") == 624e12
    with pytest.raises(UnknownDeviceError, match="did you mean"):
        D.get_device("h100-sxn")


def test_local_device_roundtrip(home: Path) -> None:
    with pytest.raises(UnknownDeviceError, match="phasescope hw"):
        D.get_device("local")
    assert all(d.id != "local" for d in D.list_devices())
    dev = D.custom_device(12.5, name="box", memory_gb=16)
    path = D.save_local_device(dev, extra={"method": "test"})
    assert path == home / "local_device.json"
    got = D.get_device("local")
    assert got.id == "local" and got.mem_bandwidth_gb_s == 12.5 and got.memory_gb == 16
    assert D.list_devices()[-1].id == "local"
    assert json.loads(path.read_text())["measurement"] == {"method": "test"}
    path.write_text("{broken")
    assert D.load_local_device() is None


def test_config_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PHASESCOPE_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert D.config_dir() == tmp_path / "xdg" / "phasescope"
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "ph"))
    assert D.config_dir() == tmp_path / "ph"


def test_bits_per_weight_table() -> None:
    expect = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "q8_0": 8.5, "q6_k": 6.5625, "q4_0": 4.5,
              "mxfp4": 4.25, "q4_k": 4.5, "q5_k": 5.5}
    for name, bits in expect.items():
        assert bits_per_weight(name) == bits, name
    assert bits_per_weight("Q4_K_M") == pytest.approx(4.89, abs=0.01)
    assert bits_per_weight("q5_k_m") == pytest.approx(5.70, abs=0.01)
    assert 4.12 <= bits_per_weight("int4") <= 4.5
    assert 4.12 <= bits_per_weight("awq") <= 4.5
    assert bits_per_weight("BF-16") == 16 and bits_per_weight("Q4KM") == bits_per_weight("q4_k_m")
    with pytest.raises(UnknownQuantError, match="unknown quantization"):
        bits_per_weight("q9_z")


def test_kv_dtypes_and_gguf_ids() -> None:
    assert kv_bytes_per_element("fp16") == 2 and kv_bytes_per_element("bf16") == 2
    assert kv_bytes_per_element("fp8") == 1 and kv_bytes_per_element("fp8_e5m2") == 1
    assert kv_bytes_per_element("q8_0") == 34 / 32 and kv_bytes_per_element("q4_0") == 18 / 32
    with pytest.raises(UnknownQuantError):
        kv_bytes_per_element("fp7")
    assert gguf_file_type_name(15) == "q4_k_m" and gguf_file_type_name(7) == "q8_0"
    assert gguf_file_type_name(9999) == "ftype9999"
    for name in GGUF_FILE_TYPES.values():  # every file type maps to a known format
        assert bits_per_weight(name) > 1
    assert ggml_tensor_bytes(8, 64) == 68  # Q8_0: 2 blocks of 34 B
    assert ggml_tensor_bytes(14, 256) == 210  # Q6_K
    try:
        import gguf

        for t, (block, size) in gguf.GGML_QUANT_SIZES.items():  # our table agrees with gguf-py's
            assert ggml_tensor_bytes(int(t), block) == size
    except ImportError:
        pass
