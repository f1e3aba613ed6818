"""GPU telemetry: one sampler interface over NVIDIA's dcgm-exporter (``--gpu-metrics URL``) and
local NVML (``nvidia-ml-py``, the optional extra ``phasescope[gpu]``), recorded on the run's clock.

Every source answers ``await source.sample() -> list[GpuSample]`` (one sample per GPU, stamped
with :func:`phasescope.measure.clock.now_ns` when the values arrived), so the recorder, the phase
analysis (:mod:`phasescope.metrics.gpu_phases`), ``watch`` and the report never ask which it was.

* :class:`DcgmSource` scrapes a dcgm-exporter ``/metrics`` with the same machinery as the server's
  metrics (:func:`phasescope.metrics.scrape.fetch_text` + :func:`phasescope.metrics.parse.parse_text`,
  i.e. prometheus_client's parser). Field names, units and labels are dcgm-exporter's (its
  ``etc/default-counters.csv`` and ``internal/pkg/rendermetrics``): ``DCGM_FI_PROF_*`` ratios 0–1,
  ``DCGM_FI_DEV_GPU_UTIL``/``MEM_COPY_UTIL`` in %, power in W, energy in mJ since boot, framebuffer
  in MiB; labels ``gpu``, ``UUID`` (``uuid`` with ``--use-old-namespace``), ``pci_bus_id``,
  ``device``, ``modelName`` (blanks may be ``-`` with ``--replace-blanks-in-model-name``),
  ``hostname`` (``Hostname`` before 4.5.3), ``DCGM_FI_DRIVER_VERSION``, and pod labels.
* :class:`NvmlSource` reads NVML directly: utilization, power (mW), total energy (mJ), memory, and
  — on Hopper and newer, where NVML has GPM — DRAM bandwidth utilisation, SM and tensor activity
  over exactly the interval between two samples. ``pynvml`` is imported only when asked for; with
  no module, no driver or no GPU, :func:`nvml_source` says why and returns ``None``.

AMD: ``amdsmi`` fits the same shape (``amdsmi_get_gpu_activity`` → ``gfx_activity`` as GPU util,
``umc_activity`` as DRAM active; ``amdsmi_get_power_info``/``amdsmi_get_energy_count`` for power
and energy; no tensor-pipe counter), but is not implemented: nothing here could test it.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from phasescope.measure.clock import now_ns, wall_ns

#: canonical field → (dcgm-exporter metric, multiplier to the canonical unit). Ratios are 0–1.
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", 1.0),
    "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),
    "sm_active": ("DCGM_FI_PROF_SM_ACTIVE", 1.0),
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 0.01),
    "mem_copy_util": ("DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", 1.0),
    "energy_j": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),
    "fb_used_mib": ("DCGM_FI_DEV_FB_USED", 1.0),
    "fb_free_mib": ("DCGM_FI_DEV_FB_FREE", 1.0),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK", 1.0),
    "mem_clock_mhz": ("DCGM_FI_DEV_MEM_CLOCK", 1.0),
    "gpu_temp_c": ("DCGM_FI_DEV_GPU_TEMP", 1.0),
}

#: the activity fields, in the order the dashboard and report show them
ACTIVITY = ("dram_active", "tensor_active", "sm_active", "gr_engine_active", "gpu_util", "mem_copy_util")

#: every dcgm-exporter metric name we read (a scrape with none of them is not a dcgm-exporter)
DCGM_NAMES = frozenset(name for name, _ in DCGM_FIELDS.values())


@dataclass
class GpuSample:
    """One GPU at one instant. Activity ratios are 0–1; ``energy_j`` is the device's cumulative
    counter (J since boot/driver load), ``None`` where the source has none."""

    t_ns: int
    wall_s: float
    source: str  # "dcgm" | "nvml"
    node: str  # the exporter URL, or "local"
    gpu: str  # index on its node
    seq: int = 0  # the recorder's sampling round (all sources read together)
    uuid: str | None = None
    model_name: str | None = None
    hostname: str | None = None
    driver: str | None = None
    dram_active: float | None = None
    tensor_active: float | None = None
    sm_active: float | None = None
    gr_engine_active: float | None = None
    gpu_util: float | None = None
    mem_copy_util: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    gpu_temp_c: float | None = None

    @property
    def key(self) -> str:
        """Stable identity of the device across samples and sources: its UUID (NVML and a local
        dcgm-exporter see the same board), else node + index."""
        return self.uuid or f"{self.node}#{self.gpu}"

    def filled(self) -> int:
        """How many measured fields this sample carries (to prefer the richer of two sources)."""
        return sum(getattr(self, f) is not None for f in DCGM_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GpuSource(Protocol):
    """What every telemetry source does: ``kind``, ``name``, ``await sample()``, ``close()``."""

    kind: str
    name: str

    async def sample(self) -> list[GpuSample]: ...

    async def close(self) -> None: ...


# -- dcgm-exporter -------------------------------------------------------------------------------


def is_dcgm_exposition(raw: Any) -> bool:
    """True when a parsed scrape (:class:`~phasescope.metrics.parse.RawSamples`) has any field we read."""
    return bool(DCGM_NAMES & raw.names())


def samples_from_dcgm(raw: Any, *, t_ns: int, wall_s: float, node: str) -> list[GpuSample]:
    """Map one dcgm-exporter scrape onto one :class:`GpuSample` per GPU (MIG instances and pod
    attributions of one GPU fold into that GPU: the counters are the device's)."""
    by_gpu: dict[str, GpuSample] = {}
    for field_name, (metric, mult) in DCGM_FIELDS.items():
        rows = raw.get(metric)  # counters may carry _total
        if rows is None:
            continue
        for labels, value in rows:
            gpu = labels.get("gpu")
            if gpu is None:
                continue
            uuid = labels.get("UUID") or labels.get("uuid")
            k = uuid or gpu
            s = by_gpu.get(k)
            if s is None:
                s = by_gpu[k] = GpuSample(
                    t_ns=t_ns, wall_s=wall_s, source="dcgm", node=node, gpu=gpu, uuid=uuid,
                    model_name=(labels.get("modelName") or None),
                    hostname=labels.get("hostname") or labels.get("Hostname") or None,
                    driver=labels.get("DCGM_FI_DRIVER_VERSION") or None)
            if getattr(s, field_name) is None:  # first series of this GPU wins (MIG/pod copies repeat it)
                setattr(s, field_name, float(value) * mult)
    return sorted(by_gpu.values(), key=lambda s: (_int_or(s.gpu), s.gpu))


def _int_or(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        return 1 << 30


def dcgm_url(url: str) -> str:
    """``host:9400`` or ``http://host:9400`` → ``http://host:9400/metrics`` (kept if it ends in metrics)."""
    from phasescope.metrics.scrape import metrics_url

    return metrics_url(url)


class DcgmSource:
    """One dcgm-exporter endpoint. A scrape that parses but carries no DCGM field is refused with
    one clear line (someone passed the LLM server's own /metrics, say)."""

    kind = "dcgm"

    def __init__(self, url: str, *, timeout_s: float = 5.0, session: Any = None) -> None:
        from phasescope.apis.base import redact_url

        self.url = dcgm_url(url)
        self.name = redact_url(self.url)
        self.timeout_s = timeout_s
        self._session = session
        self._own = session is None

    async def sample(self) -> list[GpuSample]:
        from phasescope.apis import plain_session
        from phasescope.errors import TargetError
        from phasescope.metrics.parse import parse_text
        from phasescope.metrics.scrape import fetch_text

        if self._session is None:
            self._session = plain_session()
            self._own = True
        text, ctype, t = await fetch_text(self._session, self.url, timeout_s=self.timeout_s)
        raw = parse_text(text, ctype)
        if not is_dcgm_exposition(raw):
            raise TargetError(f"{self.name} is not a dcgm-exporter: none of DCGM_FI_PROF_DRAM_ACTIVE, "
                              "DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_POWER_USAGE… is exposed there")
        return samples_from_dcgm(raw, t_ns=t, wall_s=wall_ns() / 1e9 - (now_ns() - t) / 1e9, node=self.name)

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None


# -- NVML ----------------------------------------------------------------------------------------


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlSource:
    """Local GPUs through NVML (``pynvml`` from ``nvidia-ml-py``, or any object with its API — the
    tests pass :class:`phasescope.testing.nvml_stub.NvmlStub`). Build it with :func:`nvml_source`."""

    kind = "nvml"
    name = "local"

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        nv.nvmlInit()
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        self._names = [_text(nv.nvmlDeviceGetName(h)) for h in self._handles]
        self._uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in self._handles]
        try:
            self._driver: str | None = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001 - a label, not a measurement
            self._driver = None
        # GPM (Hopper+): two samples per device, swapped each read; metrics over their interval
        self._gpm: list[list[Any] | None] = []
        for h in self._handles:
            try:
                ok = bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
            except Exception:  # noqa: BLE001 - older driver / not supported
                ok = False
            if ok:
                pair = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
                nv.nvmlGpmSampleGet(h, pair[0])
                self._gpm.append(pair)
            else:
                self._gpm.append(None)

    def _gpm_read(self, i: int, h: Any) -> dict[str, float]:
        pair = self._gpm[i]
        if pair is None:
            return {}
        nv = self.nv
        nv.nvmlGpmSampleGet(h, pair[1])
        ids = {"dram_active": nv.NVML_GPM_METRIC_DRAM_BW_UTIL, "tensor_active": nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
               "sm_active": nv.NVML_GPM_METRIC_SM_UTIL, "gr_engine_active": nv.NVML_GPM_METRIC_GRAPHICS_UTIL}
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(ids)
        mg.sample1, mg.sample2 = pair[0], pair[1]
        for j, mid in enumerate(ids.values()):
            mg.metrics[j].metricId = mid
        out: dict[str, float] = {}
        try:
            nv.nvmlGpmMetricsGet(mg)
            for j, name in enumerate(ids):
                m = mg.metrics[j]
                if getattr(m, "nvmlReturn", 0) == 0:
                    out[name] = max(0.0, min(1.0, float(m.value) / 100.0))  # NVML: percent
        finally:
            self._gpm[i] = [pair[1], pair[0]]  # this sample opens the next interval
        return out

    async def sample(self) -> list[GpuSample]:
        nv = self.nv
        out = []
        for i, h in enumerate(self._handles):
            t = now_ns()
            s = GpuSample(t_ns=t, wall_s=wall_ns() / 1e9, source="nvml", node="local", gpu=str(i),
                          uuid=self._uuids[i], model_name=self._names[i], driver=self._driver)
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                s.gpu_util, s.mem_copy_util = float(u.gpu) / 100.0, float(u.memory) / 100.0
            except Exception:  # noqa: BLE001 - a field the device does not report stays None
                pass
            try:
                s.power_w = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0  # mW
            except Exception:  # noqa: BLE001
                pass
            try:
                s.energy_j = float(nv.nvmlDeviceGetTotalEnergyConsumption(h)) / 1000.0  # mJ
            except Exception:  # noqa: BLE001
                pass
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h)
                s.fb_used_mib, s.fb_free_mib = float(m.used) / 2**20, float(m.free) / 2**20
            except Exception:  # noqa: BLE001
                pass
            for k, v in self._gpm_read(i, h).items():
                setattr(s, k, v)
            out.append(s)
        return out

    async def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


