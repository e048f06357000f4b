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
# # 4. Synchronisation across SMs: grid barrier vs Lamport timestamps
#
# Every SM computes a slice of $h_t$, and every SM needs *all* of $h_t$ to start step $t+1$.
# So between two steps the SMs must agree that the data is there. The persistent kernel can do
# this in two ways (both are switches of `build_sparse_rnn`):
#
# - **grid barrier**: after its stores, each CTA does `__syncthreads`, a `__threadfence` and an
#   atomic increment of one global counter; before the next step, thread 0 of each CTA spins on
#   the counter until all CTAs have arrived, then releases its CTA with `__syncthreads`.
# - **Lamport timestamps** (Zhu et al. 2018), where the data itself carries the ready signal:
#   each step's output slot is pre-filled with a sentinel ($-0.0$, a value the writer
#   never produces because it adds $+0.0$ to every result). A consumer loads the $h$ values it
#   needs with L2-coherent loads and simply re-loads any that still hold the sentinel. No counter,
#   no atomics, and an SM starts as soon as *its* data is there. Each warp closes its step with a
#   200 ns `__nanosleep` before it polls: on an H200, polls that start right after a warp's own
#   stores cost the step more than the wait does (`measurements/README.md`, "The Lamport step
#   closes with a wait"). The wait ends on the next tick of one GPU-wide timer, every 256 ns for
#   a 200 ns argument, so the warps that slept in the same period wake together, on a tick
#   ("The wait ends on a tick of the GPU's timer"). Their polls then find the data stored
#   before the tick: a poll that comes after a word reached L2 is not slowed by the other SMs
#   that poll the same line ("Pollers that come after a word do not delay it").
#
# We look at the code of both, price the barrier from the spec, then let the simulator run both
# on the same layer and draw what every SM does over time.

# %%
import os

import numpy as np

from gpusim.engine import simulate
from gpusim.plots.style import show
from gpusim.plots.sync import plot_sync_comparison
from gpusim.specs import load_spec
from kernels_ir import format_kernel
from kernels_ir.kernels import build_sparse_rnn, make_layer, max_rel_err
from models.analytical import predict_many

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"
HIDDEN = 256 if SMALL else 1152
BATCH, DENSITY = 4, 0.1
TIMESTEPS = 16
SAMPLE = 3 if SMALL else 5          # steps simulated in full; the rest is extrapolated
spec = load_spec("v100")
layer = make_layer(HIDDEN, BATCH, DENSITY, TIMESTEPS, seed=0)
progs = {sync: build_sparse_rnn(layer, spec, sync=sync, wide_loads=True, layout="optimal")
         for sync in ("barrier", "lamport")}

# %% [markdown]
# ## The two codes
#
# Only the staging of $h$ and the end of the step differ. Here are the lines of each kernel that
# the other does not have (from the same `format_kernel` text as in notebook 2).

# %%
def snippet(kernel, needles, after=4):
    lines = format_kernel(kernel).splitlines()
    for i, line in enumerate(lines):
        if any(n in line for n in needles):
            print("\n".join(lines[max(0, i - 1):i + after]))
            print("   ...")


print("--- barrier: wait for all CTAs, then arrive after the step ---")
snippet(progs["barrier"].kernel, ("do grid_barrier", "fence"), after=5)
print("--- lamport: the staging load polls until no word is the sentinel ---")
snippet(progs["lamport"].kernel, ("do lamport_poll",), after=13)

# %% [markdown]
# ## Pricing the barrier from the spec
#
# The barrier's critical path after the slowest CTA finishes its stores: its atomic travels to
# L2 (about half an atomic round trip), the atomics of all SMs on the *same address* are
# serialised at one L2 slice, thread 0 of each CTA must see the final count (one more L2 round
# trip of its spinning load), and `__syncthreads` releases the CTA. Lamport pays none of this;
# its cost is the polls that find a sentinel, which the simulator counts as `poll` traffic.

# %%
c = {
    "atomic reaches L2 (half round trip)": spec.l2_atomic_latency_cycles / 2,
    f"{spec.sm_count} same-address atomics serialised": (spec.sm_count
                                                           * spec.l2_atomic_same_address_cycles),
    "spinning load sees the count (L2 round trip)": spec.l2_hit_latency_cycles,
    "__syncthreads x 2": 2 * spec.cta_barrier_latency_cycles,
}
for k, v in c.items():
    print(f"{k:<48} {v:7.0f} cycles")
total = sum(c.values())
print(f"{'barrier critical path':<48} {total:7.0f} cycles = {spec.cycles_to_s(total) * 1e6:.2f} "
      f"us at {spec.clock_hz / 1e9:.2f} GHz")

