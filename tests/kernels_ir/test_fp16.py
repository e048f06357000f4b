"""fp16 weights in the persistent kernels: values, packing, registers, the compiled kernels at
the capacity limit, the capacity gained, and the H100 record (docs/fp16.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.semantics import SEMANTICS
from gpusim.pricing import price_program
from gpusim.specs import load_spec
from kernels_ir.errors import CapacityError
from kernels_ir.ir import Op, instructions
from kernels_ir.kernels.sparse_rnn import (
    VALUE_TOLERANCE,
    build_dense_rnn,
    build_sparse_rnn,
    counted_registers,
    fp16_layer,
    make_layer,
    pack_fp16,
)
from measurements.probe import read_record
from models import capacity as cap

ROOT = Path(__file__).resolve().parents[2]
H100, V100 = load_spec("h100"), load_spec("v100")
UNIT_ROUNDOFF = 2.0 ** -11   # binary16, round to nearest: |fl(w) - w| <= 2^-11 |w|


@pytest.mark.parametrize("kind,hidden,batch,density,cell,heads,sync,wide,layout", [
    ("sparse", 256, 4, 0.1, "rnn", 1, "lamport", True, "optimal"),
    ("sparse", 320, 1, 0.05, "rnn", 1, "barrier", False, "naive"),
    ("sparse", 192, 8, 0.2, "rnn", 1, "lamport", True, "greedy"),
    ("dense", 160, 2, 1.0, "rnn", 1, "lamport", True, "naive"),
    ("dense", 96, 1, 1.0, "rnn", 1, "barrier", False, "naive"),
    ("sparse", 128, 2, 0.2, "lstm", 1, "lamport", True, "optimal"),
    ("sparse", 128, 4, 0.2, "gru", 1, "barrier", True, "naive"),
    ("sparse", 256, 2, 0.2, "rnn", 8, "lamport", True, "naive"),
])
def test_fp16_kernels_match_the_reference_of_their_rounded_weights(kind, hidden, batch, density,
                                                                   cell, heads, sync, wide,
                                                                   layout):
    """fp32 arithmetic on fp16-rounded weights: within the fp32 kernels' own tolerance of the
    float64 reference of the rounded layer (the program's layer is that rounded layer)."""
    kw = {} if heads == 1 else {"heads": heads}
    layer = make_layer(hidden, batch, density, 4, seed=3, cell=cell, **kw)
    if kind == "dense":
        prog = build_dense_rnn(layer, H100, sync=sync, wide_loads=wide, dtype="fp16")
    else:
        prog = build_sparse_rnn(layer, H100, sync=sync, wide_loads=wide, layout=layout,
                                dtype="fp16")
    assert prog.kernel.name.endswith("_fp16") and prog.variant["dtype"] == "fp16"
    ops = {i.op for i in instructions(prog.kernel)}
    assert Op.H2F in ops and (Op.U16 in ops) == (kind == "sparse")
    assert np.array_equal(prog.layer.U.data,
                          layer.U.data.astype(np.float16).astype(np.float32))
    p = price_program(prog, H100, what="fp16")
    assert p.max_rel_err <= VALUE_TOLERANCE


def test_fp16_kernel_differs_from_the_fp32_layer_by_the_weights_rounding_at_most():
    """One step of the fp16 kernel against the layer's fp32 weights: the rounding of each
    weight (relative 2^-11) moves a pre-activation by at most 2^-11 sum_j |U_ij h0_j|, and tanh
    does not amplify it (slope <= 1); the bound is met and the difference is really there."""
    layer = make_layer(512, 2, 0.1, 1, seed=5)
    prog = build_sparse_rnn(layer, H100, dtype="fp16")
    res = simulate(prog.kernel, prog.inputs, H100)
    h1 = prog.outputs(res.globals)[1].astype(np.float64)
    U = layer.U.astype(np.float64)
    h0 = layer.h0.astype(np.float64)
    exact = np.tanh(U @ h0 + layer.x_proj[0].astype(np.float64))
    bound = UNIT_ROUNDOFF * (abs(U) @ np.abs(h0)) + 1e-6
    diff = np.abs(h1 - exact)
    assert (diff <= bound).all()
    assert diff.max() > 1e-5          # the rounding is visible: this is not an fp32 kernel


def test_packing_round_trips_through_the_ir_semantics():
    """The packed words decode, by the IR's own H2F and U16, into the rounded values and the
    column word addresses (sparse), and into both halves' values (dense)."""
    rng = np.random.default_rng(0)
    vals = rng.standard_normal((3, 5, 32)).astype(np.float16).astype(np.float32)
    cols = rng.integers(0, 8192, (3, 5, 32))
    words = pack_fp16(vals, cols, 8).reshape(3, 5, 32)
    hi = SEMANTICS[Op.H2F].fn({"half": 1})(words)
    lo = SEMANTICS[Op.U16].fn({})(words)
    assert np.array_equal(hi, vals) and np.array_equal(lo, cols * 8)
    dense = pack_fp16(vals, None, 1).reshape(3, 3, 32)       # 5 slots -> 3 words per thread
    assert np.array_equal(SEMANTICS[Op.H2F].fn({"half": 0})(dense), vals[:, 0::2])
    assert np.array_equal(SEMANTICS[Op.H2F].fn({"half": 1})(dense[:, :2]), vals[:, 1::2])
    assert not SEMANTICS[Op.H2F].fn({"half": 1})(dense[:, 2]).any()   # the padding half


def test_h2f_converts_every_binary16_value_exactly():
    bits = np.arange(1 << 16, dtype=np.uint32)
    want = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    for half, word in ((0, bits | (0xABCD << 16)), (1, (bits << 16) | 0x1234)):
        got = SEMANTICS[Op.H2F].fn({"half": half})(word.astype(np.uint32).view(np.int32))
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        assert same.all() and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dense", [False, True])
def test_fp16_registers_are_counted_alike_by_the_builder_and_capacity(dense):
    layer = make_layer(1024, 4, 1.0 if dense else 0.1, 2, seed=1)
    build = build_dense_rnn if dense else build_sparse_rnn
    p16, p32 = build(layer, H100, dtype="fp16"), build(layer, H100)
    m = p16.mapping
    n16 = counted_registers(p16, prefetch=1)
    assert n16 <= cap.registers_per_thread(m.total_slots, m.rows_per_warp, 4, dense=dense,
                                           dtype="fp16", ptxas=False)
    n32 = counted_registers(p32, prefetch=1)
    saved = m.total_slots - (-(-m.total_slots // 2) + 1) if dense else m.total_slots - 2
    assert n32 - n16 == saved


def _compiled_at_limit(spec, density, batch, dense, dtype="fp16"):
    from kernels_ir import ptxas

    m = cap.max_hidden(spec, density, batch, dtype=dtype, dense=dense)
    layer = make_layer(m.hidden, batch, density, 2, seed=0)
    prog = (build_dense_rnn(layer, spec, dtype=dtype) if dense
            else build_sparse_rnn(layer, spec, dtype=dtype, layout="optimal"))
    return m, prog, ptxas.compile_kernel(prog.kernel, spec.arch)


@pytest.mark.slow
@pytest.mark.parametrize("gpu,density,batch,dense", [
    ("h100", 0.1, 4, False), ("h100", 0.02, 1, False), ("h100", 1.0, 4, True),
    ("v100", 0.1, 4, False), ("v100", 0.3, 8, False),
])
def test_fp16_kernels_at_the_capacity_limit_compile_without_spills(gpu, density, batch, dense):
    """What capacity accepts for fp16 compiles without spills (sm_90 with nvcc, sm_70 with
    CUDA 12's NVRTC), within the registers capacity expects ptxas to take; the unpacking is
    not hoisted out of the time loop (that would need a register per slot more)."""
    from kernels_ir import ptxas

    spec = load_spec(gpu)
    if ptxas.available(spec.arch) is None:
        pytest.skip(f"no compiler for {spec.arch} here")
    m, prog, rep = _compiled_at_limit(spec, density, batch, dense)
    assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.stack_frame == 0
    assert rep.registers <= cap.reg_limit(spec)
    assert rep.registers <= m.registers            # capacity's estimate (count + ptxas excess)


@pytest.mark.parametrize("gpu", ["v100", "h100"])
@pytest.mark.parametrize("density,batch", [(0.1, 4), (0.02, 1), (0.3, 8)])
def test_fp16_holds_about_twice_the_weights(gpu, density, batch):
    """Half the registers per weight: about twice the nonzeros fit, so about sqrt(2) the hidden
    size (the weights grow as N^2); the dense tiles gain less (their h words stay f32)."""
    spec = load_spec(gpu)
    m32 = cap.max_hidden(spec, density, batch)
    m16 = cap.max_hidden(spec, density, batch, dtype="fp16")
    nnz = (m16.hidden / m32.hidden) ** 2
    assert 1.8 <= nnz <= 2.3, (m32.hidden, m16.hidden)
    assert 1.3 <= m16.hidden / m32.hidden <= 1.5


def test_fp16_index_limit_is_named_where_shared_memory_would_not_bind_first():
    """A 16-bit word address reaches 65536 words of h: on today's GPUs shared memory (h in f32)
    refuses every larger layer first; a GPU with more shared memory gets the named limit."""
    for spec in (V100, H100, load_spec("h200")):
        assert spec.smem_bytes_per_cta // cap.H_BYTES < 65536
    big = dataclasses.replace(H100, smem_bytes_per_cta=1 << 20)
    f = cap.fit(big, 9000, 8, 0.005, dtype="fp16")
    assert not f.fits and f.limit == cap.FP16_INDEX and "65536" in f.message
    assert cap.fit(big, 9000, 8, 0.005).fits
    with pytest.raises(CapacityError, match="16-bit column address"):
        build_sparse_rnn(make_layer(9000, 8, 0.005, 1, seed=0), big, dtype="fp16")


def test_short_launch_of_the_cuda_backend_keeps_the_dtype():
    """The per-step time is the slope between a T and a T' launch: both must be fp16."""
    from gpusim.backends.cupy_backend import _short_program

    prog = build_sparse_rnn(make_layer(256, 2, 0.1, 8, seed=1), H100, dtype="fp16")
    short = _short_program(prog, 2, H100)
    assert short.kernel.name == prog.kernel.name and short.variant == prog.variant
    assert short.timesteps == 2 and np.array_equal(short.inputs["w_packed"],
                                                   prog.inputs["w_packed"])


def test_fp16_layer_rounds_only_the_weights():
    layer = make_layer(64, 2, 0.3, 2, seed=2)
    r = fp16_layer(layer)
    assert r.U.dtype == np.float32 and r.x_proj is layer.x_proj and r.h0 is layer.h0
    assert np.abs(r.U.data - layer.U.data).max() <= UNIT_ROUNDOFF * np.abs(layer.U.data).max()
    assert np.array_equal(fp16_layer(r).U.data, r.U.data)     # rounding is idempotent


def test_h100_record_fp16_values_no_spills_and_the_limit_layers():
    """measurements/h100/fp16_check.json: every fp16 kernel that fits ran with the right values
    and no local memory; the at-limit layers ran in fp16 and were refused in fp32."""
    rec = read_record(ROOT / "measurements" / "h100" / "fp16_check.json")
    assert "fp16_check.py" in rec["provenance"]["command"]
    res = rec["results"]
    ok16 = [r for r in res.values() if r["dtype"] == "fp16" and r["status"] == "ok"]
    assert len(ok16) >= 25
    assert all(r["values_ok"] and r["max_rel_err"] <= VALUE_TOLERANCE for r in ok16)
    assert all(r["attributes"]["local_size_bytes"] == 0 for r in ok16)
    limit = [r for r in res.values() if r.get("at_limit")]
    assert {(r["dtype"], r["status"]) for r in limit} == {("fp16", "ok"), ("fp32", "skipped")}
    assert all(r["status"] != "error" for r in res.values())


def test_h100_record_simulated_side_and_what_docs_quote():
    """The simulator's values of the record's kernels: per-step MAPE of the fp16 kernels and
    of all, as docs/fp16.md quotes them."""
    rec = read_record(ROOT / "measurements" / "h100" / "fp16_check.json")
    sim, res = rec["simulated"]["results"], rec["results"]
    assert set(sim) == {k for k, r in res.items() if r["status"] == "ok"}
    assert all(s["max_rel_err"] <= VALUE_TOLERANCE for s in sim.values())

    def mape(keys):
        return 100 * np.mean([abs(sim[k]["per_step_s"] / res[k]["per_step_s"] - 1)
                              for k in keys])

    fp16 = [k for k in sim if res[k]["dtype"] == "fp16"]
    doc = (ROOT / "docs" / "fp16.md").read_text()
    assert f"{len(fp16)} fp16 kernels, per-step MAPE {mape(fp16):.1f}%" in doc
    assert f"all {len(sim)} kernels {mape(list(sim)):.1f}%" in doc
