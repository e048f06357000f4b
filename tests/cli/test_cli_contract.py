"""Every subcommand exists, has help, and bad input is one line with exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpusim.cli import COMMANDS, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert "usage: gpusim" in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2


@pytest.mark.parametrize("argv,needle", [
    (["run", "--hidden", "0"], "hidden=0 must be a positive integer"),
    (["run", "--hidden", "-5"], "hidden=-5 must be a positive integer"),
    (["run", "--density", "0"], "density=0.0 is outside (0, 1]"),
    (["run", "--density", "1.5"], "density=1.5 is outside (0, 1]"),
    (["run", "--batch", "0"], "batch=0 must be a positive integer"),
    (["run", "--gpu", "a100"], "unknown GPU 'a100'"),
    (["predict", "--hidden", "abc"], "hidden='abc' is not an integer"),
])
def test_bad_input_is_one_line_exit_2(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "gpusim.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr
