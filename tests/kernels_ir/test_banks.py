import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels_ir import banks
from kernels_ir.errors import InputError


@st.composite
def accesses(draw):
    width = draw(st.sampled_from(banks.ACCESS_WIDTHS))
    n = draw(st.integers(1, 64))  # small address range: many repeats and conflicts
    words = np.array(draw(st.lists(st.integers(0, n), min_size=32, max_size=32))) * width
    if draw(st.booleans()):  # lane pairs (l, l^1) or (l, l^2) on one address: packed loads
        x = draw(st.sampled_from([1, 2]))
        words = np.minimum(words, words[np.arange(32) ^ x])
    active = np.array(draw(st.lists(st.booleans(), min_size=32, max_size=32)))
    return words, width, active


@settings(max_examples=200, deadline=None)
@given(accesses(), st.sampled_from(banks.OPS))
def test_wavefronts_match_bruteforce(acc, op):
    words, width, active = acc
    for act in (None, active):
        wf, conf = banks.cost(words, width, act, op)
        assert wf == banks.wavefronts(words, width, act, op)
        assert wf == banks.wavefronts_bruteforce(words, width, act, op)
        ideal = banks.wavefronts_bruteforce(words, width, act, op, ideal=True)
        assert conf == wf - ideal == banks.bank_conflicts(words, width, act, op)
        assert ideal == banks.ideal_wavefronts(words, width, act, op)
        assert conf >= 0
    # stores and unpacked loads: lane phases; packed loads have half as many (merged) phases
    lane_ideal = active.reshape(width, -1).any(1).sum()
    if op == "st" or not banks.packed(words, width, active, op):
        assert banks.ideal_wavefronts(words, width, active, op) == lane_ideal
    else:
        assert banks.ideal_wavefronts(words, width, active, op) <= lane_ideal
        # packing never costs more than the lane phases (a merged phase is the union of two)
        assert (banks.wavefronts(words, width, active, op)
                <= banks.wavefronts(words, width, active, "st"))


@settings(max_examples=100, deadline=None)
@given(accesses(), st.sampled_from(banks.OPS))
def test_bank_group_restates_the_rule(acc, op):
    """Per phase: wavefronts = largest number of distinct words in one bank group."""
    words, width, _ = acc
    m = banks.lanes_per_phase(width) * (2 if banks.packed(words, width, None, op) else 1)
    total = 0
    for p in range(0, 32, m):
        w = np.unique(words[p:p + m])
        total += np.bincount(banks.bank_group(w, width)).max()
    assert total == banks.wavefronts(words, width, None, op)


def test_known_cases():
    lane = np.arange(32)
    assert banks.wavefronts(np.zeros(32, int), 1) == 1          # broadcast
    assert banks.wavefronts(lane, 1) == 1                       # conflict free
    assert banks.wavefronts(lane * 32, 1) == 32                 # all in bank 0
    assert banks.wavefronts(lane * 2, 2) == 2                   # 64-bit, two half-warp phases
    assert banks.wavefronts(lane * 4, 4) == 4                   # 128-bit, four quarter phases
    assert banks.wavefronts((lane % 8) * 4 + (lane // 8) * 32 * 4, 4) == 4
    assert banks.wavefronts(lane * 8, 4) == 8                   # stride 2 columns of B=8
    assert banks.bank_conflicts(lane * 32, 1) == 31
    batched = np.stack([lane, lane * 32])
    assert banks.wavefronts(batched, 1).tolist() == [1, 32]
    assert banks.bank_group(np.array([0, 4, 31, 32]), 4).tolist() == [0, 1, 7, 0]


def test_return_packing_of_loads():
    """The H100 record's load patterns (measurements/h100/bank_rule.json): (wavefronts,
    conflicts) per instruction as Nsight counted them."""
    lane = np.arange(32)
    zero = np.zeros(32, np.int64)
    evens = lane % 2 == 0
    cases = [  # (words, width, active, op, expected)
        (zero, 4, None, "ld", (2, 0)),                        # ld128_broadcast
        (zero, 4, None, "st", (4, 0)),                        # st128_broadcast
        (zero, 2, None, "ld", (1, 0)),                        # ld64_broadcast
        ((lane // 2) * 4, 4, None, "ld", (2, 0)),             # ld128_pairs_xor1
        (((lane // 4) * 2 + lane % 2) * 4, 4, None, "ld", (2, 0)),   # ld128_pairs_xor2
        ((lane & ~4) * 4, 4, None, "ld", (4, 0)),             # pairs l, l^4: not packed
        (lane * 4, 4, evens, "ld", (4, 2)),                   # ld128_contig_evens
        (lane * 4, 4, evens, "st", (4, 0)),                   # st128_contig_evens
        (lane * 2, 2, evens, "ld", (2, 1)),                   # ld64_contig_evens
        (np.where(lane < 8, 0, 256), 4, np.isin(lane, [0, 8]), "ld", (2, 1)),  # same_bank_l0_8
        (lane // 8 * 256, 4, lane % 8 == 0, "ld", (4, 2)),     # same_bank_l0_8_16_24
        # ld128_h1024b4d0.1_optimal_w627s4: three columns of one bank group, lanes 0-7, 8-15,
        # 16-31: packed, half 0 needs 2 wavefronts, half 1 one
        (np.repeat([3912, 4008, 4040, 4040], 8), 4, None, "ld", (3, 1)),
    ]
    for words, width, active, op, want in cases:
        got = banks.cost(words, width, active, op)
        assert (int(got[0]), int(got[1])) == want, (words[:4], width, op)
    # one unequal pair anywhere and nothing is merged (ld128_h1024b4d0.1_naive_w549s3)
    w = np.full(32, 3940)
    w[:5] = [3940, 3944, 3992, 4028, 4088]
    assert not banks.packed(w, 4) and banks.wavefronts(w, 4) == 5
    batched = np.stack([zero, lane * 4])
    assert banks.packed(batched, 4).tolist() == [True, False]
    assert banks.wavefronts(batched, 4).tolist() == [2, 4]


@pytest.mark.parametrize("bad", [0, 3, 8])
def test_width_errors(bad):
    with pytest.raises(InputError, match=f"width={bad}"):
        banks.wavefronts(np.arange(32), bad)
    with pytest.raises(InputError, match=f"width={bad}"):
        banks.lanes_per_phase(bad)


def test_lane_count_op_and_alignment_errors():
    with pytest.raises(InputError, match="32 lanes"):
        banks.wavefronts(np.arange(16), 1)
    with pytest.raises(InputError, match="op='atom'.*'ld', 'st'"):
        banks.wavefronts(np.arange(32), 1, op="atom")
    with pytest.raises(InputError, match="128-bit shared access needs word addresses aligned"):
        banks.wavefronts(np.arange(32) * 4 + 2, 4)
    # a misaligned inactive lane is not an access
    active = np.ones(32, bool)
    active[5] = False
    words = np.arange(32) * 4
    words[5] = 3
    assert banks.wavefronts(words, 4, active) == 4
