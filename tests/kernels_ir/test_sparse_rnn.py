"""The persistent kernel builders: register accounting and capacity refusals."""

from __future__ import annotations

import dataclasses

import pytest

from gpusim.specs import load_spec
from kernels_ir import PRED
from kernels_ir.errors import CapacityError, InputError
from kernels_ir.kernels.sparse_rnn import (
    STAGE_GROUP,
    build_dense_rnn,
    build_sparse_rnn,
    cell_registers,
    counted_registers,
    dense_reuse_registers,
    make_layer,
    registers_needed,
)

V100 = load_spec("v100")


def _declared(kernel) -> int:
    return sum(r.size for r in kernel.regs if r.dtype is not PRED)


@pytest.mark.parametrize("hidden,batch,density,sms,sync,wide", [
    (100, 4, 0.3, 2, "lamport", True), (100, 4, 0.3, 2, "barrier", True),
    (37, 1, 1.0, 3, "barrier", False), (300, 8, 0.05, 4, "lamport", False),
    (1024, 2, 0.02, 16, "lamport", True), (64, 2, 0.5, 1, "barrier", True),
])
def test_registers_needed_is_exactly_what_the_builder_declares(hidden, batch, density, sms, sync,
                                                                wide):
    spec = dataclasses.replace(V100, sm_count=sms)
    prog = build_sparse_rnn(make_layer(hidden, batch, density, 2, 0), spec, sync=sync,
                            wide_loads=wide)
    m, k = prog.mapping, prog.kernel
    group = min(STAGE_GROUP, -(-prog.slot_words // (4 * k.block)))
    assert _declared(k) == registers_needed(m.total_slots, m.rows_per_warp, batch, False,
                                            sync=sync, group=group,
                                            prefetch=dict(k.meta)["prefetch"])


@pytest.mark.parametrize("hidden,batch,sync", [(40, 4, "lamport"), (100, 1, "barrier")])
def test_dense_registers_needed(hidden, batch, sync):
    spec = dataclasses.replace(V100, sm_count=2)
    prog = build_dense_rnn(make_layer(hidden, batch, 1.0, 2, 0), spec, sync=sync)
    m, k = prog.mapping, prog.kernel
    group = min(STAGE_GROUP, -(-prog.slot_words // (4 * k.block)))
    tail = any(r.name == "zidx" for r in k.regs)
    # R >= 2 row-slots: every h word is loaded once and held for all of them (its K B words
    # counted whatever the prefetch depth)
    reuse = dense_reuse_registers(m.rows_per_warp, max(m.slots), batch)
    assert m.rows_per_warp >= 2 and reuse == (max(m.slots) - 1) * batch
    assert _declared(k) == registers_needed(m.total_slots, m.rows_per_warp, batch, True,
                                            sync=sync, group=group, dense_tail=tail,
                                            prefetch=1) + reuse


def test_layer_over_the_register_budget_is_refused_with_the_numbers():
    with pytest.raises(CapacityError, match=r"hidden=3000 \(density 0\.3.*registers/thread, v100 "
                                            r"allows 255"):
        build_sparse_rnn(make_layer(3000, 4, 0.3, 2, 0), V100)


def test_h_over_shared_memory_is_refused():
    spec = dataclasses.replace(V100, smem_bytes_per_cta=4096, smem_bytes_per_sm=4096)
    with pytest.raises(CapacityError, match="does not fit in shared memory: h needs 8192 bytes"):
        build_sparse_rnn(make_layer(512, 4, 0.01, 2, 0), spec)


@pytest.mark.parametrize("cell,dense,sync", [("lstm", False, "lamport"), ("gru", False, "barrier"),
                                             ("lstm", True, "barrier"), ("gru", True, "lamport")])
def test_gated_cells_registers_needed_counts_every_gate_row(cell, dense, sync):
    spec = dataclasses.replace(V100, sm_count=2)
    hidden = 48 if dense else 100
    layer = make_layer(hidden, 4, 1.0 if dense else 0.2, 2, 0, cell=cell)
    prog = (build_dense_rnn(layer, spec, sync=sync) if dense else
            build_sparse_rnn(layer, spec, sync=sync))
    m, k = prog.mapping, prog.kernel
    gates = {"lstm": 4, "gru": 3}[cell]
    assert m.rows_per_warp == gates * -(-hidden // m.n_warps)  # every gate row is a row-slot
    assert _declared(k) == counted_registers(prog)
    assert counted_registers(prog) == counted_registers(
        prog, prefetch=dict(k.meta)["prefetch"])
    assert cell_registers(cell, m.rows_per_warp) == gates + (m.rows_per_warp // 4
                                                             if cell == "lstm" else 0)


def test_gated_cell_over_the_register_budget_is_refused():
    # fits as a vanilla layer, not with four gate rows per unit
    build_sparse_rnn(make_layer(2000, 4, 0.1, 2, 0), V100)
    with pytest.raises(CapacityError, match=r"hidden=2000 \(lstm, density .*registers"):
        build_sparse_rnn(make_layer(2000, 4, 0.1, 2, 0, cell="lstm"), V100)


def test_unknown_cell_is_refused():
    layer = dataclasses.replace(make_layer(40, 2, 0.2, 2, 0), cell="xlstm")
    with pytest.raises(InputError, match=r"cell='xlstm' is not supported; accepted: rnn, gru, "
                                         r"lstm"):
        build_sparse_rnn(layer, V100)
