"""Issue 16 item 2: every request to a server is made in ``phasescope.apis``.

Walks ``src/phasescope`` with the stdlib ``ast`` module: no server path literal and no raw HTTP call
outside ``apis/`` (the fakes in ``testing/`` serve those paths, so they name them), no import of
``phasescope.apis`` from ``measure/`` or ``theory/``; engine detection from ``/metrics`` reads the one
Prometheus-prefix table in ``apis/engines.py`` (``metrics.engines`` re-exports it).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "phasescope"

#: the server endpoints the issue names (a string that *is* one of them is a request being built)
SERVER_PATHS = ("/tokenize", "/detokenize", "/props", "/api/show", "/api/tags", "/api/version", "/slots",
                "/v1/models", "/health", "/completion", "/v1/completions", "/v1/chat/completions",
                "/api/generate", "/api/chat")
#: modules allowed to make HTTP requests themselves: the timed exchange, the one JSON helper, and
#: the ``/metrics`` GET (issue 32: ``metrics/`` parses what :mod:`phasescope.apis.prometheus` fetches)
HTTP_CALLERS = {"apis/_http.py", "apis/_json.py", "apis/prometheus.py"}


@functools.lru_cache(maxsize=1)  # parsed once for the tests of this file, not once each
def _parsed() -> tuple[tuple[str, ast.Module], ...]:
    return tuple((rel, ast.parse(p.read_text(encoding="utf-8"), filename=rel))
                 for p in sorted(SRC.rglob("*.py")) for rel in [p.relative_to(SRC).as_posix()])


def _modules(*, skip: tuple[str, ...] = ()) -> list[tuple[str, ast.Module]]:
    return [(rel, tree) for rel, tree in _parsed() if not rel.startswith(skip)]


def _is_path(value: str) -> bool:
    return any(value == p or value.startswith(p + "?") for p in SERVER_PATHS)


def test_no_server_path_outside_apis() -> None:
    found = []
    for rel, tree in _modules(skip=("apis/", "testing/")):
        for node in ast.walk(tree):  # f-string parts are Constant nodes too: f"{url}/health" is caught
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_path(node.value):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "server paths outside apis/ (call a phasescope.apis function instead):\n" + "\n".join(found)


def test_the_path_check_sees_plain_and_f_string_paths() -> None:
    # the check above must be able to fail: both shapes old call sites used are recognised
    tree = ast.parse('url = base + "/tokenize"\nh = f"{base}/health"\nlabel = "/v1/models max_model_len"\n')
    hits = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and _is_path(n.value)]
    assert hits == ["/tokenize", "/health"]


def _http_calls(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in ("get", "post", "request", "put") and isinstance(f.value, (ast.Name, ast.Attribute)):
                owner = f.value.id if isinstance(f.value, ast.Name) else f.value.attr
                if "session" in owner.lower() or owner == "sess":
                    lines.append(node.lineno)
            if f.attr == "urlopen":
                lines.append(node.lineno)
    return lines


def test_http_requests_only_in_the_wire_modules() -> None:
    found = []
    for rel, tree in _modules(skip=("testing/",)):
        if rel in HTTP_CALLERS:
            continue
        found += [f"{rel}:{ln}" for ln in _http_calls(tree)]
    assert not found, f"HTTP requests made outside {', '.join(sorted(HTTP_CALLERS))}:\n" + "\n".join(found)


def test_one_prometheus_prefix_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """apis.detect reads the engines' table (apis.engines, also metrics.engines): an engine added there is
    detected from /metrics text."""
    import dataclasses

    from phasescope.apis.detect import engine_from_metrics
    from phasescope.metrics import engines

    new = dataclasses.replace(engines.TGI, name="xengine", title="X", prefix="xengine:")
    monkeypatch.setitem(engines.PROFILES, "xengine", new)
    text = "# HELP xengine:requests_running r\n# TYPE xengine:requests_running gauge\nxengine:requests_running 1\n"
    assert engine_from_metrics(text) == "xengine"
    # both readers agree on the majority rule: two sglang families outvote one vllm family
    mixed = "vllm:num_requests_running 1\nsglang:num_running_reqs 0\nsglang:gen_throughput 2.5\n"
    assert engine_from_metrics(mixed) == engines.detect_engine(
        {"vllm:num_requests_running", "sglang:num_running_reqs", "sglang:gen_throughput"}) == "sglang"


METRICS_DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


@pytest.mark.parametrize("name", sorted(p.name for p in METRICS_DATA.glob("*.txt")))
def test_detection_agrees_with_the_metrics_parser_on_recorded_expositions(name: str) -> None:
    from phasescope.apis.detect import engine_from_metrics
    from phasescope.metrics.engines import detect_engine
    from phasescope.metrics.parse import parse_text

    text = (METRICS_DATA / name).read_text(encoding="utf-8")
    assert engine_from_metrics(text) == detect_engine(parse_text(text).names()) is not None
