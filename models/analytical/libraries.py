"""The per-step baselines: cuBLAS and cuSPARSE (graph nodes of a step), and the CSR kernel's node.

Per-step baselines (in a CUDA graph, docs/cuda_notes.md s1.5: a step is its graph's nodes)
------------------------------------------------------------------------------------------
A step is the chain of kernels the measurement harness (:mod:`gpusim.backends.baselines`) puts in
its CUDA graph; :data:`LIBRARY_NODES` lists them per path, as ``torch.profiler`` recorded them
(``measurements/h100/library_profile.json``; a test checks the counts against that record).
The library kernels are black boxes the simulator cannot run; two models of their cost:

1. A spec with a ``[library]`` table: every small node (elementwise, copy, memset, split-K
   reduce, CSR partition) costs ``node_s``; the product kernel of class :func:`library_class`
   (gemv, gemm, gemm8, spmv, spmm) costs ``<class>_fixed_s`` + its bytes /
   ``<class>_bytes_per_s``. The fitted throughputs fold in what the bandwidth bound misses
   (cuBLAS's split-K kernels for skinny fp32 batches, cuSPARSE's SpMM gathers); one throughput
   per class, no L2 / DRAM regime switch (on the H100 a 38 MB weight matrix already streams at
   DRAM-like rates, below the 50 MB L2). The H100 and H200 tables are fitted by
   ``gpusim.calibrate`` to ``measurements/<gpu>/library_sweep.json`` (the same harness at 24
   layer sizes, none a campaign size). The V100's libraries were never measured: its table is
   the H100 fit transferred in hardware-relative terms (``transferred_from = "h100"``,
   :func:`gpusim.calibrate.transfer_library`): the node and fixed costs in absolute time (they
   are the launch path of a graph node, about 2.5 us where the node's kernel runs 0.26 us: the
   driver's and the graph's work, not a GPU rate), the streaming classes' throughputs (GEMV,
   SpMV: one pass over the matrix) as the same fraction of ``dram_bandwidth_bytes_per_s``, the
   others' (split-K GEMM, batch-8 GEMM, SpMM: 65% of the DRAM bandwidth and less on the H100,
   bound inside the SMs) scaled by ``sm_count * clock_hz`` and capped at the best streaming
   fraction of the DRAM bandwidth (on the V100 the cap binds for both GEMM classes). Out of
   sample, the same transfer from the H100 to the H200 predicts the H200's own sweep at MAPE
   13.9% (its own fit 13.2%, the H100 values unchanged 16.2%); the H200 has the H100's SMs and
   clock, so that check exercises the DRAM scaling and the absolute fixed costs, not the
   ``sm_count * clock_hz`` rule, which stays untested.
   A spec whose ``[library]`` table also names a measured grid (``table``; the H200's) prices
   layers that the grid covers (fp32 weights; fp16 ones where the table has the fp16 paths'
   grid) by interpolating its measured step times instead
   (:mod:`.library_table`, :func:`_measured`): cuBLAS's kernel switches at sizes of its own
   defeat one throughput per class. The breakdown then holds ``measured_grid_s`` alone.
2. Otherwise (a spec without the table) each kernel (graph node) costs
   ``graph_launch_overhead_s`` + two memory round trips (its loads', then its stores' until the
   kernel completes: the simulated duration of a one-element kernel, which the calibration of
   ``graph_launch_overhead_s`` subtracts) + its bytes at the bandwidth of where they live (L2
   ``l2_slices * l2_bytes_per_cycle_per_slice * clock`` if the streamed data fit in
   ``l2_size_bytes``, else ``dram_bandwidth_bytes_per_s``). On the H100 this under-predicts the
   measured baselines by about 55% (fp32 cuBLAS GEMM kernels at batch 2-8 run 5-30x slower than
   the bandwidth bound, docs/cuda_notes.md s3 and s5; a small node costs about 1.2 us, not 1.0).

The paths:
- ``cublas``: the best of one GEMM (a GEMV kernel at B = 1, else GEMM + split-K reduce), B GEMVs
  each copied into its output column, and the GEMM with the batch padded to 8 (copy in, GEMM +
  reduce, copy out); then ``torch.add`` and ``torch.tanh``.
- ``cusparse``: a row-partition kernel, the CSR SpMV (+ memset of y) or SpMM (+ scale and fill
  of y) streaming values + indices + row pointers and h, the copy into y, add and tanh.
- ``csr-row-per-warp``: our kernel (``kernels_ir/kernels/csr_baseline.py``), one graph node
  (``graph_launch_overhead_s``) plus its cycles (:func:`.csr._csr_row_per_warp`, :mod:`.csr`).
"""

from __future__ import annotations

import numpy as np

from .. import capacity as cap
from .csr import csr_step_cycles
from .variants import KernelTimes


