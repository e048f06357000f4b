"""One grammar for every command: --json, --plot FILE, lists, --progress, --version, defaults in
--help, ``python -m gpusim``, and a quiet end on a closed pipe."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpusim.cli import COMMANDS, EXIT_BROKEN_PIPE, build_parser, main
from gpusim.cli.common import LIST_MAX, ListAction, parse_list

ROOT = Path(__file__).resolve().parents[2]
PLOTS = {"simulate", "banks", "crosscheck", "mapping", "timeline", "sweep"}
PROGRESS = {"simulate", "sweep", "crosscheck", "timeline"}
LISTS = {"capacity": ["--density"], "sweep": ["--gpu", "--hidden", "--batch", "--density"],
         "crosscheck": ["--kinds"]}


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser(only=name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _options(name: str) -> dict[str, argparse.Action]:
    return {o: a for a in _sub(name)._actions for o in a.option_strings}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_is_a_flag_everywhere(name):
    act = _options(name)["--json"]
    assert act.nargs == 0 and act.default is False, name
    assert build_parser(only=name).parse_args([name, "--json"]).json is True


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_plot_and_progress_where_the_command_plots_or_works_long(name):
    opts = _options(name)
    assert ("--plot" in opts) == (name in PLOTS), name
    if name in PLOTS:
        assert opts["--plot"].nargs is None and opts["--plot"].metavar == "FILE"
        args = build_parser(only=name).parse_args([name, "--plot", "out.png"])
        assert args.plot == "out.png"
    assert ("--progress" in opts) == (name in PROGRESS), name
    if name in PROGRESS:
        assert "--no-progress" in opts and opts["--progress"].default is None
        p = build_parser(only=name)
        assert p.parse_args([name, "--no-progress"]).progress is False
        assert p.parse_args([name, "--progress"]).progress is True
    visible = {o for o, a in opts.items() if a.help != argparse.SUPPRESS}
    assert not visible & {"--png", "--json-out"}, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_list_option_uses_the_one_parser(name):
    lists = {o for o, a in _options(name).items() if isinstance(a, ListAction)}
    assert lists == set(LISTS.get(name, [])), name
    for o, a in _options(name).items():
        if o != "--help":
            assert a.nargs in (None, 0, "?") or isinstance(a, ListAction), (name, o, a.nargs)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_defaults(name, capsys):
    sub = _sub(name)
    fmt = sub.formatter_class(prog=name)
    for o, a in _options(name).items():
        if a.help == argparse.SUPPRESS or a.default in (None, False, argparse.SUPPRESS):
            continue
        assert "default" in fmt._get_help_string(a).lower(), (name, o)
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0 and "default" in capsys.readouterr().out


def test_help_default_text(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "hidden size N (default: 2304)" in out and "(default: v100)" in out


def test_help_shows_list_defaults_in_the_list_grammar(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 256:4096:256,5120,6144,8192)" in out
    assert "--density DENSITY[,...]" in out and "(default: 1,4)" in out


def test_version(capsys):
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpusim {want}"
    import gpusim

    assert gpusim.__version__ == want


def test_python_dash_m_gpusim():
    proc = subprocess.run([sys.executable, "-m", "gpusim", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: gpusim") and "predict" in proc.stdout
    assert "comma-separated" in proc.stdout  # the grammar, once, in the top-level help
    proc = subprocess.run([sys.executable, "-m", "gpusim", "specs", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and {r["name"] for r in json.loads(proc.stdout)} >= {"v100"}


def test_closed_pipe_ends_quietly():
    """The reader is gone before the command writes: a BrokenPipeError every time, which must
    end the command with 141 and nothing on stderr (no traceback, no 'Exception ignored')."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "gpusim", "specs", "--gpu", "v100"],
                            stdout=w, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(w)
    os.close(r)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert err.decode() == ""


def test_specs_piped_to_head():
    proc = subprocess.run(["bash", "-c", f"'{sys.executable}' -m gpusim specs | head -1"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stderr == ""
    assert len(proc.stdout.splitlines()) == 1


# ----------------------------------------------------------------------------- lists and ranges

def test_decimal_range_is_exact():
    v = parse_list("0.01:1.0:0.01", name="density")
    assert len(v) == 100 and v[-1] == 1.0 and v[0] == 0.01
    assert v == [float(f"0.{k:02d}") if k < 100 else 1.0 for k in range(1, 101)]
    assert parse_list("0.1:0.3:0.1", name="d") == [0.1, 0.2, 0.3]  # floats: 0.30000000000000004
    assert parse_list("0.1:0.35:0.1", name="d") == [0.1, 0.2, 0.3]  # stop not on the grid


def test_lists_and_mixes():
    assert parse_list("256:1024:256,2048", name="h", kind=int) == [256, 512, 768, 1024, 2048]
    assert parse_list(" 1, 4 ", name="b", kind=int) == [1, 4]
    assert parse_list("v100,h100", name="gpu", kind=str) == ["v100", "h100"]
    assert parse_list("5", name="b", kind=int) == [5]


@pytest.mark.parametrize("text,kind,needle", [
    ("", float, "is empty"),
    ("a", float, "'a' is not a number"),
    ("1:2", float, "is not a list 'a,b,c' or a range"),
    ("1:0:1", float, "is below start"),
    ("0:1:0", float, "must be positive"),
    ("0:1:-0.1", float, "must be positive"),
    ("nan", float, "not a finite number"),
    ("0.1,inf", float, "not a finite number"),
    ("1.5", int, "not an integer"),
    ("0:1e40:1", float, "at most"),
    ("v100,,h100", str, "empty item"),
])
def test_bad_lists(text, kind, needle):
    with pytest.raises(argparse.ArgumentTypeError, match=needle):
        parse_list(text, name="x", kind=kind)


def test_expansion_is_bounded_before_it_allocates():
    assert len(parse_list(f"1:{LIST_MAX}:1", name="x", kind=int)) == LIST_MAX
    with pytest.raises(argparse.ArgumentTypeError, match=f"at least {LIST_MAX + 1}\\)"):
        parse_list(f"0:{LIST_MAX}:1", name="x", kind=int)


def test_comma_and_space_forms_agree(capsys):
    assert main(["capacity", "--density", "0.05:0.15:0.05", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert [r["density"] for r in a["max_hidden"]["sparse"]] == [0.05, 0.1, 0.15]
    assert main(["capacity", "--density", "0.05", "0.1", "0.15", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == a


def test_crosscheck_kinds_list_is_checked(capsys):
    assert main(["crosscheck", "--kinds", "cublas,nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope' is unknown" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,needle", [
    (["simulate", "--hidden", "64", "--timesteps", "2"], "simulating"),
    (["timeline", "--hidden", "64", "--timesteps", "2", "--sample-steps", "1", "--sms", "4"],
     "simulating"),
    (["crosscheck", "--every", "10", "--kinds", "cublas"], "crosscheck"),
    (["sweep", "--hidden", "256", "--batch", "4", "--density", "0.1", "--scheduler", "serial"],
     "configs"),
])
def test_progress_flag_draws_a_bar_on_stderr_only(argv, needle, capsys):
    assert main([*argv, "--json", "--progress"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)  # stdout stays pure JSON
    assert needle in out.err and "100%" in out.err
    assert main([*argv, "--json", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
