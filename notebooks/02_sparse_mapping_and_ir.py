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
# # 2. Sparse weights on a GPU: the mapping, the kernel's IR, and running it
#
# Notebook 1 argued for keeping $U$ in registers. Here we follow one pruned layer all the way:
#
# 1. **the mapping**: which SM, warp, lane and register slot holds each nonzero of $U$
#    (`kernels_ir.mapping.map_matrix`);
# 2. **the kernel**: the persistent sparse RNN written in the project's small SIMT IR
#    (`kernels_ir.kernels.build_sparse_rnn`), printed as text;
# 3. **running it**: the functional executor (`gpusim.engine.execute`) runs every lane of every
#    warp of every CTA with numpy, and the result is checked against a float64 reference.
#
# The same kernel object is what the timing model simulates (notebooks 3 and 4) and what the CUDA
# code generator turns into a real GPU kernel (notebook 6).

# %%
import collections
import os

import numpy as np

from gpusim.engine import execute
from gpusim.plots.mapping import mapping_summary, plot_mapping
from gpusim.plots.style import show
from gpusim.specs import load_spec
from kernels_ir import format_kernel, instructions, op_class
from kernels_ir.kernels import build_sparse_rnn, make_layer
from kernels_ir.mapping import apply_mapping

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"
HIDDEN = 256 if SMALL else 1152
BATCH, DENSITY = 4, 0.1
TIMESTEPS = 4 if SMALL else 16
spec = load_spec("v100")
layer = make_layer(HIDDEN, BATCH, DENSITY, TIMESTEPS, seed=0)
print(f"layer: N={layer.hidden}, B={layer.batch}, T={layer.timesteps}, "
      f"{layer.U.nnz} nonzeros ({layer.U.nnz / HIDDEN**2:.3f} of U)")

# %% [markdown]
# ## The mapping
#
# The kernel runs one CTA of 8 warps on each SM. The rules (`kernels_ir/mapping.py`):
#
# - **rows are dealt whole to warps**. Rows are sorted by nonzero count and dealt in groups of
#   one row per warp, in a *snake* order (left to right, then right to left), which balances the
#   total work per warp. Group $j$ is *row-slot* $j$.
# - **a row is spread over the 32 lanes** of its warp: lane $l$ holds $K_j$ (weight, column)
#   pairs. Because all warps execute the same instruction stream, and registers can only be
#   indexed by compile-time constants, $K_j$ is the same for every warp: the longest row of the
#   group, rounded up to whole slots of 32. Shorter rows are padded with zero weights.
# - a padding lane reads a column that a real lane of its phase already reads, so it costs no
#   extra shared-memory wavefront (notebook 3).
#
# The builder computed the mapping; here it is in numbers.

# %%
prog = build_sparse_rnn(layer, spec, sync="lamport", wide_loads=True, layout="naive")
m = prog.mapping
summary = mapping_summary(m, batch=BATCH, wide_loads=True, spec=spec)
for key in ("warps", "rows_per_warp", "warps_by_rows_held", "slots_per_row_slot",
            "total_slots", "nonzeros_per_warp", "padding_fraction", "registers_per_thread",
            "register_budget", "h_shared_bytes"):
    print(f"{key:>22}: {summary[key]}")

# %% [markdown]
# The diagram draws the same mapping. Panel (a): every nonzero of $U$ coloured by the SM that
# holds it; a row is one colour because rows are never split across warps. Panel (b): the
# nonzeros each warp holds, stacked by row-slot, against the dashed line of register pairs every
# warp pays for; the gap is the padding. Look at the left part: the snake deal gives the first
# warps the longest rows of row-slot 0, and since row-slot 1 is dealt from the right, they get
# its shortest rows or none at all. Panel (c): one warp's
# registers, slot by slot; the numbers are the columns of $h$ each lane gathers, the colours
# their shared-memory banks, and on the right the wavefronts each slot's load costs.

# %%
show(plot_mapping(m, batch=BATCH, wide_loads=True, warp=min(200, m.n_warps - 1)))

# %% [markdown]
# A mapping only *moves* weights; it must not change the product. `apply_mapping` evaluates
# $U h$ exactly as the kernel will (per lane over its slots, then a butterfly reduction over the
# warp, in float32), so we can compare it with scipy's product before running anything.

# %%
h = np.asarray(layer.h0, dtype=np.float32)
mapped = apply_mapping(m, h)
direct = layer.U.astype(np.float64) @ h.astype(np.float64)
print(f"max |mapped - U h| = {np.abs(mapped - direct).max():.2e} "
      f"(|U h| up to {np.abs(direct).max():.2f}; float32 rounding only)")

