"""``gpusim run`` and ``gpusim ir``: values checked against the reference, JSON keys, errors."""

from __future__ import annotations

import json

import pytest

from gpusim.cli import main


def test_run_json_reports_small_error(capsys):
    rc = main(["run", "--hidden", "64", "--batch", "2", "--density", "0.2", "--timesteps", "3",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_rel_err"] < 1e-5
    assert out["ctas"] == 80 and out["warp_instructions"] > 0
    assert {"wall_s", "execute_s", "spins"} <= set(out)


@pytest.mark.parametrize("extra", [["--sync", "barrier"], ["--no-wide-loads"], ["--dense"]])
def test_run_variants_text(extra, capsys):
    rc = main(["run", "--hidden", "40", "--batch", "4", "--density", "0.3", "--timesteps", "2",
               *extra])
    assert rc == 0
    text = capsys.readouterr().out
    assert "max_rel_err vs float64 reference" in text


def test_run_bad_input_exit_2(capsys):
    assert main(["run", "--gpu", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown GPU 'nosuch'" in err[0]


def test_ir_prints_kernel(capsys):
    rc = main(["ir", "--hidden", "40", "--batch", "1", "--timesteps", "2", "--registers"])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.startswith("kernel sparse_rnn_lamport_wide (grid=80, block=256)")
    assert "loop.time" in text and "registers/thread (estimate)" in text


def test_wrong_values_fail_the_run(monkeypatch, capsys):
    """A run whose values differ from the reference exits 2 with one line, not 0."""
    import kernels_ir.kernels.sparse_rnn as sr
    from gpusim.cli import main

    monkeypatch.setattr(sr.RNNProgram, "max_rel_err", lambda self, g: 0.5)
    assert main(["run", "--hidden", "40", "--batch", "2", "--timesteps", "2"]) == 2
    assert "max_rel_err=0.5 > 1e-05" in capsys.readouterr().err
