"""``gpusim simulate``: JSON keys, sampling, plot, errors."""

from __future__ import annotations

import json

from gpusim.cli import main

KEYS = {"cycles", "time_s", "per_step_s", "breakdown", "smem_wavefronts", "bank_conflicts",
        "l2_transactions", "max_rel_err"}


def test_simulate_json(capsys):
    rc = main(["simulate", "--hidden", "64", "--batch", "2", "--density", "0.2",
               "--timesteps", "3", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out)
    assert out["max_rel_err"] < 1e-5 and out["cycles"] > 0
    assert set(out["breakdown"]["total"]) == {"issue", "shared_memory", "waiting_for_data",
                                             "barrier"}
    assert len(out["breakdown"]["per_step"]) == 3 and len(out["breakdown"]["per_sm"]) == 80
    assert out["l2_transactions"]["store"] > 0


def test_simulate_sample_steps_and_plot(tmp_path, capsys):
    png = tmp_path / "tl.png"
    rc = main(["simulate", "--hidden", "64", "--batch", "4", "--density", "0.2",
               "--timesteps", "8", "--sample-steps", "3", "--sync", "barrier",
               "--plot", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "simulated 3 of 8 steps" in text and "extrapolated total" in text
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_simulate_bad_input(capsys):
    assert main(["simulate", "--gpu", "x100"]) == 2
    assert "unknown GPU 'x100'" in capsys.readouterr().err


def test_simulate_gated_cells(capsys):
    for cell, extra in (("lstm", []), ("gru", ["--dense", "--density", "1", "--sync", "barrier"])):
        rc = main(["simulate", "--hidden", "64", "--batch", "2", "--density", "0.2",
                   "--timesteps", "3", "--cell", cell, *extra, "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and f"_{cell}_" in out["kernel"]
        assert out["max_rel_err"] < 1e-5 and out["cycles"] > 0


def test_simulate_heads_exchange_inside_the_cta(capsys):
    rc = main(["simulate", "--hidden", "320", "--batch", "2", "--density", "0.2",
               "--timesteps", "2", "--heads", "40", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["kernel"] == "sparse_rnn_local_wide" and out["heads"] == 40
    assert "no grid-wide exchange" in out["heads_note"] and out["max_rel_err"] < 1e-5
    assert out["l2_transactions"]["poll"] == 0 and out["l2_transactions"]["atomic"] == 0
    rc = main(["simulate", "--hidden", "320", "--batch", "2", "--timesteps", "2",
               "--heads", "40"])
    assert rc == 0 and "note: heads=40 of 8 units, 1 per CTA: heads fit in one CTA: no " \
        "grid-wide exchange" in capsys.readouterr().out


def test_simulate_heads_must_divide_hidden(capsys):
    for bad in ("7", "0", "-2"):
        assert main(["simulate", "--hidden", "320", "--heads", bad]) == 2
        assert f"heads={bad} must be a positive integer that divides hidden=320 (accepted: 1 " \
            "and the divisors of 320)" in capsys.readouterr().err
