"""Register estimate and co-residency: how many CTAs of a kernel one SM (and the GPU) holds.

:func:`register_estimate` is a liveness analysis over the structured IR: the largest number of
32-bit register elements live at once in one thread, plus :data:`REG_OVERHEAD` registers that a
compiler needs beyond the IR's values (addresses formed from base + index, the stack pointer,
loop-invariant constants). Predicates are not counted: they live in the separate predicate file
(7 per thread on Volta). The estimate ignores the compiler's rematerialisation and scheduling; it
is meant for capacity checks (weights held in registers dominate the persistent kernels).

:func:`residency` applies the limits of the spec (registers, threads, shared memory, CTAs per SM)
as the CUDA occupancy calculator does and names the binding one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels_ir.errors import CapacityError
from kernels_ir.ir import (
    GLOBAL_MEM,
    PRED,
    If,
    Instr,
    Kernel,
    Loop,
    MemRef,
    RegRef,
    While,
    walk,
)

__all__ = ["register_estimate", "Residency", "residency", "REG_OVERHEAD", "has_global_spin",
           "check_launch", "launch_residency"]

# Registers beyond the IR's live values (address arithmetic, stack pointer, constants that the
# IR keeps as immediates but SASS may need in registers). An estimate, stated as such.
REG_OVERHEAD = 8


def _uses(instr: Instr) -> set:
    out = set()
    for s in instr.srcs:
        if isinstance(s, MemRef):
            s = s.index
        if isinstance(s, RegRef) and s.reg.dtype is not PRED:
            out.add((s.reg.name, s.index))
    return out


def _defs(instr: Instr) -> set:
    return {(d.reg.name, d.index) for d in instr.dsts if d.reg.dtype is not PRED}


def _ref(r: RegRef) -> set:
    """The register element of ``r`` as a set (empty for a predicate: not counted)."""
    return set() if r.reg.dtype is PRED else {(r.reg.name, r.index)}


def _around_back_edge(body: tuple, out: set) -> tuple[set, int]:
    """Liveness of a loop body: values live at its end are also live around the back edge, so
    iterate to a fixed point (three rounds reach it for structured bodies)."""
    for _ in range(3):
        live_in, peak = _body(body, out)
        new_out = out | live_in
        if new_out == out:
            break
        out = new_out
    return live_in, peak


def _body(body: tuple, live_out: set) -> tuple[set, int]:
    """Backward liveness over ``body``: (live-in set, max live count inside).

    Sets hold the (register, index) elements that are not predicates, so a count is ``len``.
    """
    live = set(live_out)
    peak = len(live)
    for stmt in reversed(body):
        if isinstance(stmt, Instr):
            d = _defs(stmt)
            peak = max(peak, len(live | d))
            live = (live - d) | _uses(stmt)
            peak = max(peak, len(live))
        elif isinstance(stmt, Loop):
            var = (stmt.var.name, 0)
            live_in, p = _around_back_edge(stmt.body, live | {var})
            peak = max(peak, p)
            live = (live | live_in) - {var}
        elif isinstance(stmt, While):
            live_in, p = _around_back_edge(stmt.body, live | _ref(stmt.cond))
            peak = max(peak, p)
            live = live_in | live
        elif isinstance(stmt, If):
            a, pa = _body(stmt.then, live)
            b, pb = _body(stmt.orelse, live)
            peak = max(peak, pa, pb)
            live = a | b | _ref(stmt.cond)
            peak = max(peak, len(live))
    return live, peak


def register_estimate(kernel: Kernel) -> int:
    """Estimated 32-bit registers per thread: peak live register elements + REG_OVERHEAD."""
    _, peak = _body(kernel.body, set())
    return peak + REG_OVERHEAD


def has_global_spin(kernel: Kernel) -> bool:
    """True if some While loop reads global memory (a spin wait on other CTAs)."""
    for s in walk(kernel.body):
        if isinstance(s, While):
            for t in walk(s.body):
                if isinstance(t, Instr) and t.op in GLOBAL_MEM:
                    return True
    return False


@dataclass(frozen=True, slots=True)
class Residency:
    regs_per_thread: int
    ctas_per_sm: int       # co-resident CTAs of this kernel on one SM
    resident_ctas: int     # ctas_per_sm * sm_count, capped at the grid
    limit: str             # the binding limit, in words

    def describe(self, sm_count: int) -> str:
        return f"{self.ctas_per_sm} CTA/SM x {sm_count} SMs ({self.limit})"


def residency(kernel: Kernel, spec, regs: int | None = None) -> Residency:
    """CTAs of ``kernel`` that fit on one SM and on the GPU, from the spec's limits; ``regs``:
    registers per thread (default: :func:`register_estimate`).

    Raises :class:`CapacityError` when not even one CTA fits (naming the limit).
    """
    regs = register_estimate(kernel) if regs is None else int(regs)
    warps = kernel.warps_per_cta
    if regs > spec.max_regs_per_thread:
        raise CapacityError(f"kernel {kernel.name} needs about {regs} registers/thread "
                            f"(liveness estimate or ptxas); max_regs_per_thread = "
                            f"{spec.max_regs_per_thread} on {spec.name}")
    if kernel.block > spec.max_threads_per_cta:
        raise CapacityError(f"kernel {kernel.name}: block={kernel.block} threads exceeds "
                            f"max_threads_per_cta = {spec.max_threads_per_cta} on {spec.name}")
    unit = spec.reg_alloc_unit_per_warp
    regs_per_warp = -(-regs * 32 // unit) * unit
    limits = {
        "registers": spec.regs_per_sm // (regs_per_warp * warps),
        "threads": spec.max_threads_per_sm // (warps * 32),
        "CTAs per SM": spec.max_ctas_per_sm,
    }
    if kernel.shared_bytes:
        if kernel.shared_bytes > spec.smem_bytes_per_cta:
            raise CapacityError(f"kernel {kernel.name} uses {kernel.shared_bytes} bytes of "
                                f"shared memory; smem_bytes_per_cta = {spec.smem_bytes_per_cta}")
        limits["shared memory"] = spec.smem_bytes_per_sm // kernel.shared_bytes
    name = min(limits, key=lambda k: (limits[k], k))
    per_sm = limits[name]
    if per_sm < 1:
        raise CapacityError(f"kernel {kernel.name}: one CTA does not fit on an SM ({name}: "
                            f"{regs} registers/thread x {kernel.block} threads, "
                            f"{kernel.shared_bytes} bytes shared)")
    detail = {"registers": f"{regs} registers/thread x {kernel.block} threads",
              "threads": f"{kernel.block} threads/CTA", "CTAs per SM": "max_ctas_per_sm",
              "shared memory": f"{kernel.shared_bytes} bytes shared/CTA"}[name]
    return Residency(regs, per_sm, min(kernel.grid, per_sm * spec.sm_count),
                     f"limited by {name}: {detail}")


def check_launch(kernel: Kernel, spec) -> Residency:
    """Refuse a launch that cannot run: a grid larger than co-resident under a spin wait."""
    r = residency(kernel, spec)
    if kernel.grid > r.resident_ctas and has_global_spin(kernel):
        raise CapacityError(f"kernel {kernel.name}: grid={kernel.grid} CTAs cannot be co-resident "
                            f"({r.describe(spec.sm_count)} = {r.resident_ctas}) and the kernel "
                            f"spins on global memory, so it would deadlock; use grid <= "
                            f"{r.resident_ctas}")
    return r


def launch_residency(kernel: Kernel, spec) -> Residency:
    """The co-resident CTAs a launch of ``kernel`` gets, which decides how many waves a grid
    larger than that runs in (:func:`gpusim.engine.simulate`).

    For a grid of more CTAs than SMs of a kernel that does not spin on global memory, ptxas'
    register count where a compiler for ``spec.arch`` is here (:mod:`kernels_ir.ptxas`: nvcc, or
    NVRTC): ptxas unrolls a loop of few constant trips, so the CSR kernel's registers grow with
    its chunk loop's trips (sm_90: 23 at batch 1 with one round, 48 with four, 72 with eight;
    the campaign's recorded ``num_regs`` are the same), which the IR's liveness estimate (22)
    does not see. Otherwise (one CTA an SM at most, a spinning kernel, or no compiler) the
    estimate."""
    r = residency(kernel, spec)
    if kernel.grid <= spec.sm_count or has_global_spin(kernel):
        return r
    from kernels_ir import ptxas

    arch = getattr(spec, "arch", "")
    try:
        if not arch or ptxas.available(arch) is None:
            return r
        regs = ptxas.compile_kernel(kernel, arch).registers
    except (ptxas.PtxasUnavailable, ptxas.PtxasError, OSError):
        return r
    return residency(kernel, spec, regs)
