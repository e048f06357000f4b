"""Multi-head (block-diagonal) layers: the reference, the mapping of whole heads per CTA, the
CTA-local exchange of the persistent kernels and its values against the float64 reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from engine_helpers import check_values

from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.ir import PRED, Op, instructions
from kernels_ir.kernels.sparse_rnn import (
    build_dense_rnn,
    build_sparse_rnn,
    counted_registers,
    make_layer,
)
from kernels_ir.mapping import apply_mapping, map_matrix
from models.reference import gru_reference, lstm_reference, multihead_reference, rnn_reference
from models.sparse import random_layer

V100 = load_spec("v100")
REFS = {"rnn": rnn_reference, "gru": gru_reference,
        "lstm": lambda U, x, h: lstm_reference(U, x, h)[0]}
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def _ops(kernel) -> set:
    return {i.op for i in instructions(kernel)}


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_random_layer_is_block_diagonal_and_the_references_agree(cell):
    layer = random_layer(24, 2, 0.4, 3, 1, cell=cell, heads=4)
    U = layer.U.toarray()
    units = np.arange(U.shape[0]) % 24
    off = (units[:, None] // 6) != (np.arange(24)[None, :] // 6)
    assert layer.heads == 4 and not U[off].any() and U[~off].any()
    # the whole-matrix reference takes a block-diagonal U as it is; head by head is the same
    whole = REFS[cell](layer.U, layer.x_proj, layer.h0)
    np.testing.assert_allclose(multihead_reference(cell, layer.U, layer.x_proj, layer.h0, 4),
                               whole, rtol=0, atol=1e-12)


def test_heads_one_draws_the_same_layer_as_before():
    a, b = random_layer(40, 2, 0.2, 2, 3), random_layer(40, 2, 0.2, 2, 3, heads=1)
    assert (a.U != b.U).nnz == 0 and np.array_equal(a.x_proj, b.x_proj) and a.heads == 1


@pytest.mark.parametrize("heads", [0, 7, -1, 2.0, True])
def test_heads_must_divide_hidden(heads):
    with pytest.raises(InputError, match=r"heads=.* divides hidden=24"):
        random_layer(24, 1, 0.5, 1, 0, heads=heads)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("ctas", [2, 3, 8])
def test_mapping_puts_whole_heads_in_one_cta(cell, dense, ctas):
    g = GATES[cell]
    layer = random_layer(48, 2, 1.0 if dense else 0.3, 1, 2, cell=cell, heads=6)
    m = map_matrix(layer.U, n_ctas=ctas, warps_per_cta=4, batch=2, wide_loads=True, gates=g,
                   heads=6, dense=dense)
    assert m.cta_local and m.heads_per_cta == -(-6 // ctas)
    for w in range(m.n_warps):
        heads = {(r % 48) // 8 for r in m.row_ids[w] if r >= 0}
        assert all(h // m.heads_per_cta == w // 4 for h in heads)
    h = np.random.default_rng(0).standard_normal((48, 2)).astype(np.float32)
    np.testing.assert_allclose(apply_mapping(m, h), layer.U @ h, atol=1e-5)


def test_mapping_refuses_a_matrix_that_is_not_block_diagonal():
    U = sp.csr_matrix(np.ones((8, 8), dtype=np.float32))
    with pytest.raises(InputError, match=r"not block-diagonal with heads=2: row 0 \(head 0\) "
                                         r"has a weight in column 4 \(head 1\)"):
        map_matrix(U, n_ctas=2, warps_per_cta=1, batch=1, wide_loads=True, heads=2)
    with pytest.raises(InputError, match=r"heads=3 must divide N=8"):
        map_matrix(U, n_ctas=2, warps_per_cta=1, batch=1, wide_loads=True, heads=3)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("sync", ["lamport", "barrier"])
@pytest.mark.parametrize("wide,batch", [(True, 4), (False, 2), (True, 1)])
def test_cta_local_sparse_matches_reference(cell, sync, wide, batch):
    spec = dataclasses.replace(V100, sm_count=3)
    prog = build_sparse_rnn(make_layer(60, batch, 0.3, 3, seed=5, cell=cell, heads=6), spec,
                            sync=sync, wide_loads=wide)
    k = prog.kernel
    assert k.name == f"sparse_{cell}_local_{'wide' if wide else 'scalar'}"
    assert dict(k.meta)["exchange"] == "cta" and dict(k.meta)["heads_per_cta"] == 2
    ops = _ops(k)
    assert not ops & {Op.ATOM_ADD, Op.LDG_VOLATILE} and Op.BAR in ops
    assert "counter" not in prog.inputs
    assert counted_registers(prog) == sum(r.size for r in k.regs if r.dtype is not PRED)
    check_values(prog, spec)


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_cta_local_dense_matches_reference(cell):
    spec = dataclasses.replace(V100, sm_count=2)
    prog = build_dense_rnn(make_layer(40, 2, 1.0, 3, seed=3, cell=cell, heads=4), spec)
    assert "_local_" in prog.kernel.name
    check_values(prog, spec)


def test_more_ctas_than_heads_leaves_ctas_idle():
    spec = dataclasses.replace(V100, sm_count=4)
    prog = build_sparse_rnn(make_layer(32, 2, 0.5, 2, seed=1, heads=2), spec)
    assert prog.mapping.heads_per_cta == 1 and (prog.mapping.row_ids[16:] < 0).all()
    check_values(prog, spec)


def test_heads_too_large_for_a_cta_keep_the_grid_wide_exchange():
    # heads of 768 units: a CTA cannot hold one; dealt over all warps, Lamport exchange
    spec = dataclasses.replace(V100, sm_count=8)
    prog = build_sparse_rnn(make_layer(1536, 1, 0.02, 2, seed=2, heads=2), spec)
    meta = dict(prog.kernel.meta)
    assert meta["exchange"] == "grid" and meta["heads_per_cta"] == 0
    assert prog.kernel.name == "sparse_rnn_lamport_wide" and not prog.mapping.cta_local
    assert Op.LDG_VOLATILE in _ops(prog.kernel)
    check_values(prog, spec)


def test_cta_local_is_cheaper_than_the_grid_exchange_in_the_simulator():
    from gpusim.engine import simulate

    # the same shape, 16 heads on 8 SMs (two per CTA) against one head: every step is cheaper
    spec = dataclasses.replace(V100, sm_count=8)
    local = build_sparse_rnn(make_layer(256, 2, 0.2, 3, seed=4, heads=16), spec)
    grid = build_sparse_rnn(make_layer(256, 2, 0.2, 3, seed=4), spec)
    a = simulate(local.kernel, local.inputs, spec)
    b = simulate(grid.kernel, grid.inputs, spec)
    assert max(a.step_cycles) < min(b.step_cycles)
    assert a.l2_transactions != b.l2_transactions
