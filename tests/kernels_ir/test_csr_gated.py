"""The CSR row-per-warp kernel for gated cells (``kernels_ir/kernels/csr_baseline.py``): a warp
per unit runs its G gate rows, lane 0 the cell's epilogue; the LSTM's cell state goes through
``c_in`` / ``c_out`` between launches. Values against the float64 references over several
launches (the host's ping-pong of h and c), the unit sort, the vanilla kernel unchanged, bad
inputs, and the generated CUDA through ptxas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_spec
from kernels_ir import format_kernel, ptxas
from kernels_ir.codegen_cuda import generate
from kernels_ir.errors import InputError, ValueMismatchError
from kernels_ir.ir import SFU, Loop, Op, instructions
from kernels_ir.kernels.csr_baseline import (
    CSRProgram,
    build_csr_baseline,
    cell_epilogue_instructions,
)
from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE, make_layer, max_rel_err

H100 = Path(__file__).resolve().parents[2] / "measurements" / "h100"


def _run_steps(prog, spec, steps=None):
    """h_0 .. h_T (and c) of ``steps`` launches on the simulator, each launch's h_out and c_out
    fed to the next as the host does (c_0 = 0)."""
    from gpusim.engine import simulate

    h, c = np.asarray(prog.layer.h0), None
    hs, cs = [np.asarray(h, np.float64)], [np.zeros(h.shape)]
    for t in range(prog.timesteps if steps is None else steps):
        res = simulate(prog.kernel, prog.step_inputs(t, h, c), spec, l2_warm=True)
        h, c = prog.step_outputs(res.globals)
        hs.append(h)
        cs.append(np.zeros(h.shape) if c is None else c)
    return np.stack(hs), np.stack(cs)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("hidden,batch", [(37, 1), (64, 2), (45, 4), (33, 8), (29, 3)])
def test_simulated_values_match_the_float64_reference(cell, hidden, batch):
    spec = load_spec("h100")
    prog = build_csr_baseline(make_layer(hidden, batch, 0.3, 3, hidden + batch, cell=cell))
    H, C = _run_steps(prog, spec)
    ref_h, ref_c = prog.states_reference()
    assert max_rel_err(H, ref_h) < VALUE_TOLERANCE
    if cell == "lstm":                    # the cell state each launch wrote, not only h
        assert max_rel_err(C, ref_c) < VALUE_TOLERANCE


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_price_program_checks_the_gated_step(cell, monkeypatch):
    """``gpusim.pricing.price_program`` (predict --engine sim, crosscheck) runs the first step
    and checks h_1 and, for the LSTM, c_1: a wrong cell state is refused."""
    from gpusim.pricing import price_program

    spec = load_spec("v100")
    prog = build_csr_baseline(make_layer(96, 2, 0.2, 1, 3, cell=cell))
    p = price_program(prog, spec, what="csr")
    assert p.max_rel_err < VALUE_TOLERANCE and p.per_step_s > spec.graph_launch_overhead_s
    if cell == "lstm":
        real = CSRProgram.step_outputs
        monkeypatch.setattr(CSRProgram, "step_outputs",
                            lambda self, g: (real(self, g)[0], 2 * real(self, g)[1]))
        with pytest.raises(ValueMismatchError, match="values differ from the float64"):
            price_program(prog, spec, what="csr")


@pytest.mark.parametrize("cell,gates", [("lstm", 4), ("gru", 3)])
def test_a_warp_per_unit_sorted_by_its_gate_rows(cell, gates):
    layer = make_layer(200, 4, 0.1, 1, 5, cell=cell)
    prog = build_csr_baseline(layer)
    k = prog.kernel
    assert k.name == f"csr_row_per_warp_{cell}" and dict(k.meta)["cell"] == cell
    assert k.grid == 200 // 8                 # one warp per unit, not per gate row
    perm, ptr = prog.inputs["perm"], prog.inputs["rowptr"]
    assert sorted(perm) == list(range(200)) and len(ptr) == gates * 200 + 1
    assert np.all(ptr % 4 == 0)
    totals = np.diff(layer.U.indptr).reshape(gates, 200).sum(axis=0)[perm]
    assert np.all(np.diff(totals) <= 0)       # most nonzeros first
    # the G gate rows' loops, each of the vanilla row's loads; x holds the G*N rows
    loops = [s for s in k.body if isinstance(s, Loop)]
    assert len(loops) == gates
    sizes = {b.name: b.size for b in k.global_buffers}
    assert sizes["x"] == gates * 200 * 4 and sizes["perm"] == 200
    assert ("c_in" in sizes and "c_out" in sizes) == (cell == "lstm")
    sfu = [i for i in instructions(k) if i.op in SFU]
    assert len(sfu) == 4 * ({"lstm": 5, "gru": 3}[cell])   # per column: the cell's SFU ops
    assert len([i for i in cell_epilogue_instructions(cell, 4) if i.op in SFU]) == len(sfu)


def test_the_vanilla_kernel_is_the_one_the_campaign_measured():
    """cell='rnn' builds the kernel of the recorded H100 CSR cases, IR and CUDA hash for hash
    (the simulator's recorded results depend on it)."""
    from gpusim.measurements import build_case, kernel_fingerprint

    spec = load_spec("h100")
    cases = [c for c in json.loads((H100 / "campaign.json").read_text())["cases"]
             if c["kind"] == "csr" and c["hidden"] <= 2048]
    assert cases
    for c in cases:
        prog = build_case(c, int(c["kernel"]["steps"]), spec)
        now = kernel_fingerprint(prog.kernel)
        assert (now["cuda_sha256"], now["ir_sha256"]) == \
            (c["kernel"]["cuda_sha256"], c["kernel"]["ir_sha256"]), c["id"]
        assert "cell" not in format_kernel(prog.kernel)


def test_bad_inputs_are_one_clear_error():
    layer = make_layer(64, 2, 0.2, 2, 0, cell="lstm")
    with pytest.raises(InputError, match="cell='bogus' is not supported; accepted: rnn, gru, "
                                         "lstm"):
        build_csr_baseline(type(layer)("bogus", layer.U, layer.x_proj, layer.h0))
    with pytest.raises(InputError, match=r"the gru cell needs \(3\*N, N\) = \(192, 64\)"):
        build_csr_baseline(type(layer)("gru", layer.U, layer.x_proj, layer.h0))
    prog = build_csr_baseline(layer)
    with pytest.raises(InputError, match=r"c has shape \(3,\)"):
        prog.step_inputs(0, layer.h0, np.zeros(3))
    gru = build_csr_baseline(make_layer(64, 2, 0.2, 2, 0, cell="gru"))
    with pytest.raises(InputError, match="the gru cell has no cell state"):
        gru.step_inputs(0, layer.h0, np.zeros((64, 2)))
    with pytest.raises(InputError, match="cell='rnn': only the gated cells"):
        cell_epilogue_instructions("rnn", 2)


def needs(arch: str):
    found = ptxas.available(arch)
    return pytest.mark.skipif(found is None, reason=f"no compiler for {arch} here: "
                              f"{ptxas.INSTALL_HINT}")


@pytest.mark.parametrize("arch", [pytest.param("sm_70", marks=needs("sm_70")),
                                  pytest.param("sm_90", marks=needs("sm_90"))])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("batch", [8, 3])
def test_gated_csr_kernel_compiles_without_spills(arch, cell, batch):
    """The widest accumulators (G*B of them live through the later gate rows, batch 8) and an
    odd batch's scalar loads: ptxas keeps everything in registers."""
    k = build_csr_baseline(make_layer(1024, batch, 0.05, 2, 0, cell=cell)).kernel
    code = generate(k).code
    assert "expf(" in code and "tanhf(" in code
    r = ptxas.compile_kernel(k, arch)
    assert r.registers <= 255 and not r.spills and r.stack_frame == 0, r.as_dict()


def test_sigmoid_and_tanh_are_priced_apart_in_the_epilogue():
    """The epilogue the model schedules is the kernel's: LSTM 5 SFU ops per column (i, f, o
    sigmoid; g, c tanh), GRU 3 (r, z sigmoid; n tanh)."""
    for cell, sig, tanh in (("lstm", 3, 2), ("gru", 2, 1)):
        ops = [i.op for i in cell_epilogue_instructions(cell, 2)]
        assert ops.count(Op.SIGMOID) == 2 * sig and ops.count(Op.TANH) == 2 * tanh
