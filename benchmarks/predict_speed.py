"""Benchmark: wall time of ``gpusim predict`` per layer, with the model and with the simulator.

Run from the repository root: ``python benchmarks/predict_speed.py [--quick] [--model-only]
[--repeat N]``. Each layer is predicted in a fresh process (``python -m gpusim.cli predict ...``,
imports included, as a user runs it) on the H100 and V100 specs; the layers span hidden
256..8192 at batch 1..8 and the densities the fresh draws use, with the largest hidden size that
fits at each density. Prints a Markdown report (recorded in ``benchmarks/predict_speed.md``),
which says whether Python could keep compiled bytecode (``PYTHONDONTWRITEBYTECODE`` unset): where
it cannot, every run compiles the project's modules again. Targets: the model under 1 s per
layer, the simulator under 20 s per layer for any hidden size up to 8192.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# up to the largest layers on which a sparse persistent kernel fits the H100 (hidden 8192 fits
# up to density ~0.06 at batch 1..4; batch 8 needs hidden < 7300 for h in shared memory)
LAYERS = [(256, 1, 0.5), (1024, 4, 0.1), (2304, 4, 0.1), (2304, 4, 0.3), (4096, 8, 0.05),
          (6144, 2, 0.08), (8192, 1, 0.01), (8192, 1, 0.06), (8192, 4, 0.05)]


def run(gpu: str, layer, engine: str) -> tuple[float, int, str]:
    h, b, d = layer
    cmd = [sys.executable, "-m", "gpusim.cli", "predict", "--gpu", gpu, "--hidden", str(h),
           "--batch", str(b), "--density", str(d), "--engine", engine]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    wall = time.perf_counter() - t
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("best persistent")]
    return wall, p.returncode, (last[0] if last else (p.stderr.strip() or "no speedup")[-80:])


def main() -> int:
    from benchmarks._machine import cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three layers, H100 only")
    ap.add_argument("--model-only", action="store_true",
                    help="time the model only (the sim column and answer are left empty)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run the model N times per layer and keep the fastest (a shared "
                    "machine's noise only ever adds time)")
    args = ap.parse_args()
    layers = LAYERS[1::3] if args.quick else LAYERS
    gpus = ("h100",) if args.quick else ("h100", "v100")
    pyc = "off (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    runs = f"the model's times are the fastest of {args.repeat} runs" if args.repeat > 1 else \
        "one run per row"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# `gpusim predict` wall time per layer\n\nMachine: {cpu_model()}, "
          f"{os.cpu_count()} cores, load average {load} at the start. Python bytecode cache: "
          f"{pyc}. Every run is a fresh process; {runs}.\n")
    print("| gpu | hidden | batch | density | model s | sim s | answer (sim) |")
    print("|---|---|---|---|---|---|---|")
    worst = {"model": 0.0, "sim": 0.0}
    for gpu in gpus:
        for layer in layers:
            timed = [run(gpu, layer, "model") for _ in range(max(1, args.repeat))]
            tm, rc_m = min(t[0] for t in timed), max(t[1] for t in timed)
            worst["model"] = max(worst["model"], tm)
            row = f"| {gpu} | {layer[0]} | {layer[1]} | {layer[2]} | {tm:.2f} |"
            if args.model_only:
                print(f"{row} - | {'' if rc_m == 0 else 'exit ' + str(rc_m)} |", flush=True)
                continue
            ts, rc_s, ans = run(gpu, layer, "sim")
            worst["sim"] = max(worst["sim"], ts)
            print(f"{row} {ts:.1f} | "
                  f"{ans if rc_s == 0 and rc_m == 0 else 'exit ' + str(rc_s) + ': ' + ans} |",
                  flush=True)
    print(f"\nSlowest: model {worst['model']:.2f} s"
          + ("" if args.model_only else f", simulator {worst['sim']:.1f} s") + " per layer.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
