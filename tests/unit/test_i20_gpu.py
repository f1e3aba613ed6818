"""GPU telemetry (issue 20): dcgm-exporter expositions → samples, modelName → catalog device, NVML
through its stub, phase windows from records, the gpu section's invariants, and the evidence rules."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from phasescope.diagnose.gpu_evidence import gpu_findings, gpu_sentences, gpu_warnings
from phasescope.measure.records import Event, RequestRecord
from phasescope.metrics.gpu import (
    DCGM_FIELDS,
    GpuRecording,
    GpuSample,
    is_dcgm_exposition,
    nvml_source,
    samples_from_dcgm,
)
from phasescope.metrics.gpu_phases import (
    MAJORITY,
    activity_segments,
    gpu_section,
    label,
    solo_decode_tok_s,
    window_fractions,
)
from phasescope.metrics.parse import parse_text
from phasescope.testing.gpu_fake import schedule_activity
from phasescope.testing.nvml_stub import NvmlStub
from phasescope.theory.devices import MODEL_NAMES, device_id_for_model_name, get_device

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"
T0 = 10.0  # records and samples start here (a monotonic clock is never 0)
T0_NS = int(T0 * 1e9)


def _parse(name: str) -> list[GpuSample]:
    raw = parse_text((DATA / name).read_text(encoding="utf-8"), "text/plain; version=0.0.4")
    assert is_dcgm_exposition(raw)
    return samples_from_dcgm(raw, t_ns=1, wall_s=0.0, node="http://n:9400/metrics")


# -- the exposition -----------------------------------------------------------------------------------

def test_h100_sample_maps_every_default_field_in_canonical_units() -> None:
    (s,) = _parse("h100-decode-4.5.3.prom")
    assert s.model_name == "NVIDIA H100 80GB HBM3" and s.gpu == "0" and s.uuid and s.uuid.startswith("GPU-")
    assert s.hostname == "gpu-node-07" and s.driver == "570.124.06"
    assert s.dram_active == pytest.approx(0.86) and s.tensor_active == pytest.approx(0.07)
    assert s.gpu_util == pytest.approx(1.0)  # 100 % → 1.0
    assert s.mem_copy_util == pytest.approx(0.82)
    assert s.power_w == pytest.approx(448.0)
    assert s.energy_j == pytest.approx(4187235.611)  # mJ counter → J
    assert s.fb_used_mib == 71680
    assert s.sm_active is None  # commented out in default-counters.csv


def test_two_gpus_pre_453_hostname_and_pod_labels() -> None:
    a, b = _parse("a100x2-prefill-k8s-pre-4.5.3.prom")
    assert (a.gpu, b.gpu) == ("0", "1") and a.uuid != b.uuid
    assert a.hostname == b.hostname == "dgx-a100-02"  # the old ``Hostname`` label
    assert a.dram_active == pytest.approx(0.30) and b.dram_active == pytest.approx(0.31)
    assert b.power_w == pytest.approx(371.25)
    assert a.model_name == "NVIDIA A100-SXM4-80GB"


def test_board_without_profiling_and_replaced_blanks() -> None:
    (s,) = _parse("rtx4090-no-dcp-replace-blanks.prom")
    assert s.dram_active is None and s.tensor_active is None
    assert s.gpu_util == pytest.approx(1.0) and s.power_w == pytest.approx(288.0)
    assert s.hostname is None
    assert device_id_for_model_name(s.model_name) == "rtx-4090"


def test_old_namespace_uuid_and_sm_active() -> None:
    (s,) = _parse("h200-idle-sm-active-old-namespace.prom")
    assert s.uuid and s.uuid.startswith("GPU-")  # from the lowercase ``uuid`` label
    assert s.sm_active == 0.0 and s.dram_active == 0.0
    assert device_id_for_model_name(s.model_name) == "h200-sxm"


def test_an_llm_servers_metrics_are_not_a_dcgm_exporter() -> None:
    raw = parse_text('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 1.0\n')
    assert not is_dcgm_exposition(raw)


def test_every_sample_file_has_help_and_type_for_each_metric() -> None:
    for f in DATA.glob("*.prom"):
        lines = f.read_text().splitlines()
        names = {ln.split("{")[0] for ln in lines if ln and not ln.startswith("#")}
        for n in names:
            assert f"# TYPE {n} gauge" in lines or f"# TYPE {n} counter" in lines, (f.name, n)
            assert any(ln.startswith(f"# HELP {n} ") for ln in lines), (f.name, n)
        assert {m for m, _ in DCGM_FIELDS.values()} & names


# -- the catalog ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, did", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA H200", "h200-sxm"), ("NVIDIA-H100-80GB-HBM3", "h100-sxm"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("Tesla T4", "t4"),
    ("AMD Instinct MI300X", "mi300x"),
])
def test_model_names_map_onto_catalog_devices(name: str, did: str) -> None:
    assert device_id_for_model_name(name) == did


@pytest.mark.parametrize("name", ["NVIDIA A100-PCIE-40GB", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 4080 SUPER",
                                  "NVIDIA T400 4GB", "", None])
def test_names_without_an_exact_catalog_row_stay_unknown(name: str | None) -> None:
    assert device_id_for_model_name(name) is None


def test_every_mapped_id_is_a_catalog_row_of_the_same_family() -> None:
    for key, did in MODEL_NAMES.items():
        dev = get_device(did)
        assert dev.id == did and dev.mem_bandwidth_gb_s > 0
        # the family word of the telemetry name appears in the catalog's name (H100 → "H100 SXM 80GB")
        family = key.split()[0] if not key.startswith(("RTX", "INSTINCT", "RADEON")) else key.split()[1]
        assert family.upper() in dev.name.upper(), (key, dev.name)


# -- phase windows --------------------------------------------------------------------------------------

def _rec(i: int, start_s: float, first_s: float, last_s: float, n_out: int, prompt: int = 100) -> RequestRecord:
    ns = lambda s: int((s + T0) * 1e9)  # noqa: E731
    ev = [Event(ns(first_s + (last_s - first_s) * k / max(1, n_out - 1)), "content", 1) for k in range(n_out)]
    return RequestRecord(id=f"r{i}", api="openai", target="t", t_start_ns=ns(start_s), events=ev,
                         t_done_ns=ns(last_s) + 1000, prompt_tokens=prompt, output_tokens=n_out, ok=True)


def test_window_fractions_partition_every_window() -> None:
    rng = random.Random(7)
    for _ in range(50):
        recs = []
        for i in range(rng.randint(1, 6)):
            a = rng.uniform(0, 5)
            f = a + rng.uniform(0.01, 1.0)
            recs.append(_rec(i, a, f, f + rng.uniform(0.01, 2.0), 5))
        segs = activity_segments(recs)
        for _ in range(20):
            a = int((rng.uniform(-1, 8) + T0) * 1e9)
            b = a + int(rng.uniform(0.001, 3) * 1e9)
            fp, fd, fi = window_fractions(segs, a, b)
            assert min(fp, fd, fi) >= 0 and fp + fd + fi == pytest.approx(1.0)


def test_window_label_needs_a_majority() -> None:
    assert label(MAJORITY, 0.0, 1 - MAJORITY) == "prefill"
    assert label(0.0, MAJORITY, 0.0) == "decode"
    assert label(0.5, 0.5, 0.0) == "mixed"
    assert label(0.1, 0.2, 0.7) == "idle"


def _samples(phase_of, t_end_s: float, dt: float = 0.25, power=None) -> GpuRecording:
    """One GPU sampled every ``dt``; each round's values describe the interval that ends there."""
    levels = {"prefill": (0.3, 0.7, 640.0), "decode": (0.85, 0.08, 450.0), "idle": (0.0, 0.0, 70.0)}
    rec = GpuRecording(interval_s=dt, sources=[{"kind": "dcgm", "name": "x", "ok": True, "samples": 0, "reason": None}])
    e = 1000.0
    k = 0
    t = 0.0
    while t <= t_end_s + 1e-9:
        ph = phase_of(t - dt / 2) if k else "idle"
        d, te, p = levels[ph]
        if k:
            e += p * dt
        rec.samples.append(GpuSample(t_ns=int((t + T0) * 1e9), wall_s=t, source="dcgm", node="x", gpu="0", seq=k,
                                     uuid="GPU-1", model_name="NVIDIA H100 80GB HBM3", dram_active=d,
                                     tensor_active=te, power_w=p, energy_j=e))
        k += 1
        t = k * dt
    return rec


