"""The OTLP receiver against real OTLP bytes: the behaviour fake answering as vLLM exports one span per
request with the official OpenTelemetry SDK exporter (OTLP/HTTP protobuf), continuing the traceparent
phasescope sent; bench --otlp-listen and probe --otlp-listen join them, and each request's queue and prefill
match the fake's truth within 1 ms, the client's share is client TTFT − the span's TTFT, and (bench, behind one
slot) p99 TTFT is mostly queue."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

pytest.importorskip("opentelemetry.proto")
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from phasescope.cli import app  # noqa: E402
from phasescope.testing.behaviour_fake import Behaviour, running_behaviour_fake  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _matches_the_truth(slowest: list[dict], truth: dict[str, dict]) -> None:
    """Each request's waterfall from its span: queue and prefill within 1 ms of the fake's truth, and the
    client's share exactly client TTFT − the span's TTFT (never negative)."""
    assert slowest
    for w in slowest:
        t = truth[w["id"]]
        assert w["source"] == "span"
        assert w["queue_s"] == pytest.approx(t["queue_s"], abs=1e-3)
        assert w["prefill_s"] == pytest.approx(t["prefill_s"], abs=1e-3)
        assert w["client_minus_server_ttft_s"] == pytest.approx(w["ttft_s"] - t["ttft_s"], abs=1e-9)
        assert w["client_minus_server_ttft_s"] >= 0


def _run_with_spans(monkeypatch, tmp_path, slots: int, command: str, *args: str, grpc: bool = False,
                    **behaviour: object) -> tuple[dict, dict[str, dict], int]:
    """``command`` (``--json``, ``--otlp-listen`` on a free port; ``experiment NAME`` as ``"experiment NAME"``)
    against the vLLM-flavour fake exporting a span per request to that port (over gRPC with ``grpc``); its JSON
    document, the fake's span truth by record id, and the port."""
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "runs.db"))
    port = _free_port()
    listen = f"grpc://127.0.0.1:{port}" if grpc else f"127.0.0.1:{port}"
    b = Behaviour(**{"flavour": "vllm", "slots": slots, "prefix_cache": False, "overhead_s": 0.001,  # type: ignore[arg-type]
                     "prefill_s_per_token": 5e-5, "decode_step_s": 0.008, "metrics": False,
                     "otlp_endpoint": listen if grpc else f"http://{listen}/v1/traces", **behaviour})
    with running_behaviour_fake(b) as fake:
        r = CliRunner().invoke(app, [*command.split(), fake.url, "--api", "openai", *args, "--otlp-listen", listen,
                                     "--json"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        truth = dict(fake.span_truth)
    return json.loads(r.stdout), truth, port


def _shown(run_id: str, request_id: str) -> dict:
    """``show RUN --request ID --json``'s waterfall: the stored run keeps each span, so it is read back."""
    shown = CliRunner().invoke(app, ["show", run_id, "--request", request_id, "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)["waterfall"]


def test_bench_joins_vllm_spans_and_matches_the_fakes_truth(monkeypatch, tmp_path) -> None:
    doc, truth, _ = _run_with_spans(monkeypatch, tmp_path, 1, "bench", "-n", "12", "--max-concurrency", "4",
                                    "--input-len", "64", "--output-len", "8", "--no-server-metrics", "--no-twin")
    wf = doc["waterfall"]
    assert wf["spans_received"] >= 12 and wf["spans_joined"] == 12 and wf["spans_missing"] == 0
    assert wf["derived"] is False and wf["source"] == "span"
    _matches_the_truth(wf["slowest"], truth)
    p99 = wf["bands"]["p99"]
    # p99 TTFT is mostly queue: of the server's share, from its spans (a loaded host grows the client's share of
    # the whole: a busy clean-clone run read the queue at 48 % of p99 TTFT, the rest mostly client)
    assert p99["queue_s"] >= 3 * p99["prefill_s"], p99
    assert p99["shares"]["queue"]["value"] > p99["shares"]["prefill"]["value"], p99
    assert "from the server's spans" in wf["sentence"]
    # the stored run keeps each span: show --request reads the request from it, not derived
    some = wf["slowest"][0]["id"]
    w = _shown(doc["run_id"], some)
    assert w["source"] == "span" and w["queue_s"] == pytest.approx(truth[some]["queue_s"], abs=1e-3)


def test_probe_joins_vllm_spans_and_matches_the_fakes_truth(monkeypatch, tmp_path) -> None:
    doc, truth, port = _run_with_spans(monkeypatch, tmp_path, 4, "probe", "-p", "64,1024", "-n", "8", "--repeat", "3")
    wf = doc["waterfall"]
    # 3 repeats × 2 sizes, each with its span (the warm-up's span may come too: received ≥ joined)
    assert wf["spans_joined"] == 6 and wf["spans_missing"] == 0 and wf["spans_received"] >= 6, wf
    assert wf["derived"] is False and wf["source"] == "span" and wf["otlp_listen"] == f"127.0.0.1:{port}"
    assert len(doc["server_spans"]) == 6
    _matches_the_truth(wf["slowest"], truth)
    # the stored probe keeps each span: show --request reads the request from it
    assert _shown(doc["run_id"], wf["slowest"][0]["id"])["source"] == "span"


def test_bench_joins_vllm_spans_over_grpc(monkeypatch, tmp_path) -> None:
    """vLLM's default OTLP protocol: the official gRPC exporter sends real gRPC to --otlp-listen grpc://…, and
    the join is the same as over HTTP (every request, queue and prefill within 1 ms of the fake's truth)."""
    pytest.importorskip("grpc")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    doc, truth, port = _run_with_spans(monkeypatch, tmp_path, 1, "bench", "-n", "8", "--max-concurrency", "4",
                                       "--input-len", "64", "--output-len", "8", "--no-server-metrics", "--no-twin",
                                       grpc=True)
    wf = doc["waterfall"]
    assert wf["otlp_listen"] == f"grpc://127.0.0.1:{port}"
    assert wf["spans_received"] >= 8 and wf["spans_joined"] == 8 and wf["spans_missing"] == 0, wf
    assert wf["source"] == "span"
    _matches_the_truth(wf["slowest"], truth)


def test_bench_joins_sglangs_stage_spans(monkeypatch, tmp_path) -> None:
    """SGLang reports a request as one span per stage (prefill_waiting, prefill_forward, decode_loop …) under its
    request span: gathered by trace, queue and prefill match the fake's truth within 1 ms."""
    doc, truth, _ = _run_with_spans(monkeypatch, tmp_path, 1, "bench", "-n", "8", "--max-concurrency", "4",
                                    "--input-len", "64", "--output-len", "8", "--no-server-metrics", "--no-twin",
                                    flavour="sglang")
    wf = doc["waterfall"]
    assert wf["spans_joined"] == 8 and wf["spans_missing"] == 0 and wf["source"] == "span", wf
    _matches_the_truth(wf["slowest"], truth)
    spans = doc["server_spans"]
    assert {sp["engine"] for sp in spans.values()} == {"sglang"}
    for rid, sp in spans.items():  # SGLang's own rid, read from its request span
        assert sp["request_id"] == truth[rid]["request_id"]
        assert sp["decode_s"] == pytest.approx(truth[rid]["decode_s"], abs=1e-3)


def test_bench_joins_tgis_handler_spans_over_grpc(monkeypatch, tmp_path) -> None:
    """TGI exports over gRPC only, one span per request named after its handler with Rust Duration strings:
    its queue matches the fake's truth within 1 ms; its prefill is derived (TTFT less the queue, the network
    inside), so never below the fake's truth, and said so."""
    pytest.importorskip("grpc")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    doc, truth, _ = _run_with_spans(monkeypatch, tmp_path, 1, "bench", "-n", "8", "--max-concurrency", "4",
                                    "--input-len", "64", "--output-len", "8", "--no-server-metrics", "--no-twin",
                                    flavour="tgi", grpc=True)
    wf = doc["waterfall"]
    assert wf["spans_joined"] == 8 and wf["spans_missing"] == 0 and wf["source"] == "span", wf
    assert wf["derived"] is True and "prefill derived" in wf["sentence"], wf["sentence"]
    for w in wf["slowest"]:
        t = truth[w["id"]]
        assert w["source"] == "span" and w["derived"] is True
        assert w["queue_s"] == pytest.approx(t["queue_s"], abs=1e-3)
        assert w["prefill_s"] >= t["prefill_s"] - 1e-3
        assert w["prefill_s"] + w["queue_s"] + w["connect_s"] == pytest.approx(w["ttft_s"], abs=1e-6)
    spans = doc["server_spans"]
    assert {sp["span_name"] for sp in spans.values()} == {"completions"}
    for rid, sp in spans.items():
        assert sp["inference_s"] == pytest.approx(truth[rid]["inference_s"], abs=1e-6)
        assert sp["e2e_s"] == pytest.approx(truth[rid]["e2e_s"], abs=1e-6)


def test_probe_otlp_listen_bad_address_or_no_extra_is_one_line_before_any_request(monkeypatch, capsys) -> None:
    import phasescope.apis.otlp as O
    from phasescope.cli import run

    assert run(["probe", "http://127.0.0.1:9", "--otlp-listen", "nohost"]) == 2  # nothing listens on :9: never asked
    err = capsys.readouterr().err
    assert "--otlp-listen 'nohost': expected HOST:PORT" in err and len(err.strip().splitlines()) <= 2, err
    monkeypatch.setattr(O, "otlp_proto_available", lambda: False)
    assert run(["probe", "http://127.0.0.1:9", "--otlp-listen", "127.0.0.1:4318"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'phasescope[otlp]'" in err and "Traceback" not in err, err


def test_grpc_listen_bad_scheme_taken_port_or_no_grpcio_is_one_line_before_any_request(monkeypatch, capsys) -> None:
    import phasescope.apis.otlp as O
    from phasescope.cli import run

    for cmd in ("bench", "probe", "explain"):
        assert run([cmd, "http://127.0.0.1:9", "--otlp-listen", "udp://127.0.0.1:4317"]) == 2
        err = capsys.readouterr().err
        assert "expected HOST:PORT (OTLP/HTTP) or grpc://HOST:PORT (OTLP/gRPC)" in err and "Traceback" not in err, err
    monkeypatch.setattr(O, "grpc_available", lambda: False)
    assert run(["explain", "http://127.0.0.1:9", "--otlp-listen", "grpc://127.0.0.1:4317"]) == 2
    err = capsys.readouterr().err
    assert "OTLP over gRPC (grpc://) needs the otlp extra: pip install 'phasescope[otlp]'" in err, err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err, err


def test_grpc_receiver_on_a_taken_port_is_one_line() -> None:
    pytest.importorskip("grpc")
    from phasescope import errors as E
    from phasescope.apis.otlp import OtlpGrpcReceiver, start_listening

    rx = start_listening("grpc://127.0.0.1:0")  # a free port: gRPC, not the HTTP receiver
    try:
        assert isinstance(rx, OtlpGrpcReceiver) and rx.port > 0 and rx.url == f"grpc://127.0.0.1:{rx.port}"
    finally:
        assert rx is not None
        rx.stop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(E.InputError, match=r"--otlp-listen grpc://127\.0\.0\.1:\d+: cannot listen"):
            start_listening(f"grpc://127.0.0.1:{port}")


# -- explain --otlp-listen: the spans as evidence, and a disagreement said ----------------------------------------
def _explain_queue(monkeypatch, tmp_path, **behaviour: object) -> tuple[dict, dict[str, dict]]:
    """explain's queue experiment alone on one slot (/metrics on, so explain infers the queue itself too)."""
    doc, truth, _ = _run_with_spans(monkeypatch, tmp_path, 1, "explain", "--only", "queue", "--budget", "10s",
                                    metrics=True, **behaviour)
    return doc, truth


def test_explain_queue_finding_carries_the_servers_span_evidence(monkeypatch, tmp_path) -> None:
    doc, truth = _explain_queue(monkeypatch, tmp_path)
    wf = doc["waterfall"]
    assert wf["spans_missing"] == 0 and wf["spans_joined"] >= 4, wf
    att = wf["experiments"]["queue"]
    assert att["source"] == "span" and att["spans_missing"] == 0
    _matches_the_truth(att["slowest"], truth)
    # one slot, several in flight: by design most of the server's share of TTFT is queue
    assert att["all"]["queue_s"] >= 3 * att["all"]["prefill_s"], att["all"]
    found = {f["id"]: f for f in doc["findings"]}
    assert "ttft-queueing" in found, (doc["findings"], doc["undecided"])
    span_ev = [e for e in found["ttft-queueing"]["evidence"] if "the server's own OTLP spans" in e["source"]]
    assert any(e["what"] == "where p99 TTFT went" and "from the server's spans" in e["value"] for e in span_ev), span_ev
    assert any(e["what"].startswith("queue share of all TTFT") for e in span_ev), span_ev
    assert not [u for u in doc["undecided"] if "disagree" in u["reason"]], doc["undecided"]
    # stored with the run: show --request reads one explain request's span back
    some = att["slowest"][0]["id"]
    w = _shown(doc["run_id"], some)
    assert w["source"] == "span" and w["queue_s"] == pytest.approx(truth[some]["queue_s"], abs=1e-3)


def test_explain_says_when_the_spans_and_its_own_inference_disagree(monkeypatch, tmp_path) -> None:
    """A span whose clock starts at admission puts the queue at 0 while /metrics (and the client) see requests
    wait: explain names both figures and claims neither."""
    doc, truth = _explain_queue(monkeypatch, tmp_path, span_counts_queue=False)
    assert all(t["queue_s"] == 0 for t in truth.values())
    assert "ttft-queueing" not in {f["id"] for f in doc["findings"]}, doc["findings"]
    why = [u["reason"] for u in doc["undecided"] if u["id"] == "ttft-queueing"]
    assert why and "disagree" in why[0] and "the queue at 0 % (0–0 %)" in why[0], why
    assert "explain inferred a queue" in why[0] and "Cannot tell which holds" in why[0], why
