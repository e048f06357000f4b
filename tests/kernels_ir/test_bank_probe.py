"""The bank probes: the catalogue builds and verifies, every probe kernel runs in the functional
executor with the right values, bad patterns are refused by name, and (with nvcc + cuobjdump)
each probe compiles to exactly one SASS shared access of its width, so that one pattern is one
warp instruction on the GPU."""

from __future__ import annotations

import collections
import shutil
import subprocess

import numpy as np
import pytest

from gpusim.engine.executor import execute
from kernels_ir import banks, sass
from kernels_ir.codegen_cuda import generate
from kernels_ir.errors import InputError
from kernels_ir.kernels import bank_probe as bp

NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_cuobjdump()


@pytest.fixture(scope="module")
def pats():
    return bp.catalogue(kernels=False)


def test_catalogue_covers_every_family_op_and_width(pats):
    assert len(pats) >= 250
    names = [p.name for p in pats]
    assert len(set(names)) == len(names)
    cover = collections.Counter((p.family, p.op, p.width) for p in pats)
    for fam in ("structured", "mask", "random"):
        for op in bp.OPS:
            for w in (1, 2, 4):
                assert cover[(fam, op, w)] >= 4, (fam, op, w)
    assert {p.noise for p in pats} == set(bp.NOISE_KINDS)
    assert any(p.name.startswith("st128_staging") for p in pats)
    # random active masks and partial masks are there, and every pattern has an active lane
    assert any(not all(p.active) for p in pats if p.family == "random")
    assert all(any(p.active) for p in pats)
    # the structured set separates the candidate rules: quarter-warp phases and the whole warp
    # disagree on some 128-bit pattern (e.g. the transposed permutation)
    t = next(p for p in pats if p.name == "ld128_perm_transpose")
    assert banks.wavefronts(t.words_array, 4) == 16


def test_kernel_patterns_are_the_mappings_addresses():
    from kernels_ir.kernels.sparse_rnn import make_layer
    from kernels_ir.mapping import map_matrix, slot_word_addresses

    pats = bp.kernel_patterns(layers=((256, 4, 0.3, 7, 5), (128, 8, 0.2, 3, 2)),
                              n_ctas=4, warps_per_cta=2)
    assert len(pats) == 2 * 5 + 2 * 2 * 2    # samples x layouts (x 2 loads at batch 8)
    assert {p.width for p in pats} == {4} and all(p.op == "ld" for p in pats)
    layer = make_layer(256, 4, 0.3, 1, seed=7)
    for layout in ("naive", "optimal"):
        m = map_matrix(layer.U, n_ctas=4, warps_per_cta=2, batch=4, wide_loads=True,
                       layout=layout)
        words = slot_word_addresses(m, 4, True)[0]
        mine = [p for p in pats if f"h256b4d0.3_{layout}_" in p.name]
        assert mine
        for p in mine:
            w, s = (int(x) for x in p.name.rsplit("_w", 1)[1].split("s"))
            assert np.array_equal(p.words_array, words[w, s])
            assert f"model {int(banks.wavefronts(words[w, s], 4))} wavefronts" in p.source
    # batch 8: two 128-bit loads per slot, at word offsets 0 and 4
    b8 = [p for p in pats if "h128b8" in p.name]
    assert {p.name[-6:] for p in b8} == {"_load0", "_load1"}


def _one_per_kernel(pats):
    seen, out = set(), []
    for p in pats:
        if bp.kernel_key(p) not in seen:
            seen.add(bp.kernel_key(p))
            out.append(p)
    return out


def test_every_probe_kernel_runs_with_the_right_values(pats):
    some = ("contig", "broadcast", "same_bank", "pairs_xor1", "perm_transpose", "contig_evens",
            "same_bank_l0_8_16_24", "random1", "random4", "staging_split_lanes13_31")
    chosen = _one_per_kernel(pats) + [p for p in pats if p.name.split("_", 1)[1] in some]
    assert len({bp.kernel_key(p) for p in chosen}) == 6 + 2 * 2 * 4
    assert len(chosen) > 50
    for p in chosen:
        m = bp.probe(p)
        r = execute(m.kernel, m.inputs)
        assert m.verify_result(r.globals), p.name
        assert m.ops == p.repeats


