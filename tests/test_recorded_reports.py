"""The recorded reports that the README quotes are those of today's code and data: the error
bands ``gpusim predict`` prints are derived from the committed cross-check of the fresh draws,
under today's model fingerprint; that cross-check labels the draws as today's rule does; the
README's out-of-sample headline is the cross-check's; and the Lamport exchange probes
(``lamport_free.json``, ``lamport_rot.json``) are of today's kernels and say what
measurements/README.md says of them."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from gpusim.measurements import (
    fingerprint_is_current,
    kernel_fingerprint,
    load_json,
    model_fingerprint,
)
from gpusim.samples import OUT_OF_SAMPLE, draws
from gpusim.uncertainty import bands_from
from kernels_ir.kernels import microbench as mb
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"
with gzip.open(H100 / "crosscheck_fresh.json.gz", "rt") as _f:
    H100_RECORD = json.load(_f)
# The H100's last draws, out of sample for the model they were measured with. A later change of
# the engine (gpusim/engine/lowering.py) put them in sample, and no H100 has been lent since:
# the README's H100 figures are theirs, as measured (rows keep the predictions they were judged
# with), and the H100's bands are theirs, flagged by ``predict`` as an earlier model's.
H100_LAST = tuple(f"fresh_2026-11-28_s{n}" for n in (28, 29, 30, 31))


def as_measured(rec: dict, names) -> dict:
    """``rec`` with the draws ``names`` labelled out of sample and every other draw in sample,
    summarised again (what the record said while those draws were out of sample)."""
    import copy

    from gpusim.cli.crosscheck import merge_reports
    from gpusim.samples import IN_SAMPLE
    from gpusim.speedup_check import summarise_speedups

    part = copy.deepcopy(rec)
    for d in part["draws"]:
        d["sample"] = OUT_OF_SAMPLE if d["draw"] in names else IN_SAMPLE
    for r in part["rows"] + part["speedup"]["rows"]:
        r["sample"] = OUT_OF_SAMPLE if r["draw"] in names else IN_SAMPLE
    out = merge_reports([part], str(H100))
    out["speedup"] = summarise_speedups(part["speedup"]["rows"],
                                        tuple(part["speedup"]["engines"]))
    return out


CROSSCHECK = as_measured(H100_RECORD, H100_LAST)


def _close(a, b, path="bands"):
    """Equal structure, numbers equal to float rounding (the file went through JSON)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12), path
    else:
        assert a == b, path


def _as_made(old: dict, c: dict, s: dict, gpu: str | None = None) -> dict:
    """``bands_from`` over ``c`` / ``s`` under the rule the bands ``old`` were made with (a
    band without one is a ``percentile`` band, made before 2026-12-01)."""
    b = bands_from(c, s, old["model_fingerprint"], gpu, rule=old.get("rule", "percentile"))
    if "rule" not in old:
        del b["rule"]
    return b


def _merged(gpu: str) -> dict:
    if gpu == "h100":
        return H100_RECORD
    return read_record(str(ROOT / "measurements" / gpu / "crosscheck_fresh.json"))


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_error_bands_come_from_the_recorded_crosscheck_under_todays_model(gpu):
    bands = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())[gpu]
    now = model_fingerprint(gpu=gpu)
    cc = _merged(gpu)
    if gpu == "h100" and not any(d["sample"] == OUT_OF_SAMPLE for d in cc["draws"]):
        # no draw since the last change: the bands of the last draws, as measured, which
        # ``predict`` flags as an earlier model's
        assert not fingerprint_is_current(bands["model_fingerprint"], gpu, gpu)
        _close(bands, _as_made(bands, CROSSCHECK, CROSSCHECK["speedup"], gpu))
        return
    # today's model, or one whose predictions a FINGERPRINT_UNCHANGED pair says it kept (as
    # ``predict`` reads them)
    assert bands["fingerprint_gpu"] == gpu
    assert bands["model_fingerprint"] == now or fingerprint_is_current(
        bands["model_fingerprint"], gpu, gpu)
    judged = bands.pop("contenders_judged", None)
    _close(bands, _as_made(bands, cc, cc["speedup"], gpu))
    if judged is not None:
        # the previous bands (kept beside the draws), judged on the draws they were not made from
        from gpusim.uncertainty import contenders_judged

        kept = [json.loads(p.read_text()) for p in (ROOT / "measurements" / gpu).glob(
            "error_bands_*.json")]
        prev = [b for b in kept if b["draws"] == judged["bands_of"]]
        assert len(prev) == 1, judged["bands_of"]
        assert judged == contenders_judged(prev[0], bands, cc)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_crosscheck_labels_the_draws_as_today(gpu):
    """Every fresh draw of the GPU is in its merged record, labelled as today's rule labels it
    (the H200's record leaves out its campaign of 2026-11-22, measured with older kernels)."""
    today = {d.name: d.sample for d in draws(ROOT / "measurements" / gpu)}
    got = {d["draw"]: d["sample"] for d in _merged(gpu)["draws"]}
    assert got == {k: v for k, v in today.items() if k in got}
    assert set(today) - set(got) <= ({"campaign"} if gpu == "h200" else set())
    assert OUT_OF_SAMPLE in got.values() or gpu == "h100"   # no H100 lent since the change


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_unchanged_predictions_are_recorded_ones(gpu):
    """While FINGERPRINT_UNCHANGED keeps a GPU's draws out of sample across a change of the
    sources, today's simulator and model give its recorded out-of-sample cases exactly the
    predictions they were judged with (one case of each family, and on the H200 of each cell,
    small layers)."""
    from gpusim.cli.crosscheck import predict_case
    from gpusim.measurements import load_campaign, unchanged_pairs
    from gpusim.specs import load_spec

    now = model_fingerprint(gpu=gpu)
    if not any(to == now for _, to in unchanged_pairs(gpu)):
        pytest.skip(f"no unchanged-predictions pair ends at today's {gpu} fingerprint")
    record = CROSSCHECK if gpu == "h100" else _merged(gpu)
    rows = [r for r in record["rows"] if r["sample"] == OUT_OF_SAMPLE
            and r["source"] == "simulator" and r["hidden"] <= (700 if gpu == "h100" else 1200)]
    pick = {}
    for r in sorted(rows, key=lambda r: r["id"]):
        pick.setdefault((r["family"], r.get("cell", "rnn") if gpu == "h200" else ""), r)
    assert len(pick) >= 4, sorted(pick)
    spec = load_spec(gpu)
    where = ROOT / "measurements" / gpu
    for r in pick.values():
        draw, cid = r["id"].split("/", 1)
        camp = load_campaign(where / draw)
        case = next(c for c in camp.cases if c["id"] == cid)
        p = predict_case(case, spec, camp.ncu_steps or 4)
        assert (p["per_step_s"], p["model_s"]) == (r["predicted_s"], r["model_s"]), r["id"]


