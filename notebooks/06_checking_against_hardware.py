# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 6. How the simulator is checked against real hardware
#
# A model of a GPU is a claim; this notebook shows how the project tests it. The same IR kernel
# that the simulator executes is turned into CUDA C, compiled and launched on a real GPU through
# CuPy (with a cooperative launch, which guarantees that all CTAs are co-resident, as the
# persistent kernel requires). Every hardware run is checked against the float64 reference
# *before* its time counts. The measurements are stored in the repository as data with their
# provenance, so the comparison below runs on any machine, without a GPU:
#
# 1. the generated CUDA: what actually ran;
# 2. the recorded campaign: which GPU, software and cases, and how time was measured;
# 3. the cross-check: the simulator (with the matching spec) predicts every recorded case, and we
#    look at the error, the ranking, and the bank conflicts counted by Nsight Compute.
#
# If the measurement directory is empty or partial, the notebook says so and shows the method.

# %%
import collections
import os
import tempfile
from pathlib import Path

import numpy as np

from gpusim.cli.crosscheck import run_crosscheck
from gpusim.data import measurement_dir
from gpusim.measurements import load_campaign
from gpusim.plots.crosscheck import plot_crosscheck
from gpusim.plots.style import show
from gpusim.specs import load_spec
from kernels_ir import InputError
from kernels_ir.codegen_cuda import generate
from kernels_ir.kernels import build_sparse_rnn, make_layer

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"
EVERY = 24 if SMALL else 3      # predict one recorded case in EVERY (the simulator runs each)
# the recorded H100 campaign: measurements/h100 of the checkout, or the copy installed with the
# package (gpusim.data.measurement_dir)
DATA = Path(os.environ.get("GPUSIM_NB_DATA") or measurement_dir("h100", required=False))
OUT = Path(tempfile.mkdtemp(prefix="nb06_"))

# %% [markdown]
# ## What runs on the GPU
#
# `kernels_ir.codegen_cuda.generate` writes one `extern "C" __global__` function from a per-op
# table. Register arrays become separate scalars (`r_w_0, r_w_1, ...`), so the weights stay in
# registers; the Lamport poll becomes an `ld.volatile.global` load in a bounded loop that reports
# who was waiting instead of hanging. Here is the start of the time loop for a small layer on the
# H100 spec.

# %%
h100 = load_spec("h100")
prog = build_sparse_rnn(make_layer(256, 4, 0.1, 4, seed=0), h100, sync="lamport",
                        wide_loads=True, layout="optimal")
src = generate(prog.kernel)
lines = src.code.splitlines()
loop = next(i for i, line in enumerate(lines) if "for (r_t" in line)
print(f"// {len(lines)} lines; launch grid={src.grid} block={src.block}, "
      f"{src.smem_bytes} bytes of dynamic shared memory; parameters {src.params}")
print("\n".join(lines[loop:loop + 40]))

# %% [markdown]
# ## The recorded campaign
#
# `measurements/campaign.py` ran once on the GPU: provenance (GPU, driver, CUDA, CuPy versions,
# date, command), microbenchmarks, then every case: each persistent variant, the CSR
# row-per-warp kernel, cuBLAS and cuSPARSE, per layer. A per-step time is the *slope* between a
# long and a short launch (so the launch and the weight load cancel), the median of repeats
# with fresh random inputs. `gpusim.measurements.load_campaign` validates every field.

# %%
try:
    camp = load_campaign(DATA)
except InputError as exc:
    camp = None
    print(f"no usable measurements: {exc}")
    print("the cells below show the method and skip the comparison")
if camp is not None:
    p = camp.provenance
    print(f"{p['gpu_name']}: driver {p['driver_version']}, CUDA runtime "
          f"{p['cuda_runtime_version']}, CuPy {p['cupy_version']}, recorded {p['date']}")
    print(f"command: {p['command']}")
    print(f"per-step time = slope between T={camp.steps[0]} and T={camp.steps[1]} launches; "
          f"spec used for predictions: {camp.spec_name}")
    status = collections.Counter((c["kind"], c["status"]) for c in camp.cases)
    for (kind, st), n in sorted(status.items()):
        print(f"  {kind:>18} {st:>8}: {n}")
    print(f"microbenchmarks: {sorted(camp.microbench)}")
    print(f"Nsight Compute counters for {len(camp.ncu)} cases at T={camp.ncu_steps}")

