import math

import numpy as np
import pytest
import scipy.sparse as sp

from kernels_ir import banks
from kernels_ir.errors import InputError
from kernels_ir.mapping import (
    Mapping,
    access_pattern,
    apply_mapping,
    map_matrix,
    slot_word_addresses,
)
from models.sparse import random_sparse


def _reconstruct(m: Mapping) -> np.ndarray:
    out = np.zeros((m.n_rows, m.n_cols))
    unit = np.argsort(m.h_positions)             # position -> unit of h
    rows = m.slot_rows
    for w in range(m.n_warps):
        for s in range(m.total_slots):
            r = rows[w, s]
            real = ~m.pad[w, s]
            if r < 0:
                assert not real.any()
                continue
            np.add.at(out[r], unit[m.cols[w, s, real]], m.values[w, s, real])
    return out


def _U(n_rows=70, n_cols=90, density=0.3, seed=0):
    return random_sparse(n_rows, n_cols, density, np.random.default_rng(seed))


@pytest.mark.parametrize("layout", ["naive", "random", "greedy", "optimal"])
@pytest.mark.parametrize("batch,wide", [(1, True), (4, True), (8, True), (3, False)])
def test_every_weight_exactly_once(layout, batch, wide):
    U = _U()
    m = map_matrix(U, n_ctas=3, warps_per_cta=2, batch=batch, wide_loads=wide, layout=layout)
    np.testing.assert_array_equal(_reconstruct(m), U.toarray())
    assert m.pad.sum() == m.values.size - U.nnz
    assert np.all(m.values[m.pad] == 0)
    assert m.cols.min() >= 0 and m.cols.max() < U.shape[1]
    assert m.values.dtype == np.float32 and m.cols.dtype == np.int32 and m.row_ids.dtype == np.int32
    assert sorted(m.row_ids[m.row_ids >= 0].tolist()) == list(range(70))
    assert m.layout == layout


def test_slots_sorting_and_snake():
    nnz = np.array([1, 100, 33, 64, 65, 5, 31, 2, 97])
    rows = np.repeat(np.arange(9), nnz)
    cols = np.concatenate([np.arange(k) for k in nnz])
    U = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(9, 128))
    m = map_matrix(U, n_ctas=2, warps_per_cta=2, batch=1, wide_loads=True)
    assert m.n_warps == 4 and m.rows_per_warp == 3
    assert m.row_ids[:, 0].tolist() == [1, 8, 4, 3]      # longest first
    assert m.row_ids[::-1, 1].tolist() == [2, 6, 5, 7]    # snake: reversed direction
    assert m.row_ids[:, 2].tolist() == [0, -1, -1, -1]
    assert m.slots == (4, 2, 1)
    assert m.slot_offset(2) == 6 and m.total_slots == 7
    assert all(k == max(1, math.ceil(nnz[m.row_ids[:, j][m.row_ids[:, j] >= 0]].max() / 32))
               for j, k in enumerate(m.slots))


def test_padding_adds_no_wavefront():
    U = _U(50, 200, 0.17, seed=4)
    for batch, wide in [(1, True), (2, True), (4, True), (8, True), (5, False)]:
        m = map_matrix(U, n_ctas=2, warps_per_cta=3, batch=batch, wide_loads=wide)
        for (width, _), words in zip(access_pattern(batch, wide),
                                     slot_word_addresses(m, batch, wide), strict=True):
            with_pad = banks.wavefronts(words, width)
            packed = banks.packed(words, width)
            active = ~m.pad
            # the real lanes alone, in the same phases: packed loads as loads, the others in
            # lane phases (as stores, which are never packed)
            real_only, empty_phases = (np.where(
                packed, f(words, width, active, "ld"), f(words, width, active, "st"))
                for f in (banks.wavefronts, banks.ideal_wavefronts))
            empty_phases = banks.ideal_wavefronts(words, width) - empty_phases
            np.testing.assert_array_equal(with_pad, real_only + empty_phases)
            # a slot whose real lanes are at most one per lane pair is read packed
            pairs_ok = ~(active & active[..., np.arange(32) ^ 1]).any(axis=-1)
            assert np.all(packed[pairs_ok]) or width == 1


