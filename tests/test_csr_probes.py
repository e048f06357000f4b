"""The CSR-step and L2-sharing probes of 2026-11-25 (``measurements/h100/csr_limit.json``,
``csr_trace.json``, ``l2_shared.json``, ``smem_store_mix.json``): the records are complete and
say what measurements/README.md says of them, and their simulated values are today's."""

from __future__ import annotations

from pathlib import Path

import pytest

from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"


def _load(name):
    return read_record(str(H100 / name))   # the record, or its gzipped copy


def test_csr_limit_no_unit_is_full_at_batch_1_to_4():
    rec = _load("csr_limit.json")
    warm = {n: c["metrics"] for n, c in rec["ncu"]["cases"].items() if "cold" not in n}
    assert len(warm) == 8 and rec["ncu"]["returncode"] == 0
    for name, m in warm.items():
        units = [v for k, v in m.items() if isinstance(v, float) and (
            k.startswith(("l1tex__", "lts__"))) and k.endswith("pct_of_peak_sustained_active")]
        busiest = max(units)
        if "-b8-" in name:
            assert busiest > 100, name          # the data stage binds at batch 8
        else:
            assert busiest < 53, name
        assert rec["summary"][name]["stalls"]["long_scoreboard"] > 9, name


def test_csr_trace_the_gathers_are_the_slow_stage():
    """Every layer's GPU stages are in the record; the row index, the bounds and the values agree
    with the simulator within 35%; since the L2's contention groups the 4 gathers of h take the
    GPU 0.83 to 1.46 times the simulator's cycles (before the groups 1.5 to 2.6 times from
    hidden 1336 up), as the README says; the README's table has the record's medians."""
    rec = _load("csr_trace.json")
    sim = rec["simulated"]["results"]
    text = (ROOT / "measurements" / "README.md").read_text()
    for name, r in rec["results"].items():
        g = r["summary"]
        s = sim[name]
        for k in ("row", "se", "vc"):
            assert g[k]["median"] == pytest.approx(s[k]["median"], rel=0.35), (name, k)
        ratio = g["hv"]["median"] / s["hv"]["median"]
        assert 0.8 < ratio < 1.5, name
        row = (f"| {name.removeprefix('csr-').rsplit('-d', 1)[0]} | "
               f"{g['row']['median']:.0f} / {s['row']['median']:.0f} |")
        assert row in text, row
        assert f"{g['hv']['median']:.0f} / {s['hv']['median']:.0f}" in text, name


@pytest.mark.slow
def test_csr_trace_simulated_values_are_todays():
    from gpusim.specs import load_spec
    from measurements.csr_trace import LAYERS, simulate_layer

    rec = _load("csr_trace.json")
    h, b, d, s = LAYERS[0]
    today = simulate_layer(load_spec("h100"), h, b, d, s)
    assert today == rec["simulated"]["results"][f"csr-h{h}-b{b}-d{d:g}"]


def test_l2_shared_lockstep_sharing_costs_and_spreading_helps():
    rec = _load("l2_shared.json")
    g = {k: r["cycles_per_load_per_sm"] for k, r in rec["results"].items()}
    assert all(r["status"] == "ok" for r in rec["results"].values())
    assert g["l2_shared_shared_w4"] > 2.5 * g["l2_shared_private_w4"]
    assert g["l2_shared_shared_rot_w4"] < 1.4 * g["l2_shared_private_w4"]
    n = [g[f"l2_shared_shared_w4_n{k}"] for k in (8, 33, 66)] + [g["l2_shared_shared_w4"]]
    assert n == sorted(n) and n[-1] > 4 * n[0]
    assert g["l2_shared_private_w4_n8"] < 0.6 * g["l2_shared_private_w4"]   # not a per-SM limit
    assert g["l2_shared_shared_spread_w4"] < 0.75 * g["l2_shared_shared_w4"]
    # with the L2's contention groups the simulator's lockstep sharing costs too, less than the
    # GPU's; the README quotes the record's values
    sim = {k: r["cycles_per_load_per_sm"] for k, r in rec["simulated"]["results"].items()}
    assert 1.5 * sim["l2_shared_private_w4"] < sim["l2_shared_shared_w4"] < g["l2_shared_shared_w4"]
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    assert (f"**{g['l2_shared_shared_w4']:.0f} [186-209]** / 64 / "
            f"{sim['l2_shared_shared_w4']:.0f}") in text
    assert f"72 [71-81] / 64 / {sim['l2_shared_private_w4']:.0f}" in text


