"""ptxas' registers of the CSR row-per-warp kernel by batch, cell and chunk-loop trips (no GPU).

    PYTHONPATH=. python3 measurements/csr_registers.py [--out models/analytical/csr_registers.json]

The CSR kernel (:mod:`kernels_ir.kernels.csr_baseline`) loops ``chunks`` = ceil(longest row / 128)
times with a constant trip count, and ptxas unrolls a loop of few constant trips: its registers
grow with the trips (sm_90, batch 1: 23 with one round, 48 with four, 72 with eight), which sets
how many CTAs an SM holds and so how many waves a large grid runs in. The simulator asks ptxas
for each kernel it runs (:func:`gpusim.engine.residency.launch_residency`); the analytical model
(:mod:`models.analytical.csr`) reads this table instead, so that a prediction compiles nothing.

Each entry compiles the kernel of a probe layer whose longest row has ``128 c - 64`` nonzeros (``c``
chunks) and every other row one (``models.sparse.rounds_probe_layer``: the registers depend on the
trips, the batch and the cell, not on the matrix): architectures sm_90 (H100 and H200, nvcc or
NVRTC) and sm_70 (V100, CUDA 12's NVRTC), cells rnn / gru / lstm, batches 1, 2, 4, 8, trips 1 to
:data:`MAX_CHUNKS` (hidden 8192 at density 0.5). ``tests/models/test_csr_model.py`` checks entries
against live ptxas where a compiler is present, and the campaign's recorded ``num_regs`` against the
table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels_ir.kernels.csr_baseline import CELLS  # noqa: E402  (rnn, gru, lstm)

ARCHES = ("sm_90", "sm_70")
BATCHES = (1, 2, 4, 8)
MAX_CHUNKS = 32
OUT = "models/analytical/csr_registers.json"


def registers(arch: str, cell: str, batch: int, chunks: int) -> int:
    from kernels_ir import ptxas
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from models.sparse import rounds_probe_layer

    prog = build_csr_baseline(rounds_probe_layer(chunks, batch, cell))
    if prog.chunks != chunks:
        raise AssertionError(f"probe layer runs {prog.chunks} rounds, not {chunks}")
    return ptxas.compile_kernel(prog.kernel, arch).registers


def main(argv: list | None = None) -> int:
    from kernels_ir import ptxas

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    t0 = time.time()
    table, compilers = {}, {}
    for arch in ARCHES:
        compilers[arch] = ptxas.compiler_version(arch)
        table[arch] = {cell: {str(b): [registers(arch, cell, b, c)
                                       for c in range(1, MAX_CHUNKS + 1)]
                              for b in BATCHES} for cell in CELLS}
        print(arch, compilers[arch], json.dumps(table[arch]["rnn"]), flush=True)
    rec = {"format_version": 1,
           "command": "PYTHONPATH=. python3 measurements/csr_registers.py",
           "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "compilers": compilers, "seconds": round(time.time() - t0, 1),
           "chunks": list(range(1, MAX_CHUNKS + 1)), "registers": table}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
