"""Which SASS memory instructions the generated code becomes (evidence for the polling model).

    PYTHONPATH=. python3 measurements/sass_memops.py > sass_memops.txt  # nvcc + cuobjdump

Compiles (nvcc -arch=sm_90 -cubin, like NVRTC's code) the microbenchmarks that poll and one
Lamport / one barrier persistent kernel, and prints each kernel's global-memory and fence
instructions with their counts (``LDG.E.STRONG.SYS`` = a volatile load, ``LDG.E.STRONG.GPU`` =
ld.relaxed.gpu, ``MEMBAR``/``FENCE`` = __threadfence).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from gpusim.measurements import build_case
from gpusim.specs import load_spec
from kernels_ir import sass
from kernels_ir.codegen_cuda import generate
from kernels_ir.kernels import microbench as mb


def kernels():
    for name in ("store_visibility", "flag_round_trip", "poll_storm", "grid_barrier",
                 "store_visibility_sys", "poll_storm_sys", "poll_storm_plain"):
        yield name, mb.build(name, 32 if name.startswith("poll_storm") else 4).kernel
    spec = load_spec("h100")
    for sync in ("lamport", "barrier"):
        case = {"kind": "sparse_persistent", "hidden": 1024, "batch": 4, "density": 0.1,
                "seed": 1005, "sync": sync, "wide_loads": True, "layout": "naive"}
        yield f"sparse_h1024_b4_{sync}_wide", build_case(case, 4, spec).kernel


def main() -> int:
    pat = re.compile(r"LDG|STG|ATOM|ATOMG|RED|MEMBAR|FENCE|CCTL|LD|ST|ERRBAR")  # opcode prefix
    with tempfile.TemporaryDirectory() as d:
        for name, k in kernels():
            cu, cub = Path(d) / f"{name}.cu", Path(d) / f"{name}.cubin"
            cu.write_text(generate(k).code)
            subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cub), str(cu)], check=True)
            ops = collections.Counter(i.opcode for i in sass.parse(sass.disassemble(cub))
                                      if pat.match(i.opcode))
            print(f"== {name}")
            for op, n in sorted(ops.items()):
                print(f"   {n:5d} {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
