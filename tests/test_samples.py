"""In sample / out of sample: the model fingerprint, the draw labels, the speedup per layer and
the error bands that ``gpusim predict`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.measurements import (
    FINGERPRINT_ALIASES,
    _python_meaning,
    fingerprint_is_current,
    fingerprints_at,
    model_fingerprint,
)
from gpusim.samples import IN_SAMPLE, OUT_OF_SAMPLE, draws, family
from gpusim.speedup_check import measured_layers, predict_name
from gpusim.uncertainty import annotate, bands_from, borrowed_bands, row_family
from kernels_ir.errors import InputError


def test_fingerprint_ignores_comments_docstrings_and_blank_lines():
    src = 'def f(x):\n    """doc"""\n    return x + 1  # one\n'
    same = 'def f(x):\n    """other doc,\n    two lines"""\n\n    # a comment\n    return x + 1\n'
    other = 'def f(x):\n    """doc"""\n    return x + 2\n'
    assert _python_meaning(src) == _python_meaning(same)
    assert _python_meaning(src) != _python_meaning(other)
    # a '#' inside a string is code, not a comment
    assert _python_meaning('s = "a#b"\n') != _python_meaning('s = "a"\n')


def test_fingerprint_follows_model_sources(tmp_path):
    for rel in ("gpusim/engine", "models", "kernels_ir/kernels", "gpusim/specs"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "gpusim/engine/unit.py").write_text("LATENCY = 4  # cycles\n")
    (tmp_path / "gpusim/specs/g.toml").write_text(
        '[params]\nclock_hz = { value = 1.0, source = "a" }\n')
    fp = model_fingerprint(tmp_path)
    (tmp_path / "gpusim/specs/g.toml").write_text(
        '[params]\nclock_hz = { value = 1.0, source = "a better citation" }\n')
    assert model_fingerprint(tmp_path) == fp          # a citation is not the model
    (tmp_path / "gpusim/engine/unit.py").write_text("LATENCY = 5  # cycles\n")
    assert model_fingerprint(tmp_path) != fp          # a mechanism is
    fp = model_fingerprint(tmp_path)
    groups = tmp_path / "gpusim/specs/g_l2_groups.json"
    groups.write_text('{"groups": [0, 1, 1, 0], "lines": 4}')
    assert model_fingerprint(tmp_path) != fp          # the measured data a spec names is too
    fp = model_fingerprint(tmp_path)
    groups.write_text('{\n "lines": 4,\n "groups": [0, 1, 1, 0]\n}')
    assert model_fingerprint(tmp_path) == fp          # ... by its values, not its formatting
    groups.write_text('{"groups": [0, 1, 0, 1], "lines": 4}')
    assert model_fingerprint(tmp_path) != fp
    fp = model_fingerprint(tmp_path)
    (tmp_path / "gpusim/specs/error_bands.json").write_text('{"bands": 1}')
    assert model_fingerprint(tmp_path) == fp          # the bands are measured, not the model


def test_fingerprint_per_gpu_ignores_the_other_gpus_specs(tmp_path):
    for rel in ("gpusim/engine", "gpusim/specs"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "gpusim/engine/unit.py").write_text("LATENCY = 4\n")
    spec = '[params]\nclock_hz = {{ value = {} }}\nl2_group_map = {{ value = "{}" }}\n'
    (tmp_path / "gpusim/specs/a.toml").write_text(spec.format(1.0, "a_l2_groups.json"))
    (tmp_path / "gpusim/specs/b.toml").write_text(spec.format(2.0, "a_l2_groups.json"))
    (tmp_path / "gpusim/specs/c.toml").write_text('[params]\nclock_hz = { value = 3.0 }\n')
    (tmp_path / "gpusim/specs/a_l2_groups.json").write_text('{"groups": [0, 1]}')
    every, a, b, c = (model_fingerprint(tmp_path, gpu=g) for g in (None, "a", "b", "c"))
    assert len({every, a, b, c}) == 4
    (tmp_path / "gpusim/specs/c.toml").write_text('[params]\nclock_hz = { value = 4.0 }\n')
    assert model_fingerprint(tmp_path, gpu="a") == a          # another GPU's value
    assert model_fingerprint(tmp_path, gpu="b") == b
    assert model_fingerprint(tmp_path, gpu="c") != c
    assert model_fingerprint(tmp_path) != every               # the all-spec one moves
    c = model_fingerprint(tmp_path, gpu="c")
    (tmp_path / "gpusim/specs/a_l2_groups.json").write_text('{"groups": [1, 0]}')
    assert model_fingerprint(tmp_path, gpu="b") != b          # a data file the spec names
    assert model_fingerprint(tmp_path, gpu="c") == c          # ... not named by c's spec
    (tmp_path / "gpusim/engine/unit.py").write_text("LATENCY = 5\n")
    assert model_fingerprint(tmp_path, gpu="a") != a          # a mechanism: every GPU
    with pytest.raises(InputError, match="gpu='z'.*accepted: a, b, c"):
        model_fingerprint(tmp_path, gpu="z")


def test_fingerprint_aliases_are_the_commits_fingerprints():
    """Every alias of an all-spec fingerprint (recorded by draws before the fingerprint was per
    GPU) is what :func:`fingerprints_at` computes from the commit it names."""
    import shutil
    import subprocess

    aliases = json.loads(FINGERPRINT_ALIASES.read_text())
    assert aliases
    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(root), "cat-file", "-e", next(iter(aliases.values()))["commit"]],
            capture_output=True).returncode:
        pytest.skip("needs the repository's git history")
    for every, alias in aliases.items():
        got = fingerprints_at(alias["commit"], root)
        assert got.pop("all") == every
        assert got == alias["per_gpu"]


def test_an_all_spec_fingerprint_is_read_through_its_alias(monkeypatch, tmp_path):
    import gpusim.measurements as gm

    now = {None: "new-all", "h100": "h100-now", "h200": "h200-now"}
    monkeypatch.setattr(gm, "model_fingerprint", lambda root=None, gpu=None: now[gpu])
    alias = tmp_path / "aliases.json"
    alias.write_text(json.dumps({"old-all": {"commit": "c", "per_gpu": {
        "h100": "h100-now", "h200": "h200-then"}}}))
    monkeypatch.setattr(gm, "FINGERPRINT_ALIASES", alias)
    assert fingerprint_is_current("new-all", None, "h100")     # nothing changed
    assert fingerprint_is_current("old-all", None, "h100")     # the H100's sources did not
    assert not fingerprint_is_current("old-all", None, "h200")  # the H200's did
    assert not fingerprint_is_current("other", None, "h100")
    assert fingerprint_is_current("h200-now", "h200", "h200")  # recorded per GPU
    assert not fingerprint_is_current("h100-now", "h200", "h200")
    assert not fingerprint_is_current("h100-now", "h100", "h200")  # another GPU's sources
    assert not fingerprint_is_current(None, None, "h100")
    alias.write_text(json.dumps({"old-all": {"commit": "c", "per_gpu": ["h100-now"]}}))
    with pytest.raises(InputError, match="per_gpu"):
        fingerprint_is_current("old-all", None, "h100")


def _fake_gpu_dir(tmp_path: Path, fingerprint: str) -> Path:
    d = tmp_path / "h100"
    d.mkdir()
    prov = {"gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": 13000,
            "cuda_runtime_version": 13020, "cupy_version": "14.2.0", "date": "2026-01-01",
            "command": "python3 measurements/campaign.py"}
    (d / "campaign.json").write_text(json.dumps(
        {"format_version": 2, "provenance": prov, "steps": [128, 32], "cases": []}))
    for name, fp in (("fresh_2026-01-01_s1", fingerprint), ("fresh_2026-01-02_s2", "0" * 64)):
        (d / name).mkdir()
        (d / name / "campaign.json").write_text(json.dumps(
            {"format_version": 2, "provenance": prov, "steps": [128, 32], "cases": [],
             "fresh": {"seed": 1, "n": 0, "layers": [], "model_fingerprint": fp}}))
    return d


def test_draw_labels(tmp_path):
    d = _fake_gpu_dir(tmp_path, "f" * 64)
    got = {g.name: g.sample for g in draws(d, fingerprint="f" * 64)}
    assert got == {"campaign": IN_SAMPLE, "fresh_2026-01-01_s1": OUT_OF_SAMPLE,
                   "fresh_2026-01-02_s2": IN_SAMPLE}
    assert [g.name for g in draws(d, include_fresh=False)] == ["campaign"]
    # a draw is labelled by today's model: once the model changes, it is in sample
    assert all(g.sample == IN_SAMPLE for g in draws(d, fingerprint="e" * 64))
    with pytest.raises(InputError, match="does not exist"):
        draws(tmp_path / "nowhere")
    (d / "fresh_2026-01-01_s1" / "campaign.json").write_text(json.dumps(
        {"format_version": 2, "provenance": json.loads((d / "campaign.json").read_text())[
            "provenance"], "steps": [128, 32], "cases": [], "fresh": {"model_fingerprint": 3}}))
    with pytest.raises(InputError, match="model_fingerprint"):
        draws(d)
    (d / "fresh_2026-01-01_s1" / "campaign.json").write_text(json.dumps(
        {"format_version": 2, "provenance": json.loads((d / "campaign.json").read_text())[
            "provenance"], "steps": [128, 32], "cases": [],
         "fresh": {"model_fingerprint": "f" * 64, "fingerprint_gpu": "h300"}}))
    with pytest.raises(InputError, match="fresh_2026-01-01_s1.*fingerprint_gpu='h300'"):
        draws(d)


def _case(kind, h=512, b=2, d=0.1, t=1e-6, **kw):
    return {"id": f"{kind}-{kw}", "kind": kind, "hidden": h, "batch": b, "density": d,
            "status": "ok", "result": {"per_step_s": t, "values_ok": True}, **kw}


def test_measured_speedup_uses_predicts_kernels():
    sp = [_case("sparse_persistent", sync=s, wide_loads=w, layout=lay, t=t)
          for (s, w, lay), t in ((("barrier", False, "naive"), 3e-6),
                                 (("barrier", True, "naive"), 2e-6),
                                 (("barrier", True, "optimal"), 1.5e-6),
                                 (("lamport", True, "optimal"), 1.2e-6),
                                 (("lamport", True, "naive"), 0.5e-6))]   # not a predict row
    base = [_case("csr", t=3.6e-6), _case("cublas", t=10e-6), _case("cusparse", t=12e-6)]
    layers = measured_layers(sp + base)
    times = layers[(512, 2, 0.1, "rnn", "fp32")]
    assert set(times) == {"sparse-naive", "sparse-wide", "sparse-bank", "sparse-lamport",
                          "csr-row-per-warp", "cublas", "cusparse"}
    assert predict_name(sp[-1]) is None
    # a layer whose CSR kernel failed is not compared (its next best would be too slow)
    assert measured_layers(sp + base[1:]) == {}
    bad = dict(base[0], result={"per_step_s": 1e-9, "values_ok": False})
    assert measured_layers(sp + [bad] + base[1:]) == {}


def test_speedup_of_a_gated_layer_compares_the_kernels_measured_on_it():
    """A gated / fp16 layer has no CSR case (the IR's CSR kernel is fp32 RNN): it is compared
    over cuBLAS and cuSPARSE, and predict's answer is taken over the same kernels."""
    from types import SimpleNamespace

    from gpusim.speedup_check import _predicted

    kw = {"cell": "lstm", "dtype": "fp16"}
    sp = [_case("sparse_persistent", sync=s, wide_loads=w, layout=lay, t=t, **kw)
          for (s, w, lay), t in ((("barrier", False, "naive"), 3e-6),
                                 (("barrier", True, "naive"), 2e-6),
                                 (("barrier", True, "optimal"), 1.5e-6),
                                 (("lamport", True, "optimal"), 1.2e-6))]
    base = [_case("cublas", t=10e-6, **kw), _case("cusparse", t=12e-6, **kw)]
    times = measured_layers(sp + base)[(512, 2, 0.1, "lstm", "fp16")]
    assert "csr-row-per-warp" not in times
    assert measured_layers(sp + base[:1]) == {}          # cuSPARSE missing: not compared
    row = lambda n, t: SimpleNamespace(name=n, per_step_s=t)  # noqa: E731
    rep = SimpleNamespace(cell="lstm", dtype="fp16", best_persistent="sparse-bank",
                          next_best="csr-row-per-warp", speedup=1.1,
                          rows=[row("sparse-naive", 4e-6), row("sparse-wide", 3e-6),
                                row("sparse-bank", 2e-6), row("sparse-lamport", 2.5e-6),
                                row("csr-row-per-warp", 2.2e-6), row("cublas", 8e-6),
                                row("cusparse", None)])
    assert _predicted(rep, times) == ("sparse-bank", "cublas", 4.0)
    rnn = SimpleNamespace(**{**vars(rep), "cell": "rnn", "dtype": "fp32"})
    assert _predicted(rnn, times) == ("sparse-bank", "csr-row-per-warp", 1.1)


def test_families_match_between_cases_and_predict_rows():
    assert family(_case("sparse_persistent", sync="lamport")) == row_family("sparse-lamport")
    assert family(_case("sparse_persistent", sync="barrier")) == row_family("sparse-bank")
    assert family(_case("dense_persistent")) == row_family("dense-persistent")
    for kind, name in (("csr", "csr-row-per-warp"), ("cublas", "cublas"),
                       ("cusparse", "cusparse")):
        assert family(_case(kind)) == row_family(name)


def _summaries():
    rows = []
    for fam, src in (("sparse lamport", "simulator"), ("cublas", "analytical")):
        for k in range(10):
            r = {"sample": OUT_OF_SAMPLE, "family": fam, "source": src, "draw": "fresh_x_s1",
                 "measured_s": 1.0 + 0.1 * k, "predicted_s": 1.0, "hidden": 256 * (k + 1)}
            if src == "simulator":
                r["model_s"] = 2.0
            rows.append(r)
    cc = {"rows": rows, "gpu": "NVIDIA H100", "draws": [
        {"path": "m/fresh_2026-11-23_s2", "sample": OUT_OF_SAMPLE}]}
    lays = [{"sample": OUT_OF_SAMPLE, "draw": "fresh_x_s1", "hidden": 256 * (k + 1),
             "batch": 4, "density": 0.05,
             "model": {"ratio": 1.0 + 0.05 * k, "ape": None},
             "sim": {"ratio": 1.0, "ape": None}} for k in range(10)]
    return cc, {"engines": ["model", "sim"], "rows": lays}


def test_bands_and_annotation():
    from types import SimpleNamespace

    cc, sp = _summaries()
    b = bands_from(cc, sp, model_fingerprint())
    assert b["layers"] == 10 and b["ranges"]["hidden"] == [256, 2560]
    lam = b["families"]["sim"]["sparse lamport"]
    # ten ratios 1.0 .. 1.9: the 80% interval's ends are the lowest and the highest (k = 1)
    assert b["rule"] == "ranks"
    assert lam["ratio_p10"] == pytest.approx(1.0) and lam["ratio_p90"] == pytest.approx(1.9)
    assert b["families"]["model"]["sparse lamport"]["ratio_p90"] == pytest.approx(0.95)
    assert b["families"]["sim"]["cublas"] == b["families"]["model"]["cublas"]
    # the bands before 2026-12-01: numpy's 10th and 90th percentiles
    old = bands_from(cc, sp, model_fingerprint(), rule="percentile")["families"]["sim"]
    assert old["sparse lamport"]["ratio_p10"] == pytest.approx(1.09)
    assert old["sparse lamport"]["ratio_p90"] == pytest.approx(1.81)
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=2e-6)
    rep = SimpleNamespace(gpu="h100", hidden=1000, batch=4, density=0.05, cell="rnn",
                          dtype="fp32", engine="sim", rows=[row], speedup=2.0)
    u = annotate(rep, {"h100": b})
    assert u.rows["sparse-lamport"] == pytest.approx((2.0e-6, 3.8e-6))
    assert "80% prediction interval" in u.basis
    assert u.speedup == pytest.approx((2.0, 2.0))
    assert u.notes == ()
    far = SimpleNamespace(**{**vars(rep), "gpu": "v100", "hidden": 9000, "batch": 8})
    notes = " ".join(annotate(far, {"h100": b}).notes)
    assert "no v100 was ever measured" in notes and "hidden=9000" in notes
    assert "batch=8" in notes
    assert annotate(rep, {}).rows == {}
    with pytest.raises(ValueError, match="no out-of-sample"):
        bands_from({**cc, "rows": []}, sp, "x")
    with pytest.raises(ValueError, match="band rule 'p5'"):
        bands_from(cc, sp, "x", rule="p5")


