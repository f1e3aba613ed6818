"""The embedded llama-server with n-gram speculation (``--spec-type ngram-mod``, no draft model): llama.cpp's
own ``timings.draft_n`` / ``draft_n_accepted`` are the truth. A repetitive prompt makes it draft; probe then
reports acceptance and tokens per step from those counts, and never calls decode above a ceiling the
speculation explains. No duration is asserted: the draft counts are the server's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from phasescope.apis import get_client, new_session
from phasescope.apis.base import GenRequest, Target
from phasescope.measure import derive as D
from phasescope.measure.records import read_records

pytestmark = pytest.mark.engine

REPETITIVE = " ".join(["one two three four five six seven eight nine ten."] * 12)


def test_ngram_speculation_drafts_and_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from phasescope.engine import running_engine
    from phasescope.probing import probe
    from phasescope.theory.devices import custom_device, save_local_device

    with running_engine(parallel=1, ctx_size=4096, spec="ngram") as eng:
        assert "--spec-type" in eng.args and "ngram-mod" in eng.args

        async def go():  # type: ignore[no-untyped-def]
            t = Target(eng.url, api="openai", model=eng.model_alias, engine="llamacpp")
            async with new_session() as s:
                return await get_client("openai").send(s, t, GenRequest(prompt=REPETITIVE, max_tokens=32))

        r = asyncio.run(go())
    assert r.ok, r.error_message
    raw = (r.server or {})["raw"]
    assert raw["draft_n"] > 0 and 0 <= raw["draft_n_accepted"] <= raw["draft_n"]  # llama.cpp's own counts
    sd = D.spec_decode(r)
    assert sd is not None and sd["source"] == "llamacpp_timings"
    assert (sd["drafted"], sd["accepted"]) == (raw["draft_n"], raw["draft_n_accepted"])
    assert sd["tokens_per_step"] == pytest.approx((r.server["predicted_n"] - 1) / sd["steps"])  # type: ignore[index]

    # probe on the embedded engine with --engine-spec: whatever llama.cpp drafted is what probe reports
    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    save_local_device(custom_device(10.0, name="deliberately low"))
    res = probe(None, engine_spec="ngram", sizes=[64], max_tokens=24, repeat=2, warmup=False, save=False,
                out_dir=tmp_path / "out", device="local")
    assert res["plan"]["engine_spec"] == "ngram-mod"
    recs = [x for x in read_records(tmp_path / "out" / "records.jsonl") if x.ok and not x.tags.get("warmup")]
    drafted = sum(((x.server or {}).get("raw") or {}).get("draft_n") or 0 for x in recs)
    accepted = sum(((x.server or {}).get("raw") or {}).get("draft_n_accepted") or 0 for x in recs)
    if drafted:
        assert (res["spec_decode"]["drafted"], res["spec_decode"]["accepted"]) == (drafted, accepted)
        assert res["spec_decode"]["tokens_per_step"] >= 1.0
    else:
        assert "spec_decode" not in res
    # above_ceiling only where even the per-step roof (plain roof × tokens per step) is beaten
    row = res["ceilings"]["sizes"][0]
    size = res["sizes"][0]
    tps = (size.get("spec_decode") or {}).get("tokens_per_step") or 1.0
    roof = row["decode_ceiling_tok_s"] * tps
    above = [w for w in res["warnings"] if w["kind"] == "above_ceiling"]
    if max(size.get("decode_tok_s") or 0, (size.get("server") or {}).get("decode_tok_s") or 0) <= roof:
        assert not above, above


def test_a_draft_model_on_the_embedded_engine_drafts_and_its_bytes_join_the_ceiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 33 item 2: the embedded engine speculates with a draft model (llama-server -md). The bundled model
    # drafts for itself (same vocabulary); llama.cpp's own draft counts are the truth, and probe counts the
    # draft file's bytes per drafted token in the per-step ceiling without being told its shape.
    from phasescope.engine.model import bundled_model_path
    from phasescope.probing import probe
    from phasescope.theory.devices import custom_device, save_local_device

    monkeypatch.setenv("PHASESCOPE_HOME", str(tmp_path / "cfg"))
    save_local_device(custom_device(10.0, name="deliberately low"))
    draft = str(bundled_model_path())
    res = probe(None, engine_draft_model=draft, sizes=[64], max_tokens=24, repeat=2, warmup=False, save=False,
                out_dir=tmp_path / "out", device="local")
    assert res["plan"]["engine_draft_model"] == draft
    recs = [x for x in read_records(tmp_path / "out" / "records.jsonl") if x.ok and not x.tags.get("warmup")]
    drafted = sum(((x.server or {}).get("raw") or {}).get("draft_n") or 0 for x in recs)
    accepted = sum(((x.server or {}).get("raw") or {}).get("draft_n_accepted") or 0 for x in recs)
    assert drafted > 0, [x.server for x in recs]  # a draft model drafts at every step, whatever the text
    assert (res["spec_decode"]["drafted"], res["spec_decode"]["accepted"]) == (drafted, accepted)
    assert res["ceilings"]["draft_model_spec"]["source"], res["ceilings"]  # the draft's own file, not a note
    assert "draft_note" not in res["ceilings"]
    row = res["ceilings"]["sizes"][0]
    assert row["draft_bytes_per_step"] and row["draft_bytes_per_step"] > 0, row
