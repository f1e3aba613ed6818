"""Issue 31, through the real CLI: a ``probe -p`` value is all sizes (then the probe goes on and finds
nothing listening on port 9: exit 3) or one exit-2 line. Moved from tests/unit/test_i31_bounded_input.py
(the valid cases open a socket)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import isolated_home, run  # noqa: F401 - the autouse fixture: no saved device is read


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet="0123456789,_ e.-", min_size=1, max_size=14))
def test_any_prompt_size_flag_is_refused_with_exit_2_unless_every_item_is_a_size(
        text: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real CLI: an -p value is either all sizes (then probe goes on to the server:
    nothing listens on port 9, exit 3) or one exit-2 line — never a size that reaches the server."""
    import re

    items = re.split(r"\s*,\s*|\s+", text.strip())
    valid = all(i.replace("_", "").isdigit() and 1 <= int(i.replace("_", "")) <= 10_000_000 for i in items)
    code, _, err = run(["probe", "http://127.0.0.1:9", "--connect-timeout", "0.5", "-p", text], capsys, monkeypatch)
    assert code == (3 if valid else 2), (text, code, err)
    assert "phasescope bug" not in err
