"""Prometheus ``/metrics`` scraper for vLLM, SGLang, TGI and llama.cpp (used by watch, bench, explain).

Typical use::

    from phasescope.metrics import Scraper, Timeline

    async with Scraper("http://127.0.0.1:8000") as scraper:
        tl = Timeline(window_s=60)
        tl.add(await scraper.scrape())
        ...                                   # some time later
        tl.add(await scraper.scrape())
        tl.summary()        # {"running": 3.0, "ttft_p99_s": 0.41, "generation_tok_s": 812.0, ...}
        tl.quantile("itl", 0.99)
        tl.rate("generation_tokens")

Modules: :mod:`.engines` (one mapping table per engine → canonical names, engine detection),
:mod:`.parse` (text → :class:`Snapshot`), :mod:`.scrape` (HTTP), :mod:`.promql` (counter resets,
histogram deltas, ``histogram_quantile``), :mod:`.timeline` (sliding window, summary),
:mod:`.alerts` (alerts in words), :mod:`.sampler` (background scraping during a bench run:
``async with MetricsSampler(url) as s: ...; s.summary()``).
"""

from __future__ import annotations

from phasescope.metrics.engines import CANONICAL, PROFILES, EngineProfile, Source, detect_engine
from phasescope.metrics.parse import RawSamples, SeriesKey, Snapshot, build_snapshot, parse_snapshot, parse_text
from phasescope.metrics.promql import Hist, counter_delta, hist_add, hist_delta, histogram_quantile
from phasescope.metrics.sampler import MetricsSampler
from phasescope.metrics.scrape import Scraper, fetch_text, metrics_url, scrape_once
from phasescope.metrics.timeline import SUMMARY_KEYS, Timeline

__all__ = [
    "CANONICAL",
    "PROFILES",
    "SUMMARY_KEYS",
    "EngineProfile",
    "Hist",
    "MetricsSampler",
    "RawSamples",
    "Scraper",
    "SeriesKey",
    "Snapshot",
    "Source",
    "Timeline",
    "build_snapshot",
    "counter_delta",
    "detect_engine",
    "fetch_text",
    "hist_add",
    "hist_delta",
    "histogram_quantile",
    "metrics_url",
    "parse_snapshot",
    "parse_text",
    "scrape_once",
]
