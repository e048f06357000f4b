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
    active = np.array(draw(st.lists(st.booleans(), min_size=32, max_size=32)))
    return words, width, active


@settings(max_examples=150, deadline=None)
@given(accesses())
def test_wavefronts_match_bruteforce(acc):
    words, width, active = acc
    assert banks.wavefronts(words, width) == banks.wavefronts_bruteforce(words, width)
    assert (banks.wavefronts(words, width, active)
            == banks.wavefronts_bruteforce(words, width, active))
    conf = banks.bank_conflicts(words, width, active)
    assert conf == banks.wavefronts(words, width, active) - active.reshape(width, -1).any(1).sum()
    assert conf >= 0


@settings(max_examples=100, deadline=None)
@given(accesses())
def test_bank_group_restates_the_rule(acc):
    """Per phase: wavefronts = largest number of distinct words in one bank group."""
    words, width, _ = acc
    m = banks.lanes_per_phase(width)
    total = 0
    for p in range(width):
        w = np.unique(words[p * m:(p + 1) * m])
        total += np.bincount(banks.bank_group(w, width)).max()
    assert total == banks.wavefronts(words, width)


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


@pytest.mark.parametrize("bad", [0, 3, 8])
def test_width_errors(bad):
    with pytest.raises(InputError, match=f"width={bad}"):
        banks.wavefronts(np.arange(32), bad)
    with pytest.raises(InputError, match=f"width={bad}"):
        banks.lanes_per_phase(bad)


def test_lane_count_error():
    with pytest.raises(InputError, match="32 lanes"):
        banks.wavefronts(np.arange(16), 1)
