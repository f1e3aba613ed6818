"""An unknown ``--device`` / ``--model-spec`` is refused before any request is sent (new-user pass, bug 1).

probe used to send the warm-up and every round, then fail on the device it could not find, throwing
the measurement away and storing a partial run. Every command taking these flags checks them first:
probe, explain, experiment and tune (whose probe workload passes them on to each setting)."""

from __future__ import annotations

import pytest

from phasescope.store import open_store
from phasescope.testing import FakeServer
from cli_helpers import isolated_home, run  # noqa: F401  (isolated_home: the autouse fixture "_home")

#: a port nothing listens on: a request sent there fails with a connection error, not the input error
DEAD_URL = "http://127.0.0.1:9"

BAD = [
    (["--device", "nosuchdev", "--model-spec", "llama-3.1-8b"], "unknown device 'nosuchdev'"),
    (["--device", "h100-sxm", "--model-spec", "nosuchmodel"], "no shape for nosuchmodel: pass --model-spec"),
    (["--device", "local", "--model-spec", "llama-3.1-8b"], "no local device measured yet"),
]


def _one_clear_line(code: int, out: str, err: str, msg: str) -> None:
    assert code == 2, (code, out, err)
    assert msg in err
    assert "Traceback" not in err + out
    assert [ln for ln in err.splitlines() if ln.startswith("phasescope: error:")] == [
        next(ln for ln in err.splitlines() if msg in ln)]


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A store of this test's own: the session's scratch store holds the runs of every test before it."""
    monkeypatch.setenv("PHASESCOPE_STORE", str(tmp_path / "own-store"))


def _stored_runs() -> list:
    return list(open_store(None).list_runs())


@pytest.mark.parametrize("flags,msg", BAD)
def test_probe_refuses_a_bad_ceiling_input_before_the_first_request(flags, msg, capsys, monkeypatch) -> None:
    with FakeServer(flavor="vllm", ttft_s=0.001, itl_s=0.001).running() as srv:
        code, out, err = run(["probe", srv.url, "-p", "100,400", "-r", "1", "-n", "16", *flags], capsys, monkeypatch)
        sent = srv.requests
    _one_clear_line(code, out, err, msg)
    assert sent == 0, f"{sent} generation requests were sent before the input was refused"
    assert _stored_runs() == []


@pytest.mark.parametrize("cmd", [["probe"], ["explain", "--budget", "10s"], ["experiment", "prompt-scaling"]])
@pytest.mark.parametrize("flags,msg", BAD)
def test_the_check_comes_before_the_server_is_contacted(cmd, flags, msg, capsys, monkeypatch) -> None:
    # nothing listens on DEAD_URL: a late check would report the connection error instead
    code, out, err = run([*cmd, DEAD_URL, *flags], capsys, monkeypatch)
    _one_clear_line(code, out, err, msg)
    assert _stored_runs() == []


@pytest.mark.parametrize("flags,msg", BAD)
def test_tune_refuses_a_bad_ceiling_input_before_starting_a_server(flags, msg, capsys, monkeypatch) -> None:
    from phasescope.tuning import launch

    started = []

    def no_start(*a, **k):
        started.append(a)
        raise AssertionError("a server was started")

    monkeypatch.setattr(launch, "from_template", no_start)
    monkeypatch.setattr(launch, "embedded", no_start)
    code, out, err = run(["tune", "--param", "ub=32,512", "--serve", "srv --port {port} -ub {ub}",
                          "--workload", "probe", *flags], capsys, monkeypatch)
    _one_clear_line(code, out, err, msg)
    assert started == []
    assert _stored_runs() == []


def test_library_probe_checks_first_too() -> None:
    from phasescope.errors import UnknownDeviceError
    from phasescope.probing import probe

    with pytest.raises(UnknownDeviceError):
        probe(DEAD_URL, sizes=[10], max_tokens=4, repeat=1, device="nosuchdev", save=False)
