"""The H200's own records behind its spec: the CUDA-graph node (``library_profile.json``) gives
the spec's ``graph_launch_overhead_s`` when fitted again, was measured on an H200 with its
provenance, and its baselines launch the kernel chains the model charges (as the H100's)."""

import json
from pathlib import Path

import pytest

from gpusim.calibrate import fit_graph_node
from gpusim.specs import load_spec

H200 = Path(__file__).resolve().parents[1] / "measurements" / "h200"
PROFILE = json.loads((H200 / "library_profile.json").read_text())


def test_the_graph_node_record_is_an_h200_measurement():
    p = PROFILE["provenance"]
    assert "H200" in p["gpu_name"]
    for key in ("driver_version", "cuda_runtime_version", "date", "command"):
        assert p[key], key
    g = PROFILE["graph_node"]
    assert len(g["raw_s"]) == 2 and all(len(v) >= 10 for v in g["raw_s"].values())


def test_the_spec_graph_node_is_the_records_fit():
    spec = load_spec("h200")
    fit = fit_graph_node(spec, PROFILE, spec.clock_hz)
    assert fit["value"] == pytest.approx(spec.graph_launch_overhead_s, rel=1e-3)
    assert fit["measured_per_node_s"] == pytest.approx(8.35e-7, rel=1e-3)


def test_the_h200_baselines_launch_the_modelled_chains():
    from models.analytical import LIBRARY_NODES

    checked = 0
    for key, rec in PROFILE["cases"].items():
        b = int(key.split("-")[1][1:])
        for name, r in rec.items():
            assert len(LIBRARY_NODES[name](b)) == round(r["kernels_per_step"]), (key, name)
            checked += 1
    assert checked >= 25
