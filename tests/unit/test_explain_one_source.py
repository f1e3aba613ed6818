"""Issue 30 item 2: one explain result feeds the console, the JSON, the report's phase card and the
report's findings; every number the card or the report shows is the one the console printed.

The run below is the issue's: context-fill decode measured from the token gaps at 49.7 / 88.7 / 88.6 /
91.7 / 73.8 tok/s while the server's own decode timing (every stall of its step loop included) read
26.4 / 52.2 / 15.4 / 2.2 / 9.0; the card printed the server's numbers beside a prediction anchored to the
client's, the console the client's.
"""

from __future__ import annotations

import html as htmllib
import io
import re
import sys
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))

from explain_synth import rec  # noqa: E402

from phasescope.diagnose import diagnose  # noqa: E402
from phasescope.experiments import context_fill, prompt_scaling, queue  # noqa: E402
from phasescope.experiments.context import Calibration, ServerFacts  # noqa: E402
from phasescope.experiments.render import render_experiments, render_findings  # noqa: E402
from phasescope.experiments.suite import ExplainReport  # noqa: E402
from phasescope.report.html import render_html  # noqa: E402
from phasescope.report.sections import card_html  # noqa: E402
from phasescope.store import RunInfo  # noqa: E402

CLIENT = (49.7, 88.7, 88.6, 91.7, 73.8)
SERVER = (26.4, 52.2, 15.4, 2.2, 9.0)
CONTEXTS = (64, 256, 1024, 2048, 4096)


def _records() -> list:
    out = []
    for ctx, c, s in zip(CONTEXTS, CLIENT, SERVER):
        n_out = 17
        srv = {"predicted_n": n_out, "decode_s": (n_out - 1) / s}
        out.append(rec(context_fill.NAME, "measure", ttft=0.05 + ctx * 1e-4, gap=1 / c, n_out=n_out, prompt=ctx,
                       server=srv, context_target=ctx, rep=0))
    for n in (32, 128, 512, 2048):
        for rep in range(2):
            srv = {"prompt_n": n, "prefill_s": n / 2000.0, "predicted_n": 16, "decode_s": 15 / 40.0}
            out.append(rec(prompt_scaling.NAME, "measure", ttft=0.03 + n / 2000.0 + rep * 0.002, gap=0.02, n_out=16,
                           prompt=n, server=srv, prompt_tokens_target=n, rep=rep))
    for i in range(2):
        out.append(rec(queue.NAME, "measure", ttft=37.73, server={"prefill_s": 0.13}, concurrency=6, worker=i))
    for i in range(4):
        out.append(rec(queue.NAME, "measure", ttft=1.5, server={"prefill_s": 1.485}, concurrency=6, worker=2 + i))
    return out


def _doc() -> dict:
    recs = _records()
    results = {
        "prompt-scaling": prompt_scaling.analyze(recs),
        "context-fill": context_fill.analyze(recs, weight_bytes=2.9e8, kv_bytes_per_token=2e4),
        "queue": queue.analyze(recs),
    }
    diag = diagnose(results, engine="llamacpp", records=recs)
    rep = ExplainReport(target="http://127.0.0.1:1", engine="llamacpp", model="m", api="openai", budget_s=90.0,
                        facts=ServerFacts(engine="llamacpp", slots=4), calibration=Calibration(0.01, 2000, 80, 64),
                        experiments=results, diagnosis=diag, duration_s=88.0)
    return rep.to_json()


def _console(doc: dict) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=400, color_system=None)
    render_findings(doc, con)
    render_experiments(doc["experiments"], con)
    return buf.getvalue()


def _cells(table_html: str) -> list[list[str]]:
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table_html, flags=re.S):
        rows.append([htmllib.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", tr, flags=re.S)])
    return rows


def _console_row(out: str, first_cell: str) -> list[str]:
    """The cells of the console table row whose first cell is ``first_cell``."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no console row {first_cell!r}")


def test_card_and_console_print_the_same_decode_and_prediction_from_one_result():
    doc = _doc()
    out = _console(doc)
    info = RunInfo(id="e1", kind="explain", status="complete", started_at=0.0, model="m", summary=doc)
    card = card_html([(info, [])])
    tables = re.findall(r"<table class=cardtab>.*?</table>", card, flags=re.S)
    cf = next(_cells(t) for t in tables if "context-fill" in t)
    head, rows = cf[0], {r[0]: r[1:] for r in cf[1:]}
    pts = {p["context_tokens"]: p for p in doc["experiments"]["context-fill"]["points"]}
    assert "decode tok/s" in rows and "predicted tok/s" in rows
    for k, h in enumerate(head[1:]):
        ctx = int(h.split()[0])
        p = pts[ctx]
        # the card's figure is the JSON's decode_tok_s (the one the prediction is anchored to), not the server's
        assert rows["decode tok/s"][k] == f"{p['decode_tok_s']:.1f}"
        assert rows["decode tok/s"][k] != f"{p['server_decode_tok_s']:.1f}"
        # and the console printed that very cell, and the same prediction, in the row of that context
        crow = _console_row(out, str(ctx))
        assert rows["decode tok/s"][k] == crow[2], (rows, crow)
        assert rows["predicted tok/s"][k] == crow[5], (rows, crow)
    ps = next(_cells(t) for t in tables if "prompt-scaling" in t)
    phead, prows = ps[0], {r[0]: r[1:] for r in ps[1:]}
    for label, rowcells in prows.items():
        for k, h in enumerate(phead[1:]):
            n = h.split("-")[0]
            crow = _console_row(out, n)
            assert rowcells[k] in crow, (label, rowcells[k], crow)


def test_report_findings_and_undecided_are_the_consoles_words():
    doc = _doc()
    out = _console(doc)
    info = RunInfo(id="e1", kind="explain", status="complete", started_at=0.0, model="m", summary=doc)
    page = htmllib.unescape(render_html([(info, [])], [], {}))
    assert doc["findings"], "the synthetic run makes findings"
    for f in doc["findings"]:
        assert f["cause"] in page and f["cause"].split(":")[0] in out
        for e in f["evidence"]:
            assert e["text"] in page, e["text"]  # the report shows the evidence as the console printed it
            assert e["text"] in out
    for u in doc["undecided"]:
        assert u["reason"].split(":")[0] in page, u


def test_queue_figure_agrees_in_console_json_and_sentence():
    doc = _doc()
    out = _console(doc)
    q = doc["experiments"]["queue"]
    total = f"{q['ttft_queue_share_total']:.0%}"
    assert total == "92%"
    assert total in _console_row(out, "share of all TTFT outside prefill (Σ waiting ÷ Σ TTFT)")[1]
    f = next(f for f in doc["findings"] if f["id"] == "ttft-queueing")
    assert f"waiting was {total} of TTFT" in f["cause"]
