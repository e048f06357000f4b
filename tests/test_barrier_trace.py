"""``measurements/barrier_trace.py``: the stamps it puts into the barrier kernel's CUDA, its
``no_tanh`` form, its summaries, and the H200 record (``measurements/h200/barrier_trace.json``)
with the README's table and claims."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from measurements import barrier_trace as bt

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "measurements" / "h200"


def _code(h=320, b=4, d=0.068, variant="full"):
    from gpusim.backends.cupy_backend import generate
    from gpusim.specs import load_spec
    prog = bt.build(h, b, d, bt.STEPS, load_spec("h200"), variant)
    return generate(bt._with_ts(prog.kernel, bt.STEPS)).code


@pytest.mark.parametrize("h,b", [(320, 4), (1112, 2), (512, 8)])
def test_the_stamps_sit_around_the_three_barriers(h, b):
    code = bt.instrumented_code(_code(h, b), bt.STEPS)
    lines = [x.strip() for x in code.splitlines()]
    syncs = [i for i, x in enumerate(lines) if x == "__syncthreads();"]
    stamp = {k: next(i for i, x in enumerate(lines) if f"g_ts[ts_i + {k}] = (int)clock64()" in x)
             for k in range(6)}
    assert len(syncs) == 3
    assert stamp[0] < syncs[0] < stamp[1] < stamp[2] < syncs[1] < stamp[3] < stamp[4] \
        < syncs[2] < stamp[5]
    assert "g_ts[ts_i + 6] = (int)g" in code and "int* g_ts" in code


def test_a_kernel_without_the_expected_shape_is_refused():
    code = _code()
    with pytest.raises(AssertionError, match="time loop"):
        bt.instrumented_code(code, bt.STEPS + 1)
    with pytest.raises(AssertionError, match="2 __syncthreads"):
        bt.instrumented_code(code.replace("__syncthreads();", "", 1), bt.STEPS)


def test_no_tanh_moves_instead_and_keeps_the_rest():
    from gpusim.specs import load_spec
    from kernels_ir.errors import InputError
    from kernels_ir.ir import Op, instructions
    spec = load_spec("h200")
    full = [x.op for x in instructions(bt.build(1112, 2, 0.061, 4, spec).kernel)]
    cut = [x.op for x in instructions(bt.build(1112, 2, 0.061, 4, spec, "no_tanh").kernel)]
    assert full.count(Op.TANH) == 2 and cut.count(Op.TANH) == 0
    assert len(full) == len(cut)
    assert all(c is (Op.MOV if f is Op.TANH else f) for f, c in zip(full, cut, strict=True))
    assert "tanhf" not in _code(variant="no_tanh") and "tanhf" in _code()
    with pytest.raises(InputError, match="variant='exp'"):
        bt.build(320, 4, 0.068, 4, spec, "exp")


def test_summarise_measures_each_phase_and_the_body_from_the_release():
    steps, ctas, warps = 4, 2, 3
    t0 = np.arange(steps)[:, None, None] * 1000.0 + np.zeros((steps, ctas, warps))
    tg, ta = t0 + 400, t0 + 500 + np.arange(warps) * 10      # the last arrival at +520
    t2 = t0 + 540
    tq = t2 + 100 + np.arange(warps) * 20                    # bodies 100, 120, 140
    t3 = tq + 50
    s = bt.summarise(t0, tg, ta, t2, tq, t3)
    assert s["grid_wait_ns"] == 400 and s["staging_ns"] == 140 and s["arrive_ns"] == 50
    assert s["body_ns"] == 120 and s["body_cta_max_ns"] == 140 and s["step_ns"] == 1000
    assert s["body_from_release_ns"] == 140 and s["cta_body_from_release_ns"] == 160


def _rows():
    rec = json.loads((H200 / "barrier_trace.json").read_text())
    lam = json.loads((H200 / "lamport_trace_layers.json").read_text())
    return rec, lam, rec["simulated"]["results"], lam["simulated"]["results"]


def test_the_h200_record_and_its_table(measurements_section):
    rec, lam, sim, lsim = _rows()
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
    assert all(r["status"] == "ok" for r in rec["results"].values())
    assert len(rec["results"]) == 14
    section = measurements_section("## The barrier kernel's step, and the body")
    same, short = 0, 0
    for key, r in rec["results"].items():
        g, s = r["stamped"]["summary"], sim[key]
        gn, sn = r["no_tanh"]["summary"], sim[key]["no_tanh"]
        lg = lam["results"][key]["inplace"]["summary"]["compute_ns"]
        ls = lsim[key]["prefilled"]["compute_ns"]
        row = (f"| {key.rsplit('-d', 1)[0]} | {g['step_ns']:.0f} / {s['step_ns']:.0f} | "
               f"{g['grid_wait_ns'] + g['staging_ns']:.0f} / "
               f"{s['grid_wait_ns'] + s['staging_ns']:.0f} | {g['body_ns']:.0f} / "
               f"{s['body_ns']:.0f} | {lg:.0f} / {ls:.0f} | {g['arrive_ns']:.0f} / "
               f"{s['arrive_ns']:.0f} | {g['body_ns'] - gn['body_ns']:.0f} / "
               f"{s['body_ns'] - sn['body_ns']:.0f} |")
        assert row in section, row
        same += abs(g["body_ns"] - lg) <= 16
        # the simulator's body is short in both kernels, its closing barrier too
        short += g["body_ns"] - s["body_ns"] >= 25 and lg - ls >= 25
        assert g["arrive_ns"] > 2 * s["arrive_ns"]
    # 13 of 14 since the engine took the SASS's static stall counts (h720-b2: 18 ns short)
    assert same >= 12 and short >= 13
    # the tanh in place, with the branch region its ``if`` is (``body_probe.json``): the GPU's
    # and the simulator's agree with one row a warp at batch 4; with two rows at batch 2 the
    # GPU's costs 102-116 ns, the simulator's 75 (55 before the engine issued in ptxas's order,
    # where the next row's loads wait before the region)
    for key in ("h832-b4-d0.114", "h1008-b4-d0.036", "h1080-b2-d0.1", "h1112-b2-d0.061"):
        g, s = rec["results"][key], sim[key]
        gt = g["stamped"]["summary"]["body_ns"] - g["no_tanh"]["summary"]["body_ns"]
        st = s["body_ns"] - s["no_tanh"]["body_ns"]
        if "-b4-" in key:
            assert abs(gt - st) < 10, key
        else:
            assert gt - st > 20 and st > 65, key


@pytest.mark.slow
def test_the_records_simulated_values_are_todays():
    from gpusim.specs import load_spec
    rec, _, sim, _ = _rows()
    r = rec["results"]["h720-b2-d0.015"]
    got = bt.simulate_layer(load_spec("h200"), r["hidden"], r["batch"], r["density"])
    for k, v in got.items():
        assert v == pytest.approx(sim["h720-b2-d0.015"][k], rel=1e-9), k


def test_the_tanh_chain_beside_other_warps(measurements_section):
    """``h200/chain_warps.json``: eight warps running the tanh chain side by side cost a link
    a few cycles, not the tens the tanh loses inside the kernels; sixteen show the SFU's rate."""
    from measurements import chain_warps

    rec = json.loads((H200 / "chain_warps.json").read_text())
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(rec["results"]) == {k for k, *_ in chain_warps.ENTRIES}
    hz = rec["simulated"]["clock_hz"]
    cyc = {k: r["per_op_s"] * hz for k, r in rec["results"].items()}
    sim = {k: r["per_op_cycles"] for k, r in rec["simulated"]["results"].items()}
    section = measurements_section("## The barrier kernel's step, and the body")
    row = " / ".join(f"{cyc[f'tanh_w{w}']:.1f}" for w in chain_warps.WARPS)
    assert f"A link costs {row} cycles on the GPU" in section
    assert cyc["tanh_w8"] - cyc["tanh_w1"] < 10 and cyc["tanh_w16"] - cyc["tanh_w1"] > 15
    assert all(sim[f"tanh_w{w}"] == pytest.approx(68.0) for w in chain_warps.WARPS)
    for op in ("exp", "ffma", "shfl"):
        assert abs(cyc[f"{op}_w8"] - cyc[f"{op}_w1"]) < 2
    # one warp: pipes.chain_latency's kernel; the recorded kernels are the probe's
    from gpusim.measurements import kernel_fingerprint
    from kernels_ir.kernels.microbench.pipes import chain_latency
    assert kernel_fingerprint(chain_warps.chain(200, op="tanh").kernel) == \
        kernel_fingerprint(chain_latency(200, op="tanh").kernel)
    for key, name, kw in chain_warps.ENTRIES:
        got = kernel_fingerprint(chain_warps._builder(name, kw)(200).kernel)
        assert got == rec["results"][key]["sizes"]["200"]["kernel"], key
    assert chain_warps.chain(rounds=2, op="tanh", warps=8).kernel.block == 256


