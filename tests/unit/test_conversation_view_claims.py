"""The conversation experiment's console/card caption states the decode slowdown only where the first and last
turns' intervals support it; otherwise it says "cannot tell" with both rates (an explain on the embedded engine
with the host 55 % busy printed "decode slowdown -603.6 %" from one request per turn at 5.5 and 38.7 tok/s)."""

from __future__ import annotations

from phasescope.experiments import view


def _turn(turn: int, dec: float, ci: list[float] | None, n: int = 1) -> dict:
    return {"turn": turn, "n": n, "prompt_tokens": 100.0 * turn, "cached_tokens": 0.0, "ttft_s": 0.2,
            "decode_tok_s": dec, "decode_tok_s_ci": ci, "decode_tok_s_range": None}


def test_one_request_per_turn_gives_no_slowdown_figure() -> None:
    e = {"turns": [_turn(1, 5.5, None), _turn(2, 6.3, None), _turn(3, 38.7, None)], "history_cached": True,
         "reason": "r", "decode_slowdown_pct": 100 * (1 - 38.7 / 5.5), "predicted_slowdown_pct": 0.2}
    cap = view.conversation(e).caption
    assert "-603.6" not in cap and "cannot tell" in cap and "5.5" in cap and "38.7" in cap


def test_a_slowdown_the_intervals_support_is_stated() -> None:
    e = {"turns": [_turn(1, 50.0, [48.0, 52.0], n=4), _turn(3, 40.0, [38.0, 42.0], n=4)], "history_cached": True,
         "reason": "r", "decode_slowdown_pct": 20.0, "predicted_slowdown_pct": 3.0}
    cap = view.conversation(e).caption
    assert "decode slowdown 20.0 %" in cap and "cannot tell" not in cap.split("decode slowdown")[1]