def test_smem_store_mix_no_conflicts_anywhere():
    rec = _load("smem_store_mix.json")
    cases = rec["ncu"]["cases"]
    assert len(cases) == 8 and all(r["values_ok"] for r in rec["results"].values())
    for name, c in cases.items():
        m = c["metrics"]
        assert m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"] == 0, name
        assert m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 0, name
    assert cases["smem_store_mix_st_ldg_miss"]["metrics"][
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum"] > 100_000   # fills happened
    assert all(r["bank_conflicts"] == 0 for r in rec["simulated"]["results"].values())


def test_l2_shared_stride_scan_is_not_monotonic_and_the_readme_has_it():
    rec = _load("l2_shared_stride.json")
    assert "provenance" in rec and all(r["status"] == "ok" for r in rec["results"].values())
    g = {k: r["cycles_per_load_per_sm"] for k, r in rec["results"].items()}
    k = {n: g[f"l2_shared_shared_spread{n}_w4"] for n in (2, 4, 8, 16)}
    k[1], k[64] = g["l2_shared_shared_w4"], g["l2_shared_shared_spread_w4"]
    assert k[4] > 1.5 * max(k[2], k[8]) and k[64] > 1.5 * k[16]       # aliasing strides
    assert min(k.values()) > g["l2_shared_private_w4"]
    # the simulator, with the L2's contention groups, has the same aliasing strides, with less
    # contrast than the GPU's (64 lines apart: 1.33 times the 16-line stride, GPU 2.2)
    s = {k: r["cycles_per_load_per_sm"] for k, r in rec["simulated"]["results"].items()}
    ks = {n: s[f"l2_shared_shared_spread{n}_w4"] for n in (2, 4, 8, 16)}
    ks[1], ks[64] = s["l2_shared_shared_w4"], s["l2_shared_shared_spread_w4"]
    assert ks[4] > 1.5 * max(ks[2], ks[8]) and ks[1] > 1.5 * ks[16] and ks[64] > 1.2 * ks[16]
    text = (ROOT / "measurements" / "README.md").read_text()
    row = "| GPU | " + " | ".join(f"{k[n]:.0f}" if n not in (4, 64) else f"**{k[n]:.0f}**"
                                  for n in (1, 2, 4, 8, 16, 64))
    assert row + f" | {g['l2_shared_private_w4']:.0f} |" in text
    assert ("| simulator, with the L2 groups | "
            + " | ".join(f"{ks[n]:.0f}" for n in (1, 2, 4, 8, 16, 64))
            + f" | {s['l2_shared_private_w4']:.0f} |") in text


def test_the_l1_edge_layers_straddle_the_edge_where_h_leaves_l1():
    """``csr_trace.py --layers l1edge``: the H200 layers on both sides of the edge where h no
    longer fits in an SM's L1 beside the row pointers (held smallest first, as the simulator's
    L1 and the model's ``_resident`` admit them), so that the GPU's times show whether the step
    jumps there (it does not: ``tests/models/test_csr_model.py``)."""
    from gpusim.specs import load_spec
    from measurements import csr_trace

    l1 = load_spec("h200").l1_unified_bytes_per_sm
    held = [4 * (h + 1) + 4 * h + 4 * h * b <= l1 for h, b, _, _ in csr_trace.L1EDGE_LAYERS]
    assert held == sorted(held, reverse=True) and 2 <= held.count(True) <= held.count(False)
    with pytest.raises(SystemExit, match="l1edge"):
        csr_trace.main(["--layers", "nope"])


def test_the_l1edge_record_has_no_step_and_the_readme_table_is_the_record():
    """``h200/csr_trace_l1edge.json.gz`` (``csr_trace.py --layers l1edge``): every layer ran,
    values checked, on an H200; the traced step's span grows by under 2% across the edge where h
    leaves L1 (6528 -> 6592) while the model before the pass-through jumped 3.2x there; the
    README's table rows are the record's spans, warp medians and simulated cycles, and today's
    model's CSR step."""
    import numpy as np

    from gpusim.specs import load_spec
    from measurements import csr_trace
    from models.analytical import predict_many

    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_trace_l1edge.json"))
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200" and rec["spec"] == "h200"
    hs = [h for h, _, _, _ in csr_trace.L1EDGE_LAYERS]
    names = [f"csr-h{h}-b8-d0.05" for h in hs]
    res, sim = rec["results"], rec["simulated"]["results"]
    assert sorted(res) == sorted(names) and sorted(sim) == sorted(names)
    assert all(res[n]["max_rel_err"] < 1e-5 for n in names)
    span = [res[n]["summary"]["span_ns"] / 1e3 for n in names]
    assert span[3] / span[2] < 1.02
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())

    def row(label, xs, fmt):
        return f"| {label} | " + " | ".join(fmt.format(x) for x in xs) + " |"

    assert row("GPU, traced step's span (us)", span, "{:.1f}") in text
    assert row("GPU, a warp's time, median (us)",
               [res[n]["summary"]["warp_ns"]["median"] / 1e3 for n in names], "{:.2f}") in text
    assert row("simulator, the kernel (k cycles)",
               [sim[n]["cycles"] / 1e3 for n in names], "{:.1f}") in text
    now = predict_many(load_spec("h200"), hs, [8] * len(hs), [0.05] * len(hs),
                       kernels=["csr-row-per-warp"])["csr-row-per-warp"].per_step_s * 1e6
    assert row("model now (us a step)", now, "{:.1f}") in text
    assert np.all(np.diff(now) > 0) and now[3] / now[2] < 1.1


