import json

import pytest

from gpusim.cli import main

SMALL = ["banks", "--hidden", "256", "--density", "0.3", "--warps-per-cta", "2"]


def test_json_keys(capsys):
    assert main(SMALL + ["--batch", "4", "--layout", "optimal", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("wavefronts", "bank_conflicts", "lower_bound_wavefronts", "ratio_to_bound",
                "layout", "seconds"):
        assert key in out
    assert out["layout"] == "optimal"
    assert out["wavefronts"] == out["lower_bound_wavefronts"]
    assert out["ratio_to_bound"] == 1.0
    assert out["config"]["load_bits"] == 128


def test_all_layouts_table_and_json(capsys):
    assert main(SMALL + ["--layout", "all"]) == 0
    text = capsys.readouterr().out
    for name in ("naive", "random", "greedy", "optimal"):
        assert name in text
    assert main(SMALL + ["--layout", "all", "--json", "--no-wide-loads", "--batch", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    lay = out["layouts"]
    assert set(lay) == {"naive", "random", "greedy", "optimal"}
    assert all(v["wavefronts"] >= out["lower_bound_wavefronts"] for v in lay.values())
    assert lay["optimal"]["wavefronts"] <= lay["greedy"]["wavefronts"] <= lay["naive"]["wavefronts"]


def test_row_per_lane(capsys):
    assert main(SMALL + ["--hidden", "128", "--mapping", "row-per-lane", "--layout", "greedy",
                         "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["wavefronts"] >= out["lower_bound_wavefronts"]


@pytest.mark.parametrize("extra,msg", [
    (["--density", "1.5"], "density=1.5 is outside (0, 1]"),
    (["--density", "0"], "density=0.0 is outside (0, 1]"),
    (["--batch", "3"], "batch=3 cannot use wide loads"),
    (["--no-wide-loads", "--batch", "40"], "batch=40"),
    (["--load-bits", "48"], "width=48 bits"),
    (["--batch", "2", "--load-bits", "128"], "--load-bits=128 is not compatible with batch=2"),
    (["--layout", "best"], "invalid choice"),
    (["--hidden", "0"], "hidden=0"),
    (["--gpu", "nosuchgpu"], "nosuchgpu"),
])
def test_bad_input_one_line_exit_2(capsys, extra, msg):
    try:  # argparse's own errors leave through SystemExit(2); InputError returns 2
        code = main(SMALL + extra)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert msg in err
    assert err.count("\n") == 1 and err.startswith("error:")
    assert "Traceback" not in err


def test_plot_writes_png(tmp_path, capsys):
    path = tmp_path / "heat.png"
    assert main(SMALL + ["--layout", "naive", "--plot", str(path)]) == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