def test_band_ends_are_the_distribution_free_80_percent_interval():
    """``k = max(1, floor(0.1 (n + 1)))`` from each end: 9 to 18 values give the lowest and the
    highest, 19 to 28 the second, 29 the third; such an interval holds a further value drawn
    from the same distribution with probability (n + 1 - 2k) / (n + 1), at least 0.8 (checked
    here by drawing); the percentile rule's interval holds less at these sizes."""
    from gpusim.uncertainty import band_ends

    assert band_ends(range(9)) == (0, 8) and band_ends(range(18)) == (0, 17)
    assert band_ends(range(19)) == (1, 17) and band_ends(range(29)) == (2, 26)
    assert band_ends([3.0]) == (3.0, 3.0) and band_ends([2.0, 1.0]) == (1.0, 2.0)
    rng = np.random.default_rng(5)
    for n in (9, 15, 21, 30):
        hits = {"ranks": 0, "percentile": 0}
        for _ in range(4000):
            x = rng.standard_normal(n + 1)
            for rule in hits:
                lo, hi = band_ends(x[:n], rule)
                hits[rule] += lo <= x[n] <= hi
        k = max(1, (n + 1) // 10)
        assert hits["ranks"] / 4000 == pytest.approx((n + 1 - 2 * k) / (n + 1), abs=0.025)
        assert hits["ranks"] / 4000 > 0.77 and hits["percentile"] < hits["ranks"]
    with pytest.raises(ValueError, match="no value"):
        band_ends([])


def test_a_speedup_band_of_few_layers_says_what_it_holds():
    """A speedup band of fewer than MIN_BIN (9) layers cannot hold 80%: ``predict`` says what it
    holds, (n - 1) / (n + 1)."""
    from types import SimpleNamespace

    cc, sp = _summaries()
    few = {**sp, "rows": sp["rows"][:5]}
    b = bands_from(cc, few, model_fingerprint())
    assert b["speedup"]["model"]["n"] == 5
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=2e-6)
    rep = SimpleNamespace(gpu="h100", hidden=1000, batch=4, density=0.05, cell="rnn",
                          dtype="fp32", engine="model", rows=[row], speedup=2.0)
    notes = " ".join(annotate(rep, {"h100": b}).notes)
    assert "rests on 5 out-of-sample layers" in notes and "probability 67%" in notes
    assert "rests on" not in " ".join(annotate(rep, {"h100": bands_from(
        cc, sp, model_fingerprint())}).notes)


