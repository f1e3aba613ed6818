"""Store test helpers shared by the pure tier (threads) and the integration tier (processes): a small
streamed record and a writer that records three runs of ten of them."""

from __future__ import annotations

from pathlib import Path

from phasescope.measure.records import Event, RequestRecord
from phasescope.store import open_store


def rec(i: int, target: str = "http://127.0.0.1:1", **kw: object) -> RequestRecord:
    t0 = 1_000_000 * i
    return RequestRecord(
        id=f"q{i}",
        api="openai",
        target=target,
        ok=True,
        t_start_ns=t0,
        events=[Event(t0 + 50_000_000), Event(t0 + 60_000_000)],
        output_tokens=2,
        **kw,  # type: ignore[arg-type]
    )


def thread_writer(path: Path, k: int, out: list[str]) -> None:
    """Three bench runs of ten records each into the store at ``path``; their ids appended to ``out``."""
    s = open_store(path)
    for j in range(3):
        with s.recording("bench", f"http://127.0.0.1:{k}", {"k": k, "j": j}) as run:
            for i in range(10):
                run.add(rec(i))
            run.finish({"k": k, "j": j})
        out.append(run.id)