def test_a_bad_unchanged_file_is_one_error(tmp_path, monkeypatch):
    import gpusim.measurements as gm
    from kernels_ir.errors import InputError

    bad = tmp_path / "fingerprint_unchanged.json"
    bad.write_text(json.dumps({"h100": [{"from": 3}]}))
    monkeypatch.setattr(gm, "FINGERPRINT_UNCHANGED", bad)
    with pytest.raises(InputError, match="'from' and 'to'"):
        gm.unchanged_pairs("h100")


def _history_and_readme() -> str:
    """The README and ``docs/history.md`` (the earlier changes' sections, moved out of the
    README): where the figures of an earlier change are quoted."""
    return "\n".join((ROOT / name).read_text() for name in ("README.md", "docs/history.md"))


def test_the_readme_headline_is_the_crosschecks():
    readme = (ROOT / "README.md").read_text()
    out = CROSSCHECK["samples"][OUT_OF_SAMPLE]
    sp = CROSSCHECK["speedup"]["samples"][OUT_OF_SAMPLE]
    row = (f"| speedup of `gpusim predict` (best persistent over next best), MAPE | "
           f"{sp['model']['speedup_mape'] * 100:.1f}% | {sp['sim']['speedup_mape'] * 100:.1f}% |")
    assert row in readme
    assert (f"| fastest kernel named correctly | {sp['model']['fastest_named']} of "
            f"{sp['model']['layers']} | {sp['sim']['fastest_named']} of {sp['sim']['layers']} |"
            in readme)
    sim = out["by_source"]["simulator"]
    assert (f"{sim['mape'] * 100:.1f}% (Spearman {sim['spearman']:.3f})" in readme)
    draw = [d["draw"] for d in CROSSCHECK["draws"] if d["sample"] == OUT_OF_SAMPLE]
    assert draw and all(f"measurements/h100/{d}/" in readme for d in draw)


def test_the_readme_quotes_the_h200_draws():
    """The README's H200 table: out-of-sample speedups, naming and per-step errors of the
    merged H200 record (the rows measurements/add_draws.py prints)."""
    from measurements.add_draws import readme_rows

    readme = (ROOT / "README.md").read_text()
    rows = readme_rows(_merged("h200"))
    assert rows[0].startswith("| speedup MAPE, out of sample (s211-s214) |")
    for row in rows:
        assert row in readme, row


@pytest.mark.parametrize("record", ["lamport_free.json", "lamport_rot.json"])
def test_exchange_probes_are_of_todays_kernels(record):
    rec = read_record(str(H100 / record))      # kept gzipped
    sim = rec["simulated"]["results"]
    for name, r in rec["results"].items():
        assert r["status"] == "ok" and len(r["per_op_s_passes"]) == 2, name
        assert name in sim, name
        if not name.startswith("lmech_"):
            continue
        for size, s in r["sizes"].items():
            assert s["kernel"] == kernel_fingerprint(mb.build(name, int(size)).kernel), name


def _gpu(rec, name):
    p = rec["results"][name]["per_op_s_passes"]
    return sum(p) / len(p)


def test_the_wait_is_what_the_simulator_misses():
    """measurements/README.md: up to 9216 words the Lamport round minus its free-running
    control (the wait for the writers) is longer on the GPU than in the simulator, on both
    machines; at 32768 words both are bound by the reads (the wait is under 5% of the round)."""
    for record in ("lamport_free.json", "lamport_rot.json"):
        rec = read_record(str(H100 / record))      # kept gzipped
        sim = rec["simulated"]["results"]
        for n in (1024, 4096, 9216):
            x, xp = f"lmech_x_{n}", f"lmech_xp_{n}"
            if x not in rec["results"]:
                continue
            gpu_wait = _gpu(rec, x) - _gpu(rec, xp)
            sim_wait = sim[x]["per_op_s"] - sim[xp]["per_op_s"]
            assert gpu_wait > sim_wait + 80e-9, (record, n)
        x, xp = "lmech_x_32768", "lmech_xp_32768"
        assert abs(_gpu(rec, x) - _gpu(rec, xp)) < 0.05 * _gpu(rec, x)


def test_same_order_reads_cost_the_gpu_more_than_the_simulator():
    """measurements/README.md: 132 SMs reading the same sectors in the same order take the GPU
    up to 36% longer than the rotated order; the simulator does not charge the order."""
    rec = json.loads((H100 / "lamport_rot.json").read_text())
    sim = rec["simulated"]["results"]
    same, rot = _gpu(rec, "lmech_xq_32768"), _gpu(rec, "lmech_xq_32768_rot")
    assert 1.30 < same / rot < 1.40
    s_same, s_rot = sim["lmech_xq_32768"]["per_op_s"], sim["lmech_xq_32768_rot"]["per_op_s"]
    assert s_same / s_rot < 1.05


