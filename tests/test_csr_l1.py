"""measurements/csr_l1.py: its layers are recorded CSR cases (same seeds), and its record holds,
for every one, the Nsight L1/L2 counts of one step next to the simulator's L2 loads of the same
step; the simulator's loads for the smallest layer are what it computes today."""

from __future__ import annotations

from pathlib import Path

from gpusim.engine import simulate
from gpusim.measurements import load_json
from gpusim.specs import load_spec
from measurements import csr_l1
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "measurements" / "h100" / "csr_l1.json"


def test_layers_are_recorded_csr_cases():
    cases = {}
    for draw in (ROOT / "measurements" / "h100").glob("fresh_*"):
        for c in load_json(draw / "campaign.json")["cases"]:
            if c["kind"] == "csr":
                cases[(c["hidden"], c["batch"], c["density"])] = c["seed"]
    for h, b, d, seed in csr_l1.LAYERS:
        assert cases[(h, b, d)] == seed


def test_record_compares_nsight_with_the_simulator():
    rec = read_record(RECORD)
    for h, b, d, _ in csr_l1.LAYERS:
        name = csr_l1.case_name(h, b, d)
        m = rec["ncu"]["cases"][name]["metrics"]
        assert set(csr_l1.METRICS) <= set(m)
        assert rec["simulated"]["results"][name]["l2_transactions"]["data"] > 0
    h, b, d, seed = csr_l1.LAYERS[0]
    st = csr_l1.step(h, b, d, seed)
    r = simulate(st.kernel, st.inputs, load_spec("h100"), l2_warm=True)
    assert (r.l2_transactions["data"]
            == rec["simulated"]["results"][csr_l1.case_name(h, b, d)]["l2_transactions"]["data"])
