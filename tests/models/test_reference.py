import numpy as np
import pytest
import scipy.sparse as sp

from kernels_ir.errors import InputError
from models import (
    gru_reference,
    lstm_reference,
    prune_magnitude,
    random_layer,
    random_sparse,
    rnn_reference,
)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _data(rows, n=5, b=3, t=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, n)) * 0.4, rng.standard_normal((t, rows, b)),
            rng.standard_normal((n, b)))


def test_rnn_matches_loop_and_sparse_equals_dense():
    U, x, h0 = _data(5)
    H = rnn_reference(U, x, h0)
    assert H.shape == (5, 5, 3) and H.dtype == np.float64
    np.testing.assert_array_equal(H[0], h0)
    h = h0
    for t in range(4):
        h = np.tanh(U @ h + x[t])
        np.testing.assert_allclose(H[t + 1], h, rtol=1e-13)
    np.testing.assert_allclose(rnn_reference(sp.csr_matrix(U), x, h0), H, rtol=1e-13)


def test_lstm_one_step_by_hand():
    U, x, h0 = _data(20)
    H, C = lstm_reference(U, x, h0)
    a = U @ h0 + x[0]
    i, f, g, o = _sig(a[:5]), _sig(a[5:10]), np.tanh(a[10:15]), _sig(a[15:])
    c1 = f * 0 + i * g
    np.testing.assert_allclose(C[1], c1, rtol=1e-12)
    np.testing.assert_allclose(H[1], o * np.tanh(c1), rtol=1e-12)
    assert H.shape == C.shape == (5, 5, 3)


def test_gru_one_step_by_hand():
    U, x, h0 = _data(15)
    H = gru_reference(U, x, h0)
    a = U @ h0
    r, z = _sig(x[0][:5] + a[:5]), _sig(x[0][5:10] + a[5:10])
    n = np.tanh(x[0][10:] + r * a[10:])
    np.testing.assert_allclose(H[1], (1 - z) * n + z * h0, rtol=1e-12)


@pytest.mark.parametrize("fn,rows", [(rnn_reference, 5), (lstm_reference, 20), (gru_reference, 15)])
def test_shape_errors_name_the_shape(fn, rows):
    U, x, h0 = _data(rows)
    with pytest.raises(InputError, match=r"\(4, 3\)"):
        fn(U, x, h0[:4])
    with pytest.raises(InputError, match="x_proj has shape"):
        fn(U, x[:, :-1], h0)
    with pytest.raises(InputError, match="U has shape"):
        fn(U[:, :4], x, h0)


def test_prune_magnitude_exact_count_and_largest():
    a = np.random.default_rng(1).standard_normal((10, 7))
    m = prune_magnitude(a, 0.3)
    assert m.nnz == round(0.3 * 70)
    kept = np.abs(m.data).min()
    dropped = np.abs(a[m.toarray() == 0]).max()
    assert kept >= dropped
    np.testing.assert_array_equal(m.toarray()[m.toarray() != 0], a[m.toarray() != 0])
    assert prune_magnitude(a, 1e-9).nnz == 1


@pytest.mark.parametrize("bad", [0, 1.5, -0.1, float("nan")])
def test_density_errors(bad):
    with pytest.raises(InputError, match="outside \\(0, 1\\]"):
        prune_magnitude(np.ones((2, 2)), bad)
    with pytest.raises(InputError, match="outside \\(0, 1\\]"):
        random_sparse(3, 3, bad, np.random.default_rng(0))


def test_density_message_exact():
    with pytest.raises(InputError, match=r"^density=1\.5 is outside \(0, 1\]$"):
        random_layer(8, 1, 1.5, 2, 0)


def test_random_sparse_seeded_and_scaled():
    a = random_sparse(400, 300, 0.2, np.random.default_rng(3))
    b = random_sparse(400, 300, 0.2, np.random.default_rng(3))
    assert (a != b).nnz == 0
    assert abs(a.nnz / (400 * 300) - 0.2) < 0.01
    assert a.dtype == np.float32 and a.has_sorted_indices
    assert abs(a.data.std() - 1 / np.sqrt(0.2 * 300)) < 0.01
    assert random_sparse(2, 2, 1e-6, np.random.default_rng(0)).nnz == 1


@pytest.mark.parametrize("cell,gates", [("rnn", 1), ("gru", 3), ("lstm", 4)])
def test_random_layer(cell, gates):
    L = random_layer(16, 2, 0.5, 3, seed=7, cell=cell)
    assert L.U.shape == (gates * 16, 16) and L.U.dtype == np.float32
    assert L.x_proj.shape == (3, gates * 16, 2) and L.h0.shape == (16, 2)
    assert L.x_proj.dtype == L.h0.dtype == np.float32
    assert np.all(L.h0 != 0) and np.count_nonzero(L.x_proj) == L.x_proj.size
    H = {"rnn": rnn_reference, "gru": gru_reference,
         "lstm": lambda *a: lstm_reference(*a)[0]}[cell](L.U, L.x_proj, L.h0)
    assert np.all(np.abs(H[-1]) < 0.999)  # not saturated


@pytest.mark.parametrize("kw,msg", [({"hidden": 0}, "hidden=0"), ({"batch": -1}, "batch=-1"),
                                    ({"timesteps": 0}, "timesteps=0"),
                                    ({"cell": "xlstm"}, "cell='xlstm'")])
def test_random_layer_errors(kw, msg):
    args = {"hidden": 4, "batch": 1, "density": 0.5, "timesteps": 1, "seed": 0} | kw
    with pytest.raises(InputError, match=msg):
        random_layer(**args)


@pytest.mark.parametrize("pre", [0, 1, 2])
def test_random_sparse_draws_what_generator_random_draws(pre):
    # random_sparse tests raw PCG64 bits instead of float32 uniforms (faster); the matrix and
    # the generator's state after must be those of `rng.random(dtype=float32) < density`
    from models.sparse import _raw_uniforms_match, _uniform_below

    assert _raw_uniforms_match()
    for n, d in ((1, 0.5), (999, 0.3), (1000, 0.01), (4097, 2.0 ** -24), (64, 0.999999999)):
        a, b = np.random.default_rng(n), np.random.default_rng(n)
        a.random(pre, dtype=np.float32)
        b.random(pre, dtype=np.float32)
        want = a.random(n, dtype=np.float32) < d
        assert np.array_equal(_uniform_below(b, n, d), want)
        assert a.bit_generator.state == b.bit_generator.state
        assert a.random(3, dtype=np.float32).tolist() == b.random(3, dtype=np.float32).tolist()