def test_the_previous_model_on_the_headline_draws_is_what_the_readme_says():
    """The out-of-sample draws priced by the model before the fence and poll-phase change
    (``crosscheck_s1x_previous_model.json``): each covers its draw's every case, and the README's
    comparison (speedup MAPE over both, per case over all their cases) is computed from them."""
    import numpy as np

    readme = _history_and_readme()
    model, sim, ape = [], [], []
    for seed in (11, 12):
        rec = read_record(H100 / f"crosscheck_s{seed}_previous_model.json")
        draw = f"fresh_2026-11-25_s{seed}"
        assert [d["draw"] for d in rec["draws"]] == [draw]
        assert "c7ab02a" in rec["command"]
        today = [r for r in CROSSCHECK["rows"] if r["draw"] == draw]
        # less the cases whose kernel changed since (stale: left out of today's rows)
        assert {r["id"] for r in rec["rows"]} - set(CROSSCHECK["stale_cases"]) == \
            {r["id"] for r in today}
        model += [r["model"]["ape"] for r in rec["speedup"]["rows"]]
        sim += [r["sim"]["ape"] for r in rec["speedup"]["rows"]]
        ape += [r["ape"] for r in rec["rows"]]
    assert (f"give {np.mean(model) * 100:.1f}% (model) and {np.mean(sim) * 100:.1f}% (sim)"
            in readme.replace("\n", " "))
    assert f"{np.mean(ape) * 100:.1f}% per case" in readme.replace("\n", " ")


def test_the_readme_quotes_the_bands_by_size_of_the_file():
    """README's "Bands by size": the thirds' edges, and the CSR baseline's and the speedup's
    simulator bands, for every third that has one and over all sizes, are those of
    error_bands.json; a third without a band (fewer than MIN_BIN values) is not quoted."""
    import math

    from gpusim.uncertainty import min_bin

    b = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h100"]
    text = " ".join((ROOT / "README.md").read_text().split())
    a, z = (math.ceil(e) for e in b["hidden_edges"])
    assert f"hidden <= {a - 1}, {a}-{z - 1} and >= {z}" in text
    labels = (f"hidden <= {a - 1}", f"hidden {a}-{z - 1}", f"hidden >= {z}")

    def rng(x):
        return f"{x['ratio_p10']:.2f}-{x['ratio_p90']:.2f}"
    csr = b["families"]["sim"]["csr-row-per-warp"]
    sp = b["speedup"]["sim"]
    quoted = 0
    for i, label in enumerate(labels):
        for band, what in ((csr["by_hidden"][i], "times its simulated time at"),
                           (sp["by_hidden"][i], "times the simulator's prediction at")):
            if band is None:
                continue
            assert band["n"] >= min_bin(b.get("rule", "percentile"))
            assert f"{rng(band)} {what} {label}" in text
            quoted += 1
    assert quoted
    assert f"{rng(csr)} over all sizes" in text and f"{rng(sp)} over all sizes" in text
    # the model's speedup and CSR bands by third, where every third has one
    msp, mcsr = b["speedup"]["model"]["by_hidden"], b["families"]["model"]["csr-row-per-warp"]
    if all(msp) and all(mcsr["by_hidden"]):
        assert ("the speedup measured " + ", ".join(rng(x) for x in msp[:2]) + f" and "
                f"{rng(msp[2])} times the model's prediction in the three thirds") in text
        assert ("its CSR baseline ran " + ", ".join(rng(x) for x in mcsr["by_hidden"][:2]) +
                f" and {rng(mcsr['by_hidden'][2])} times its modelled time") in text


def test_the_readme_quotes_the_h200_bands_by_size():
    """README's "Bands by size" on the H200: the thirds' edges, and the CSR baseline's and the
    speedup's bands per third for both engines, are those of error_bands.json (the bands
    ``predict --gpu h200`` prints and the V100 borrows)."""
    import math

    b = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h200"]
    text = " ".join((ROOT / "README.md").read_text().split())
    a, z = (math.ceil(e) for e in b["hidden_edges"])
    seeds = [d.rsplit("_s", 1)[1] for d in b["draws"].split(", ")]
    assert (f"On the H200 (s{seeds[0]}-s{seeds[-1]}'s {b['layers']} RNN layers" in text)
    assert f"the thirds are hidden <= {a - 1}, {a}-{z - 1} and >= {z}" in text

    def three(bands):
        r = [f"{x['ratio_p10']:.2f}-{x['ratio_p90']:.2f}" for x in bands]
        return f"{r[0]}, {r[1]} and {r[2]}"
    csr = {e: b["families"][e]["csr-row-per-warp"]["by_hidden"] for e in ("sim", "model")}
    sp = {e: b["speedup"][e]["by_hidden"] for e in ("sim", "model")}
    assert (f"the CSR baseline ran {three(csr['sim'])} times its simulated time "
            f"({three(csr['model'])} times its modelled time)") in text
    assert (f"the speedup measured {three(sp['sim'])} times the simulator's prediction "
            f"({three(sp['model'])} times the model's)") in text


def test_the_readme_quotes_how_often_the_contenders_held_the_fastest():
    """README: over the out-of-sample layers, the kernel the GPU ran fastest was among the
    simulator's contenders (bands of the same layers, so in sample for the bands) in every layer;
    the sets' mean size."""
    import numpy as np

    b = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h100"]
    from gpusim.uncertainty import contender_hits

    held, sizes, kernels = contender_hits(
        [r for r in CROSSCHECK["rows"] if r["sample"] == OUT_OF_SAMPLE and "cell" not in r], b)
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"in {held} of {len(sizes)} out-of-sample layers the kernel the GPU ran fastest "
            f"was among them ({np.mean(sizes):.1f} of the {np.mean(kernels):.1f} persistent "
            "variants measured a layer, on average)") in text


