"""GPU specs are data: every value has a unit and a source; bad files are rejected by field."""

from __future__ import annotations

import dataclasses
import re
import tomllib

import pytest

from gpusim.specs import PARAMS, available, load_spec, parse_spec, spec_path
from kernels_ir.errors import SpecError


@pytest.mark.parametrize("name", ["v100", "h100", "h200"])
def test_bundled_specs_load_with_sources(name):
    spec = load_spec(name)
    assert spec.name == name
    for field in PARAMS:
        assert spec.source(field).startswith("["), field


def test_default_is_v100_with_documented_numbers():
    s = load_spec()
    assert (s.sm_count, s.subpartitions_per_sm, s.smem_banks, s.fp32_lanes_per_subpartition) == \
        (80, 4, 32, 16)
    assert load_spec("h100").fp32_lanes_per_subpartition == 32


def test_available_lists_bundled():
    assert {"v100", "h100", "h200"} <= set(available())


def _doc(name="v100"):
    return tomllib.loads(spec_path(name).read_text())


def test_unknown_gpu_name():
    with pytest.raises(SpecError, match=r"unknown GPU 'a100'; accepted: h100, h200, v100"):
        load_spec("a100")


def test_missing_value_named():
    doc = _doc()
    del doc["params"]["l2_slices"]
    with pytest.raises(SpecError, match="missing parameter 'l2_slices'"):
        parse_spec(doc, "x.toml")


def test_unknown_value_named():
    doc = _doc()
    doc["params"]["warp_size_bytes"] = {"value": 1, "unit": "bytes", "source": "s", "type": "D"}
    with pytest.raises(SpecError, match="unknown parameter 'warp_size_bytes'"):
        parse_spec(doc, "x.toml")


@pytest.mark.parametrize("field,value", [("sm_count", 0), ("clock_hz", -1.0),
                                         ("smem_banks", 1000), ("l2_hit_latency_cycles", 1.5)])
def test_impossible_value_named(field, value):
    doc = _doc()
    doc["params"][field]["value"] = value
    with pytest.raises(SpecError, match=re.escape(field)):
        parse_spec(doc, "x.toml")


def test_wrong_unit_and_missing_source():
    doc = _doc()
    doc["params"]["clock_hz"]["unit"] = "MHz"
    with pytest.raises(SpecError, match="clock_hz has unit 'MHz'; expected 'Hz'"):
        parse_spec(doc, "x.toml")
    doc = _doc()
    doc["params"]["clock_hz"]["source"] = " "
    with pytest.raises(SpecError, match="clock_hz has no source"):
        parse_spec(doc, "x.toml")


def test_calibrated_value_must_name_its_record():
    doc = _doc("h100")
    doc["params"]["l2_hit_latency_cycles"]["type"] = "C"
    doc["params"]["l2_hit_latency_cycles"].pop("calibration", None)
    with pytest.raises(SpecError, match="l2_hit_latency_cycles is calibrated"):
        parse_spec(doc, "x.toml")


def test_inconsistent_values_rejected():
    doc = _doc()
    doc["params"]["smem_bytes_per_cta"]["value"] = 200000
    doc["params"]["smem_bytes_per_cta"]["unit"] = "bytes"
    with pytest.raises(SpecError, match="smem_bytes_per_cta"):
        parse_spec(doc, "x.toml")


