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
# # 5. Predicting speedups for hypothetical layers on V100 and H100
#
# The question this project was built for (see the README): *how much faster than the next
# best thing would a given layer run with a sparse persistent kernel, on a GPU we may not own,
# and does it fit at all?*
#
# Two witnesses answer it. The **analytical model** (`models.analytical`) prices each term of a
# step in closed form from the spec (issue, FP32, shared-memory wavefronts, the $h$ exchange
# through L2, the reduction tail, synchronisation, launches) for every kernel and baseline, fast
# enough for sweeps of thousands of layers. The **simulator** (`gpusim.engine.simulate`) runs
# the real kernel and lets those mechanisms interact. We sweep with the first and spot-check
# with the second.

# %%
import dataclasses
import os

import numpy as np

from gpusim.engine import simulate
from gpusim.plots.speedup import speedup_heatmap
from gpusim.plots.style import show
from gpusim.specs import load_spec
from gpusim.sweep import Grid, run_sweep
from kernels_ir import CapacityError
from kernels_ir.kernels import build_sparse_rnn, make_layer
from models import capacity
from models.analytical import VARIANTS, predict_many, predict_mapping

SMALL = os.environ.get("GPUSIM_NB_SMALL") == "1"
GPUS = ("v100", "h100")
specs = {g: load_spec(g) for g in GPUS}
HIDDEN = (256, 1024, 2048, 4096) if SMALL else tuple(range(256, 4097, 256)) + (5120, 6144, 8192)
DENSITY = (0.02, 0.1, 0.5) if SMALL else (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
BATCH = 4

# %% [markdown]
# ## The kernels being compared
#
# Persistent kernels (one launch for the whole sequence) and per-step baselines (a launch per
# step, timed as in a CUDA graph). "Speedup" is the per-step time of the best *other* kernel
# divided by that of the best sparse persistent kernel that fits.

# %%
for name, v in VARIANTS.items():
    print(f"{name:>17} [{v.family}]: {v.doc}")

# %% [markdown]
# ## One hypothetical layer
#
# A 4096-wide layer at 10% density, batch 4. First, does it fit? The
# capacity model answers with the binding limit; the dense kernel is refused with an error that
# names the limit and the largest size that does fit.

# %%
N, D = 4096, 0.1
for gpu, spec in specs.items():
    f = capacity.fit(spec, N, BATCH, D)
    print(f"{gpu}: sparse fits={f.fits}: {f.registers}/{f.register_limit} registers/thread, "
          f"{f.smem_bytes}/{f.smem_limit} bytes of shared memory")
    try:
        capacity.check(spec, N, BATCH, 1.0, dense=True)
    except CapacityError as exc:
        print(f"      dense: {exc}")

# %% [markdown]
# Then its per-step time under every kernel, with the terms of the breakdown. For a persistent
# kernel the compute part is the largest of four bounds (issue rate, FP32 pipe, shared-memory
# wavefronts, the latency chain of one warp), reported as `bound`; for a baseline the terms are
# launch, streaming the weights, and the tanh epilogue.

# %%
for gpu, spec in specs.items():
    t = predict_many(spec, N, BATCH, D)
    print(f"--- {gpu}: N={N}, density {D}, batch {BATCH} (per-step us) ---")
    for name, kt in t.items():
        if not kt.fits[0]:
            print(f"{name:>17}  does not fit")
            continue
        terms = ", ".join(f"{k.removesuffix('_s')} {float(v[0]) * 1e6:.2f}"
                          for k, v in kt.breakdown.items())
        bound = f" [compute bound: {kt.bound[0]}]" if kt.bound is not None else ""
        print(f"{name:>17} {kt.per_step_s[0] * 1e6:7.2f}  ({terms}){bound}")

# %% [markdown]
# ## The whole space
#
# `gpusim.sweep.run_sweep` evaluates the grid of hidden sizes x densities on both GPUs (the same
# engine as `gpusim sweep --plot`), and `speedup_heatmap` draws it. Green cells: the sparse
# persistent kernel wins; red: a per-step kernel is faster; hatched: nothing persistent fits.
#
# What to look for: the diagonal edge of the hatched region is the capacity limit of notebook 1
# (the H100 has more SMs, so its edge lies further right). On the V100 the best region sits just
# inside that edge, at large layers of moderate density: there the baselines must stream a
# matrix that no longer stays in L2, while the persistent kernel still holds it in registers.
# The H100's per-step baselines have a much larger L2 and more bandwidth, so fewer layers are
# left where holding the weights pays off (the cell prints where each GPU's best speedup lies).
# At very low density the baselines' traffic is small too, and the persistent kernel's fixed
# per-step latency (the $h$
# exchange, the reduction tail) dominates.

# %%
grid = Grid(GPUS, HIDDEN, (BATCH,), DENSITY)
cols = run_sweep(grid, scheduler="serial")
show(speedup_heatmap(cols, title=f"predicted per-step speedup of the best sparse persistent "
                                 f"kernel over the next best, batch {BATCH}"))
sp = np.array([np.nan if s is None else s for s in cols["speedup"]])
for gpu in GPUS:
    sel = np.array(cols["gpu"]) == gpu
    i = int(np.nanargmax(np.where(sel, sp, np.nan)))
    print(f"{gpu}: {np.isfinite(sp[sel]).sum()} of {sel.sum()} layers fit; best speedup "
          f"{sp[i]:.2f}x at N={cols['hidden'][i]}, density {cols['density'][i]} "
          f"(vs {cols['next_best'][i]}); wins (>1x) in {(sp[sel] > 1).sum()} layers")

# %% [markdown]
# ## What limits each
#
# For a few layers on each GPU we list the dominant term of the best sparse persistent kernel
# and of the best alternative. Typical answers: the persistent kernel is limited by the $h$
# exchange and the reduction tail (latency, not bandwidth), the baselines by launch overhead at
# small sizes and by streaming the weights at large ones.

# %%
probe = [(1024, 0.1), (2048, 0.1), (4096, 0.05)] if not SMALL else [(1024, 0.1)]
for gpu, spec in specs.items():
    for n, d in probe:
        t = predict_many(spec, n, BATCH, d)
        ok = {k: v for k, v in t.items() if v.fits[0]}
        sparse = min((k for k in ok if VARIANTS[k].family == "persistent" and VARIANTS[k].sparse),
                     key=lambda k: ok[k].per_step_s[0])
        other = min((k for k in ok if k != sparse and not (VARIANTS[k].family == "persistent"
                                                          and VARIANTS[k].sparse)),
                    key=lambda k: ok[k].per_step_s[0])
        parts = []
        for k in (sparse, other):
            bd = {a: float(b[0]) for a, b in ok[k].breakdown.items()
                  if a not in ("compute_s",)}
            top = max(bd, key=bd.get)
            parts.append(f"{k} {ok[k].per_step_s[0] * 1e6:.2f} us (largest term "
                         f"{top.removesuffix('_s')} {bd[top] * 1e6:.2f} us)")
        print(f"{gpu} N={n} d={d}: " + "  vs  ".join(parts))

# %% [markdown]
# ## Spot check with the simulator
#
# The model is only as good as its agreement with the mechanism it abstracts. For two layers we
# simulate the full optimised kernel (Lamport, wide loads, optimal layout) and compare the
# simulated steady-state step with the model's prediction for the *same* mapping
# (`predict_mapping` uses its exact wavefronts). The simulator runs all SMs of the spec, so this
# costs a few seconds per layer.

# %%
layers = [(256, 0.1)] if SMALL else [(1152, 0.1), (2304, 0.05)]
for gpu, spec in specs.items():
    if SMALL:
        spec = dataclasses.replace(spec, sm_count=16)
    for n, d in layers:
        prog = build_sparse_rnn(make_layer(n, BATCH, d, 8, seed=0), spec, sync="lamport",
                                wide_loads=True, layout="optimal")
        sim = simulate(prog.kernel, prog.inputs, spec, sample_steps=3 if SMALL else 4)
        model = predict_mapping(spec, "sparse-lamport", prog.mapping, BATCH)
        s, m = sim.per_step_s * 1e6, float(model.per_step_s[0]) * 1e6
        print(f"{gpu} N={n} d={d}: simulator {s:.2f} us/step, model {m:.2f} us/step "
              f"({(m - s) / s:+.0%})")

# %% [markdown]
# ## What to remember
#
# - A prediction is a breakdown, not a number: each term names the mechanism that costs time.
# - The sparse persistent kernel wins where the layer is too large for the per-step kernels'
#   weights to stay cheap and small enough to fit in registers; the capacity edge is the limit.
# - The model and the simulator are independent witnesses; notebook 6 adds the third, real
#   hardware.
