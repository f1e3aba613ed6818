"""``phasescope runs``, ``show``, ``compare`` and ``report``: the run history (parse, call, print)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional

import typer

from phasescope._results import Report, Result
from phasescope.cli._common import LIVE_HELP, console, err_console, print_json
from phasescope.cli._output import console_view, format_option, output

if TYPE_CHECKING:
    from phasescope.store import RunInfo, RunStore

#: compare's --format is its own (a table or markdown), not the output formats of the other commands
COMPARE_FORMAT_HELP = "table (terminal) | md (markdown table for a pull-request comment)."
LIVE_HELP["compare --format"] = lambda: COMPARE_FORMAT_HELP

STORE_HELP = "Run store (SQLite file or its folder); default $PHASESCOPE_STORE or ~/.local/share/phasescope/runs.db."


def _store(path: Optional[Path]) -> "RunStore":
    """The store these reading commands read: a --store that names no store is a typo to report,
    not a new empty database to create (the default location may not exist yet: no runs so far)."""
    from phasescope.errors import InputError
    from phasescope.store import open_store, store_db_path

    if path is not None and not store_db_path(path).exists():
        raise InputError(f"no run store at {path} (probe, bench, explain and tune create one with --store)")
    return open_store(path)


def runs(
    kind: Optional[str] = typer.Option(None, "--kind", help="Only runs of this kind (probe, bench, explain, ...)."),
    target: Optional[str] = typer.Option(None, "--target", help="Only runs whose target URL contains this."),
    model: Optional[str] = typer.Option(None, "--model", help="Only runs whose model name contains this."),
    status: Optional[str] = typer.Option(None, "--status", help="Only runs with this status: running, complete, partial, failed (no request succeeded) or interrupted (its process is gone)."),
    limit: int = typer.Option(50, "--limit", "-n", help="At most this many runs, newest first (0 = all)."),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the runs as JSON on stdout."),
    fmt: Optional[str] = format_option(),
) -> None:
    """List stored runs, newest first."""
    from phasescope.errors import InputError
    from phasescope.report.console import runs_json
    from phasescope.store import RUN_STATUSES

    sink = output(json_out, fmt)
    if status is not None and status not in RUN_STATUSES:
        raise InputError(f"--status must be one of {', '.join(RUN_STATUSES)}")
    if store is not None:  # listing creates nothing: at a path that holds no store, an empty list, said so
        from phasescope.store import store_db_path

        db = store_db_path(store)
        if not db.exists():
            sink.emit(Report.of("runs", {"store": str(db), "runs": []}, missing=store))
            return
    st = _store(store)
    found = st.list_runs(kind=kind, target=target, model=model, status=status, limit=limit or None)
    bases = st.baselines()
    with _stored("the run list"):  # the document made only for a format that prints it
        sink.emit(Report.lazy("runs", lambda: {"store": str(st.db_path), "runs": runs_json(found, bases)}, found=found,
                              bases=bases, malformed=list(getattr(st, "malformed", [])),
                              filtered=any((kind, target, model, status))))


@console_view("runs")
def _show_runs(result: Result) -> None:
    """The runs table (or why there is none)."""
    from phasescope.report.console import runs_table, wide

    o = result.objects  # type: ignore[attr-defined]
    if "missing" in o:
        err_console.print(f"no run store at {o['missing']} yet (probe, bench, explain and tune create one with --store)")
        return
    for why in o["malformed"]:  # a hostile or edited row: said, not a crash
        err_console.print(f"note: {why}; left out", highlight=False, markup=False)
    if not o["found"]:
        err_console.print(f"no runs in {result['store']}" + (" match" if o["filtered"] else ""))
        return
    wide(console).print(runs_table(o["found"], o["bases"]))


@contextlib.contextmanager
def _stored(what: str) -> Iterator[None]:
    """Rendering what the store holds: a row with values of the wrong types (edited by hand, written by
    something else) is one line naming the run, not a crash."""
    from phasescope.errors import InputError

    try:
        yield
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise InputError(f"{what}: the stored summary is malformed ({type(exc).__name__}: {str(exc)[:120]})",
                         hint="`phasescope show RUN --json` prints the row as stored") from None


def show(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix, or 'latest')."),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the run, its summary and derived metrics as JSON."),
    fmt: Optional[str] = format_option(),
    request: Optional[str] = typer.Option(None, "--request", metavar="ID", help="Print where one request's time went (its id in the records: connect, network, queue, prefill, decode, each beside its floor where the run knew the model and the device)."),
) -> None:
    """Show one stored run: its environment, parameters, summary and the metrics of its raw records."""
    from phasescope.measure.aggregate import metric_table

    sink = output(json_out, fmt)
    st = _store(store)
    info = st.get(run_id)
    if request is not None:
        w = _request_waterfall(info, st.load_records(info.id), request)
        sink.emit(Report.of("show_request", {"run": info.id, "request": request, "waterfall": w}, info=info))
        return
    metrics = metric_table(st.load_records(info.id))
    names = [n for n, rid in st.baselines().items() if rid == info.id]
    with _stored(f"run {info.id}"):
        sink.emit(Report.of("show", {"run": info.to_dict(), "baselines": names, "metrics": metrics}, info=info))


def _run_bounds(info: "RunInfo") -> object:
    """The waterfall's bounds for a stored run: the model and the device its ceilings named, or None."""
    c = (info.summary or {}).get("ceilings") or {}
    m, d = c.get("model_spec") or {}, c.get("device") or {}
    if not (m.get("source") or m.get("id")) or not d.get("id"):
        return None
    try:
        from phasescope.theory.ceilings import waterfall_bounds
        from phasescope.theory.devices import get_device
        from phasescope.theory.models.load import load_model_spec

        try:
            spec = load_model_spec(str(m.get("source") or m.get("id")))
        except Exception:  # noqa: BLE001 - a GGUF since moved: the catalog id, if it is one
            spec = load_model_spec(str(m.get("id")))
        return waterfall_bounds(spec, get_device(str(d["id"])))
    except Exception:  # noqa: BLE001 - no bounds is no failure: the phases stand alone
        return None


