"""Issue 31: one bounded reader for every user file, shape checks once, flags checked before work.

Each case is a hostile input the red-team pass found reaching the bug handler, hanging or being
accepted; each must now be one :class:`~phasescope.errors.InputError` line (exit 2) naming the file
and the limit. The property tests (hypothesis) throw arbitrary bytes and JSON at the reader and
arbitrary text at the flag parsers: the only exception that may come out is ``InputError``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasescope.errors import InputError
from phasescope.safeio import (MAX_INT_DIGITS, Refused, iter_user_jsonl, loads_bounded, read_user_json,
                               user_file)
from phasescope.theory.models.hf_config import spec_from_config, spec_from_config_file

from cli_helpers import isolated_home, run  # noqa: F401 - the autouse fixture: no saved device is read

BASE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
        "intermediate_size": 128}


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


# --- the bounded reader --------------------------------------------------------------------------
@pytest.mark.parametrize("body, words", [
    ('{"num_hidden_layers": 1' + "0" * 5000 + "}", "5,001 digits"),
    ('{"hidden_size": Infinity}', "Infinity"),
    ('{"hidden_size": NaN}', "NaN"),
    ('{"hidden_size": -Infinity}', "Infinity"),
    ('{"hidden_size": 1e999}', "out of range"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
])
def test_hostile_json_is_one_line_naming_the_file_and_the_limit(tmp_path: Path, body: str, words: str) -> None:
    p = write(tmp_path, "config.json", body)
    with pytest.raises(InputError) as ei:
        read_user_json(p, what="config file", expect=None)
    assert words in str(ei.value) and str(p) in str(ei.value)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    result: list[BaseException | None] = []

    def read() -> None:
        try:
            read_user_json(fifo, what="config file")
            result.append(None)
        except BaseException as exc:  # noqa: BLE001 - what came out is the assertion
            result.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # the old reader blocks in open() until a writer comes: unblock it and fail
        with open(fifo, "w"):
            pass
        t.join(5)
        pytest.fail("reading a FIFO blocked")
    assert isinstance(result[0], InputError) and "FIFO" in str(result[0])


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(dev: str) -> None:
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    with pytest.raises(InputError, match="device"):
        user_file(dev, "dataset file")


def test_jsonl_lines_are_bounded_too(tmp_path: Path) -> None:
    p = write(tmp_path, "d.jsonl", '{"a": 1}\n{"n": ' + "9" * 5000 + "}\n")
    with pytest.raises(InputError, match=r"d\.jsonl:2: an integer of 5,000 digits"):
        list(iter_user_jsonl(p, what="dataset file"))


def test_integers_of_twenty_digits_and_finite_floats_still_parse() -> None:
    assert loads_bounded('{"h": 18446744073709551615, "x": 1.5e300, "n": -12}') == {
        "h": 18446744073709551615, "x": 1.5e300, "n": -12}


# --- shapes, checked once for every command ------------------------------------------------------
@pytest.mark.parametrize("experts_key", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_moe_with_more_experts_per_token_than_experts_is_refused_under_every_spelling(experts_key: str) -> None:
    with pytest.raises(InputError, match="experts ≥ experts per token"):
        spec_from_config({**BASE, experts_key: 2, "num_experts_per_tok": 8})


@pytest.mark.parametrize("key", ["n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank",
                                 "n_shared_experts"])
def test_negative_shape_fields_are_refused(key: str) -> None:
    cfg = {**BASE, "num_local_experts": 4, "num_experts_per_tok": 2, key: -4}
    with pytest.raises(InputError, match=key):
        spec_from_config(cfg)


def test_a_valid_moe_config_still_builds() -> None:
    spec = spec_from_config({**BASE, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert spec.is_moe and spec.n_experts == 8 and spec.n_experts_per_tok == 2


@pytest.mark.parametrize("command", [["ceiling"], ["kv"], ["plan", "--device", "h100-sxm", "--rate", "1"]])
def test_ceiling_kv_and_plan_refuse_the_same_bad_moe_config(command: list[str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, "config.json", json.dumps({**BASE, "num_experts": 2, "num_experts_per_tok": 8}))
    flag = "--model" if command[0] == "plan" else "--config"
    code, _, err = run([*command, flag, str(p)], capsys, monkeypatch)
    assert code == 2, err
    assert "experts ≥ experts per token" in err and "phasescope bug" not in err


def test_huge_and_infinite_config_values_exit_2_not_the_bug_handler(tmp_path: Path) -> None:
    big = write(tmp_path, "big.json", json.dumps(BASE)[:-1] + ', "max_position_embeddings": 1' + "0" * 4400 + "}")
    inf = write(tmp_path, "inf.json", json.dumps(BASE).replace('"hidden_size": 64', '"hidden_size": Infinity'))
    for p in (big, inf):
        with pytest.raises(InputError):
            spec_from_config_file(p)
    with pytest.raises(InputError, match="must be a non-negative"):
        spec_from_config({**BASE, "hidden_size": 1e300})


# --- traces ----------------------------------------------------------------------------------------
def test_far_future_trace_timestamps_are_refused(tmp_path: Path) -> None:
    from phasescope.load.schedule import read_trace
    from phasescope.load.traces import read_mooncake

    moon = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 10}\n{"timestamp": 1e300, "input_length": 10}\n')
    with pytest.raises(InputError, match="span"):
        read_mooncake(moon)
    tr = write(tmp_path, "t.jsonl", '{"offset_s": 0}\n{"offset_s": 1e300}\n')
    with pytest.raises(InputError, match="span"):
        read_trace(tr)


def test_mooncake_huge_hash_ids_and_burstgpt_invalid_utf8_are_refused(tmp_path: Path) -> None:
    from phasescope.load.traces import read_burstgpt, read_mooncake

    moon = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 10, "hash_ids": [' + "7" * 30 + "]}\n")
    with pytest.raises(InputError):
        read_mooncake(moon)
    csv = write(tmp_path, "b.csv", b"Timestamp,Model,Request tokens,Response tokens\n1,\xff\xfe,10,5\n")
    with pytest.raises(InputError, match="UTF-8"):
        read_burstgpt(csv)


# --- flags -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["200,,300", "1e14", "10000001", "100000000000000", "0", "-3", "2.5", ","])
def test_bad_prompt_sizes_are_refused_before_anything_is_built(value: str) -> None:
    from phasescope.cli.validate import parse_token_list

    with pytest.raises(InputError, match="--prompt-tokens"):
        parse_token_list([value])


def test_prompt_sizes_still_parse() -> None:
    from phasescope.cli.validate import parse_token_list

    assert parse_token_list(["200,2000", "300 400", "1_000"]) == [200, 2000, 300, 400, 1000]


@pytest.mark.parametrize("args", [["probe", "http://127.0.0.1:9", "-p", "200,,300"],
                                  ["probe", "http://127.0.0.1:9", "-p", "10000001"],
                                  ["tune", "--serve", "x {n}", "--param", "n=1,2", "-p", "1e14"]])
def test_probe_and_tune_refuse_bad_prompt_sizes_with_exit_2(args: list[str], capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(args, capsys, monkeypatch)
    assert code == 2 and "--prompt-tokens" in err, err


def test_plan_sweep_nan_and_runs_limit_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(["plan", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--sweep",
                        "max_num_batched_tokens=nan"], capsys, monkeypatch)
    assert code == 2 and "nan" in err and "phasescope bug" not in err, err
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "store"))
    code, _, err = run(["runs", "--limit", "0"], capsys, monkeypatch)
    assert code == 0, err


def test_hw_size_beyond_memory_is_refused(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(["hw", "--size-mb", "1048576"], capsys, monkeypatch)
    assert code == 2 and "memory" in err, err


# --- properties ------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_any_bytes_are_json_or_one_input_error(data: bytes) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        fh.write(data)
    try:
        try:
            read_user_json(fh.name, what="config file", expect=None)
        except InputError as exc:
            assert "\n" not in str(exc) or "line" in str(exc)
        try:
            list(iter_user_jsonl(fh.name, what="dataset file"))
        except InputError:
            pass
    finally:
        os.unlink(fh.name)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=60))
def test_any_json_parses_within_limits_or_is_refused(value: object, digits: int) -> None:
    text = json.dumps(value, allow_nan=True)
    try:
        out = loads_bounded(text)
    except Refused as exc:
        assert ("finite" in exc.reason or "digits" in exc.reason or "nested" in exc.reason), exc.reason
        return
    assert json.dumps(out) == text  # within the limits, nothing is changed
    big = "1" * (digits + 1)
    if digits + 1 > MAX_INT_DIGITS:
        with pytest.raises(Refused):
            loads_bounded(big)
    else:
        assert loads_bounded(big) == int(big)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
                                        "num_key_value_heads", "head_dim", "intermediate_size", "num_local_experts",
                                        "num_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
                                        "moe_intermediate_size", "kv_lora_rank", "sliding_window",
                                        "max_position_embeddings", "decoder_sparse_step", "first_k_dense_replace"]),
                       st.integers(min_value=-5, max_value=2**40) | st.floats(allow_nan=True, allow_infinity=True)
                       | st.text(max_size=3) | st.none(), max_size=18))
def test_any_config_is_a_spec_or_one_input_error(cfg: dict) -> None:
    try:
        spec = spec_from_config({**BASE, **cfg})
    except InputError:
        return
    if spec.n_experts or spec.n_experts_per_tok:
        assert 1 <= spec.n_experts_per_tok <= spec.n_experts
    for v in (spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads, spec.vocab_size):
        assert v is not None and v >= 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789,_ e.-x", max_size=20))
def test_any_prompt_size_text_is_sizes_in_range_or_one_input_error(text: str) -> None:
    from phasescope.cli.validate import MAX_TOKENS, parse_token_list

    try:
        sizes = parse_token_list([text])
    except InputError:
        return
    assert sizes and all(1 <= n <= MAX_TOKENS for n in sizes)
