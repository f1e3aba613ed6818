"""The one-line host summary under probe/bench/explain must not read as if the host were busy when it was quiet."""

from __future__ import annotations

from phasescope.cli import _common


def _line(share: float, capsys) -> str:
    _common.print_host_line({"threshold": 0.25, "loadavg_1m_start": 1.19,
                             "during": {"other_cpu_share": share, "cores": 2}})
    return " ".join(capsys.readouterr().out.split())


def test_quiet_host_line_says_within_threshold(capsys) -> None:
    # old: "other work took 1 % of the 2 cores during the run (host_busy above 25 %)" — reads as "host busy"
    out = _line(0.01, capsys)
    assert "1 %" in out and "host_busy above" not in out, out
    assert "quiet" in out and "25 %" in out, out


def test_busy_host_line_says_above_threshold(capsys) -> None:
    out = _line(0.51, capsys)
    assert "51 %" in out and "above the 25 %" in out and "quiet" not in out, out


def test_bursty_host_line_shows_the_worst_windows_and_says_above(capsys) -> None:
    # issue 29: "quiet: other work took 23 %, within the 25 % host_busy threshold" while a burner spun 1 s on/off
    _common.print_host_line({"threshold": 0.25, "burst_threshold": 0.5, "worst_1s_other_cpu_share": 0.62,
                             "server_local": False, "during": {"other_cpu_share": 0.23, "cores": 2}})
    out = " ".join(capsys.readouterr().out.split())
    assert "23 %" in out and "62 % in its worst 1-s windows" in out, out
    assert "quiet" not in out and "above the 50 % for bursts" in out, out
    _common.print_host_line({"threshold": 0.15, "burst_threshold": 0.3, "worst_1s_other_cpu_share": 0.04,
                             "server_local": True, "during": {"other_cpu_share": 0.02, "cores": 2}})
    out = " ".join(capsys.readouterr().out.split())
    assert "quiet" in out and "15 %" in out and "30 % for bursts" in out and "this machine" in out, out
