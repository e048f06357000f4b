"""Layout timing benchmark (issue 4): greedy and optimal layouts of hidden 8192, density 0.3.

Targets: greedy < 5 s, optimal < 60 s on the 2-core development machine. Writes the report to
benchmarks/layout_timing.md (machine, versions, date, raw repeats).

    python benchmarks/layout_timing.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from pathlib import Path

import numpy as np
from _machine import cpu_model

from kernels_ir.layouts import LAYOUTS, analyse
from kernels_ir.mapping import map_matrix
from models.sparse import random_sparse

OUT = Path(__file__).with_suffix(".md")




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    U = random_sparse(8192, 8192, 0.3, np.random.default_rng(0))
    ks = np.full(U.shape[0], -(-np.diff(U.indptr).max() // 32))
    rows = []
    for name, target in (("greedy", 5.0), ("optimal", 60.0)):
        wall, cpu = [], []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            LAYOUTS[name].many(U.indptr, U.indices, ks, batch=4, wide_loads=True,
                               rng=np.random.default_rng(0))
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        rows.append((name, target, wall, cpu))
        print(f"{name:8s} median wall {np.median(wall):.2f} s (target < {target:g} s)")
    t = time.perf_counter()
    m = map_matrix(U, n_ctas=80, warps_per_cta=8, batch=4, wide_loads=True, layout="optimal")
    rep = analyse(m, 4, True)
    whole = time.perf_counter() - t
    lines = [
        "# Layout timing (hidden 8192, density 0.3, batch 4, 128-bit loads)", "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}",
        f"- python {platform.python_version()}, numpy {np.__version__}",
        f"- nonzeros: {U.nnz:,}; command: `python benchmarks/layout_timing.py "
        f"--repeats {args.repeats}`", "",
        "| layout | target | median wall s | raw wall s | raw CPU s |",
        "|---|---|---|---|---|",
    ]
    for name, target, wall, cpu in rows:
        lines.append(f"| {name} | < {target:g} s | {np.median(wall):.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in wall)} | "
                     f"{', '.join(f'{x:.2f}' for x in cpu)} |")
    lines += ["", f"Whole `map_matrix(layout='optimal')` + `analyse`: {whole:.2f} s; gap to the "
              f"lower bound: {rep.gap_wavefronts} wavefronts.", ""]
    OUT.write_text("\n".join(lines))
    print(f"report -> {OUT}")


if __name__ == "__main__":
    main()
