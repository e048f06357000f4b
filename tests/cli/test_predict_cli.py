import json

import pytest

from gpusim.cli import main
from models.analytical import VARIANTS


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_predict_json_contract(capsys):
    rc, out, _ = _run(["predict", "--hidden", "1024", "--batch", "4", "--density", "0.1",
                       "--timesteps", "8", "--json"], capsys)
    assert rc == 0
    rep = json.loads(out)
    names = [k["name"] for k in rep["kernels"]]
    assert names == list(VARIANTS)
    for k in rep["kernels"]:
        assert set(k) >= {"name", "fits", "per_step_s", "total_s", "reason"}
        if k["fits"]:
            assert k["per_step_s"] > 0 and k["total_s"] > 8 * k["per_step_s"] * 0.99
    assert rep["best_persistent"] in names and rep["next_best"] in names
    best = next(k for k in rep["kernels"] if k["name"] == rep["best_persistent"])
    nxt = next(k for k in rep["kernels"] if k["name"] == rep["next_best"])
    assert rep["speedup"] == pytest.approx(nxt["per_step_s"] / best["per_step_s"])


def test_layer_that_does_not_fit_has_a_limit_not_a_time(capsys):
    rc, out, _ = _run(["predict", "--hidden", "8192", "--density", "0.3", "--json"], capsys)
    rep = json.loads(out)
    dense = next(k for k in rep["kernels"] if k["name"] == "dense-persistent")
    assert rc == 0 and dense["fits"] is False and dense["per_step_s"] is None
    assert dense["total_s"] is None and "registers" in dense["reason"]
    assert rep["best_persistent"] is None and rep["speedup"] is None


def test_table_output_names_engine_and_speedup(capsys):
    rc, out, _ = _run(["predict", "--hidden", "512", "--batch", "2", "--density", "0.2"], capsys)
    assert rc == 0 and "speedup" in out and "model" in out and "sparse-lamport" in out


