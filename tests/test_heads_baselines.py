"""The measured baselines of the fresh draws' multi-head layers and the check of `predict --heads`'s
speedup against them (``measurements/heads_baselines.py``, record
``measurements/h100/heads_baselines/heads_baselines.json``): the record is complete and checked,
its summary is its rows', and its model column is today's model's."""

from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_spec
from measurements.heads_baselines import DRAWS, _predict, head_cases, measured_times
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
RECORD = read_record(ROOT / "measurements" / "h100" / "heads_baselines" / "heads_baselines.json")


def test_every_baseline_of_every_head_layer_was_measured_and_checked():
    assert "H100" in RECORD["provenance"]["gpu_name"] and RECORD["draws"] == list(DRAWS)
    want = {c["id"] + c["draw"] for c in head_cases()}
    got = {c["id"] + c["draw"] for c in RECORD["cases"]}
    assert got == want and len(got) == 72
    for c in RECORD["cases"]:
        assert c["status"] == "ok" and c["result"]["values_ok"], c["id"]
        assert c["result"]["max_rel_err"] < 1e-3


def test_the_summary_is_the_rows():
    check = RECORD["check"]
    rows, s = check["layers"], check["summary"]
    assert s["layers"] == len(rows) == 24
    for eng in ("model", "sim"):
        ape = [r[eng]["ape"] for r in rows]
        assert s[eng]["speedup_mape"] == pytest.approx(np.mean(ape))
        assert s[eng]["fastest_named"] == sum(r[eng]["fastest_named"] for r in rows)
    times = measured_times(RECORD, str(ROOT))
    for r in rows:
        key = (r["draw"], r["hidden"], r["batch"], r["density"], r["cell"], r["heads"])
        assert r["measured"]["times_s"] == times[key]
        t = r["measured"]["times_s"]
        sparse = min(v for k, v in t.items() if k.startswith("sparse-"))
        other = min(v for k, v in t.items() if not k.startswith("sparse-"))
        assert r["measured"]["speedup"] == pytest.approx(other / sparse)
    err = [c["sim_s"] / c["measured_s"] - 1 for c in check["csr_cases"]]
    assert s["csr_sim"]["mape"] == pytest.approx(np.mean(np.abs(err)))


@pytest.mark.parametrize("i", [0, 9, 17])
def test_the_model_column_is_todays_model(i):
    r = RECORD["check"]["layers"][i]
    rep = _predict(load_spec("h100"), r["hidden"], r["batch"], r["density"], r["cell"],
                   r["heads"], "model")
    got = {x.name: x.per_step_s for x in rep.rows}
    want = r["model"]["times_s"]
    assert set(got) == set(want)
    assert {n for n, t in got.items() if t is None} == {n for n, t in want.items() if t is None}
    assert {n: t for n, t in got.items() if t is not None} == \
        pytest.approx({n: t for n, t in want.items() if t is not None}, rel=1e-9)


def test_the_readme_table_is_the_check():
    """measurements/README.md's table of the multi-head layers' speedups is the record's
    ``check`` summary (made again after every engine or model change)."""
    summary = RECORD["check"]["summary"]
    text = (ROOT / "measurements" / "README.md").read_text()
    for eng in ("sim", "model"):
        s = summary[eng]
        assert (f"| `--engine {eng}` | {100 * s['speedup_mape']:.1f}% | "
                f"{100 * s['speedup_max_ape']:.0f}% | {s['fastest_named']} of {s['layers']} |"
                ) in text, eng
    csr = summary["csr_sim"]
    assert (f"{100 * csr['mape']:.1f}% off per step ({100 * csr['mean_signed']:.1f}% on average, "
            f"{csr['n']} cases)") in " ".join(text.split())