#: tests set this to an :class:`~phasescope.testing.nvml_stub.NvmlStub` to stand in for ``pynvml``
NVML_OVERRIDE: Any = None


def nvml_source(nv: Any = None) -> tuple[NvmlSource | None, str]:
    """An :class:`NvmlSource`, or ``(None, why not)``: module not installed, no driver, no GPU."""
    if nv is None:
        nv = NVML_OVERRIDE
    if nv is None:
        try:
            import pynvml as nv  # type: ignore[import-not-found,no-redef]  # nvidia-ml-py, optional
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install 'phasescope[gpu]')"
    try:
        src = NvmlSource(nv)
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, …
        return None, f"NVML unavailable ({type(exc).__name__}: {exc})"
    if not src._handles:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
        return None, "NVML found no GPU"
    return src, "ok"


# -- the recorder ---------------------------------------------------------------------------------


@dataclass
class GpuRecording:
    """Every sample of a run, per source, plus why a source gave none."""

    interval_s: float
    samples: list[GpuSample] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)  # {kind, name, ok, samples, reason}

    @property
    def available(self) -> bool:
        return bool(self.samples)


def build_sources(gpu_metrics: list[str] | tuple[str, ...] | None, *, nvml: bool = True,
                  nvml_module: Any = None) -> tuple[list[Any], list[dict[str, Any]]]:
    """The sources for ``--gpu-metrics URL…`` and local NVML (when asked for and present).

    Returns ``(sources, notes)``; ``notes`` records an NVML that was looked for and not found
    only when an explicit module was passed (a machine without NVIDIA GPUs is the normal case)."""
    sources: list[Any] = [DcgmSource(u) for u in (gpu_metrics or [])]
    notes: list[dict[str, Any]] = []
    if nvml:
        src, why = nvml_source(nvml_module)
        if src is not None:
            sources.append(src)
        elif nvml_module is not None:
            notes.append({"kind": "nvml", "name": "local", "ok": False, "samples": 0, "reason": why})
    return sources, notes


