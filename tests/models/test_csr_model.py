"""The analytical CSR row-per-warp baseline against the simulator, per step.

The model (``models.analytical``, ``csr-row-per-warp``) reads only the spec and the kernel's
instruction counts; the simulator runs the kernel as the cross-check does (one step,
``l2_warm=True``, priced as ``time_s - launch_overhead_s + graph_launch_overhead_s``). Layers are
random (Bernoulli rows): the model predicts the expectation over such layers, the simulator runs
one of them (seeded). Gated cells (LSTM, GRU): the kernel's warp per unit and its G gate rows,
priced by the model with ``cell=``.
"""

import dataclasses
import math

import numpy as np
import pytest

from gpusim.specs import load_spec
from kernels_ir import ptxas
from kernels_ir.ir import Op, instructions
from kernels_ir.kernels.csr_baseline import (
    DEFAULT_THREADS,
    VEC,
    build_csr_baseline,
    gather_loads,
)
from kernels_ir.kernels.sparse_rnn import make_layer
from models import analytical as an

TOLERANCE = 0.15
NNZ_CAP = 1.0e6   # expected nonzeros per layer in the sweep: keeps the simulator to ~1 s a layer


def sweep_layers(count=40, seed=2026, nnz_cap=NNZ_CAP):
    """``count`` layers: hidden log-uniform in 256..8192, batch 1/2/4/8, density log-uniform in
    0.01..0.5, drawn with ``seed``; draws above ``nnz_cap`` expected nonzeros are redrawn."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        n = int(round(np.exp(rng.uniform(np.log(256), np.log(8192)))))
        b = int(rng.choice([1, 2, 4, 8]))
        d = float(np.exp(rng.uniform(np.log(0.01), np.log(0.5))))
        if n * n * d <= nnz_cap:
            out.append((n, b, round(d, 4)))
    return out


def gated_sweep_layers(count=40, seed=2027, nnz_cap=NNZ_CAP):
    """``count`` gated layers ``(cell, hidden, batch, density)``, LSTM and GRU by turns: hidden
    log-uniform in 128..4096, batch 1/2/4/8, density log-uniform in 0.01..0.5, drawn with
    ``seed``; draws above ``nnz_cap`` expected nonzeros (all G N rows) are redrawn."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        cell = ("lstm", "gru")[len(out) % 2]
        n = int(round(np.exp(rng.uniform(np.log(128), np.log(4096)))))
        b = int(rng.choice([1, 2, 4, 8]))
        d = float(np.exp(rng.uniform(np.log(0.01), np.log(0.5))))
        if {"lstm": 4, "gru": 3}[cell] * n * n * d <= nnz_cap:
            out.append((cell, n, b, round(d, 4)))
    return out


def simulated(spec, n, b, d, seed, cell="rnn"):
    from gpusim.engine import simulate

    prog = build_csr_baseline(make_layer(n, b, d, 1, seed, cell=cell))
    res = simulate(prog.kernel, prog.step_inputs(0, prog.layer.h0), spec, l2_warm=True)
    return res.time_s - res.launch_overhead_s + spec.graph_launch_overhead_s


def modelled(spec, n, b, d, cell="rnn"):
    t = an.predict_many(spec, n, b, d, kernels=["csr-row-per-warp"],
                        cell=cell)["csr-row-per-warp"]
    return float(t.per_step_s[0])


def _errors(layers, gpus=("h100", "v100")):
    rows = []
    for gpu in gpus:
        spec = load_spec(gpu)
        for i, (n, b, d) in enumerate(layers):
            sim = simulated(spec, n, b, d, seed=i)
            rows.append(((gpu, n, b, d), sim, modelled(spec, n, b, d)))
    return rows


def _gated_errors(layers, gpus=("h100", "v100")):
    rows = []
    for gpu in gpus:
        spec = load_spec(gpu)
        for i, (cell, n, b, d) in enumerate(layers):
            sim = simulated(spec, n, b, d, seed=i, cell=cell)
            rows.append(((gpu, cell, n, b, d), sim, modelled(spec, n, b, d, cell)))
    return rows


