"""CUDA code generation: per-op coverage, golden files, and nvcc/ptxas compile checks.

Golden files live in tests/kernels_ir/golden/; regenerate them with
``UPDATE_GOLDEN=1 python -m pytest tests/kernels_ir/test_codegen.py``.

The compile tests need ``nvcc`` (skipped without it). They compile representative layers for
sm_70 (sm_75 where, as with CUDA 13, nvcc no longer builds Volta) and sm_90 with
``nvcc -cubin --ptxas-options=-v`` and require <= 255 registers, a zero-byte stack frame and
no spill stores/loads: a zero stack frame means no local memory at all, so there can be no
LDL/STL in the time loop. Where ``cuobjdump`` exists the SASS is also searched for LDL/STL
directly (it is on the GPU machine image; this development machine has nvcc/ptxas only).
Cubins are cached per source hash in a session temp dir.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernels_ir import F32, I32, PRED, Builder, Op, sass, verify
from kernels_ir.codegen_cuda import CODEGEN, ERR_WORDS, _f32_literal, generate
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb
from kernels_ir.kernels.csr_baseline import build_csr_baseline

GOLDEN = Path(__file__).parent / "golden"
NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_cuobjdump()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")


def test_every_op_has_a_cuda_rule():
    assert set(CODEGEN) == set(Op)


def _all_ops_kernel():
    """A small kernel that uses every op at least once (checked below)."""
    b = Builder("all_ops", grid=2, block=64)
    gf = b.global_buffer("gf", F32, 256, role="inout")
    gi = b.global_buffer("gi", I32, 256, role="inout")
    sf = b.shared("sf", F32, 128)
    tid = b.sreg("tid")
    lane = b.sreg("lane")
    b.sreg("warp"), b.sreg("cta"), b.sreg("nctas"), b.sreg("nwarps"), b.sreg("nthreads")
    x = b.ldg(gf, tid)
    v4 = b.ldg(gf, tid, offset=4, width=4)
    w2 = b.ldg_volatile(gf, tid, offset=8, width=2)
    i1 = b.ldg_volatile(gi, tid)
    y = b.fadd(x, v4[0])
    y = b.fsub(y, v4[1])
    y = b.fmul(y, w2[0])
    y = b.ffma(y, w2[1], 1.5)
    y = b.fmax(y, -0.0)
    y = b.fmin(y, 1e30)
    y = b.tanh(b.exp(b.sigmoid(y)))
    k = b.iadd(tid, i1)
    k = b.isub(k, 1)
    k = b.imul(k, 3)
    k = b.imad(k, 2, -7)
    k = b.idiv(b.imax(k, 1), 2)
    k = b.irem(k, 5)
    k = b.imin(k, 4)
    k = b.and_(b.or_(b.xor(b.shl(k, 1), 3), 8), 15)
    k = b.shr(k, 1)
    packed = b.ldg(gi, tid, offset=16)          # two fp16 halves / a 16-bit address
    y = b.ffma(b.h2f(packed, 1), b.h2f(packed, 0), y)
    k = b.iadd(k, b.u16(packed))
    p = b.fsetp("lt", y, 0.5)
    q = b.isetp("ge", k, 2)
    r = b.pnot(b.pand(p, b.por(p, q)))
    z = b.sel(r, y, 2.0)
    z = b.fadd(z, b.i2f(b.f2i(z)))
    bits = b.bitcast(z, I32)
    back = b.bitcast(bits, F32)
    s = b.shfl_xor(back, 16)
    s = b.shfl_idx(s, 0)
    pa = b.vote_any(r)
    pb = b.vote_all(pa)
    m = b.mov(s, F32)
    with b.if_(pb):
        b.sts(sf, lane, m)
    with b.else_():
        b.sts(sf, lane, m, offset=32)
    b.bar()
    t4 = b.lds(sf, lane, width=1)
    b.stg(gf, tid, t4)
    b.stg(gf, tid, (t4, t4), offset=64)
    b.fence()
    b.nanosleep(100)
    old = b.atom_add(gi, 0, 1)
    with b.loop("t", 0, 3, kind="time"):
        st = b.sreg("step")
        b.stg(gi, st, old, offset=128)
        with b.while_(spin_limit=100, label="poll") as w:
            g = b.ldg_volatile(gi, 0)
            w.cond = b.isetp("lt", g, 0, dst=b.reg(PRED, "wait"))
    return verify(b.build())


def test_all_ops_kernel_uses_every_op():
    from kernels_ir.ir import instructions

    used = {i.op for i in instructions(_all_ops_kernel())}
    assert used == set(Op)


def test_float_literals_are_exact():
    assert _f32_literal(1.5) == "1.5f"
    assert _f32_literal(-0.0) == "__int_as_float(0x80000000)"
    assert _f32_literal(float("inf")) == "__int_as_float(0x7f800000)"
    assert _f32_literal(0.1) == "0.10000000149011612f"


def _golden_kernels():
    from gpusim.specs import load_spec
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    spec = load_spec("h100")
    layer = make_layer(64, 2, 0.25, 2, 3)
    return {
        "all_ops": _all_ops_kernel(),
        "mb_flag_round_trip": mb.flag_round_trip(rounds=3).kernel,
        "csr_b2": build_csr_baseline(layer, threads_per_cta=64).kernel,
        "sparse_lamport_b2": build_sparse_rnn(layer, spec, sync="lamport", wide_loads=True,
                                              threads_per_cta=64, n_ctas=2).kernel,
        "sparse_barrier_scalar_b2": build_sparse_rnn(layer, spec, sync="barrier",
                                                     wide_loads=False, threads_per_cta=64,
                                                     n_ctas=2).kernel,
        "sparse_lamport_b2_fp16": build_sparse_rnn(layer, spec, sync="lamport", wide_loads=True,
                                                   threads_per_cta=64, n_ctas=2,
                                                   dtype="fp16").kernel,
    }


@pytest.mark.parametrize("name", ["all_ops", "mb_flag_round_trip", "csr_b2", "sparse_lamport_b2",
                                  "sparse_barrier_scalar_b2", "sparse_lamport_b2_fp16"])
def test_golden(name):
    code = generate(_golden_kernels()[name]).code
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(code)
    assert path.exists(), f"golden file {path} missing; run with UPDATE_GOLDEN=1"
    assert code == path.read_text(), f"generated CUDA for {name} changed (UPDATE_GOLDEN=1)"


def test_structure_of_generated_code():
    src = generate(_all_ops_kernel())
    code = src.code
    assert 'extern "C" __global__ void __launch_bounds__(64, 1)' in code
    assert src.params == ("gf", "gi")
    assert "int* g___err" in code and ERR_WORDS == 8
    assert "ld.relaxed.gpu.global.v2.f32" in code       # polls: GPU scope (cuda_backend s3.3)
    assert "ld.volatile" not in code
    assert "#pragma unroll 1" in code                    # the time loop stays a loop
    assert "__fmaf_rn(" in code and "__fadd_rn(" in code  # no contraction of FMUL + FADD
    assert src.spin_labels == ("poll",)
    assert src.smem_bytes == 512


def test_poll_mode_volatile_sys_and_kernel_meta():
    k = _all_ops_kernel()
    code = generate(k, poll="volatile_sys").code
    assert "ld.volatile.global.v2.f32" in code and "ld.relaxed" not in code
    sys_k = mb.build("store_visibility_sys", 2).kernel   # meta poll = volatile_sys
    assert "ld.volatile.global.b32" in generate(sys_k).code
    assert "ld.relaxed" not in generate(sys_k).code
    assert "ld.relaxed.gpu.global.b32" in generate(sys_k, poll="relaxed_gpu").code
    with pytest.raises(InputError, match="poll='acquire' is unknown"):
        generate(k, poll="acquire")


def test_register_arrays_become_scalars():
    b = Builder("arr", grid=1, block=32)
    g = b.global_buffer("g", F32, 64, role="out")
    w = b.reg(F32, "w", 3)
    for i in range(3):
        b.mov(float(i + 1), dst=w[i])
    b.stg(g, 0, (w[0], w[1]))
    code = generate(verify(b.build())).code
    assert "float r_w_0, r_w_1, r_w_2;" in code
    assert "[" not in code.split("r_w_0")[1].split(";")[0]


# --- nvcc compile checks -----------------------------------------------------------------------

_PTXAS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


@pytest.fixture(scope="session")
def cubin_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cubins")


def compile_cubin(code: str, arch: str, out_dir: Path) -> tuple[Path, dict]:
    key = hashlib.sha256((arch + code).encode()).hexdigest()[:16]
    cu, cubin = out_dir / f"{key}.cu", out_dir / f"{key}.cubin"
    log = out_dir / f"{key}.log"
    if not cubin.exists():
        cu.write_text(code)
        p = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "--ptxas-options=-v", str(cu),
                            "-o", str(cubin)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        log.write_text(p.stderr)
    text = log.read_text()
    m, r = _PTXAS.search(text), _REGS.search(text)
    assert m and r, text
    return cubin, {"stack": int(m.group(1)), "spill_st": int(m.group(2)),
                   "spill_ld": int(m.group(3)), "regs": int(r.group(1))}


def _representative():
    """Representative layers (kept few: each compile takes ~0.3 s per arch)."""
    from gpusim.specs import load_spec
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    spec = load_spec("h100")
    return {
        "sparse-h4096-b4-lamport-wide": build_sparse_rnn(
            make_layer(4096, 4, 0.02, 8, 0), spec, sync="lamport", wide_loads=True).kernel,
        "sparse-h2048-b8-barrier-scalar": build_sparse_rnn(
            make_layer(2048, 8, 0.2, 8, 0), spec, sync="barrier", wide_loads=False).kernel,
        "sparse-h8192-b1-lamport-greedy": build_sparse_rnn(
            make_layer(8192, 1, 0.01, 8, 0), spec, sync="lamport", layout="greedy").kernel,
        "dense-h2048-b1": build_dense_rnn(make_layer(2048, 1, 1.0, 8, 0), spec).kernel,
        "csr-h4096-b8": build_csr_baseline(make_layer(4096, 8, 0.02, 2, 0)).kernel,
        "mb_grid_barrier": mb.grid_barrier(rounds=4).kernel,
    }


def _supported(arch: str) -> str:
    """``arch``, or the oldest target this nvcc still builds (CUDA 13 dropped sm_70: Volta is
    then checked on sm_75, which has the same 64K-register file and 255-register limit)."""
    p = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True)
    archs = sorted(int(a.split("_")[1]) for a in re.findall(r"compute_\d+", p.stdout))
    if not archs or int(arch.split("_")[1]) in archs:
        return arch
    return f"sm_{min(a for a in archs if a >= int(arch.split('_')[1]))}"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_70", "sm_90"])
def test_representative_kernels_compile_without_local_memory(arch, cubin_dir):
    arch = _supported(arch)
    for name, kernel in _representative().items():
        cubin, info = compile_cubin(generate(kernel).code, arch, cubin_dir)
        assert info["regs"] <= 255, (name, info)
        assert info["spill_st"] == 0 and info["spill_ld"] == 0, (name, info)
        assert info["stack"] == 0, (name, info)   # no local memory: no LDL/STL anywhere
        if CUOBJDUMP:
            ops = {i.opcode.split(".")[0] for i in sass.parse(sass.disassemble(cubin))}
            assert not ops & {"LDL", "STL"}, name


@needs_nvcc
def test_microbenchmarks_compile(cubin_dir):
    for name in mb.MICROBENCHES:
        size = 32 if name in ("poll_storm_rot", "poll_storm_plain") else 2  # 32 regions
        compile_cubin(generate(mb.build(name, size).kernel).code, "sm_90", cubin_dir)
