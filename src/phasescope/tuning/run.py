"""The tune loop: for each setting, start the server, run the workload, stop the server, next.

Each setting's measurement is an ordinary run made through the workload's own entry point —
:func:`phasescope.probing.probe`, :func:`phasescope.load.bench.run_bench` or
:func:`phasescope.experiments.suite.run_explain` — inside :func:`phasescope.lifecycle.run_tags`, so
the stored run carries ``params.tune = {"id", "index", "setting", "key"}`` and ``runs``, ``show``,
``compare`` and ``report`` work on it. The tune itself is one more stored run (kind ``tune``,
through :func:`phasescope.lifecycle.run_output`; no records) whose summary is the table
(:mod:`phasescope.tuning.table`).

Resume (:func:`plan_resume`): a setting is done when the store holds a ``complete`` run tagged
with this tune id and the setting's key; those are reused and the rest run, in order. The same
command run again continues automatically (the id is the spec's hash); ``--resume ID`` takes the
spec of a stored tune. A setting whose server does not start, dies, or whose run ends ``failed``
or ``partial`` is recorded as failed (with the server log's last lines) and the tune goes on;
Ctrl-C stops the server and the tune (what finished stays in the store).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from phasescope.errors import InputError, PhasescopeError
from phasescope.tuning.spec import Setting, TuneSpec, setting_key, tune_id

__all__ = ["DEFAULT_WORKLOAD_ARGS", "WORKLOADS", "find_tune_spec", "plan_resume", "run_tune", "stored_settings"]

WORKLOADS = ("probe", "bench", "explain")

#: small defaults: a 2-core CPU runs every setting in well under a minute
DEFAULT_WORKLOAD_ARGS: dict[str, dict[str, Any]] = {
    "probe": {"prompt_tokens": [128], "max_tokens": 32, "repeat": 3},
    "bench": {"num_prompts": 12, "request_rate": "inf", "max_concurrency": 4, "input_len": 128, "output_len": 32},
    "explain": {"budget_s": 60.0, "only": None},
}


def stored_settings(store: Any, tid: str) -> dict[str, Any]:
    """setting key → the newest ``complete`` stored run tagged with tune ``tid``."""
    out: dict[str, Any] = {}
    for info in store.list_runs(limit=None):  # newest first
        t = (info.params or {}).get("tune") if isinstance(info.params, dict) else None
        if isinstance(t, dict) and t.get("id") == tid and info.status == "complete":
            out.setdefault(str(t.get("key")), info)
    return out


def plan_resume(settings: Sequence[Setting], done: dict[str, Any]) -> tuple[list[Setting], list[Setting]]:
    """(settings already done, settings still to run), each in tune order."""
    finished = [s for s in settings if s.key in done]
    todo = [s for s in settings if s.key not in done]
    return finished, todo


def find_tune_spec(store: Any, tid: str) -> TuneSpec:
    """The spec of the stored tune ``tid`` (for ``--resume ID``)."""
    for info in store.list_runs(kind="tune", limit=None):
        p = info.params if isinstance(info.params, dict) else {}
        if p.get("tune_id") == tid and isinstance(p.get("spec"), dict):
            spec = TuneSpec.from_dict(p["spec"])
            from phasescope.tuning.spec import has_masked_secret

            if has_masked_secret(spec.serve):  # the store never held the template's key
                raise InputError(f"--resume {tid}: its --serve template held a secret, which the store does not "
                                 "keep; run the original `tune` command again (it continues this tune)")
            return spec
    raise InputError(f"--resume: no tune {tid!r} in {store.db_path} (see `phasescope runs --kind tune`)")


#: bench's conversation and trace-replay flags tune passes on (``--dataset conversation|mooncake|burstgpt``):
#: tune's workload key → BenchConfig field
BENCH_TRAFFIC_ARGS = {"users": "users", "sessions": "sessions", "turns": "turns", "turn_input_len": "turn_input_len",
                      "system_prompt_len": "system_prompt_len", "think_time_s": "think_time_s",
                      "block_size": "block_size", "trace_start": "trace_start", "trace_duration": "trace_duration",
                      "trace_speed": "trace_speed"}


def bench_config(a: dict[str, Any], url: str | None, *, label: str | None = None) -> Any:
    """The :class:`~phasescope.load.bench.BenchConfig` of tune's bench workload ``a`` (its flags over
    :data:`DEFAULT_WORKLOAD_ARGS`) against ``url``."""
    import math

    from phasescope.load.bench import BenchConfig

    a = {**DEFAULT_WORKLOAD_ARGS["bench"], **a}
    rate = float(a["request_rate"])
    conversation = a.get("dataset") == "conversation"  # its sessions × turns bound it, never a count
    cfg = BenchConfig(url=url, num_prompts=None if conversation else int(a["num_prompts"]), request_rate=math.inf if math.isinf(rate) else rate,
                      max_concurrency=a.get("max_concurrency"), input_len=int(a["input_len"]),
                      output_len=int(a["output_len"]), store=True, label=label,
                      duration_s=a.get("duration_s"), burstiness=float(a.get("burstiness", 1.0)),
                      range_ratio=float(a.get("range_ratio", 0.0)), prefix_len=int(a.get("prefix_len", 0)),
                      prefix_groups=int(a.get("prefix_groups", 1)), seed=int(a.get("seed", 0)),
                      warmup=int(a.get("warmup", 1)), dataset=str(a.get("dataset", "random")),
                      dataset_path=a.get("dataset_path"), api=str(a.get("api", "auto")))
    for key, attr in BENCH_TRAFFIC_ARGS.items():
        if a.get(key) is not None:
            setattr(cfg, attr, a[key])
    return cfg


def _server_flags(command: Sequence[str], env: dict[str, str]) -> str | None:
    """The setting's command line for explain's advice (``--server-flags``), or None if it does not parse."""
    import shlex

    from phasescope.diagnose.settings import parse_server_flags

    text = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(command[1:])])
    try:
        parse_server_flags(text)
    except InputError:
        return None
    return text


def _run_workload(spec: TuneSpec, url: str, say: Callable[[str], None],
                  server_flags: str | None = None) -> tuple[str | None, str]:
    """Run the workload against ``url``: (stored run id, status). ``server_flags``: the setting's
    command line, so explain's advice is set against the values this setting runs with."""
    from phasescope.tuning.spec import template_api_key

    a = {**DEFAULT_WORKLOAD_ARGS[spec.workload], **spec.workload_args}
    key = template_api_key(spec.serve)  # a server started with --api-key K is asked with K
    if spec.workload == "probe":
        from phasescope.probing import probe

        res = probe(url, sizes=list(a["prompt_tokens"]), max_tokens=int(a["max_tokens"]), repeat=a["repeat"],
                    warmup=True, save=True, progress=say, model_spec=a.get("model_spec"), device=a.get("device"),
                    api_key=key, api=str(a.get("api", "auto")))
        sizes = res.get("sizes") or []
        ok = any(s.get("ok") for s in sizes)
        return res.get("run_id"), "complete" if ok else "failed"
    if spec.workload == "bench":
        from phasescope.load.bench import run_bench

        cfg = bench_config(a, url, label=f"tune {tune_id(spec)}")
        cfg.api_key = key
        res = run_bench(cfg, on_status=say)
        if res.run.interrupted:
            raise KeyboardInterrupt
        s = res.summary
        status = "failed" if s.get("status") == "failed" else ("partial" if s.get("partial") else "complete")
        return s.get("run_id"), status
    from phasescope.experiments.suite import NAMES, run_explain

    names = [n.strip() for n in str(a["only"]).split(",") if n.strip()] if a.get("only") else list(NAMES)
    rep = run_explain(url, budget_s=float(a["budget_s"]), names=names, save=True, progress=say,
                      server_flags=server_flags, api_key=key, api=str(a.get("api", "auto")))
    return rep.run_id, "complete"


