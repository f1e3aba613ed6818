"""Parse a ``/metrics`` exposition into a :class:`Snapshot` of canonical values.

Parsing is ``prometheus_client.parser.text_string_to_metric_families`` (classic text format 0.0.4)
or ``prometheus_client.openmetrics.parser`` when the server answered with OpenMetrics anyway.
Lookup is by sample name, not by line order or ``# TYPE`` lines, because engines differ:
prometheus_client renames a typed counter's samples to ``<name>_total`` (TGI prints bare
``tgi_request_count``), multiprocess registries print ``_sum`` before ``_bucket``, ``_created``
series are separate gauge families in the classic format, and llama.cpp prints large counters as
``1.23457e+06``. ``_created`` samples are ignored.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from phasescope.errors import TargetError
from phasescope.measure.clock import now_ns
from phasescope.metrics.engines import PROFILES, EngineProfile, Source, detect_engine
from phasescope.metrics.promql import Hist

#: a series identity: its labels (``le`` removed), sorted
SeriesKey = tuple[tuple[str, str], ...]

_CREATED_SUFFIXES = ("_created", "_gsum", "_gcount")


@dataclass
class RawSamples:
    """All samples of one scrape, indexed by sample name: name → [(labels, value)]."""

    samples: dict[str, list[tuple[dict[str, str], float]]]
    families: dict[str, str]  # family name → type

    def names(self) -> set[str]:
        return set(self.samples) | set(self.families)

    def exact(self, name: str) -> list[tuple[dict[str, str], float]] | None:
        """Samples named ``name``; also under the legacy-escaped name (``vllm:x`` → ``vllm_x``), which
        prometheus_client's OpenMetrics encoder prints for names with colons."""
        rows = self.samples.get(name)
        if rows is None and ":" in name:
            rows = self.samples.get(name.replace(":", "_"))
        return rows

    def get(self, name: str) -> list[tuple[dict[str, str], float]] | None:
        """Samples of ``name``, trying the ``_total`` suffix both ways (counters)."""
        for cand in (name, name + "_total", name[:-6] if name.endswith("_total") else None):
            rows = self.exact(cand) if cand else None
            if rows is not None:
                return rows
        return None


@dataclass
class Snapshot:
    """One scrape, mapped onto canonical names, series kept apart by their labels.

    ``t_ns`` is :func:`phasescope.measure.clock.now_ns` when the response body arrived (monotonic;
    rates use differences of it), ``wall_s`` the Unix time for logs.
    """

    t_ns: int
    wall_s: float
    engine: str
    gauges: dict[str, dict[SeriesKey, float]] = field(default_factory=dict)
    counters: dict[str, dict[SeriesKey, float]] = field(default_factory=dict)
    hists: dict[str, dict[SeriesKey, Hist]] = field(default_factory=dict)
    #: canonical name → exposed name it was read from
    sources: dict[str, str] = field(default_factory=dict)
    #: counters whose printed value lost precision (llama.cpp ≥ 1e6 prints 6 significant digits)
    imprecise: set[str] = field(default_factory=set)
    url: str = ""

    @property
    def profile(self) -> EngineProfile:
        return PROFILES[self.engine]

    def has(self, canonical: str) -> bool:
        return canonical in self.gauges or canonical in self.counters or canonical in self.hists

    def label_values(self, label: str) -> set[str]:
        """All values a label takes across this snapshot's series (e.g. every ``model_name``)."""
        out: set[str] = set()
        for table in (self.gauges, self.counters, self.hists):
            for series in table.values():
                for key in series:
                    out.update(v for k, v in key if k == label)
        return out


def parse_text(text: str, content_type: str = "") -> RawSamples:
    """Parse exposition text; raise :class:`TargetError` with one clear line when it is not one."""
    body = text.strip()
    if body.startswith('"') and body.endswith('"'):
        # llama.cpp builds ~7010–7100 returned the exposition as a JSON string (ggml-org/llama.cpp#17384)
        from phasescope.safeio import loads_bounded  # the one bounded JSON reader

        try:
            decoded = loads_bounded(body)
        except ValueError:  # not JSON, or past a limit (Refused is a ValueError): read as text
            decoded = None
        if isinstance(decoded, str):
            body = decoded
    if not body:
        raise TargetError("the /metrics response is empty")
    if body.startswith(("<", "{", "[")):
        kind = "HTML" if body.startswith("<") else "JSON"
        raise TargetError(f"the /metrics response is {kind}, not the Prometheus text format")
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    families: dict[str, str] = {}
    try:
        from prometheus_client.parser import text_string_to_metric_families

        if "openmetrics" in content_type.lower() or body.rstrip().endswith("# EOF"):
            from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

            try:
                fams = list(om_parse(body if body.endswith("\n") else body + "\n"))
            except Exception:
                # prometheus_client's own OpenMetrics output for names with ':' (vllm:…) escapes the
                # sample names but not the # TYPE lines, which its OM parser rejects; the classic
                # parser reads those samples fine (``# EOF`` is a comment to it).
                fams = list(text_string_to_metric_families(body))
        else:
            fams = list(text_string_to_metric_families(body))
    except Exception as exc:  # the parser raises ValueError/IndexError/… on garbage
        first = body.splitlines()[0][:80] if body else ""
        raise TargetError(f"the /metrics response is not the Prometheus text format ({exc}; first line: {first!r})") from None
    for fam in fams:
        families[fam.name] = fam.type
        for s in fam.samples:
            if s.name.endswith(_CREATED_SUFFIXES):
                continue
            samples[s.name].append((dict(s.labels), float(s.value)))
    if not samples:
        raise TargetError("the /metrics response holds no samples")
    return RawSamples(dict(samples), families)