def test_lstm_fp16_model_path(capsys):
    rc, out, _ = _run(["predict", "--hidden", "1024", "--cell", "lstm", "--dtype", "fp16",
                       "--json"], capsys)
    assert rc == 0 and json.loads(out)["cell"] == "lstm"


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--hidden", "0"], "hidden=0"),
    (["predict", "--density", "2"], "density=2.0 is outside (0, 1]"),
    (["predict", "--gpu", "a100"], "unknown GPU 'a100'"),
    (["predict", "--batch", "5000"], "batch=5000"),
    (["predict", "--cell", "xlstm"], "invalid choice"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_engine_sim_small_layer(capsys, monkeypatch):
    import dataclasses

    import gpusim.specs as specs

    real = specs.load_spec
    monkeypatch.setattr(specs, "load_spec",
                        lambda name="v100": dataclasses.replace(real(name), sm_count=2))
    rc, out, _ = _run(["predict", "--hidden", "128", "--batch", "2", "--density", "0.2",
                       "--engine", "sim", "--sample-steps", "2", "--json"], capsys)
    rep = json.loads(out)
    engines = {k["name"]: k["engine"] for k in rep["kernels"] if k["fits"]}
    assert rc == 0 and engines["sparse-lamport"] == "sim" and engines["cublas"] == "model"


def test_predict_sim_gated_cell_simulates_the_persistent_and_csr_kernels(capsys):
    rc, out, _ = _run(["predict", "--gpu", "v100", "--hidden", "256", "--batch", "2",
                       "--density", "0.1", "--timesteps", "4", "--sample-steps", "1",
                       "--engine", "sim", "--cell", "gru", "--json"], capsys)
    assert rc == 0
    rep = json.loads(out)
    engines = {k["name"]: k["engine"] for k in rep["kernels"]}
    assert rep["cell"] == "gru"
    assert all(engines[n] == "sim" for n, v in VARIANTS.items()
               if v.family == "persistent"), engines
    # the CSR kernel builds the gated cells: simulated too, no note that the model priced it
    assert engines["csr-row-per-warp"] == "sim"
    assert "csr-row-per-warp" not in rep["note"]


def test_predict_sim_lstm_table_names_the_simulator_for_csr(capsys):
    rc, out, _ = _run(["predict", "--gpu", "h100", "--hidden", "192", "--batch", "4",
                       "--density", "0.1", "--timesteps", "4", "--sample-steps", "1",
                       "--engine", "sim", "--cell", "lstm"], capsys)
    assert rc == 0
    row = next(line for line in out.splitlines() if line.startswith("csr-row-per-warp"))
    assert row.split()[1] == "yes" and row.split()[-1] == "sim", row
    assert "priced by the model" not in out.replace("cuBLAS", "")


def test_api_predict_sim_prices_fp16_kernels_with_the_simulator():
    """fp16 with engine 'sim': the persistent kernels are simulated as fp16 kernels; the CSR
    kernel (fp32 in the IR) keeps the model and the note says so."""
    from gpusim.api import predict
    from models.analytical import VARIANTS

    p = predict("v100", hidden=256, batch=2, density=0.1, timesteps=4, dtype="fp16",
                engine="sim", sample_steps=2)
    engines = {r.name: r.engine for r in p.kernels if r.fits}
    assert p.dtype == "fp16"
    assert all(engines[n] == "sim" for n, v in VARIANTS.items()
               if v.family == "persistent" and n in engines), engines
    assert engines["csr-row-per-warp"] == "model"
    assert "csr-row-per-warp: the kernel in the IR has fp32 weights only" in p.note
    fp32 = predict("v100", hidden=256, batch=2, density=0.1, timesteps=4, engine="sim",
                   sample_steps=2)
    assert {r.name: r.per_step_s for r in p.kernels if r.engine == "sim"} != \
        {r.name: r.per_step_s for r in fp32.kernels if r.engine == "sim"}


def test_predict_sim_heads_says_where_the_grid_sync_disappears(capsys, monkeypatch):
    import dataclasses

    import gpusim.specs as specs

    real = specs.load_spec
    monkeypatch.setattr(specs, "load_spec",
                        lambda name="v100": dataclasses.replace(real(name), sm_count=2))
    rc, out, _ = _run(["predict", "--hidden", "64", "--batch", "2", "--density", "0.2",
                       "--timesteps", "4", "--sample-steps", "1", "--engine", "sim",
                       "--heads", "4"], capsys)
    assert rc == 0
    assert "note: heads=4 of 16 units; heads fit in one CTA for sparse (2 per CTA), dense (2 " \
        "per CTA): no grid-wide exchange" in out



def test_predict_model_prices_heads(capsys):
    rc, out, _ = _run(["predict", "--gpu", "h100", "--hidden", "640", "--batch", "2",
                       "--heads", "4", "--json"], capsys)
    assert rc == 0
    rep = json.loads(out)
    assert rep["engine"] == "model" and rep["heads"] == 4
    persistent = [k for k in rep["kernels"] if k["family"] == "persistent" and k["fits"]]
    assert persistent and all(k["engine"].startswith("model") for k in persistent)
    assert ("cuSPARSE and the CSR kernel are priced by the model on the layer's nonzeros "
            "(density 0.1/4 over N x N" in rep["heads_note"])
    rows = {k["name"]: k for k in rep["kernels"]}
    spread = {k["name"]: k for k in json.loads(_run(
        ["predict", "--gpu", "h100", "--hidden", "640", "--batch", "2", "--density", "0.025",
         "--json"], capsys)[1])["kernels"]}
    assert rows["csr-row-per-warp"]["per_step_s"] == spread["csr-row-per-warp"]["per_step_s"]
    rc, _, err = _run(["predict", "--hidden", "640", "--heads", "3", "--engine", "sim"], capsys)
    assert rc == 2 and "heads=3 must be a positive integer that divides hidden=640" in err
