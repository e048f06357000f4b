import csv
import json

import pytest

from gpusim.cli import main
from gpusim.sweep import Grid, evaluate_chunk, run_sweep

SMALL = Grid(("v100", "h100"), (256, 1024, 4096), (1, 4), (0.05, 0.3))


def test_sweep_outputs(tmp_path, capsys):
    c, j, p = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "s.png"
    rc = main(["sweep", "--gpu", "v100,h100", "--hidden", "256:1024:256,4096", "--batch", "1,4",
               "--density", "0.05,0.3", "--csv", str(c), "--json", str(j), "--png", str(p),
               "--workers", "2"])
    assert rc == 0
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 2 * 5 * 2 * 2
    assert {"speedup", "best_persistent", "next_best", "cublas_s"} <= set(rows[0])
    data = json.loads(j.read_text())
    assert len(data["configs"]) == len(rows)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "configs" in capsys.readouterr().err  # the progress bar


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