def test_gpu_section_sets_counters_against_the_phases() -> None:
    # one request: prefill 0.0–1.0 s, decode 1.0–3.0 s (100 tokens); the GPU follows exactly
    recs = [_rec(0, 0.0, 1.0, 3.0, 100, prompt=2000)]
    rec = _samples(lambda t: "prefill" if t < 1.0 else ("decode" if t < 3.0 else "idle"), 3.0)
    sec = gpu_section(rec, recs, t0_ns=T0_NS)
    ph = sec["phases"]
    assert ph["prefill"]["windows"] == 4 and ph["decode"]["windows"] == 8
    assert ph["prefill"]["dram_active"] == pytest.approx(0.3) and ph["prefill"]["tensor_active"] == pytest.approx(0.7)
    assert ph["decode"]["dram_active"] == pytest.approx(0.85) and ph["decode"]["tensor_active"] == pytest.approx(0.08)
    # energy from the counter's deltas; tokens where they were made
    assert ph["decode"]["energy_j"] == pytest.approx(450.0 * 2.0)
    assert ph["decode"]["output_tokens"] == pytest.approx(99, abs=1)  # the first token ends prefill's window
    assert ph["decode"]["j_per_output_token"] == pytest.approx(900.0 / ph["decode"]["output_tokens"])
    assert ph["prefill"]["prompt_tokens"] == pytest.approx(2000)
    assert ph["prefill"]["j_per_prompt_token"] == pytest.approx(640.0 / 2000)
    assert sec["device_id"] == "h100-sxm"
    assert sec["bandwidth"]["decode_achieved_gb_s"] == pytest.approx(0.85 * 3350)
    assert any("bandwidth-bound as the ceiling predicts" in s for s in sec["evidence"])
    assert any("prefill: tensor active 0.70" in s for s in sec["evidence"])


