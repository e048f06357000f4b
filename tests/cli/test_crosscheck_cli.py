"""`gpusim crosscheck` on the recorded H100 data (no GPU needed).

For speed (< 60 s) the test runs every 3rd recorded case of the campaign (22 of 65: persistent,
CSR and library baselines all appear; ``--no-fresh``: the fresh draws under
measurements/h100/fresh_*/ are checked by tests/test_fresh_draws.py) and holds the errors at
the level recorded in measurements/h100/crosscheck_reached.json (key "every_3"); the full run's
level is recorded there too (key "full", about 90 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusim.cli import main

DATA = Path(__file__).resolve().parents[2] / "measurements" / "h100"


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    import contextlib
    import io

    out = io.StringIO()
    png = tmp_path_factory.mktemp("cc") / "cc.png"
    with contextlib.redirect_stdout(out):
        rc = main(["crosscheck", "--data", str(DATA), "--every", "3", "--no-fresh", "--json",
                   "--plot", str(png)])
    assert rc == 0
    s = json.loads(out.getvalue())
    s["_png"] = png
    return s


@pytest.mark.slow
def test_error_does_not_grow_past_the_recorded_level(summary):
    reached = json.loads((DATA / "crosscheck_reached.json").read_text())
    level, tol = reached["every_3"], reached["tolerance"]
    assert summary["cases"] == level["cases"]
    assert summary["mape"] <= level["mape"] + tol["mape"]
    assert summary["spearman"] >= level["spearman"] - tol["spearman"]
    assert summary["bank_conflict_mismatches"] <= level["bank_conflict_mismatches"]


@pytest.mark.slow
def test_committed_data_describes_todays_kernels(summary):
    """Every recorded kernel case still hashes to the kernel it ran: whoever changes a kernel
    (IR or code generator) must re-measure it (measurements/campaign.py) before this passes."""
    assert summary["stale"] == 0, summary["stale_cases"]
    assert summary["format_version"] >= 2


@pytest.mark.slow
def test_json_keys_and_plot(summary):
    for key in ("cases", "mape", "max_ape", "spearman", "bank_conflict_mismatches", "worst",
                "stale", "stale_cases"):
        assert key in summary
    assert summary["bank_conflict_ld_mismatches"] == 0   # shared loads match ncu exactly
    assert summary["_png"].stat().st_size > 10_000


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["crosscheck", "--data", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["crosscheck", "--kinds", "bogus"]) == 2
    assert "bogus" in capsys.readouterr().err


def _campaign_and_last_two_draws(tmp_path):
    """``(data dir, draw names)``: the campaign and the two newest fresh draws, linked."""
    import os

    data = tmp_path / "h100"
    data.mkdir()
    for name in ("campaign.json", "ncu.json"):
        os.symlink(DATA / name, data / name)
    draws = sorted(p.name for p in DATA.glob("fresh_*"))[-2:]
    for name in draws:
        os.symlink(DATA / name, data / name)
    return data, draws


def test_merged_reports_equal_one_run_over_the_same_draws(tmp_path):
    """``merge_reports``: the cross-checks of disjoint draws (the campaign alone, then each fresh
    draw alone) merged give the report of one run over all of them, rows, summaries and labels
    alike; a draw in two parts is refused. The library cases only (the model prices them: fast)."""
    from gpusim.cli.crosscheck import merge_reports, run_crosscheck
    from kernels_ir.errors import InputError

    data, draws = _campaign_and_last_two_draws(tmp_path)
    kinds = ("cublas", "cusparse")
    whole = run_crosscheck(data, kinds=kinds)
    parts = [run_crosscheck(data, kinds=kinds, include_fresh=False)]
    parts += [run_crosscheck(data / name, kinds=kinds) for name in reversed(draws)]
    merged = merge_reports(parts, str(data))
    assert [d["draw"] for d in merged["draws"]] == [d["draw"] for d in whole["draws"]]
    assert merged["rows"] == whole["rows"]
    for key in ("cases", "mape", "spearman", "samples", "cells", "by_family", "stale",
                "skipped", "unscored"):
        assert merged[key] == whole[key], key
    with pytest.raises(InputError, match="a draw is in two parts"):
        merge_reports(parts + parts[1:2], str(data))


def test_merge_crosschecks_script(tmp_path):
    """``measurements/merge_crosschecks.py``: two cross-checks of disjoint draws (library cases
    only: fast), each with speedup rows, merge into one report whose case rows are
    ``merge_reports``' and whose speedup summary is recomputed over both parts' rows; labels are
    today's whatever a part said; a layer in two parts is refused; ``.gz`` round-trips."""
    import copy

    from gpusim.cli.crosscheck import merge_reports, run_crosscheck
    from gpusim.samples import draws as todays_draws
    from gpusim.speedup_check import summarise_speedups
    from measurements.merge_crosschecks import merge
    from measurements.probe import read_record, save_record

    data, names = _campaign_and_last_two_draws(tmp_path)
    kinds = ("cublas", "cusparse")
    parts = [run_crosscheck(data / name, kinds=kinds) for name in names]
    label = {g.name: g.sample for g in todays_draws(data)}
    for p, name in zip(parts, names, strict=True):
        p["speedup"] = {"engines": ["model", "sim"], "rows": [
            {"draw": name, "sample": "in sample" if label[name] != "in sample" else "x",
             "hidden": 256 + k, "batch": 1, "density": 0.1,
             "measured": {"fastest": "a", "times_s": {"a": 1.0}},
             "model": {"ape": 0.1, "ratio": 1.0, "fastest": "a", "fastest_named": True,
                       "persistent_named": True},
             "sim": {"ape": 0.2, "ratio": 1.1, "fastest": "a", "fastest_named": True,
                     "persistent_named": True}} for k in range(3)]}
    expect_rows = merge_reports(copy.deepcopy(parts), str(data))["rows"]
    merged = merge(copy.deepcopy(parts), str(data), "how")
    assert merged["rows"] == expect_rows and merged["command"] == "how"
    sp = merged["speedup"]
    assert len(sp["rows"]) == 6 and all(r["sample"] == label[r["draw"]] for r in sp["rows"])
    assert sp == summarise_speedups(sp["rows"], ("model", "sim"))
    save_record(str(tmp_path / "m.json.gz"), merged)
    assert read_record(str(tmp_path / "m.json.gz")) == json.loads(json.dumps(merged))
    twice = copy.deepcopy(parts)
    twice[1]["speedup"]["rows"] += twice[0]["speedup"]["rows"]
    with pytest.raises(SystemExit, match="in two parts"):
        merge(twice, str(data), "how")
