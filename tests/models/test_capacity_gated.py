"""Gated cells: the capacity model's expectation follows the unit-wise deal of the mapping, so
the largest layer ``max_hidden`` accepts is one the kernel builder builds, and not far below
the builder's own limit (over this sweep within 10% of it: at batch 1 the builder may take a
few percent more, at batch 4 mostly under 2%)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpusim.specs import load_spec
from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer, ptxas_registers
from kernels_ir.mapping import map_matrix
from models import capacity as cap

SWEEP = [(g, c, d, b) for g, c, (d, b) in itertools.product(
    ("v100", "h100"), ("lstm", "gru"), ((0.1, 4), (0.3, 1), (0.3, 4)))]
MARGIN = 0.10


def _builder_fits(spec, n, b, d, cell) -> bool:
    """The builder's register check (barrier sync: the variant capacity counts) on the mapping
    of the seed-0 layer, without building the kernel."""
    U = make_layer(n, b, d, 1, 0, cell=cell).U
    m = map_matrix(U, n_ctas=spec.sm_count, warps_per_cta=8, batch=b, wide_loads=True,
                   gates=cap.CELLS[cell])
    slot = -(-n * b // 4) * 4
    need = ptxas_registers(m.total_slots, m.rows_per_warp, b, False, arch=spec.arch,
                           sync="barrier", group=min(4, -(-slot // 1024)), dense_tail=False,
                           cell=cell)
    return need <= cap.reg_limit(spec)


@pytest.mark.parametrize("gpu,cell,density,batch", SWEEP)
def test_the_largest_gated_layer_capacity_accepts_is_built(gpu, cell, density, batch):
    spec = load_spec(gpu)
    n = cap.max_hidden(spec, density, batch, cell=cell).hidden
    prog = build_sparse_rnn(make_layer(n, batch, density, 1, 0, cell=cell), spec,
                            sync="barrier")
    assert prog.mapping.gates == cap.CELLS[cell]
    # ... and the builder's limit is within the margin above it
    assert not _builder_fits(spec, int(np.ceil(n * (1 + MARGIN))), batch, density, cell)


def test_unit_wise_expectation_is_longer_than_rows_sorted_one_by_one():
    v100 = load_spec("v100")
    K, R = cap.expected_slots(v100, 1379, 0.1, "lstm")
    assert R == 12 and len(K) == 12
    assert all(K[4 * j] == K[4 * j + g] for j in range(3) for g in range(4))
    U = make_layer(1379, 4, 0.1, 1, 0, cell="lstm").U
    m = map_matrix(U, n_ctas=80, warps_per_cta=8, batch=4, wide_loads=True, gates=4)
    assert sum(K) >= m.total_slots - 2
    # the example of the docs: lstm, V100, density 0.1, batch 4 was accepted up to 1427
    assert cap.max_hidden(v100, 0.1, 4, cell="lstm").hidden < 1379