def _row(setting: Setting, info: Any, store: Any, resumed: bool) -> dict[str, Any]:
    from phasescope.measure.interval import to_ci
    from phasescope.tuning.table import roof_facts, row_intervals, row_metrics, unstable_metrics

    records = store.load_records(info.id)
    metrics, samples = row_metrics(records)
    ivs = row_intervals(metrics, samples)
    summary = info.summary if isinstance(info.summary, dict) else {}
    ceiling = None
    sizes = ((summary.get("ceilings") or {}).get("sizes") or []) if isinstance(summary.get("ceilings"), dict) else []
    if sizes and sizes[0].get("decode_ceiling_tok_s"):
        roof = sizes[0]["decode_ceiling_tok_s"]
        d = metrics.get("decode_tok_s")
        ceiling = {"decode_tok_s": roof, "decode_efficiency": (d / roof) if d else None,
                   "device": ((summary.get("ceilings") or {}).get("device") or {}).get("id"),
                   "source": "probe ceilings (bandwidth roof, batch 1)", **roof_facts(summary.get("ceilings"))}
    return {"index": setting.index, "params": dict(setting.params), "label": setting.label(), "status": "ok",
            "run_id": info.id, "reason": None, "resumed": resumed, "metrics": metrics, "samples": samples,
            "metrics_ci": {k: to_ci(iv) for k, iv in ivs.items()},
            "intervals": {k: iv.to_json() for k, iv in ivs.items()},
            "unstable": unstable_metrics(summary),
            "ceiling": ceiling, "ceiling_ratio": None, "bytes_ratio": None, "vs_baseline": None,
            "summary": summary}


