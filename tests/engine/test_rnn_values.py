"""Executor values vs the float64 reference for every variant of the persistent RNN kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_helpers import check_values
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from gpusim.engine import execute
from gpusim.specs import load_spec
from kernels_ir.errors import CapacityError
from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

V100 = load_spec("v100")
H100 = load_spec("h100")


@pytest.mark.parametrize("sync", ["lamport", "barrier"])
@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("batch", [1, 2, 4, 8])
@pytest.mark.parametrize("hidden,density,sms", [(37, 0.3, 2), (100, 0.05, 3)])
def test_sparse_variants_match_reference(sync, wide, batch, hidden, density, sms):
    spec = dataclasses.replace(V100, sm_count=sms)
    layer = make_layer(hidden, batch, density, 3, seed=hidden + batch)
    prog = build_sparse_rnn(layer, spec, sync=sync, wide_loads=wide, layout="naive")
    res = check_values(prog, spec)
    assert prog.kernel.grid == sms and res.waves == 1


@pytest.mark.parametrize("density", [0.01, 0.1, 0.5, 1.0])
def test_densities(density):
    spec = dataclasses.replace(V100, sm_count=4)
    prog = build_sparse_rnn(make_layer(100, 4, density, 3, seed=1), spec)
    check_values(prog, spec)


@pytest.mark.parametrize("sync", ["lamport", "barrier"])
def test_dense_kernel(sync):
    spec = dataclasses.replace(V100, sm_count=2)
    prog = build_dense_rnn(make_layer(40, 2, 1.0, 3, seed=3), spec, sync=sync)
    check_values(prog, spec)


def test_full_v100_80_ctas():
    prog = build_sparse_rnn(make_layer(256, 4, 0.1, 3, seed=5), V100, sync="lamport")
    res = check_values(prog, V100)
    assert prog.kernel.grid == 80 and res.resident_ctas == 80


def test_lamport_sentinel_slots_are_all_written():
    spec = dataclasses.replace(V100, sm_count=3)
    prog = build_sparse_rnn(make_layer(50, 2, 0.2, 4, seed=2), spec, sync="lamport")
    res = execute(prog.kernel, prog.inputs, spec=spec)
    H = prog.outputs(res.globals)
    assert not np.any(np.signbit(H[1:]) & (H[1:] == 0))  # no -0.0 sentinel left


@settings(max_examples=20, deadline=None)
@given(hidden=st.integers(8, 120), batch=st.sampled_from([1, 2, 3, 4, 8]),
       density=st.floats(0.02, 1.0), steps=st.integers(1, 3), sms=st.integers(1, 4),
       sync=st.sampled_from(["lamport", "barrier"]), wide=st.booleans(),
       seed=st.integers(0, 1000))
def test_random_configurations(hidden, batch, density, steps, sms, sync, wide, seed):
    spec = dataclasses.replace(V100, sm_count=sms)
    wide = wide and batch in (1, 2, 4, 8)  # wide loads cover B = 1, 2, 4, 8 only
    prog = build_sparse_rnn(make_layer(hidden, batch, density, steps, seed), spec, sync=sync,
                            wide_loads=wide)
    check_values(prog, spec)


# gated cells: the gate rows of a unit in one warp, the cell update in its epilogue; the values
# against models.reference.lstm_reference / gru_reference (program.reference() picks the cell's)
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("sync", ["lamport", "barrier"])
@pytest.mark.parametrize("wide,batch", [(True, 4), (False, 2)])
def test_gated_sparse_cells_match_reference(cell, sync, wide, batch):
    spec = dataclasses.replace(V100, sm_count=3)
    prog = build_sparse_rnn(make_layer(100, batch, 0.1, 3, seed=7, cell=cell), spec, sync=sync,
                            wide_loads=wide)
    assert prog.kernel.name.startswith(f"sparse_{cell}_")
    check_values(prog, spec)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("sync", ["lamport", "barrier"])
def test_gated_dense_cells_match_reference(cell, sync):
    spec = dataclasses.replace(V100, sm_count=2)
    prog = build_dense_rnn(make_layer(64, 2, 1.0, 3, seed=4, cell=cell), spec, sync=sync)
    check_values(prog, spec)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_gated_cells_on_a_full_h100_with_padding_units(cell):
    # 132 CTAs x 8 warps for 256 units: most warps own one unit, the rest only padding
    prog = build_sparse_rnn(make_layer(256, 1, 0.05, 2, seed=9, cell=cell), H100)
    check_values(prog, H100)


@settings(max_examples=8, deadline=None)
@given(hidden=st.integers(8, 90), batch=st.sampled_from([1, 2, 3, 4]),
       density=st.floats(0.05, 1.0), steps=st.integers(1, 3), sms=st.integers(1, 3),
       sync=st.sampled_from(["lamport", "barrier"]), cell=st.sampled_from(["lstm", "gru"]),
       seed=st.integers(0, 1000))
def test_random_gated_configurations(hidden, batch, density, steps, sms, sync, cell, seed):
    """Values of every gated layer that fits (a layer the registers refuse is the capacity
    tests' business: one SM holds 8 warps, so dense LSTMs from hidden ~50 do not fit)."""
    spec = dataclasses.replace(V100, sm_count=sms)
    try:
        prog = build_sparse_rnn(make_layer(hidden, batch, density, steps, seed, cell=cell), spec,
                                sync=sync, wide_loads=batch != 3)
    except CapacityError:
        reject()
    check_values(prog, spec)