def test_the_readme_quotes_the_bank_conflicts_checked_by_address():
    """Out of sample, the cases whose hardware conflict counts differ from the bank rule are
    all checked by address (the draw's Nsight pass has the SASS-patched wavefronts), and the
    README quotes how many matched each way."""
    out = CROSSCHECK["samples"][OUT_OF_SAMPLE]
    n, miss = out["bank_conflict_cases"], out["bank_conflict_mismatches"]
    assert out["bank_conflict_address_checked"] == miss
    text = " ".join(_history_and_readme().split())
    assert (f"{n - miss} of {n} cases equal Nsight's hardware counters; of the other {miss}, "
            f"{out['bank_conflict_address_matches']} equal its SASS-patched") in text
    rows = [r for r in CROSSCHECK["rows"] if r["sample"] == OUT_OF_SAMPLE and "cell" not in r
            and "conflicts_match" in r and not r["conflicts_match"]]
    assert len(rows) == miss and all("wavefronts_sass_measured" in r for r in rows)


def _draw_subset(names, cc=None, sample=None):
    """The crosscheck and speedup summaries of the draws ``names`` of ``cc`` (the H100's merged
    record by default), each row and draw marked ``sample`` where given."""
    from measurements.band_rule_screen import subset

    return subset(CROSSCHECK if cc is None else cc, names, sample)


def _draw_fingerprint(draw: str) -> str:
    rec = load_json(H100 / draw / "campaign.json")      # kept gzipped
    return rec["fresh"]["model_fingerprint"]


@pytest.mark.parametrize("record, made_from, judged_on", [
    ("error_bands_s22.json", ("s22",), ("s23", "s24")),
    ("error_bands_s22_s24.json", ("s22", "s23", "s24"), ("s25",)),
    ("error_bands_s22_s25.json", ("s22", "s23", "s24", "s25"), ("s26", "s27")),
    ("error_bands_s26_s27.json", ("s26", "s27"), ("s28", "s29", "s30", "s31"))])
def test_earlier_bands_judged_on_the_draws_measured_after_them(record, made_from, judged_on):
    """The bands ``predict`` printed while only ``made_from`` were out of sample (they are
    theirs: recomputed here from their rows, under the model those draws were measured with),
    judged on the draws measured after them; the README quotes how often they held."""
    from gpusim.uncertainty import judge_bands

    old = json.loads((H100 / record).read_text())
    # out of sample for the model they were measured with
    c, s = _draw_subset({f"fresh_2026-11-28_{d}" for d in made_from}, sample=OUT_OF_SAMPLE)
    _close(old, _as_made(old, c, s))
    assert {_draw_fingerprint(f"fresh_2026-11-28_{d}") for d in made_from} == \
        {old["model_fingerprint"]}
    c, s = _draw_subset({f"fresh_2026-11-28_{d}" for d in judged_on})
    j = judge_bands(old, c["rows"], s["rows"])
    sim, mod = j["sim"], j["model"]
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{sim['per_step_by_size'] * 100:.0f}% and {sim['per_step_whole'] * 100:.0f}% of the "
            f"simulator's per-step ratios") in text
    assert (f"the model's {mod['per_step_by_size'] * 100:.0f}% and "
            f"{mod['per_step_whole'] * 100:.0f}%") in text
    assert (f"the speedups in {round(mod['speedup_by_size'] * j['layers'])} (model) and "
            f"{round(sim['speedup_by_size'] * j['layers'])} (sim) of {j['layers']} layers") in text
    assert (f"in {j['contenders_held']} of {j['contenders_layers']} "
            f"({j['contenders_mean']:.1f} a layer)") in text


# bands judged on draws of the same model (the draws that replaced them added to the sample)
SAME_MODEL = ("error_bands_s149_s152.json", "error_bands_s155_s158.json",
              "error_bands_s167_s172.json", "error_bands_s195_s198.json")


@pytest.mark.parametrize("record, made_from, judged_on", [
    ("error_bands_s109_s110.json", (109, 110), tuple(range(111, 117))),
    ("error_bands_s111_s116.json", tuple(range(111, 117)), tuple(range(117, 123))),
    ("error_bands_s117_s122.json", tuple(range(117, 123)), tuple(range(123, 129))),
    ("error_bands_s123_s128.json", tuple(range(123, 129)), tuple(range(129, 135))),
    ("error_bands_s129_s134.json", tuple(range(129, 135)), tuple(range(135, 141))),
    ("error_bands_s135_s140.json", tuple(range(135, 141)), tuple(range(141, 145))),
    ("error_bands_s141_s144.json", tuple(range(141, 145)), tuple(range(145, 149))),
    ("error_bands_s141_s148.json", tuple(range(141, 149)), tuple(range(149, 155))),
    ("error_bands_s149_s152.json", tuple(range(149, 153)), (153, 154)),
    ("error_bands_s149_s154.json", tuple(range(149, 155)), tuple(range(155, 159))),
    ("error_bands_s155_s158.json", tuple(range(155, 159)), (159, 160)),
    ("error_bands_s155_s160.json", tuple(range(155, 161)), tuple(range(161, 167))),
    ("error_bands_s161_s166.json", tuple(range(161, 167)), tuple(range(167, 173))),
    ("error_bands_s167_s172.json", tuple(range(167, 173)), (173, 174)),
    ("error_bands_s167_s174.json", tuple(range(167, 175)), tuple(range(175, 181))),
    ("error_bands_s175_s180.json", tuple(range(175, 181)), tuple(range(181, 187))),
    ("error_bands_s181_s186.json", tuple(range(181, 187)), tuple(range(187, 191))),
    ("error_bands_s187_s190.json", tuple(range(187, 191)), tuple(range(191, 195))),
    ("error_bands_s191_s194.json", tuple(range(191, 195)), tuple(range(195, 199))),
    ("error_bands_s195_s198.json", tuple(range(195, 199)), tuple(range(199, 205))),
    ("error_bands_s195_s204.json", tuple(range(195, 205)), tuple(range(205, 211))),
    ("error_bands_s205_s210.json", tuple(range(205, 211)), tuple(range(211, 215)))])
