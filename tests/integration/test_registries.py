"""Registries are data (issue 32 item 1): a wire protocol and an experiment are each one spec.

Everything below — a made-up protocol ``echo`` (its fake server, its client, its detection probe) and a
made-up experiment ``echo-count`` (its run, analysis, view and diagnosis rule) — lives in this file and
is registered at run time; no other file names them. The test shows that they appear in ``--help``, in
``--api``'s choices, in detection (``--api auto`` finds ``echo``), in explain's run and in its report,
then unregisters them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import aiohttp
import pytest
from aiohttp import web

from phasescope.apis import registry as protocols
from phasescope.apis._http import Protocol, exchange
from phasescope.apis._records import add_event, fill_fallback_counts, new_record, set_count
from phasescope.apis.base import GenRequest, Target
from phasescope.apis.spec import ApiSpec, Detected, Prober
from phasescope.cli import run as cli_run
from phasescope.diagnose import Evidence, Finding, Rule
from phasescope.experiments import registry as experiments
from phasescope.experiments.common import ExperimentInfo, ok, select
from phasescope.experiments.spec import ExperimentSpec
from phasescope.experiments.view import View
from phasescope.measure.records import RequestRecord
from phasescope.testing._serve import LoopbackServer


# -- the throw-away protocol: NDJSON from POST /echo/generate, recognised by GET /echo/version ---------
class EchoServer(LoopbackServer):
    """Streams one word per output token (2 ms apart), then ``{"done": true, "n_in", "n_out"}``."""

    def _routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/echo/version", self._version)
        router.add_post("/echo/generate", self._generate)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"echo": "1.0"})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n_in, n_out = len(str(body["prompt"]).split()), int(body["n"])
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        await asyncio.sleep(0.005 + 2e-5 * n_in)  # a prefill that grows with the prompt
        for _ in range(n_out):
            await resp.write(json.dumps({"t": " echo"}).encode() + b"\n")
            await asyncio.sleep(0.002)
        await resp.write(json.dumps({"done": True, "n_in": n_in, "n_out": n_out}).encode() + b"\n")
        await resp.write_eof()
        return resp


class _Echo(Protocol):
    path = "/echo/generate"
    framing = "ndjson"

    def body(self) -> dict[str, Any]:
        return {"prompt": self.req.prompt, "n": self.req.max_tokens, "stream": self.req.stream}

    def on_message(self, obj: Any, t_ns: int) -> None:
        obj = self.message(obj, "line")
        if obj.get("done"):
            set_count(self.rec, "prompt_tokens", obj.get("n_in"), "server")
            set_count(self.rec, "output_tokens", obj.get("n_out"), "server")
            add_event(self.rec, t_ns, "usage", None, 0)
            self.done = True
        else:
            add_event(self.rec, t_ns, "content", 1, len(obj.get("t") or ""))

    def on_body(self, obj: Any) -> None:
        self.on_message(obj, 0)

    def finish(self) -> None:
        fill_fallback_counts(self.rec, self.req)


async def _send(session: aiohttp.ClientSession, target: Target, req: GenRequest) -> RequestRecord:
    return await exchange(session, _Echo(target, req, new_record(target, req)))


async def _probe(p: Prober) -> Detected | None:
    st, obj, _ = await p.get("/echo/version")
    if st == 200 and isinstance(obj, dict) and "echo" in obj:
        return Detected("echo", "echo", ["echo-model"], version=str(obj["echo"]))
    return None


ECHO = ApiSpec("echo", "/echo/generate", _send, warm_path="/echo/version", framing="ndjson", tokenizer=False,
               probe=_probe, probe_rank=5, probe_label="/echo/version (Echo)", engine="echo",
               engine_label="Echo (no /echo/version)")


# -- the throw-away experiment: a few requests, counted, drawn and diagnosed ----------------------------
COUNT = "echo-count"


@dataclass
class EchoCountResult:
    info: ExperimentInfo
    n_ok: int
    output_tokens: int


def _analyze(records: Sequence[RequestRecord], info: ExperimentInfo | None = None) -> EchoCountResult:
    mine = ok(select(records, COUNT))
    return EchoCountResult(info or ExperimentInfo(name=COUNT), len(mine), sum(r.output_tokens or 0 for r in mine))


async def _run(ctx: Any, budget_s: float, suite: Any) -> EchoCountResult:
    started = time.time()
    ctx.start_clock(budget_s)
    for i in range(3):
        await ctx.send((await ctx.prompt(16)).request(4), COUNT, i=i)
    return _analyze(ctx.records, ctx.info(COUNT, started, {"requests": 3}))


def _view(e: dict[str, Any]) -> View:
    return View(COUNT, "echo-count: requests the echo server answered", ["", "value"],
                [["answered requests", str(e.get("n_ok"))], ["output tokens", str(e.get("output_tokens"))]],
                kind="pairs")


def _rule(results: dict[str, Any], diag: Any, ceil: Any) -> None:
    r = results.get(COUNT)
    if r is not None:
        diag.findings.append(Finding("echo-count-seen", "info", f"The echo server answered {r.n_ok} requests.",
                                     [Evidence("answered requests", r.n_ok, "", "echo-count")], []))


ECHO_COUNT = ExperimentSpec(COUNT, share=0.5, run=_run, analyze=_analyze, view=_view,
                            rule=Rule("echo-count", 1000, _rule))


@pytest.fixture
def registered() -> Iterator[None]:
    protocols.register(ECHO)
    experiments.register(ECHO_COUNT)
    try:
        yield
    finally:
        protocols.unregister(ECHO.name)
        experiments.unregister(COUNT)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _words(text: str) -> str:
    """Console output as one line of words (rich wraps it, in boxes, to the terminal's width)."""
    return " ".join(text.replace("│", " ").split())


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, _ = _cli(capsys, *args, "--help")
    assert code == 0, args
    return _words(out)


def test_a_registered_protocol_and_experiment_are_in_help_and_choices(registered: None, capsys) -> None:
    for cmd in ("probe", "bench", "explain", "experiment"):
        assert "echo (/echo/generate)" in _help(capsys, cmd), cmd
    for cmd in ("explain", "experiment"):
        assert COUNT in _help(capsys, cmd), cmd
    assert COUNT in _help(capsys)  # the command list: "Run one experiment (…, echo-count)."
    code, _, err = _cli(capsys, "probe", "http://127.0.0.1:9", "--api", "nope")
    assert code == 2 and "expected one of: auto, openai, chat, ollama, llamacpp, anthropic, responses, echo" in err


def test_they_are_gone_once_unregistered(capsys) -> None:
    assert "echo" not in protocols.names() and COUNT not in experiments.names()
    code, _, err = _cli(capsys, "probe", "http://127.0.0.1:9", "--api", "echo")
    assert code == 2 and "unknown --api 'echo'" in err
    assert "/echo/generate" not in _help(capsys, "probe")


def test_detection_explain_and_the_report_use_them(registered: None, capsys, tmp_path: Path) -> None:
    with EchoServer().running() as srv:
        # detection: --api auto finds the echo protocol by its own probe, asked first
        code, out, err = _cli(capsys, "explain", srv.url, "--only", COUNT, "--budget", "20s", "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert (doc["api"], doc["engine"], doc["model"]) == ("echo", "echo", "echo-model")
        # explain's run: the experiment ran through the echo client, and its rule was heard
        res = doc["experiments"][COUNT]
        assert res["n_ok"] == 3 and res["output_tokens"] == 12
        assert "echo-count-seen" in [f["id"] for f in doc["findings"]]
        # the console draws its view and its finding
        code, out, err = _cli(capsys, "experiment", COUNT, srv.url, "--api", "echo", "--budget", "20s", "--no-save")
        assert code == 0, err
        out = _words(out)
        assert "echo-count: requests the echo server answered" in out and "answered requests" in out
        assert "The echo server answered 3 requests." in out
    # the report of the stored run shows the finding and its evidence
    page = tmp_path / "report.html"
    code, _, err = _cli(capsys, "report", doc["run_id"], "-o", str(page))
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    assert "The echo server answered 3 requests." in html and "answered requests" in html


def test_a_forced_protocol_on_another_server_says_which_it_is(registered: None) -> None:
    from phasescope.apis.detect import apply

    t = Target(base_url="http://127.0.0.1:9")
    with pytest.raises(Exception, match="is not Echo \\(no /echo/version\\); it looks like vllm"):
        apply(Detected("vllm", "openai"), t, "echo")
