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
# # 3. Shared-memory banks and weight layouts
#
# Each step, every lane of the sparse kernel gathers $h[\text{col}][0..B)$ from shared memory for
# each of its nonzeros. Those gathers are the kernel's inner loop, and their cost depends on
# *which lanes ask for which addresses at the same time*: shared memory is split into banks, and
# two lanes that need different words of one bank are served one after the other.
#
# The order of a row's nonzeros over (slot, lane) is free: it changes only the summation order.
# Zhu et al. (2018) exploit this with a **bank-aware layout**. This notebook shows the bank rule,
# counts the conflicts of four layouts exactly as the hardware would see them, and shows the
# optimal one reaching a provable lower bound. Everything uses the one bank function
# `kernels_ir.banks.wavefronts`, the same code the simulator charges time with.

# %%
import os

import numpy as np

from gpusim.plots.banks import conflicts_figure
from gpusim.plots.mapping import plot_warp_grids
from gpusim.plots.style import show
from gpusim.specs import load_spec
from kernels_ir import banks
from kernels_ir.layouts import LAYOUTS, analyse
from kernels_ir.mapping import map_matrix
from models.analytical import predict_mapping
from models.sparse import random_sparse

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"
HIDDEN = 384 if SMALL else 1152
BATCH, DENSITY = 4, 0.1
spec = load_spec("v100")

# %% [markdown]
# ## The rule
#
# The spec gives the geometry: a number of banks, each a number of bytes wide; word $w$ (4 bytes)
# lives in bank $w \bmod 32$. A warp-wide access is served in *wavefronts*; one wavefront serves
# every lane whose word is in a different bank, or the same word (a broadcast). Wider accesses
# are split into *phases*: a 64-bit access is served per half-warp, a 128-bit access per
# quarter-warp (8 lanes x 16 bytes = 128 bytes, the width of all banks together), so a 128-bit
# access costs at least 4 wavefronts. The cell below feeds a few access patterns to the bank
# function.

# %%
print(f"{spec.smem_banks} banks x {spec.smem_bank_bytes} bytes; the shared-memory pipe serves "
      f"{spec.smem_wavefronts_per_cycle:g} wavefront per cycle per SM")
lane = np.arange(32)
cases = {
    "32-bit, consecutive words": (lane, 1),
    "32-bit, all lanes one word (broadcast)": (np.zeros(32, int), 1),
    "32-bit, stride 2 words": (2 * lane, 1),
    "32-bit, stride 32 words (one bank)": (32 * lane, 1),
    "128-bit, consecutive columns, B=4": (4 * lane, 4),
    "128-bit, columns 8 apart, B=4": (32 * lane, 4),
}
for name, (words, width) in cases.items():
    wf = int(banks.wavefronts(words, width))
    print(f"{name:<42} {wf:>3} wavefronts ({wf - width} conflicts)")

# %% [markdown]
# ## What it means for the kernel
#
# Lane $l$ of slot $s$ reads the $B$ values of column $c$ at word $c \cdot B$ (the layout of $h$ in
# shared memory is batch-interleaved, `[N][B]`). With $B = 4$ and one 128-bit *wide load*, a
# column occupies 4 banks, so only $c \bmod 8$ matters: in each quarter-warp, two lanes whose
# columns agree mod 8 (and differ) cost an extra wavefront. Random columns collide often. A
# layout that places a row's nonzeros so that each quarter-warp sees 8 different classes costs
# the ideal 4 wavefronts per slot.
#
# The layouts (`kernels_ir.layouts.LAYOUTS`):

# %%
for name, layout in LAYOUTS.items():
    print(f"{name:>8}: {layout.doc}")

# %% [markdown]
# We map one random layer onto the V100 with each layout and let `analyse` charge every shared
# load. The *lower bound* is computed per row from its class counts; the module docstring of
# `kernels_ir/layouts.py` proves it exact (a max-flow construction reaches it), so `optimal` must
# show a ratio of exactly 1.

