"""``tune``: the prefill chunk ``ub`` is the step's token budget, the long prompts' TTFT of a mixed
workload, and the decode roofs from the served files' own tensor bytes (which roof binds)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from phasescope.measure.records import Event, RequestRecord
from phasescope.tuning import launch
from phasescope.tuning.spec import TuneSpec, parse_param, tune_id
from phasescope.tuning import table as T
from phasescope.tuning.table import finding, row_metrics, with_ratios

MS = 1_000_000


# --- ub: the chunk the decoding streams wait for ---------------------------------------------------------
def test_ub_alone_sets_the_logical_batch_too():
    # llama-server feeds at most -b tokens per step; -ub under the default -b 2048 chunks nothing
    ex = launch.engine_kwargs({"ub": "32"})["extra_args"]
    assert ex[ex.index("--ubatch-size") + 1] == "32" and ex[ex.index("--batch-size") + 1] == "32"
    ex = launch.engine_kwargs({"ub": "32", "b": "256"})["extra_args"]  # an explicit b wins
    assert ex.count("--batch-size") == 1 and ex[ex.index("--batch-size") + 1] == "256"


def test_an_embedded_ub_tune_does_not_reuse_runs_measured_under_b_2048():
    def old_id(spec):  # the id before ub set -b
        text = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
        return "tune-" + hashlib.sha256(text.encode()).hexdigest()[:10]

    ub = TuneSpec(params=[("ub", ["32", "512"])], workload_args={"repeat": 3})
    assert tune_id(ub) != old_id(ub)
    for same in (TuneSpec(params=[("ub", ["32"]), ("b", ["512"])]), TuneSpec(params=[("quant", ["Q8_0"])]),
                 TuneSpec(params=[("ub", ["32"])], serve="x --port {port} {ub}")):
        assert tune_id(same) == old_id(same)  # other tunes keep their ids


def test_prompt_cache_and_checkpoint_knobs():
    assert parse_param("cram=0", engine=True) == ("cache-ram", ["0"])
    assert parse_param("ctx-checkpoints=0,8", engine=True) == ("ctx-checkpoints", ["0", "8"])
    ex = launch.engine_kwargs({"cache-ram": "0", "ctx-checkpoints": "0"})["extra_args"]
    assert ex == ["--cache-ram", "0", "--ctx-checkpoints", "0"]


# --- a mixed workload: the long prompts' TTFT and the longest pause --------------------------------------
def rec(prompt: int, ttft_ms: float, gaps_ms: list[float]) -> RequestRecord:
    r = RequestRecord(id=f"r{prompt}-{ttft_ms}", api="openai", target="t", t_start_ns=0, prompt_tokens=prompt,
                      prompt_tokens_source="usage", output_tokens=1 + len(gaps_ms), output_tokens_source="usage", ok=True)
    t = int(ttft_ms * MS)
    r.events.append(Event(t, "content", 1))
    for g in gaps_ms:
        t += int(g * MS)
        r.events.append(Event(t, "content", 1))
    r.t_done_ns = t + MS
    return r


def _mixed(long_ttft_ms: list[float], pause_ms: float) -> list[RequestRecord]:
    streams = [rec(15, 50, [20.0] * 30 + [pause_ms] + [20.0] * 30) for _ in range(2)]
    return streams + [rec(1800, t, []) for t in long_ttft_ms]


def _row(i, label, records):
    m, s = row_metrics(records)
    return {"index": i, "label": label, "status": "ok", "metrics": m, "samples": s}


def test_long_prompts_ttft_is_its_own_metric_and_the_finding_speaks_of_it():
    small = _row(0, "ub=32", _mixed([7000, 7100, 7200], pause_ms=300))
    large = _row(1, "ub=512", _mixed([3300, 3400, 3500], pause_ms=2000))
    assert small["metrics"]["ttft_long_p50_s"] == pytest.approx(7.1) and small["metrics"]["n_long"] == 3
    assert small["metrics"]["itl_max_s"] == pytest.approx(0.3)
    rows = [small, large]
    with_ratios(rows)
    assert large["vs_baseline"]["ttft_long_p50_s"] == pytest.approx(3.4 / 7.1)
    (line,) = finding(rows)
    # the chunking trade-off, both halves: the larger chunk's long prompts start sooner, its pauses are longer
    assert "lowered TTFT of the long prompts 0.48× (7.10 s → 3.40 s)" in line
    assert "raised longest pause 6.67× (300 ms → 2.00 s)" in line


def test_one_length_has_no_long_prompts():
    m, _ = row_metrics([rec(128, 100, [20.0] * 5), rec(120, 90, [20.0] * 5)])
    assert m["ttft_long_p50_s"] is None and m["n_long"] == 0
    rows = [_row(0, "a=1", [rec(128, 100, [20.0] * 5)] * 2), _row(1, "a=2", [rec(128, 90, [20.0] * 5)] * 2)]
    with_ratios(rows)
    assert "long prompts" not in finding(rows)[0]


def test_the_table_shows_the_long_prompts_column_only_for_a_mixed_workload():
    from rich.console import Console

    from phasescope.tuning.render import render

    def text(rows):
        with_ratios(rows)
        res = {"tune_id": "tune-0", "workload": "bench", "mode": "grid", "settings": rows, "finding": finding(rows)}
        c = Console(width=120, record=True)
        c.print(render(res))
        return c.export_text()

    mixed = text([_row(0, "ub=32", _mixed([7000, 7100], 300)), _row(1, "ub=512", _mixed([3300, 3400], 2000))])
    assert any(ln.rstrip().endswith("long") for ln in mixed.splitlines()[:6])  # its column's header
    assert "TTFT long: TTFT p50 of the long prompts" in mixed
    plain = text([_row(0, "a=1", [rec(128, 100, [20.0] * 5)] * 2), _row(1, "a=2", [rec(128, 90, [20.0] * 5)] * 2)])
    assert "TTFT long" not in plain


# --- the roofs from the served files' tensor bytes ---------------------------------------------------------
def _gguf(path: Path, emb_q8: bool) -> None:
    """A tiny tied llama GGUF: its layers Q8_0, its token embedding (= the output layer) Q8_0 or F16."""
    import gguf
    from gguf import GGMLQuantizationType as T

    d, ff, V, L = 64, 128, 512, 2
    w = gguf.GGUFWriter(str(path), "llama")
    for f, v in ((w.add_block_count, L), (w.add_embedding_length, d), (w.add_feed_forward_length, ff),
                 (w.add_head_count, 4), (w.add_head_count_kv, 2), (w.add_key_length, 16), (w.add_context_length, 2048)):
        f(v)
    w.add_token_list([f"t{i}" for i in range(V)])

    def add(name, shape, q8):
        arr = np.ones(shape, dtype=np.float32)
        if q8:
            w.add_tensor(name, gguf.quants.quantize(arr, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(name, arr.astype(np.float16))

    add("token_embd.weight", (V, d), emb_q8)
    for i in range(L):
        for n, shape in (("attn_q", (64, d)), ("attn_k", (32, d)), ("attn_v", (32, d)), ("attn_output", (d, 64)),
                         ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)), ("ffn_down", (d, ff))):
            add(f"blk.{i}.{n}.weight", shape, True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _ceilings(path: Path) -> dict:
    return {"model_spec": {"source": f"GGUF header of {path}"}, "device": {"id": "l40s"},
            "sizes": [{"prompt_tokens": 0, "decode_ceiling_tok_s": 1.0}]}


def test_roof_facts_read_the_served_files_tensor_bytes(tmp_path):
    from phasescope.theory import devices as Dv

    q8, f16 = tmp_path / "q8.gguf", tmp_path / "f16.gguf"
    _gguf(q8, True)
    _gguf(f16, False)
    a, b = T.roof_facts(_ceilings(q8)), T.roof_facts(_ceilings(f16))
    emb = 512 * 64
    assert a["output_layer"] == {"type": "Q8_0", "bytes": emb // 32 * 34, "tied": True}
    assert b["output_layer"] == {"type": "F16", "bytes": emb * 2, "tied": True}
    # the same layers, only the output layer's type differs: the step bytes differ by exactly its bytes
    assert b["step_bytes"] - a["step_bytes"] == pytest.approx(emb * 2 - emb // 32 * 34)
    bw = Dv.get_device("l40s").mem_bandwidth_bytes_s
    assert a["bandwidth_tok_s"] == pytest.approx(bw / a["step_bytes"])
    assert a["binding"] in ("bandwidth", "compute") and a["compute_tok_s"] > 0
    assert T.roof_facts({"model_spec": {"source": "catalog"}, "device": {"id": "l40s"}, "sizes": [{}]}) == {}
    assert T.roof_facts(_ceilings(tmp_path / "gone.gguf")) == {}


def _roof_row(i, label, decode, roof_bw, step_bytes, spread=0.01):
    return {"index": i, "label": label, "status": "ok",
            "metrics": {"decode_tok_s": decode, "ttft_p50_s": 0.2, "itl_p99_s": 0.02},
            "samples": {"decode_tok_s": [decode * (1 - spread), decode, decode * (1 + spread)]},
            "ceiling": {"decode_tok_s": roof_bw, "bandwidth_tok_s": roof_bw, "compute_tok_s": 1200.0,
                        "binding": "bandwidth", "step_bytes": step_bytes,
                        "output_layer": {"type": "Q8_0", "bytes": 178e6, "tied": True}}}


def test_the_bytes_are_the_files_and_the_roofs_line_says_which_roof_binds():
    # measured here (docs/commands/tune.md): Q8_0 287 MB at 57.8 tok/s, Q4_0 237 MB at 72.6, Q4_0-pure 153 MB at 121
    rows = [_roof_row(0, "quant=Q8_0", 57.8, 216.0, 287e6), _roof_row(1, "quant=Q4_0", 72.6, 261.0, 237e6),
            _roof_row(2, "quant=Q4_0-pure", 120.9, 404.0, 153e6)]
    with_ratios(rows)
    assert rows[2]["bytes_ratio"] == pytest.approx(153 / 287)
    lines = finding(rows)
    assert "bytes read per token 287 MB → 153 MB (0.53× from the files' tensors, not the types' nominal bits)" in lines[1]
    roofs = lines[-1]
    assert roofs.startswith("roofs (decode, batch 1): the bandwidth roof is the lower one (bandwidth 216 tok/s, compute 1200")
    # 17–19 GB/s attained while the bytes differ 1.9×: decode follows the bytes, far under the device's 62 GB/s
    assert "attaining 17–18 GB/s" in roofs and "of the device's 62 GB/s" in roofs
    assert "so decode follows the bytes read per token: bandwidth-bound" in roofs
    assert "the tied output layer alone is 178 MB (Q8_0)" in roofs
    # Q4_K_M 249 MB at 60, Q8_0 287 MB at 63.4, F16 539 MB at 45.7: 15–25 GB/s — the kernels bind as much as the bytes
    kern = [_roof_row(0, "quant=Q4_K_M", 60.0, 249.0, 249e6), _roof_row(1, "quant=Q8_0", 63.4, 216.0, 287e6),
            _roof_row(2, "quant=F16", 45.7, 115.0, 539e6)]
    with_ratios(kern)
    assert "each type's kernel (its dequantization work) binds as much as its bytes" in finding(kern)[-1]
    # one file, or files of about the same bytes: only the share of the roof, and no verdict it cannot back
    assert "close to the roof: bandwidth-bound" in T.roof_sentence([_roof_row(0, "a", 200.0, 249.0, 249e6)])
    assert "do not tell whether" in T.roof_sentence([_roof_row(0, "a", 60.0, 249.0, 249e6), _roof_row(1, "b", 63.0, 216.0, 287e6)])


@given(st.lists(st.tuples(st.floats(1.0, 500.0), st.floats(1e7, 1e10)), min_size=1, max_size=5),
       st.sampled_from([0.0, 0.01, 0.05, 0.2]))
@hsettings(max_examples=200, deadline=None)
def test_the_roofs_line_claims_a_binding_roof_only_when_the_intervals_back_it(pts, spread):
    # (decode tok/s, step bytes) per setting on a 62 GB/s device, three repeats spread ±spread each
    rows = [_roof_row(i, f"s={i}", d, 62e9 / b, b, spread) for i, (d, b) in enumerate(pts)]
    line = T.roof_sentence(rows)
    ivs = [T.row_intervals(r["metrics"], r["samples"])["decode_tok_s"] for r in rows]
    lo_gbs = [iv.low * b / 1e9 for iv, (_, b) in zip(ivs, pts)]
    hi_gbs = [iv.high * b / 1e9 for iv, (_, b) in zip(ivs, pts)]
    steps = [b for _, b in pts]
    claims = "bandwidth-bound" in line and "do not tell" not in line and "cannot tell" not in line
    backed = ((max(steps) / min(steps) >= T.BYTES_SPREAD and max(hi_gbs) / min(lo_gbs) <= T.ATTAINED_SPREAD)
              or (max(steps) / min(steps) < T.BYTES_SPREAD and min(lo_gbs) / 62 >= T.BW_BOUND))
    assert claims == backed
    if "binds as much as its bytes" in line:  # the kernels-bind claim: the GB/s differ beyond their intervals
        assert max(lo_gbs) / min(hi_gbs) > T.ATTAINED_SPREAD


def test_a_pure_quant_type_is_its_own_setting_and_file(monkeypatch, tmp_path):
    from phasescope.tuning import predict

    assert parse_param("quant=q4_0-pure,Q4_0", engine=True) == ("quant", ["Q4_0-pure", "Q4_0"])
    assert predict.plan_knobs({"quant": "Q4_0-pure"}) == ({"quant": "q4_0"}, [])
    calls = []
    bundled = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    monkeypatch.setattr("phasescope.engine.model.ensure_bundled_model", lambda: bundled)
    monkeypatch.setattr("phasescope.engine.quantize.quant_dir", lambda: tmp_path / "quant")

    def fake_quantize(qtype, *, allow_requantize=False, pure=False, **_kw):
        calls.append((qtype, pure))
        return type("R", (), {"path": tmp_path / f"{qtype}{'-pure' if pure else ''}.gguf"})()

    monkeypatch.setattr("phasescope.engine.quantize.quantize", fake_quantize)
    assert launch._model_for("Q4_0-pure", lambda _m: None)[0].endswith("Q4_0-pure.gguf")
    assert launch._model_for("Q4_K_M-pure", lambda _m: None)[0].endswith("Q4_K_M-pure.gguf")  # not the bundled file
    assert launch._model_for("Q4_K_M", lambda _m: None) == (None, None)
    assert calls == [("Q4_0", True), ("Q4_K_M", True)]