# Known gaps of the gated sweep, each bounded and strict (back within the tolerance: remove it).
# H100 LSTM hidden 261, batch 8, density 0.41: the model was +14.9% over the simulator; when the
# engine took ptxas's issue order (``gpusim/engine/schedule.py``: a list schedule, issued in
# order) the simulator's step went 6.45 -> 6.16 us (the gate rows' loads and FFMAs run beside
# the reductions before them) and the model's stayed (+20.2%).
# With h's lines starting anywhere in the map it came to +19.6% (within 20%).
GATED_KNOWN: dict = {}


def _check(rows, tolerance=TOLERANCE, known=None):
    known = known or {}
    errs = np.array([m / s - 1 for _, s, m in rows])
    print(f"\n{len(rows)} configurations: mean |err| {np.abs(errs).mean():.1%}, "
          f"max {np.abs(errs).max():.1%}")
    bad = [f"{c}: sim {s * 1e6:.2f} us, model {m * 1e6:.2f} us ({m / s - 1:+.1%})"
           for c, s, m in rows if abs(m / s - 1) > known.get(c, tolerance)]
    assert not bad, "\n".join(bad)
    healed = [c for c, s, m in rows if c in known and abs(m / s - 1) <= tolerance]
    assert not healed, f"within {tolerance:.0%} now, remove from the known gaps: {healed}"
    return errs


