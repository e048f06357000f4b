"""``gpusim run`` and ``gpusim ir`` take ``--cell`` as ``gpusim simulate`` does."""

import json

import pytest

from gpusim.cli import main


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_ir_prints_the_gated_kernel(cell, capsys):
    assert main(["ir", "--hidden", "64", "--batch", "2", "--density", "0.2", "--cell", cell,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kernel"].startswith(f"sparse_{cell}_")
    assert "sigmoid" in out["ir"]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_run_checks_the_gated_values(cell, capsys):
    assert main(["run", "--gpu", "v100", "--hidden", "64", "--batch", "2", "--density", "0.2",
                 "--timesteps", "2", "--cell", cell, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kernel"].startswith(f"sparse_{cell}_") and out["max_rel_err"] <= 1e-5


@pytest.mark.parametrize("cmd", ["run", "ir"])
def test_unknown_cell_is_refused(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--hidden", "64", "--cell", "xlstm"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "xlstm" in err and "rnn" in err and "lstm" in err
