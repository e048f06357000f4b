"""The recorded measurements load, validate and say what they must; bad files are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpusim.measurements import load_campaign, spec_name_for_gpu
from kernels_ir.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "measurements" / "h100"


@pytest.fixture(scope="module")
def camp():
    return load_campaign(DATA)


def test_recorded_campaign_is_complete(camp):
    assert "H100" in camp.provenance["gpu_name"]
    assert camp.spec_name == "h100"
    assert len(camp.ok_cases) >= 40
    kinds = {c["kind"] for c in camp.ok_cases}
    assert kinds == {"sparse_persistent", "dense_persistent", "csr", "cublas", "cusparse"}
    variants = {(c["sync"], c["wide_loads"], c["layout"]) for c in camp.ok_cases
                if c["kind"] == "sparse_persistent"}
    assert len(variants) == 8


def test_every_recorded_case_passed_its_values_check(camp):
    for c in camp.ok_cases:
        r = c["result"]
        assert r["values_ok"] is True, c["id"]
        assert r["max_rel_err"] < 1e-3, c["id"]
        assert len(r["per_step_raw_s"]) >= 5, c["id"]   # raw repeats kept


def test_ncu_counts_recorded_for_every_persistent_and_csr_case(camp):
    assert camp.ncu_steps == 4
    want = {c["id"] for c in camp.ok_cases if c["kind"] in
            ("sparse_persistent", "dense_persistent", "csr")}
    assert want <= set(camp.ncu)


def test_microbenchmarks_recorded(camp):
    assert set(camp.microbench) >= {"smem_latency", "l2_latency", "flag_round_trip",
                                    "atomic_same", "atomic_distinct", "grid_barrier"}
    assert all(r["per_op_s"] > 0 for r in camp.microbench.values())


def _copy(tmp_path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(DATA, d)
    return d


@pytest.mark.parametrize("field", ["gpu_name", "driver_version", "date", "command"])
def test_missing_provenance_field_is_named(tmp_path, field):
    d = _copy(tmp_path)
    data = json.loads((d / "campaign.json").read_text())
    del data["provenance"][field]
    (d / "campaign.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"campaign\.json.*{field}"):
        load_campaign(d)


def test_missing_case_and_result_fields_are_named(tmp_path):
    d = _copy(tmp_path)
    data = json.loads((d / "campaign.json").read_text())
    del data["cases"][3]["result"]["per_step_s"]
    (d / "campaign.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"cases\[3\]\.result has no field 'per_step_s'"):
        load_campaign(d)
    data["cases"][3]["result"]["per_step_s"] = -1.0
    (d / "campaign.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="per_step_s=-1.0"):
        load_campaign(d)


def test_missing_ncu_metric_is_named(tmp_path):
    d = _copy(tmp_path)
    data = json.loads((d / "ncu.json").read_text())
    cid = next(iter(data["cases"]))
    del data["cases"][cid]["metrics"]["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]
    (d / "ncu.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"ncu\.json.*l1tex__data_bank_conflicts"):
        load_campaign(d)


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_campaign(tmp_path / "nope")
    (tmp_path / "campaign.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_campaign(tmp_path)


def test_spec_names():
    assert spec_name_for_gpu("NVIDIA H100 80GB HBM3") == "h100"
    assert spec_name_for_gpu("NVIDIA H200") == "h200"
    with pytest.raises(InputError, match="A100"):
        spec_name_for_gpu("NVIDIA A100")