def test_phase_energy_and_tokens_add_up_to_the_run() -> None:
    rng = random.Random(3)
    for _trial in range(10):
        recs = []
        for i in range(rng.randint(1, 5)):
            a = rng.uniform(0, 3)
            f = a + rng.uniform(0.05, 0.8)
            recs.append(_rec(i, a, f, f + rng.uniform(0.2, 2.0), rng.randint(2, 60), prompt=rng.randint(10, 900)))
        end = max((r.t_done_ns or 0) for r in recs) / 1e9 - T0 + 0.5
        rec = _samples(lambda t: rng.choice(["prefill", "decode", "idle"]), end, dt=rng.choice([0.1, 0.25, 0.5]))
        sec = gpu_section(rec, recs, t0_ns=T0_NS)
        run, ph = sec["run"], sec["phases"]
        assert sum(p["energy_j"] or 0 for p in ph.values()) == pytest.approx(run["energy_j"])
        assert sum(p["output_tokens"] for p in ph.values()) == pytest.approx(run["output_tokens"])
        assert sum(p["prompt_tokens"] for p in ph.values()) == pytest.approx(run["prompt_tokens"])
        # every token of the run falls in some window: nothing is lost or counted twice
        assert run["output_tokens"] == pytest.approx(sum(r.output_tokens for r in recs))
        assert run["prompt_tokens"] == pytest.approx(sum(r.prompt_tokens for r in recs))
        for p in ph.values():
            for f in ("dram_active", "tensor_active"):
                assert p[f] is None or 0.0 <= p[f] <= 1.0