def test_earlier_h200_bands_judged_on_the_draws_measured_after_them(record, made_from,
                                                                    judged_on):
    """The H200's bands that ``predict`` printed while ``made_from`` were the draws out of
    sample (recomputed here from the merged record's rows of those draws, as priced when they
    were merged), judged on the draws measured after the next model change; the README quotes
    how often they held."""
    from gpusim.uncertainty import judge_bands

    old = json.loads((ROOT / "measurements" / "h200" / record).read_text())
    cc = _merged("h200")

    def draw(n):     # the draw folder of seed n (its date is the day it was measured)
        found = sorted((ROOT / "measurements" / "h200").glob(f"fresh_*_s{n}"))
        assert len(found) == 1, (n, found)
        return found[0].name

    def subset(seeds, sample=None):
        return _draw_subset({draw(n) for n in seeds}, cc, sample)

    c, s = subset(made_from, OUT_OF_SAMPLE)    # out of sample for the model they were measured with
    # (the judgement of the bands before them, recorded when they replaced those, was checked
    # by test_error_bands_come_from_the_recorded_crosscheck_under_todays_model while they were
    # today's)
    mine = {k: v for k, v in old.items() if k != "contenders_judged"}
    _close(mine, _as_made(old, c, s, "h200"))
    fp = {n: load_json(ROOT / "measurements" / "h200" / draw(n) /
                       "campaign.json")["fresh"]["model_fingerprint"]
          for n in made_from + judged_on}
    # (or a fingerprint that a verified bit-identical refactor made of theirs:
    # gpusim/specs/fingerprint_unchanged.json)
    from gpusim.measurements import unchanged_pairs

    made = {fp[n] for n in made_from}
    assert old["model_fingerprint"] in made | {b for a, b in unchanged_pairs("h200") if a in made}
    if record in SAME_MODEL:      # measured later under the same model
        assert {fp[n] for n in judged_on} == {old["model_fingerprint"]}
    else:
        assert old["model_fingerprint"] not in {fp[n] for n in judged_on}   # after a change
    c, s = subset(judged_on)
    j = judge_bands(old, c["rows"], s["rows"])
    sim, mod = j["sim"], j["model"]
    text = " ".join((ROOT / "README.md").read_text().split())
    label = f"s{made_from[0]}-s{made_from[-1]}'s bands judged on s{judged_on[0]}-s{judged_on[-1]}"
    assert (f"{label}: {sim['per_step_by_size'] * 100:.0f}% and "
            f"{sim['per_step_whole'] * 100:.0f}% of the simulator's per-step ratios, the model's "
            f"{mod['per_step_by_size'] * 100:.0f}% and {mod['per_step_whole'] * 100:.0f}%; the "
            f"speedups in {round(mod['speedup_by_size'] * j['layers'])} (model) and "
            f"{round(sim['speedup_by_size'] * j['layers'])} (sim) of {j['layers']} layers; the "
            f"fastest kernel among the contenders in {j['contenders_held']} of "
            f"{j['contenders_layers']} ({j['contenders_mean']:.1f} a layer)") in text, label


def test_the_previous_engine_on_s45_s49_is_what_the_readme_says():
    """``h200/crosscheck_s45_s49_previous_engine.json.gz``: the draws s45-s49 priced by the
    engine before the lowering change (the same-layer comparison the README quotes)."""
    import statistics

    with gzip.open(ROOT / "measurements" / "h200" /
                   "crosscheck_s45_s49_previous_engine.json.gz", "rt") as f:
        rec = json.load(f)
    assert sorted(rec["reports"]) == [f"fresh_2026-11-28_s{n}" for n in range(45, 50)]
    sp = [r for rep in rec["reports"].values() for r in rep["speedup"]["rows"]
          if "cell" not in r]
    assert len(sp) == 80

    def cell(eng):
        mape = statistics.mean(r[eng]["ape"] for r in sp)
        return f"{100 * mape:.1f}%; {sum(r[eng]['fastest_named'] for r in sp)} of 80"

    row = (f"| the same layers priced by the engine before the change: speedup MAPE; named | "
           f"{cell('model')} | {cell('sim')} |")
    assert row in _history_and_readme(), row


def _s83_figures(name: str) -> dict:
    """A same-layers comparison record's figures for s83's plain RNN layers: the simulator's mean
    signed error per family (%), and per engine the speedup MAPE (%) and the fastest named."""
    import re
    import statistics

    with gzip.open(ROOT / "measurements" / "h200" / name, "rt") as f:
        rec = json.load(f)
    draw = "fresh_2026-11-29_s83"
    fam: dict = {}
    for r in rec["rows"]:
        if (r["draw"] == draw and r["kind"] in ("sparse_persistent", "dense_persistent", "csr")
                and not re.search(r"-(lstm|gru|rnn)-|-H\d+-|fp16", r["id"])):
            fam.setdefault(r["family"], []).append(r["signed"])
    out = {f: round(100 * statistics.mean(v), 1) for f, v in fam.items()}
    sp = [r for r in rec["speedup"]["rows"] if r["draw"] == draw and r.get("cell") is None]
    for eng in ("sim", "model"):
        out[eng] = (round(100 * statistics.mean(r[eng]["ape"] for r in sp), 1),
                    sum(r[eng]["fastest"] == r["measured"]["fastest"] for r in sp))
    return out