# %% [markdown]
# ## The kernel in the IR
#
# The IR is a handful of plain records (`Instr`, `Loop`, `While`, `If`, registers and buffers),
# printed by `format_kernel`. Reading it top to bottom:
#
# - **set-up**: each thread loads its weights `%w[s]` and word addresses `%c[s]` (column x B)
#   into register arrays. The indices `s` are constants, which is what keeps them in registers.
# - **`loop.time`**: per step, prefetch $x_t$, then stage $h_{t-1}$ from global memory into the
#   shared array `h_s` with 128-bit loads. With `sync="lamport"` the staging load *is* the
#   synchronisation: the `do lamport_poll ... while %waiting` loop re-reads until none of the 4
#   words is the sentinel $-0.0$ (notebook 4).
# - **the product**: per slot one 128-bit shared load `lds.128 h_s[%c[s]]` fetches all 4 batch
#   values of a column (the *wide load*), then 4 FMAs; a butterfly of `shfl.xor` sums the warp;
#   lanes $b < B$ apply tanh and store $h_t$.
#
# We print the header, the start of the time loop and its end.

# %%
text = format_kernel(prog.kernel).splitlines()
start = next(i for i, line in enumerate(text) if "loop.time" in line)
print("\n".join(text[:12]))
print("   ...")
print("\n".join(text[start:start + 60]))
print("   ...")
print("\n".join(text[-24:]))
print(f"\n({len(text)} lines in all)")

# %% [markdown]
# Counting the static instructions by class shows what the kernel spends its issue slots on:
# the FMAs and shared loads scale with the slots $S = \sum_j K_j$, everything else is fixed cost
# per row or per step.

# %%
static = collections.Counter(op_class(i.op) for i in instructions(prog.kernel))
print("static instructions by class:", dict(static))

# %% [markdown]
# ## Running it and checking the values
#
# `execute` runs all CTAs in lockstep, each register an array of shape (warps, 32 lanes), and
# returns the final global buffers. The program object knows how to read $h_1 \dots h_T$ out of
# them and compares with the float64 reference recurrence `models.reference.rnn_reference`. The
# error measure is the largest error of any $h_t$ element relative to the largest magnitude at
# that step; float32 arithmetic over a few hundred terms should leave it near $10^{-7}$.

# %%
res = execute(prog.kernel, prog.inputs, spec=spec)
err = prog.max_rel_err(res.globals)
print(f"{res.warp_instructions:,} warp-instructions executed on {res.resident_ctas} CTAs "
      f"(in {res.waves} wave)")
print(f"spin loops: {dict(res.spins)} (lockstep passes; 1 per entry means nobody waited)")
print(f"max_rel_err vs float64 reference: {err:.2e}")
assert err < 1e-5
executed = collections.Counter()
for instr, n in zip(res.instrs, res.counts, strict=True):
    executed[op_class(instr.op)] += int(n)
print("executed warp-instructions per step by class:",
      {k: v // TIMESTEPS for k, v in executed.items()})

# %% [markdown]
# Two more checks that follow from the design. The barrier variant moves the same data in the
# same order, so its output must be *bit-identical*. A different layout (`optimal`, notebook 3)
# permutes the nonzeros over lanes and slots: same product, different summation order, so the
# results differ only by float32 rounding.

# %%
outs = {}
for sync, layout in (("lamport", "naive"), ("barrier", "naive"), ("lamport", "optimal")):
    p = build_sparse_rnn(layer, spec, sync=sync, wide_loads=True, layout=layout)
    outs[sync, layout] = p.outputs(execute(p.kernel, p.inputs, spec=spec).globals)
same = np.array_equal(outs["lamport", "naive"], outs["barrier", "naive"])
diff = np.abs(outs["lamport", "naive"] - outs["lamport", "optimal"]).max()
print(f"barrier == lamport bit for bit: {same}")
print(f"optimal vs naive layout: max difference {diff:.1e}")
assert same

# %% [markdown]
# ## What to remember
#
# - Rows go whole to warps (sorted, snake-dealt); a row spreads over 32 lanes in $K_j$ register
#   slots; $K_j$ is shared by all warps, so padding is the price of static register indexing.
# - The kernel is ordinary code in a small IR: load weights once, then per step stage $h$, gather,
#   FMA, reduce with shuffles, tanh, store.
# - Every simulated run produces values, and they are checked against float64.
#
# The same mapping also decides the shared-memory bank of every gather: notebook 3.
