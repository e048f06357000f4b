"""Benchmark: analytical-model throughput (configs/s, one core) and `gpusim predict` latency.

Run from the repository root: ``python benchmarks/model_throughput.py``. Prints a Markdown report
(recorded in ``benchmarks/model_throughput.md``).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def throughput(n_configs: int = 50_000, repeats: int = 3) -> float:
    import numpy as np

    from gpusim.specs import load_spec
    from models.analytical import predict_many, speedup_summary

    rng = np.random.default_rng(0)
    spec = load_spec("v100")
    hidden = rng.integers(64, 8192, n_configs)
    batch = rng.choice([1, 2, 4, 8], n_configs)
    density = rng.choice([0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0], n_configs)
    predict_many(spec, hidden[:100], batch[:100], density[:100])  # warm the cached tables
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        for lo in range(0, n_configs, 4096):  # the sweep's chunk size
            sl = slice(lo, lo + 4096)
            speedup_summary(predict_many(spec, hidden[sl], batch[sl], density[sl]))
        best = max(best, n_configs / (time.perf_counter() - t))
    return best


def predict_latency(repeats: int = 5) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpusim.cli", "predict", "--gpu", "v100",
                        "--hidden", "2304", "--batch", "4", "--density", "0.1"],
                       check=True, capture_output=True)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cps = throughput()
    lat = predict_latency()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"model throughput (one core, 8 kernels per config, chunks of 4096): "
          f"{cps:,.0f} configs/s")
    print(f"gpusim predict --engine model (v100, N=2304, B=4, d=0.1), wall incl. interpreter "
          f"start: median {statistics.median(lat):.2f} s, max {max(lat):.2f} s")


if __name__ == "__main__":
    main()
