"""OpenTelemetry traces from the server, joined to phasescope's records (issue 35 item 1, first part).

* :func:`traceparent_for` — the W3C ``traceparent`` phasescope sends with every request (beside
  ``X-Request-Id``): the trace id is derived from the record id, so a span that continues the caller's trace
  (vLLM extracts ``traceparent``/``tracestate``, ``vllm/tracing.py``) names its record without a lookup table;
* :func:`parse_traces` — an OTLP ``ExportTraceServiceRequest`` body, ``application/x-protobuf`` (the official
  ``opentelemetry-proto`` package, the ``[otlp]`` extra, imported on first use) or ``application/json``
  (OTLP/JSON: hex ids, attribute values as ``{"doubleValue": …}``; no extra needed), into plain spans;
* :func:`server_span` — one span's attributes in engine-neutral names (seconds);
* :class:`OtlpReceiver` — ``POST /v1/traces`` on HOST:PORT (OTLP/HTTP), collecting spans for a run;
  :class:`OtlpGrpcReceiver` — the same over OTLP/gRPC (``grpc://HOST:PORT``).

Attribute names, checked at the source (vLLM ``vllm/tracing.py``, ``SpanAttributes``, main at 03b8a674):

=====================================  =================
vLLM attribute                          ``server_span`` key
=====================================  =================
``gen_ai.request.id``                   ``request_id``
``gen_ai.latency.time_in_queue``        ``queue_s``
``gen_ai.latency.time_to_first_token``  ``ttft_s``
``gen_ai.latency.time_in_model_prefill`` ``prefill_s``
``gen_ai.latency.time_in_model_decode`` ``decode_s``
``gen_ai.latency.e2e``                  ``e2e_s``
``gen_ai.usage.prompt_tokens``          ``prompt_tokens``
``gen_ai.usage.completion_tokens``      ``output_tokens``
=====================================  =================

vLLM's ``gen_ai.request.id`` is its own request id, which embeds the client's ``X-Request-Id``
(``cmpl-<id>``, ``chatcmpl-<id>``, a ``-0`` suffix per choice), so the join falls back to it when a span
did not continue the trace. SGLang's stage spans and TGI's handler spans are mapped the same way, each
table with its source file and commit in :mod:`phasescope.apis.otlp_names`.

:class:`OtlpGrpcReceiver` serves OTLP/gRPC (``--otlp-listen grpc://HOST:PORT``; vLLM's default exporter
protocol, grpcio in the same extra): ``TraceService/Export`` with the same protobuf messages.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Iterable

from phasescope import errors as E
# each engine's names, checked at the source (VLLM_ATTRS re-exported: it was defined here)
from phasescope.apis.otlp_names import VLLM_ATTRS as VLLM_ATTRS, server_spans

#: what to install for protobuf OTLP (one line, exit 2 where it is missing)
INSTALL_HINT = "OTLP over protobuf needs the otlp extra: pip install 'phasescope[otlp]' (opentelemetry-proto)"
GRPC_INSTALL_HINT = "OTLP over gRPC (grpc://) needs the otlp extra: pip install 'phasescope[otlp]' (grpcio, opentelemetry-proto)"

def trace_id_for(record_id: str) -> str:
    """The 32-hex-digit trace id phasescope uses for ``record_id`` (never all zeros)."""
    h = hashlib.sha256(record_id.encode("utf-8")).hexdigest()[:32]
    return h if int(h, 16) else "0" * 31 + "1"


def traceparent_for(record_id: str) -> str:
    """``00-<trace id>-<parent span id>-01`` (W3C Trace Context, sampled)."""
    span = hashlib.sha256(b"span:" + record_id.encode("utf-8")).hexdigest()[:16]
    return f"00-{trace_id_for(record_id)}-{span if int(span, 16) else '0' * 15 + '1'}-01"


def parse_listen_url(value: str) -> tuple[str, str, int]:
    """``--otlp-listen`` → (protocol, host, port): ``HOST:PORT`` or ``http://HOST:PORT`` is OTLP/HTTP
    (``POST /v1/traces``), ``grpc://HOST:PORT`` OTLP/gRPC (``TraceService/Export``); ``[::1]:4318`` for IPv6.
    Bad input is one line, exit 2."""
    v = (value or "").strip()
    proto = "http"
    scheme, sep, rest = v.partition("://")
    if sep:
        proto, v = scheme.lower(), rest.rstrip("/")
    host, sep, port = v.rpartition(":")
    host = host.strip("[]")
    if proto not in ("http", "grpc") or not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise E.InputError(f"--otlp-listen {value!r}: expected HOST:PORT (OTLP/HTTP) or grpc://HOST:PORT (OTLP/gRPC), "
                           f"e.g. 127.0.0.1:4318 or grpc://127.0.0.1:4317")
    return proto, host, int(port)


def parse_listen(value: str) -> tuple[str, int]:
    """``--otlp-listen`` → (host, port) (:func:`parse_listen_url` without the protocol)."""
    _, host, port = parse_listen_url(value)
    return host, port


def otlp_proto_available() -> bool:
    try:
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError:
        return False
    return True


def require_otlp() -> None:
    """Raise the one-line :class:`~phasescope.errors.InputError` (exit 2) when the extra is missing."""
    if not otlp_proto_available():
        raise E.InputError(INSTALL_HINT)


def grpc_available() -> bool:
    try:
        import grpc  # noqa: F401
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc  # noqa: F401
    except ImportError:
        return False
    return True


def check_listen(value: str | None) -> str | None:
    """``--otlp-listen``, checked before anything is sent: a bad address, or the extra (for gRPC, grpcio too)
    missing, is one line, exit 2."""
    if value is None:
        return None
    proto, _, _ = parse_listen_url(value)
    require_otlp()
    if proto == "grpc" and not grpc_available():
        raise E.InputError(GRPC_INSTALL_HINT)
    return value


def _json_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for k in ("stringValue", "boolValue", "doubleValue"):
        if k in v:
            return v[k]
    if "intValue" in v:  # OTLP/JSON sends 64-bit integers as strings
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_json_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    return None


def _pb_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if kind in ("kvlist_value", "bytes_value"):
        return None
    return getattr(v, kind)


def parse_traces(body: bytes, content_type: str) -> list[dict[str, Any]]:
    """The spans of one OTLP trace export: ``[{trace_id, span_id, name, start_ns, end_ns, attributes}]``
    (ids as lower-case hex). Raises :class:`~phasescope.errors.InputError` on a body that is not one."""
    ct = (content_type or "").split(";")[0].strip().lower()
    spans: list[dict[str, Any]] = []
    if ct == "application/json":
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise E.InputError(f"OTLP/JSON body is not JSON ({exc})") from None
        for rs in doc.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                for s in ss.get("spans") or []:
                    spans.append({"trace_id": str(s.get("traceId") or "").lower(),
                                  "span_id": str(s.get("spanId") or "").lower(), "name": s.get("name"),
                                  "start_ns": int(s.get("startTimeUnixNano") or 0),
                                  "end_ns": int(s.get("endTimeUnixNano") or 0),
                                  "attributes": {a["key"]: _json_value(a.get("value")) for a in s.get("attributes") or []
                                                 if isinstance(a, dict) and "key" in a}})
        return spans
    if ct in ("application/x-protobuf", "application/protobuf"):
        require_otlp()
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        req = ExportTraceServiceRequest()
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise E.InputError(f"OTLP/protobuf body does not decode ({exc})") from None
        return spans_of_request(req)
    raise E.InputError(f"OTLP content type {content_type!r} is not served (application/x-protobuf or application/json)")


def spans_of_request(req: Any) -> list[dict[str, Any]]:
    """The spans of a decoded ``ExportTraceServiceRequest`` (OTLP/HTTP protobuf and OTLP/gRPC alike), as
    :func:`parse_traces` returns them."""
    spans: list[dict[str, Any]] = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append({"trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(), "name": s.name,
                              "start_ns": int(s.start_time_unix_nano), "end_ns": int(s.end_time_unix_nano),
                              "attributes": {a.key: _pb_value(a.value) for a in s.attributes}})
    return spans


def server_span(span: dict[str, Any]) -> dict[str, Any] | None:
    """One vLLM or TGI span's latencies in engine-neutral names (:mod:`~phasescope.apis.otlp_names`), or None when
    it carries none (SGLang's stage spans are gathered by trace: :func:`~phasescope.apis.otlp_names.server_spans`)."""
    from phasescope.apis.otlp_names import tgi_span, vllm_span

    return vllm_span(span) or tgi_span(span)


def join_spans(records: Iterable[Any], spans: Iterable[dict[str, Any]]) -> int:
    """Set ``record.server_span`` for every record a span belongs to (:func:`server_spans`: vLLM, SGLang, TGI) —
    by the trace id phasescope sent (:func:`trace_id_for`), else by a request id (vLLM ``gen_ai.request.id``,
    SGLang ``rid``) that embeds the record id; returns how many records got one."""
    by_trace: dict[str, dict[str, Any]] = {}
    by_rid: list[dict[str, Any]] = []
    for ss in server_spans(spans):
        if ss.get("trace_id"):
            by_trace[str(ss["trace_id"])] = ss
        if ss.get("request_id"):
            by_rid.append(ss)
    n = 0
    for r in records:
        ss = by_trace.get(trace_id_for(r.id))
        if ss is None:
            ss = next((x for x in by_rid if _embeds(str(x["request_id"]), r.id)), None)
        if ss is not None:
            r.server_span = ss
            n += 1
    return n


def _embeds(request_id: str, record_id: str) -> bool:
    if request_id == record_id:
        return True
    i = request_id.find(record_id)
    if i < 0:
        return False
    before, after = request_id[:i], request_id[i + len(record_id):]
    return (before == "" or before.endswith("-")) and (after == "" or (after.startswith("-") and after[1:].isdigit()))


class OtlpReceiver:
    """``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON) on ``host:port`` in a thread of its own; ``spans``
    holds what arrived. ``with OtlpReceiver("127.0.0.1", 0) as rx: rx.url`` (port 0: a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4318) -> None:
        self.host, self.port = host, port
        self.spans: list[dict[str, Any]] = []
        self.rejected = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: Any = None
        self._runner: Any = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1/traces"

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        try:
            got = parse_traces(body, request.headers.get("Content-Type", ""))
        except E.InputError as exc:
            self.rejected += 1
            return web.Response(status=400, text=str(exc))
        with self._lock:
            self.spans.extend(got)
        ct = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ct == "application/json":
            return web.Response(status=200, body=b"{}", content_type="application/json")
        return web.Response(status=200, body=b"", content_type="application/x-protobuf")

    def _run(self) -> None:
        import asyncio

        from aiohttp import web

        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/traces", self._handle)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port)
            loop.run_until_complete(site.start())
            server = getattr(site, "_server", None)
            socks = getattr(server, "sockets", None) or []
            if socks:
                self.port = int(socks[0].getsockname()[1])
            self._runner = runner
        except BaseException as exc:  # noqa: BLE001 - reported to start()'s caller
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    def start(self) -> "OtlpReceiver":
        self._thread = threading.Thread(target=self._run, name="phasescope-otlp", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise E.InputError(f"--otlp-listen {self.host}:{self.port}: cannot listen ({self._error})")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> "OtlpReceiver":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def taken(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.spans)


#: after a run, how long probe and bench wait at most for spans still to come (vLLM's exporter batches every 5 s)
OTLP_WAIT_S = 8.0


class OtlpGrpcReceiver(OtlpReceiver):
    """OTLP/gRPC: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` on ``host:port`` (vLLM's
    default exporter protocol), served by grpcio's thread-pool server; ``spans`` as :class:`OtlpReceiver`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4317) -> None:
        super().__init__(host, port)
        self._server: Any = None

    @property
    def url(self) -> str:
        return f"grpc://{self.host}:{self.port}"

    def start(self) -> "OtlpGrpcReceiver":
        if not grpc_available():  # the one line, also where a caller skipped check_listen
            raise E.InputError(GRPC_INSTALL_HINT)
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        rx = self

        class _Service(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
                got = spans_of_request(request)
                with rx._lock:
                    rx.spans.extend(got)
                return trace_service_pb2.ExportTraceServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="phasescope-otlp-grpc"),
                             options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                                      ("grpc.so_reuseport", 0)])  # a taken port is an error, not shared
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(), server)
        addr = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            port = server.add_insecure_port(addr)
        except RuntimeError as exc:  # grpcio ≥ 1.50 raises where older ones return 0
            raise E.InputError(f"--otlp-listen grpc://{addr}: cannot listen ({exc})") from None
        if not port:
            raise E.InputError(f"--otlp-listen grpc://{addr}: cannot listen (the address is taken or not this host's)")
        self.port = int(port)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5)
            self._server = None


def start_listening(listen: str | None) -> "OtlpReceiver | None":
    """The receiver of ``--otlp-listen`` (:func:`parse_listen_url`: OTLP/HTTP or, ``grpc://``, OTLP/gRPC),
    started, or None without the flag (probe, bench and explain)."""
    if not listen:
        return None
    proto, host, port = parse_listen_url(listen)
    return (OtlpGrpcReceiver if proto == "grpc" else OtlpReceiver)(host, port).start()


def join_after_run(rx: "OtlpReceiver", records: Iterable[Any], wait_s: float) -> int:
    """After a run: wait (at most ``wait_s``, :data:`OTLP_WAIT_S` by default in probe and bench) until a span came for every
    successful request, stop the receiver, join the spans to the records (``server_span``); returns how many
    spans arrived."""
    import time

    ok = [r for r in records if r.ok]
    deadline = time.monotonic() + max(0.0, wait_s)
    try:
        while join_spans(ok, rx.taken()) < len(ok) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        rx.stop()
    spans = rx.taken()
    join_spans(ok, spans)
    return len(spans)