def test_the_order_floor_before_and_after_on_s83():
    """The READMEs' in-sample comparison of the order floor (ptxas's schedule) on s83's layers,
    priced by the engine before it (``crosscheck_s83_s84_branch45.json.gz``) and with it
    (``crosscheck_s83_order_floor.json.gz``): the barrier kernels +3.1% -> +0.7%, Lamport
    -3.7% -> -6.8%, dense -6.4% -> -7.4%; speedups 8.2% -> 7.8% (simulator) and 8.2% -> 8.7%
    (model), the fastest named unchanged (15 and 14 of 16)."""
    before = _s83_figures("crosscheck_s83_s84_branch45.json.gz")
    after = _s83_figures("crosscheck_s83_order_floor.json.gz")
    assert (before["sparse barrier"], after["sparse barrier"]) == (3.1, 0.7)
    assert (before["sparse lamport"], after["sparse lamport"]) == (-3.7, -6.8)
    assert (before["dense persistent"], after["dense persistent"]) == (-6.4, -7.4)
    assert (before["sim"], after["sim"]) == ((8.2, 15), (7.8, 15))
    assert (before["model"], after["model"]) == ((8.2, 14), (8.7, 14))
    text = (ROOT / "measurements" / "README.md").read_text()
    assert "barrier +3.1% -> +0.7%, Lamport -3.7% -> -6.8%" in text


def _repriced(record: str, draws=("fresh_2026-11-30_s109", "fresh_2026-11-30_s110")):
    """The reports of ``record`` (a re-pricing of two draws, ``draws``, by another engine)
    after checking that they hold the merged record's layers and measured times: ``(reports,
    RNN speedup rows, speedup MAPE per engine, fastest named per engine)``."""
    with gzip.open(ROOT / "measurements" / "h200" / record, "rt") as f:
        reports = json.load(f)["reports"]
    merged = _merged("h200")
    assert sorted(reports) == list(draws)
    now = {(r["draw"], r["hidden"], r["batch"], r["density"]): r["measured"]
           for r in merged["speedup"]["rows"] if r["draw"] in draws}
    sp = [r for d in draws for r in reports[d]["speedup"]["rows"] if r.get("cell") is None]
    assert len(sp) == 32
    for r in sp:
        assert r["measured"] == now[(r["draw"].rsplit("/", 1)[-1], r["hidden"], r["batch"],
                                     r["density"])]
    mape = {e: 100 * sum(r[e]["ape"] for r in sp) / len(sp) for e in ("sim", "model")}
    named = {e: sum(r[e]["fastest"] == r["measured"]["fastest"] for r in sp)
             for e in ("sim", "model")}
    return reports, sp, mape, named


def test_the_engine_before_on_s109_s110_is_what_the_readmes_quote():
    """``measurements/h200/crosscheck_s109_s110_engine_before.json.gz``: the out-of-sample draws
    s109-s110 priced by the engine before the static stall counts. Same layers and measured
    times as the merged record; the speedup errors and names the READMEs quote."""
    _, _, mape, named = _repriced("crosscheck_s109_s110_engine_before.json.gz")
    text = " ".join(_history_and_readme().split())
    assert (f"give speedups {mape['sim']:.1f}% and {mape['model']:.1f}%, named {named['sim']} "
            f"and {named['model']}") in text


def test_the_loop_edges_on_s109_s110_are_what_the_readme_quotes():
    """``measurements/h200/crosscheck_s109_s110_loop_edges.json.gz``: s109-s110 (out of sample
    for the engine before the loop edges) priced by the engine with them. Same layers and
    measured times as the merged record; the speedup errors, names and per-step errors the
    README quotes."""
    after, _, mape, named = _repriced("crosscheck_s109_s110_loop_edges.json.gz")
    step = _step_mape(after)
    text = " ".join(_history_and_readme().split())
    assert (f"speedups {mape['sim']:.1f}% (simulator) and {mape['model']:.1f}% (model), named "
            f"{named['sim']} and {named['model']}") in text
    assert f"per step {step:.1f}% and" in text


def _step_mape(reports) -> float:
    """The simulator's per-step MAPE over the RNN rows of our kernels in ``reports``."""
    rows = [r for d in reports.values() for r in d["rows"]
            if r["kind"] in ("sparse_persistent", "dense_persistent", "csr")
            and not re.search(r"-(lstm|gru|rnn)-|-H\d+-|fp16", r["id"])]
    return 100 * sum(r["ape"] for r in rows) / len(rows)


def test_the_replays_fix_on_s111_s112_is_what_the_readmes_quote():
    """``measurements/h200/crosscheck_s111_s112_replays.json.gz``: s111-s112 (out of sample for
    the engine before the replayed polls ran all three tests) priced by the engine with them,
    against the merged record's reports of the same draws (the engine before): the speedup
    errors, names and per-step errors the READMEs quote."""
    draws = ("fresh_2026-11-30_s111", "fresh_2026-11-30_s112")
    after, _, mape, named = _repriced("crosscheck_s111_s112_replays.json.gz", draws)
    merged = _merged("h200")
    sp = [r for r in merged["speedup"]["rows"] if r["draw"] in draws and r.get("cell") is None]
    before = {e: 100 * sum(r[e]["ape"] for r in sp) / len(sp) for e in ("sim", "model")}
    named_before = {e: sum(r[e]["fastest"] == r["measured"]["fastest"] for r in sp)
                    for e in ("sim", "model")}
    step = _step_mape(after)
    text = " ".join(_history_and_readme().split())
    assert (f"speedups {mape['sim']:.1f}% (simulator) and {mape['model']:.1f}% (model), named "
            f"{named['sim']} and {named['model']} ({before['sim']:.1f}% and "
            f"{before['model']:.1f}%, {named_before['sim']} and {named_before['model']} before)"
            ) in text
    assert f"per step {step:.1f}% and" in text


