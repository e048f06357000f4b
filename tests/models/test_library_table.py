"""The library baselines priced from the grid measured on the H200 (measurements/library_grid.py,
gpusim/specs/h200_library_table.json, models/analytical/library_table.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusim.calibrate import (
    GRID_RECORDS,
    grid_failures,
    library_table_from_grid,
    table_leave_one_out,
)
from gpusim.measurements import load_json, model_fingerprint
from gpusim.specs import SpecError, load_library_table, load_spec, parse_spec
from models.analytical.library_table import table_step_s
from models.analytical.predict import predict_many

ROOT = Path(__file__).resolve().parents[2]
H200 = load_spec("h200")
RECORDS = {lib: ROOT / "measurements" / "h200" / name for lib, name in GRID_RECORDS.items()}


@pytest.fixture(scope="module")
def table():
    return load_library_table(H200.library_table)


def test_the_table_is_the_recorded_grid():
    """The table beside the spec is what ``gpusim.calibrate --library-table h200`` makes of the
    four recorded grids (fp32 and fp16 paths), value for value."""
    recs = {lib: load_json(p) for lib, p in RECORDS.items()}
    made = library_table_from_grid(recs, gpu="h200", records=tuple(
        f"measurements/h200/{p.name}" for p in RECORDS.values()))
    have = json.loads((ROOT / "gpusim" / "specs" / H200.library_table).read_text())
    assert made == have


def test_the_grid_was_measured_as_the_campaign_measures():
    """Every grid point has its values checked against the float64 reference, five raw repeats,
    a positive step, and the grid is complete: cuBLAS on every (cell, hidden, batch) of the
    script's grid, cuSPARSE on every density too. fp32 points all pass; an fp16 point either
    passes the campaign's fp16 tolerance or is recorded as having failed it (a large product
    rounded in fp16), and is then missing from the table."""
    sys.path.insert(0, str(ROOT / "measurements"))
    import library_grid as lg

    from gpusim.backends.baselines import FP16_TOLERANCE

    for key, path in RECORDS.items():
        lib, _, dtype = key.partition("_")
        rec = load_json(path)
        assert rec["library"] == lib and rec.get("dtype", "fp32") == (dtype or "fp32")
        assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
        got = {(p["cell"], p["hidden"], p["batch"], p["density"]) for p in rec["points"]}
        failed = grid_failures(rec)
        assert not got & failed and got | failed == set(lg.GRID[lib])
        assert not failed if not dtype else len(failed) < 0.1 * len(got)
        for why in rec["errors"].values():
            assert "values differ from the float64 reference" in why
            assert float(why.split("max_rel_err=")[1].split()[0]) > FP16_TOLERANCE
        for p in rec["points"]:
            assert p["max_rel_err"] <= (FP16_TOLERANCE if dtype else 1e-3)
            assert len(p["per_step_raw_s"]) == lg.REPEATS
            assert 1e-6 < p["per_step_s"] < 1e-2


def test_the_grid_is_disjoint_from_every_campaign():
    sys.path.insert(0, str(ROOT / "measurements"))
    import library_grid as lg

    from measurements.campaign import recorded_layers, seen_layers

    grid = {(n, b, d) for pts in lg.GRID.values() for _, n, b, d in pts}
    # one collision is recorded: the fresh draw s210 drew a grid layer, before the draws came to
    # exclude the grid's layers (measurements.campaign.seen_layers)
    assert grid & recorded_layers() == {(192, 1, 0.0103)}
    assert grid <= seen_layers()


def test_interpolation_hits_the_grid_and_stays_between_neighbours(table):
    hid, _, t = table["cublas"]["rnn"][1]
    assert np.allclose(table_step_s(table, "cublas", "rnn", 1, hid, 0.1), t, rtol=1e-12)
    mid = np.sqrt(hid[:-1] * hid[1:])           # halfway in log: the geometric mean of the times
    got = table_step_s(table, "cublas", "rnn", 1, mid, 0.1)
    assert np.allclose(got, np.sqrt(t[:-1] * t[1:]), rtol=1e-9)
    hid, dens, t = table["cusparse"]["lstm"][4]
    d = 0.5 * (dens[0] + dens[1])                # linear in the density at a grid size
    got = table_step_s(table, "cusparse", "lstm", 4, [hid[2]], [d])[0]
    assert got == pytest.approx(0.5 * (t[2, 0] + t[2, 1]), rel=1e-12)


def test_outside_the_grid_is_nan(table):
    hid, dens, _ = table["cusparse"]["rnn"][2]
    out = table_step_s(table, "cusparse", "rnn", 2, [hid[0] - 8, hid[-1] + 8, hid[1], hid[1]],
                       [0.1, 0.1, dens[0] / 2, min(1.0, dens[-1] * 1.5)])
    assert np.isnan(out).all()
    assert np.isnan(table_step_s(table, "cublas", "rnn", 3, [1000], [0.1])).all()   # batch 3


def test_the_model_uses_the_grid_where_it_covers_the_layer():
    """Inside the grid the baselines are the interpolated measurements (engine label 'model
    (measured grid)'), with fp32 or fp16 weights from their own grids; sizes beyond the grid,
    points beside an fp16 point that failed its values check and a spec without a grid keep
    the fitted classes."""
    for dtype in ("fp32", "fp16"):
        inside = predict_many(H200, [1500, 100, 1500], 2, 0.05, dtype=dtype,
                              kernels=["cublas", "cusparse"])
        bare = predict_many(dataclasses.replace(H200, library_table=""), [1500, 100, 1500], 2,
                            0.05, dtype=dtype, kernels=["cublas", "cusparse"])
        for name in ("cublas", "cusparse"):
            grid = inside[name].breakdown["measured_grid_s"]
            assert grid[0] > 0 and grid[1] == 0            # hidden 100 is below the grid
            assert inside[name].per_step_s[0] == grid[0]
            assert inside[name].per_step_s[1] == bare[name].per_step_s[1]
            assert inside[name].per_step_s[0] != bare[name].per_step_s[0]
    # cuSPARSE fp16 failed its values check at hidden 8192, batch 2, density 0.497
    hole = predict_many(H200, 7000, 2, 0.3, dtype="fp16", kernels=["cusparse"])["cusparse"]
    assert hole.breakdown["measured_grid_s"][0] == 0
    fp32 = predict_many(H200, 7000, 2, 0.3, kernels=["cusparse"])["cusparse"]
    assert fp32.breakdown["measured_grid_s"][0] > 0


def test_the_spec_quotes_the_leave_one_out_figures(table):
    loo = table_leave_one_out(table)
    src = dict((k, s) for k, s, _, _ in H200.sources)["library.table"]
    for lib, name in (("cublas", "cuBLAS"), ("cusparse", "cuSPARSE"),
                      ("cublas_fp16", "cuBLAS fp16"), ("cusparse_fp16", "cuSPARSE fp16")):
        m = re.search(rf"{name} MAPE ([\d.]+)%", src)
        assert m and float(m.group(1)) == pytest.approx(100 * loo[lib]["mape"], abs=0.05)
        assert loo[lib]["points"] > 100 and loo[lib]["mape"] < 0.1


def _spec_doc(table_entry: dict | None, where: str = "library") -> dict:
    import tomllib

    doc = tomllib.loads((ROOT / "gpusim" / "specs" / "h200.toml").read_text())
    doc["library"].pop("table", None)
    if table_entry is not None:
        doc[where]["table"] = table_entry
    return doc


def test_a_bad_table_entry_is_one_clear_error():
    good = {"value": "h200_library_table.json", "unit": "file", "type": "C",
            "source": "measured", "calibration": "measurements/h200/x.json"}
    assert parse_spec(_spec_doc(good)).library_table == "h200_library_table.json"
    assert parse_spec(_spec_doc(None)).library_table == ""
    for bad, words in ((dict(good, value="h100_l2_groups.json"), "_library_table.json"),
                       (dict(good, value="../h200_library_table.json"), "_library_table.json"),
                       (dict(good, unit="s"), "unit"), (dict(good, source=""), "source")):
        with pytest.raises(SpecError, match=re.escape(words)):
            parse_spec(_spec_doc(bad))
    with pytest.raises(SpecError, match="library_fp16"):
        parse_spec(_spec_doc(good, "library_fp16"))


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.pop("cusparse"), "no 'cusparse' table"),
    (lambda d: d["cublas"]["rnn"]["1"]["hidden"].reverse(), "increasing"),
    (lambda d: d["cublas"]["rnn"]["1"]["per_step_s"].__setitem__(0, -1.0), "positive"),
    (lambda d: d["cusparse"]["rnn"]["2"]["per_step_s"].pop(), "positive"),
    (lambda d: d["cublas"].__setitem__("tanh", {}), "cell 'tanh'"),
    (lambda d: d["cusparse"]["gru"]["4"].__setitem__("density", [0.5, 0.1, 0.01]), "density"),
    (lambda d: d["cublas_fp16"]["rnn"]["1"].__setitem__("per_step_s", [None] * len(
        d["cublas_fp16"]["rnn"]["1"]["hidden"])), "positive"),
    (lambda d: d["cusparse_fp16"]["rnn"]["2"]["per_step_s"][0].__setitem__(0, 0.0), "null"),
])
def test_a_bad_table_file_is_one_clear_error(tmp_path, monkeypatch, edit, words):
    import gpusim.specs as specs

    doc = json.loads((ROOT / "gpusim" / "specs" / H200.library_table).read_text())
    edit(doc)
    (tmp_path / "bad_library_table.json").write_text(json.dumps(doc))
    monkeypatch.setattr(specs, "SPEC_DIR", tmp_path)
    with pytest.raises(SpecError, match=re.escape(words)):
        specs.load_library_table.__wrapped__("bad_library_table.json")
    (tmp_path / "broken_library_table.json").write_text("{")
    with pytest.raises(SpecError, match="unreadable"):
        specs.load_library_table.__wrapped__("broken_library_table.json")


def test_the_table_is_fingerprinted(tmp_path):
    """Changing a measured step time changes the H200's fingerprint (its draws go in sample),
    not the H100's (its spec names no grid)."""
    root = ROOT
    copy = tmp_path / "repo"
    for rel in ("gpusim", "models", "kernels_ir"):
        shutil.copytree(root / rel, copy / rel, ignore=shutil.ignore_patterns("__pycache__"))
    before = {g: model_fingerprint(copy, gpu=g) for g in ("h200", "h100")}
    path = copy / "gpusim" / "specs" / H200.library_table
    doc = json.loads(path.read_text())
    doc["cublas"]["rnn"]["1"]["per_step_s"][3] *= 1.5
    path.write_text(json.dumps(doc, indent=1))
    assert model_fingerprint(copy, gpu="h200") != before["h200"]
    assert model_fingerprint(copy, gpu="h100") == before["h100"]


def test_specs_names_the_grid(capsys):
    from gpusim.cli import main

    assert main(["specs", "--gpu", "h200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["library_table"]["value"] == "h200_library_table.json"
    assert doc["library_table"]["source"].startswith("[C] step times of cuBLAS and cuSPARSE")
    assert main(["specs", "--gpu", "h200"]) == 0
    assert "h200_library_table.json" in capsys.readouterr().out
    assert main(["specs", "--gpu", "h100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["library_table"] is None


def test_the_readmes_quote_the_check():
    """measurements/README.md's table (fp32 and fp16 rows) and the out-of-sample figures of the
    README are what ``measurements/library_grid.py --check h200`` computes from the merged H200
    record."""
    sys.path.insert(0, str(ROOT / "measurements"))
    import library_grid as lg

    res = lg.check("h200")
    lib, cells = res["libraries"], res["cells"]
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    text = (ROOT / "measurements" / "README.md").read_text()
    names = (("cublas", "cuBLAS"), ("cusparse", "cuSPARSE"), ("cublas_fp16", "cuBLAS fp16"),
             ("cusparse_fp16", "cuSPARSE fp16"))
    for kind, name in names:
        row = " | ".join(f"{pct(v['classes'])} / {pct(v['grid'])} ({v['rows']})" for v in
                         (lib[f"in sample | {kind} | {c}"] for c in ("rnn", "lstm", "gru")))
        assert f"| {name} | {row} |" in text
    readme = (ROOT / "README.md").read_text()
    for kind, name in names:
        out = [lib[k] for c in ("rnn", "lstm", "gru")
               if (k := f"out of sample | {kind} | {c}") in lib]     # a class may have none
        n = sum(v["rows"] for v in out)
        mean = {m: sum(v[m] * v["rows"] for v in out) / n for m in ("classes", "grid")}
        # s211-s214: 76 fp32 rows each; fp16 20 each
        assert n == {"cublas": 76, "cusparse": 76, "cublas_fp16": 20, "cusparse_fp16": 20}[kind]
        assert f"{name} {pct(mean['classes'])} / {pct(mean['grid'])}" in readme
    for eng in ("model", "sim"):
        c = cells[f"out of sample | {eng}"]
        assert f"{pct(c['classes'])} / {pct(c['grid'])}" in readme