def test_one_board_seen_by_nvml_and_dcgm_is_counted_once() -> None:
    recs = [_rec(0, 0.0, 0.5, 2.0, 20)]
    rec = _samples(lambda t: "decode", 2.0)
    twins = [GpuSample(t_ns=s.t_ns, wall_s=s.wall_s, source="nvml", node="local", gpu="0", seq=s.seq, uuid="GPU-1",
                       model_name=s.model_name, power_w=s.power_w, energy_j=s.energy_j) for s in rec.samples]
    one = gpu_section(rec, recs, t0_ns=T0_NS)
    rec.samples += twins
    both = gpu_section(rec, recs, t0_ns=T0_NS)
    assert both["run"]["energy_j"] == pytest.approx(one["run"]["energy_j"])
    assert len(both["devices"]) == 1
    assert both["phases"]["decode"]["dram_active"] == pytest.approx(0.85)  # the richer (dcgm) sample kept


def test_solo_decode_rate_ignores_overlapping_requests() -> None:
    alone = _rec(0, 0.0, 0.1, 1.1, 101)  # 100 tokens in 1 s after the first
    a, b = _rec(1, 2.0, 2.1, 3.1, 11), _rec(2, 2.5, 2.6, 3.6, 11)
    assert solo_decode_tok_s([alone, a, b]) == pytest.approx(100.0, rel=0.02)
    assert solo_decode_tok_s([a, b]) is None


# -- evidence, warnings, findings ---------------------------------------------------------------------

def _section(dram: float, tensor: float, eff: float | None = None, p_tensor: float | None = None) -> dict:
    ph = {k: {"windows": 0} for k in ("prefill", "decode", "mixed", "idle")}
    ph["decode"] = {"windows": 5, "dram_active": dram, "tensor_active": tensor, "power_w": 450.0,
                    "j_per_output_token": 0.5, "achieved_bandwidth_gb_s": dram * 3350}
    if p_tensor is not None:
        ph["prefill"] = {"windows": 3, "dram_active": 0.3, "tensor_active": p_tensor, "power_w": 640.0,
                         "j_per_prompt_token": 0.01}
    return {"available": True, "sources": [{"kind": "dcgm", "name": "x", "ok": True}], "phases": ph,
            "bandwidth": {"decode_efficiency": eff, "decode_achieved_gb_s": dram * 3350, "peak_gb_s": 3350,
                          "decode_dram_active": dram, "device_id": "h100-sxm"}, "timeline": [], "devices": []}


def test_bandwidth_bound_decode_sentence() -> None:
    s = gpu_sentences(_section(0.86, 0.07))
    assert s[0] == "decode: DRAM active 0.86, tensor 0.07 — bandwidth-bound as the ceiling predicts"


def test_engine_limited_decode_sentence_and_finding() -> None:
    sec = _section(0.35, 0.05, eff=0.40)
    assert gpu_sentences(sec)[0] == ("decode at 40 % of the bandwidth ceiling with DRAM active 0.35: "
                                     "the engine, not the memory, is the limit")
    (f,) = [f for f in gpu_findings(sec) if f.id.startswith("gpu-decode")]
    assert f.id == "gpu-decode-engine-limited" and f.severity == "problem" and f.advice
    assert {e.what for e in f.evidence} >= {"decode DRAM active", "decode efficiency vs ceiling"}
    assert all("dcgm-exporter" in e.source for e in f.evidence)


def test_busy_memory_but_slow_decode_is_not_called_as_predicted() -> None:
    s = gpu_sentences(_section(0.85, 0.08, eff=0.22))
    assert "as the ceiling predicts" not in s[0] and "more bytes per token" in s[0]


def test_compute_bound_decode_and_prefill_rules() -> None:
    assert "compute-bound" in gpu_sentences(_section(0.40, 0.70))[0]
    s = gpu_sentences(_section(0.86, 0.07, p_tensor=0.72))
    assert "prefill: tensor active 0.72, DRAM 0.30 — compute-bound as the roofline predicts" in s
    assert "idle" in gpu_sentences(_section(0.86, 0.07, p_tensor=0.10))[1] or \
        "do not fill" in gpu_sentences(_section(0.86, 0.07, p_tensor=0.10))[1]