def _failed_row(setting: Setting, reason: str, *, run_id: str | None = None, log_path: Any = None,
                tail: Sequence[str] = ()) -> dict[str, Any]:
    return {"index": setting.index, "params": dict(setting.params), "label": setting.label(), "status": "failed",
            "run_id": run_id, "reason": reason, "resumed": False, "metrics": None, "samples": {}, "metrics_ci": None,
            "intervals": None, "unstable": [], "ceiling": None, "ceiling_ratio": None, "bytes_ratio": None,
            "vs_baseline": None,
            "summary": None, "log_path": str(log_path) if log_path else None, "log_tail": list(tail)}


def pareto(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of the ok settings no other ok setting beats on all of TTFT p50, ITL p99 (lower)
    and throughput (higher) at once."""
    pts = []
    for r in rows:
        m = r.get("metrics") or {}
        if r.get("status") == "ok" and all(m.get(k) is not None for k in ("ttft_p50_s", "itl_p99_s", "throughput_tok_s")):
            pts.append((r["index"], m["ttft_p50_s"], m["itl_p99_s"], -m["throughput_tok_s"]))
    front = []
    for p in pts:
        dominated = any(all(q[i] <= p[i] for i in (1, 2, 3)) and any(q[i] < p[i] for i in (1, 2, 3)) for q in pts if q is not p)
        if not dominated:
            front.append(p[0])
    return front


def _prediction_lines(rows: list[dict[str, Any]], prediction: dict[str, Any], sentence: Callable[..., Any]) -> list[str]:
    """One line per setting with plan's ratios; one line when plan predicted nothing at all (none when
    the baseline failed: the finding already says there is nothing to compare with)."""
    if prediction.get("reason"):
        base_ok = bool(rows) and rows[0].get("status") == "ok"
        return [f"no plan prediction: {prediction['reason']}"] if base_ok and len(rows) > 1 else []
    return [x for x in map(sentence, rows) if x]


def run_tune(spec: TuneSpec, *, say: Callable[[str], None] | None = None, startup_timeout_s: float = 120.0,
             on_row: Callable[[dict[str, Any]], None] | None = None,
             slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Run (or continue) the tune ``spec``; the result ``tune --json`` prints (docs/commands/tune.md).
    A spec made with ``--synthetic`` (``spec.synthetic``) runs on that synthetic model, resumed or not."""
    from phasescope.engine.synth import active, synthesize
    from phasescope.lifecycle import use_synthetic

    syn = spec.synthetic
    if syn and spec.serve is None and active() is None:
        res = synthesize(str(syn.get("shape")), str(syn.get("quant") or "q8_0"), vocab=syn.get("vocab"), say=say)
        with use_synthetic(res):
            return _run_tune(spec, say=say, startup_timeout_s=startup_timeout_s, on_row=on_row, slo=slo)
    return _run_tune(spec, say=say, startup_timeout_s=startup_timeout_s, on_row=on_row, slo=slo)


