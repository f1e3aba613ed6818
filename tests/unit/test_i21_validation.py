"""Issue 21: bad flag values, malformed URLs and bad user files get one `phasescope: error:` line
and exit 2 — before any connection — never a traceback, never the last-resort guard."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from cli_helpers import run as cli

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port: a check that runs late gives exit 3
PLAN = ["plan", "--model", "llama-3.1-8b", "--device", "l40s", "--no-save"]


def _files(tmp: Path) -> dict[str, Path]:
    f = {}
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    f["deep"] = tmp / "deep.json"
    base = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "intermediate_size": 4000, "vocab_size": 32000}
    (tmp / "heads.json").write_text(json.dumps(base | {"hidden_size": 1000, "num_attention_heads": 7}))
    f["heads"] = tmp / "heads.json"
    (tmp / "kvheads.json").write_text(json.dumps(base | {"hidden_size": 1024, "num_attention_heads": 8,
                                                          "num_key_value_heads": 16}))
    f["kvheads"] = tmp / "kvheads.json"
    key = b"tokenizer.ggml.tokens"  # a string array whose length runs past the end of the file
    (tmp / "trunc.gguf").write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(key)) + key
                                     + struct.pack("<IIQQ", 9, 8, 2_000_000, 3) + b"abc\x05")
    f["gguf"] = tmp / "trunc.gguf"
    (tmp / "latin1.json").write_bytes(b'{"hidden_size": "\xe9"}')
    f["latin1"] = tmp / "latin1.json"
    (tmp / "list.json").write_text("[1, 2]")
    f["list"] = tmp / "list.json"
    (tmp / "a_file").write_text("x")
    f["file"] = tmp / "a_file"
    return f


CASES: list[tuple[str, list[str], str]] = [
    ("url port out of range", ["probe", "http://127.0.0.1:99999"], "Port out of range"),
    ("url unclosed ipv6", ["probe", "http://[::1"], "malformed URL"),
    ("bench --target bad port", ["bench", DEAD, "--target", "http://127.0.0.1:0"], "port"),
    ("trace shape without --trace", ["bench", DEAD, "--load-shape", "trace"], "--trace"),
    ("negative seed", ["bench", DEAD, "--seed", "-1"], "--seed"),
    ("zero output len", ["bench", DEAD, "--output-len", "0"], "--output-len"),
    ("rate with sweep", ["bench", DEAD, "--sweep", "--request-rate", "5"], "--request-rate"),
    ("ramp flags without ramp", ["bench", DEAD, "--ramp-start-rate", "1"], "--ramp-start-rate"),
    ("steps without sweep", ["bench", DEAD, "--sweep-steps", "3"], "--sweep-steps"),
    ("nan ttft timeout", ["probe", DEAD, "--ttft-timeout", "nan"], "--ttft-timeout"),
    ("zero connect timeout", ["probe", DEAD, "--connect-timeout", "0"], "--connect-timeout"),
    ("inf itl timeout", ["bench", DEAD, "--itl-timeout", "inf"], "--itl-timeout"),
    ("zero metrics interval", ["bench", DEAD, "--metrics-interval", "0"], "--metrics-interval"),
    ("nan duration", ["bench", DEAD, "--duration", "nan"], "--duration"),
    ("nan watch interval", ["watch", DEAD, "--interval", "nan"], "--interval"),
    ("nan budget", ["explain", DEAD, "--budget", "nans"], "--budget"),
    ("inf budget", ["experiment", "queue", DEAD, "--budget", "infm"], "--budget"),
    ("bw-eff zero", [*PLAN, "--bw-eff", "0"], "--bw-eff"),
    ("bw-eff nan", [*PLAN, "--bw-eff", "nan"], "--bw-eff"),
    ("flops-eff above 1", [*PLAN, "--flops-eff", "2"], "--flops-eff"),
    ("plan nan rate", [*PLAN, "--rate", "nan"], "--rate"),
    ("plan huge input", [*PLAN, "--input-len", "1000000000000"], "--input-len"),
    ("devices bogus kind", ["devices", "--kind", "bogus"], "unknown --kind"),
    ("serve unbalanced quote", ["serve", "--server-args", 'unbalanced "quote'], "--server-args"),
    ("serve zero parallel", ["serve", "--parallel", "0"], "--parallel"),
    ("serve negative ctx", ["serve", "--ctx-size", "-5"], "--ctx-size"),
    ("serve port out of range", ["serve", "--port", "70000"], "--port"),
    ("bad --api", ["probe", DEAD, "--api", "grpc"], "--api"),
    ("empty model", ["probe", DEAD, "--model", ""], "--model"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "args", "what"), CASES, ids=[c[0] for c in CASES])
def test_bad_flag_values_exit_2_with_one_line(name: str, args: list[str], what: str, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli(args, capsys, monkeypatch)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("phasescope: error: "), err
    assert what in lines[0], lines[0]
    assert "Traceback" not in err and "unexpected failure" not in err  # the guard is never reached


FILE_CASES = [
    ("config nested 100,000 deep", "deep", "nested"),
    ("heads not dividing hidden", "heads", "divisible"),
    ("more KV heads than heads", "kvheads", "num_key_value_heads"),
    ("truncated GGUF", "gguf", "truncated"),
    ("not UTF-8", "latin1", "UTF-8"),
    ("wrong top-level type", "list", "expected a JSON object"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "key", "what"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_model_files_exit_2_with_one_line(name: str, key: str, what: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    f = _files(tmp_path)
    code, out, err = cli(["kv", "--model", str(f[key])], capsys, monkeypatch)
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("phasescope: error: ") and what in lines[0], err


@pytest.mark.timeout(120)
def test_out_naming_a_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    f = _files(tmp_path)
    for cmd in (["bench", DEAD, "-n", "1"], ["probe", DEAD]):
        code, _, err = cli([*cmd, "--out", str(f["file"])], capsys, monkeypatch)
        assert code == 2 and "is a file" in err, err
    assert f["file"].read_text() == "x"  # untouched


def test_invalid_utf8_label_is_bad_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    label = b"run-\xff\xfe".decode("utf-8", "surrogateescape")  # how Python hands undecodable argv to us
    code, _, err = cli(["bench", DEAD, "--label", label], capsys, monkeypatch)
    assert code == 2 and "UTF-8" in err, err


def test_num_rule_bounds() -> None:
    from phasescope.errors import InputError
    from phasescope.cli.validate import POS_INF, SECONDS, Num

    SECONDS.check("--t", 1.0)
    POS_INF.check("--r", math.inf)
    for rule, v in ((SECONDS, 0.0), (SECONDS, math.inf), (SECONDS, math.nan), (POS_INF, -math.inf),
                    (Num(lo=1, hi=3), 4), (Num(lo=0, lo_open=True), 0)):
        with pytest.raises(InputError):
            rule.check("--x", v)


def test_user_json_reader_limits(tmp_path: Path) -> None:
    from phasescope.errors import InputError
    from phasescope.safeio import read_user_json

    f = _files(tmp_path)
    for key, what in (("deep", "nested"), ("latin1", "UTF-8"), ("list", "expected")):
        with pytest.raises(InputError, match=what):
            read_user_json(f[key], what="config")
    (tmp_path / "trunc.json").write_text('{"a": [1, 2')
    with pytest.raises(InputError, match="malformed JSON"):
        read_user_json(tmp_path / "trunc.json", what="config")
    (tmp_path / "big.json").write_text("{}" + " " * 2000)
    with pytest.raises(InputError, match="too large"):
        read_user_json(tmp_path / "big.json", what="config", max_bytes=1000)
    # strings may hold brackets without counting as nesting
    (tmp_path / "ok.json").write_text(json.dumps({"s": "[" * 5000}))
    assert read_user_json(tmp_path / "ok.json", what="config") == {"s": "[" * 5000}


def test_jsonl_lines_that_are_json_but_not_records(tmp_path: Path) -> None:
    from phasescope.errors import InputError
    from phasescope.load.schedule import read_trace

    p = tmp_path / "trace.jsonl"
    p.write_text('{"offset_s": 0}\n[1, 2]\n')
    with pytest.raises(InputError, match=":2: expected a JSON object"):
        read_trace(p)
    p.write_bytes(b'{"offset_s": 0}\n\xff\xfe\n')
    with pytest.raises(InputError, match="UTF-8"):
        read_trace(p)
    p.write_text('{"offset_s": 0}\n' + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(InputError, match="nested"):
        read_trace(p)


def test_library_refuses_zero_output_len_instead_of_sending_64() -> None:
    from phasescope.errors import InputError
    from phasescope.load.bench import BenchConfig, run_bench

    with pytest.raises(InputError, match="--output-len"):
        run_bench(BenchConfig(url=DEAD, num_prompts=1, output_len=0))