def test_no_gpu_section_no_findings() -> None:
    assert gpu_findings(None) == [] and gpu_findings({"available": False}) == []


def test_warnings_name_failed_sources_and_frozen_counters() -> None:
    sec = _section(0.86, 0.07)
    sec["sources"].append({"kind": "dcgm", "name": "http://h:9400/metrics", "ok": False, "reason": "ConnectError: x"})
    rows = [{"in_run": True, "dram_active": 0.5, "tensor_active": 0.2, "gpu_util": 1.0, "power_w": 300.0,
             "phase": ("prefill", "decode")[i % 2], "idle_frac": 0.0} for i in range(5)]
    sec["timeline"] = rows
    ws = gpu_warnings(sec)
    assert all(w.kind == "gpu_telemetry" for w in ws)
    text = " ".join(w.message + " " + (w.fix or "") for w in ws)
    assert "http://h:9400/metrics" in text and "-c 1000" in text
    # counters that change with the load raise no staleness warning
    for _i, r in enumerate(rows):
        r["dram_active"] = 0.3 if r["phase"] == "prefill" else 0.86
    assert not any("did not change" in w.message for w in gpu_warnings(sec))


# -- NVML ---------------------------------------------------------------------------------------------

def test_nvml_stub_behind_the_same_interface() -> None:
    stub = NvmlStub(schedule_activity([(0.4, "decode")]), gpus=2)
    src, why = nvml_source(stub)
    assert src is not None and why == "ok"
    try:
        asyncio.run(src.sample())
        time.sleep(0.3)
        a, b = asyncio.run(src.sample())
    finally:
        asyncio.run(src.close())
    assert (a.gpu, b.gpu) == ("0", "1") and a.uuid != b.uuid and a.source == "nvml"
    assert a.dram_active == pytest.approx(0.86, abs=0.03) and a.tensor_active == pytest.approx(0.07, abs=0.02)
    assert a.power_w == pytest.approx(0.64 * 700, rel=0.01) and a.energy_j and a.energy_j > 0
    assert device_id_for_model_name(a.model_name) == "h100-sxm"


def test_nvml_without_gpm_still_gives_power_and_utilisation() -> None:
    src, _ = nvml_source(NvmlStub(schedule_activity([(1.0, "prefill")]), gpm=False))
    assert src is not None
    try:
        (s,) = asyncio.run(src.sample())
    finally:
        asyncio.run(src.close())
    assert s.dram_active is None and s.power_w and s.gpu_util is not None


@pytest.mark.parametrize("stub, why", [(NvmlStub(fail_init=True), "NVML unavailable"), (NvmlStub(gpus=0), "no GPU")])
def test_no_driver_or_no_gpu_means_no_nvml_source(stub: NvmlStub, why: str) -> None:
    src, reason = nvml_source(stub)
    assert src is None and why in reason
    assert not stub.inited  # nothing left running


def test_real_nvidia_ml_py_on_a_machine_without_gpu() -> None:
    pytest.importorskip("pynvml")  # phasescope[gpu]; not part of the test extra
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    except pynvml.NVMLError:
        pass
    src, why = nvml_source()
    assert src is None and "NVML unavailable" in why


def test_nvml_only_for_a_server_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.metrics import gpu as G

    stub = NvmlStub()
    monkeypatch.setattr(G, "NVML_OVERRIDE", stub)
    for url in ("http://127.0.0.1:8000", None):  # a loopback server, the embedded engine
        rec = G.open_recorder([], server_url=url)
        assert rec is not None and [s.kind for s in rec.sources] == ["nvml"]
        asyncio.run(rec.sources[0].close())
    assert not stub.inited
    assert G.open_recorder([], server_url="http://10.0.0.5:8000") is None  # this box's GPU is not the server's
    assert G.open_recorder([], server_url="http://127.0.0.1:8000", nvml=False) is None
    rec = G.open_recorder(["http://10.0.0.5:9400"], server_url="http://10.0.0.5:8000")
    assert rec is not None and [s.kind for s in rec.sources] == ["dcgm"]