def test_dense_tiles():
    a = np.random.default_rng(2).standard_normal((20, 70)).astype(np.float32)
    a[3, 5] = 0.0
    m = map_matrix(a, n_ctas=2, warps_per_cta=2, batch=4, wide_loads=True, dense=True)
    assert m.dense and m.slots == (3,) * m.rows_per_warp
    np.testing.assert_array_equal(_reconstruct(m), a)
    real = ~m.pad[0, :3]
    grid = (np.arange(3)[:, None] * 32 + np.arange(32))
    np.testing.assert_array_equal(m.cols[0, :3][real], grid[real])
    assert real.sum() == 70
    with pytest.raises(InputError, match="dense tiles"):
        map_matrix(a, n_ctas=1, warps_per_cta=1, batch=1, wide_loads=True, dense=True,
                   layout="greedy")


def test_access_pattern():
    assert access_pattern(1, True) == [(1, 0)]
    assert access_pattern(2, True) == [(2, 0)]
    assert access_pattern(4, True) == [(4, 0)]
    assert access_pattern(8, True) == [(4, 0), (4, 4)]
    assert access_pattern(3, False) == [(1, 0), (1, 1), (1, 2)]
    with pytest.raises(InputError, match="batch=3 cannot use wide loads.*1, 2, 4, 8"):
        access_pattern(3, True)
    with pytest.raises(InputError, match="batch=33"):
        access_pattern(33, False)
    with pytest.raises(InputError, match="batch=0"):
        map_matrix(_U(), n_ctas=1, warps_per_cta=1, batch=0, wide_loads=False)
    with pytest.raises(InputError, match="n_ctas=0"):
        map_matrix(_U(), n_ctas=0, warps_per_cta=1, batch=1, wide_loads=False)


def test_slot_word_addresses():
    m = map_matrix(_U(), n_ctas=1, warps_per_cta=4, batch=8, wide_loads=True)
    a, b = slot_word_addresses(m, 8, True)
    np.testing.assert_array_equal(a, m.cols.astype(np.int64) * 8)
    np.testing.assert_array_equal(b, a + 4)


@pytest.mark.parametrize("layout", ["naive", "greedy", "optimal"])
def test_apply_mapping_and_lstm_shape(layout):
    U = _U(4 * 40, 40, 0.4, seed=5)  # LSTM-shaped recurrent matrix
    m = map_matrix(U, n_ctas=2, warps_per_cta=4, batch=2, wide_loads=True, layout=layout)
    h = np.random.default_rng(0).standard_normal((40, 2)).astype(np.float32)
    np.testing.assert_allclose(apply_mapping(m, h), U.toarray().astype(np.float64) @ h,
                               rtol=1e-5, atol=1e-5)


def test_custom_hook_and_bad_hooks():
    U = _U(10, 64, 0.5)

    def reverse(cols, k, *, batch, wide_loads, rng):
        idx = np.full(k * 32, -1)
        idx[:cols.size] = np.arange(cols.size)[::-1]
        return idx.reshape(k, 32)

    m = map_matrix(U, n_ctas=1, warps_per_cta=2, batch=1, wide_loads=True, layout=reverse)
    np.testing.assert_array_equal(_reconstruct(m), U.toarray())
    assert m.layout == "custom"

    def dup(cols, k, *, batch, wide_loads, rng):
        return np.zeros((k, 32), dtype=int)

    with pytest.raises(InputError, match="exactly once"):
        map_matrix(U, n_ctas=1, warps_per_cta=2, batch=1, wide_loads=True, layout=dup)
    with pytest.raises(InputError, match="layout='zigzag' is not known"):
        map_matrix(U, n_ctas=1, warps_per_cta=2, batch=1, wide_loads=True, layout="zigzag")


def test_mapping_is_frozen():
    m = map_matrix(_U(), n_ctas=1, warps_per_cta=2, batch=1, wide_loads=True)
    with pytest.raises(ValueError):
        m.values[0, 0, 0] = 1.0