def test_a_gpu_never_measured_borrows_bands_that_describe_todays_model():
    """The V100 takes the H100's bands while they are current, another GPU's current bands
    once the H100's describe an earlier model, and the H100's when no GPU's are current."""
    cc, sp = _summaries()
    now = bands_from(cc, sp, model_fingerprint(gpu="h200"))
    now = {**now, "fingerprint_gpu": "h200"}
    old = {**now, "model_fingerprint": "0" * 64, "fingerprint_gpu": "h100"}
    assert borrowed_bands({"h100": old, "h200": now}) == "h200"
    assert borrowed_bands({"h100": old, "h200": {**now, "model_fingerprint": "1" * 64}}) == "h100"
    h100_now = {**now, "model_fingerprint": model_fingerprint(gpu="h100"),
                "fingerprint_gpu": "h100"}
    assert borrowed_bands({"h100": h100_now, "h200": now}) == "h100"
    from types import SimpleNamespace
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=2e-6)
    rep = SimpleNamespace(gpu="v100", hidden=1000, batch=4, density=0.05, cell="rnn",
                          dtype="fp32", engine="sim", rows=[row], speedup=2.0)
    notes = " ".join(annotate(rep, {"h100": old, "h200": now}).notes)
    assert "the bands are the h200's" in notes and "the model changed" not in notes


