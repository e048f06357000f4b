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
# # 1. Persistent RNNs: keep the weights on chip
#
# A recurrent layer computes, for every timestep $t$,
#
# $$h_t = \tanh(U\,h_{t-1} + W x_t + b)$$
#
# with hidden size $N$, batch $B$ and $T$ steps. The input term $W x_t + b$ does not depend on
# the previous step, so all $T$ of them are one large GEMM done beforehand. What is left is the
# *recurrence*: $T$ matrix products $U h_{t-1}$ that must run one after the other.
#
# This notebook answers two questions with numbers from the project's V100 spec:
#
# 1. why is a small-batch recurrence slow on a GPU when each step is a separate GEMM call?
# 2. how does keeping $U$ in the register files of all SMs (a *persistent* kernel, Diamos et al.
#    2016) fix it, and how large a layer fits (the capacity arithmetic, with and without
#    sparsity, Zhu et al. 2018)?
#
# Every hardware number below comes from `gpusim/specs/v100.toml` through `load_spec`; every
# figure comes from a `gpusim.plots` function.

# %%
import dataclasses
import os

import numpy as np

from gpusim.plots.mapping import plot_capacity, plot_mapping
from gpusim.plots.style import show
from gpusim.specs import load_spec
from kernels_ir.mapping import map_matrix
from models import capacity
from models.analytical import predict_many
from models.sparse import random_sparse

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"  # the test suite runs every notebook small
HIDDEN = 1152            # the layer we follow (Zhu et al. use sizes of this order)
BATCH = 4
DENSITY = 0.1
v100 = load_spec("v100")
h100 = load_spec("h100")

# %% [markdown]
# ## The machine in numbers
#
# The spec is data: each value carries a unit and a source. The four that matter here are the
# peak FP32 rate, the DRAM bandwidth, the L2 size and the register file. Note the last one: the
# registers of all SMs together are a larger on-chip store than the L2 cache.

# %%
peak_flops = (v100.sm_count * v100.subpartitions_per_sm * v100.fp32_lanes_per_subpartition
              * 2 * v100.clock_hz)                       # an FMA is 2 flops
regfile_bytes = v100.sm_count * v100.regs_per_sm * 4     # 32-bit registers
print(f"{v100.full_name}")
print(f"  peak FP32           {peak_flops / 1e12:6.1f} TFLOP/s")
print(f"  DRAM bandwidth      {v100.dram_bandwidth_bytes_per_s / 1e9:6.0f} GB/s   "
      f"source: {v100.source('dram_bandwidth_bytes_per_s')}")
print(f"  L2 cache            {v100.l2_size_bytes / 2**20:6.1f} MiB")
print(f"  register files      {regfile_bytes / 2**20:6.1f} MiB "
      f"({v100.sm_count} SMs x {v100.regs_per_sm} x 4 B)")
print(f"  launch overhead     {v100.launch_overhead_s * 1e6:6.2f} us per back-to-back kernel")

# %% [markdown]
# ## Why a per-step GEMM is latency bound at small batch
#
# A step multiplies the $N \times N$ matrix by an $N \times B$ block of $h$: $2N^2B$ flops, but
# it must read all $4N^2$ bytes of $U$ (fp32) because nothing of $U$ survives from the previous
# kernel launch in registers or shared memory. The arithmetic intensity is
# $2N^2B / 4N^2 = B/2$ flops per byte, independent of $N$. The GPU needs far more than that to
# be compute bound (the *ridge point*, peak flops over bandwidth). So at batch 4 every step is
# a memory stream of the whole matrix plus a kernel launch, and the FP32 units sit idle.

# %%
ridge = peak_flops / v100.dram_bandwidth_bytes_per_s
print(f"intensity at B={BATCH}: {BATCH / 2:.1f} flop/byte; ridge point: {ridge:.1f} flop/byte "
      f"-> compute can be at most {BATCH / 2 / ridge:.0%} busy")