class GpuRecorder:
    """Samples every source every ``interval_s`` on its own thread and event loop (like
    :class:`phasescope.load.server_metrics.ServerMetricsRecorder`), so telemetry never delays the
    runner's token timestamps. ``start()`` … ``stop() -> GpuRecording``. A source that fails its
    first two reads is dropped with its reason; later failures are skipped."""

    def __init__(self, sources: list[Any], *, interval_s: float = 1.0, notes: list[dict[str, Any]] | None = None) -> None:
        self.sources = sources
        self.interval_s = interval_s
        self._rec = GpuRecording(interval_s=interval_s, sources=list(notes or []))
        self._errors: dict[str, list[str]] = {s.name: [] for s in sources}
        self._counts: dict[str, int] = {s.name: 0 for s in sources}
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._seq = 0
        self._stopped = False

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, *, wait: bool = True) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=lambda: asyncio.run(self._loop()), name="phasescope-gpu", daemon=True)
        self._thread.start()
        if wait:
            self._first.wait(timeout=max(2.0, self.interval_s) + 1.0)

    def latest(self) -> list[GpuSample]:
        """The newest sample of each device (for watch)."""
        with self._lock:
            last: dict[str, GpuSample] = {}
            for s in self._rec.samples:
                last[s.key] = s
        return list(last.values())

    def snapshot(self) -> list[GpuSample]:
        with self._lock:
            return list(self._rec.samples)

    async def _read_all(self, live: list[Any]) -> None:
        self._seq += 1
        results = await asyncio.gather(*(s.sample() for s in live), return_exceptions=True)
        for src, r in zip(list(live), results):
            if isinstance(r, BaseException):
                self._errors[src.name].append(f"{type(r).__name__}: {r}")
                if not self._counts[src.name] and len(self._errors[src.name]) >= 2:
                    live.remove(src)  # never answered: stop asking
                continue
            self._counts[src.name] += len(r)
            for x in r:
                x.seq = self._seq
            with self._lock:
                self._rec.samples.extend(r)

    async def _loop(self) -> None:
        live = list(self.sources)
        try:
            while True:
                t = now_ns()
                if live:
                    await self._read_all(live)
                self._first.set()
                left = self.interval_s - (now_ns() - t) / 1e9
                if self._stop.wait(max(0.0, left)):
                    if live:
                        await self._read_all(live)  # close the last interval
                    return
        finally:
            self._first.set()
            for s in self.sources:
                try:
                    await s.close()
                except Exception:  # noqa: BLE001
                    pass

    def stop(self) -> GpuRecording:
        """Stop sampling and return the recording (a second call returns the same one)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._stopped:
            return self._rec
        self._stopped = True
        for s in self.sources:
            n = self._counts.get(s.name, 0)
            errs = self._errors.get(s.name) or []
            self._rec.sources.append({"kind": s.kind, "name": s.name, "ok": n > 0, "samples": n,
                                      "reason": None if n else (errs[0] if errs else "no sample taken")})
        self._rec.samples.sort(key=lambda s: (s.t_ns, s.key))
        return self._rec


def nvml_applies(server_url: str | None) -> bool:
    """NVML reads the GPUs of the machine phasescope runs on: only a server on this machine (a
    loopback URL, or the embedded engine: ``None``) runs on them. A remote server's GPUs need
    ``--gpu-metrics``; a laptop's own GPU must not stand in for them."""
    if server_url is None:
        return True
    from urllib.parse import urlsplit

    host = (urlsplit(server_url if "://" in server_url else "http://" + server_url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def open_recorder(gpu_metrics: list[str] | tuple[str, ...] | None, *, nvml: bool = True, interval_s: float = 1.0,
                  nvml_module: Any = None, server_url: str | None = None) -> GpuRecorder | None:
    """A recorder over every GPU source present, or ``None`` when there is none (then nothing in
    the command's output changes). Local NVML only for a server on this machine (:func:`nvml_applies`)."""
    sources, notes = build_sources(gpu_metrics, nvml=nvml and nvml_applies(server_url), nvml_module=nvml_module)
    if not sources:
        return None
    return GpuRecorder(sources, interval_s=interval_s, notes=notes)

