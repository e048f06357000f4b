import dataclasses

import numpy as np
import pytest

from gpusim.specs import load_spec
from kernels_ir.errors import CapacityError, InputError
from kernels_ir.kernels.sparse_rnn import ptxas_registers, registers_needed
from kernels_ir.mapping import map_matrix
from models import capacity as cap
from models.sparse import random_sparse

V100 = load_spec("v100")


@pytest.mark.parametrize("S,R,B,dense", [(33, 4, 4, False), (72, 2, 4, True), (5, 1, 1, False)])
def test_registers_match_the_kernel_builder(S, R, B, dense):
    # the capacity model counts the largest variant (barrier sync, a full staging group); with
    # ptxas it adds what ptxas needs beyond that (tests/models/test_capacity_ptxas.py)
    assert cap.registers_per_thread(S, R, B, dense=dense, ptxas=False) == \
        registers_needed(S, R, B, dense)
    assert cap.registers_per_thread(S, R, B, dense=dense, arch="sm_70") == \
        ptxas_registers(S, R, B, dense, arch="sm_70")


def test_fp16_halves_the_weight_registers():
    """One register per slot instead of two, plus the two a slot is unpacked into (sparse);
    dense: two values per register plus the unpacked value."""
    r32 = cap.registers_per_thread(100, 4, 4, dense=False, dtype="fp32")
    r16 = cap.registers_per_thread(100, 4, 4, dense=False, dtype="fp16")
    assert r32 - r16 == 100 - 2
    d32 = cap.registers_per_thread(100, 4, 4, dense=True, dtype="fp32", ptxas=False)
    d16 = cap.registers_per_thread(100, 4, 4, dense=True, dtype="fp16", ptxas=False)
    assert d32 - d16 == 50 - 1


def test_expected_slots_close_to_a_concrete_mapping():
    for n, d in ((2304, 0.1), (1024, 0.3), (4096, 0.02)):
        U = random_sparse(n, n, d, np.random.default_rng(1))
        m = map_matrix(U, n_ctas=80, warps_per_cta=8, batch=4, wide_loads=True)
        K, R = cap.expected_slots(V100, n, d)
        Kf, _ = cap.expected_slots(V100, n, d, exact=False)
        assert R == len(m.slots)
        assert abs(sum(K) - m.total_slots) <= max(2, 0.1 * m.total_slots)
        assert abs(sum(Kf) - m.total_slots) <= max(2, 0.1 * m.total_slots)


def test_max_hidden_is_a_boundary_and_names_the_limit():
    m = cap.max_hidden(V100, 0.1, 4)
    assert cap.fit(V100, m.hidden, 4, 0.1).fits
    assert not cap.fit(V100, m.hidden + 1, 4, 0.1).fits
    assert m.limit == "registers" and f"hidden={m.hidden}" in m.message
    assert "255/thread" in m.message
    # very sparse: h in shared memory binds (98304 bytes / (4 B x 4 batch) = 6144)
    s = cap.max_hidden(V100, 0.01, 4)
    assert s.limit == "shared memory" and s.hidden == V100.smem_bytes_per_cta // 16


def test_sparsity_and_fp16_raise_capacity_and_lstm_lowers_it():
    dense = cap.max_hidden(V100, 1.0, 4, dense=True).hidden
    sparse = cap.max_hidden(V100, 0.1, 4).hidden
    # 10% density stores 2 registers per nonzero against 1 per dense weight: ideally
    # sqrt(1 / (2 * 0.1)) = 2.2x the hidden size; padding and the fixed per-thread registers
    # take part of that, so at least 2x
    assert sparse >= 2 * dense
    assert cap.max_hidden(V100, 0.1, 4, dtype="fp16").hidden > sparse
    assert cap.max_hidden(V100, 0.1, 4, cell="lstm").hidden < sparse
    # a bigger register file (shrunk spec the other way) admits a bigger layer
    assert cap.max_hidden(dataclasses.replace(V100, sm_count=160), 0.1, 4).hidden > sparse


def test_check_refuses_with_the_largest_size():
    with pytest.raises(CapacityError, match=r"registers.*largest that fits is hidden=\d+"):
        cap.check(V100, 20000, 4, 0.1)
    assert cap.check(V100, 1024, 4, 0.1).fits


@pytest.mark.parametrize("kw", [{"dtype": "fp8"}, {"cell": "xlstm"}])
def test_bad_input(kw):
    with pytest.raises(InputError):
        cap.fit(V100, 1024, 4, 0.1, **kw)
    with pytest.raises(InputError):
        cap.max_hidden(V100, 1.5, 4)
