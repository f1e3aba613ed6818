"""Issue 22, the client's tail at 512–1,024 streams: what the profile found on the loop that reads events.

* the SSE/NDJSON hot loops built a ``where`` string (``target.display_url``: a ``urlsplit`` and a
  redaction) on every read, for an error message almost never raised (~10 % of the client's CPU at
  1,024 streams): the URL is now formatted only when a stream does fail;
* the runner opened at most 512 connections before t0, so at ``-c 1024`` half the first wave's TCP
  connects ran inside its TTFTs (~15 % of the CPU, connects of up to 46 ms): it now opens what the
  cap asks, bounded by the open-file limit;
* the live progress imported ``phasescope.load.workers`` at the first completed record, a ~25 ms
  stall inside the measured window: it is imported when the progress is made, before the run.
"""

from __future__ import annotations

import asyncio
import builtins
from pathlib import Path
from typing import Any, Iterator

import pytest

from phasescope.apis.base import GenRequest, Target
from phasescope.load import runner as R
from phasescope.load.schedule import Schedule, ScheduledRequest
from phasescope.measure.records import Event, RequestRecord
from phasescope.testing.lean_fake import LeanFake


class _CountingTarget(Target):
    """A Target that counts how often its display URL is formatted."""

    formatted = 0

    @property
    def display_url(self) -> str:  # type: ignore[override]
        type(self).formatted += 1
        return super().display_url


@pytest.fixture()
def fake(tmp_path: Path) -> Iterator[LeanFake]:
    with LeanFake(ttft_s=0.002, itl_s=0.001, log_path=str(tmp_path / "truth.jsonl")).running() as srv:
        yield srv


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_the_read_loop_formats_no_url_per_event(fake: LeanFake, api: str) -> None:
    from phasescope.apis import new_session
    from phasescope.apis.openai import send

    async def go() -> RequestRecord:
        tgt = _CountingTarget(base_url=fake.url, api=api, model="fake-model")
        async with new_session() as s:
            _CountingTarget.formatted = 0
            return await send(s, tgt, GenRequest(prompt="the quick brown fox", max_tokens=24, id="r1"))

    rec = asyncio.run(go())
    assert rec.ok and len(rec.token_events()) == 24
    # once for the record's target field; the old loop formatted it again for every read (>= 24)
    assert _CountingTarget.formatted <= 2, _CountingTarget.formatted


def test_an_unending_event_still_names_the_url() -> None:
    from phasescope.apis import _http as H
    from phasescope.errors import MalformedEventError

    tgt = Target(base_url="http://user:pw@127.0.0.1:9/x?key=s", api="openai")
    proto = H.Protocol(tgt, GenRequest(prompt="p", max_tokens=4), RequestRecord(id="a", api="openai", target="t"))
    proto.path = "/v1/completions"
    with pytest.raises(MalformedEventError) as ei:
        H._guard(proto, 0, 10, H._MAX_EVENT_BYTES + 1, "event")
    assert "http://127.0.0.1:9/x/v1/completions: one streamed event is over" in str(ei.value)
    assert "pw" not in str(ei.value) and "key" not in str(ei.value)


def _sched(n: int) -> Schedule:
    return Schedule(requests=[ScheduledRequest(index=i, item=i, offset_s=0.0) for i in range(n)])


@pytest.mark.parametrize("cap", [1, 64, 512, 1024, 2048])
def test_prewarm_opens_every_connection_the_closed_loop_needs(cap: int) -> None:
    assert R.prewarm_count(_sched(2 * cap), cap) == cap  # the old cap of 512 left the rest to the first wave


def test_prewarm_stays_inside_the_open_file_limit(monkeypatch: Any) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda what: (300, 4096))
    assert R.prewarm_count(_sched(2048), 1024) == 300 - 64
    assert R.prewarm_count(_sched(10), None) == 10


def test_live_progress_imports_nothing_per_record(monkeypatch: Any) -> None:
    from phasescope.load.progress import LiveStats

    live = LiveStats(2)  # made before the run: any import happens here
    rec = RequestRecord(id="a", api="openai", target="t", t_start_ns=0, ok=True,
                        events=[Event(1_000_000 * (i + 1), n_tokens=1) for i in range(3)])
    imports: list[str] = []
    real = builtins.__import__

    def counting(name: str, *a: Any, **k: Any) -> Any:
        imports.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", counting)
    live.add(rec)
    monkeypatch.setattr(builtins, "__import__", real)
    assert not [m for m in imports if m.startswith("phasescope")] and live.ok == 1 and live.p50_ttft_ms == pytest.approx(1.0)


def _rec_with(i: int, ok: bool, gap_ms: float) -> RequestRecord:
    ev = [Event(int(1e6 * (1 + i % 7)) + int(k * gap_ms * 1e6), n_tokens=1) for k in range(4)]
    return RequestRecord(id=f"r{i}", api="openai", target="t", t_start_ns=0, ok=ok, events=ev if ok else [],
                         error_kind=None if ok else "http_500")


def test_live_progress_derives_nothing_on_the_loop_and_reads_the_same_medians() -> None:
    import statistics

    from phasescope.load.progress import LiveStats
    from phasescope.load.workers import progress_of

    live = LiveStats(1000, window=50)
    calls = [0]

    def counted(rec: RequestRecord) -> Any:
        calls[0] += 1
        return progress_of(rec)

    live._progress_of = counted  # type: ignore[method-assign]
    recs = [_rec_with(i, ok=i % 9 != 0, gap_ms=1 + (i * 37 % 11)) for i in range(1000)]
    eager_t: list[float] = []
    eager_i: list[float] = []
    for j, r in enumerate(recs):
        live.add(r)  # what the loop that reads events pays: a count and an append
        ok, t, itl, _ = progress_of(r)
        if ok:
            eager_t.append(t)
            eager_i.append(itl)
        if j in (10, 400, 999):
            assert calls[0] <= 2 * 50 * 3  # derived only when read, the newest window at most
            assert live.p50_ttft_ms == pytest.approx(statistics.median(eager_t[-50:]) * 1000)
            assert live.p50_itl_ms == pytest.approx(statistics.median(eager_i[-50:]) * 1000)
    assert live.done == 1000 and live.failed == 112 and live.errors["http_500"] == 112
    assert calls[0] < 400  # the old add derived all 888 successful records, one by one, on the loop