u_bytes = 4 * HIDDEN**2
flops = 2 * HIDDEN**2 * BATCH
l2_bw = v100.l2_slices * v100.l2_bytes_per_cycle_per_slice * v100.clock_hz
print(f"N={HIDDEN}: U is {u_bytes / 2**20:.2f} MiB; one step is {flops / 1e6:.1f} Mflop")
print(f"  compute at peak      {flops / peak_flops * 1e6:6.2f} us")
print(f"  stream U from DRAM   {u_bytes / v100.dram_bandwidth_bytes_per_s * 1e6:6.2f} us")
print(f"  stream U from L2     {u_bytes / l2_bw * 1e6:6.2f} us (if U stays in the "
      f"{v100.l2_size_bytes / 2**20:.0f} MiB L2)")
print(f"  launch               {v100.launch_overhead_s * 1e6:6.2f} us")

# %% [markdown]
# ## The persistent kernel: only $h$ moves
#
# A persistent kernel launches once, with one CTA per SM, all co-resident for the whole sequence.
# Each thread loads its share of $U$ into registers before the time loop and never writes it
# back. A step then moves only $h$: every SM reads $h_{t-1}$ ($N \times B$ values) from L2 into
# shared memory, multiplies with its rows, and writes its part of $h_t$. What remains is
# *latency*: the L2 round trip of the $h$ exchange, the shared-memory gathers, the warp
# reductions, and the synchronisation between SMs (notebook 4).
#
# The analytical model (`models.analytical`) prices each of those from the same spec. The table
# compares the per-step time of cuBLAS-per-step with the dense and the sparse persistent
# kernels. `nan` means the layer does not fit the kernel (next section).

# %%
sizes = np.array([256, 1152, 2304] if SMALL else [256, 512, 1152, 1792, 2304, 4096])
names = ("cublas", "dense-persistent", "sparse-lamport")
times = predict_many(v100, sizes, BATCH, DENSITY, kernels=names)
print(f"per-step time (us) on {v100.name}, batch {BATCH}, density {DENSITY} for the sparse "
      f"kernel (cuBLAS and dense use the full matrix)")
print(f"{'N':>6} " + " ".join(f"{n:>18}" for n in names))
for i, n in enumerate(sizes):
    print(f"{n:>6} " + " ".join(f"{times[k].per_step_s[i] * 1e6:>18.2f}" for k in names))
bd = times["cublas"].breakdown
i = int(np.flatnonzero(sizes == HIDDEN)[0])
print(f"\ncuBLAS at N={HIDDEN}: " + ", ".join(f"{k} {v[i] * 1e6:.2f} us" for k, v in bd.items()))
bd = times["sparse-lamport"].breakdown
print(f"sparse persistent at N={HIDDEN}: "
      + ", ".join(f"{k} {v[i] * 1e6:.2f} us" for k, v in bd.items()))

# %% [markdown]
# ## Capacity: how large a layer fits in the registers
#
# The kernel runs 256 threads (8 warps) per SM, so a thread may use at most
# `min(max_regs_per_thread, regs_per_sm / 256)` registers. Rows of $U$ are dealt to the
# `sm_count x 8` warps; a row's nonzeros are spread over the 32 lanes of its warp, each lane
# holding $K_j$ *slots* (a weight and, for sparse rows, its column index). $K_j$ is the same for
# every warp (the instruction stream is shared), so it is set by the longest row of row-slot
# $j$. Per thread the kernel needs
#
# $$\text{regs} = \underbrace{S}_{\text{values}} + \underbrace{S}_{\text{indices}} +
# \text{bookkeeping}, \qquad S = \textstyle\sum_j K_j,\; R = \lceil N / \text{warps} \rceil$$
#
# where the bookkeeping is a few registers per row held ($R$), per batch column and for scalars
# (addresses, counters); dense tiles need no indices. We do the weight arithmetic by hand for
# our layer and check it
# against `models.capacity.fit`, which also checks that $h$ fits in shared memory.

