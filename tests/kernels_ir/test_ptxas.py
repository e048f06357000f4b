"""kernels_ir.ptxas: ptxas' report of a generated kernel, and a clear error without a compiler.

The compiling tests skip when no compiler here builds the architecture (sm_70 needs CUDA 12:
the ``nvidia-cuda-nvrtc-cu12`` wheel of the test extras; sm_90 nvcc or that wheel).
"""

from __future__ import annotations

import pytest

from gpusim.specs import load_spec
from kernels_ir import ptxas
from kernels_ir.codegen_cuda import generate
from kernels_ir.errors import CapacityError, InputError
from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'dense_rnn_lamport_wide' for 'sm_90'
ptxas info    : Function properties for dense_rnn_lamport_wide
    344 bytes stack frame, 356 bytes spill stores, 364 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 344 bytes cumulative stack size
"""


def needs(arch: str):
    found = ptxas.available(arch)
    return pytest.mark.skipif(found is None, reason=f"no compiler for {arch} here: "
                              f"{ptxas.INSTALL_HINT}")


def test_parse_report_reads_registers_and_local_memory():
    r = ptxas.parse_report(LOG, "sm_90", "nvcc 13.0")
    assert (r.registers, r.spill_stores, r.spill_loads, r.stack_frame) == (255, 356, 364, 344)
    assert r.spills and r.as_dict()["spills"] is True
    clean = ptxas.parse_report(LOG.replace("344 bytes stack frame, 356", "0 bytes stack frame, 0")
                               .replace("364 bytes spill loads", "0 bytes spill loads"),
                               "sm_90", "nvcc 13.0")
    assert not clean.spills


def test_parse_report_refuses_a_log_without_one_report():
    with pytest.raises(ptxas.PtxasError, match="expected one ptxas report"):
        ptxas.parse_report("nvcc: warning: nothing here", "sm_70", "nvrtc 12.9")


@pytest.mark.parametrize("arch", ["70", "sm_7", "compute_70", "sm70"])
def test_bad_arch_is_refused(arch):
    with pytest.raises(InputError, match=f"arch={arch!r} is not a GPU architecture"):
        ptxas.available(arch)


def test_bad_compiler_is_refused():
    with pytest.raises(InputError, match="compiler='clang' is not supported; accepted: nvcc"):
        ptxas.available("sm_90", compiler="clang")


def test_no_compiler_gives_one_clear_error(monkeypatch):
    monkeypatch.setattr(ptxas, "_nvcc", lambda: None)
    monkeypatch.setattr(ptxas, "_nvrtc", lambda: None)
    assert ptxas.available("sm_70") is None
    with pytest.raises(ptxas.PtxasUnavailable, match=r"no nvcc or nvrtc here compiles for "
                                                     r"sm_70; install the test extras"):
        ptxas.compile_source("extern \"C\" __global__ void k() {}", "sm_70")


def test_an_architecture_the_compiler_lacks_is_unavailable(monkeypatch):
    # CUDA 13's nvcc lists sm_75 and newer: sm_70 must then come from another compiler
    monkeypatch.setattr(ptxas, "_nvcc", lambda: ("nvcc", "13.0", frozenset({"sm_90"})))
    monkeypatch.setattr(ptxas, "_nvrtc", lambda: None)
    assert ptxas.available("sm_90") == "nvcc 13.0"
    assert ptxas.available("sm_70") is None


def _small_sparse():
    v100 = load_spec("v100")
    return build_sparse_rnn(make_layer(256, 4, 0.1, 2, 0), v100, sync="lamport").kernel


@needs("sm_70")
def test_sm70_compiles_with_cuda12():
    r = ptxas.compile_kernel(_small_sparse(), "sm_70")
    assert r.arch == "sm_70" and r.compiler.split()[0] in ptxas.COMPILERS
    assert 16 <= r.registers <= 255 and not r.spills
    # cached: the same source is not compiled twice
    assert ptxas.compile_kernel(_small_sparse(), "sm_70") is r


@needs("sm_90")
def test_sm90_compiles():
    r = ptxas.compile_kernel(_small_sparse(), "sm_90")
    assert 16 <= r.registers <= 255 and not r.spills


@needs("sm_90")
def test_compile_error_is_reported():
    with pytest.raises(ptxas.PtxasError, match="failed"):
        ptxas.compile_source('extern "C" __global__ void k() { undefined_thing(); }', "sm_90")


@needs("sm_90")
def test_dense_h1536_b4_on_the_h100_is_refused_or_does_not_spill():
    """Found on hardware: 255 registers and 356 bytes of spill stores while the builder counted
    179 (ptxas loads the dense tile's h words once for both row-slots and keeps them)."""
    h100 = load_spec("h100")
    try:
        prog = build_dense_rnn(make_layer(1536, 4, 1.0, 2, 0), h100)
    except CapacityError as exc:
        assert "ptxas" in str(exc) and "spills" in str(exc)
        return
    assert not ptxas.compile_kernel(prog.kernel, "sm_90").spills


def _gated(cell: str, spec_name: str, dense: bool):
    """A gated kernel near the builder's register limit on that GPU (the LSTM keeps its cell
    state in registers: the epilogue must not push ptxas into spilling)."""
    spec = load_spec(spec_name)
    if dense:
        return build_dense_rnn(make_layer(512, 4, 1.0, 2, 0, cell=cell), spec).kernel
    hidden = {"v100": 1200, "h100": 2000}[spec_name]
    return build_sparse_rnn(make_layer(hidden, 4, 0.1, 2, 0, cell=cell), spec,
                            sync="lamport").kernel


@pytest.mark.parametrize("arch,spec_name", [
    pytest.param("sm_70", "v100", marks=needs("sm_70")),
    pytest.param("sm_90", "h100", marks=needs("sm_90")),
])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("dense", [False, True])
def test_gated_cells_compile_without_spills(arch, spec_name, cell, dense):
    k = _gated(cell, spec_name, dense)
    assert k.name.startswith(f"{'dense' if dense else 'sparse'}_{cell}_")
    code = generate(k).code                        # the epilogue: sigmoid gates and tanh
    assert "expf(" in code and "tanhf(" in code
    r = ptxas.compile_kernel(k, arch)
    assert r.registers <= 255 and not r.spills and r.stack_frame == 0, r.as_dict()


def _heads(spec_name: str, cell: str, dense: bool):
    """A multi-head layer whose heads fit whole in the CTAs: the CTA-local exchange (sparse:
    two heads of 8 units per CTA; dense tiles keep all N columns: one head of 4 units)."""
    spec = load_spec(spec_name)
    per_cta, size = (1, 4) if dense else (2, 8)
    layer = make_layer(spec.sm_count * per_cta * size, 2 if dense else 4,
                       1.0 if dense else 0.3, 2, 0, cell=cell, heads=spec.sm_count * per_cta)
    build = build_dense_rnn if dense else build_sparse_rnn
    return build(layer, spec).kernel


@pytest.mark.parametrize("arch,spec_name", [
    pytest.param("sm_70", "v100", marks=needs("sm_70")),
    pytest.param("sm_90", "h100", marks=needs("sm_90")),
])
@pytest.mark.parametrize("cell,dense", [("rnn", False), ("rnn", True), ("lstm", False)])
def test_cta_local_heads_compile_without_spills(arch, spec_name, cell, dense):
    k = _heads(spec_name, cell, dense)
    assert "_local_" in k.name and dict(k.meta)["exchange"] == "cta"
    code = generate(k).code
    assert "__syncthreads()" in code and "atomicAdd" not in code
    r = ptxas.compile_kernel(k, arch)
    assert r.registers <= 255 and not r.spills and r.stack_frame == 0, r.as_dict()
