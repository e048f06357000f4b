"""The broadcast microbenchmark: runs in the simulator with its result check, rejects bad sizes,
and costs more per round the more words every CTA reads."""

from __future__ import annotations

import dataclasses

import pytest

from gpusim.engine import simulate
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb

# one L2 partition: at 8 SMs the near/far draws of a few hundred words outweigh the words read
SPEC = dataclasses.replace(load_spec("h100"), sm_count=8, l2_partitions=1, l2_far_extra_cycles=0)


def _cycles(words, fresh, rounds, threads=256):
    m = mb.broadcast(rounds=rounds, ctas=8, threads=threads, words=words, fresh=fresh)
    r = simulate(m.kernel, m.inputs, SPEC)
    assert m.verify_result(r.globals)
    return r.cycles


@pytest.mark.parametrize("fresh", [True, False])
def test_round_cost_grows_with_the_words_read(fresh):
    """1024 and 2048 words on 256 threads. (At 512 words on 128 threads with fresh data the
    grid barrier's spin has polled once more a round since the engine charges the loop edges:
    1930 cycles a round against 1489 with the same stores and unchanged data, and 1517 at 1024
    words; the barrier's poll phase on 8 CTAs, not the words read.)"""
    small = _cycles(1024, fresh, 4) - _cycles(1024, fresh, 2)
    large = _cycles(2048, fresh, 4) - _cycles(2048, fresh, 2)
    assert large > small > 0


def test_bad_sizes_are_refused_naming_the_value():
    with pytest.raises(InputError, match="words=100"):
        mb.broadcast(words=100)
    with pytest.raises(InputError, match="share"):
        mb.broadcast(ctas=2, threads=32, words=1024)
