"""Fit a GPU spec's uncertain values (types I/M) to recorded microbenchmarks.

    python -m gpusim.calibrate [--spec h100] [--data measurements/h100] [--write]

Only microbenchmarks are used (``microbench.json``), never the campaign cases, so that the
cross-check against the campaign stays an independent test. For each fitted parameter the
matching microbenchmark (written in the IR, :mod:`kernels_ir.kernels.microbench`) is simulated at
two small sizes with the parameter set to ``p``; the simulated cost per operation (slope of the
cycles, which cancels fill and launch) is matched to the measured cost per operation times the
clock by ``scipy.optimize.root_scalar`` (brentq over a plausible bracket). Fitted:

============================== ================= =========================================
parameter                      microbenchmark    simulated at
============================== ================= =========================================
clock_hz                       nvidia-smi SM clock samples taken during the run (median)
smem_latency_cycles            smem_latency      rounds 2 / 4 (chain 32)
l2_hit_latency_cycles          l2_latency        16 lines, rounds 2 / 4 (the first lap is
                                                 cold in both sizes, so the slope is hits)
l2_atomic_same_address_cycles  atomic_same       per_warp 2 / 4 (132 CTAs x 8 warps)
fence_latency_cycles           fence_st0         rounds 8 / 16: one warp's fences alone
fence_after_store_cycles       fence_st1         rounds 8 / 16: a store, then the fence
                                                 (fence.json, measurements/fence.py)
l2_store_visibility_cycles     store_visibility  rounds 4 / 8 (one warp: its load of its own
                                                 pending store is served when it is visible)
fma_latency_cycles             ffma_latency      rounds 2 / 4 of 32 dependent links, one warp
alu_latency_cycles             imad_latency      (pipes.json, measurements/pipes.py; the same
shfl_latency_cycles            shfl_latency      sizes for every pipe); a tanh / exp /
sfu_latency_cycles             tanh_latency      sigmoid link is an FFMA and the function
exp_latency_cycles             exp_latency       (the CUDA backend's tanhf, expf and
sigmoid_latency_cycles         sigmoid_latency   1 / (1 + expf(-x)): software sequences)
cta_barrier_latency_cycles     bar_latency       rounds 2 / 4 of 32 barriers, one CTA of 8
                                                 warps
cta_barrier_drain_cycles       stage_bar_c4      rounds 2 / 4 of 8 links: 4 chunks of 128-bit
                                                 staging stores, then the barrier
                                                 (stage_bar.json, measurements/stage_bar.py;
                                                 the other chunk counts and the links with a
                                                 load after the barrier are held out)
graph_launch_overhead_s        graph_node        library_profile.json (not microbench.json):
                                                 per-node time of a CUDA graph of 1000 vs 100
                                                 one-element adds, minus the simulated
                                                 duration of that kernel (one CTA, one load,
                                                 add, store, L2 warm)
============================== ================= =========================================

The fence is fitted to benchmarks that time it alone and after a store (``fence_st0``,
``fence_st1``), not to the whole grid barrier: it was once fitted to ``grid_barrier`` (998
cycles), which charged the fence with what the barrier's arrive and spin cost beyond the
simulator's (``grid_barrier_nofence``: 1194-1262 cycles on the H100 against the simulator's
817). The grid barrier, the fence after an atomic, after a CTA's stores and barrier, on 132 CTAs,
and the arrive and spin alone over 1-132 CTAs are held-out checks.

``flag_round_trip`` (two SMs and ``_same_sm``) and the full-grid ``poll_storm`` family (relaxed
polls of one vector; relaxed and plain loads over 32 vectors) are not fitted: they are reported
as held-out checks (predicted vs measured after
the fit). ``--write`` rewrites the parameters' lines in ``gpusim/specs/<spec>.toml`` as type
``"C"`` with ``calibration = "<data>/microbench.json"`` and a source naming the measurement; the
result of every run is also written to ``<data>/calibration.json``.

``--transfer-library SRC --spec GPU [--write]`` gives a GPU whose libraries were never measured
(the V100) the ``[library]`` table of the measured GPU ``SRC`` in hardware-relative terms
(:func:`transfer_library`), and reports how the same transfer from the H100 predicts the H200's
own ``library_sweep.json`` (an out-of-sample check).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from pathlib import Path

from kernels_ir.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

# parameter -> (microbenchmark, sizes for the simulation, extra builder arguments, bracket)
FITS = {
    "smem_latency_cycles": ("smem_latency", (2, 4), {}, (5, 200)),
    "l2_hit_latency_cycles": ("l2_latency", (2, 4), {"lines": 1024}, (20, 2000)),
    "l2_far_extra_cycles": ("l2_latency_wide_4", (4, 16), {"lines": 4096}, (0, 640)),
    "l2_atomic_same_address_cycles": ("atomic_same", (2, 4), {}, (0.1, 100)),
    "fence_latency_cycles": ("fence_st0", (8, 16), {}, (0, 8000)),
    "fence_after_store_cycles": ("fence_st1", (8, 16), {}, (0, 8000)),
    "l2_store_visibility_cycles": ("store_visibility_8", (2, 4), {}, (0, 2000)),
    # the SM pipes (measurements/pipes.py): one warp's dependent chain of one kind. FFMA first:
    # a tanh / exp / sigmoid link is an FFMA and the function
    "fma_latency_cycles": ("ffma_latency", (2, 4), {}, (1, 64)),
    "alu_latency_cycles": ("imad_latency", (2, 4), {}, (1, 64)),
    "shfl_latency_cycles": ("shfl_latency", (2, 4), {}, (1, 200)),
    "sfu_latency_cycles": ("tanh_latency", (2, 4), {}, (1, 400)),
    "exp_latency_cycles": ("exp_latency", (2, 4), {}, (1, 1000)),
    "sigmoid_latency_cycles": ("sigmoid_latency", (2, 4), {}, (1, 1000)),
    "cta_barrier_latency_cycles": ("bar_latency", (2, 4), {}, (1, 500)),
    # after the barrier's own latency: 4 chunks of staging stores (the kernels' group) before it
    "cta_barrier_drain_cycles": ("stage_bar_c4", (2, 4), {}, (0, 500)),
}
# a parameter whose benchmark was not recorded falls back to this one
FALLBACK = {"store_visibility_8": ("store_visibility", (4, 8))}
# recorded after the campaign (measurements/l2_partition.py, pipes.py, fence.py), merged over
# microbench.json
EXTRA_RECORDS = ("l2_partition.json", "pipes.json", "fence.json", "stage_bar.json")
HELD_OUT = {"flag_round_trip": ((4, 8), {}), "flag_round_trip_same_sm": ((4, 8), {}),
            "poll_storm": ((2, 4), {}), "poll_storm_rot": ((32, 64), {}),
            "poll_storm_plain": ((32, 64), {}), "grid_barrier": ((4, 8), {})}
HELD_OUT.update({n: ((4, 8) if n.startswith("grid_barrier") else (8, 16), {})
                 for n in ("fence_st8", "fence_st0_atom", "fence_st1_atom", "fence_st1_w8",
                           "fence_st1_atom_w8", "fence_st0_c132", "fence_st1_c132",
                           "fence_st1_atom_w8_c132", "grid_barrier_c1",
                           "grid_barrier_nofence_c1", "grid_barrier_nofence_c8",
                           "grid_barrier_nofence_c33", "grid_barrier_nofence")})
HELD_OUT.update({n: ((2, 4), {}) for n in ("stage_bar_c0", "stage_bar_c1", "stage_bar_c2",
                                           "stage_bar_c8", "stage_bar_c1_ld", "stage_bar_c2_ld",
                                           "stage_bar_c4_ld", "stage_bar_c8_ld")})


def simulated_cycles_per_op(spec, bench: str, sizes, kwargs) -> float:
    from gpusim.engine import simulate
    from kernels_ir.kernels import microbench as mb

    pts = []
    flips = (False, True) if spec.l2_partitions > 1 and spec.l2_far_extra_cycles else (False,)
    for s in sizes:
        m = mb.build(bench, s, **kwargs)
        cyc = [simulate(m.kernel, m.inputs, spec, l2_warm=True, l2_flip=f).cycles for f in flips]
        pts.append((m.ops, sum(cyc) / len(cyc)))
    (o1, c1), (o2, c2) = pts
    return (c2 - c1) / (o2 - o1)


def fit(spec, micro: dict, clock_hz: float) -> dict:
    """Fitted values (and the evidence) for every parameter in :data:`FITS` that was measured."""
    from scipy.optimize import root_scalar

    out = {}
    spec = dataclasses.replace(spec, clock_hz=clock_hz)
    for param, (bench, sizes, kw, (lo, hi)) in FITS.items():
        if bench not in micro and bench in FALLBACK:
            bench, sizes = FALLBACK[bench]
        if bench not in micro:
            continue
        if not micro[bench]["per_op_s"] > 0:
            raise InputError(f"microbenchmark {bench}: per_op_s={micro[bench]['per_op_s']!r}; "
                             f"fitting {param} needs a positive time per operation")
        target = micro[bench]["per_op_s"] * clock_hz
        kind = type(getattr(spec, param))

        def err(p, param=param, bench=bench, sizes=sizes, kw=kw, base=spec, kind=kind,
                target=target):
            s = dataclasses.replace(base, **{param: float(p) if kind is float else
                                             max(1, int(round(p)))})
            return simulated_cycles_per_op(s, bench, sizes, kw) - target

        p0 = float(getattr(spec, param))
        try:  # bracketing (brentq) over the plausible range: the cost can be flat in places
            sol = root_scalar(err, bracket=(lo, hi), method="brentq", xtol=0.05, maxiter=40)
            value, converged = sol.root, bool(sol.converged)
        except ValueError:  # no sign change over the range: keep the closer end
            value = lo if abs(err(lo)) < abs(err(hi)) else hi
            converged = False
        value = round(value, 2) if kind is float else int(round(value))
        resid = err(value)
        out[param] = {"value": value, "previous": p0, "benchmark": bench,
                      "measured_per_op_s": micro[bench]["per_op_s"],
                      "measured_cycles": target, "residual_cycles": resid,
                      "converged": converged}
        if "record" in micro[bench]:
            out[param]["record"] = micro[bench]["record"]
        spec = dataclasses.replace(spec, **{param: value})
    held = {}
    for bench, (sizes, kw) in HELD_OUT.items():
        if bench in micro:
            pred = simulated_cycles_per_op(spec, bench, sizes, kw) / clock_hz
            meas = micro[bench]["per_op_s"]
            held[bench] = {"predicted_s": pred, "measured_s": meas,
                           "ape": abs(pred - meas) / meas}
    return {"clock_hz": clock_hz, "params": out, "held_out": held}


def node_kernel():
    """The kernel of a graph node in ``library_profile.json``'s ``graph_node``: one element,
    ``x += 1`` (one CTA; lane 0 loads, adds and stores)."""
    from kernels_ir import F32, Builder, verify

    b = Builder("graph_node", grid=1, block=32)
    x = b.global_buffer("x", F32, 4, role="inout")
    lane = b.sreg("lane")
    with b.if_(b.isetp("eq", lane, 0)):
        v = b.ldg(x, 0)
        b.stg(x, 0, b.fadd(v, 1.0))
    return verify(b.build())


def fit_graph_node(spec, profile: dict, clock_hz: float) -> dict | None:
    """``graph_launch_overhead_s`` from the recorded per-node time of a CUDA graph: what the
    node costs beyond the simulated execution of its kernel."""
    import numpy as np

    from gpusim.engine import simulate

    node = (profile.get("graph_node") or {}).get("per_node_s")
    if not node:
        return None
    spec = dataclasses.replace(spec, clock_hz=clock_hz)
    res = simulate(node_kernel(), {"x": np.zeros(4, np.float32)}, spec, l2_warm=True)
    value = float(node) - res.cycles / clock_hz
    if not value > 0:
        raise InputError(f"graph_node per_node_s={node} is shorter than the simulated kernel "
                         f"({res.cycles / clock_hz:.3g} s)")
    return {"value": float(f"{value:.4g}"), "previous": spec.graph_launch_overhead_s,
            "benchmark": "graph_node", "measured_per_node_s": float(node),
            "simulated_kernel_s": res.cycles / clock_hz}


def fit_library(sweep: dict, dtype: str = "fp32") -> dict:
    """The spec's ``[library]`` table (:data:`gpusim.specs.LIBRARY_PARAMS`) fitted to the
    recorded library sweep (``library_sweep.json``: every cuBLAS path and cuSPARSE at layer sizes
    outside the campaign): the least mean absolute relative error over every (layer, path)
    per-step time (``scipy.optimize.linprog``; the model of
    :func:`models.analytical.library_path_parts` is linear in its fixed costs and inverse
    throughputs, all >= 0). Per-step timings cannot separate ``node_s`` from the product
    kernels' fixed costs well (both grow with the step's node count), so the values describe
    the paths' totals, not any one kernel's duration. Also reports the fit's error on the sweep and
    a leave-one-hidden-size-out cross-validation (each hidden size predicted from the others)."""
    import numpy as np
    from scipy.optimize import linprog

    from gpusim.specs import LIBRARY_CLASSES, LIBRARY_PARAMS
    from models.analytical import library_class

    pts = _library_points(sweep, dtype)
    if len(pts) < 2 * len(LIBRARY_PARAMS):
        raise InputError(f"library_sweep has {len(pts)} timed paths; the fit of "
                         f"{len(LIBRARY_PARAMS)} parameters needs at least "
                         f"{2 * len(LIBRARY_PARAMS)}")
    unused = [c for c in LIBRARY_CLASSES if c not in {library_class(q[0], q[2]) for q in pts}]
    if unused:
        raise InputError(f"library_sweep never times a {unused[0]} kernel; cannot fit it")
    # linear in x = (node_s, <class>_fixed_s ..., 1 / <class>_bytes_per_s ...), in us and
    # 1 / (TB/s): the relative residuals are linear in x too
    names = list(LIBRARY_PARAMS)
    scale = {k: 1e-12 if k.endswith("_per_s") else 1e-6 for k in names}

    def params(x):
        return {k: (1.0 / (max(v, 1e-9) * scale[k]) if k.endswith("_per_s") else v * scale[k])
                for k, v in zip(names, x, strict=True)}

    def probe(k):
        """The library whose only cost is x[k] = 1 (1 us, or 1 / (1 TB/s))."""
        lib = {kk: (math.inf if kk.endswith("_per_s") else 0.0) for kk in names}
        lib[k] = 1.0 / scale[k] if k.endswith("_per_s") else scale[k]
        return lib

    def predict(lib, q):
        return _library_predict(lib, q, dtype)
    A = np.array([[predict(probe(k), q) for k in names] for q in pts])
    t = np.array([q[-1] for q in pts])

    def solve(sel):
        """x >= 0 minimising the mean absolute relative error over the selected timings (the
        cross-check's own measure; a linear programme: min sum e, -e <= M x - 1 <= e)."""
        m = A[sel] / t[sel, None]
        rows, cols = m.shape
        eye = np.eye(rows)
        sol = linprog(np.r_[np.zeros(cols), np.ones(rows)],
                      A_ub=np.block([[m, -eye], [-m, -eye]]),
                      b_ub=np.r_[np.ones(rows), -np.ones(rows)],
                      bounds=[(0, None)] * (cols + rows), method="highs")
        if not sol.success:
            raise InputError(f"library fit failed: {sol.message}")
        return params(sol.x[:cols])

    hidden = np.array([q[1] for q in pts])
    lib = solve(np.ones(len(pts), bool))
    ape = [abs(predict(lib, q) / q[-1] - 1) for q in pts]
    cv = []
    for hold in sorted(set(hidden.tolist())):
        held = solve(hidden != hold)
        cv += [abs(predict(held, q) / q[-1] - 1) for q, h in zip(pts, hidden, strict=True)
               if h == hold]
    return {"values": {k: float(f"{v:.4g}") for k, v in lib.items()}, "points": len(pts),
            "fit_mape": float(np.mean(ape)), "fit_max_ape": float(np.max(ape)),
            "cv_mape": float(np.mean(cv)),
            "method": "scipy.optimize.linprog: least mean absolute relative error (x >= 0: "
                      "fixed costs, inverse throughputs) over the per-step times of every (layer, "
                      "path) of library_sweep.json"}


def _library_points(sweep: dict, dtype: str = "fp32") -> list[tuple]:
    """``(path, hidden, batch, W bytes, CSR bytes, rows, per-step s)`` of every timed path of
    the layers of weight type ``dtype`` (a layer without ``dtype`` is fp32) of a
    ``library_sweep.json`` / ``library_sweep_cells.json`` (a gated layer has ``rows``); a missing
    field or a time that is not positive is an InputError."""
    from models.analytical import library_matrix_bytes

    vb = 2 if dtype == "fp16" else 4       # as models.analytical.libraries prices them
    pts = []
    for key, layer in (sweep.get("layers") or {}).items():
        if layer.get("dtype", "fp32") != dtype:
            continue
        try:
            n, b, nnz = int(layer["hidden"]), int(layer["batch"]), int(layer["nnz"])
            r = int(layer.get("rows", n))
            paths = {p: float(v["per_step_s"]) for p, v in layer["paths"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"library_sweep layer {key!r}: missing or bad field {exc}") from None
        for path, t in paths.items():
            if not t > 0:
                raise InputError(f"library_sweep layer {key!r} {path}: per_step_s={t} is not a "
                                 f"positive time")
            pts.append((path, n, b, *library_matrix_bytes(float(r), float(n), float(nnz), vb,
                                                          vb), float(r), t))
    return pts


def _library_predict(lib: dict, q: tuple, dtype: str = "fp32") -> float:
    from models.analytical import library_path_parts

    path, n, b, w, c, r, _ = q
    fixed, streaming = library_path_parts(lib, path, b, r, n, w, c, dtype)
    return float(fixed + streaming)


def library_errors(lib: dict, sweep: dict, dtype: str = "fp32") -> dict:
    """How the ``[library]`` values ``lib`` predict a recorded ``library_sweep.json``: MAPE and
    the largest error over every (layer, path) per-step time."""
    import numpy as np

    pts = _library_points(sweep, dtype)
    if not pts:
        raise InputError("library_sweep has no timed path")
    ape = np.array([abs(_library_predict(lib, q, dtype) / q[-1] - 1) for q in pts])
    return {"points": len(pts), "mape": float(ape.mean()), "max_ape": float(ape.max())}


# Library kernel classes that stream their matrix once per product (cuBLAS GEMV, cuSPARSE CSR
# SpMV: BLAS-2, memory bound): their fitted throughput is a fraction of the GPU's DRAM bandwidth.
# The others (split-K GEMM kernels for 2-8 fp32 columns, the batch-8 GEMM, SpMM's gathers) run
# far below the bandwidth bound (65% of DRAM and less on the H100): their rate is set inside the
# SMs and scales with sm_count x clock_hz, but no faster than the streaming classes reach.
STREAMING_CLASSES = ("gemv", "spmv")


def transfer_library(source, target, table: str = "library") -> dict:
    """The ``[library]`` values for ``target`` (a spec) transferred from ``source``'s fitted
    table, in hardware-relative terms:

    - ``node_s`` and every ``<class>_fixed_s``: the same absolute time. They are the per-node
      cost of a CUDA graph of small kernels (about 2.5 us on the H100, where the simulated
      kernel of a node takes 0.26 us): the launch path of the node, the same driver and graph
      machinery, not a GPU rate that a spec field would scale;
    - ``<class>_bytes_per_s`` of a streaming class (:data:`STREAMING_CLASSES`): the same fraction
      of ``dram_bandwidth_bytes_per_s``;
    - of the other classes: scaled by ``sm_count * clock_hz``, at most the best streaming class's
      fraction of the target's DRAM bandwidth.

    Returns ``{name: value}`` for every :data:`gpusim.specs.LIBRARY_PARAMS` (4 significant
    digits) and ``"_sources"``: the rule of each value, as a spec source line.
    """
    from gpusim.specs import LIBRARY_CLASSES

    fp16 = table == "library_fp16"
    lib = source.library_params_fp16 if fp16 else source.library_params
    if lib is None or (source.library_fp16_from if fp16 else source.library_from):
        raise InputError(f"transfer_library: {source.name} has no fitted [{table}] table to "
                         f"transfer (only a GPU whose library_sweep.json was fitted can be a "
                         f"source)")
    dram_s, dram_t = source.dram_bandwidth_bytes_per_s, target.dram_bandwidth_bytes_per_s
    sm = target.sm_count * target.clock_hz / (source.sm_count * source.clock_hz)
    best = max(lib[f"{c}_bytes_per_s"] / dram_s for c in STREAMING_CLASSES)
    head = (f"transferred from the {table} table of gpusim/specs/{source.name}.toml "
            f"(gpusim.calibrate.transfer_library)")
    out = {"node_s": lib["node_s"]}
    src = {"node_s": f"{head}: the same absolute time"}
    for c in LIBRARY_CLASSES:
        out[f"{c}_fixed_s"] = lib[f"{c}_fixed_s"]
        src[f"{c}_fixed_s"] = f"{head}: the same absolute time"
        t = lib[f"{c}_bytes_per_s"]
        if c in STREAMING_CLASSES:
            out[f"{c}_bytes_per_s"] = t * dram_t / dram_s
            src[f"{c}_bytes_per_s"] = (f"{head}: {t / dram_s:.3f} of dram_bandwidth_bytes_per_s, "
                                       f"as on the {source.name} (streams its matrix)")
        else:
            out[f"{c}_bytes_per_s"] = min(t * sm, best * dram_t)
            capped = ", which binds" if t * sm > best * dram_t else ""
            src[f"{c}_bytes_per_s"] = (f"{head}: x {sm:.3f} (sm_count x clock_hz), at most "
                                       f"{best:.3f} of dram_bandwidth_bytes_per_s{capped}")
    values = {k: float(f"{v:.4g}") for k, v in out.items()}
    return {**values, "_sources": src}


def write_library(spec_path: Path, fitted: dict, record: str, table: str = "library") -> None:
    """Write (or replace) the spec's ``[library]`` (or ``[library_fp16]``) table: every value
    type C with its record."""
    from gpusim.specs import LIBRARY_PARAMS

    what = "fp16 " if table == "library_fp16" else ""
    src = (f"fitted by gpusim.calibrate (fit_library) to {fitted['points']} {what}library "
           f"timings outside the campaign: fit MAPE {100 * fitted['fit_mape']:.1f}%, "
           f"leave-one-hidden-out {100 * fitted['cv_mape']:.1f}%")
    lines = [f"[{table}]", f"# The {what}library baselines' kernels, fitted to timings at layer "
             "sizes outside the campaign", "# (models.analytical: library_path_parts)."]
    for k, decl in LIBRARY_PARAMS.items():
        lines.append(f'{k} = {{ value = {fitted["values"][k]}, unit = "{decl.unit}", type = "C", '
                     f'source = "{src}", calibration = "{record}" }}')
    _replace_library(spec_path, lines, table)


def write_transferred_library(spec_path: Path, transferred: dict, source: str,
                              check: str, table: str = "library") -> None:
    """Write (or replace) the spec's ``[library]`` table with the values of
    :func:`transfer_library` from the measured GPU ``source``: type I (inferred), each with its
    rule as source, and ``transferred_from``; ``check`` (the out-of-sample result) goes in the
    table's comment."""
    import textwrap

    from gpusim.specs import LIBRARY_PARAMS

    what = "fp16 " if table == "library_fp16" else ""
    sweep = "library_sweep_cells.json" if table == "library_fp16" else "library_sweep.json"
    measured = (ROOT / "measurements" / spec_path.stem / sweep).exists()
    state = (f"measured on this GPU ({sweep}) but kept as" if measured else
             "not measured on this GPU:")
    head = (f"The {what}library baselines' kernels, {state} the {source} fit "
            f"in hardware-relative terms (python -m gpusim.calibrate --transfer-library {source} "
            f"--spec {spec_path.stem}; models.analytical: library_path_parts). {check}")
    lines = [f"[{table}]", *(f"# {t}" for t in textwrap.wrap(head, 96)),
             f'transferred_from = "{source}"']
    for k, decl in LIBRARY_PARAMS.items():
        lines.append(f'{k} = {{ value = {transferred[k]}, unit = "{decl.unit}", type = "I", '
                     f'source = "{transferred["_sources"][k]}" }}')
    _replace_library(spec_path, lines, table)


def _section(text: str, table: str) -> tuple[int, int, int] | None:
    """(start of the ``[table]`` header, end of the header, end of the table's body: the next
    header or the end of the text) in a spec's text, or None when it has no such table."""
    start = re.search(rf"^\[{table}\]\s*$", text, re.M)
    if not start:
        return None
    nxt = re.search(r"^\[", text[start.end():], re.M)
    return start.start(), start.end(), start.end() + nxt.start() if nxt else len(text)


def _replace_library(spec_path: Path, lines: list[str], table: str = "library") -> None:
    """Replace the spec's ``[table]`` by ``lines``, keeping its measured grid's ``table``
    entry (:func:`_main_library_table`) when it has one."""
    text = spec_path.read_text()
    sec = _section(text, table)
    if sec:
        head, body, end = sec
        lines = lines + re.findall(r"^table = .*$", text[body:end], re.M)
        text = text[:head] + text[end:]
    spec_path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")


def transfer_check(source: str = "h100", target: str = "h200", table: str = "library") -> dict:
    """The transfer validated out of sample: ``source``'s table transferred to ``target`` (a GPU
    with its own recorded sweep) against ``target``'s ``library_sweep.json`` (``table``
    ``library_fp16``: the fp16 layers of its ``library_sweep_cells.json``), next to ``target``'s
    own fit of that sweep and ``source``'s table used unchanged."""
    from gpusim.measurements import load_json
    from gpusim.specs import load_spec

    fp16 = table == "library_fp16"
    dtype = "fp16" if fp16 else "fp32"
    src, tgt = load_spec(source), load_spec(target)
    sweep = load_json(ROOT / "measurements" / target /
                      ("library_sweep_cells.json" if fp16 else "library_sweep.json"))
    moved = {k: v for k, v in transfer_library(src, tgt, table).items() if k != "_sources"}
    own = fit_library(sweep, dtype)["values"] if fp16 else tgt.library_params
    return {"source": source, "target": target, "table": table,
            "transferred": library_errors(moved, sweep, dtype),
            "own_fit": library_errors(own, sweep, dtype),
            "unchanged": library_errors(src.library_params_fp16 if fp16 else
                                        src.library_params, sweep, dtype)}


def write_spec(spec_path: Path, result: dict, record: str, only: set | None = None) -> None:
    """Rewrite the fitted parameters' lines (those in ``only``, default all) as type C with
    their calibration record."""
    text = spec_path.read_text()
    entries = dict(result["params"])
    entries["clock_hz"] = {"value": result["clock_hz"], "benchmark": "nvidia-smi clocks.sm "
                           "samples during the campaign (median)"}
    entries = {k: v for k, v in entries.items() if only is None or k in only}
    for param, e in entries.items():
        m = re.search(rf'^{param} = \{{ value = [^,]+, unit = "([^"]+)".*$', text, re.M)
        if not m:
            raise InputError(f"{spec_path}: no line for parameter {param!r}")
        unit = m.group(1)
        if "measured_per_op_s" in e:
            src = (f"fitted by gpusim.calibrate to microbenchmark {e['benchmark']} "
                   f"({e['measured_per_op_s'] * 1e9:.2f} ns/op measured); was {e['previous']}")
        elif "measured_per_node_s" in e:
            src = (f"gpusim.calibrate: CUDA-graph node {e['measured_per_node_s'] * 1e9:.0f} ns "
                   f"measured ({e['benchmark']}) minus {e['simulated_kernel_s'] * 1e9:.0f} ns "
                   f"simulated for its kernel; was {e['previous']}")
        else:
            src = f"{e['benchmark']}"
        line = (f'{param} = {{ value = {e["value"]}, unit = "{unit}", type = "C", '
                f'source = "{src}", calibration = "{e.get("record", record)}" }}')
        text = text[:m.start()] + line + text[m.end():]
    spec_path.write_text(text)


def _record(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


GRID_RECORDS = {"cublas": "library_grid_cublas.json.gz",
                "cusparse": "library_grid_cusparse.json.gz",
                "cublas_fp16": "library_grid_cublas_fp16.json.gz",
                "cusparse_fp16": "library_grid_cusparse_fp16.json.gz"}


_LIB_NAMES = {"cublas": "cuBLAS", "cusparse": "cuSPARSE", "cublas_fp16": "cuBLAS fp16",
              "cusparse_fp16": "cuSPARSE fp16"}


def grid_failures(rec: dict) -> set[tuple[str, int, int, float]]:
    """(cell, hidden, batch, density) of every point of a library grid record that failed
    (its ``errors``, keyed ``"<cell>-h<hidden>-b<batch>-d<density>"`` by
    ``measurements/library_grid.py``)."""
    out = set()
    for k in rec.get("errors", {}):
        cell, n, b, d = k.split("-")
        out.add((cell, int(n[1:]), int(b[1:]), float(d[1:])))
    return out


def library_table_from_grid(grids: dict, gpu: str, records: tuple[str, ...] = ()) -> dict:
    """The measured library grid (``measurements/library_grid.py``'s records, ``grids``: the
    table's section, "cublas", "cusparse" and optionally "cublas_fp16" / "cusparse_fp16", to
    its record) as the table :func:`gpusim.specs.load_library_table` reads: per section, cell
    and batch the grid's hidden sizes (and cuSPARSE's densities) and their step times; a point
    that failed its values check (in the record's ``errors``) is ``null``."""
    out = {"format_version": 1, "gpu": gpu, "records": list(records),
           "note": "step times (s) of the library baselines measured on a grid of layer shapes "
                   "(measurements/library_grid.py); written by python -m gpusim.calibrate "
                   "--library-table; read by models.analytical.library_table; null: a point "
                   "that failed its values check"}
    for lib, rec in grids.items():
        groups: dict = {}
        for p in rec["points"]:
            key = (p["cell"], str(p["batch"]))
            groups.setdefault(key, {})[(p["hidden"], p["density"])] = p["per_step_s"]
        for cell, n, b, d in grid_failures(rec):
            groups.setdefault((cell, str(b)), {})[(n, d)] = None
        out[lib] = {}
        for (cell, b), pts in sorted(groups.items()):
            hid = sorted({n for n, _ in pts})
            if lib.startswith("cublas"):         # the product is dense: one density a size
                by_hidden = {n: t for (n, _), t in pts.items()}
                if len(by_hidden) != len(pts):
                    raise InputError(f"library grid: {lib} {cell} batch {b} has several "
                                     f"densities at one hidden size; accepted: one point a size")
                entry = {"hidden": hid, "per_step_s": [by_hidden[n] for n in hid]}
            else:
                dens = sorted({d for _, d in pts})
                missing = [(n, d) for n in hid for d in dens if (n, d) not in pts]
                if missing:
                    raise InputError(f"library grid: {lib} {cell} batch {b} lacks the points "
                                     f"{missing[:3]}; a grid needs every (hidden, density) pair")
                entry = {"hidden": hid, "density": dens,
                         "per_step_s": [[pts[(n, d)] for d in dens] for n in hid]}
            out[lib].setdefault(cell, {})[b] = entry
    return out


def table_leave_one_out(table: dict) -> dict:
    """How well the table prices a size it lacks: every grid point inside its row (not the
    smallest or largest hidden) interpolated from the table without it. Returns per section
    ``{"points", "mape", "max_ape", "worst"}``; points next to a missing one are left out."""
    import numpy as np

    from models.analytical.library_table import table_step_s

    out = {}
    for lib, cells in table.items():
        errs = []
        for cell, batches in cells.items():
            for b, (hid, dens, t) in batches.items():
                for i in range(1, hid.size - 1):
                    keep = np.arange(hid.size) != i
                    sub = {lib: {cell: {b: (hid[keep], dens, t[keep])}}}
                    for j, d in enumerate([None] if dens is None else dens):
                        want = t[i] if dens is None else t[i, j]
                        got = table_step_s(sub, lib, cell, b, [hid[i]],
                                           [0.0 if d is None else d])[0]
                        if np.isfinite(got) and np.isfinite(want):
                            errs.append((abs(got / want - 1), f"{cell}-h{int(hid[i])}-b{b}"
                                         + ("" if d is None else f"-d{d}")))
        errs.sort()
        out[lib] = {"points": len(errs), "mape": sum(e for e, _ in errs) / len(errs),
                    "max_ape": errs[-1][0], "worst": errs[-1][1]}
    return out


def _main_library_table(gpu: str, write: bool) -> int:
    """``--library-table GPU``: the table from ``measurements/<gpu>/library_grid_*.json.gz``;
    ``--write``: into ``gpusim/specs/<gpu>_library_table.json`` and the spec's ``[library]``."""
    from gpusim.measurements import load_json
    from gpusim.specs import SPEC_DIR, TABLE_SUFFIX, load_library_table, spec_path

    paths = {lib: ROOT / "measurements" / gpu / name for lib, name in GRID_RECORDS.items()}
    for lib in ("cublas", "cusparse"):
        if not paths[lib].exists():
            raise SystemExit(f"--library-table {gpu}: {paths[lib]} is missing; measure it with "
                             f"measurements/library_grid.py")
    paths = {lib: p for lib, p in paths.items() if p.exists()}
    recs = {lib: load_json(p) for lib, p in paths.items()}
    table = library_table_from_grid(recs, gpu=gpu,
                                    records=tuple(_record(p) for p in paths.values()))
    name = f"{gpu}{TABLE_SUFFIX}"
    text = json.dumps(table, indent=1) + "\n"
    if not write:
        print(text[:2000])
        return 0
    (SPEC_DIR / name).write_text(text)
    load_library_table.cache_clear()
    loo = table_leave_one_out(load_library_table(name))
    n = sum(len(r["points"]) for r in recs.values())
    fp16 = " and their fp16 paths" if "cublas_fp16" in recs else ""
    src = (f"step times of cuBLAS and cuSPARSE{fp16} measured on a grid of {n} layer shapes "
           f"outside every campaign (measurements/library_grid.py), interpolated by models."
           f"analytical.library_table; a grid size left out and interpolated from its "
           f"neighbours: " + ", ".join(
               f"{_LIB_NAMES[lib]} MAPE {100 * v['mape']:.1f}% (worst "
               f"{100 * v['max_ape']:.0f}%, {v['worst']})" for lib, v in loo.items()))
    line = (f'table = {{ value = "{name}", unit = "file", type = "C", source = "{src}", '
            f'calibration = "{_record(paths["cublas"])}" }}')
    sp = spec_path(gpu)
    text = sp.read_text()
    sec = _section(text, "library")
    if not sec:
        raise SystemExit(f"--library-table {gpu}: {sp} has no [library] table to extend")
    _, body, end = sec
    kept = re.sub(r"^table = .*\n", "", text[body:end], flags=re.M)
    sp.write_text(text[:body] + kept.rstrip("\n") + "\n" + line + "\n"
                  + ("\n" + text[end:] if end < len(text) else ""))
    print(f"wrote {SPEC_DIR / name} and the [library] table entry of {sp}: {src}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from gpusim.measurements import load_json
    from gpusim.specs import load_spec, spec_path

    ap = argparse.ArgumentParser(prog="python -m gpusim.calibrate", description=__doc__.split(
        "\n\n")[0].strip())
    ap.add_argument("--data", default=None,
                    help="measurement folder (default: the recorded one of --spec, "
                         "gpusim.data.measurement_dir)")
    ap.add_argument("--spec", default="h100")
    ap.add_argument("--write", action="store_true", help="write the fitted values into the spec")
    ap.add_argument("--transfer-library", default=None, metavar="SRC",
                    help="give --spec the [library] table of the measured GPU SRC in "
                         "hardware-relative terms (with --write: into its spec file)")
    ap.add_argument("--only", default=None,
                    help="with --write: comma-separated parameters to write (\"library\" for "
                         "the [library] table); default all that were fitted")
    ap.add_argument("--library-table", default=None, metavar="GPU",
                    help="the library grid measured on GPU (measurements/<GPU>/library_grid_*"
                         ".json.gz) as the table the model interpolates (with --write: into "
                         "gpusim/specs/ and the spec's [library] table)")
    args = ap.parse_args(argv)
    if args.library_table:
        return _main_library_table(args.library_table, args.write)
    if args.transfer_library:
        return _main_transfer(args.transfer_library, args.spec, args.write)
    try:
        if args.data is None:
            from gpusim.data import measurement_dir

            args.data = str(measurement_dir(args.spec))
        mpath = Path(args.data) / "microbench.json"
        m = load_json(mpath)
        micro = {k: v for k, v in m.get("results", {}).items() if v.get("status") == "ok"}
        for extra in EXTRA_RECORDS:
            epath = Path(args.data) / extra
            if os.path.lexists(epath):  # a bad file is reported, not skipped
                micro.update({k: {**v, "record": _record(epath)} for k, v in
                              load_json(epath).get("results", {}).items()
                              if v.get("status") == "ok"})
        samples = m.get("provenance", {}).get("sm_clock_mhz_samples") or []
        spec = load_spec(args.spec)
        busy = sorted(s for s in samples if s > 0)
        clock = busy[len(busy) // 2] * 1e6 if busy else spec.clock_hz
        res = fit(spec, micro, clock)
        record = _record(mpath)
        res["record"] = record
        ppath = Path(args.data) / "library_profile.json"
        if os.path.lexists(ppath):
            g = fit_graph_node(spec, load_json(ppath), clock)
            if g is not None:
                g["record"] = _record(ppath)
                res["params"]["graph_launch_overhead_s"] = g
        lpath = Path(args.data) / "library_sweep.json"
        if os.path.lexists(lpath):
            res["library"] = {**fit_library(load_json(lpath)), "record": _record(lpath)}
        cpath = Path(args.data) / "library_sweep_cells.json"
        if os.path.lexists(cpath):   # the fp16 paths' own table (its fp16 layers)
            res["library_fp16"] = {**fit_library(load_json(cpath), "fp16"),
                                   "record": _record(cpath)}
        only = None if args.only is None else {x.strip() for x in args.only.split(",")}
        known = set(res["params"]) | {"clock_hz"} | {t for t in ("library", "library_fp16")
                                                      if t in res}
        if only is not None and not only <= known:
            raise InputError(f"--only {sorted(only - known)[0]!r} was not fitted from "
                             f"{args.data}; accepted: {', '.join(sorted(known))}")
        (Path(args.data) / "calibration.json").write_text(json.dumps(res, indent=1) + "\n")
        if args.write:
            write_spec(spec_path(args.spec), res, record, only)
            for table in ("library", "library_fp16"):
                if table in res and (only is None or table in only):
                    write_library(spec_path(args.spec), res[table], res[table]["record"], table)
            load_spec(args.spec)  # the rewritten file must still validate
    except (InputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"clock_hz = {res['clock_hz']:.4g}")
    for p, e in res["params"].items():
        resid = (f", residual {e['residual_cycles']:+.2f} cycles" if "residual_cycles" in e
                 else "")
        print(f"{p:32s} {e['previous']:>8} -> {e['value']:>8}  ({e['benchmark']}{resid})")
    for table in ("library", "library_fp16"):
        if table in res:
            lib = res[table]
            print(f"{table} ({lib['points']} timings): fit MAPE {100 * lib['fit_mape']:.1f}%, "
                  f"leave-one-hidden-out {100 * lib['cv_mape']:.1f}%: " + ", ".join(
                      f"{k} {v:.3g}" for k, v in lib["values"].items()))
    for b, e in res["held_out"].items():
        print(f"held out {b}: predicted {e['predicted_s'] * 1e9:.0f} ns, measured "
              f"{e['measured_s'] * 1e9:.0f} ns ({100 * e['ape']:.0f}% off)")
    return 0


def _fp16_transfer_note(source: str) -> str:
    """The out-of-sample check of the fp16 table's transfer, for the spec's comment: against the
    H200's own fp16 sweep where it is recorded."""
    if source != "h100" or not (ROOT / "measurements" / "h200" /
                                "library_sweep_cells.json").exists():
        return f"Only the {source} has an fp16 library sweep: this transfer is not checked."
    return _check_note(transfer_check(source, "h200", "library_fp16"),
                       "the fp16 layers of the H200's own library_sweep_cells.json")


def _check_note(chk: dict, what: str) -> str:
    """The spec comment of a :func:`transfer_check` result on the sweep ``what``."""
    return (f"Out of sample, the same transfer h100 -> h200 predicts {what} "
            f"({chk['transferred']['points']} timings) at MAPE "
            f"{100 * chk['transferred']['mape']:.1f}% (its own fit "
            f"{100 * chk['own_fit']['mape']:.1f}%, the h100 values unchanged "
            f"{100 * chk['unchanged']['mape']:.1f}%).")


def _main_transfer(source: str, target: str, write: bool) -> int:
    from gpusim.specs import load_spec, spec_path

    try:
        src, tgt = load_spec(source), load_spec(target)
        moved = transfer_library(src, tgt)
        note = ("" if source != "h100" else
                _check_note(transfer_check(source, "h200"), "the H200's own library_sweep.json"))
        moved16 = (transfer_library(src, tgt, "library_fp16")
                   if src.library_params_fp16 and not src.library_fp16_from else None)
        if write:
            if not (tgt.library_params and not tgt.library_from):   # never over a fitted one
                write_transferred_library(spec_path(target), moved, source, note)
            if moved16 is not None and not (tgt.library_params_fp16 and
                                            not tgt.library_fp16_from):
                write_transferred_library(spec_path(target), moved16, source,
                                          _fp16_transfer_note(source), "library_fp16")
            load_spec(target)  # the rewritten file must still validate
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for k, v in moved.items():
        if k != "_sources":
            print(f"{k:20s} {v:>12.4g}  {moved['_sources'][k]}")
    if note:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