# %% [markdown]
# ## Simulating both
#
# `simulate` runs the kernel through the functional executor with the timing model observing
# every warp-instruction: issue slots, pipes, the scoreboard, shared-memory wavefronts, L2
# slices and atomics. With `sample_steps` it simulates the first steps in full and extrapolates
# the rest from the steady state. The values are checked as always.

# %%
results = {}
for sync, prog in progs.items():
    res = simulate(prog.kernel, prog.inputs, spec, sample_steps=SAMPLE)
    k = res.steps + 1   # h_0 .. h_K: the steps that were simulated
    err = max_rel_err(prog.outputs(res.globals)[:k], prog.reference()[:k])
    results[sync] = res.with_error(err)
    per = res.breakdown["per_step"][-1]
    print(f"{sync:>8}: {res.per_step_s * 1e6:.3f} us per step; last simulated step per SM "
          f"(cycles): " + ", ".join(f"{a} {b:,.0f}" for a, b in per.items()))
    print(f"{'':>8}  L2 transactions: {res.l2_transactions}; max_rel_err {err:.1e}")
b, lam = results["barrier"], results["lamport"]
saved = (b.per_step_s - lam.per_step_s) / spec.cycle_s
print(f"Lamport saves {saved:,.0f} cycles per step ({b.per_step_s / lam.per_step_s:.2f}x)")

# %% [markdown]
# ## The timeline
#
# Each row is one SM (one CTA), each bar one simulated step from the SM's start of the step to
# its end, split in proportion to where its warps' time went: issuing instructions, waiting for
# shared memory, waiting for data from L2 (the $h$ exchange), and barrier (the grid barrier's
# spin and atomics, or `__syncthreads`). The blank space before the first step is the set-up
# (loading the weights into registers).
#
# What to look for: under the barrier every SM's step ends in a nearly vertical line (nobody
# leaves before the last SM's arrival is counted) and the red barrier share is large; under
# Lamport the red shrinks to the CTA-local `__syncthreads` and the step's closing wait. Below,
# the step durations and the L2
# traffic: the barrier adds `atomic` transactions (one per SM per step) and `poll`
# transactions of the spinning thread 0.

# %%
show(plot_sync_comparison(results, title=f"barrier vs Lamport on {spec.name}: N={HIDDEN}, "
                          f"B={BATCH}, density {DENSITY}, optimal layout, wide loads"))

# %% [markdown]
# ## The sentinel, in the data
#
# The Lamport program pre-fills slots $1..T$ of the global `hseq` buffer with the bit pattern of
# $-0.0$; after the run no word of a real $h$ may be left holding it (every step was written)
# and no computed value may be $-0.0$ (the writer canonicalises it). Checking both on the
# simulated run:

# %%
prog = progs["lamport"]
bits = prog.inputs["hseq"].view(np.int32)
sentinel = int(np.int32(np.uint32(0x80000000)))
print(f"sentinel words before the launch: {(bits == sentinel).sum():,} "
      f"(= T x N x B = {TIMESTEPS} x {HIDDEN} x {BATCH})")
out = prog.outputs(lam.globals)[1:lam.steps + 1]
print(f"simulated steps 1..{lam.steps}: words still -0.0 after the run: "
      f"{int((out.view(np.int32) == sentinel).sum())}")

# %% [markdown]
# ## How it scales with the number of SMs
#
# The barrier's serialised atomics grow with the SM count; the analytical model
# (`models.analytical`, an independent witness that never imports the simulator) shows the
# synchronisation term for the V100 and the H100, for the kernel with a barrier (`sparse-bank`)
# and with Lamport timestamps (`sparse-lamport`).

# %%
for gpu in ("v100", "h100"):
    s = load_spec(gpu)
    t = predict_many(s, HIDDEN, BATCH, DENSITY, kernels=("sparse-bank", "sparse-lamport"))
    print(f"{gpu} ({s.sm_count} SMs): sync term barrier "
          f"{float(t['sparse-bank'].breakdown['sync_s'][0]) * 1e6:.2f} us, Lamport "
          f"{float(t['sparse-lamport'].breakdown['sync_s'][0]) * 1e6:.2f} us; step "
          f"{float(t['sparse-bank'].per_step_s[0]) * 1e6:.2f} vs "
          f"{float(t['sparse-lamport'].per_step_s[0]) * 1e6:.2f} us")

# %% [markdown]
# ## What to remember
#
# - A grid barrier costs a chain of L2 round trips plus serialised same-address atomics every
#   step, and makes every SM wait for the slowest.
# - Lamport timestamps make the data its own ready flag: the loads that fetch $h$ are the
#   synchronisation, the only extra cost is re-polling a word that is not there yet.
# - The simulator counts that traffic per kind, so the two can be compared on the same layer.