# %%
U = random_sparse(HIDDEN, HIDDEN, DENSITY, np.random.default_rng(0))
maps = {name: map_matrix(U, n_ctas=spec.sm_count, warps_per_cta=8, batch=BATCH,
                         wide_loads=True, layout=name) for name in LAYOUTS}
reports = {name: analyse(m, BATCH, True) for name, m in maps.items()}
print(f"N={HIDDEN}, density {DENSITY}, B={BATCH}, 128-bit loads; per step, all SMs:")
print(f"{'layout':>8} {'wavefronts':>11} {'conflicts':>10} {'bound':>8} {'ratio':>6}")
for name, r in reports.items():
    print(f"{name:>8} {r.total_wavefronts:>11} {r.total_conflicts:>10} "
          f"{r.lower_bound_wavefronts:>8} {r.ratio_to_bound:>6.3f}")
print(f"ideal (one wavefront per phase): {reports['naive'].ideal_wavefronts}")
assert reports["optimal"].gap_wavefronts == 0

# %% [markdown]
# ## One warp, two layouts
#
# Here is the same warp under `naive` (columns in order) and `optimal`. Colours are banks, the
# right axis gives the wavefronts of each slot. Look at a quarter-warp (8 lanes, two tick marks)
# of a slot: under `naive`, colours repeat and the slot needs more than 4 wavefronts; under
# `optimal` each quarter-warp holds 8 different colours wherever the row has enough nonzeros of
# each class.

# %%
warp = min(200, maps["naive"].n_warps - 1)
show(plot_warp_grids([maps["naive"], maps["optimal"]], warp, batch=BATCH, wide_loads=True))

# %% [markdown]
# ## Conflicts per (warp, slot)
#
# The heatmaps show every warp (rows) and register slot (columns) of the whole kernel; the
# colour is the number of extra wavefronts, on one scale for both panels. Under `naive`
# conflicts are everywhere. Under `optimal` the remaining conflicts are those the bound says no
# layout can avoid: they sit in the first slot of a row-slot, where long rows have more nonzeros
# of one class than there are slots to spread them over.

# %%
show(conflicts_figure([reports["naive"], reports["optimal"]],
                      f"bank conflicts per (warp, slot): N={HIDDEN} d={DENSITY} B={BATCH} "
                      f"128-bit loads"))

# %% [markdown]
# ## Wide loads, and what the layout buys in time
#
# Without wide loads each nonzero costs $B$ separate 32-bit loads (one per batch column): $B$
# times the instructions and, for random columns, more conflicts. We compare the three
# combinations with the bound, then ask the analytical model (`models.analytical.
# predict_mapping`, exact wavefronts from this very mapping) what they cost per step. Note that
# the shared-memory term is only one part of a step (notebook 5 shows the whole breakdown).

# %%
combos = (("sparse-naive", False, "naive"), ("sparse-wide", True, "naive"),
          ("sparse-bank", True, "optimal"))
for variant, wide, layout in combos:
    m = maps[layout] if wide else map_matrix(U, n_ctas=spec.sm_count, warps_per_cta=8,
                                             batch=BATCH, wide_loads=False, layout=layout)
    r = analyse(m, BATCH, wide)
    t = predict_mapping(spec, variant, m, BATCH, report=r)
    smem = t.breakdown["smem_wavefronts_s"][0]
    print(f"{variant:>13} ({'128-bit' if wide else '4 x 32-bit'}, {layout:>7}): "
          f"{r.total_wavefronts:>7} wavefronts (bound {r.lower_bound_wavefronts}), "
          f"shared-memory time {smem * 1e6:.2f} us, step {t.per_step_s[0] * 1e6:.2f} us")

# %% [markdown]
# ## What to remember
#
# - A warp's shared access costs as many wavefronts as the busiest bank has distinct words, per
#   phase (32, 16 or 8 lanes for 32-, 64-, 128-bit accesses).
# - Wide loads fetch all $B$ batch values of a column at once; with $B=4$ a column's class is
#   $c \bmod 8$.
# - The placement of a row's nonzeros is free; `optimal` reaches the exact lower bound, so what
#   remains is the price of the matrix itself, not of the layout.
