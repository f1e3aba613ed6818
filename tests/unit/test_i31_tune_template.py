"""Issue 31: ``tune --serve`` templates split before they are filled; their secrets never stored."""

from __future__ import annotations

import pytest

from phasescope.tuning.launch import render, shown
from phasescope.tuning.spec import (TuneSpec, has_masked_secret, masked_template, template_api_key,
                                  template_secrets)

HOSTILE = ["1 --die", "1; touch F", "x' --y 'z", '"', "a b c", "$(touch F)", "1 sh -c 'touch F' x", "{port}",
           "--api-key", "\\", "\n--new-line", "x=1 --die"]


@pytest.mark.parametrize("value", HOSTILE)
def test_no_param_value_changes_the_argument_count_or_the_program(value: str) -> None:
    tpl = "vllm serve M --port {port} --max-num-batched-tokens {x} --tag=v{x}"
    argv, env = render(tpl, {"x": "8"}, 9000)
    hostile, env2 = render(tpl, {"x": value}, 9000)
    assert len(hostile) == len(argv) and hostile[0] == "vllm" and env2 == env == {}
    assert hostile[6] == value and hostile[7] == f"--tag=v{value}"


@pytest.mark.parametrize("value", HOSTILE)
def test_an_environment_placeholder_is_a_value_never_a_program(value: str) -> None:
    argv, env = render("OLLAMA_NUM_PARALLEL={n} ollama serve --port {port}", {"n": value}, 9000)
    assert argv == ["ollama", "serve", "--port", "9000"] and env == {"OLLAMA_NUM_PARALLEL": value}


def test_the_template_secrets_are_masked_whatever_their_length() -> None:
    tpl = ("HF_TOKEN=hf1 MAX_TOKENS=4 vllm serve M --port {port} --api-key 1234 --hf-token=abc "
           "--max-num-batched-tokens {x} --password 'p w'")
    assert template_secrets(tpl) == ["hf1", "1234", "abc", "p w"]
    m = masked_template(tpl)
    assert all(s not in m for s in ("hf1", "1234", "abc", "p w")) and "MAX_TOKENS=4" in m and "{x}" in m
    assert has_masked_secret(m) and not has_masked_secret(tpl)
    assert template_api_key(tpl) == "1234"
    spec = TuneSpec(params=[("x", ["8"])], serve=tpl)
    assert "1234" not in str(spec.stored_dict()) and spec.to_dict()["serve"] == tpl
    argv, env = render(tpl, {"x": "8"}, 1)
    a2, e2 = shown(argv, env)
    assert "1234" not in a2 and e2["HF_TOKEN"] == "***" and e2["MAX_TOKENS"] == "4" and argv[6] == "1234"


def test_a_template_without_secrets_is_stored_as_given() -> None:
    tpl = "llama-server -m m.gguf --port {port} -ub {ub} --max-tokens 5"
    assert masked_template(tpl) == tpl and template_secrets(tpl) == [] and template_api_key(tpl) is None
