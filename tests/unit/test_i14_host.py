"""Host contention (issue 14): the judgement from synthetic /proc samples, and the /proc parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasescope.measure import host as H
from phasescope.measure.host import BUSY_SHARE, CpuStat, Sample, judge, window


def _s(t: float, busy: int, idle: int, steal: int = 0, procs: dict[int, tuple[str, int, int]] | None = None) -> Sample:
    return Sample(t, CpuStat(busy=busy, idle=idle, steal=steal), procs or {})


# 2 cores, 10 s, 100 ticks/s → 2000 ticks of capacity
def _pair(client: int, server: int, other: int, steal: int = 0, hog_ticks: int = 0) -> tuple[Sample, Sample]:
    busy = client + server + other
    a = _s(0.0, 1000, 5000, 10, {1: ("python", 0, 100), 2: ("llama-server", 1, 50), 3: ("hog", 0, 0)})
    b = _s(10.0, 1000 + busy, 5000 + (2000 - busy - steal), 10 + steal,
           {1: ("python", 0, 100 + client), 2: ("llama-server", 1, 50 + server), 3: ("hog", 0, hog_ticks)})
    return a, b


def _host(w: H.Window) -> dict:
    return {"available": True, "cores": 2, "during": w.to_dict(), "peak_other_cpu_share": w.other_cpu_share}


def test_own_cpu_is_not_contention() -> None:
    # the client and the server keep both cores busy: that is the measurement, not contention
    a, b = _pair(client=600, server=1400, other=0)
    w = window(a, b, cores=2, client={1}, server={2})
    assert w.machine_busy_share == pytest.approx(1.0)
    assert w.other_cpu_share == pytest.approx(0.0)
    assert judge(_host(w)) == []


def test_other_work_above_threshold_is_host_busy() -> None:
    a, b = _pair(client=300, server=700, other=900, hog_ticks=900)
    w = window(a, b, cores=2, client={1}, server={2})
    assert w.other_cpu_share == pytest.approx(0.45)
    assert w.top_other[0]["comm"] == "hog"
    ws = judge(_host(w))
    assert [x.kind for x in ws] == ["host_busy"]
    assert "45 %" in ws[0].message and "25 %" in ws[0].message  # the share and the stated threshold
    assert ws[0].evidence["threshold"] == BUSY_SHARE and ws[0].fix


def test_steal_counts_as_contention() -> None:
    a, b = _pair(client=300, server=300, other=0, steal=700)
    w = window(a, b, cores=2, client={1}, server={2})
    assert w.steal_share == pytest.approx(0.35)
    assert [x.kind for x in judge(_host(w))] == ["host_busy"]


@pytest.mark.parametrize("other", range(0, 2001, 50))
def test_judgement_is_exactly_the_threshold(other: int) -> None:
    # over a grid of other-work shares: host_busy iff the share exceeds the stated threshold
    a, b = _pair(client=0, server=0, other=other)
    w = window(a, b, cores=2, client={1}, server={2})
    assert w.other_cpu_share == pytest.approx(other / 2000)
    assert ("host_busy" in {x.kind for x in judge(_host(w))}) == (other / 2000 > BUSY_SHARE)


def test_unknown_server_counts_everything_else_as_other() -> None:
    a, b = _pair(client=200, server=800, other=0)
    w = window(a, b, cores=2, client={1}, server=None)  # remote server: its CPU is not on this machine
    assert w.server_cpu_share is None and w.other_cpu_share == pytest.approx(0.4)


def test_unavailable_host_judges_nothing() -> None:
    assert judge({"available": False}) == [] and judge(None) == []


def test_parsers_read_odd_comm_and_stat(tmp_path: Path) -> None:
    comm, ppid, ticks = H.parse_proc_stat("42 (my (odd) prog) S 7 42 42 0 -1 4194560 1 0 0 0 123 45 0 0 20 0 1 0 9 0 0")
    assert (comm, ppid, ticks) == ("my (odd) prog", 7, 168)
    st = H.parse_stat("cpu  10 2 3 100 5 1 1 7 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n")
    assert (st.busy, st.idle, st.steal) == (17, 105, 7)


def test_sampler_on_a_synthetic_proc_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"

    def write(busy: int, idle: int, hog: int) -> None:
        (proc / "net").mkdir(parents=True, exist_ok=True)
        (proc / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n")
        (proc / "loadavg").write_text("3.50 2.00 1.00 3/100 999\n")
        for pid, comm, ppid, t in ((10, "client", 1, 5), (20, "hog", 1, hog)):
            (proc / str(pid)).mkdir(exist_ok=True)
            (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) R {ppid} 0 0 0 0 0 0 0 0 0 {t} 0 0 0\n")

    write(0, 0, 0)
    ticks = iter(range(1000))
    s = H.HostSampler(None, proc=str(proc), client_pid=10, before_s=0, interval_s=3600,
                      clock=lambda: float(next(ticks)))
    s.cores = 2
    s.start()
    write(160, 40, 150)  # 200 ticks of capacity, hog took 150 of them
    host = s.stop()
    assert host["available"] and host["during"]["other_cpu_share"] == pytest.approx(0.8)
    assert host["loadavg_1m_start"] == 3.5
    assert host["during"]["top_other"][0]["comm"] == "hog"
    assert [w.kind for w in judge(host)] == ["host_busy"]


def test_embedded_engine_as_client_child_is_counted_once() -> None:
    # the embedded llama-server (pid 2) is a child of the client (pid 1): its CPU is the server's, once
    a, b = _pair(client=300, server=1000, other=0)
    w = window(a, b, cores=2, client={1, 2}, server={2})
    assert w.client_cpu_share == pytest.approx(0.15) and w.server_cpu_share == pytest.approx(0.5)
    assert w.other_cpu_share == pytest.approx(0.0)
    a, b = _pair(client=300, server=1000, other=600)
    assert window(a, b, cores=2, client={1, 2}, server={2}).other_cpu_share == pytest.approx(0.3)


def test_busiest_names_only_processes_that_used_cpu_and_says_when_most_is_unnamed() -> None:
    # the hog exited before the end sample (busy loops that stop mid-run): its share cannot be named, and
    # "busiest: python (0 %), ..." would point the user at processes that did nothing
    ws = judge({"available": True, "cores": 2, "peak_other_cpu_share": 0.51,
                "during": {"cores": 2, "other_cpu_share": 0.51,
                           "top_other": [{"pid": 7, "comm": "kdamond.0", "cpu_share": 0.003},
                                         {"pid": 8, "comm": "python", "cpu_share": 0.001}]}})
    msg = ws[0].message
    assert "(0 %)" not in msg and "kdamond.0" not in msg, msg
    assert "ended" in msg and "busiest" not in msg, msg  # the user learns why no process is named
    named = judge({"available": True, "cores": 2,
                   "during": {"cores": 2, "other_cpu_share": 0.45,
                              "top_other": [{"pid": 3, "comm": "hog", "cpu_share": 0.44},
                                            {"pid": 9, "comm": "idle", "cpu_share": 0.002}]}})[0].message
    assert "hog (44 %)" in named and "idle" not in named and "ended" not in named, named