def test_gated_and_fp16_layers_get_their_own_speedup_band():
    """The gated / fp16 layers of the draws stay out of the RNN bands; their measured / predicted
    speedups make a band of their own, which predict uses (and names) for a gated or fp16
    layer, while an RNN fp32 layer keeps the RNN band."""
    from types import SimpleNamespace

    cc, sp = _summaries()
    b0 = bands_from(cc, sp, model_fingerprint())
    assert b0["cells"] is None
    gated = [{"sample": OUT_OF_SAMPLE, "draw": "fresh_x_s2", "hidden": 512, "batch": 2,
              "density": 0.1, "cell": "lstm", "dtype": "fp16",
              "model": {"ratio": 0.7 + 0.02 * k, "ape": None},
              "sim": {"ratio": 0.8, "ape": None}} for k in range(10)]
    odd = {**cc, "rows": cc["rows"] + [{**cc["rows"][0], "cell": "lstm", "measured_s": 99.0}]}
    b = bands_from(odd, {**sp, "rows": sp["rows"] + gated}, model_fingerprint())
    assert {k: v for k, v in b.items() if k not in ("cells", "named")} == \
        {k: v for k, v in b0.items() if k not in ("cells", "named")}   # the RNN bands unchanged
    assert b["named"]["rnn"] == b0["named"]["rnn"] and "cells" in b["named"]
    assert b["cells"]["layers"] == 10 and b["cells"]["kinds"] == ["lstm fp16"]
    assert b["cells"]["speedup"]["sim"]["ratio_p10"] == pytest.approx(0.8)
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=2e-6)
    rep = SimpleNamespace(gpu="h100", hidden=1000, batch=4, density=0.05, cell="lstm",
                          dtype="fp32", engine="sim", rows=[row], speedup=2.0)
    u = annotate(rep, {"h100": b})
    assert u.speedup == pytest.approx((1.6, 1.6))
    assert "gated and fp16 layers (fresh_x_s2)" in " ".join(u.notes)
    rnn = annotate(SimpleNamespace(**{**vars(rep), "cell": "rnn"}), {"h100": b})
    assert rnn.speedup == pytest.approx((2.0, 2.0)) and rnn.notes == ()
    # without a gated band the old note stays: outside what was validated
    assert "validated rnn fp32" in " ".join(annotate(rep, {"h100": b0}).notes)