# Kernels (graph nodes) of one step of each library baseline path, as (kind, bytes) with bytes a
# function of (rows, N, B, weight bytes W, CSR bytes C): recorded with torch.profiler on the H100
# (measurements/h100/library_profile.json, torch 2.11 / CUDA 13); "stream" nodes carry the
# product's weights, the others move vectors. tests/models/test_analytical.py checks the counts.
def _vec(k):
    return lambda r, n, b, w, c: k * r * b * 4


_EPILOGUE = (("add", _vec(3)), ("tanh", _vec(2)))
LIBRARY_NODES = {
    "cublas_gemm": lambda b: ((("stream", lambda r, n, b, w, c: w + (n + r) * b * 4),)
                              + ((("reduce", _vec(2)),) if b > 1 else ()) + _EPILOGUE),
    "cublas_gemv": lambda b: (("stream", lambda r, n, b, w, c: w + (n + r) * 4),
                              ("copy", lambda r, n, b, w, c: 2 * r * 4)) * b + _EPILOGUE,
    "cublas_gemm_pad8": lambda b: (("copy", _vec(2)),
                                   ("stream", lambda r, n, b, w, c: w + (n + r) * 8 * 4),
                                   ("reduce", lambda r, n, b, w, c: 2 * r * 8 * 4),
                                   ("copy", _vec(2))) + _EPILOGUE,
    "cusparse": lambda b: (("partition", lambda r, n, b, w, c: (r + 1) * 4),
                           ("stream", lambda r, n, b, w, c: c + (n + r) * b * 4))
                          + ((("memset", _vec(1)),) if b == 1 else
                             (("scale", _vec(2)), ("fill", _vec(1))))
                          + (("copy", _vec(2)),) + _EPILOGUE,
}
# The fp16 library paths (fp16 weights, h kept in fp16; gpusim.backends.baselines), as
# torch.profiler recorded them on the H100 (measurements/h100/library_sweep_cells.json): the
# GEMM paths mostly run without a split-K reduce (in 5 of 9 layers at batch 4, 6 of 9 at 2, all
# at 8 and 1), and cuSPARSE's SpMV adds a y = x + a y node to the SpMM path's node count.
LIBRARY_NODES_FP16 = {
    "cublas_gemm": lambda b: (("stream", lambda r, n, b, w, c: w + (n + r) * b * 2),)
                             + _EPILOGUE,
    "cublas_gemv": LIBRARY_NODES["cublas_gemv"],
    "cublas_gemm_pad8": lambda b: (("copy", _vec(1)),
                                   ("stream", lambda r, n, b, w, c: w + (n + r) * 8 * 2),
                                   ("copy", _vec(1))) + _EPILOGUE,
    "cusparse": lambda b: (("partition", lambda r, n, b, w, c: (r + 1) * 4),
                           ("stream", lambda r, n, b, w, c: c + (n + r) * b * 2))
                          + ((("aypx", _vec(1)), ("memset", _vec(1))) if b == 1 else
                             (("scale", _vec(2)), ("fill", _vec(1))))
                          + (("copy", _vec(2)),) + _EPILOGUE,
}


def library_class(key: str, b: int) -> str:
    """The class (``gpusim.specs.LIBRARY_CLASSES``) of the product kernel of baseline path ``key``
    at batch ``b``: cuBLAS runs a GEMV kernel for a one-column GEMM, and a GEMM at batch 8 (or
    padded to 8) is its own class since the library picks its kernel by the batch width."""
    if key == "cusparse":
        return "spmv" if b == 1 else "spmm"
    if key == "cublas_gemm_pad8" or b == 8:
        return "gemm8"
    return "gemv" if key == "cublas_gemv" or b == 1 else "gemm"


def library_matrix_bytes(rows, n, nnz, value_bytes=4, index_bytes=4):
    """(dense weight bytes W, CSR bytes C: values + column indices + row pointers) of a
    ``rows x n`` layer matrix with ``nnz`` nonzeros: what the library products stream."""
    return rows * n * value_bytes, nnz * (value_bytes + index_bytes) + (rows + 1) * 4


def library_path_parts(lib: dict, key: str, b: int, r, n, w, c, dtype: str = "fp32"):
    """(fixed part, streaming part) of one step of baseline path ``key`` at batch ``b`` with the
    fitted ``[library]`` parameters ``lib`` of a spec (arrays over the layers ``r, n, w, c``);
    ``dtype`` fp16: the fp16 paths' nodes (:data:`LIBRARY_NODES_FP16`)."""
    fixed, streaming = 0.0, 0.0
    nodes = LIBRARY_NODES_FP16 if dtype == "fp16" else LIBRARY_NODES
    for kind, nbytes in nodes[key](b):
        if kind == "stream":
            cls = library_class(key, b)
            fixed = fixed + lib[f"{cls}_fixed_s"]
            streaming = streaming + nbytes(r, n, b, w, c) / lib[f"{cls}_bytes_per_s"]
        else:
            fixed = fixed + lib["node_s"]
    return fixed, streaming