# %%
warps = v100.sm_count * capacity.THREADS_PER_CTA // 32
R = -(-HIDDEN // warps)
K, _ = capacity.expected_slots(v100, HIDDEN, DENSITY)
S = sum(K)
weights = 2 * S                     # one value + one column index per slot
budget = min(v100.max_regs_per_thread, v100.regs_per_sm // capacity.THREADS_PER_CTA)
f = capacity.fit(v100, HIDDEN, BATCH, DENSITY)
print(f"{warps} warps, R = {R} rows per warp; expected nonzeros per row {HIDDEN * DENSITY:.0f} "
      f"-> K_j = {K} slots of 32")
print(f"registers/thread: weights 2 x {S} = {weights} by hand, + bookkeeping "
      f"{f.registers - weights} = {f.registers} (models.capacity); budget "
      f"min({v100.max_regs_per_thread}, {v100.regs_per_sm}/{capacity.THREADS_PER_CTA}) = "
      f"{budget}")
assert f.slots == S and f.rows_per_warp == R and f.register_limit == budget
dense_K = -(-HIDDEN // 32)
print(f"dense: K = ceil({HIDDEN}/32) = {dense_K} per row -> "
      f"{capacity.fit(v100, HIDDEN, BATCH, 1.0, dense=True).registers} registers/thread")
for spec in (v100, h100):
    d = capacity.max_hidden(spec, 1.0, BATCH, dense=True)
    s = capacity.max_hidden(spec, DENSITY, BATCH)
    print(f"{spec.name}: dense fits up to N={d.hidden}; at density {DENSITY} up to N={s.hidden} "
          f"({s.hidden / d.hidden:.1f}x larger; stopped by {s.limit})")

# %% [markdown]
# The figure shows the same arithmetic over all densities. In panel (a), look for the two
# regimes: at high density the registers bind and the largest $N$ grows roughly like
# $1/\sqrt{\text{density}}$ (the weights grow like $N^2 d$); at low density the staged $h$
# ($N \times B$ fp32 values) fills the shared memory first and the line goes flat. The dashed
# lines are the dense kernel. Panel (b) shows where the registers go: indices cost as much as
# values (which is why fp16 values with 16-bit indices, one register per nonzero, fit about twice
# the weights: about 1.4 times the hidden size, `docs/fp16.md`).

# %%
fig = plot_capacity([v100, h100], batch=BATCH,
                    densities=np.geomspace(0.01, 1.0, 5 if SMALL else 11), density=DENSITY)
show(fig)

# %% [markdown]
# ## Where the weights live
#
# To see the mapping we shrink the V100 to 4 SMs (`dataclasses.replace` on the spec) and map a
# small random layer. Panel (a) colours each nonzero of $U$ by the SM whose registers hold it,
# panel (b) shows how evenly the nonzeros are spread over the 32 warps, and panel (c) shows one
# warp's registers: each cell is one (weight, column) pair of one lane, the number is the column
# of $h$ that lane gathers. Notebook 2 takes this apart.

# %%
toy = dataclasses.replace(v100, sm_count=4)
n_toy = 128 if SMALL else 256
U = random_sparse(n_toy, n_toy, DENSITY, np.random.default_rng(0))
m = map_matrix(U, n_ctas=toy.sm_count, warps_per_cta=8, batch=BATCH, wide_loads=True)
show(plot_mapping(m, batch=BATCH, wide_loads=True, warp=0))

# %% [markdown]
# ## What to remember
#
# - At small batch a per-step GEMM streams all of $U$ every step (intensity $B/2$ flop/byte) and
#   pays a launch: its time is memory and launch latency, not arithmetic.
# - The register files of all SMs hold more than the L2; a persistent kernel keeps $U$ there and
#   moves only $h$ between steps.
# - Capacity is arithmetic: 2 registers per nonzero slot, padded to the longest row of each
#   row-slot, within the per-thread budget; sparsity buys a larger layer than the dense kernel
#   can hold (the ratio is printed above), until the staged $h$ fills the shared memory.