def test_the_csr_dram_record_and_the_readme_table():
    """``h200/csr_dram.json`` (``csr_dram.py``): the CSR step where the values and indices stream
    from DRAM (hidden 8192, both arrays past the H200's L2 but for the control at density 0.15),
    every layer ran with its values checked on an H200. With the DRAM channel's backfill the
    simulator is within 13% of the GPU on all six (a next-free FIFO was 16-34% slow on five);
    today's model is within 13% on four of six: the batch-4 grid of two waves, whose channel the
    GPU and the simulator leave a third idle, was its known gap (-29%) until the 128-bit gathers'
    quarter-warp phases (-12%); since a missed load's pieces the batch-8 grid (+36%) and the
    control (+18%) are. The README's table rows are the record's and today's model's."""
    from gpusim.specs import load_spec
    from measurements import csr_dram

    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_dram.json"))
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200" and rec["spec"] == "h200"
    ids = [c["id"] for c in csr_dram.cases()]
    res, sim = rec["results"], rec["simulated"]["results"]
    assert sorted(res) == sorted(ids) == sorted(sim)
    assert all(res[i]["status"] == "ok" and res[i]["max_rel_err"] < 1e-5 for i in ids)
    gpu = {i: res[i]["per_step_s"] for i in ids}
    # (since a missed load's pieces the simulator's b1-d0.5 is +11.8%, it was +6.4%; since the
    # one data pipe of shuffles, shared and global loads +12.7%)
    assert all(abs(sim[i]["per_step_s"] / gpu[i] - 1) < 0.13 for i in ids)
    spec = load_spec("h200")
    model = {c["id"]: csr_dram.modelled(spec, c["hidden"], c["batch"], c["density"])["model_s"]
             for c in csr_dram.cases()}
    # the model's known gaps since a missed load's pieces: its data stage binds the batch-8 grid
    # (+36%), where the simulator's does not; the control at batch 2 +18% (both +3% before)
    gaps = {"csr-h8192-b8-d0.3": 0.40, "csr-h8192-b2-d0.15": 0.20}
    assert all(abs(model[i] / gpu[i] - 1) < gaps.get(i, 0.13) for i in ids)
    assert all(abs(model[i] / gpu[i] - 1) > 0.13 for i in gaps)     # a healed gap: take it off
    assert model["csr-h8192-b4-d0.3"] / gpu["csr-h8192-b4-d0.3"] - 1 < -0.08   # was -29%
    before = rec["simulated_before"]["results"]
    assert sum(before[i]["per_step_s"] / gpu[i] - 1 > 0.15 for i in ids) == 5
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    for i in ids:
        assert (f"| {i.removeprefix('csr-')} | {gpu[i] * 1e6:.1f} | "
                f"{sim[i]['per_step_s'] * 1e6:.1f} | {model[i] * 1e6:.1f} | "
                f"{before[i]['per_step_s'] * 1e6:.1f} | {before[i]['model_s'] * 1e6:.1f} | "
                f"{sim[i]['waves']:.0f} |") in text, i


