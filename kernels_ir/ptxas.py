"""Registers as ptxas sees them: compile a kernel's generated CUDA and read ptxas' report.

The register count the builder declares (``sparse_rnn.registers_needed``) is a count of the IR's
registers; the GPU runs what ptxas allocates, which adds 64-bit address arithmetic, may keep more
loads in flight than the IR prefetches, and spills to local memory when 255 are not enough. This
module compiles :func:`kernels_ir.codegen_cuda.generate` output for one architecture and returns
ptxas' numbers (``--ptxas-options=-v``): registers, spill stores / loads and stack frame bytes.

Two compilers, tried in this order for an architecture (``compiler=`` picks one):

``nvcc``
    ``nvcc -arch=sm_XX -cubin --ptxas-options=-v`` when an ``nvcc`` on PATH lists ``sm_XX``
    (``nvcc --list-gpu-code``). CUDA 13's nvcc does sm_75 and newer (the H100's sm_90).
``nvrtc``
    NVRTC (``libnvrtc.so``) through ``ctypes``, ``-arch=sm_XX --ptxas-options=-v``: CUDA C++ to
    a cubin in one call, front end, NVVM and ptxas of one CUDA release, the path the CuPy backend
    takes on a GPU. CUDA 13 dropped sm_70 (the V100), so the V100 is compiled by CUDA 12's
    NVRTC, which the ``nvidia-cuda-nvrtc-cu12`` wheel installs (a ``test`` extra). Retargeting
    CUDA 13's compute_75 PTX to sm_70 with a CUDA 12 ptxas would also run, but it feeds ptxas
    PTX of a newer ISA edited by hand; NVRTC 12 is the whole CUDA 12 tool chain, as a V100 user
    would have it.

:func:`available` says which compiler an architecture would use (``None``: none here);
:func:`compile_kernel` raises :class:`PtxasUnavailable` (one line, naming what to install) when
there is none. Results are cached per process by (source, architecture, compiler).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BackendUnavailable, InputError

__all__ = ["PtxasReport", "PtxasUnavailable", "PtxasError", "COMPILERS", "available",
           "compiler_version", "compile_source", "compile_kernel", "parse_report"]

COMPILERS = ("nvcc", "nvrtc")
_ARCH = re.compile(r"^sm_(\d{2,3})a?$")
_REGS = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
INSTALL_HINT = ("install the test extras (pip install -e '.[test]' brings nvidia-cuda-nvrtc-cu12: "
                "CUDA 12's NVRTC, sm_50..sm_90) or a CUDA toolkit with nvcc on PATH")


class PtxasUnavailable(BackendUnavailable):
    """No compiler here can compile for the requested architecture."""


class PtxasError(InputError):
    """The compiler rejected the source, or its report could not be read."""


@dataclass(frozen=True)
class PtxasReport:
    """ptxas' verbose report for one kernel (the only entry function of the source)."""

    arch: str
    registers: int        # per thread
    spill_stores: int     # bytes per thread
    spill_loads: int      # bytes per thread
    stack_frame: int      # bytes per thread
    compiler: str         # e.g. "nvcc 13.0" or "nvrtc 12.9"

    @property
    def spills(self) -> bool:
        """Local memory of any kind: spill stores or loads, or a stack frame."""
        return bool(self.spill_stores or self.spill_loads or self.stack_frame)

    def as_dict(self) -> dict:
        return {**asdict(self), "spills": self.spills}


def _check_arch(arch: str) -> int:
    m = _ARCH.match(str(arch))
    if not m:
        raise InputError(f"arch={arch!r} is not a GPU architecture; accepted: sm_XX (e.g. sm_70, "
                         f"sm_90)")
    return int(m.group(1))


def parse_report(log: str, arch: str, compiler: str) -> PtxasReport:
    """The numbers of a ``ptxas -v`` log (one entry function)."""
    regs, frame = _REGS.findall(log), _FRAME.findall(log)
    if len(regs) != 1 or len(frame) != 1:
        raise PtxasError(f"{compiler} for {arch}: expected one ptxas report of one entry "
                         f"function, found {len(regs)} register and {len(frame)} frame lines:\n"
                         f"{log.strip()[-800:]}")
    stack, stores, loads = (int(x) for x in frame[0])
    return PtxasReport(arch, int(regs[0]), stores, loads, stack, compiler)


# --- nvcc -----------------------------------------------------------------------------------