def test_the_model_counts_the_kernel_as_built():
    """Grid, CTA size and gathers per chunk are the builder's (the model imports them)."""
    for b in (1, 2, 3, 4, 8):
        prog = build_csr_baseline(make_layer(300, b, 0.1, 1, 0))
        k = prog.kernel
        assert k.block == DEFAULT_THREADS
        assert k.grid == math.ceil(300 / (DEFAULT_THREADS // 32))
        gathers = [i for i in instructions(k) if i.op is Op.LDG and i.srcs[0].buffer.name == "h_in"]
        assert len(gathers) == VEC * len(gather_loads(b)), b
        ng, width = an._csr_gathers(np.array([float(b)]))
        assert (ng[0], width[0]) == (len(gather_loads(b)), gather_loads(b)[0][0])


def test_breakdown_names_the_terms_and_they_add_up():
    """per step = graph node + prologue + rounds + epilogue + partition luck + the later waves'
    chains; the rounds are at least each of their bounds (L1TEX data stage, L2 slices, DRAM, the
    critical warp's chain)."""
    for gpu in ("h100", "v100"):
        t = an.predict_many(load_spec(gpu), [256, 2048, 8192], [1, 4, 8], [0.5, 0.05, 0.3],
                            kernels=["csr-row-per-warp"])["csr-row-per-warp"]
        bd = t.breakdown
        total = sum(bd[k] for k in ("launch_s", "prologue_s", "loop_s", "epilogue_s",
                                    "partition_s", "waves_s"))
        np.testing.assert_allclose(total, t.per_step_s, rtol=1e-12)
        for bound in ("l1tex_s", "l2_s", "dram_s", "chain_s"):
            assert np.all(bd["loop_s"] >= bd[bound] * (1 - 1e-12)), (gpu, bound)
        # a hidden-8192 layer at density 0.3, batch 8: its largest bound is L1TEX's data stage
        # (h, 256 KB, is not held in L1 and passes through the slots left over, one and a half
        # to four of its sectors a slot, so most of a sector's later touches miss, and a
        # missed gather passes in pieces: about 20 wavefronts where a hit takes ~11), ahead of
        # the L2 (a request for each of those misses; on the H100 its 40 contention groups
        # serve about 80 such requests a cycle; plus each round's round trips)
        assert bd["l1tex_s"][2] > 0.7 * bd["loop_s"][2], gpu
        assert bd["l1tex_s"][2] > max(bd[k][2] for k in ("l2_s", "dram_s", "chain_s")), gpu
        assert 0.1 * bd["loop_s"][2] < bd["l2_s"][2] < 0.9 * bd["loop_s"][2], gpu
        # it streams its values from DRAM on either GPU (67 MB of values > L2)
        assert bd["dram_s"][2] > 0 and bd["dram_s"][0] == 0


def test_spec_fields_move_their_terms():
    h100 = load_spec("h100")

    def csr(spec, n=4096, b=8, d=0.2):
        return an.predict_many(spec, n, b, d, kernels=["csr-row-per-warp"])["csr-row-per-warp"]

    base = csr(h100)
    # batch 8: the data stage (~11 wavefronts a gather) binds L1TEX, the tag stage (8 cycles for
    # 32 lines) takes over when the data pipe is twice as fast
    fast = csr(dataclasses.replace(h100, smem_wavefronts_per_cycle=2.0))
    ratio = fast.breakdown["l1tex_s"][0] / base.breakdown["l1tex_s"][0]
    assert 0.5 <= ratio < 0.9
    assert fast.per_step_s[0] < base.per_step_s[0]
    # batch 1: random words in 32 banks (~3.5 wavefronts a gather), the tag stage binds the
    # rounds whose gathers hit (h, 16 KiB, is held in L1); only the first rounds, whose lanes
    # miss and pass the data stage in pieces (about one wavefront per two missed lines), move
    # with the data pipe's rate
    b1 = csr(h100, 4096, 1, 0.2)
    b1_fast = csr(dataclasses.replace(h100, smem_wavefronts_per_cycle=2.0), 4096, 1, 0.2)
    ratio_b1 = b1_fast.breakdown["l1tex_s"][0] / b1.breakdown["l1tex_s"][0]
    assert 0.7 < ratio_b1 < 0.9 and ratio_b1 > ratio + 0.15
    node = dataclasses.replace(h100, graph_launch_overhead_s=h100.graph_launch_overhead_s + 1e-6)
    assert csr(node).per_step_s[0] - base.per_step_s[0] == pytest.approx(1e-6)
    # a small layer is a latency chain: a slower L2 round trip costs it several round trips
    # (hidden 256, density 0.2: the chain, not the contention groups of its 1 KiB h, binds)
    small = csr(h100, 256, 1, 0.2)
    slow = csr(dataclasses.replace(h100, l2_hit_latency_cycles=h100.l2_hit_latency_cycles + 100),
               256, 1, 0.2)
    assert small.breakdown["chain_s"][0] > small.breakdown["l2_s"][0]
    assert (slow.per_step_s[0] - small.per_step_s[0]) * h100.clock_hz > 4 * 100
    # a small h lies in a few contention groups: without them the loop would be shorter
    free = csr(dataclasses.replace(h100, l2_group_request_cycles=0.0), 512, 1, 0.05)
    assert free.breakdown["l2_s"][0] < csr(h100, 512, 1, 0.05).breakdown["l2_s"][0]


def test_small_layers_within_15_percent_of_simulator():
    """A fast subset: latency-bound layers of one chunk and short multi-chunk rows."""
    _check(_errors([(256, 1, 0.5), (512, 8, 0.05), (1024, 4, 0.1), (700, 2, 0.3)]))


# The known gaps of the sweep, each held to its bound (a gap that heals fails the test until it is
# taken off the list): two V100 layers at batch 8 in two waves whose rounds the L2 bounds, fast
# since the later waves' share of those rounds is taken off (models/analytical/csr.py,
# csr_step_cycles). Three H100 layers were gaps from the L2's contention groups on (the model
# bounded a round by the busiest group's requests of an h that starts the map); with h's lines
# starting anywhere in the map (the step's slot of the sequence buffer,
# ``models/analytical/l2.py``, ``_busiest_anywhere``) they came within 15% (4481-b4 +13.7%,
# 908-b1 -11.5%, 1827-b4 -9.4%)
# the 128-bit gathers' quarter-warp phases (engine and model) took the simulator's batch-8 step
# there up more than the model's: 3477-b8 -20% -> -24.4%; 2662-b8 came within 15%; with the
# missed gathers' pieces in both 3477-b8 came within 15% too
SWEEP_GAPS: dict = {}


@pytest.mark.slow
def test_sweep_within_15_percent_of_simulator():
    """40 random layers on the H100 and the V100 (80 configurations), every one within 15% but
    the known gaps (:data:`SWEEP_GAPS`), each within its bound.

    With the H100's contention groups (``l2_group_map``) in both: H100 mean |error| 5.4%, max
    19% (3 of 44 beyond 15%: hidden 908 and 1827 too fast, 4481 too slow); without the groups'
    term the model was 7.9% off the same simulator (max 23%). The V100 has no groups.

    Recorded when this test was written: mean |error| 2.7%, max 9.7% (H100 mean 2.9%, -6.4% to
    +9.7%; V100 mean 2.6%, -9.3% to +6.2%); after the L1TEX data stage became a bank rule:
    mean 3.6%, max 14.1%; with the DRAM channel's backfill and the later waves' share of the
    L2- or DRAM-bound rounds: mean 4.9%, max 20.1% (5 beyond 15%); with h's lines anywhere in
    the H100's group map: mean 4.6%, max 20.1% (2 beyond 15%, both V100); with the 128-bit
    gathers' quarter-warp phases in both: mean 4.9%, max 24.4% (1 beyond 15%, V100 3477-b8);
    with the missed gathers' pieces in both (the simulator's rule, the model's expectation of
    it): mean 4.5%, max 15.0%, none beyond.
    The simulator takes
    about 45 s of CPU for the 80
    (layers are capped at 1e6 expected nonzeros; the model is not limited: hidden 8192 at density
    0.5 on the H100, one step simulated in about 4 minutes, is within 3.2%).
    """
    _check(_errors(sweep_layers()), known=SWEEP_GAPS)


# gated cells: every configuration within 20%, the sweep's mean within 6% (recorded: see below)
GATED_TOLERANCE = 0.20
GATED_MEAN = 0.06


def test_small_gated_layers_within_20_percent_of_simulator():
    """A fast subset: one-round LSTM and GRU rows at batch 1, 2 and 4, and batch 8's long
    epilogue (its G butterflies and 5 SFU ops per column on lane 0)."""
    _check(_gated_errors([("lstm", 152, 1, 0.1228), ("gru", 719, 2, 0.0579),
                          ("lstm", 436, 8, 0.1511), ("gru", 979, 4, 0.1648)], gpus=("h100",)),
           GATED_TOLERANCE)


@pytest.mark.slow
def test_gated_sweep_within_20_percent_of_simulator():
    """40 random LSTM and GRU layers (:func:`gated_sweep_layers`) on the H100 and the V100 (80
    configurations), every one within 20% and the mean within 6%.

    Recorded when this test was written: mean |error| 4.5%, max 14.9%, signed mean -1.9% (the
    largest: V100 LSTM hidden 2989, batch 4, density 0.0149, -14.9%, where the vanilla model is
    about -9% on the same rows; the gated model carries the vanilla one's round-by-round error
    G times). The bound leaves room for the simulator's changes of the mechanisms both share.
    About 45 s of CPU for the simulator."""
    errs = _check(_gated_errors(gated_sweep_layers()), GATED_TOLERANCE, GATED_KNOWN)
    assert np.abs(errs).mean() <= GATED_MEAN


def _table():
    from models.analytical.csr import _register_table

    return _register_table()


@pytest.mark.skipif(not ptxas.available("sm_90"),
                    reason="no compiler for sm_90 here (nvcc or NVRTC)")
@pytest.mark.parametrize("cell,batch,rounds", [("rnn", 1, 1), ("rnn", 1, 8), ("rnn", 2, 6),
                                               ("rnn", 4, 2), ("rnn", 8, 12), ("lstm", 4, 3),
                                               ("gru", 2, 20)])
def test_the_register_table_is_what_ptxas_allocates(cell, batch, rounds):
    from models.sparse import rounds_probe_layer

    prog = build_csr_baseline(rounds_probe_layer(rounds, batch, cell))
    assert prog.chunks == rounds
    got = ptxas.compile_kernel(prog.kernel, "sm_90").registers
    assert _table()["sm_90"][cell][str(batch)][rounds - 1] == got


def test_the_register_table_is_what_the_campaigns_kernels_had():
    # every CSR case of an H200 draw records the compiled kernel's num_regs; its rounds of the
    # chunk loop pick the table's entry (one draw of each family of sizes: s58-s60)
    from gpusim.measurements import build_case, load_campaign

    spec = load_spec("h200")
    table = _table()["sm_90"]
    checked = 0
    for draw in ("fresh_2026-11-29_s58", "fresh_2026-11-29_s59", "fresh_2026-11-29_s60"):
        for c in load_campaign(f"measurements/h200/{draw}").cases:
            if c["kind"] != "csr" or c["status"] != "ok":
                continue
            prog = build_case(c, 1, spec)
            regs = table[c.get("cell", "rnn")][str(c["batch"])]
            assert regs[min(prog.chunks, len(regs)) - 1] == \
                c["result"]["attributes"]["num_regs"], c["id"]
            checked += 1
    assert checked >= 40


def test_a_large_grid_runs_in_waves_in_the_model_as_in_the_simulator():
    # hidden 4760, batch 8, density 0.06 (s58): 595 CTAs of 56 registers, 4 an SM on the H200
    # (528 co-resident): two waves, the second 67 CTAs
    from models.analytical.csr import csr_waves

    waves, units, _ = csr_waves(load_spec("h200"), 4760, 4760, 8, 0.0612)
    assert waves == 2 and units == 528 * 8
    waves, _, _ = csr_waves(load_spec("h200"), 1704, 1704, 4, 0.499)
    assert waves == 1


# Across the L1 edge: where h_{t-1} (and an LSTM's c) no longer fits in an SM's L1 beside the
# kernel's row pointers, it passes through the capacity left over as a direct-mapped cache (the
# simulator's L1), which still holds most of h just past the edge; the GPU has no cliff there
# either (measurements/h200/csr_trace_l1edge.json, hidden 6144-6784 at batch 8, density 0.05:
# the traced step's span 16.7 -> 20.1 us, +20%, most of it before the edge; the simulator's step
# +10%, the model's +23%). When the model sent every gather of an h not held to
# L2 it was 2-2.4x the simulator here (V100 3400-b8 +139%, 6000-b4 +110%, LSTM 1800-b8 +117%;
# H200 6776-b8 54.1 us, GPU 20.0, simulator 17.8); with the odds that a touched sector is still
# in its slot (models/analytical/csr.py, _h_kept) it is 8.5% off on these three, max 14.5%.
def test_just_inside_the_l1_edge_the_model_is_the_simulators():
    _check(_errors([(3100, 8, 0.05)], gpus=("v100",)))


def test_past_the_l1_edge_the_model_is_the_simulators():
    rows = _errors([(3400, 8, 0.05), (6000, 4, 0.02)], gpus=("v100",))
    rows += _gated_errors([("lstm", 1800, 8, 0.05)], gpus=("v100",))
    _check(rows)


# The later waves of a grid whose values and indices stream from DRAM (found after the H200 draws
# s129-s134): csr_step_cycles added, per later wave, the chain of one of its CTAs, whose fill
# carried the DRAM FIFO's wait for *every* row's values, so each later wave streamed the whole
# matrix again: V100 hidden 8000, batch 2, density 0.05 (12.8 MB of values > 6 MB of L2, 1000
# CTAs in four waves) was +105% over the simulator. Now the FIFO's wait is the step's first
# round's only, and a later wave's own rounds shrink by its share of the rounds that the L2 or
# the DRAM bound (models/analytical/csr.py); with the DRAM channel's backfill in the engine
# (measurements/h200/csr_dram.json) the model is +4% here.
@pytest.mark.slow
def test_later_waves_of_a_dram_bound_grid_are_the_simulators():
    _check(_errors([(8000, 2, 0.05)], gpus=("v100",)))


@pytest.mark.parametrize("batch", [1, 2, 4, 8])
def test_gather_wavefronts_are_the_engines_rule_at_the_loads_width(batch):
    """The model's expected data-stage wavefronts of one gather load (``_gather_wavefronts``)
    against a Monte Carlo of the engine's rule (``kernels_ir.banks.wavefronts`` at the load's
    width: 32-bit one phase, 64-bit two, 128-bit four) over random distinct columns, full and
    partial warps: within 6%. At batch 4 a full warp is 10 wavefronts, not the one-phase 7."""
    from kernels_ir.banks import wavefronts
    from models.analytical.csr import _gather_wavefronts

    rng = np.random.default_rng(7)
    width = gather_loads(batch)[0][0]
    for m in (32, 20, 9):
        cols = np.stack([rng.choice(4096, 32, replace=False) for _ in range(3000)])
        act = np.zeros((3000, 32), bool)
        act[:, :m] = True
        mc = float(wavefronts(batch * cols, width, act).mean())
        model = float(_gather_wavefronts(np.array([[batch]]), np.array([[float(m)]]))[0, 0])
        assert model == pytest.approx(mc, rel=0.06), (batch, m, model, mc)
    if batch == 4:
        full = float(_gather_wavefronts(np.array([[4]]), np.array([[32.0]]))[0, 0])
        assert full == pytest.approx(10.0, abs=0.5)
