import json
import math

import pytest

from phasescope.measure import warnings as mw


def test_roundtrip_and_json_safe():
    w = mw.MeasurementWarning("host_busy", "other work took 1.2 cores", {"load": 3.5, "bad": math.nan}, "stop it")
    d = w.to_dict()
    json.dumps(d, allow_nan=False)  # NaN evidence must not break strict JSON
    assert d["evidence"]["bad"] is None
    assert mw.MeasurementWarning.from_dict(d).kind == "host_busy"
    assert "fix: stop it" in w.line()


def test_unknown_kind_rejected_and_legacy_strings_coerced():
    with pytest.raises(ValueError):
        mw.MeasurementWarning("bogus", "x")
    assert mw.coerce("old style").kind == "note"
    assert mw.coerce({"kind": "not-a-kind", "message": "m"}).kind == "note"


def test_to_json_dedupes_in_order():
    a = mw.MeasurementWarning("cold_start", "a")
    out = mw.to_json([a, "s", a, {"kind": "cold_start", "message": "a"}])
    assert [o["message"] for o in out] == ["a", "s"]
    assert mw.kinds([a, "s"]) == {"cold_start", "note"}