@functools.cache
def _nvcc() -> tuple[str, str, frozenset] | None:
    """(path, version, architectures) of the nvcc on PATH, or None."""
    exe = shutil.which("nvcc")
    if exe is None:
        return None
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        codes = subprocess.run([exe, "--list-gpu-code"], capture_output=True, text=True,
                               timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", ver.stdout)
    archs = frozenset(re.findall(r"\bsm_\d+a?\b", codes.stdout))
    return exe, m.group(1) if m else "?", archs


def _compile_nvcc(code: str, arch: str) -> str:
    exe, ver, _ = _nvcc()
    with tempfile.TemporaryDirectory(prefix="gpusim_ptxas_") as tmp:
        cu = os.path.join(tmp, "k.cu")
        Path(cu).write_text(code)
        p = subprocess.run([exe, f"-arch={arch}", "-cubin", "-std=c++17", "--ptxas-options=-v",
                            "-o", os.path.join(tmp, "k.cubin"), cu],
                           capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise PtxasError(f"nvcc {ver} -arch={arch} failed (exit {p.returncode}):\n"
                         f"{p.stderr.strip()[-1500:]}")
    return p.stdout + p.stderr


# --- NVRTC ----------------------------------------------------------------------------------

def _nvrtc_candidates() -> list[str]:
    """libnvrtc shared libraries: NVIDIA's wheels (newest first), then the system's."""
    out = []
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
        roots = list(getattr(nvidia, "__path__", []))
    except ImportError:
        roots = []
    for root in roots:
        for pat in ("cuda_nvrtc/lib/libnvrtc.so.*", "cu*/lib/libnvrtc.so.*"):
            out += sorted((str(p) for p in Path(root).glob(pat)
                           if re.fullmatch(r"libnvrtc\.so\.\d+", p.name)), reverse=True)
    sys_lib = ctypes.util.find_library("nvrtc")
    if sys_lib:
        out.append(sys_lib)
    return out


@functools.cache
def _nvrtc() -> tuple[ctypes.CDLL, str, frozenset] | None:
    """(library, version, architectures) of the first loadable NVRTC, or None."""
    for path in _nvrtc_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        maj, mi = ctypes.c_int(), ctypes.c_int()
        if lib.nvrtcVersion(ctypes.byref(maj), ctypes.byref(mi)) != 0:
            continue
        n = ctypes.c_int()
        lib.nvrtcGetNumSupportedArchs(ctypes.byref(n))
        arr = (ctypes.c_int * n.value)()
        lib.nvrtcGetSupportedArchs(arr)
        return lib, f"{maj.value}.{mi.value}", frozenset(f"sm_{a}" for a in arr)
    return None


def _compile_nvrtc(code: str, arch: str) -> str:
    lib, ver, _ = _nvrtc()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"kernel.cu", 0, None, None)
    if rc != 0:
        raise PtxasError(f"nvrtc {ver}: nvrtcCreateProgram failed (status {rc})")
    try:
        opts = [b"--std=c++17", f"-arch={arch}".encode(), b"--ptxas-options=-v"]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        raise PtxasError(f"nvrtc {ver} -arch={arch} failed (status {rc}):\n{log.strip()[-1500:]}")
    return log


# --- the interface --------------------------------------------------------------------------

def _supports(compiler: str, arch: str) -> str | None:
    tool = _nvcc() if compiler == "nvcc" else _nvrtc()
    if tool is None or arch not in tool[2]:
        return None
    return f"{compiler} {tool[1]}"


def available(arch: str, compiler: str | None = None) -> str | None:
    """The compiler ``arch`` would be compiled with here (e.g. ``"nvrtc 12.9"``), or None."""
    _check_arch(arch)
    if compiler is not None and compiler not in COMPILERS:
        raise InputError(f"compiler={compiler!r} is not supported; accepted: "
                         f"{', '.join(COMPILERS)}")
    for c in (compiler,) if compiler else COMPILERS:
        found = _supports(c, arch)
        if found:
            return found
    return None


def compiler_version(arch: str, compiler: str | None = None) -> str:
    """Like :func:`available`, but raises :class:`PtxasUnavailable` when there is none."""
    found = available(arch, compiler)
    if found is None:
        what = compiler or " or ".join(COMPILERS)
        raise PtxasUnavailable(f"no {what} here compiles for {arch}; {INSTALL_HINT}")
    return found


_CACHE: dict[tuple[str, str, str], PtxasReport] = {}


def compile_source(code: str, arch: str, *, compiler: str | None = None) -> PtxasReport:
    """ptxas' report for CUDA source ``code`` (one ``__global__`` function) on ``arch``."""
    _check_arch(arch)
    used = compiler_version(arch, compiler)
    key = (hashlib.sha256(code.encode()).hexdigest(), arch, used)
    if key not in _CACHE:
        name = used.split()[0]
        log = _compile_nvcc(code, arch) if name == "nvcc" else _compile_nvrtc(code, arch)
        _CACHE[key] = parse_report(log, arch, used)
    return _CACHE[key]


def compile_kernel(kernel, arch: str, *, compiler: str | None = None) -> PtxasReport:
    """ptxas' report for an IR kernel (its :func:`kernels_ir.codegen_cuda.generate` source)."""
    from .codegen_cuda import generate

    return compile_source(generate(kernel).code, arch, compiler=compiler)