@pytest.mark.parametrize("owner_order", [True, False])
def test_square_layer_in_owner_order_keeps_every_weight(owner_order):
    U = random_sparse(150, 150, 0.2, np.random.default_rng(3))
    m = map_matrix(U, n_ctas=4, warps_per_cta=4, batch=4, wide_loads=True, layout="optimal",
                   owner_order=owner_order)
    np.testing.assert_array_equal(_reconstruct(m), U.toarray())
    h = np.random.default_rng(4).standard_normal((150, 4)).astype(np.float32)
    np.testing.assert_allclose(apply_mapping(m, h), U.toarray() @ h, rtol=1e-4, atol=1e-4)
    assert (m.positions is not None) == owner_order


def test_owner_order_gives_every_cta_a_contiguous_block_of_h():
    """Each CTA writes one contiguous run of h, so a 32-byte sector has one writer SM except
    at the (at most one) boundary sector between two CTAs."""
    U = random_sparse(300, 300, 0.1, np.random.default_rng(5))
    m = map_matrix(U, n_ctas=5, warps_per_cta=4, batch=2, wide_loads=True)
    pos = m.h_positions
    assert sorted(pos.tolist()) == list(range(300))
    for cta in range(m.n_ctas):
        rows = m.row_ids[cta * 4:(cta + 1) * 4]
        p = np.sort(pos[rows[rows >= 0]])
        assert p.size and np.all(np.diff(p) == 1), cta


def test_map_matrix_layouts_equals_one_map_matrix_per_layout():
    # predict builds its mappings together (shared row dealing); they must be map_matrix's own
    from kernels_ir.mapping import map_matrix_layouts

    U = random_sparse(300, 300, 0.1, np.random.default_rng(5))
    pairs = [("naive", False), ("optimal", True), ("greedy", True), ("random", False)]
    many = map_matrix_layouts(U, pairs, n_ctas=5, warps_per_cta=4, batch=4, seed=3)
    for (layout, wide), got in zip(pairs, many, strict=True):
        want = map_matrix(U, n_ctas=5, warps_per_cta=4, batch=4, wide_loads=wide,
                          layout=layout, seed=3)
        assert got.slots == want.slots and got.layout == want.layout
        for name in ("row_ids", "values", "cols", "pad", "positions"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
    with pytest.raises(InputError, match="layout"):
        map_matrix_layouts(U, [("nope", False)], n_ctas=5, warps_per_cta=4, batch=4)


@pytest.mark.parametrize("gates,dense,layout", [(3, False, "naive"), (4, False, "optimal"),
                                                (4, True, "naive"), (3, True, "naive")])
def test_gated_cell_deals_the_gate_rows_of_a_unit_to_one_warp(gates, dense, layout):
    n = 50
    U = _U(gates * n, n, 0.3, seed=gates)
    m = map_matrix(U, n_ctas=2, warps_per_cta=4, batch=2, wide_loads=True, layout=layout,
                   dense=dense, gates=gates)
    assert m.gates == gates and m.rows_per_warp % gates == 0
    ids = m.row_ids.reshape(m.n_warps, -1, gates)            # (warp, unit slot, gate)
    real = ids[..., 0] >= 0
    assert np.all((ids >= 0) == real[..., None])             # a unit is padding in every gate
    np.testing.assert_array_equal(ids[real], ids[real][:, :1] + n * np.arange(gates))
    assert sorted(ids[real][:, 0]) == list(range(n))         # every unit exactly once
    h = np.random.default_rng(1).standard_normal((n, 2)).astype(np.float32)
    np.testing.assert_allclose(apply_mapping(m, h), U.toarray().astype(np.float64) @ h,
                               rtol=1e-5, atol=1e-5)
    if not dense:   # h in the owners' order: the units of warp 0, then warp 1, ...
        owned = ids[..., 0].reshape(-1)
        np.testing.assert_array_equal(m.h_positions[owned[owned >= 0]], np.arange(n))


def test_gated_cell_shape_is_checked():
    with pytest.raises(InputError, match=r"gates=4 needs \(4\*N, N\) = \(160, 40\)"):
        map_matrix(_U(3 * 40, 40, 0.3), n_ctas=1, warps_per_cta=4, batch=2, wide_loads=True,
                   gates=4)
