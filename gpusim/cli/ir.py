"""``gpusim ir``: print the IR of the persistent RNN kernel for a layer (``format_kernel``)."""

from __future__ import annotations

import argparse

from .common import (
    add_cell_arguments,
    add_kernel_arguments,
    add_layer_arguments,
    add_output_arguments,
    emit_json,
)

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p)
    add_kernel_arguments(p)
    p.add_argument("--dense", action="store_true", help="the dense persistent kernel")
    add_cell_arguments(p)
    p.add_argument("--registers", action="store_true",
                   help="also print the register estimate and co-residency")
    add_output_arguments(p)


def main(args) -> int:
    from kernels_ir.printer import format_kernel

    from .run import build_program

    spec, prog = build_program(args)
    r = None
    if args.registers:
        from gpusim.engine import residency

        r = residency(prog.kernel, spec)
    if args.json:
        out = {"gpu": spec.name, "kernel": prog.kernel.name, "ctas": prog.kernel.grid,
               "threads_per_cta": prog.kernel.block, "ir": format_kernel(prog.kernel)}
        if r is not None:
            out["registers_per_thread"] = r.regs_per_thread
            out["residency"] = r.describe(spec.sm_count)
        emit_json(out)
        return 0
    print(format_kernel(prog.kernel), end="")
    if r is not None:
        print(f"// registers/thread (estimate): {r.regs_per_thread}; "
              f"{r.describe(spec.sm_count)}")
    return 0
