"""The GPU issues the h staging's loads as the IR (and so the simulator) does: each group's
128-bit loads back to back, no consumer of one before the next is issued.

Negative control: the SASS that Nsight Compute recorded for the pre-fix kernels
(measurements/h100/archive_2026-11-22_interleaved_loads/pcsamp_*.csv) has exactly that fault,
and the checker finds it; the post-fix record and today's kernels, compiled here with nvcc and
disassembled with cuobjdump (the nvidia-cuda-cuobjdump test dependency), have none.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_spec
from kernels_ir import sass
from kernels_ir.codegen_cuda import generate
from kernels_ir.errors import InputError
from kernels_ir.kernels.sparse_rnn import (
    PREFETCH_LOADS,
    build_dense_rnn,
    build_sparse_rnn,
    make_layer,
)

DATA = Path(__file__).resolve().parents[2] / "measurements" / "h100"
OLD = DATA / "archive_2026-11-22_interleaved_loads"
NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_cuobjdump()


def _recorded(path: Path) -> list[sass.SassInstr]:
    from measurements.exchange_pcsamp import parse_source_csv, read_page

    return sass.parse(str(r["Source"]) for r in parse_source_csv(read_page(str(path))))


@pytest.mark.parametrize("case", ["exchange-h1024-b4-lamport", "exchange-h8192-b4-lamport",
                                  "exchange-h8192-b4-barrier"])
def test_recorded_sass_before_and_after_the_fix(case):
    old = _recorded(OLD / f"pcsamp_{case}.csv")
    new = _recorded(DATA / f"pcsamp_{case}.csv")
    assert sass.wide_load_groups(old) and sass.wide_load_groups(new)
    bad = sass.interleaved_loads(old)
    assert bad, "the pre-fix SASS interleaved each load with the previous chunk's use"
    # the consumers: the sentinel checks (Lamport) or the STS (barrier) of an earlier chunk
    assert all("ISETP" in b["sass"] or "STS.128" in b["sass"] for b in bad), bad[:3]
    assert sass.interleaved_loads(new) == []
    assert all(len(g) == 4 for g in sass.wide_load_groups(new))   # STAGE_GROUP loads per group


def test_parser_reads_cuobjdump_lines_and_registers():
    text = """
        /*07a0*/                   LDG.E.128.STRONG.GPU R12, desc[UR6][R42.64] ;   /* 0x0 */
        /*07b0*/              @!P0 LDG.E.128.STRONG.GPU R16, desc[UR6][R42.64+0x1000] ; /* 0x0 */
        /*07c0*/                   ISETP.NE.AND P1, PT, R13, -0x80000000, PT ;   /* 0x0 */
        /*07d0*/                   LDG.E.128.STRONG.GPU R20, desc[UR6][R42.64+0x2000] ; /* 0x0 */
        /*07e0*/                   STS.128 [R40+0x1000], R16 ;   /* 0x0 */
    """
    ins = sass.parse(text)
    assert [i.opcode for i in ins] == ["LDG.E.128.STRONG.GPU", "LDG.E.128.STRONG.GPU",
                                       "ISETP.NE.AND", "LDG.E.128.STRONG.GPU", "STS.128"]
    assert ins[1].pred == "@!P0" and ins[0].writes() == {12, 13, 14, 15}
    assert ins[4].reads() == {40, 16, 17, 18, 19}   # the address, and 128 bits of data
    assert [len(g) for g in sass.wide_load_groups(ins)] == [3]
    assert [b["consumer"] for b in sass.interleaved_loads(ins)] == [2]


def _kernels():
    spec = load_spec("h100")
    out = {}
    for sync in ("lamport", "barrier"):
        # aligned slots (4096, 32768 words: no guard) and ragged ones (256, 5000 words)
        for n, b, d in ((1024, 4, 0.1), (8192, 4, 0.002), (256, 1, 0.5), (1250, 4, 0.05)):
            out[f"sparse-h{n}-b{b}-{sync}"] = build_sparse_rnn(
                make_layer(n, b, d, 4, 0), spec, sync=sync, wide_loads=True).kernel
    out["dense-h1024-b4"] = build_dense_rnn(make_layer(1024, 4, 1.0, 4, 0), spec).kernel
    out["dense-h256-b1"] = build_dense_rnn(make_layer(256, 1, 1.0, 4, 0), spec).kernel
    return out


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
def test_todays_kernels_issue_each_group_back_to_back(tmp_path):
    for name, kernel in _kernels().items():
        cu, cubin = tmp_path / f"{name}.cu", tmp_path / f"{name}.cubin"
        cu.write_text(generate(kernel).code)
        p = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(cu), "-o", str(cubin)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        ins = sass.parse(sass.disassemble(cubin))
        assert sass.interleaved_loads(ins) == [], name
        # the group loop stays rolled: no more wide loads per group than STAGE_GROUP
        assert all(len(g) <= 4 for g in sass.wide_load_groups(ins)), name
        if name == "dense-h1024-b4":   # 32 slots a row: ptxas keeps about as many shared
            lags = _lds_lags(ins)       # loads in flight as the IR's prefetch claims
            assert np.median(lags) >= PREFETCH_LOADS - 2, (name, lags)


def _lds_lags(ins):
    """For each LDS: how many LDS the SASS issues before the first instruction that reads it."""
    lds = [i for i in ins if i.opcode.startswith("LDS")]
    lags = []
    for ld in lds:
        w = ld.writes()
        use = next((j for j in ins[ld.index + 1:] if j.reads() & w), None)
        if use is not None:
            lags.append(sum(1 for x in lds if ld.index < x.index < use.index))
    return lags


def test_disassemble_errors_name_the_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(sass, "find_cuobjdump", lambda: None)
    with pytest.raises(InputError, match="cuobjdump not found"):
        sass.disassemble(tmp_path / "x.cubin")
    if CUOBJDUMP is not None:
        with pytest.raises(InputError, match="missing.cubin failed"):
            sass.disassemble(tmp_path / "missing.cubin", cuobjdump=CUOBJDUMP)


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("cell,hidden,batch,dtype,rows", [
    ("rnn", 504, 8, "fp32", 1),     # one row-slot a warp
    ("rnn", 1224, 2, "fp32", 2),    # two rows a warp read the same h words
    ("gru", 504, 8, "fp32", 3),     # a unit's three gate rows
    ("lstm", 360, 2, "fp16", 4),    # a unit's four gate rows, fp16 weights
])
def test_dense_kernel_shared_loads_are_those_ptxas_keeps(cell, hidden, batch, dtype, rows,
                                                        tmp_path):
    """The dense kernel's shared loads of h in the IR are the LDS instructions left in its SASS
    (sm_90): what the simulator charges is what the GPU issues. With several row-slots a warp
    every row reads the same words of h; ptxas loads them once (the builder too, and holds
    them for the later rows)."""
    from kernels_ir.ir import Op, instructions

    layer = make_layer(hidden, batch, 1.0, 4, 1, cell=cell)
    prog = build_dense_rnn(layer, load_spec("h100"), sync="lamport", wide_loads=True,
                           dtype=dtype)
    assert prog.mapping.rows_per_warp == rows
    ir_lds = sum(i.op is Op.LDS for i in instructions(prog.kernel))
    cu, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    cu.write_text(generate(prog.kernel).code)
    p = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(cu), "-o", str(cubin)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    sass_lds = sum(1 for ln in sass.disassemble(cubin, cuobjdump=CUOBJDUMP).splitlines()
                   if " LDS" in ln)
    assert ir_lds == sass_lds
