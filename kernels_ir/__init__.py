"""A small SIMT kernel IR for persistent RNN kernels, its builder, verifier and printer.

Public surface: the IR records (:mod:`kernels_ir.ir`), :class:`Builder`, :func:`verify`,
:func:`format_kernel`, and the error types. Mapping, layouts, kernels and code generation live in
their own modules (``kernels_ir.mapping``, ``kernels_ir.layouts``, ``kernels_ir.kernels``,
``kernels_ir.codegen_cuda``).
"""

from .builder import Builder
from .errors import CapacityError, DeadlockError, InputError, IRError, SpecError, VerifyError
from .ir import (
                 F32,
                 I32,
                 PRED,
                 Buffer,
                 DType,
                 If,
                 Imm,
                 Instr,
                 Kernel,
                 Loop,
                 MemRef,
                 Op,
                 Reg,
                 RegRef,
                 While,
                 instructions,
                 op_class,
                 walk,
)
from .printer import format_instr, format_kernel
from .verify import verify

__all__ = [
    "Builder", "verify", "format_kernel", "format_instr", "F32", "I32", "PRED", "Buffer", "DType",
    "If", "Imm", "Instr", "Kernel", "Loop", "MemRef", "Op", "Reg", "RegRef", "While",
    "instructions", "op_class", "walk", "InputError", "IRError", "VerifyError", "CapacityError",
    "SpecError", "DeadlockError",
]
