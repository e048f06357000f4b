"""``measurements/h200/l1_miss_pieces.json.xz`` (``measurements/l1_miss_pieces.py``): loads that
miss L1 over 1-32 lines, three word patterns, 32- and 128-bit, on an H200 with Nsight's
data-pipe wavefronts a request. The record is complete; a missed request passes the data stage
in pieces of about two lines (what the engine's ``SharedPipe.missed_units`` does); the README's
table and figures are the record's; one simulated value is today's engine's."""

from pathlib import Path

import pytest

from measurements import l1_miss_pieces as probe
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
REC = read_record(str(ROOT / "measurements" / "h200" / "l1_miss_pieces.json"))
README = " ".join((ROOT / "measurements" / "README.md").read_text().split())


def nsight(name):
    return probe.nsight_per_request(REC, name)


def test_the_record_is_complete_and_from_an_h200():
    prov = REC["provenance"]
    assert prov["gpu_name"] == "NVIDIA H200" and prov["command"].startswith(
        "python3 measurements/l1_miss_pieces.py")
    assert sorted(REC["results"]) == sorted(probe.NAMES) == sorted(REC["ncu"]["cases"])
    for name in probe.NAMES:
        r = REC["results"][name]
        assert r["status"] == "ok" and r["per_sm_cycles"] > 0, name
        assert all(len(s["t"]["raw"]) == 11 for s in r["sizes"].values() if isinstance(s, dict))
    assert sorted(REC["wavefronts"]) == sorted(probe.NAMES)
    assert sorted(REC["simulated"]["results"]) == sorted(REC["simulated_before"]["results"])


def test_a_missed_request_passes_in_pieces_of_about_two_lines():
    # 32 lanes in 32 banks (spread): one wavefront for a hit, about half the lines for a miss
    for k in (8, 16, 32):
        assert nsight(f"cmech_miss_spread_{k}_p") == pytest.approx(k / 2, rel=0.13)
    # lanes that read one bank position on k lines: k wavefronts, the hit rule, either way
    for k in probe.KS:
        assert nsight(f"cmech_miss_same_{k}_p") == pytest.approx(k, rel=0.03)
    # 128-bit misses keep their quarter-warp phases and are not return-packed
    assert nsight("cmech_miss_same_1_w4_p") == pytest.approx(4.0, abs=0.05)
    assert probe.rule_wavefronts("cmech_miss_same_1_w4_p") == 2.0
    # the random-word misses of the CSR kernel's gathers: the pieces, not the hit rule
    for name, rule in (("cmech_miss_rand_32_p", 3), ("cmech_miss_rand_32_w4_p", 10)):
        w = REC["wavefronts"][name]
        assert w["rule"] == rule and nsight(name) > 1.8 * rule
        assert w["simulated"] == pytest.approx(nsight(name), rel=0.05), name
    # the repeat of csr_mech.json.xz's cmech_miss_rand_32
    assert nsight("cmech_miss_rand_32_p") == pytest.approx(15.22, rel=0.02)


def test_the_readme_table_is_the_record():
    w = REC["wavefronts"]
    for width, label in (("", "32-bit"), ("_w4", "128-bit")):
        for pat in ("spread", "rand", "same"):
            cells = []
            for k in probe.KS:
                e = w[f"cmech_miss_{pat}_{k}{width}_p"]
                cells.append(f"{e['nsight']:.2f} / {e['rule']:.0f} / {e['simulated']:.2f}")
            head = f"{label} `{pat}`" + (": GPU / rule / simulator" if (label, pat) == (
                "32-bit", "spread") else "")
            row = f"| {head} | " + " | ".join(cells) + " |"
            assert row in README, row


def test_the_readme_cycle_figures_are_the_record():
    gpu = {n: r["per_sm_cycles"] for n, r in REC["results"].items()}
    now = {n: r["per_sm_cycles"] for n, r in REC["simulated"]["results"].items()}
    was = {n: r["per_sm_cycles"] for n, r in REC["simulated_before"]["results"].items()}

    def pct(d, n):
        return f"{100 * (d[n] / gpu[n] - 1):+.0f}%"

    for n, text in (("cmech_miss_spread_8_w4_p", "`spread` on 8 lines went from {} to {}"),
                    ("cmech_miss_rand_4_w4_p", "`rand` on 4 lines from {} to {}")):
        assert text.format(pct(was, n), pct(now, n)) in README, n
    small = [now[f"cmech_miss_{p}_{k}_p"] / gpu[f"cmech_miss_{p}_{k}_p"] - 1
             for p in ("same", "spread") for k in (1, 2, 4, 8)]
    assert (f"the 32-bit `same` and `spread` ones on 1-8 lines are {100 * min(small):.0f}-"
            f"{100 * max(small):.0f}% dear") in README
    lo = [now[n] / gpu[n] - 1 for n in ("cmech_miss_rand_32_lo", "cmech_miss_rand_32_w4_lo")]
    assert f"the 4-warp ones {100 * min(lo):.0f}-{100 * max(lo):.0f}%" in README


def test_a_simulated_value_is_todays_engine():
    name = "cmech_miss_rand_32_w4_lo"      # 4 warps an SM: a fast one
    assert probe.simulated_wavefronts(name) == pytest.approx(
        REC["wavefronts"][name]["simulated"], rel=1e-12)
