"""`ceiling --tp N` / `kv --tp N` (alias `--gpus N`) through the real entry point (issue #13): a 70B model on
H100s can be answered without `kv --gpu-mem-gb 160`, and no tensor-parallel number beats N × bandwidth."""

from __future__ import annotations

import json

import pytest

from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")
from phasescope.theory import roofline as R
from phasescope.theory.models import load_model_spec




def test_ceiling_tp4_70b_on_h100_is_at_most_95_tok_s_and_fits(capsys, monkeypatch) -> None:
    code, out, _ = run(["ceiling", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--tp", "4", "--json"], capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    assert doc["tp"] == 4
    (row,) = doc["devices"]
    w = load_model_spec("llama-3.3-70b")
    t_bw = R.weight_bytes_read(w, None, 1) / (4 * 3350e9)  # 139 GB read per token (embedding table not read)
    # 2·80 ring all-reduces of 8192 × 1 × 2 B over 450 GB/s one way (NVLink 4 900 bidirectional), α = 1 µs/step
    t_ar = 160 * (2 * 3 * 1e-6 + 2 * 3 / 4 * 8192 * 2 / 450e9)
    assert row["decode_ceiling_tok_s"] <= 95.0
    assert row["decode_ceiling_tok_s"] == pytest.approx(1 / (t_bw + t_ar), rel=1e-9)
    assert row["allreduce_s_per_token"] == pytest.approx(t_ar, rel=1e-9)
    assert row["fits_in_memory"] is True and row["tp"] == 4
    assert row["mem_bandwidth_gb_s"] == 4 * 3350
    assert row["weight_bytes_per_device"] == pytest.approx(row["weight_bytes"] / 4)
    # one H100 cannot hold it
    code, out, _ = run(["ceiling", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--json"], capsys, monkeypatch)
    assert json.loads(out)["devices"][0]["fits_in_memory"] is False


def test_ceiling_gpus_is_an_alias_and_the_table_says_tp(capsys, monkeypatch) -> None:
    code, a, _ = run(["ceiling", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--gpus", "2", "--json"], capsys, monkeypatch)
    code2, b, _ = run(["ceiling", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--tp", "2", "--json"], capsys, monkeypatch)
    assert code == code2 == 0 and json.loads(a) == json.loads(b)
    code, out, _ = run(["ceiling", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--tp", "4"], capsys, monkeypatch)
    assert code == 0 and "4× h100-sxm" in out and "all-reduce" in out


def test_kv_tp2_doubles_one_device_pool_minus_half_the_weights(capsys, monkeypatch) -> None:
    code, out, _ = run(["kv", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--tp", "2", "--context", "8000", "--json"],
                       capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    w = R.weight_bytes_total(load_model_spec("llama-3.3-70b"))
    pool = doc["pool"]
    assert doc["tp"] == 2
    assert pool["pool_bytes"] == pytest.approx(2 * (80e9 * 0.9 - w / 2))
    assert pool["pool_bytes_per_device"] == pytest.approx(80e9 * 0.9 - w / 2)
    assert pool["fits"] is True
    kv_tok = doc["kv_bytes_per_token"]  # 8 KV heads split over 2 ranks: no replication
    assert doc["pool_tokens"] == int((80e9 * 0.9 - w / 2) // (kv_tok / 2))
    # one device: the weights do not fit
    code, out, _ = run(["kv", "-m", "llama-3.3-70b", "-d", "h100-sxm", "--context", "8000", "--json"], capsys, monkeypatch)
    assert json.loads(out)["pool"]["fits"] is False


def test_kv_tp_beyond_kv_heads_replicates(capsys, monkeypatch) -> None:
    """gemma-3-270m has one KV head: on 4 ranks every rank holds every token's KV."""
    code, out, _ = run(["kv", "-m", "gemma-3-270m", "--gpu-mem-gb", "16", "--gpus", "4", "--context", "1000", "--json"],
                       capsys, monkeypatch)
    assert code == 0
    doc = json.loads(out)
    per_dev = doc["pool"]["pool_bytes_per_device"]
    assert doc["pool_tokens"] == int(per_dev // doc["kv_bytes_per_token"])
    assert any("replicated" in n for n in doc["notes"])


@pytest.mark.parametrize("argv", [
    ["ceiling", "-m", "llama-3.1-8b", "--tp", "0"],
    ["kv", "-m", "llama-3.1-8b", "-d", "h100", "--tp", "-1"],
])
def test_bad_tp_is_one_line(argv, capsys, monkeypatch) -> None:
    code, out, err = run(argv, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err
    assert "--tp" in err and len(err.strip().splitlines()) <= 2
