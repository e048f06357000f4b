"""The fresh draws (``measurements/<gpu>/fresh_*/``): random layers measured on a GPU with the
campaign's checks, the project's out-of-sample evidence (``gpusim crosscheck``, in / out of
sample by model fingerprint: :mod:`gpusim.samples`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusim.measurements import load_campaign
from gpusim.samples import draws
from measurements.campaign import FRESH_BATCHES, FRESH_DENSITY, FRESH_HIDDEN, FRESH_VARIANTS

ROOT = Path(__file__).resolve().parents[1]
FRESH = sorted(ROOT.glob("measurements/*/fresh_*/campaign.json"))


def test_there_is_a_fresh_draw():
    assert FRESH, "no fresh draw recorded (measurements/campaign.py --fresh N --seed S)"


@pytest.mark.parametrize("path", FRESH, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_fresh_draw_is_complete_and_checked(path):
    camp = load_campaign(path.parent)
    data = json.loads(path.read_text())
    fresh = data["fresh"]
    assert len(fresh["layers"]) == fresh["n"] >= 12
    assert len(fresh["model_fingerprint"]) == 64
    assert f"_s{fresh['seed']}" in path.parent.name
    campaign_layers = {(c["hidden"], c["batch"], c["density"])
                       for c in load_campaign(path.parent.parent).cases}
    for h, b, d in fresh["layers"]:
        assert FRESH_HIDDEN[0] <= h <= FRESH_HIDDEN[1] and b in FRESH_BATCHES
        assert FRESH_DENSITY[0] <= d <= FRESH_DENSITY[1]
        assert (h, b, d) not in campaign_layers            # never seen by the campaign
        mine = [c for c in camp.cases if (c["hidden"], c["batch"], c["density"]) == (h, b, d)]
        sparse = {(c["sync"], c["wide_loads"], c["layout"]) for c in mine
                  if c["kind"] == "sparse_persistent"}
        assert sparse == set(FRESH_VARIANTS), (h, b, d)
        assert {"csr", "cublas", "cusparse"} <= {c["kind"] for c in mine}
    for c in camp.ok_cases:      # a time counts only for checked values
        assert c["result"]["values_ok"] is True and c["result"]["max_rel_err"] <= 1e-5, c["id"]
    # raw repeats and the provenance a later reader needs
    assert all(len(c["result"]["per_step_raw_s"]) >= 5
               for c in camp.ok_cases)
    for key in ("gpu_name", "driver_version", "cuda_runtime_version", "cupy_version", "date",
                "command"):
        assert camp.provenance[key]
    assert "--fresh" in camp.provenance["command"]
    kernels = [c for c in camp.ok_cases if c["kind"] != "cublas" and c["kind"] != "cusparse"]
    assert sum(c["id"] in camp.ncu for c in kernels) >= 0.9 * len(kernels)   # Nsight counts


def test_labels_of_the_recorded_draws():
    """Each draw is in sample or out of sample by the fingerprint rule; never both, never
    declared by hand."""
    for gpu_dir in {p.parent.parent for p in FRESH}:
        labels = {g.name: g.sample for g in draws(gpu_dir)}
        assert labels["campaign"] == "in sample"
        assert len(labels) >= 2


def test_the_campaign_records_the_counters_that_check_bank_conflicts_by_address():
    """The campaign's Nsight pass asks for the SASS-patched shared wavefronts and the banks'
    arbitration counter under the names the loader and crosscheck read; the draws measured
    since (s15, s16) hold them for every profiled case."""
    from gpusim.measurements import ARBITRATION, SASS_WAVEFRONTS, load_campaign
    from measurements.campaign import NCU_METRICS

    assert SASS_WAVEFRONTS in NCU_METRICS and ARBITRATION in NCU_METRICS
    for seed in (15, 16):
        camp = load_campaign(ROOT / "measurements" / "h100" / f"fresh_2026-11-25_s{seed}")
        assert camp.ncu and all(SASS_WAVEFRONTS in m and ARBITRATION in m
                                for m in camp.ncu.values())
