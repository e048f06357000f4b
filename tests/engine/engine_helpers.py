"""Small hand-built kernels shared by the engine tests."""

from __future__ import annotations

import numpy as np

from kernels_ir import F32, I32, Builder, verify

VALUE_TOL = 1e-5  # fp32 accumulation over <= a few hundred terms, relative to the step's scale


def check_values(prog, spec):
    """Execute an RNN program functionally and check its values against the float64
    reference (and that h is finite and not all zero); returns the execution result."""
    from gpusim.engine import execute

    res = execute(prog.kernel, prog.inputs, spec=spec)
    err = prog.max_rel_err(res.globals)
    assert err < VALUE_TOL, f"{prog.kernel.name}: max_rel_err={err}"
    H = prog.outputs(res.globals)
    assert np.all(np.isfinite(H)) and not np.all(H[1:] == 0)
    return res


def run_unary(op_name: str, a: np.ndarray, out_dtype=F32, in_dtype=F32, **kw):
    """Apply one Builder method to 64 values (2 warps) and return the 64 results."""
    from gpusim.engine import execute

    b = Builder("unary", grid=1, block=64)
    x = b.global_buffer("x", in_dtype, 64)
    y = b.global_buffer("y", out_dtype, 64, role="out")
    tid = b.sreg("tid")
    v = b.ldg(x, tid)
    r = getattr(b, op_name)(v, **kw)
    b.stg(y, tid, r)
    res = execute(verify(b.build()), {"x": a})
    return res.globals["y"]


def run_binary(op_name: str, a: np.ndarray, c: np.ndarray, dtype=F32, out_dtype=None, **kw):
    from gpusim.engine import execute

    out_dtype = out_dtype or dtype
    b = Builder("binary", grid=1, block=64)
    x = b.global_buffer("x", dtype, 64)
    z = b.global_buffer("z", dtype, 64)
    y = b.global_buffer("y", out_dtype, 64, role="out")
    tid = b.sreg("tid")
    u, v = b.ldg(x, tid), b.ldg(z, tid)
    if kw:
        r = getattr(b, op_name)(kw.pop("cmp"), u, v)
    else:
        r = getattr(b, op_name)(u, v)
    if r.dtype is not out_dtype:  # a predicate: store 1/0
        r = b.sel(r, 1, 0, dst=b.reg(I32))
    b.stg(y, tid, r)
    res = execute(verify(b.build()), {"x": a, "z": c})
    return res.globals["y"]


def poll_kernel(grid: int = 2, spin_limit: int = 1 << 20, label: str = "poll"):
    """Every thread polls flag[cta] until it is nonzero; nobody ever writes it."""
    b = Builder("poll", grid=grid, block=64)
    flag = b.global_buffer("flag", I32, grid, role="inout")
    cta = b.sreg("cta")
    with b.while_(spin_limit=spin_limit, label=label) as w:
        v = b.ldg_volatile(flag, cta)
        w.cond = b.isetp("eq", v, 0)
    return verify(b.build())


def grid_barrier_kernel(grid: int, smem_words: int = 1024):
    """One grid barrier: thread 0 of every CTA arrives on counter, then spins until all did."""
    b = Builder("gridbar", grid=grid, block=64)
    counter = b.global_buffer("counter", I32, 1, role="scratch")
    out = b.global_buffer("out", I32, grid * 64, role="out")
    h_s = b.shared("pad", F32, smem_words)
    tid = b.sreg("tid")
    cta = b.sreg("cta")
    n = b.sreg("nctas")
    b.sts(h_s, tid, 1.0)
    p = b.isetp("eq", tid, 0)
    with b.if_(p):
        b.fence()
        b.atom_add(counter, 0, 1)
        with b.while_(label="grid_barrier") as w:
            c = b.ldg_volatile(counter, 0)
            w.cond = b.isetp("lt", c, n)
    b.bar()
    g = b.imad(cta, 64, tid)
    b.stg(out, g, cta)
    return verify(b.build())