def _run_tune(spec: TuneSpec, *, say: Callable[[str], None] | None = None, startup_timeout_s: float = 120.0,
              on_row: Callable[[dict[str, Any]], None] | None = None,
              slo: dict[str, float] | None = None) -> dict[str, Any]:
    from phasescope.lifecycle import run_output, run_tags
    from phasescope.store import open_store
    from phasescope.tuning import launch
    from phasescope.tuning.table import finding, recommend, with_ratios

    tell = say or (lambda _m: None)
    if spec.workload not in WORKLOADS:
        raise InputError(f"--workload {spec.workload!r}: choose one of {', '.join(WORKLOADS)}")
    from phasescope.theory.inputs import check_ceiling_inputs

    # the probe workload's ceiling inputs: refused before the first server starts, not after its probe
    check_ceiling_inputs(spec.workload_args.get("model_spec"), spec.workload_args.get("device"))
    settings = spec.settings()
    tid = tune_id(spec)
    store = open_store(None)
    done = stored_settings(store, tid)
    finished, todo = plan_resume(settings, done)
    if finished:
        tell(f"tune {tid}: {len(finished)} of {len(settings)} settings already in the store; continuing with "
             f"{todo[0].label() if todo else 'none'}")
    logs = store.dir / "logs" / tid
    from phasescope.tuning.spec import masked_template, register_template_secrets

    register_template_secrets(spec.serve)  # the template's own key: masked in everything printed or written
    params = {"tune_id": tid, "spec": spec.stored_dict(), "settings": [s.params for s in settings]}
    rows: dict[int, dict[str, Any]] = {}
    with run_output("tune", None, params, store=True, say=tell) as out:
        t0 = time.monotonic()
        for s in settings:
            n = f"setting {s.index + 1}/{len(settings)} ({s.label()})"
            if s.key in done:
                row = _row(s, done[s.key], store, resumed=True)
                if row["metrics"]["n_ok"] > 0:  # a stored run with no successful request is measured again
                    rows[s.index] = row
                    tell(f"{n}: reusing run {done[s.key].id}")
                    if on_row:
                        on_row(row)
                    continue
            tell(f"{n}: starting the server")
            run_id = None
            try:
                cm = (launch.from_template(spec.serve, s.params, logs=logs, startup_timeout_s=startup_timeout_s, say=tell)
                      if spec.serve else launch.embedded(s.params, say=tell, startup_timeout_s=startup_timeout_s))
                with cm as srv:
                    tell(f"{n}: server ready at {srv.url} in {srv.startup_s:.1f} s; running {spec.workload}")
                    tags = {"id": tid, "index": s.index, "setting": dict(s.params), "key": setting_key(s.params)}
                    with run_tags(tune=tags):
                        run_id, status = _run_workload(spec, srv.url, tell, _server_flags(srv.command, srv.env))
                if run_id is None:
                    rows[s.index] = _failed_row(s, "the run was not stored (run store unavailable)")
                elif status != "complete":
                    rows[s.index] = _failed_row(s, f"the {spec.workload} run ended {status}", run_id=run_id,
                                                log_path=srv.log_path)
                else:
                    row = _row(s, store.get(run_id), store, resumed=False)
                    row["log_path"] = str(srv.log_path) if srv.log_path else None
                    if row["metrics"]["n_ok"] == 0:
                        row = _failed_row(s, f"no {spec.workload} request succeeded", run_id=run_id,
                                          log_path=srv.log_path)
                    rows[s.index] = row
            except launch.SettingFailed as exc:
                tell(f"{n}: failed: {exc.reason}")
                rows[s.index] = _failed_row(s, exc.reason, run_id=run_id, log_path=exc.log_path, tail=exc.tail)
            except PhasescopeError as exc:  # the workload gave up on this server (refused, no success...)
                if isinstance(exc, InputError):  # bad input fails every setting alike: say it once
                    raise
                tell(f"{n}: failed: {exc}")
                rows[s.index] = _failed_row(s, f"the {spec.workload} run failed: {exc}", run_id=run_id)
            if on_row:
                on_row(rows[s.index])
        ordered = [rows[s.index] for s in settings]
        with_ratios(ordered)
        from phasescope.tuning.predict import predict_rows, prediction_sentence

        a = {**DEFAULT_WORKLOAD_ARGS[spec.workload], **spec.workload_args}
        prediction = predict_rows(ordered, spec.workload, a, embedded=spec.serve is None, say=tell)
        result = {
            "tune_id": tid, "run_id": out.store_id, "workload": spec.workload,
            "mode": "one-at-a-time" if spec.one_at_a_time else "grid",
            "serve": masked_template(spec.serve), "baseline": dict(settings[0].params),
            "settings": ordered, "pareto": pareto(ordered), "slo": dict(slo or {}),
            "recommended": recommend(ordered, slo), "finding": finding(ordered) + _prediction_lines(ordered, prediction, prediction_sentence),
            "prediction": prediction,
            "n_ok": sum(r["status"] == "ok" for r in ordered), "n_failed": sum(r["status"] != "ok" for r in ordered),
            "elapsed_s": time.monotonic() - t0,
        }
        for r in ordered:
            r.pop("samples", None)
        out.finish(result, status="complete")
    return result
