"""Issue 19: `watch` on llama.cpp reads /slots (and /props): per-slot state, prompt and decoded
tokens, context fill, each new task's prompt-cache reuse, busy vs idle; alerts in words; says how
to enable /slots when it is off. Served by a real HTTP server on 127.0.0.1 from the embedded
engine's own /slots and /metrics output (tests/data)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from rich.console import Console

from phasescope.metrics.dashboard import render
from phasescope.metrics.slots import SlotTracker, parse_slots
from phasescope.metrics.watch import watch_loop, watch_once

DATA = Path(__file__).resolve().parents[1] / "data"
BUSY = json.loads((DATA / "engine_samples" / "llamacpp_slots_busy.json").read_text())
IDLE = json.loads((DATA / "engine_samples" / "llamacpp_slots_idle.json").read_text())
METRICS = (DATA / "metrics" / "llamacpp_real.txt").read_text()
DISABLED = {"error": {"code": 501, "message": "This server does not support slots endpoint. Start it with `--slots`",
                      "type": "not_supported_error"}}
DISABLED_404: list[bool] = []  # set: /slots answers 404 (an older server or a proxy) instead of 501


def test_parse_real_busy_slots() -> None:
    slots = parse_slots(BUSY)
    assert [s.id for s in slots] == [0, 1, 2, 3] and all(s.state == "decode" for s in slots)
    for raw, s in zip(BUSY, slots):
        dec = raw["next_token"][0]["n_decoded"]
        # n_prompt_tokens counts the slot's whole token list: prompt + tokens decoded so far
        assert s.decoded == dec and s.context_tokens == raw["n_prompt_tokens"]
        assert s.prompt_tokens == raw["n_prompt_tokens"] - dec == raw["n_prompt_tokens_processed"] + raw["n_prompt_tokens_cache"]
        assert s.context_fill == pytest.approx(raw["n_prompt_tokens"] / raw["n_ctx"])
        assert s.n_ctx == 4096 and s.remaining == raw["next_token"][0]["n_remain"]


def test_idle_slots_keep_context_but_no_counters() -> None:
    slots = parse_slots(IDLE)
    assert all(s.state == "idle" and not s.busy for s in slots)
    assert all(s.decoded is None and s.prompt_tokens is None and s.cache_reuse is None for s in slots)
    assert [s.context_tokens for s in slots] == [r["n_prompt_tokens"] for r in IDLE]
    assert parse_slots([{"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": False}])[0].context_tokens is None


def _with(raw: list[dict[str, Any]], i: int, **kw: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(raw)
    out[i].update(kw)
    return out


def test_tracker_cache_reuse_of_each_new_task_queue_and_alerts() -> None:
    tr = SlotTracker()
    tr.update(BUSY)
    assert tr.new_tasks == 4 and {t["task"] for t in tr.recent} == {s["id_task"] for s in BUSY}
    assert tr.queue(0) == {"total": 4, "busy": 4, "idle": 0, "waiting": 0,
                           "estimate": "all 4 slots busy: the next request waits for one to finish"}
    assert tr.alerts(0) == []  # busy but nobody waits
    a = tr.alerts(3)
    assert [x.code for x in a] == ["slots_full"] and "3 request(s) wait" in a[0].message and "--parallel" in a[0].message
    # a new task on slot 1 that reused 300 of its 400 prompt tokens from the prompt cache
    nxt = _with(BUSY, 1, id_task=999, n_prompt_tokens=405, n_prompt_tokens_cache=300, n_prompt_tokens_processed=100,
                next_token=[{"has_next_token": True, "has_new_line": False, "n_remain": 55, "n_decoded": 5}])
    tr.update(nxt)
    assert tr.new_tasks == 5
    t = tr.recent[-1]
    assert (t["task"], t["slot"], t["prompt_tokens"], t["cached_tokens"]) == (999, 1, 400, 300)
    assert t["cache_reuse"] == pytest.approx(0.75)
    # a slot whose context is nearly full
    full = _with(BUSY, 2, n_prompt_tokens=3900)
    tr.update(full)
    codes = [x.code for x in tr.alerts(0)]
    assert codes == ["slot_context"]
    assert "slot 2's context is 95% full (3,900 of 4,096 tokens)" in tr.alerts(0)[0].message
    tr.update(IDLE)
    assert tr.queue(0)["idle"] == 4 and tr.queue(0)["estimate"].startswith("no queue: 4 of 4 slots idle")
    assert tr.alerts(5) == []


class FakeLlamaServer:
    """/metrics, /slots and /props as llama-server serves them; /slots can be switched off (501)."""

    def __init__(self, slots: list[dict[str, Any]] | None, deferred: int = 0) -> None:
        self.slots, self.deferred = slots, deferred
        self.url = ""

    async def metrics(self, _: web.Request) -> web.Response:
        text = METRICS.replace("llamacpp:requests_deferred 0", f"llamacpp:requests_deferred {self.deferred}")
        return web.Response(text=text, content_type="text/plain")

    async def get_slots(self, _: web.Request) -> web.Response:
        if self.slots is None and DISABLED_404:
            raise web.HTTPNotFound()
        if self.slots is None:
            return web.json_response(DISABLED, status=501)
        return web.json_response(self.slots)

    async def props(self, _: web.Request) -> web.Response:
        return web.json_response({"total_slots": 4, "default_generation_settings": {"n_ctx": 4096},
                                  "endpoint_slots": self.slots is not None, "build_info": "b1-0c1e570"})

    async def __aenter__(self) -> FakeLlamaServer:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/slots", self.get_slots)
        app.router.add_get("/props", self.props)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def test_watch_once_json_carries_slots() -> None:
    async def go() -> dict[str, Any]:
        async with FakeLlamaServer(BUSY, deferred=2) as srv:
            st = await watch_once(srv.url, interval_s=0.1)
            return st.as_json()

    d = go_run(go())
    assert d["engine"] == "llamacpp"
    assert [set(s) >= {"id", "state", "prompt_tokens", "decoded", "n_ctx"} for s in d["slots"]] == [True] * 4
    assert [(s["id"], s["state"], s["decoded"], s["n_ctx"]) for s in d["slots"]] == [
        (r["id"], "decode", r["next_token"][0]["n_decoded"], 4096) for r in BUSY]
    assert d["slots_queue"]["busy"] == 4 and d["slots_queue"]["waiting"] == 2
    codes = [a["code"] for a in d["alerts"]]
    assert "slots_full" in codes and "queue" not in codes  # one alert for one queue, in the slots' words
    assert d["slots_note"] is None


def test_watch_degrades_when_slots_disabled_and_says_how_to_enable() -> None:
    async def go() -> tuple[dict[str, Any], str]:
        async with FakeLlamaServer(None) as srv:
            st = await watch_loop(srv.url, interval_s=0.05, count=2)
            con = Console(width=140, record=True, color_system=None)
            con.print(render(st))
            return st.as_json(), con.export_text()

    d, text = go_run(go())
    assert d["slots"] is None and d["running"] is not None  # /metrics still read
    assert "/slots is disabled (HTTP 501" in d["slots_note"] and "--no-slots" in d["slots_note"]
    assert "slots: /slots is disabled" in text


def test_slots_not_found_is_not_called_disabled() -> None:
    async def go() -> dict[str, Any]:
        async with FakeLlamaServer(BUSY) as srv:
            srv.slots = None
            DISABLED_404.append(True)
            try:
                return (await watch_once(srv.url, interval_s=0.05)).as_json()
            finally:
                DISABLED_404.clear()

    d = go_run(go())
    assert d["slots"] is None and "HTTP 404" in d["slots_note"] and "--no-slots" not in d["slots_note"]


def test_dashboard_slot_table() -> None:
    async def go() -> str:
        async with FakeLlamaServer(BUSY) as srv:
            st = await watch_loop(srv.url, interval_s=0.05, count=2)
            con = Console(width=160, record=True, color_system=None)
            con.print(render(st))
            return con.export_text()

    text = go_run(go())
    assert "Slots (4 busy / 4)" in text and "all 4 slots busy" in text
    row = next(line for line in text.splitlines() if line.strip("│ ").startswith("2 ") and "decode" in line)
    r2 = BUSY[2]
    assert f"{r2['n_prompt_tokens']}/4,096" in row and str(r2["next_token"][0]["n_decoded"]) in row
    assert "new tasks' prompt-cache reuse" in text


def test_other_engines_have_no_slots_key() -> None:
    async def go() -> dict[str, Any]:
        app = web.Application()
        vllm = (DATA / "metrics" / "vllm_0.33.txt").read_text()
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(text=vllm, content_type="text/plain")

        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            return (await watch_once(f"http://127.0.0.1:{port}", interval_s=0.05)).as_json()
        finally:
            await runner.cleanup()

    d = go_run(go())
    assert d["engine"] == "vllm" and "slots" not in d


def go_run(coro: Any) -> Any:
    return asyncio.run(coro)