# %% [markdown]
# One case in detail: the values check, and the spread of the repeats behind the median.

# %%
if camp is not None and camp.ok_cases:
    case = next((c for c in camp.ok_cases if c["kind"] == "sparse_persistent"),
                camp.ok_cases[0])
    r = case["result"]
    raw = np.asarray(r.get("per_step_raw_s", [r["per_step_s"]])) * 1e6
    print(f"{case['id']}: values_ok={r['values_ok']} (max_rel_err {r['max_rel_err']:.1e})")
    print(f"per step {r['per_step_s'] * 1e6:.3f} us = median of {raw.size} repeats "
          f"(min {raw.min():.3f}, max {raw.max():.3f} us)")

# %% [markdown]
# ## The cross-check
#
# `run_crosscheck` rebuilds each recorded case from its seed, lets the simulator predict it with
# the spec of the recorded GPU (the cuBLAS/cuSPARSE cases, which are not written in the IR, are
# predicted by the analytical model), and reports the absolute percentage error per case, its
# mean (MAPE), and the Spearman rank correlation: whether the simulator *orders* kernels and
# layers as the hardware does, which is what a user choosing a variant needs most.

# %%
summary = None
if camp is not None and camp.ok_cases:
    try:
        summary = run_crosscheck(DATA, every=EVERY, include_fresh=False)
    except InputError as exc:  # e.g. a partial directory with no case the tools can predict
        print(f"cross-check not possible: {exc}")
if summary is not None:
    print(f"{summary['cases']} cases (one in {EVERY}): MAPE {summary['mape']:.0%}, "
          f"Spearman {summary['spearman']:.2f}, worst {summary['max_ape']:.0%} "
          f"({summary['worst']})")
    for kind, st in summary["by_kind"].items():
        if st:
            print(f"  {kind:>18}: {st['cases']:>3} cases, MAPE {st['mape']:.0%}")
    worst = sorted(summary["rows"], key=lambda row: -row["ape"])[:3]
    for row in worst:
        print(f"  off most: {row['id']}: measured {row['measured_s'] * 1e6:.2f} us, "
              f"predicted {row['predicted_s'] * 1e6:.2f} us ({row['source']})")

# %% [markdown]
# The figure plots each case's predicted against its measured per-step time on log axes; the
# dashed line is perfect agreement, the dotted ones +-20%. Colour is the kernel kind; the marker
# says who predicted: circles the simulator, filled triangles the analytical model (the library
# baselines), hollow triangles the analytical model on the same kernel cases as the simulator.
# Look for two things: whether the points of one kernel kind
# follow the line's slope (the model scales right with the layer), and whether a kind sits
# consistently above or below it (a systematic cost the spec under- or over-charges, the target
# of calibration).

# %%
if summary is not None:
    path = OUT / "crosscheck.png"
    plot_crosscheck(summary, path)
    show(path)
else:
    print("no measurements: no figure")

# %% [markdown]
# ## Bank conflicts: an exact check
#
# Time is approximate, but shared-memory bank conflicts are a count. Nsight Compute recorded the
# wavefronts and conflicts of every persistent launch; the simulator counts the same loads with
# `kernels_ir.banks`. For the load instructions the two should agree exactly (stores into
# shared memory include the staging of $h$, whose addresses are the same on both sides too).

# %%
if summary is not None:
    rows = [r for r in summary["rows"] if "conflicts_ld_measured" in r]
    print(f"{len(rows)} cases with Nsight Compute counters; shared-load conflicts match "
          f"exactly in {sum(r['conflicts_ld_match'] for r in rows)}")
    for r in rows[:6]:
        print(f"  {r['id']:<52} measured {r['conflicts_ld_measured']:>8}  "
              f"simulated {r['conflicts_ld_predicted']:>8}")

# %% [markdown]
# ## What to remember
#
# - The kernel that is simulated is the kernel that ran: one IR, two backends.
# - Measurements are data with provenance; a value check gates every time.
# - The cross-check reports error *and* rank agreement per kernel kind, and counts such as bank
#   conflicts are compared exactly; where the simulator is off, the per-kind error says which
#   mechanism to look at next.
