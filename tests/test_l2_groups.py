"""The H100's L2 contention groups (measurements/l2_slice_map.py): the simulator's map file is
the recorded one, the records say what the spec's values and measurements/README.md say, the
engine charges a group per (warp, line) request, and a bad map or map name is one clear error."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_group_map, load_spec, parse_spec
from kernels_ir.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"
RECORD = json.loads((H100 / "l2_slice_map.json").read_text())
MERGE = json.loads((H100 / "l2_slice_merge.json").read_text())
NPZ = np.load(H100 / "l2_slice_map.npz")


def _median(r):
    return statistics.median(r["cycles_per_load_per_sm"])


def test_the_map_file_is_the_recorded_groups():
    table = np.asarray(load_group_map(load_spec("h100").l2_group_map))
    assert np.array_equal(table, NPZ["groups"].astype(np.int64))
    assert load_spec("h200").l2_group_map == "h200_l2_groups.json"   # test_l2_groups_h200
    assert load_spec("v100").l2_group_map == "" and load_spec("v100").l2_group_request_cycles == 0
    sizes = np.bincount(table)
    assert len(sizes) == RECORD["groups"] == 40 and sizes.tolist() == RECORD["group_sizes"]
    assert 816 <= sizes.min() and sizes.max() <= 832


def test_the_map_has_the_structure_the_readme_states():
    """Every aligned 1 KiB in 2 groups, 4 KiB in 8, 16 KiB in 20, 32 KiB in all 40."""
    table = np.asarray(load_group_map("h100_l2_groups.json"))
    for lines, groups in ((8, 2), (32, 8), (128, 20), (256, 40)):
        per = {len(set(table[i:i + lines].tolist())) for i in range(0, table.size, lines)}
        assert per == {groups}, lines


def test_the_check_pairs_contend_exactly_when_the_map_says_so():
    """The recorded check pairs (cycles a load) lie on the side of the threshold that the map
    predicts, and the two levels are far apart (no pair between 400 and 600 cycles)."""
    g = NPZ["groups"]
    pairs, cyc = NPZ["check_pairs"], NPZ["check_cycles"]
    same = g[pairs[:, 0]] == g[pairs[:, 1]]
    assert same.sum() >= 1000 and (~same).sum() >= 1000
    assert np.array_equal(cyc > RECORD["threshold"], same)
    assert not ((cyc > 400) & (cyc < 600)).any()
    assert RECORD["check"]["wrong"] == 0 and MERGE["map_check"]["wrong"] == 0


def test_the_cost_follows_the_busiest_group():
    """Hammered sets: the same busiest-group count costs the same whatever the stride, and more
    lines in the busiest group cost more."""
    by: dict = {}
    for r in RECORD["hammer"].values():
        by.setdefault(r["max_per_group"], []).append(_median(r))
    counts = sorted(by)
    for k in counts:
        assert max(by[k]) < 1.12 * min(by[k]), k
    means = [np.mean(by[k]) for k in counts]
    assert means == sorted(means) and counts[0] == 1 and counts[-1] == 32


def test_the_group_rate_is_the_median_of_the_one_group_runs():
    """l2_group_request_cycles = the median over the seven one-group runs of the two records of
    4 x cycles a load / (132 SMs x warps x 4 loads x 32 requests)."""
    rates = [4 * _median(RECORD["hammer"][n]) / (132 * 4 * 4 * 32)
             for n in ("groups1_a", "groups1_b")]
    rates += [4 * _median(r) / (132 * r["warps"] * 4 * 32)
              for n, r in MERGE["runs"].items() if n.startswith("one")]
    assert len(rates) == 7
    assert load_spec("h100").l2_group_request_cycles == pytest.approx(statistics.median(rates),
                                                                      abs=0.005)
    # one SM's warps on one line are not merged: 32 lines a warp cost no more than 32 shared
    runs = {n: _median(r) for n, r in MERGE["runs"].items()}
    assert runs["one_own_w4"] <= runs["one_shared_w4"]


@pytest.mark.slow
def test_the_simulated_hammer_values_are_todays():
    from measurements.l2_slice_map import simulated_hammer

    r = RECORD["hammer"]["stride32"]
    assert simulated_hammer(load_spec("h100"), r["lines"]) == pytest.approx(
        r["simulated_cycles_per_load_per_sm"], rel=1e-9)


def test_the_engine_charges_a_group_per_line_request():
    """Lockstep loads of 32 lines of one group cost the simulator far more than 32 lines in 32
    groups, and nothing of it without the groups."""
    import dataclasses

    from measurements.l2_slice_map import simulated_hammer

    spec = load_spec("h100")
    table = np.asarray(load_group_map(spec.l2_group_map))
    one = np.flatnonzero(table == 0)[:32]
    spread = [int(np.flatnonzero(table == g)[0]) for g in range(32)]
    hot, cool = simulated_hammer(spec, one), simulated_hammer(spec, spread)
    assert hot > 10 * cool
    free = dataclasses.replace(spec, l2_group_request_cycles=0.0)
    assert simulated_hammer(free, one) < 0.2 * hot


def _h100_doc():
    import tomllib

    from gpusim.specs import spec_path

    return tomllib.loads(spec_path("h100").read_text())


@pytest.mark.parametrize("value", ["nope_l2_groups.json", "error_bands.json", "../h100.toml", 3])
def test_a_bad_map_name_is_one_clear_error(value):
    doc = _h100_doc()
    doc["params"]["l2_group_map"]["value"] = value
    with pytest.raises(SpecError, match=r"l2_group_map = .*accepted: \"\" or the name of a "
                                        r"\*_l2_groups\.json file in gpusim/specs/ "
                                        r"\(h100_l2_groups\.json, h200_l2_groups\.json\)"):
        parse_spec(doc, "x.toml")


def test_a_malformed_map_file_is_one_clear_error(tmp_path, monkeypatch):
    import gpusim.specs as specs

    monkeypatch.setattr(specs, "SPEC_DIR", tmp_path)
    specs.load_group_map.cache_clear()
    try:
        (tmp_path / "bad_l2_groups.json").write_text("{not json")
        with pytest.raises(SpecError, match="unreadable"):
            specs.load_group_map("bad_l2_groups.json")
        (tmp_path / "odd_l2_groups.json").write_text(json.dumps({"groups": 2, "map": [0, 1, 0]}))
        with pytest.raises(SpecError, match="power-of-two number of lines"):
            specs.load_group_map("odd_l2_groups.json")
        (tmp_path / "big_l2_groups.json").write_text(json.dumps({"groups": 2, "map": [0, 5]}))
        with pytest.raises(SpecError, match=r"in 0\.\.1"):
            specs.load_group_map("big_l2_groups.json")
    finally:
        specs.load_group_map.cache_clear()


def test_how_many_sms_ask_for_a_line_does_not_change_the_rate():
    """l2_slice_split.json: the CTAs split over m sets of one group's lines; the cost per request
    stays within 0.4-0.6 cycles for every m (no queue per line: more lines do not make it
    cheaper), as measurements/README.md says."""
    rec = json.loads((H100 / "l2_slice_split.json").read_text())
    assert "provenance" in rec and rec["map_check"]["wrong"] == 0
    rate = {n: 4 * _median(r) / (132 * r["warps"] * 4 * 32) for n, r in rec["runs"].items()}
    assert len(rate) == 9 and all(0.4 < x < 0.6 for x in rate.values())
    assert rate["one_split24_w4"] >= rate["one_split1_w4"]
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    w4 = " / ".join(f"{_median(rec['runs'][f'one_split{m}_w4']):.0f}"
                    for m in (1, 2, 4, 8, 16, 24))
    assert w4 in text


def test_busy_groups_do_not_slow_each_other():
    """l2_slice_group_pairs.json: every pair of the 40 groups measured, the 1st-99th percentile
    of their costs within 7% of the median (no pair of groups shares a server)."""
    rec = json.loads((H100 / "l2_slice_group_pairs.json").read_text())
    assert "provenance" in rec and rec["map_check"]["wrong"] == 0
    runs = rec["runs"]
    assert sorted(map(tuple, runs["pairs"])) == [(a, b) for a in range(40)
                                                for b in range(a + 1, 40)]
    cyc = np.asarray(runs["cycles_per_load_per_sm"])
    lo, med, hi = np.percentile(cyc, [1, 50, 99])
    assert 0.93 * med < lo and hi < 1.07 * med
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    assert f"cost {lo:.0f}-{hi:.0f} cycles a load" in text and f"median {med:.0f}" in text


def test_a_warp_load_over_more_groups_costs_more_at_the_same_load():
    """l2_slice_queues.json: 16 groups, each serving 1024 one-sector requests a round at every q
    (checked here with the map), each warp load spanning q of them. On the GPU q = 16 costs
    13-15% more than q = 1 in both draws of groups; the simulator's groups are plain
    throughputs, so its cost stays flat within 1% (a fork-join loss it does not model);
    measurements/README.md quotes the medians."""
    from collections import Counter

    from measurements.l2_slice_map import QUEUE_CTAS

    rec = json.loads((H100 / "l2_slice_queues.json").read_text())
    assert "provenance" in rec and rec["map_check"]["wrong"] == 0
    groups = NPZ["groups"]
    runs = rec["runs"]
    for r in runs.values():
        load = Counter()
        for c in range(QUEUE_CTAS):
            for line in r["sets"][c % len(r["sets"])]:
                load[int(groups[line])] += 4                  # 4 warps share the set
        assert set(load.values()) == {1024} and len(load) == 16
        assert all(len({int(groups[x]) for x in s}) == r["q"] for s in r["sets"])
    for d in "ab":
        q1, q16 = _median(runs[f"q1_{d}"]), _median(runs[f"q16_{d}"])
        assert 1.12 < q16 / q1 < 1.16, d
    sim = [r["simulated_cycles_per_load_per_sm"] for r in runs.values()]
    assert max(sim) < 1.01 * min(sim)
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    for d in "ab":
        quoted = " / ".join(f"{_median(runs[f'q{q}_{d}']):.0f}" for q in (1, 2, 4, 8, 16))
        assert quoted in text, quoted


def test_the_cost_of_spreading_a_warp_load_does_not_grow_with_the_load():
    """l2_slice_queues_levels.json (the repeat): per request 0.57-0.60 cycles at q = 1 and
    0.65-0.67 at q = 16, at 512, 1024 and 2048 requests a group a round alike; the simulator
    flat in q at each load; measurements/README.md quotes the medians."""
    rec = json.loads((H100 / "l2_slice_queues_levels.json").read_text())
    assert "provenance" in rec and rec["map_check"]["wrong"] == 0
    runs = rec["runs"]
    for r in runs.values():
        rate = _median(r) / r["requests_per_group"]
        assert (0.57 < rate < 0.60) if r["q"] == 1 else True
        assert (0.65 < rate < 0.67) if r["q"] == 16 else True
    assert {r["requests_per_group"] for r in runs.values()} == {512, 1024, 2048}
    for w in ("", "_w2", "_w8"):
        sim = [runs[f"q{q}_{d}{w}"]["simulated_cycles_per_load_per_sm"] for q in (1, 16)
               for d in "ab"]
        assert max(sim) < 1.04 * min(sim)
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    for d in "ab":
        quoted = " / ".join(f"{_median(runs[f'q{q}_{d}']):.0f}" for q in (1, 2, 4, 8, 16))
        assert quoted in text, quoted
    for w in ("_w2", "_w8"):
        quoted = " / ".join(f"{_median(runs[f'q{q}_a{w}']):.0f}" for q in (1, 16))
        assert quoted in text, quoted


def test_the_group_rule_is_fingerprinted(tmp_path):
    """``gpusim.specs.rules.group_request_cost`` prices every group request in the engine and
    the model: its file is one of the fingerprinted MODEL_SOURCES, so changing its code changes
    the fingerprint (and puts the draws judged with it in sample)."""
    import shutil

    from gpusim.measurements import model_fingerprint

    root = Path(__file__).resolve().parents[1]
    copy = tmp_path / "repo"
    for rel in ("gpusim", "models", "kernels_ir"):
        shutil.copytree(root / rel, copy / rel, ignore=shutil.ignore_patterns("__pycache__"))
    before = model_fingerprint(copy, gpu="h200")
    rules = copy / "gpusim" / "specs" / "rules.py"
    rules.write_text(rules.read_text().replace("1.0 + f * span * np.log2",
                                                         "1.0 + 2 * f * span * np.log2"))
    assert model_fingerprint(copy, gpu="h200") != before
