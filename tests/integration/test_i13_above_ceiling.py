"""A measured decode above the bandwidth ceiling is flagged, naming the input that is likely wrong (issue #13).

A fake vLLM server on 127.0.0.1 streams tokens every few ms — far faster than a deliberately low `local`
device bandwidth allows for the model spec — and `probe` must say so as an `above_ceiling` warning."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from phasescope.measure.warnings import MeasurementWarning
from phasescope.probing import probe
from phasescope.probing.ceilings import above_ceiling, explain_above_ceiling
from phasescope.testing import FakeServer
from phasescope.theory import roofline as R
from phasescope.theory.devices import custom_device, save_local_device
from phasescope.theory.models import load_model_spec


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    return tmp_path / "cfg"


def _probe_with_local_bandwidth(gb_s: float, itl_s: float, tmp_path: Path) -> dict:
    save_local_device(custom_device(gb_s, name="deliberately low"))
    with FakeServer(flavor="vllm", ttft_s=0.005, itl_s=itl_s).running() as srv:
        return probe(srv.url, api="openai", sizes=[40], max_tokens=24, repeat=2, warmup=False,
                     model_spec="smollm2-135m", device="local", save=False, out_dir=tmp_path / "out")


def test_probe_flags_decode_above_a_deliberately_low_bandwidth(tmp_path: Path) -> None:
    # smollm2-135m reads ~0.27 GB per token in bf16: 2 GB/s allows ~7 tok/s; the fake streams ~250 tok/s
    res = _probe_with_local_bandwidth(2.0, 0.004, tmp_path)
    ws = [w for w in res["warnings"] if w["kind"] == "above_ceiling"]
    assert len(ws) == 1
    w = ws[0]
    ev = w["evidence"]
    size = res["sizes"][0]
    assert ev["measured_tok_s"] == pytest.approx(size["decode_tok_s"])
    roof = res["ceilings"]["sizes"][0]["decode_ceiling_tok_s"]
    assert ev["bandwidth_ceiling_tok_s"] == pytest.approx(roof)
    assert ev["ratio"] > 10
    # no weight format stores < 1.5 bits per weight: the device figure must be wrong
    assert ev["likely_wrong"] == "device_bandwidth" and "device bandwidth" in w["message"]
    assert "--device" in w["fix"] and "phasescope hw" in w["fix"]
    assert f"{ev['ratio']:.1f}×" in w["message"]


def test_probe_names_quant_when_the_speed_implies_a_4_bit_file(tmp_path: Path) -> None:
    spec = load_model_spec("smollm2-135m")
    step = R.weight_bytes_read(spec, None, 1) + R.kv_bytes_per_sequence(spec, 40)
    # bandwidth at which ~100 tok/s (10 ms gaps) would be 4× the roof
    gb_s = 100 * step / 4 / 1e9
    res = _probe_with_local_bandwidth(gb_s, 0.010, tmp_path)
    (w,) = [w for w in res["warnings"] if w["kind"] == "above_ceiling"]
    assert w["evidence"]["likely_wrong"] == "quant"
    assert 2.5 < w["evidence"]["implied_bits_per_weight"] < 6
    assert "--model-spec" in w["fix"]


def test_no_warning_below_the_ceiling(tmp_path: Path) -> None:
    res = _probe_with_local_bandwidth(3000.0, 0.004, tmp_path)
    assert not [w for w in res["warnings"] if w["kind"] == "above_ceiling"]


def test_above_ceiling_kinds_and_tolerance() -> None:
    kw = dict(bandwidth_roof_tok_s=100.0, device_id="x", device_bandwidth_gb_s=400.0, bytes_per_token=4e9)
    assert above_ceiling(101.0, **kw, bits_per_weight=4.5) == []  # within 2 % timing noise
    (w,) = above_ceiling(150.0, **kw, bits_per_weight=4.5)
    assert isinstance(w, MeasurementWarning) and w.kind == "above_ceiling"
    assert w.evidence["likely_wrong"] == "model_bytes"  # already 4-bit: the spec's bytes are off
    (w,) = above_ceiling(150.0, **kw, bits_per_weight=16.0)
    assert w.evidence["likely_wrong"] == "quant"
    (w,) = above_ceiling(150.0, **kw, bits_per_weight=16.0, bytes_exact=True)
    assert w.evidence["likely_wrong"] == "device_bandwidth"


def test_explain_check_appends_to_the_measuring_experiment() -> None:
    ps = SimpleNamespace(points=[SimpleNamespace(decode_step_s=0.002, prompt_tokens=64, n=3, decode_tok_s=480.0)],
                         info=SimpleNamespace(warnings=[]))
    ceil = SimpleNamespace(decode_ceiling_tok_s=50.0, bandwidth_gb_s=10.0, weight_bytes=0.2e9, device="local")
    ws = explain_above_ceiling({"prompt-scaling": ps}, ceil)
    assert len(ws) == 1 and ps.info.warnings == ws
    assert ws[0].evidence["measured_tok_s"] == pytest.approx(500.0)
    assert explain_above_ceiling({"prompt-scaling": ps}, None) == []
