"""A run given up after failures in a row says what happened: a server that cuts its streams
mid-way did answer, so the stop reason must not say it stopped answering; the evidence stays."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from phasescope.measure.records import read_records
from phasescope.testing import FakeServer


def test_cut_streams_stop_reason_is_true_to_the_records(tmp_path: Path) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.002, itl_s=0.001, fault="cut").running() as srv:
        p = subprocess.run([sys.executable, "-m", "phasescope", "bench", srv.url, "-n", "20", "-c", "2",
                            "--input-len", "8", "--output-len", "8", "--no-store", "--no-server-metrics",
                            "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 3, (p.stdout, p.stderr)
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    reason = s.get("stop_reason") or ""
    failed = [r for r in read_records(tmp_path / "o" / "records.jsonl") if not r.ok and not r.tags.get("warmup")]
    m = re.search(r"(\d+) requests in a row \((\w+): (.+)\)$", reason)
    assert m, reason
    assert int(m.group(1)) == 8 and m.group(2) == "stream_broken" and "connection cut" in m.group(3)
    # the server answered every one of them (token events came back) before it cut the stream
    assert failed and all(r.token_events() for r in failed)
    assert "stopped answering" not in reason and "stopped answering" not in p.stderr, reason
    assert "Partial run" in p.stderr and "requests in a row" in p.stderr
