"""A fake dcgm-exporter (a real HTTP server on 127.0.0.1) whose counters follow
what an LLM server is doing — prefill busies the tensor pipes, decode the DRAM.

The exposition is dcgm-exporter's own (``internal/pkg/rendermetrics/render_metrics.go`` and
``etc/default-counters.csv`` of NVIDIA/dcgm-exporter 4.5.3-4.8.2): ``# HELP``/``# TYPE`` lines
with the CSV's help text, one series per GPU labelled ``gpu``, ``UUID`` (``uuid`` with
``old_namespace``), ``pci_bus_id``, ``device`` (``nvidiaN``), ``modelName`` (blanks → ``-`` with
``replace_blanks``), ``hostname`` (``Hostname`` with ``label_style="pre-4.5.3"``), then the
``DCGM_FI_DRIVER_VERSION`` label and, with ``pods=True``, Kubernetes' ``container``/``namespace``/
``pod``. Doubles print as Go's ``%f`` (``0.860000``), integers as ``%d``. Values change once per
``collect_interval_s`` (dcgm-exporter ``-c``), each the average over that interval, as DCGM's
profiling fields are.

What drives the counters: ``activity()`` → ``(requests prefilling, requests decoding)``, sampled
every 5 ms — :func:`server_activity` reads it off a running :class:`~phasescope.testing.FakeServer`;
:func:`schedule_activity` plays a fixed schedule. Per state the GPU shows :data:`LEVELS`. The same
:class:`GpuModel` behind the ``pynvml`` API is :class:`phasescope.testing.nvml_stub.NvmlStub`.

Usage::

    with FakeServer(...).running() as llm, FakeDcgmExporter(activity=server_activity(llm)).running() as dcgm:
        ... phasescope bench llm.url --gpu-metrics dcgm.url ...

    python -m phasescope.testing.gpu_fake --schedule prefill:2,decode:3   # "READY http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import threading
import time
import uuid as _uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from phasescope.testing._serve import LoopbackServer

#: what the GPU does in each state (ratios 0–1; ``power`` as a share of the board's TDP)
LEVELS: dict[str, dict[str, float]] = {
    "prefill": {"dram": 0.30, "tensor": 0.72, "sm": 0.97, "gr": 0.99, "util": 1.00, "copy": 0.28, "power": 0.92},
    "decode": {"dram": 0.86, "tensor": 0.07, "sm": 0.83, "gr": 0.98, "util": 1.00, "copy": 0.82, "power": 0.64},
    "idle": {"dram": 0.00, "tensor": 0.00, "sm": 0.00, "gr": 0.00, "util": 0.00, "copy": 0.00, "power": 0.10},
}

#: (name as NVML prints it, TDP W, framebuffer MiB) of the boards the fake can be
BOARDS: dict[str, tuple[float, int]] = {
    "NVIDIA H100 80GB HBM3": (700.0, 81559),
    "NVIDIA A100-SXM4-80GB": (400.0, 81920),
    "NVIDIA L40S": (350.0, 46068),
    "NVIDIA GeForce RTX 4090": (450.0, 24564),
    "NVIDIA H200": (700.0, 143771),
}

#: (metric, type, help, kind) in dcgm-exporter's default-counters.csv order; kind d = %f double, i = %d int
DEFAULT_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "d"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", "i"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "i"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "i"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "i"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "i"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.", "i"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "i"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", "i"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "d"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "d"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.", "d"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", "i"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", "i"),
)
#: ``DCGM_FI_PROF_SM_ACTIVE`` is commented out in the default CSV; ``sm_active=True`` adds it
SM_ACTIVE = ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "d")


Activity = Callable[[], tuple[int, int]]


def server_activity(srv: Any) -> Activity:
    """``activity()`` of a running :class:`~phasescope.testing.FakeServer`: how many of its requests
    are prefilling (body read, no token sent yet) and decoding (first token sent, not finished).

    It wraps the instance's request prologue and record step, so the fake LLM server itself is
    unchanged."""
    live: dict[int, Any] = {}
    begin, record = srv._begin, srv._record

    async def _begin(request: Any, **kw: Any) -> Any:
        gt, body, resp = await begin(request, **kw)
        if resp is None:
            live[id(gt)] = gt
        return gt, body, resp

    def _record(gt: Any) -> None:
        live.pop(id(gt), None)
        record(gt)

    srv._begin, srv._record = _begin, _record

    def activity() -> tuple[int, int]:
        gts = list(live.values())
        pre = sum(1 for g in gts if not g.t_events_ns)
        return pre, len(gts) - pre

    return activity


def schedule_activity(steps: list[tuple[float, str]], *, loop: bool = True) -> Activity:
    """A fixed schedule: ``[(seconds, "prefill" | "decode" | "idle"), …]`` from the first call on."""
    if not steps:
        raise ValueError("a schedule needs at least one step")
    for _, st in steps:
        if st not in LEVELS:
            raise ValueError(f"unknown state {st!r}; choose from {', '.join(LEVELS)}")
    total = sum(d for d, _ in steps)
    t0: list[float] = []

    def activity() -> tuple[int, int]:
        now = time.monotonic()
        if not t0:
            t0.append(now)
        t = now - t0[0]
        if loop and total > 0:
            t %= total
        for d, st in steps:
            if t < d:
                return {"prefill": (1, 0), "decode": (0, 1), "idle": (0, 0)}[st]
            t -= d
        return (0, 0)

    return activity


def state_of(prefilling: int, decoding: int) -> str:
    return "prefill" if prefilling > 0 else ("decode" if decoding > 0 else "idle")


class GpuModel:
    """The counters of ``gpus`` identical boards driven by one activity; thread-safe.

    ``tick()`` (every 5 ms) accumulates the time in each state; ``collect()`` (every collect
    interval) turns the accumulated shares into the exposed values and integrates energy."""

    def __init__(self, activity: Activity | None, *, gpus: int = 1, model_name: str = "NVIDIA H100 80GB HBM3",
                 seed: int = 0) -> None:
        if model_name not in BOARDS:
            raise ValueError(f"unknown board {model_name!r}; choose from {', '.join(BOARDS)}")
        self.activity = activity or (lambda: (0, 0))
        self.gpus = gpus
        self.model_name = model_name
        self.tdp_w, self.fb_mib = BOARDS[model_name]
        self.uuids = [f"GPU-{_uuid.UUID(bytes=hashlib.md5(f'{model_name}/{seed}/{i}'.encode()).digest())}"
                      for i in range(gpus)]
        self._lock = threading.Lock()
        self._acc = {k: 0.0 for k in LEVELS}
        self._last_tick = time.monotonic()
        self.energy_mj = [float(1_000_000_000 + 7_919 * i) for i in range(gpus)]
        self.values: dict[str, float] = self._mix({"idle": 1.0})
        self.collections = 0

    def _mix(self, share: dict[str, float]) -> dict[str, float]:
        out = {k: 0.0 for k in LEVELS["idle"]}
        for st, w in share.items():
            for k, v in LEVELS[st].items():
                out[k] += w * v
        return out

    def tick(self) -> None:
        now = time.monotonic()
        st = state_of(*self.activity())
        with self._lock:
            self._acc[st] += now - self._last_tick
            self._last_tick = now

    def collect(self, dt_s: float) -> None:
        self.tick()
        with self._lock:
            tot = sum(self._acc.values())
            share = {k: v / tot for k, v in self._acc.items()} if tot > 0 else {"idle": 1.0}
            self._acc = {k: 0.0 for k in LEVELS}
            self.values = self._mix(share)
            p = self.values["power"] * self.tdp_w
            for i in range(self.gpus):
                self.energy_mj[i] += p * dt_s * 1000.0
            self.collections += 1

    def power_w(self) -> float:
        return self.values["power"] * self.tdp_w

    def fields(self, i: int) -> dict[str, float]:
        """Metric name → value for GPU ``i`` (every field of :data:`DEFAULT_COUNTERS` and SM active)."""
        v = self.values
        busy = v["util"]
        return {
            "DCGM_FI_DEV_SM_CLOCK": 1980 if busy > 0 else 345,
            "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_MEMORY_TEMP": round(38 + 20 * busy),
            "DCGM_FI_DEV_GPU_TEMP": round(33 + 30 * busy),
            "DCGM_FI_DEV_POWER_USAGE": self.power_w(),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(self.energy_mj[i]),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_GPU_UTIL": round(100 * v["util"]),
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(100 * v["copy"]),
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_FB_FREE": self.fb_mib - 71_680 - 512 if self.fb_mib > 72_192 else self.fb_mib // 10,
            "DCGM_FI_DEV_FB_USED": 71_680 if self.fb_mib > 72_192 else self.fb_mib - self.fb_mib // 10 - 512,
            "DCGM_FI_DEV_FB_RESERVED": 512,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": v["gr"],
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": v["tensor"],
            "DCGM_FI_PROF_DRAM_ACTIVE": v["dram"],
            "DCGM_FI_PROF_PCIE_TX_BYTES": int(2_000_000 + 40_000_000 * busy),
            "DCGM_FI_PROF_PCIE_RX_BYTES": int(1_500_000 + 25_000_000 * busy),
            "DCGM_FI_PROF_SM_ACTIVE": v["sm"],
        }


def render_exposition(model: GpuModel, *, hostname: str | None = "fake-node", label_style: str = "4.5.3",
                      old_namespace: bool = False, replace_blanks: bool = False, pods: bool = False,
                      dcp: bool = True, sm_active: bool = False, driver: str = "570.124.06") -> str:
    """One scrape's body, as dcgm-exporter's GPU template renders it."""
    counters = list(DEFAULT_COUNTERS) + ([SM_ACTIVE] if sm_active else [])
    if not dcp:  # no profiling module (GeForce, older boards): the DCGM_FI_PROF_* fields are absent
        counters = [c for c in counters if not c[0].startswith("DCGM_FI_PROF_")]
    name = "-".join(model.model_name.split()) if replace_blanks else model.model_name
    uuid_label = "uuid" if old_namespace else "UUID"
    host_label = "Hostname" if label_style == "pre-4.5.3" else "hostname"
    lines: list[str] = []
    per_gpu = [model.fields(i) for i in range(model.gpus)]
    for metric, ptype, help_, kind in counters:
        lines.append(f"# HELP {metric} {help_}")
        lines.append(f"# TYPE {metric} {ptype}")
        for i in range(model.gpus):
            labels = (f'gpu="{i}",{uuid_label}="{model.uuids[i]}",pci_bus_id="00000000:{0x18 + 0x10 * i:02X}:00.0",'
                      f'device="nvidia{i}",modelName="{name}"')
            if hostname:
                labels += f',{host_label}="{hostname}"'
            labels += f',DCGM_FI_DRIVER_VERSION="{driver}"'
            if metric == "DCGM_FI_DEV_XID_ERRORS":
                labels += ',err_code="0",err_msg="No Error"'
            if pods:
                labels += f',container="vllm",namespace="inference",pod="vllm-0-{i}"'
            v = per_gpu[i][metric]
            text = f"{float(v):f}" if kind == "d" else f"{int(v)}"
            lines.append(f"{metric}{{{labels}}} {text}")
    return "\n".join(lines) + "\n"


class FakeDcgmExporter(LoopbackServer):
    """``GET /metrics`` (and ``/health``) like dcgm-exporter on :9400, here on 127.0.0.1:free port.

    ``mode``: ``None`` (normal), ``"404"`` (wrong path/proxy), ``"frozen"`` (values never change:
    dcgm-exporter's default 30 s collect interval seen through a 1 s scrape)."""

    thread_name = "fake-dcgm-http"

    def __init__(self, activity: Activity | None = None, *, gpus: int = 1, model_name: str = "NVIDIA H100 80GB HBM3",
                 collect_interval_s: float = 0.2, mode: str | None = None, seed: int = 0, **render_kw: Any) -> None:
        self.model = GpuModel(activity, gpus=gpus, model_name=model_name, seed=seed)
        self.collect_interval_s = collect_interval_s
        self.mode = mode
        self.render_kw = render_kw
        self.scrapes = 0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def _sample_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.005):
            self.model.tick()
            now = time.monotonic()
            if self.mode != "frozen" and now - last >= self.collect_interval_s:
                self.model.collect(now - last)
                last = now

    async def _metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        if self.mode == "404":
            return web.Response(status=404, text="404 page not found\n")
        body = render_exposition(self.model, **self.render_kw)
        return web.Response(text=body, content_type="text/plain", charset="utf-8")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    def _routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/metrics", self._metrics)
        router.add_get("/health", self._health)

    async def _on_start(self) -> None:
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample_loop, name="fake-dcgm", daemon=True)
        self._sampler.start()

    async def _on_stop(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m phasescope.testing.gpu_fake", description=__doc__.splitlines()[0])
    ap.add_argument("--schedule", default="prefill:1,decode:3,idle:1",
                    help="state:seconds,… played in a loop (states: prefill, decode, idle)")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--model-name", default="NVIDIA H100 80GB HBM3", choices=sorted(BOARDS))
    ap.add_argument("--collect-ms", type=float, default=200.0, help="dcgm-exporter -c (ms)")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args(argv)
    steps = []
    for part in a.schedule.split(","):
        st, _, sec = part.partition(":")
        steps.append((float(sec or 1), st.strip()))
    fake = FakeDcgmExporter(schedule_activity(steps), gpus=a.gpus, model_name=a.model_name,
                            collect_interval_s=a.collect_ms / 1000.0)
    fake.port = a.port

    async def run() -> None:
        await fake.start()
        print(f"READY {fake.url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await fake.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