def test_bands_per_third_of_the_hidden_sizes():
    """The layers' hidden sizes 256..2560 split at their log terciles; a third with MIN_BIN (9)
    values or more keeps a band of its own and annotate uses the layer's third; with fewer it
    falls back to the whole band. A speedup range that excludes the point says so."""
    from types import SimpleNamespace

    cc, sp = _summaries()
    b = bands_from(cc, sp, model_fingerprint())
    lo, hi = b["hidden_edges"]
    assert 256 < lo < hi < 2560
    assert b["families"]["sim"]["sparse lamport"]["by_hidden"] == [None, None, None]  # 3-4 each
    many = {**cc, "rows": [dict(r, hidden=h) for r in cc["rows"] for h in (300, 2500)]}
    lays = [dict(r, model={"ratio": 0.5 if r["hidden"] < 1000 else 2.0, "ape": None})
            for r in sp["rows"] for _ in range(3)]
    b = bands_from(many, {**sp, "rows": lays}, model_fingerprint())
    top = b["families"]["sim"]["sparse lamport"]["by_hidden"]
    assert top[1] is None and top[0]["n"] == top[2]["n"] == 10
    small = b["speedup"]["model"]["by_hidden"][0]
    assert small["ratio_p10"] == small["ratio_p90"] == pytest.approx(0.5)
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=1e-6)
    rep = SimpleNamespace(gpu="h100", hidden=300, batch=4, density=0.05, cell="rnn",
                          dtype="fp32", engine="model", rows=[row], speedup=2.0)
    u = annotate(rep, {"h100": b})
    assert u.speedup == pytest.approx((1.0, 1.0))
    assert "third of the sizes" in u.basis
    assert any("lies below the prediction" in n for n in u.notes)
    lo, hi = b["hidden_edges"]
    whole = b["speedup"]["model"]
    for k, h in enumerate((int(lo) - 1, int((lo * hi) ** 0.5), int(hi) + 1)):
        band = whole["by_hidden"][k] or whole
        got = annotate(SimpleNamespace(**{**vars(rep), "hidden": h}), {"h100": b}).speedup
        assert got == pytest.approx((2.0 * band["ratio_p10"], 2.0 * band["ratio_p90"])), k
    mid = sum(lo <= r["hidden"] < hi for r in lays)        # a third keeps a band iff >= 9
    assert (whole["by_hidden"][1] is None) == (mid < 9)
    assert whole["by_hidden"][1] is None or whole["by_hidden"][1]["n"] == mid


