"""``phasescope show RUN --request ID``: one stored request's waterfall, each phase beside its floor
where the stored run named the model and the device; a request that is not there is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from phasescope.cli import app
from phasescope.measure.records import Event, RequestRecord

MS = 1_000_000


def _rec(i: int, queue_ms: float, prefill_ms: float = 40.0) -> RequestRecord:
    t0 = 1_000 * MS + i * 10 * MS
    conn, headers = t0 + MS, t0 + 2 * MS
    first = headers + int((queue_ms + prefill_ms) * MS)
    ev = [Event(first + k * 10 * MS, "content", 1, 2) for k in range(5)]
    return RequestRecord(id=f"req-{i}", api="llamacpp", target="t", model="llama-3.1-8b", t_start_ns=t0,
                         t_conn_ready_ns=conn, t_headers_ns=headers, events=ev, t_done_ns=ev[-1].t_ns, ok=True,
                         prompt_tokens=1000, output_tokens=5,
                         server={"prefill_s": prefill_ms / 1e3, "prompt_n": 400, "cache_n": 600, "decode_s": 0.04,
                                 "predicted_n": 5})


def _store(tmp_path: Path) -> tuple[Path, str]:
    from phasescope.store import open_store

    st = open_store(tmp_path / "store")
    with st.recording("bench", "http://127.0.0.1:9", {}, model="llama-3.1-8b", engine="llamacpp") as run:
        for i in range(3):
            run.add(_rec(i, queue_ms=100.0 * i))
        run.finish({"ceilings": {"available": True, "model_spec": {"id": "llama-3.1-8b"}, "device": {"id": "l40s"}}})
        rid = run.id
    return tmp_path / "store", rid


def test_show_request_prints_its_waterfall_with_the_prefill_floor(tmp_path: Path) -> None:
    store, rid = _store(tmp_path)
    r = CliRunner().invoke(app, ["show", rid, "--store", str(store), "--request", "req-2", "--json"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.output)["waterfall"]
    assert w["queue_s"] == 0.2 and w["prefill_s"] == 0.04 and w["network_client_s"] == 0.002
    assert (w["cached_tokens"], w["computed_tokens"]) == (600, 400)
    assert w["prefill_floor_s"] and w["prefill_vs_floor"] > 1 and w["decode_floor_s"]
    text = CliRunner().invoke(app, ["show", rid, "--store", str(store), "--request", "req-2"])
    assert text.exit_code == 0, text.output
    assert "queue (derived)" in text.output and "400 computed + 600 cached" in text.output and "floor" in text.output


def test_show_of_a_request_not_in_the_run_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from phasescope.cli import run

    store, rid = _store(tmp_path)
    assert run(["show", rid, "--store", str(store), "--request", "nope"]) == 2
    err = capsys.readouterr().err
    assert "has no request 'nope'" in err and "Traceback" not in err