@pytest.mark.slow
def test_the_csr_dram_records_simulated_values_are_todays():
    """One layer of ``h200/csr_dram.json`` simulated again (the control, four waves with the
    values from DRAM, about 6 s): today's engine gives the recorded price."""
    from gpusim.cli.crosscheck import predict_case
    from gpusim.specs import load_spec
    from measurements import csr_dram

    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_dram.json"))
    case = next(c for c in csr_dram.cases() if c["id"] == "csr-h8192-b2-d0.15")
    got = predict_case(case, load_spec("h200"), csr_dram.SIM_STEPS)["per_step_s"]
    assert got == pytest.approx(rec["simulated"]["results"][case["id"]]["per_step_s"], rel=1e-9)


def test_the_csr_dram_b4_record_and_the_readme_table():
    """``h200/csr_dram_b4.json`` (``csr_dram.py --layers b4``): the layers of the set, values
    checked, on an H200; batch 4 in two waves at hidden 7168-8192 runs 1.4-1.7 times the DRAM
    bound on the GPU while one wave at batch 4 and two at batch 2 run within 10% of it; the
    README's table rows are the record's."""
    from gpusim.specs import load_spec
    from measurements import csr_dram

    clock = load_spec("h200").clock_hz
    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_dram_b4.json"))
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200" and rec["spec"] == "h200"
    layers, _, seed = csr_dram.LAYER_SETS["b4"]
    ids = [c["id"] for c in csr_dram.cases(layers, seed)]
    res, sim = rec["results"], rec["simulated"]["results"]
    assert sorted(res) == sorted(ids) == sorted(sim)
    assert all(res[i]["status"] == "ok" and res[i]["max_rel_err"] < 1e-5 for i in ids)
    ratio = {i: res[i]["per_step_s"] / (sim[i]["dram_cycles"] / clock) for i in ids}
    slow = [i for i in ids if sim[i]["waves"] > 1 and "-b4-" in i]
    assert slow and all(1.4 < ratio[i] < 1.7 for i in slow)
    assert all(ratio[i] < 1.1 for i in ids if i not in slow)
    text = " ".join((ROOT / "measurements" / "README.md").read_text().split())
    for i in ids:
        assert (f"| {i.removeprefix('csr-')} | {res[i]['per_step_s'] * 1e6:.1f} | "
                f"{sim[i]['per_step_s'] * 1e6:.1f} | {sim[i]['model_s'] * 1e6:.1f} | "
                f"{sim[i]['dram_cycles'] / clock * 1e6:.1f} | {sim[i]['waves']:.0f} |") in text, i


def test_at_batch8_an_sms_load_sets_its_end_on_the_gpu_not_in_the_simulator():
    """``h200/csr_trace_batch8.json.xz`` (``csr_trace.py --layers batch8``): every layer ran on
    an H200, values checked. In the six batch-8 layers that run in one wave on SMs holding two
    different numbers of CTAs, the GPU's SMs with one CTA more end 18-29% later (a limit of the
    SM's own; Nsight puts L1TEX at 45-87% of its peak while the SM is active in the batch-8
    steps, 76-87% in the four with the longest rows, ``h200/csr_limit_batch8.json.xz``), while
    the simulator ends them -2% to +10% apart (within 3% before the shared data pipe; its loads
    wait on L2 queues that all SMs share): the known gap of the batch-8 CSR step."""
    from measurements import csr_trace

    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_trace_batch8.json"))
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200" and rec["spec"] == "h200"
    names = [f"csr-h{h}-b{b}-d{d:g}" for h, b, d, _ in csr_trace.BATCH8_LAYERS]
    res, sim = rec["results"], rec["simulated"]["results"]
    assert sorted(res) == sorted(names) == sorted(sim)
    assert all(res[n]["max_rel_err"] < 1e-5 for n in names)
    checked = 0
    for n in names:
        gpu_ends = res[n]["summary"]["sm_end_ns"]
        sim_ends = sim[n].get("sm_end_cycles")
        if "-b8-" not in n or not sim_ends or len(gpu_ends) != 2:
            continue
        lo, hi = sorted(gpu_ends, key=int)
        assert sorted(sim_ends, key=int) == [lo, hi], n     # the same CTAs on the same SMs
        gpu = gpu_ends[hi]["median"] / gpu_ends[lo]["median"]
        sim_r = sim_ends[hi]["median"] / sim_ends[lo]["median"]
        assert gpu > 1.15 and 0.97 < sim_r < 1.10 and gpu > sim_r + 0.08, (n, gpu, sim_r)
        checked += 1
    assert checked == 6


