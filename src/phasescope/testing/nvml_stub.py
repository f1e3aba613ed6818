"""An NVML stub: the subset of ``pynvml`` that :class:`~phasescope.metrics.gpu.NvmlSource` calls, over the
same :class:`~phasescope.testing.gpu_fake.GpuModel` as the fake dcgm-exporter, so one activity drives both.
Tests set :data:`phasescope.metrics.gpu.NVML_OVERRIDE` to an :class:`NvmlStub`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from phasescope.testing.gpu_fake import LEVELS, Activity, GpuModel, state_of



class NVMLError(Exception):
    """The stub's NVMLError (pynvml raises subclasses of its own NVMLError)."""


class _Util:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class _Mem:
    def __init__(self, total: int, used: int) -> None:
        self.total, self.used, self.free = total, used, total - used


class _Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class _MetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_Metric() for _ in range(98)]


class _Sample:
    def __init__(self) -> None:
        self.acc: dict[str, float] = {}
        self.t = 0.0


class NvmlStub:
    """The subset of ``pynvml`` :class:`~phasescope.metrics.gpu.NvmlSource` calls, over a
    :class:`GpuModel`: utilization (%), power (mW), total energy (mJ), memory (bytes) and GPM
    samples whose metrics are the activity shares between two samples, in percent.

    ``gpm=False`` is a pre-Hopper board (no GPM: utilization and power only); ``gpus=0`` a machine
    with NVML but no GPU; ``fail_init=True`` a machine without the driver."""

    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRICS_GET_VERSION = 1
    NVMLError = NVMLError
    c_nvmlGpmMetricsGet_t = _MetricsGet

    def __init__(self, activity: Activity | None = None, *, gpus: int = 1, model_name: str = "NVIDIA H100 80GB HBM3",
                 gpm: bool = True, fail_init: bool = False) -> None:
        self.model = GpuModel(activity, gpus=max(1, gpus), model_name=model_name)
        self.n = gpus
        self.gpm = gpm
        self.fail_init = fail_init
        self.inited = False
        self._t_last = time.monotonic()
        self._lock = threading.Lock()
        self._cum = {k: 0.0 for k in LEVELS["idle"]}  # ∫ level dt, per counter
        self._cum_t = 0.0
        self._stop = threading.Event()
        self._th: threading.Thread | None = None

    def _advance(self) -> None:
        """Integrate the activity since the last call (every 5 ms, on the stub's own thread)."""
        with self._lock:
            now = time.monotonic()
            st = state_of(*self.model.activity())
            dt = now - self._t_last
            self._t_last = now
            for k, v in LEVELS[st].items():
                self._cum[k] += v * dt
            self._cum_t += dt
            self.model.values = dict(LEVELS[st])
            for i in range(self.model.gpus):
                self.model.energy_mj[i] += LEVELS[st]["power"] * self.model.tdp_w * dt * 1000.0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.inited = True
        if self._th is None:
            self._stop.clear()
            self._t_last = time.monotonic()
            self._th = threading.Thread(target=self._tick_loop, name="nvml-stub", daemon=True)
            self._th.start()

    def _tick_loop(self) -> None:
        while not self._stop.wait(0.005):
            self._advance()

    def nvmlShutdown(self) -> None:
        self.inited = False
        self._stop.set()
        if self._th is not None:
            self._th.join(timeout=2)
            self._th = None

    def nvmlDeviceGetCount(self) -> int:
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.model.model_name

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.model.uuids[h]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> _Util:
        v = self.model.values
        return _Util(round(100 * v["util"]), round(100 * v["copy"]))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self.model.power_w() * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return int(self.model.energy_mj[h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Mem:
        total = self.model.fb_mib * 2**20
        return _Mem(total, int(total * 0.88))

    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        class _S:
            isSupportedDevice = 1 if self.gpm else 0
        return _S()

    def nvmlGpmSampleAlloc(self) -> _Sample:
        if not self.gpm:
            raise NVMLError("Not Supported")
        return _Sample()

    def nvmlGpmSampleGet(self, h: int, s: _Sample) -> _Sample:
        with self._lock:
            s.acc, s.t = dict(self._cum), self._cum_t
        return s

    def nvmlGpmMetricsGet(self, mg: _MetricsGet) -> _MetricsGet:
        a, b = mg.sample1, mg.sample2
        dt = b.t - a.t
        key = {self.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram", self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
               self.NVML_GPM_METRIC_SM_UTIL: "sm", self.NVML_GPM_METRIC_GRAPHICS_UTIL: "gr"}
        for j in range(mg.numMetrics):
            m = mg.metrics[j]
            k = key.get(m.metricId)
            if k is None or dt <= 0:
                m.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED / no interval yet
                continue
            m.nvmlReturn = 0
            m.value = 100.0 * (b.acc.get(k, 0.0) - a.acc.get(k, 0.0)) / dt
        return mg
