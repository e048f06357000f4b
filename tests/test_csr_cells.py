"""A gated layer's CSR case in the measurement path: ``gpusim crosscheck`` rebuilds and simulates
it (the gated kernel, values checked) and scores it with the gated layers (``cells``), with the
analytical model's time beside it; the speedup check counts the CSR kernel among a gated fp32
layer's alternatives where its draw measured it (no GPU needed: a recorded campaign with one
such case added)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gpusim.specs import load_spec

H100 = Path(__file__).resolve().parents[1] / "measurements" / "h100"


def _gated_csr_case(spec, per_step_s=6e-6) -> dict:
    """A recorded CSR case of an LSTM fp32 layer as the campaign writes it (kernel hashes of
    today's gated kernel at T = 4), its result copied from a recorded CSR case."""
    from gpusim.measurements import case_fingerprint
    from measurements.campaign import case_id

    data = json.loads((H100 / "campaign.json").read_text())
    rec = copy.deepcopy(next(c for c in data["cases"] if c["kind"] == "csr"))
    case = {"kind": "csr", "hidden": 192, "batch": 2, "density": 0.1, "cell": "lstm",
            "dtype": "fp32", "seed": 4242}
    case["id"] = case_id(case)
    case.update(status="ok", result={**rec["result"], "per_step_s": per_step_s},
                kernel={**case_fingerprint(case, 4, spec), "steps": 4})
    return case


def test_crosscheck_scores_a_gated_csr_case_with_the_cells(tmp_path):
    from gpusim.cli.crosscheck import run_crosscheck

    spec = load_spec("h100")
    data = json.loads((H100 / "campaign.json").read_text())
    case = _gated_csr_case(spec)
    data["cases"] = [c for c in data["cases"] if c["kind"] == "csr" and c["hidden"] <= 512]
    data["cases"].append(case)
    d = tmp_path / "camp"
    d.mkdir()
    (d / "campaign.json").write_text(json.dumps(data))
    rep = run_crosscheck(d, kinds=("csr",), include_fresh=False)
    assert rep["stale"] == 0 and rep["skipped"] == 0, (rep["stale_cases"],
                                                        rep["skipped_cases"])
    row = next(r for r in rep["rows"] if r["id"] == case["id"])
    assert (row["cell"], row["dtype"], row["source"]) == ("lstm", "fp32", "simulator")
    assert row["predicted_s"] > spec.graph_launch_overhead_s and row["model_s"] > 0
    cells = next(iter(rep["cells"].values()))
    assert cells["cases"] == 1 and cells["by_kind"]["csr"]["cases"] == 1
    rnn = next(iter(rep["samples"].values()))
    assert rnn["cases"] == len(data["cases"]) - 1          # the RNN fp32 headline without it


def _case(kind, cell="rnn", dtype="fp32", t=5e-6, **kw):
    c = {"kind": kind, "hidden": 256, "batch": 2, "density": 0.1, "status": "ok",
         "result": {"per_step_s": t, "values_ok": True}, **kw}
    if (cell, dtype) != ("rnn", "fp32"):
        c.update(cell=cell, dtype=dtype)
    return c


def _layer_cases(cell, dtype, with_csr):
    sparse = [_case("sparse_persistent", cell, dtype, t=2e-6, sync=s, wide_loads=w, layout=lay)
              for s, w, lay in (("barrier", False, "naive"), ("barrier", True, "naive"),
                                ("barrier", True, "optimal"), ("lamport", True, "optimal"))]
    libs = [_case(k, cell, dtype, t=9e-6) for k in ("cublas", "cusparse")]
    return sparse + libs + ([_case("csr", cell, dtype, t=4e-6)] if with_csr else [])


def test_speedup_check_counts_the_csr_kernel_of_gated_fp32_layers():
    from gpusim.speedup_check import measured_layers, required_baselines

    key = (256, 2, 0.1, "lstm", "fp32")
    layers = measured_layers(_layer_cases("lstm", "fp32", True))
    assert layers[key]["csr-row-per-warp"] == 4e-6         # the next best is the CSR kernel
    assert "csr-row-per-warp" in required_baselines(key, gated_csr=True)
    # a draw that measured gated CSR cases: a gated fp32 layer whose CSR case failed is left
    # out (it would compare against a slower alternative than the one a user has)
    other = [{**c, "density": 0.2} for c in _layer_cases("gru", "fp32", False)]
    failed = {**_case("csr", "lstm", "fp32"), "status": "error"}
    got = measured_layers(other + _layer_cases("lstm", "fp32", False) + [failed])
    assert key not in got and (256, 2, 0.2, "gru", "fp32") not in got
    # draws measured before the gated CSR kernel (no such case anywhere) and fp16 layers: the
    # libraries are the alternatives, as before
    assert key in measured_layers(_layer_cases("lstm", "fp32", False))
    assert required_baselines((256, 2, 0.1, "lstm", "fp16"), gated_csr=True) == \
        ("cublas", "cusparse")