def test_unchanged_pairs_chain_and_a_change_without_one_ends_them(tmp_path, monkeypatch):
    """A draw stays out of sample across several prediction-preserving changes, one pair each;
    a fingerprint no chain leads from to today's is not today's (nor is a cycle)."""
    import gpusim.measurements as gm

    pairs = tmp_path / "fingerprint_unchanged.json"
    pairs.write_text(json.dumps({"h200": [{"from": "a", "to": "b"}, {"from": "b", "to": "now"},
                                          {"from": "x", "to": "y"}, {"from": "c", "to": "d"},
                                          {"from": "d", "to": "c"}]}))
    monkeypatch.setattr(gm, "FINGERPRINT_UNCHANGED", pairs)
    monkeypatch.setattr(gm, "model_fingerprint", lambda root=None, gpu=None: "now")
    assert [gm._is_today(f, "h200") for f in ("now", "b", "a", "x", "y", "c", "z")] == [
        True, True, True, False, False, False, False]


@pytest.mark.parametrize("first, n, commit, cases", [(175, 6, "d31168d", 725),
                                                     (181, 6, "e14d3df", 725),
                                                     (187, 4, "454324e", 480),
                                                     (191, 4, "638db29", 476),
                                                     (195, 4, "3982d72", 480)])
def test_the_model_before_on_the_headline_draws_is_what_the_readme_says(first, n, commit,
                                                                        cases):
    """``h200/model_before_sA_sB.json`` (``measurements/model_at_commit.py``): the draws' RNN
    layers priced by the model at the commit before the change they judged (the staging
    broadcast pipelined; the wake over the step's spread; the 128-bit gathers' quarter-warp
    phases; the L2 group rule); its summary is its rows', and the README's table row is its
    summary."""
    from measurements.model_at_commit import summary

    seeds = range(first, first + n)
    last = first + n - 1
    rec = read_record(ROOT / "measurements" / "h200" / f"model_before_s{first}_s{last}.json")
    assert rec["commit"].startswith(commit)
    assert rec["draws"] == [f"fresh_2026-12-01_s{s}" for s in seeds]
    s = rec["summary"]
    assert s == summary(rec) and s["layers"] == 16 * n and s["cases"] == cases
    today = {r["id"] for r in _merged("h200")["rows"] if r["draw"] in rec["draws"]}
    assert {f"{c['draw']}/{c['id']}" for c in rec["cases"]} <= today
    row = (f"| s{first}-s{last} priced by the model before the change: speedup MAPE; named; "
           f"per step | {s['speedup_mape'] * 100:.1f}%; {s['fastest_named']} of {s['layers']}; "
           f"{s['per_step_mape'] * 100:.1f}% |")
    assert row in _history_and_readme(), row


def _speedups_with_csr(rows, csr_price):
    """Speedup APEs and fastest-kernel hits of speedup ``rows`` (the merged record's) with the
    simulator's CSR price replaced by ``csr_price(row)``."""
    from gpusim.speedup_check import SPARSE, _best

    apes, named = [], 0
    for r in rows:
        t = {k: v for k, v in r["sim"]["times_s"].items() if v is not None}
        t["csr-row-per-warp"] = csr_price(r)
        bp, tp = _best(t, SPARSE)
        nb, tn = _best(t, [n for n in t if n not in SPARSE])
        apes.append(abs(tn / tp / r["measured"]["speedup"] - 1))
        named += (bp if tn / tp >= 1 else nb) == r["measured"]["fastest"]
    return apes, named


def test_the_simulator_before_on_the_last_changes_draws_is_what_the_readme_says():
    """``h200/sim_csr_before_s187_s190.json.xz``: the CSR kernel's simulator prices of s187-s190
    at the commit before the 128-bit gathers' quarter-warp phases (the only kernel the change
    moved). With the merged record's other simulator prices they give the simulator-before
    speedups and naming the README quotes; the record's summary is its cases'."""
    import statistics

    rec = read_record(ROOT / "measurements" / "h200" / "sim_csr_before_s187_s190.json")
    assert rec["commit"].startswith("454324e")
    cc = _merged("h200")
    csr = {(r["draw"], r["hidden"], r["batch"], r["density"]): r["id"] for r in cc["rows"]
           if r["draw"] in rec["draws"] and r["kind"] == "csr" and "cell" not in r
           and not r.get("heads")}
    assert set(csr.values()) == set(rec["csr_cases"])
    rows = [r for r in cc["speedup"]["rows"]
            if r["draw"] in rec["draws"] and "cell" not in r and not r.get("heads")]
    apes, named = _speedups_with_csr(rows, lambda r: rec["csr_cases"][
        csr[(r["draw"], r["hidden"], r["batch"], r["density"])]])
    s = rec["summary"]
    assert (s["layers"], s["fastest_named"]) == (len(rows), named) == (64, 62)
    assert s["speedup_mape"] == pytest.approx(statistics.mean(apes), rel=1e-12)
    text = " ".join(_history_and_readme().split())
    assert (f"the simulator before: {s['speedup_mape'] * 100:.1f}%; {s['fastest_named']} of "
            f"{s['layers']}") in text
    assert (f"at batch 8, where it was made, 6.8% ({s['csr_b8_mape'] * 100:.1f}%) and 9.5% "
            f"(11.3%) on {s['csr_b8_cases']}") in text


