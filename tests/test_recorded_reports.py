"""The recorded reports that the README quotes are those of today's code and data: the error
bands ``gpusim predict`` prints are derived from the committed cross-check of the fresh draws,
under today's model fingerprint; that cross-check labels the draws as today's rule does; the
README's out-of-sample headline is the cross-check's; and the Lamport exchange probes
(``lamport_free.json``, ``lamport_rot.json``) are of today's kernels and say what
measurements/README.md says of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusim.measurements import kernel_fingerprint, model_fingerprint
from gpusim.samples import OUT_OF_SAMPLE, draws
from gpusim.uncertainty import bands_from
from kernels_ir.kernels import microbench as mb

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"
CROSSCHECK = json.loads((H100 / "crosscheck_fresh.json").read_text())


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


def test_error_bands_come_from_the_recorded_crosscheck_under_todays_model():
    bands = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h100"]
    assert bands["model_fingerprint"] == model_fingerprint()
    _close(bands, bands_from(CROSSCHECK, CROSSCHECK["speedup"], model_fingerprint()))


def test_the_crosscheck_labels_the_draws_as_today():
    today = {d.name: d.sample for d in draws(H100)}
    assert {d["draw"]: d["sample"] for d in CROSSCHECK["draws"]} == today
    assert OUT_OF_SAMPLE in today.values()


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


@pytest.mark.parametrize("record", ["lamport_free.json", "lamport_rot.json"])
def test_exchange_probes_are_of_todays_kernels(record):
    rec = json.loads((H100 / record).read_text())
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
        rec = json.loads((H100 / record).read_text())
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

    readme = (ROOT / "README.md").read_text()
    model, sim, ape = [], [], []
    for seed in (11, 12):
        rec = json.loads((H100 / f"crosscheck_s{seed}_previous_model.json").read_text())
        draw = f"fresh_2026-11-25_s{seed}"
        assert [d["draw"] for d in rec["draws"]] == [draw]
        assert "c7ab02a" in rec["command"]
        today = [r for r in CROSSCHECK["rows"] if r["draw"] == draw]
        assert {r["id"] for r in rec["rows"]} == {r["id"] for r in today}
        model += [r["model"]["ape"] for r in rec["speedup"]["rows"]]
        sim += [r["sim"]["ape"] for r in rec["speedup"]["rows"]]
        ape += [r["ape"] for r in rec["rows"]]
    assert (f"give {np.mean(model) * 100:.1f}% (model) and {np.mean(sim) * 100:.1f}% (sim)"
            in readme.replace("\n", " "))
    assert f"{np.mean(ape) * 100:.1f}% per case" in readme.replace("\n", " ")


def test_the_readme_quotes_the_bands_by_size_of_the_file():
    """README's "Bands by size": the thirds' edges, the CSR baseline's simulator bands of the
    smallest and largest third and the simulator's speedup bands are those of error_bands.json."""
    import math

    b = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h100"]
    text = " ".join((ROOT / "README.md").read_text().split())
    a, z = (math.ceil(e) for e in b["hidden_edges"])
    assert f"hidden <= {a - 1}, {a}-{z - 1} and >= {z}" in text
    csr = b["families"]["sim"]["csr-row-per-warp"]["by_hidden"]
    sp = b["speedup"]["sim"]["by_hidden"]

    def rng(x):
        return f"{x['ratio_p10']:.2f}-{x['ratio_p90']:.2f}"
    assert f"{rng(csr[0])} times its simulated time at hidden <= {a - 1}" in text
    assert f"{rng(csr[2])} times at hidden >= {z}" in text
    assert f"measured {rng(sp[2])} times the simulator's prediction ({rng(sp[0])} at" in text