def test_fingerprint_meaning_cache_is_only_a_cache(tmp_path, monkeypatch):
    import gpusim.measurements as gm

    src = tmp_path / "src"
    (src / "models").mkdir(parents=True)
    (src / "models/m.py").write_text('"""doc"""\nX = 1  # note\n')
    monkeypatch.setenv("GPUSIM_CACHE_DIR", str(tmp_path / "cache"))
    gm._fingerprint.cache_clear()
    cold = model_fingerprint(src)
    cache = gm._meaning_cache_file()
    assert cache.exists()
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) == cold                  # read back from the cache
    # the cache is really read: a poisoned entry (same key, other meaning) changes the answer
    entries = json.loads(cache.read_text())
    assert len(entries) == 1
    cache.write_text(json.dumps({k: "X = 999" for k in entries}))
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) != cold
    # ... and its keys name how meanings are computed: another meaning function misses them
    monkeypatch.setattr(gm, "_meaning_salt", lambda: b"another meaning function")
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) == cold
    monkeypatch.undo()
    monkeypatch.setenv("GPUSIM_CACHE_DIR", str(tmp_path / "cache"))
    # without source files (a zipped install) the salt falls back to the bytecode
    import inspect

    def no_source(obj):
        raise OSError("could not get source code")

    gm._meaning_salt.cache_clear()
    monkeypatch.setattr(inspect, "getsource", no_source)
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) == cold
    monkeypatch.undo()
    monkeypatch.setenv("GPUSIM_CACHE_DIR", str(tmp_path / "cache"))
    gm._meaning_salt.cache_clear()
    cache.write_text("{not json")
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) == cold                  # a broken cache is recomputed
    (src / "models/m.py").write_text('"""doc"""\nX = 2  # note\n')
    gm._fingerprint.cache_clear()
    assert model_fingerprint(src) != cold                  # keyed by the file's text
    gm._fingerprint.cache_clear()