def test_malformed_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[gpu\nname=")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(p)


def test_shrink_with_replace():
    s = dataclasses.replace(load_spec("v100"), sm_count=2)
    assert s.sm_count == 2 and s.clock_hz == load_spec("v100").clock_hz


def test_bank_geometry_other_than_the_modelled_one_is_refused():
    doc = _doc()
    doc["params"]["smem_banks"]["value"] = 16
    with pytest.raises(SpecError, match="smem_banks = 16 .* models 32 banks x 4 bytes only"):
        parse_spec(doc, "x.toml")


def test_library_table_is_all_or_nothing_and_checked_by_field():
    from gpusim.specs import LIBRARY_PARAMS

    doc = _doc("h100")
    assert set(doc["library"]) == set(LIBRARY_PARAMS)
    assert parse_spec(doc, "x.toml").library_params["node_s"] == doc["library"]["node_s"]["value"]
    for field in LIBRARY_PARAMS:
        assert load_spec("h100").source(f"library.{field}").startswith("[C]"), field
    bad = _doc("h100")
    del bad["library"]["gemm_fixed_s"]
    with pytest.raises(SpecError, match="missing \\[library\\] parameter 'gemm_fixed_s'"):
        parse_spec(bad, "x.toml")
    bad = _doc("h100")
    bad["library"]["gemm16_fixed_s"] = bad["library"]["gemm_fixed_s"]
    with pytest.raises(SpecError, match="unknown \\[library\\] parameter 'gemm16_fixed_s'"):
        parse_spec(bad, "x.toml")
    bad = _doc("h100")
    bad["library"]["spmm_bytes_per_s"]["unit"] = "GB/s"
    with pytest.raises(SpecError, match="library.spmm_bytes_per_s has unit 'GB/s'"):
        parse_spec(bad, "x.toml")
    bad = _doc("h100")
    bad["library"]["node_s"]["value"] = -1.0
    with pytest.raises(SpecError, match="library.node_s = -1.0 s is impossible"):
        parse_spec(bad, "x.toml")
    bad = _doc("v100")
    bad["library"]["transferred_from"] = ""
    with pytest.raises(SpecError, match="transferred_from = '' must name the measured GPU"):
        parse_spec(bad, "x.toml")
    assert parse_spec(_doc("h100"), "x.toml").library_from == ""


def test_fp16_library_transfer_is_checked_on_the_h200s_own_sweep():
    """The H100's fp16 table transferred to the H200 predicts the H200's own fp16 library sweep
    (measured, never fitted into its spec) about as well as the fp32 transfer does its sweep."""
    from gpusim.calibrate import transfer_check

    chk = transfer_check("h100", "h200", "library_fp16")
    assert chk["transferred"]["points"] >= 100
    assert chk["own_fit"]["mape"] < chk["transferred"]["mape"] < 0.15
    from gpusim.specs import spec_path

    comment = " ".join(line.lstrip("# ") for line in spec_path("v100").read_text().splitlines()
                       if line.startswith("#"))
    assert f"MAPE {100 * chk['transferred']['mape']:.1f}% (its own fit" in comment


def test_fp16_library_table_is_checked_like_the_fp32_one():
    bad = _doc("h100")
    del bad["library_fp16"]["spmv_fixed_s"]
    with pytest.raises(SpecError, match="missing \\[library_fp16\\] parameter 'spmv_fixed_s'"):
        parse_spec(bad, "x.toml")
    bad = _doc("h100")
    bad["library_fp16"]["gemm_bytes_per_s"]["value"] = 0.0
    with pytest.raises(SpecError,
                       match="library_fp16.gemm_bytes_per_s = 0.0 bytes/s is impossible"):
        parse_spec(bad, "x.toml")
    bad = _doc("h100")
    bad["library_fp16"] = 3
    with pytest.raises(SpecError, match="\\[library_fp16\\] must be a table"):
        parse_spec(bad, "x.toml")
    none = _doc("h100")
    del none["library_fp16"]
    assert parse_spec(none, "x.toml").library_params_fp16 is None
    assert load_spec("v100").library_fp16_from == "h100"
    assert load_spec("h100").source("library_fp16.node_s").startswith("[C]")


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_library_table_is_the_fit_of_its_recorded_sweep(gpu):
    """The spec's [library] values are what gpusim.calibrate fits to the recorded sweep (no
    campaign case in it), and the fit's recorded quality holds."""
    import json

    from gpusim.calibrate import ROOT, fit_library
    from measurements.campaign import LAYERS

    sweep = json.loads((ROOT / "measurements" / gpu / "library_sweep.json").read_text())
    assert not {(v["hidden"], v["batch"]) for v in sweep["layers"].values()} & \
        {(n, b) for n, b, _ in LAYERS}
    fitted = fit_library(sweep)
    spec = load_spec(gpu).library_params
    for k, v in fitted["values"].items():
        assert spec[k] == pytest.approx(v, rel=1e-3, abs=1e-12), k
    assert fitted["fit_mape"] < 0.15 and fitted["cv_mape"] < 0.2


def test_library_fit_rejects_bad_sweeps():
    import json

    from gpusim.calibrate import ROOT, fit_library
    from kernels_ir.errors import InputError

    sweep = json.loads((ROOT / "measurements" / "h100" / "library_sweep.json").read_text())
    one = dict(list(sweep["layers"].items())[:1])
    key = next(iter(one))
    broken = {key: {k: v for k, v in one[key].items() if k != "nnz"}}
    with pytest.raises(InputError, match=f"layer '{key}': missing or bad field 'nnz'"):
        fit_library({"layers": broken})
    with pytest.raises(InputError, match="needs at least"):
        fit_library({"layers": one})
    neg = json.loads(json.dumps(sweep))
    neg["layers"][key]["paths"]["cusparse"]["per_step_s"] = 0.0
    with pytest.raises(InputError, match="cusparse: per_step_s=0.0 is not a positive time"):
        fit_library(neg)
    only_b1 = {k: v for k, v in sweep["layers"].items() if v["batch"] == 1}
    with pytest.raises(InputError, match="never times a gemm kernel"):
        fit_library({"layers": only_b1})


def test_partition_values_checked():
    doc = _doc("v100")
    doc["params"]["l2_far_extra_cycles"]["value"] = 100
    with pytest.raises(SpecError, match="l2_far_extra_cycles = 100 with l2_partitions = 1"):
        parse_spec(doc, "x.toml")
    doc = _doc("h100")
    doc["params"]["l2_partition_interleave_bytes"]["value"] = 1000
    with pytest.raises(SpecError, match="l2_partition_interleave_bytes = 1000 must be a power"):
        parse_spec(doc, "x.toml")
    doc = _doc("h100")
    doc["params"]["l2_far_extra_cycles"]["value"] = 1000
    with pytest.raises(SpecError, match="leaves no near latency"):
        parse_spec(doc, "x.toml")


def test_v100_library_table_is_the_h100_fit_transferred():
    """The V100 was never measured: its [library] table is what gpusim.calibrate transfers from
    the H100 fit (type I, marked transferred_from = "h100"), not hand-set values."""
    from gpusim.calibrate import transfer_library

    v100 = load_spec("v100")
    assert v100.library_from == "h100"
    moved = transfer_library(load_spec("h100"), v100)
    for k, v in v100.library_params.items():
        assert v == pytest.approx(moved[k], rel=1e-3, abs=1e-12), k
        assert v100.source(f"library.{k}") == f"[I] {moved['_sources'][k]}", k
    # streaming classes keep their fraction of the DRAM bandwidth
    h100 = load_spec("h100")
    frac = h100.library_params["gemv_bytes_per_s"] / h100.dram_bandwidth_bytes_per_s
    assert v100.library_params["gemv_bytes_per_s"] == pytest.approx(
        frac * v100.dram_bandwidth_bytes_per_s, rel=1e-3)


def test_library_transfer_predicts_the_h200_out_of_sample():
    """The H100 fit transferred to the H200 against the H200's own library_sweep.json (never used
    by the transfer). Measured when written: MAPE 13.86% (90 timings), the H200's own fit 13.25%,
    the H100 values unchanged 16.21%. The bound (14.5%) is that result plus 0.6 points; the
    transfer must also beat the untransferred values and stay within 1.5 points of the H200's
    own fit. (The H200 has the H100's SMs and clock: this checks the DRAM scaling and the
    absolute fixed costs, not the sm_count x clock_hz rule.)"""
    from gpusim.calibrate import transfer_check

    chk = transfer_check("h100", "h200")
    assert chk["transferred"]["points"] >= 90
    assert chk["transferred"]["mape"] < 0.145
    assert chk["transferred"]["mape"] < chk["unchanged"]["mape"] - 0.015
    assert chk["transferred"]["mape"] < chk["own_fit"]["mape"] + 0.015


def test_library_transfer_needs_a_fitted_source():
    from gpusim.calibrate import transfer_library
    from kernels_ir.errors import InputError

    with pytest.raises(InputError, match="v100 has no fitted \\[library\\] table"):
        transfer_library(load_spec("v100"), load_spec("h200"))
    same = transfer_library(load_spec("h100"), load_spec("h100"))
    for k, v in load_spec("h100").library_params.items():
        assert same[k] == pytest.approx(v, rel=1e-3, abs=1e-12), k


def test_fp16_library_table_is_the_fit_of_the_cells_sweep_and_is_used_for_fp16():
    """[library_fp16] is gpusim.calibrate's fit to the fp16 layers of library_sweep_cells.json
    (sizes no draw holds); the V100 and H200 carry it transferred; predict prices fp16 layers'
    libraries with it and fp32 layers with [library] (unchanged by it)."""
    import dataclasses
    import json

    from gpusim.calibrate import ROOT, fit_library, transfer_library
    from measurements.campaign import recorded_layers
    from models.analytical import predict_many

    sweep = json.loads((ROOT / "measurements" / "h100" / "library_sweep_cells.json").read_text())
    assert not {(v["hidden"], v["batch"], v["density"]) for v in sweep["layers"].values()} & \
        recorded_layers()
    fitted = fit_library(sweep, "fp16")
    h100 = load_spec("h100")
    for k, v in fitted["values"].items():
        assert h100.library_params_fp16[k] == pytest.approx(v, rel=1e-3, abs=1e-12), k
    assert fitted["points"] >= 100 and fitted["fit_mape"] < 0.1 and fitted["cv_mape"] < 0.15
    for gpu in ("v100", "h200"):
        spec = load_spec(gpu)
        assert spec.library_fp16_from == "h100"
        moved = transfer_library(h100, spec, "library_fp16")
        for k, v in spec.library_params_fp16.items():
            assert v == pytest.approx(moved[k], rel=1e-3, abs=1e-12), (gpu, k)

    def t(spec, kind, dtype):
        return float(predict_many(spec, 1024, 4, 0.05, kernels=[kind], dtype=dtype)[kind]
                     .per_step_s.reshape(-1)[0])
    without = dataclasses.replace(h100, library_fp16=())
    for kind in ("cublas", "cusparse"):
        assert t(h100, kind, "fp32") == t(without, kind, "fp32")
        assert t(h100, kind, "fp16") != t(without, kind, "fp16")
