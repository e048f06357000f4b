"""measurements/l2_check.py: every benchmark of its default set has a recorded GPU value, a spec
override is applied (and a bad one refused naming it), and the table's ratio is simulator / GPU."""

from __future__ import annotations

import json

import pytest

from measurements import l2_check as lc


def test_every_default_benchmark_has_a_record():
    gpu = lc.measured()
    assert set(lc.DEFAULT) <= set(gpu)
    assert all(v and all(x > 0 for x in v) for v in gpu.values())


def test_bad_overrides_are_refused_naming_them():
    for item in ("l2_bytes_per_cycle_per_slice", "no_such_field=3", "name=3",
                 "l2_bytes_per_cycle_per_slice=fast"):
        with pytest.raises(SystemExit, match="--set"):
            lc._parse_set([item])
    assert lc._parse_set(["l2_bytes_per_cycle_per_slice=48"]) == {
        "l2_bytes_per_cycle_per_slice": 48}


def test_table_with_an_override(tmp_path, capsys):
    out = tmp_path / "t.json"
    # 500, not 400: the round trip moves in steps of the waiting CTA's re-polls, and with the
    # loop edges 400 cycles happens to need one fewer re-poll than the spec's value (654.7 ->
    # 653.7 ns; 766.1 at 500)
    assert lc.main(["--only", "flag_round_trip", "--set", "l2_hit_latency_cycles=500",
                    "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    r = rows["rows"][0]
    assert rows["overrides"] == {"l2_hit_latency_cycles": 500}
    assert r["ratio"] == pytest.approx(r["sim"] / (sum(r["gpu"]) / len(r["gpu"])))
    base = lc.simulated(lc._spec({}), "flag_round_trip")
    assert r["sim"] > base            # a longer L2 round trip makes the round trip longer
    assert "flag_round_trip" in capsys.readouterr().out