def test_contenders_are_the_persistent_kernels_whose_band_reaches_the_best():
    from gpusim.uncertainty import contenders

    rows = {"sparse-bank": (1.0, 1.2), "sparse-lamport": (0.9, 1.5), "sparse-wide": (1.21, 1.4),
            "dense-persistent": (1.1, 1.3), "csr-row-per-warp": (0.5, 0.6)}
    assert contenders(rows) == ("sparse-lamport", "sparse-bank", "dense-persistent")
    assert contenders({"cublas": (1, 2)}) == ()
    assert contenders({"sparse-bank": (1.0, 1.2)}) == ("sparse-bank",)


def test_named_slowdown_is_what_following_the_prediction_costs():
    """``named_slowdown``: the measured time of the kernel an engine names fastest over the
    measured fastest, less 1; 0 when it named the fastest, None when it named no measured
    kernel; the summary counts the layers within 5% and averages the slowdowns."""
    from gpusim.speedup_check import _speedup_stats, named_slowdown

    times = {"sparse-bank": 2.0e-6, "sparse-lamport": 2.08e-6, "csr-row-per-warp": 3.0e-6}

    def row(named):
        return {"measured": {"fastest": "sparse-bank", "times_s": times},
                "sim": {"fastest": named, "ape": 0.1, "ratio": 1.0, "fastest_named":
                        named == "sparse-bank", "persistent_named": True}}

    assert named_slowdown(row("sparse-bank"), "sim") == 0
    assert named_slowdown(row("sparse-lamport"), "sim") == pytest.approx(0.04)
    assert named_slowdown(row("csr-row-per-warp"), "sim") == pytest.approx(0.5)
    assert named_slowdown(row("cublas"), "sim") is None        # not measured on this layer
    st = _speedup_stats([row("sparse-bank"), row("sparse-lamport"), row("csr-row-per-warp"),
                         row("cublas")], ("sim",))["sim"]
    assert st["fastest_named"] == 1 and st["named_within_5pct"] == 2
    assert st["named_slowdown_mean"] == pytest.approx(0.54 / 3)
    assert st["named_slowdown_max"] == pytest.approx(0.5)


