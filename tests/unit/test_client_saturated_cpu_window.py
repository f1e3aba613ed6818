"""``client_saturated`` on CPU share needs a window long enough to measure a share in, and an
answered request whose latencies it could skew; the loop-lag and send-lag parts are unchanged."""

from __future__ import annotations

import asyncio

from phasescope.load.health import MIN_CPU_WINDOW_S, HealthMonitor, RunnerHealth, health_warnings


def _cpu_warnings(h: RunnerHealth, **kw) -> list:  # type: ignore[no-untyped-def]
    return [w for w in health_warnings(h, **kw) if w.kind == "client_saturated" and "cpu_percent" in w.evidence]


def test_cpu_share_over_a_blink_is_no_evidence() -> None:
    short = RunnerHealth(cpu_percent=110.0, wall_s=0.01, loop_samples=1)
    assert _cpu_warnings(short, completed=0) == []
    assert _cpu_warnings(short, completed=20) == []  # 10 ms: one-off setup cost alone reads as a core
    just_under = RunnerHealth(cpu_percent=110.0, wall_s=MIN_CPU_WINDOW_S * 0.99)
    assert _cpu_warnings(just_under, completed=20) == []


def test_cpu_share_needs_an_answered_request() -> None:
    long = RunnerHealth(cpu_percent=110.0, wall_s=5 * MIN_CPU_WINDOW_S)
    assert _cpu_warnings(long, completed=0) == []  # no latency was measured, none can be skewed
    (w,) = _cpu_warnings(long, completed=20)
    assert "110%" in w.message and "--workers" in w.fix and w.evidence["wall_s"] == long.wall_s
    assert _cpu_warnings(RunnerHealth(cpu_percent=50.0, wall_s=5 * MIN_CPU_WINDOW_S), completed=20) == []


def test_loop_lag_still_fires_on_a_short_failed_run() -> None:
    h = RunnerHealth(loop_lag_ms_p50=3.0, loop_lag_ms_p99=9.0, loop_lag_ms_max=12.0, cpu_percent=110.0,
                     wall_s=0.01, loop_samples=1)
    w = health_warnings(h, completed=0)
    assert [x.kind for x in w] == ["client_saturated"] and "loop_lag_ms_p50" in w[0].evidence


def test_the_monitor_reports_the_window_it_measured_cpu_over() -> None:
    async def go() -> RunnerHealth:
        m = HealthMonitor()
        m.start()
        await asyncio.sleep(0.2)
        return await m.stop([])

    h = asyncio.run(go())
    assert h.wall_s is not None and 0.2 <= h.wall_s < 2.0


def test_merge_keeps_the_shortest_window() -> None:
    m = RunnerHealth.merge([RunnerHealth(cpu_percent=97.0, wall_s=0.05), RunnerHealth(cpu_percent=40.0, wall_s=3.0)])
    assert m.wall_s == 0.05 and m.cpu_percent == 97.0
    assert RunnerHealth.merge([RunnerHealth(cpu_percent=1.0)]).wall_s is None