def _request_waterfall(info: "RunInfo", records: list, request_id: str) -> dict:
    from phasescope.errors import InputError
    from phasescope.measure.waterfall import attach_spans, network_estimate_ns, request_waterfall

    found = [r for r in records if r.id == request_id]
    attach_spans(found, info.summary)
    if not found:
        some = ", ".join(r.id for r in records[:3])
        raise InputError(f"run {info.id} has no request {request_id!r}"
                         + (f" (its requests are named like {some})" if some else " (it has no records)"))
    w = request_waterfall(found[0], _run_bounds(info),  # type: ignore[arg-type]
                          network_ns=network_estimate_ns(records))
    if w is None:
        raise InputError(f"request {request_id} of run {info.id} produced no token: there is no waterfall to show"
                         + (f" ({found[0].error_kind}: {found[0].error_message})" if found[0].error_kind else ""))
    return w


@console_view("show_request")
def _show_request(result: Result) -> None:
    """One request's waterfall, a line per phase."""
    from phasescope.measure.waterfall import waterfall_lines

    for line in waterfall_lines(result["waterfall"]):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@console_view("show")
def _show_run(result: Result) -> None:
    """The run's environment, parameters, summary and metrics."""
    from phasescope.report.console import show_renderable, wide

    info = result.objects["info"]  # type: ignore[attr-defined]
    with _stored(f"run {info.id}"):
        wide(console).print(show_renderable(info, result["metrics"], result["baselines"]))


KEEP_IMPORTS_HELP = ("Store each result file named in place of a run id (vllm bench serve, GuideLLM, AIPerf, llm-d) as a "
                     "run of kind import, as `phasescope import` does (default: read on the fly, not stored).")


def import_(
    file: Path = typer.Argument(..., help="A result file: vllm bench serve --save-result JSON, GuideLLM benchmarks.json, "
                                          "AIPerf profile_export_aiperf.json or profile_export.jsonl, llm-d Benchmark Report v0.2 JSON."),
    fmt_in: str = typer.Option("auto", "--format", help="auto (from the file's keys), vllm, guidellm, aiperf or llmd."),
    index: int = typer.Option(0, "--index", help="Which benchmark of a GuideLLM file that holds several (0 = the first)."),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the stored run (id, source, summary) as JSON."),
) -> None:
    """Store another tool's result file as a run of kind import (its source named, its metrics mapped to
    phasescope's keys by each tool's definition), for `compare` and `report`."""
    from phasescope.report.imported import load_result, store_imported

    imp = load_result(file, fmt_in, index)
    info = store_imported(_store(store), imp)
    if json_out:
        print_json({"id": info.id, "kind": info.kind, "source": imp.summary.get("source"), "model": info.model,
                    "n_records": info.n_records, "summary": info.summary})
        return
    src = imp.summary.get("source") or {}
    what = f"{len(imp.records)} requests" if imp.records else "summary numbers only (no per-request data)"
    console.print(f"imported {file} ({src.get('tool', imp.source)}) as run {info.id}: {what}", highlight=False)
    for note in imp.notes:
        err_console.print(f"note: {note}", highlight=False)
    for key, d in sorted((imp.summary.get("definitions") or {}).items()):
        if not d.get("comparable", True):
            err_console.print(f"  {key}: not comparable with phasescope's — {d.get('why')}", highlight=False)