def _measured(spec, name, N, B, d, cell, dtype) -> np.ndarray:
    """The step time of library ``name`` interpolated on the spec's measured grid
    (:mod:`.library_table`), ``nan`` where the spec has none or it does not cover the layer."""
    if not spec.library_table:
        return np.full(np.broadcast(N, B, d).shape, np.nan)
    from gpusim.specs import load_library_table

    from .library_table import table_step_s

    return table_step_s(load_library_table(spec.library_table), name, cell, B, N, d, dtype)


def _baselines(spec, name, N, B, d, cell, dtype):
    gates = cap.check_cell(cell)
    rows = (gates * N).astype(np.float64)
    Nf, Bf = N.astype(np.float64), B.astype(np.float64)
    vb = cap.DTYPES[dtype]
    cs = spec.cycle_s
    l2_bw = spec.l2_slices * spec.l2_bytes_per_cycle_per_slice * spec.clock_hz
    node = spec.graph_launch_overhead_s
    store_trip = spec.l2_hit_latency_cycles * cs

    def stream(nbytes, footprint):
        in_l2 = footprint <= spec.l2_size_bytes
        bw = np.where(in_l2, l2_bw, spec.dram_bandwidth_bytes_per_s)
        lat = np.where(in_l2, spec.l2_hit_latency_cycles, spec.dram_latency_cycles) * cs
        return lat + nbytes / bw, nbytes / bw

    W, C = library_matrix_bytes(rows, Nf, rows * Nf * d, vb, 4 if dtype == "fp32" else 2)

    # fp16 weights: the fp16 paths' own table where the spec has one (else the fp32 table)
    lib16 = spec.library_params_fp16 if dtype == "fp16" else None
    lib = lib16 or spec.library_params
    nodes_dtype = "fp16" if lib16 else "fp32"

    def path(key):
        """(per-step time, launch part, weights-streaming part) of one baseline path."""
        shape = np.broadcast(rows, Bf).shape
        tot, launch, weights = (np.zeros(shape) for _ in range(3))
        matrix = C if key == "cusparse" else W      # what a "stream" node's footprint is
        for b in np.unique(Bf):
            sel = Bf == b
            r, n, w, c = rows[sel], Nf[sel], W[sel], C[sel]
            if lib is not None:   # the spec's fitted library kernels
                fixed, streaming = library_path_parts(lib, key, int(b), r, n, w, c,
                                                      nodes_dtype)
                tot[sel] += fixed + streaming
                launch[sel] += fixed
                weights[sel] += streaming
                continue
            for kind, nbytes in LIBRARY_NODES[key](int(b)):
                by = nbytes(r, n, b, w, c)
                t, bw_part = stream(by, matrix[sel] if kind == "stream" else by)
                tot[sel] += node + store_trip + t
                launch[sel] += node
                if kind == "stream":
                    weights[sel] += bw_part
        return tot, launch, weights

    if name in ("cublas", "cusparse"):
        keys = ["cusparse"] if name == "cusparse" else ["cublas_gemm", "cublas_gemv",
                                                        "cublas_gemm_pad8"]
        best = None
        for key in keys:
            t, la, w = path(key)
            if key == "cublas_gemm_pad8":
                t = np.where(Bf < 8, t, np.inf)
            if best is None:
                best = [t, la, w]
            else:
                better = t < best[0]
                best = [np.where(better, a, o) for a, o in zip((t, la, w), best, strict=True)]
        per, la, w = best
        measured = _measured(spec, name, Nf, Bf, d, cell, dtype)
        got = np.isfinite(measured)
        per = np.where(got, measured, per)
        la, w = np.where(got, 0.0, la), np.where(got, 0.0, w)
        bd = {"launch_s": la, "weights_s": w, "epilogue_s": np.where(got, 0.0, per - la - w),
              "measured_grid_s": np.where(got, measured, 0.0)}
    else:  # csr-row-per-warp: our kernel, one graph node, tanh fused (see the docstring of csr.py)
        c = csr_step_cycles(spec, Nf, rows, Bf, d, cell)
        per = node + (c["prologue"] + c["loop"] + c["epilogue"] + c["partition"]
                      + c["waves"]) * cs
        bd = {"launch_s": node + 0 * per, "prologue_s": c["prologue"] * cs,
              "loop_s": c["loop"] * cs, "epilogue_s": c["epilogue"] * cs,
              "partition_s": c["partition"] * cs, "waves_s": c["waves"] * cs,
              "l1tex_s": c["l1tex"] * cs, "l2_s": c["l2"] * cs, "dram_s": c["dram"] * cs,
              "chain_s": c["chain"] * cs}
    shape = N.shape
    return KernelTimes(name, per, np.ones(shape, bool), np.zeros(shape, np.int64),
                       np.zeros(shape), bd, None)
