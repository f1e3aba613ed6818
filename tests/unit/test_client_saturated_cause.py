"""``client_saturated`` blames the client only when its own CPU or loop is the cause (issue 30 item 4): a
client at 2 % of a core whose loop lagged while other work took 74 % of the host is ``host_busy``, with
host_busy's fix, not "spread the load with --workers 2". Pure functions over synthetic samples."""

from __future__ import annotations

from phasescope.load.health import RunnerHealth, health_warnings, lag_cause


def _host(other: float, *, machine: float | None = None, local: bool = False, burst: float | None = None) -> dict:
    return {"available": True, "cores": 2, "threshold": 0.15 if local else 0.25,
            "burst_threshold": 0.3 if local else 0.5, "server_local": local,
            "worst_1s_other_cpu_share": other if burst is None else burst,
            "during": {"cores": 2, "other_cpu_share": other, "machine_busy_share": machine or other,
                       "client_cpu_share": 0.01, "server_cpu_share": (machine or other) - other - 0.01,
                       "top_other": [{"pid": 9, "comm": "cc1plus", "cpu_share": other}]}}


#: the issue's case: loop lag 0.0 ms at the median and 6.8 ms at p99, the client at 2 % of a core
LAGGED_IDLE = RunnerHealth(loop_lag_ms_p50=0.0, loop_lag_ms_p99=6.8, loop_lag_ms_max=9.0, cpu_percent=2.0,
                           wall_s=30.0, loop_samples=3000)


def test_the_issue_case_is_host_busy_not_client_saturated() -> None:
    ws = health_warnings(LAGGED_IDLE, completed=40, host=_host(0.74))
    kinds = [w.kind for w in ws]
    assert "client_saturated" not in kinds, [w.line() for w in ws]
    (w,) = [w for w in ws if w.kind == "host_busy"]
    assert "--workers" not in (w.fix or "") and "quiet machine" in (w.fix or ""), w.fix
    assert "74 %" in w.message and "6.8 ms" in w.message and "2 % of a core" in w.message, w.message
    assert w.evidence["lag_cause"] == "host" and w.evidence["client_loop_lag_ms_p99"] == 6.8
    assert w.evidence["client_cpu_percent"] == 2.0 and w.evidence["other_cpu_share"] == 0.74
    assert lag_cause(LAGGED_IDLE, _host(0.74)) == "host"


def test_a_busy_client_is_still_client_saturated_even_on_a_busy_host() -> None:
    busy = RunnerHealth(loop_lag_ms_p50=2.5, loop_lag_ms_p99=9.0, loop_lag_ms_max=14.0, cpu_percent=92.0,
                        wall_s=30.0, loop_samples=3000)
    for host in (None, _host(0.02), _host(0.74)):
        ws = health_warnings(busy, completed=40, host=host)
        sat = [w for w in ws if w.kind == "client_saturated"]
        assert sat and all("--workers" in (w.fix or "") for w in sat), [w.line() for w in ws]
        assert lag_cause(busy, host) == "client"


def test_without_a_host_reading_the_client_is_blamed_as_before() -> None:
    ws = health_warnings(LAGGED_IDLE, completed=40)
    assert [w.kind for w in ws] == ["client_saturated"] and "--workers" in (ws[0].fix or "")
    assert lag_cause(LAGGED_IDLE, {"available": False}) == "client"


def test_a_quiet_host_keeps_the_lag_the_clients() -> None:
    # nothing else took the cores and they were not full: the loop itself stalled (a long callback, GC)
    ws = health_warnings(LAGGED_IDLE, completed=40, host=_host(0.03, machine=0.4, local=True))
    assert [w.kind for w in ws] == ["client_saturated"]
    assert ws[0].evidence["lag_cause"] == "client"


def test_cores_full_of_the_local_server_is_not_more_workers() -> None:
    # the embedded engine kept both cores busy; the client at 2 % waited for a core: more workers compete too
    ws = health_warnings(LAGGED_IDLE, completed=40, host=_host(0.03, machine=0.97, local=True))
    (w,) = [w for w in ws if w.kind == "client_saturated"]
    assert w.evidence["lag_cause"] == "cores_full"
    assert "--workers 2" not in (w.fix or "") and "taskset" in (w.fix or ""), w.fix
    assert "2 % of a core" in w.message and "97 %" in w.message, w.message


def test_send_lag_follows_the_same_cause() -> None:
    h = RunnerHealth(send_lag_ms_p50=3.0, send_lag_ms_p99=25.0, send_lag_ms_max=40.0, cpu_percent=3.0, wall_s=20.0)
    ws = health_warnings(h, completed=40, host=_host(0.6))
    assert "client_saturated" not in [w.kind for w in ws]
    (w,) = [w for w in ws if w.kind == "host_busy"]
    assert "25.0 ms" in w.message and w.evidence["client_send_lag_ms_p99"] == 25.0


def test_full_cores_without_a_local_server_keep_the_old_reading() -> None:
    # a remote server cannot have filled this machine's cores: nothing measured explains the lag but the client
    assert lag_cause(LAGGED_IDLE, _host(0.03, machine=0.97, local=False)) == "client"