def test_the_tanh_chain_with_its_store(measurements_section):
    """``h200/chain_store.json``: a store after every link costs the tanh and FFMA chains
    about a cycle on the GPU."""
    from measurements import chain_warps

    rec = json.loads((H200 / "chain_store.json").read_text())
    assert set(rec["results"]) == {k for k, *_ in chain_warps.STORE_ENTRIES}
    hz = rec["simulated"]["clock_hz"]
    cyc = {k: r["per_op_s"] * hz for k, r in rec["results"].items()}
    section = measurements_section("## The barrier kernel's step, and the body")
    assert (f"cost {cyc['tanh_w1']:.1f} / {cyc['tanh_w1_st']:.1f} cycles (tanh, one warp, "
            f"without / with the stores) and {cyc['tanh_w8']:.1f} / {cyc['tanh_w8_st']:.1f}"
            ) in " ".join(section.split())
    for op in ("tanh", "ffma"):
        for w in (1, 8):
            assert abs(cyc[f"{op}_w{w}_st"] - cyc[f"{op}_w{w}"]) < 1.5
    from kernels_ir.errors import InputError
    with pytest.raises(InputError, match="store=True with op='shfl'"):
        chain_warps.chain(op="shfl", store=True)
    with pytest.raises(InputError, match="warps=33"):
        chain_warps.chain(op="tanh", warps=33)
    mb = chain_warps.chain(rounds=2, op="tanh", warps=2, store=True)
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    assert mb.check(simulate(mb.kernel, mb.inputs, load_spec("h200")).globals)


