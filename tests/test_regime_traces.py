"""The H200 records of 2026-11-29's probes (measurements/README.md): the Lamport kernel's stamps
by regime (``lamport_trace.py --layers regimes``), the CSR kernel's (``csr_trace.py --layers
regimes``: the second wave at hidden 4760, batch 8) and the pollers curve; the README's tables
and claims are read from them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from measurements import csr_trace, lamport_trace
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "measurements" / "h200"


def test_the_lamport_regimes_record_and_its_table(measurements_section):
    rec = json.loads((H200 / "lamport_trace_layers.json").read_text())
    assert "--layers regimes" in rec["provenance"]["command"]
    assert rec["spec"] == "h200"
    assert set(rec["results"]) == {f"h{h}-b{b}-d{d}" for h, b, d in lamport_trace.REGIME_LAYERS}
    section = measurements_section("## The Lamport kernel's step on the H200, regime by regime")
    sim = rec["simulated"]["results"]
    gpu_first = []
    for key, r in rec["results"].items():
        assert r["status"] == "ok" and r["normal"]["max_rel_err"] <= 1e-3
        g, gi = r["normal"]["summary"], r["inplace"]["summary"]
        s, sp = sim[key]["normal"], sim[key]["prefilled"]
        polls = sum(float(n) * v[0] for n, v in s["polls"].items())
        row = (f"| {key.split('-d')[0]} | {g['step_ns']:.0f} / {s['per_step_ns']:.0f} | "
               f"{g['polls_per_warp_step']:.2f} / {polls:.2f} | {g['poll_ns']:.0f} / "
               f"{s['poll_ns']:.0f} | "
               f"{s['gpu_normal']['detection_latency_percentiles_ns'][1]:.0f} / "
               f"{s['detection_latency_percentiles_ns'][1]:.0f} | "
               f"{gi['compute_ns']:.0f} / {sp['compute_ns']:.0f} | "
               f"{gi['step_ns']:.0f} / {sp['per_step_ns']:.0f} |")
        assert row in section, row
        # the simulator's body after the barrier, stamped as the GPU's is: 25-90 ns shorter
        assert 20 <= gi["compute_ns"] - sp["compute_ns"] <= 95, key
        hist = np.array(g["polls_hist"])
        gpu_first.append(hist[1] / hist.sum())
        # the simulator polls more often than the GPU on every layer
        assert polls > g["polls_per_warp_step"], key
    assert 0.51 <= sorted(gpu_first)[2] and max(gpu_first) <= 0.87   # batch 8: 21%
    assert min(gpu_first) >= 0.2


def test_the_csr_regimes_record_shows_the_second_wave(measurements_section):
    rec = read_record(str(H200 / "csr_trace_layers.json"))     # kept xz-compressed
    assert [tuple(x) for x in rec["layers"]] == list(csr_trace.REGIME_LAYERS)
    fields = {n: i for i, n in enumerate(rec["fields"])}
    ts = np.asarray(rec["results"]["csr-h4760-b8-d0.0612"]["traced"]["ts"], dtype=np.int64)
    assert ts.shape[:2] == (595, 8)
    g0 = (ts[:, :, fields["g0"]] - ts[:, :, fields["g0"]].min()) & 0xFFFFFFFF
    g1 = (ts[:, :, fields["g1"]] - ts[:, :, fields["g0"]].min()) & 0xFFFFFFFF
    start, end = g0.min(axis=1), g1.max(axis=1)
    late = np.flatnonzero(start > 2000)
    assert late.tolist() == list(range(528, 595))        # 4 CTAs an SM x 132: the rest wait
    first_end = end[:528]
    assert 8500 < first_end.min() and first_end.max() < 10400
    assert 8900 < start[late].min() and start[late].max() < 9500   # as first-wave CTAs exit
    assert 14500 < end.max() < 15000
    section = measurements_section("## A grid larger than the co-resident CTAs runs in waves")
    assert "start at 8.96-9.44 us" in section and "ends at 14.8 us" in section


def test_the_h200_pollers_curve_and_its_table(measurements_section):
    section = measurements_section("## The pollers curve on the H200")
    names = ("lamport_pollers_curve.json", "lamport_pollers_curve_repeat.json",
             "lamport_pollers_curve_repeat2.json")
    runs = [json.loads((H200 / n).read_text())["results"] for n in names]
    rows = {"33_exact_few_warps_c1_solo": "33 / 33", "33_exact_few_warps_c1_p66": "33 / 66",
            "33_exact_few_warps_c1": "33 / 132", "66_exact_few_warps_c1_solo": "66 / 66",
            "66_exact_few_warps_c1": "66 / 132", "132_exact_warps_c1": "132 / 132"}
    for key, label in rows.items():
        ns = ", ".join(f"{r[key]['per_op_s'] * 1e9:.0f}" for r in runs)
        assert f"| {label} | {ns} |" in section, (label, ns)
