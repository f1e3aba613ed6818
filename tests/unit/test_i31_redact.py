"""Issue 31: redaction that never rewrites data, and server text that cannot drive the terminal."""

from __future__ import annotations

import io
import json

import pytest

from phasescope import redact as R


@pytest.fixture(autouse=True)
def _forget() -> None:
    R.forget_all()
    yield
    R.forget_all()


def test_a_word_like_key_leaves_json_keys_and_numbers_alone() -> None:
    from phasescope.jsonutil import dumps

    R.register("mean")
    R.register("1234")
    doc = {"mean_ttft_ms": 12.5, "mean": 1234, "total_input_tokens": 12345, "note": "mean 1234 meaner"}
    out = json.loads(dumps(doc))
    assert out["mean_ttft_ms"] == 12.5 and out["mean"] == 1234 and out["total_input_tokens"] == 12345
    assert out["note"] == "mean 1234 meaner"  # weak keys are not masked in free text


def test_weak_keys_are_masked_as_whole_tokens_where_a_key_can_appear() -> None:
    R.register("1234")
    assert R.redact_field("Incorrect API key provided: 1234.") == "Incorrect API key provided: ***."
    assert R.redact_field("request 12345 failed") == "request 12345 failed"
    assert R.redact_field("Authorization: Bearer 1234") == "Authorization: Bearer ***"


def test_strong_keys_are_whole_tokens_in_free_text_and_substrings_in_fields() -> None:
    key = "sk-abc123def456"
    assert not R.register(key)
    assert R.redact(f"key {key}, again:{key}.") == "key ***, again:***."
    assert R.redact(f"x{key}y") == f"x{key}y"  # free text: only whole tokens
    assert R.redact_field(f"model-x{key}y") == "model-x***y"  # a server's name: wherever it is


def test_a_model_id_holding_the_key_is_masked_whole_in_free_text() -> None:
    key = "sk-abc123def456"
    R.register(key)
    mid = f"llama{key}q4"
    R.register_tainted(mid)
    assert R.redact(f"model {mid} served") == "model *** served"
    assert mid not in R.redact(json.dumps({"model": mid}))


def test_weak_key_warning_is_one_line() -> None:
    assert R.weak_key_warning("sk-abc123def456") is None
    w = R.weak_key_warning("1234")
    assert w and "\n" not in w and "1234" not in w and "too short" in w
    assert R.weak_key_warning("ab") and "cannot mask" in R.weak_key_warning("ab")


def test_printable_drops_escapes_and_controls() -> None:
    hostile = "m\x1b]0;pwned\x07odel\x1b[2J\x1b[31mX\x08\x00\x9b6n"
    assert R.printable(hostile) == "modelX6n"
    assert R.printable("a\nb\tc", one_line=True) == "a b c"


def test_console_guard_keeps_richs_colours_and_drops_foreign_sequences() -> None:
    buf = io.StringIO()
    g = R._RedactingStream(buf)
    g.write("\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A\x1b[?25l ok\x1b]0;title\x07\x1b[2J\x07\n")
    assert buf.getvalue() == "\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A\x1b[?25l ok\n"


def test_print_json_through_the_guard_never_rewrites_a_key_equal_to_a_secret(monkeypatch) -> None:
    from phasescope.cli._common import print_json

    key = "mean_ttft_ms"  # a strong key that equals a JSON key
    R.register(key)
    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", R._RedactingStream(buf))
    print_json({"mean_ttft_ms": 3.0, "echo": key})
    out = json.loads(buf.getvalue())
    assert out == {"mean_ttft_ms": 3.0, "echo": "***"}


def test_record_json_masks_a_key_inside_the_model_id_without_touching_numbers() -> None:
    from phasescope.measure.records import RequestRecord

    R.register("1234")
    R.register("sk-abc123def456")
    rec = RequestRecord(id="r1", api="openai", target="http://h", model="m-sk-abc123def456", prompt_tokens=1234,
                        output_tokens=12345, error_message="bad key 1234")
    d = json.loads(rec.to_json())
    assert d["prompt_tokens"] == 1234 and d["output_tokens"] == 12345
    assert d["model"] == "m-***" and d["error_message"] == "bad key ***"


def test_store_scrub_masks_weak_keys_only_as_whole_tokens() -> None:
    from phasescope.store.scrub import scrub, scrub_name

    out = scrub({"metric": "mean_ttft_ms", "echo": "mean", "n": 1234}, ("mean",))
    assert out == {"metric": "mean_ttft_ms", "echo": "***", "n": 1234}
    R.register("sk-abc123def456")
    assert scrub_name("x-sk-abc123def456\x1b[2J") == "x-***"