def test_the_batch8_nsight_record_puts_the_data_pipe_higher_than_at_batch4():
    """``h200/csr_limit_batch8.json.xz`` (``csr_limit.py --layers batch8``): every layer's two
    launches profiled; in each batch-8 / batch-4 twin the L1TEX data pipe is busier at batch 8
    (the eighth column of h: two 128-bit gathers a nonzero and twice the shuffles)."""
    from measurements import csr_limit, csr_trace

    rec = read_record(str(ROOT / "measurements" / "h200" / "csr_limit_batch8.json"))
    cases = rec["ncu"]["cases"]
    names = [f"csr-h{h}-b{b}-d{d:g}" for h, b, d, _ in csr_trace.BATCH8_LAYERS]
    assert sorted(cases) == sorted(names + [n + "/cold" for n in names])
    pipe = {n: cases[n]["metrics"]["l1tex__data_pipe_lsu_wavefronts.avg."
                                   "pct_of_peak_sustained_elapsed"] for n in names}
    twins = [n for n in names if "-b4-" in n]
    assert len(twins) == 4
    for n in twins:
        assert pipe[n.replace("-b4-", "-b8-")] > 1.2 * pipe[n], n
    with pytest.raises(SystemExit, match="batch8"):
        csr_limit.main(["--layers", "nope"])


def test_the_simulators_l2_sectors_are_the_gpus_l1_misses_at_batch_4_and_8():
    """``h200/csr_l2_sectors_sim.json``: the simulator's L2 data sectors of one CSR step equal
    Nsight's L1 lookup-miss sectors of the same kernels within 0.7% on the 11 layers that run in
    one wave (the two-wave 6632-b8: 7.2% fewer), so the gathers' excess time in the simulator
    (twice the GPU's at batch 8) is not more traffic: it is how the L2 serves the same traffic.
    The GPU columns are the Nsight record's (``csr_limit.py --l2-sectors`` wrote them)."""
    import json

    from measurements.csr_limit import L2_METRICS

    sim = json.loads((ROOT / "measurements" / "h200" / "csr_l2_sectors_sim.json").read_text())
    ncu = read_record(str(ROOT / "measurements" / "h200" / "csr_limit_batch8.json"))
    assert len(sim["results"]) == 12
    for name, r in sim["results"].items():
        m = ncu["ncu"]["cases"][name]["metrics"]
        assert all(r[k] == m[v] for k, v in L2_METRICS.items())
        err = r["sim_l2_data"] / r["gpu_l1_miss_sectors"] - 1
        if name == "csr-h6632-b8-d0.049":
            assert -0.075 < err < -0.07
        else:
            assert abs(err) < 0.007, name


@pytest.mark.slow
def test_the_l2_sectors_records_simulated_values_are_todays():
    """One layer of ``h200/csr_l2_sectors_sim.json`` simulated again (the smallest, about 10 s):
    today's engine gives the recorded sectors and cycles."""
    import json

    from gpusim.specs import load_spec
    from measurements.csr_limit import simulated_l2_sectors

    rec = json.loads((ROOT / "measurements" / "h200" / "csr_l2_sectors_sim.json").read_text())
    ncu = read_record(str(ROOT / "measurements" / "h200" / "csr_limit_batch8.json"))
    h, b, d, seed = next(x for x in ncu["layers"] if x[:3] == [1600, 8, 0.052])
    got = simulated_l2_sectors(load_spec("h200"), h, b, d, seed)
    r = rec["results"]["csr-h1600-b8-d0.052"]
    assert (got["sim_l2_data"], got["sim_cycles"]) == (r["sim_l2_data"], r["sim_cycles"])