def _keep(labels: dict[str, str], src: Source, dedupe: tuple[tuple[str, str], ...]) -> bool:
    for k, allowed in src.labels:
        if labels.get(k) not in allowed:
            return False
    for k, v in dedupe:
        if k in labels and labels[k] != v:
            return False
    return True


def _key(labels: dict[str, str], drop: tuple[str, ...] = ("le",)) -> SeriesKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _read_hist(raw: RawSamples, src: Source, dedupe: tuple[tuple[str, str], ...]) -> dict[SeriesKey, Hist] | None:
    buckets = raw.exact(src.name + "_bucket")
    if not buckets:
        return None
    per: dict[SeriesKey, dict[float, float]] = defaultdict(dict)
    drop = ("le", *(k for k, _ in src.labels))
    for labels, v in buckets:
        if "le" not in labels or not _keep(labels, src, dedupe):
            continue
        try:
            le = float(labels["le"])
        except ValueError:
            continue
        per[_key(labels, drop)][le] = v
    drop = ("le", *(k for k, _ in src.labels))
    sums = {_key(lb, drop): v for lb, v in raw.exact(src.name + "_sum") or [] if _keep(lb, src, dedupe)}
    counts = {_key(lb, drop): v for lb, v in raw.exact(src.name + "_count") or [] if _keep(lb, src, dedupe)}
    out: dict[SeriesKey, Hist] = {}
    for key, bmap in per.items():
        bounds = tuple(sorted(bmap))
        cum = tuple(bmap[b] for b in bounds)
        count = counts.get(key, bmap.get(math.inf, cum[-1] if cum else 0.0))
        out[key] = Hist(bounds=bounds, counts=cum, sum=sums.get(key, math.nan), count=count)
    return out or None


def _read_values(raw: RawSamples, src: Source, dedupe: tuple[tuple[str, str], ...]) -> dict[SeriesKey, float] | None:
    if src.kind == "hist_sum":
        rows = raw.exact(src.name + "_sum")
    else:
        rows = raw.get(src.name)
    if rows is None:
        return None
    out: dict[SeriesKey, float] = {}
    drop = ("le", *(k for k, _ in src.labels))  # the filter's labels are fixed: not part of the series
    for labels, v in rows:
        if _keep(labels, src, dedupe):
            key = _key(labels, drop)
            out[key] = out.get(key, 0.0) + v * src.scale
    return out or None


def build_snapshot(
    raw: RawSamples,
    *,
    engine: str = "auto",
    t_ns: int | None = None,
    wall_s: float | None = None,
    url: str = "",
    raw_text: str | None = None,
) -> Snapshot:
    """Map parsed samples onto canonical names using the engine's table.

    ``engine="auto"`` detects the engine from the metric-name prefixes; an exposition from no
    known engine raises :class:`TargetError`.
    """
    if engine == "auto":
        detected = detect_engine(raw.names())
        if detected is None:
            some = ", ".join(sorted(raw.names())[:4])
            raise TargetError(
                f"the metrics at {url or 'the URL'} are from no engine phasescope knows "
                f"(vLLM, SGLang, TGI, llama.cpp); it exports e.g. {some}"
            )
        engine = detected
    prof = PROFILES[engine]
    snap = Snapshot(
        t_ns=now_ns() if t_ns is None else t_ns,
        wall_s=time.time() if wall_s is None else wall_s,
        engine=engine,
        url=url,
    )
    for canonical, sources in prof.table.items():
        for src in sources:
            if src.kind == "histogram":
                hv = _read_hist(raw, src, prof.dedupe_labels)
                if hv is not None:
                    snap.hists[canonical] = hv
                    snap.sources[canonical] = src.name
                    break
            else:
                vv = _read_values(raw, src, prof.dedupe_labels)
                if vv is not None:
                    (snap.gauges if src.kind == "gauge" else snap.counters)[canonical] = vv
                    snap.sources[canonical] = src.name
                    if raw_text is not None and src.kind == "counter" and _printed_in_exponent(raw_text, src.name):
                        snap.imprecise.add(canonical)
                    break
    if not (snap.gauges or snap.counters or snap.hists):
        raise TargetError(f"the {prof.title} metrics at {url or 'the URL'} hold none of the families phasescope reads")
    return snap


def _printed_in_exponent(text: str, name: str) -> bool:
    """True when a counter's value was printed like ``1.23457e+06`` (6 significant digits)."""
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            value = line.rsplit(" ", 1)[-1]
            if "e+" in value or "E+" in value:
                return True
    return False


def parse_snapshot(text: str, *, engine: str = "auto", content_type: str = "", url: str = "", t_ns: int | None = None) -> Snapshot:
    """Text exposition → :class:`Snapshot` (parse + map), the one-call entry point."""
    raw = parse_text(text, content_type)
    return build_snapshot(raw, engine=engine, url=url, t_ns=t_ns, raw_text=text)
