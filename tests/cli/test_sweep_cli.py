import csv
import json

import pytest

from gpusim.cli import main
from gpusim.sweep import Grid, evaluate_chunk, run_sweep

SMALL = Grid(("v100", "h100"), (256, 1024, 4096), (1, 4), (0.05, 0.3))


def test_sweep_outputs(tmp_path, capsys):
    c, p = tmp_path / "s.csv", tmp_path / "s.png"
    rc = main(["sweep", "--gpu", "v100,h100", "--hidden", "256:1024:256,4096", "--batch", "1,4",
               "--density", "0.05,0.3", "--csv", str(c), "--plot", str(p), "--workers", "2",
               "--progress"])
    assert rc == 0
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 2 * 5 * 2 * 2
    assert {"speedup", "best_persistent", "next_best", "cublas_s"} <= set(rows[0])
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "configs" in capsys.readouterr().err  # the progress bar (--progress)
    rc = main(["sweep", "--gpu", "v100,h100", "--hidden", "256:1024:256,4096", "--batch", "1,4",
               "--density", "0.05,0.3", "--json", "--scheduler", "serial"])
    out = capsys.readouterr()
    data = json.loads(out.out)  # --json: the table on stdout, nothing else there
    assert rc == 0 and len(data["configs"]) == len(rows) and data["meta"]["configs"] == len(rows)
    assert "configs" not in out.err  # no progress bar when stderr is not a terminal
    assert [r["hidden"] for r in data["configs"][::4]][:5] == [256, 512, 768, 1024, 4096]


def test_old_png_name_still_writes_the_heatmap(tmp_path, capsys):
    p = tmp_path / "s.png"
    assert main(["sweep", "--hidden", "512,1024", "--batch", "4", "--density", "0.1",
                 "--scheduler", "serial", "--png", str(p)]) == 0
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_decimal_density_range(capsys):
    assert main(["sweep", "--hidden", "1024", "--batch", "4", "--density", "0.01:1.0:0.01",
                 "--scheduler", "serial", "--json"]) == 0
    dens = [r["density"] for r in json.loads(capsys.readouterr().out)["configs"]]
    assert len(dens) == 100 and dens[0] == 0.01 and dens[-1] == 1.0
    assert dens == [round(0.01 * k, 2) for k in range(1, 101)]


def test_local_pool_equals_serial():
    a = run_sweep(SMALL, scheduler="serial", chunk=5)
    b = run_sweep(SMALL, scheduler="local", workers=2, chunk=5)
    assert a == b and len(a["hidden"]) == SMALL.size


def test_dask_local_cluster_equals_serial():
    distributed = pytest.importorskip("distributed")
    a = run_sweep(SMALL, scheduler="serial")
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            b = run_sweep(SMALL, client=client, chunk=7)
    assert a == b


def test_does_not_fit_is_empty_not_a_time():
    cols = evaluate_chunk(("v100", [20000], [4], [0.5], "rnn", "fp32"))
    assert cols["sparse-lamport_s"] == [None] and cols["sparse-lamport_fits"] == [False]
    assert cols["speedup"] == [None] and cols["cublas_s"][0] > 0


@pytest.mark.parametrize("argv,needle", [
    (["sweep", "--hidden", "a:b", "--csv", "x.csv"], "hidden="),
    (["sweep", "--density", "0,0.5", "--csv", "x.csv"], "density=0.0"),
    (["sweep", "--gpu", "tpu", "--csv", "x.csv"], "unknown GPU"),
    (["sweep"], "give at least one output"),
    (["sweep", "--density", "0.000001:1:0.000001", "--csv", "x.csv"], "at most 100000"),
    (["sweep", "--density", "nan", "--csv", "x.csv"], "not a finite number"),
    (["sweep", "--hidden", "2:1:1", "--csv", "x.csv"], "is below start"),
    (["sweep", "--plot", "x.jpg"], "must end in .png"),
    (["sweep", "--csv", "x.txt"], "must end in .csv"),
    (["sweep", "--csv", "x.csv", "--scheduler", "mpi"], "scheduler="),
])
def test_bad_input(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        rc = main(argv + ["--no-progress"])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_sweep_heads_prices_each_layer_as_predict_does(capsys):
    """``--heads``: every configuration is a concrete block-diagonal layer priced as ``gpusim
    predict --heads`` prices it (the vectorised model has no heads)."""
    from gpusim.specs import load_spec
    from models.analytical import predict_layer

    assert main(["sweep", "--gpu", "h100", "--hidden", "512,1024", "--batch", "1,8",
                 "--density", "0.1", "--heads", "8", "--json", "--scheduler", "serial"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["meta"]["heads"] == 8 and len(data["configs"]) == 4
    spec = load_spec("h100")
    for c in data["configs"]:
        assert c["heads"] == 8
        rep = predict_layer(spec, c["hidden"], c["batch"], c["density"], heads=8)
        assert c["speedup"] == pytest.approx(rep.speedup)
        assert c["best_persistent"] == rep.best_persistent
        rows = {r.name: r for r in rep.rows}
        assert c["csr-row-per-warp_s"] == pytest.approx(rows["csr-row-per-warp"].per_step_s)


def test_sweep_heads_must_divide_every_hidden(capsys):
    assert main(["sweep", "--gpu", "h100", "--hidden", "512,1001,1020", "--batch", "1",
                 "--density", "0.1", "--heads", "8", "--json"]) != 0
    err = capsys.readouterr().err
    assert "heads=8 does not divide hidden=1001,1020" in err