def export(
    run_id: str = typer.Argument(..., help="The run to export (an id, a unique prefix, or latest)."),
    fmt_out: str = typer.Option("llmd", "--format", help="llmd: llm-d's Benchmark Report v0.2 (JSON)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the report to this file (default: stdout)."),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
) -> None:
    """Write a stored run in another tool's schema: --format llmd is llm-d's Benchmark Report v0.2, which
    `phasescope import` (and llm-d-benchmark's tools) read back."""
    import json
    import sys

    from phasescope.errors import InputError
    from phasescope.report.llmd import benchmark_report

    if fmt_out != "llmd":
        raise InputError(f"--format must be llmd (got {fmt_out!r})")
    st = _store(store)
    info = st.get(run_id)
    with _stored(f"run {info.id}"):
        doc = benchmark_report(info, st.load_records(info.id))
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    from phasescope.safeio import write_text

    path = write_text(out, text, what="benchmark report")
    err_console.print(f"wrote {path} (llm-d Benchmark Report v0.2 of run {info.id})", highlight=False)


def compare(
    ids: Optional[List[str]] = typer.Argument(None, help="Run A (reference) and run B; or one run with --baseline. "
                                              "A result file of another tool (.json/.jsonl) may stand for a run."),
    baseline: Optional[str] = typer.Option(
        None, "--baseline", "-b",
        help="Compare against the run named NAME (A); if NAME is not set yet, the given run becomes it.",
    ),
    set_: bool = typer.Option(False, "--set", help="With --baseline NAME RUN: (re)mark RUN as baseline NAME, no comparison."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence of the intervals of B − A."),
    min_change: Optional[float] = typer.Option(
        None, "--min-change",
        help="Smallest relative change called better/worse, for every metric (default: each metric's minimum "
             "effect, 5 %; 10 % for ttft_p99 and itl_p99)."),
    fail_on: Optional[str] = typer.Option(
        None, "--fail-on",
        help="worse: a CI regression gate. Exit 5 when a chosen metric (--metrics) is worse beyond noise and its "
             "minimum effect; exit 6 (inconclusive) when a chosen metric is not comparable or unstable, or none "
             "could be judged; 0 when it passes."),
    allow_incomparable: bool = typer.Option(
        False, "--allow-incomparable",
        help="With --fail-on: judge not-comparable and unstable metrics by their numbers instead of exiting 6."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Metrics for --fail-on (default all): ttft, ttft_p99, prefill, decode, tpot, itl_p50, itl_p99, e2e, throughput."),
    fmt: str = typer.Option("table", "--format", help=COMPARE_FORMAT_HELP),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout."),
    html_out: Optional[Path] = typer.Option(None, "--html", help="Also write the two-run report (plots overlaid, verdicts, differences) to this HTML file."),
    keep_imports: bool = typer.Option(False, "--keep-imports", help=KEEP_IMPORTS_HELP),
) -> None:
    """Compare two runs metric by metric: change and a better / worse / within-noise / not-comparable verdict
    (run-level intervals when both are bench --trials runs). With --fail-on worse: exit 0 pass, 5 worse,
    6 inconclusive."""
    from phasescope.errors import InputError
    from phasescope.report.compare import compare_runs, parse_metrics, to_markdown
    from phasescope.report.pairs import resolve_pair
    from phasescope.report.gate import decide, row_name
    from phasescope.report.console import compare_renderable, wide

    if fail_on is not None and fail_on != "worse":
        raise InputError("--fail-on takes `worse` (exit 5 when a chosen metric is worse beyond noise)")
    if allow_incomparable and fail_on is None:
        raise InputError("--allow-incomparable only changes the --fail-on worse gate: add --fail-on worse")
    if fmt not in ("table", "md"):
        raise InputError("--format must be table or md")
    chosen = parse_metrics(metrics)

    if not 0.5 <= confidence < 1:
        raise InputError("--confidence must be in [0.5, 1)")
    if min_change is not None and not 0 <= min_change < 10:
        raise InputError("--min-change must be ≥ 0 (a relative change: 0.05 is 5 %)")
    from phasescope.report.imported import WithFiles

    st = WithFiles(_store(store), keep=keep_imports)
    pair = resolve_pair(st, list(ids or []), baseline, set_)
    if pair.a is None or pair.b is None:
        if json_out:
            print_json({"message": pair.message, "baselines": st.baselines()})
        else:
            err_console.print(pair.message or "")
        return
    if pair.a.id == pair.b.id:  # allowed (it shows A's numbers, #16's one-number check), but said
        err_console.print(f"note: run A and run B are the same run ({pair.a.id}): the verdicts say nothing about a change",
                          highlight=False)
    with _stored(f"runs {pair.a.id} and {pair.b.id}"):
        cmp = compare_runs(pair.a, st.load_records(pair.a.id), pair.b, st.load_records(pair.b.id),
                           confidence=confidence, min_change=min_change)
        decision = decide(cmp, chosen, allow_incomparable=allow_incomparable)
    if html_out is not None:
        from phasescope.report.html import write_report

        res = write_report([(pair.a, st.load_records(pair.a.id)), (pair.b, st.load_records(pair.b.id))], html_out,
                           comparisons=[cmp.to_dict()])
        err_console.print(f"wrote {res.path} ({res.size_bytes / 1e6:.1f} MB, {len(res.plots)} plots)", highlight=False)
    if json_out:
        d = cmp.to_dict()
        d["baseline"] = baseline
        d["gate"] = {"fail_on": fail_on, "metrics": chosen, **decision.to_dict(),
                     "failed": bool(fail_on and decision.verdict != "pass")}
        if not fail_on:
            d["gate"]["exit_code"] = 0
        print_json(d)
    elif fmt == "md":
        import sys

        sys.stdout.write(to_markdown(cmp, decision.worse if fail_on else None, decision if fail_on else None))
    else:
        with _stored(f"runs {pair.a.id} and {pair.b.id}"):
            wide(console).print(compare_renderable(cmp))
    if not fail_on:
        return
    if decision.verdict == "worse":
        if not json_out:
            err_console.print(f"compare: gate worse (exit {decision.exit_code}): {len(decision.worse)} metric(s) worse "
                              "beyond noise and their minimum effect: "
                              + ", ".join(f"{m.label}{' [' + m.group + ']' if m.group else ''} {m.change * 100:+.1f} %"
                                          if m.change is not None else m.label for m in decision.worse),
                              highlight=False)
        raise typer.Exit(decision.exit_code)
    if decision.verdict == "inconclusive":
        if not json_out:
            err_console.print(f"compare: gate inconclusive (exit {decision.exit_code}): {decision.reason}",
                              highlight=False)
            for m, why in decision.inconclusive[1:6]:
                err_console.print(f"  {row_name(m)}: {why}", highlight=False)
        raise typer.Exit(decision.exit_code)
    if not json_out:
        err_console.print("compare: gate passed: no gated metric is worse beyond noise and its minimum effect"
                          + (f" ({len(decision.skipped)} with too few samples not gated)" if decision.skipped else ""),
                          highlight=False)


def report(
    ids: List[str] = typer.Argument(..., help="One or more run ids (several are overlaid); a result file of another "
                                              "tool (.json/.jsonl) may stand for a run."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="The HTML file to write."),
    png: Optional[Path] = typer.Option(None, "--png", help="Also write each plot as a PNG into this folder."),
    store: Optional[Path] = typer.Option(None, "--store", help=STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print what was written (files, plots, skipped) as JSON."),
    fmt: Optional[str] = format_option(),
    keep_imports: bool = typer.Option(False, "--keep-imports", help=KEEP_IMPORTS_HELP),
) -> None:
    """Write one self-contained HTML file (works offline): the phase card, then the evidence —
    interactive plots of the runs; with two or more, overlaid, and the comparison of A (the first)
    against each other run."""
    from phasescope.report.html import write_report

    from phasescope.report.imported import WithFiles

    sink = output(json_out, fmt)
    st = WithFiles(_store(store), keep=keep_imports)
    infos = [st.get(i) for i in ids]
    res = write_report([(i, st.load_records(i.id)) for i in infos], out, png_dir=png)
    sink.emit(Report.of("report", res.to_dict(), written=res))


@console_view("report")
def _show_report(result: Result) -> None:
    """What was written, what was skipped and why."""
    res = result.objects["written"]  # type: ignore[attr-defined]
    console.print(f"wrote {res.path} ({res.size_bytes / 1e6:.1f} MB, {len(res.plots)} plots"
                  + (f"; compared {', '.join(res.compared)}" if res.compared else "") + ")", highlight=False)
    for name, why in res.skipped.items():
        err_console.print(f"skipped {name}: {why}", highlight=False)
    for p in res.png_files:
        console.print(f"wrote {p}", highlight=False)
    if res.png_error:
        err_console.print(f"no PNGs: {res.png_error}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("show")(show)
    app.command("compare")(compare)
    app.command("report")(report)
    app.command("import")(import_)
    app.command("export")(export)