def test_predict_says_how_often_its_pick_was_the_gpus_fastest():
    """The bands carry, per engine, in how many out-of-sample layers it named the GPU's fastest
    kernel and how often its pick ran within 5%; ``annotate`` says so in a note."""
    from types import SimpleNamespace

    cc, sp = _summaries()
    times = {"sparse-bank": 1.0, "sparse-lamport": 1.03, "dense-persistent": 1.5}
    for k, r in enumerate(sp["rows"]):
        r["measured"] = {"fastest": "sparse-bank", "times_s": times}
        pick = ("sparse-bank", "sparse-lamport", "dense-persistent")[k % 3] if k < 9 \
            else "sparse-bank"
        for eng in ("model", "sim"):
            r[eng].update(ape=0.1, fastest=pick, fastest_named=pick == "sparse-bank",
                          persistent_named=True)
    b = bands_from(cc, sp, model_fingerprint())
    nm = b["named"]["rnn"]["sim"]
    assert (nm["layers"], nm["fastest"], nm["within_5pct"]) == (10, 4, 7)
    assert nm["slowdown_mean"] == pytest.approx((3 * 0.03 + 3 * 0.5) / 10)
    row = SimpleNamespace(name="sparse-lamport", engine="sim", per_step_s=2e-6)
    rep = SimpleNamespace(gpu="h100", hidden=1000, batch=4, density=0.05, cell="rnn",
                          dtype="fp32", engine="sim", rows=[row], speedup=2.0)
    notes = " ".join(annotate(rep, {"h100": b}).notes)
    assert ("--engine sim named the kernel the GPU ran fastest in 4 of 10; the one it named ran "
            "within 5% of it in 7 (15.9% slower on average)") in notes


def test_bands_are_written_for_one_gpu_only():
    from gpusim.cli.crosscheck import _write_bands

    with pytest.raises(InputError, match="covers the GPUs h100, h200"):
        _write_bands({"spec": "h100, h200", "speedup": {}})