def test_the_simulator_before_the_pieces_is_what_the_readme_says():
    """``h200/sim_csr_before_s205_s210.json.xz``: the CSR kernel's simulator prices of s205-s210
    (fp32 RNN layers) at the commit before a missed load's pieces (e31cb9b; the CSR kernel is the
    only kernel the change moved: the persistent kernels' prices of s204 re-simulated are the
    same to the last digit). With the merged record's other simulator prices they give the
    simulator-before speedups and naming the README quotes; the summary is its cases'."""
    import statistics

    rec = read_record(ROOT / "measurements" / "h200" / "sim_csr_before_s205_s210.json")
    assert rec["commit"].startswith("e31cb9b")
    assert rec["draws"] == [f"fresh_2026-12-01_s{n}" for n in range(205, 211)]
    cc = _merged("h200")
    csr = {(r["draw"], r["hidden"], r["batch"], r["density"]): r for r in cc["rows"]
           if r["draw"] in rec["draws"] and r["kind"] == "csr" and "cell" not in r
           and not r.get("heads")}
    assert {r["id"] for r in csr.values()} == set(rec["csr_cases"])
    rows = [r for r in cc["speedup"]["rows"]
            if r["draw"] in rec["draws"] and "cell" not in r and not r.get("heads")]
    apes, named = _speedups_with_csr(rows, lambda r: rec["csr_cases"][
        csr[(r["draw"], r["hidden"], r["batch"], r["density"])]["id"]])
    s = rec["summary"]
    assert (s["layers"], s["fastest_named"]) == (len(rows), named) and s["layers"] == 96
    assert s["speedup_mape"] == pytest.approx(statistics.mean(apes), rel=1e-12)
    err = [rec["csr_cases"][r["id"]] / r["measured_s"] - 1 for r in csr.values()]
    assert s["csr_mape"] == pytest.approx(statistics.mean(abs(e) for e in err), rel=1e-12)
    text = " ".join(_history_and_readme().split())
    assert (f"the simulator before: {s['speedup_mape'] * 100:.1f}%; {s['fastest_named']} of "
            f"{s['layers']}") in text


@pytest.mark.parametrize("first, commit", [(191, "638db29"), (195, "3982d72"), (211, "181d84a")])
def test_the_simulator_before_a_change_is_what_the_readme_says(first, commit):
    """``h200/sim_before_sA_sB.json.xz``: every simulator price of four draws at the commit
    before the change they judged (s191-s194: the L2 group rule and the H200's own request rate;
    s195-s198: the sharers counted at once; s211-s214: the one data pipe of shuffles, shared
    loads and global loads), the whole crosscheck of each draw run at that
    commit. Its speedup rows are the merged record's layers, its summary is its rows', and the
    README quotes it; the merged record's simulator prices (as priced when the draws came)
    differ from it (the change moved prices a little)."""
    import statistics

    rec = read_record(ROOT / "measurements" / "h200" / f"sim_before_s{first}_s{first + 3}.json")
    assert rec["commit"].startswith(commit)
    assert rec["draws"] == [f"fresh_2026-12-01_s{s}" for s in range(first, first + 4)]
    rnn = [r for r in rec["speedup_rows"] if not r["cell"] and not r["heads"]]
    s = rec["summary"]
    assert s["layers"] == len(rnn) == 64
    assert s["speedup_mape"] == pytest.approx(statistics.mean(r["sim_ape"] for r in rnn))
    assert s["fastest_named"] == sum(bool(r["sim_fastest_named"]) for r in rnn)
    cc = _merged("h200")
    today = {r["id"]: r["predicted_s"] for r in cc["rows"] if r["draw"] in rec["draws"]
             and r.get("source") == "simulator"}
    assert set(rec["sim_cases"]) == set(today)
    moved = [abs(today[k] / v - 1) for k, v in rec["sim_cases"].items()]
    assert max(moved) > 0.01 and statistics.median(moved) < 0.05
    assert {(r["draw"], r["hidden"], r["batch"], r["density"]) for r in rnn} == {
        (r["draw"], r["hidden"], r["batch"], r["density"]) for r in cc["speedup"]["rows"]
        if r["draw"] in rec["draws"] and "cell" not in r and not r.get("heads")}
    text = " ".join(_history_and_readme().split())
    assert (f"the simulator before: {s['speedup_mape'] * 100:.1f}%; {s['fastest_named']} of "
            f"{s['layers']}") in text


def test_the_in_sample_csr_repricing_is_what_the_readmes_say():
    """``h200/csr_insample_s161_s186.json.xz``: the 175 in-sample CSR cases (s161-s186, hidden
    1500 up) priced before and after the 128-bit gathers' phases; its summary is its cases', and
    the READMEs quote it."""
    import statistics

    rec = read_record(ROOT / "measurements" / "h200" / "csr_insample_s161_s186.json")
    cases = list(rec["cases"].values())
    assert len(cases) == 175 and all(c["hidden"] >= 1500 for c in cases)
    s = rec["summary"]
    for label, sel in [("all", cases)] + [(f"b{b}", [c for c in cases if c["batch"] == b])
                                          for b in (1, 2, 4, 8)]:
        for w in ("sim_before", "sim_after", "model_before", "model_after"):
            assert s[label][f"{w}_mape"] == pytest.approx(statistics.mean(
                abs(c[f"{w}_s"] / c["measured_s"] - 1) for c in sel), rel=1e-12)
    pct = lambda x: f"{x * 100:.1f}%"  # noqa: E731
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    assert (f"simulator {pct(s['all']['sim_before_mape'])} -> {pct(s['all']['sim_after_mape'])} "
            f"(batch 8: {pct(s['b8']['sim_before_mape'])} -> {pct(s['b8']['sim_after_mape'])}"
            ) in text
    assert (f"model {pct(s['all']['model_before_mape'])} -> {pct(s['all']['model_after_mape'])} "
            f"(batch 8: {pct(s['b8']['model_before_mape'])} -> "
            f"{pct(s['b8']['model_after_mape'])})") in text