def test_the_value_check_can_fail(pats):
    ld = next(p for p in pats if p.name == "ld128_contig")
    m = bp.probe(ld)
    out = execute(m.kernel, m.inputs).globals["out"].copy()
    assert bp.check_out(ld, ld.repeats, out)
    out[5] += 1
    assert not bp.check_out(ld, ld.repeats, out)
    # stores: lanes l and l^1 store the same words; either lane's value is right, others not
    st = next(p for p in pats if p.name == "st64_pairs_xor1")
    m = bp.probe(st)
    out = execute(m.kernel, m.inputs).globals["out"].copy()
    assert bp.check_out(st, st.repeats, out)
    top = bp.ST_STRIDE * (st.repeats - 1)
    out[0:2] = [top + 2 * 1 + 0, top + 2 * 1 + 1]     # lane 1's words: also right
    assert bp.check_out(st, st.repeats, out)
    out[0] = top + 2 * 2                               # lane 2 never wrote word 0
    assert not bp.check_out(st, st.repeats, out)
    # an inactive lane's store must not land
    half = next(p for p in pats if p.name == "st128_contig_evens")
    m = bp.probe(half)
    assert bp.check_out(half, half.repeats, execute(m.kernel, m.inputs).globals["out"])
    assert not bp.check_out(half, half.repeats, np.full(32 * 4, 7))


def test_bad_patterns_are_refused_naming_the_value():
    w = np.arange(32) * 4
    with pytest.raises(InputError, match="lane 3 word 13"):
        bp.Pattern.from_dict({"name": "x", "family": "f", "op": "ld", "width": 4,
                              "words": [*w[:3], 13, *w[4:]], "active": [True] * 32})
    with pytest.raises(InputError, match="word 16384"):
        bp.Pattern.from_dict({"name": "x", "family": "f", "op": "ld", "width": 1,
                              "words": [16384] * 32, "active": [True] * 32})
    with pytest.raises(InputError, match="no lane is active"):
        bp.Pattern.from_dict({"name": "x", "family": "f", "op": "st", "width": 1,
                              "words": [0] * 32, "active": [False] * 32})
    with pytest.raises(InputError, match="op='mov'"):
        bp.probe_kernel("mov", 4)
    with pytest.raises(InputError, match="width=3"):
        bp.probe_kernel("ld", 3)
    with pytest.raises(InputError, match="noise='dram'"):
        bp.probe_kernel("ld", 4, noise="dram")
    with pytest.raises(InputError, match="lacks field 'words'"):
        bp.Pattern.from_dict({"name": "x", "family": "f", "op": "st", "width": 1})


def _sass_counts(kernel, tmp_path):
    cu, cubin = tmp_path / f"{kernel.name}.cu", tmp_path / f"{kernel.name}.cubin"
    cu.write_text(generate(kernel).code)
    p = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(cu), "-o", str(cubin)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return collections.Counter(i.opcode for i in sass.parse(sass.disassemble(cubin))
                               if i.opcode.startswith(("LDS", "STS")))


def _expect(op, width):
    sfx = {1: "", 2: ".64", 4: ".128"}[width]
    return {"LDS" + sfx: 1} if op == "ld" else {"STS" + sfx: 1, "LDS" + sfx: 1}


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("op,width,noise", [("ld", 4, "none"), ("st", 4, "ldg_volatile")])
def test_one_ir_access_is_one_sass_access(tmp_path, op, width, noise):
    got = _sass_counts(bp.probe_kernel(op, width, noise=noise), tmp_path)
    if op == "ld":
        got.pop("STS")   # the fill (32-bit stores, not measured for ld probes)
    assert dict(got) == _expect(op, width)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_every_probe_kernel_is_one_sass_access(tmp_path):
    for op in bp.OPS:
        for width in (1, 2, 4):
            for noise in bp.NOISE_KINDS:
                got = _sass_counts(bp.probe_kernel(op, width, noise=noise), tmp_path)
                if op == "ld":
                    got.pop("STS")
                assert dict(got) == _expect(op, width), (op, width, noise)