def test_the_traced_kernel_compiles_cooperative_with_its_stamps():
    """``_compile_traced`` hands the runner the stamped CUDA of the traced kernel, launched
    with the co-residency guarantee as the campaign launches the barrier kernel."""
    import gpusim.backends.cupy_backend as cb
    from gpusim.specs import load_spec

    class Runner:                  # compiles as the CuPy runner does: through cb.generate
        def __init__(self):
            self.calls = []

        def compile(self, kernel, cooperative=False):
            self.calls.append((kernel.name, cooperative, cb.generate(kernel).code))
            return self.calls[-1]

        def check_grid(self, comp):
            pass

    original = cb.generate
    prog = bt.build(320, 4, 0.068, bt.STEPS, load_spec("h200"))
    runner = Runner()
    comp, size = bt._compile_traced(runner, prog.kernel)
    name, coop, code = comp
    assert name.endswith("_traced") and coop is True
    assert code.count("(int)clock64()") == 6 and "g_ts[ts_i + 6] = (int)g" in code
    assert size == bt.STEPS * 132 * 8 * len(bt.FIELDS)
    assert cb.generate is original


def test_the_gpu_summary_survives_a_clock_wrap_between_warps():
    """32-bit clock stamps that wrap inside the kept steps and between two warps of one step
    summarise as the unwrapped stamps do."""
    steps, ctas, warps = 20, 2, 8
    rng = np.random.default_rng(1)
    t0 = (np.arange(steps) * 3000)[:, None, None] + rng.integers(0, 50, (steps, ctas, warps)) \
        + 2 ** 32 - 30000
    f = [t0] + [t0 + 100 * (i + 1) + rng.integers(0, 20, (steps, ctas, warps)) for i in range(5)]
    ts = np.stack([x % 2 ** 32 for x in f] + [np.zeros_like(t0)], axis=-1)
    ts = np.where(ts >= 2 ** 31, ts - 2 ** 32, ts).astype(np.int32)
    got = bt.gpu_summary(ts, 1e9)
    want = bt.summarise(*[x[8:-1].astype(float) for x in f])
    assert got == pytest.approx(want)


@pytest.mark.xfail(strict=True, reason="the simulator's body after the staging barrier (the "
                   "mat-vec, its reduction, the tanh and the h store) is 25-89 ns shorter than "
                   "the GPU's in both the barrier and the Lamport kernels (with the branch "
                   "region of the epilogue now charged, 25-67 ns)")
def test_the_simulators_body_is_the_gpus():
    """h832-b4 (one row a warp, the GPU's stamp after the barrier read after its release):
    the simulated body within 15 ns of the GPU's (270 ns)."""
    from gpusim.specs import load_spec
    rec = json.loads((H200 / "barrier_trace.json").read_text())
    r = rec["results"]["h832-b4-d0.114"]
    got = bt.simulate_layer(load_spec("h200"), r["hidden"], r["batch"], r["density"])
    assert abs(got["body_ns"] - r["stamped"]["summary"]["body_ns"]) <= 15


def test_a_probes_own_builder_is_timed_and_hashed(monkeypatch):
    """``probe.time_microbench(build=...)`` (chain_warps' entries): the probe's builder is the
    one timed and whose kernels are hashed, not the registry's."""
    import gpusim.backends.cupy_backend as cb
    from gpusim.measurements import kernel_fingerprint
    from measurements import chain_warps
    from measurements.probe import time_microbench

    seen = []

    def fake_run(sizes, build, **kw):
        seen.extend(build(s).name for s in sizes)
        return {"per_op_s": 1e-9, "sizes": {str(s): {} for s in sizes}}
    monkeypatch.setattr(cb, "run_microbench", fake_run)
    build = chain_warps._builder("tanh_latency", {"warps": 8})
    r = time_microbench(None, "tanh_latency", (2, 4), {"warps": 8}, build=build)
    assert r["status"] == "ok" and seen == ["tanh_latency_w8"] * 2
    assert r["sizes"]["4"]["kernel"] == kernel_fingerprint(build(4).kernel)