def _contender_counts(rows, bands) -> tuple:
    """Over the layers of ``rows`` (crosscheck rows), ``(layers whose fastest measured
    persistent variant is among gpusim.uncertainty.contenders of the simulator's ranges under
    ``bands``, contender counts, variant counts)``."""
    from gpusim.uncertainty import contenders, for_hidden

    layers: dict = {}
    for r in rows:
        if r["kind"] in ("sparse_persistent", "dense_persistent"):
            layers.setdefault((r["draw"], r["hidden"], r["batch"], r["density"]), []).append(r)
    held, sizes, kernels = 0, [], []
    for rs in layers.values():
        rng, fam = {}, {}
        for r in rs:
            f, _ = for_hidden(bands["families"]["sim"][r["family"]], r["hidden"],
                              bands["hidden_edges"])
            rng[r["id"]] = (r["predicted_s"] * f["ratio_p10"], r["predicted_s"] * f["ratio_p90"])
            fam[r["id"]] = r["family"]
        cont = contenders(rng, family=fam.get)
        held += min(rs, key=lambda r: r["measured_s"])["id"] in cont
        sizes.append(len(cont))
        kernels.append(len(rs))
    return held, sizes, kernels


def test_the_readme_quotes_how_often_the_contenders_held_the_fastest():
    """README: over the out-of-sample layers, the kernel the GPU ran fastest was among the
    simulator's contenders (bands of the same layers, so in sample for the bands) in every layer;
    the sets' mean size."""
    import numpy as np

    b = json.loads((ROOT / "gpusim" / "specs" / "error_bands.json").read_text())["h100"]
    held, sizes, kernels = _contender_counts(
        [r for r in CROSSCHECK["rows"] if r["sample"] == OUT_OF_SAMPLE], b)
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"in {held} of {len(sizes)} out-of-sample layers the kernel the GPU ran fastest "
            f"was among them ({np.mean(sizes):.1f} of the {np.mean(kernels):.1f} persistent "
            "variants measured a layer, on average)") in text


def test_the_readme_judges_the_s11_s12_bands_on_s13():
    """README "The bands, judged out of sample": the bands of s11 + s12 alone (bands_from on
    those draws' rows) against s13's per-step ratios, speedups and fastest kernels."""
    import numpy as np

    old = ("fresh_2026-11-25_s11", "fresh_2026-11-25_s12")
    new = "fresh_2026-11-25_s13"
    cc = {**CROSSCHECK, "rows": [r for r in CROSSCHECK["rows"] if r["draw"] in old],
          "draws": [d for d in CROSSCHECK["draws"] if d["draw"] in old]}
    sp = {**CROSSCHECK["speedup"], "rows": [r for r in CROSSCHECK["speedup"]["rows"]
                                             if r["draw"] in old]}
    b = bands_from(cc, sp, model_fingerprint())
    assert b["layers"] == 32
    from gpusim.uncertainty import for_hidden

    def inside(x, band, hidden=None):
        if hidden is not None:
            band, _ = for_hidden(band, hidden, b["hidden_edges"])
        return band["ratio_p10"] <= x <= band["ratio_p90"]
    rows = [r for r in CROSSCHECK["rows"] if r["draw"] == new]
    by, whole = [], []
    for r in rows:
        f = b["families"]["sim"][r["family"]]
        x = r["measured_s"] / r["predicted_s"]
        by.append(inside(x, f, r["hidden"]))
        whole.append(inside(x, f))
    lays = [r for r in CROSSCHECK["speedup"]["rows"] if r["draw"] == new]
    s = b["speedup"]["sim"]
    sp_by = sum(inside(r["sim"]["ratio"], s, r["hidden"]) for r in lays)
    sp_whole = sum(inside(r["sim"]["ratio"], s) for r in lays)
    held, sizes, kernels = _contender_counts(rows, b)
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"inside the band in {np.mean(by) * 100:.0f}% of the {len(rows)} cases by size, "
            f"{np.mean(whole) * 100:.0f}% with the whole bands") in text
    assert (f"the speedups in {sp_by} of {len(lays)} layers by size, {sp_whole} of {len(lays)} "
            "with the whole band") in text
    assert (f"among the contenders in {held} of {len(sizes)} layers ({np.mean(sizes):.1f} of "
            f"{np.mean(kernels):.1f} variants)") in text
