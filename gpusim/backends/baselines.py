"""Per-step library baselines on the GPU: cuBLAS and cuSPARSE through torch, inside CUDA graphs.

CuPy refuses cuBLAS/cuSPARSE calls during graph capture (docs/cuda_notes.md s1.5), so these use
``torch.cuda.CUDAGraph``. One step of the real layer is ``h_{t+1} = tanh(U h_t + x_t)``; each
baseline captures T such steps (the product, then ``torch.add`` + ``torch.tanh`` in place: the
fused elementwise cost the real layer needs) into one graph, and T' steps into another; the
per-step time is the slope of the two medians, the intercept is the graph launch cost. Values of
the whole T-step sequence are checked against the float64 reference first.

- ``cublas``: the best of (a) one GEMM ``U @ H`` at the real batch, (b) B GEMVs, (c) one GEMM with
  the batch padded to 8 (cuBLAS picks poor kernels for skinny fp32 batches, docs/cuda_notes.md s5);
  all three are recorded, ``per_step_s`` is the minimum. fp32, TF32 off.
- ``cusparse``: ``torch.sparse_csr_tensor`` (U in CSR) times the dense (N, B) state: SpMV for
  B = 1, SpMM otherwise.
"""

from __future__ import annotations

import statistics

import numpy as np

from kernels_ir.errors import BackendUnavailable, InputError

__all__ = ["require_torch", "run_cublas", "run_cusparse", "cublas_paths", "cusparse_step",
           "BASELINES"]


def require_torch():
    try:
        import torch
    except Exception as exc:
        raise BackendUnavailable(f"the library baselines need torch with CUDA ({exc})") from None
    if not torch.cuda.is_available():
        raise BackendUnavailable("the library baselines need an NVIDIA GPU; torch sees none")
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def _graph_time(torch, step, T: int, Ts: int, repeats: int, warmup: int, reset) -> dict:
    """Capture ``step(t)`` for t < T (and < Ts) into two graphs; time replays with events."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm the library (handles, workspaces) outside capture
        for t in range(2):
            step(t)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graphs = {}
    for count in (T, Ts):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for t in range(count):
                step(t)
        graphs[count] = g
    times = {T: [], Ts: []}
    for i in range(warmup + repeats):
        for count in (T, Ts):
            reset()
            torch.cuda.synchronize()
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[count].replay()
            e1.record()
            e1.synchronize()
            if i >= warmup:
                times[count].append(e0.elapsed_time(e1) * 1e-3)
    ml, ms = statistics.median(times[T]), statistics.median(times[Ts])
    per = (ml - ms) / (T - Ts)
    pairs = sorted((a - b) / (T - Ts) for a, b in zip(times[T], times[Ts], strict=True))
    return {"per_step_s": per, "launch_s": ms - Ts * per, "per_step_spread_s": [pairs[0],
            pairs[-1]], "per_step_raw_s": pairs, "t_long_raw": times[T], "t_short_raw":
            times[Ts], "steps": [T, Ts]}


def _setup(torch, layer, seed):
    dev = torch.device("cuda")
    n, b, T = layer.hidden, layer.batch, layer.timesteps
    H = torch.zeros((T + 1, n, b), dtype=torch.float32, device=dev)
    h0 = torch.from_numpy(np.array(layer.h0, np.float32)).to(dev)
    x0 = torch.from_numpy(np.array(layer.x_proj, np.float32)).to(dev)
    X = x0.clone()
    gen = torch.Generator(device=dev).manual_seed(seed)

    def reset():  # fresh inputs, never zeros
        H[0].normal_(0.0, 0.5, generator=gen)
        X.normal_(0.0, 0.5, generator=gen)

    def restore():  # the layer's own inputs, for the values check
        H.zero_()
        H[0].copy_(h0)
        X.copy_(x0)
    reset.restore = restore
    return dev, H, X, reset


def _check(H, layer, what: str, tolerance: float) -> float:
    from kernels_ir.kernels.sparse_rnn import max_rel_err
    from models.reference import rnn_reference

    err = float(max_rel_err(H.cpu().numpy(), rnn_reference(layer.U, layer.x_proj, layer.h0)))
    if not err <= tolerance:
        raise InputError(f"{what}: values differ from the float64 reference: "
                         f"max_rel_err={err:.3g} > {tolerance}")
    return err


def cublas_paths(torch, layer, seed: int = 0):
    """The cuBLAS step functions ``{name: step(t)}`` of ``layer`` (see the module docstring) and
    the state ``(H, reset)`` they share."""
    n, b = layer.hidden, layer.batch
    dev, H, X, reset = _setup(torch, layer, seed)
    U = torch.from_numpy(layer.U.toarray().astype(np.float32)).to(dev)
    Y = torch.empty((n, b), dtype=torch.float32, device=dev)
    P = torch.zeros((n, 8), dtype=torch.float32, device=dev)   # batch padded to 8
    YP = torch.empty((n, 8), dtype=torch.float32, device=dev)

    def finish(t):
        torch.add(Y, X[t], out=Y)
        torch.tanh(Y, out=H[t + 1])

    def gemm(t):
        torch.mm(U, H[t], out=Y)
        finish(t)

    def gemv(t):
        for j in range(b):  # one GEMV per batch column (strided column copied in/out)
            Y[:, j].copy_(torch.mv(U, H[t][:, j]))
        finish(t)

    def gemm8(t):
        P[:, :b].copy_(H[t])
        torch.mm(U, P, out=YP)
        Y.copy_(YP[:, :b])
        finish(t)

    paths = {"gemm": gemm, "gemv": gemv}
    if b < 8:
        paths["gemm_pad8"] = gemm8
    return paths, H, reset


def cusparse_step(torch, layer, seed: int = 0):
    """The cuSPARSE step function of ``layer`` and the state ``(H, reset)`` it uses."""
    n, b = layer.hidden, layer.batch
    dev, H, X, reset = _setup(torch, layer, seed)
    csr = layer.U.tocsr()
    U = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int32)),
                                torch.from_numpy(csr.indices.astype(np.int32)),
                                torch.from_numpy(csr.data.astype(np.float32)),
                                size=csr.shape, device=dev)
    Y = torch.empty((n, b), dtype=torch.float32, device=dev)

    def step(t):
        if b == 1:
            Y[:, 0].copy_(torch.mv(U, H[t][:, 0]))
        else:
            Y.copy_(U @ H[t])
        torch.add(Y, X[t], out=Y)
        torch.tanh(Y, out=H[t + 1])

    return step, H, reset


def run_cublas(layer, *, repeats: int = 10, warmup: int = 2, seed: int = 0,
               short_steps: int | None = None, tolerance: float = 1e-3) -> dict:
    torch = require_torch()
    T = layer.timesteps
    Ts = short_steps or max(1, T // 8)
    paths, H, reset = cublas_paths(torch, layer, seed)
    res = {}
    for name, fn in paths.items():
        reset.restore()
        for t in range(T):
            fn(t)
        torch.cuda.synchronize()
        err = _check(H, layer, f"cublas {name}", tolerance)
        r = _graph_time(torch, fn, T, Ts, repeats, warmup, reset)
        r["max_rel_err"] = err
        res[name] = r
    best = min(res, key=lambda k: res[k]["per_step_s"])
    out = dict(res[best])
    out.update({"best": best, "variants": {k: {"per_step_s": v["per_step_s"],
                                               "per_step_raw_s": v["per_step_raw_s"],
                                               "max_rel_err": v["max_rel_err"]}
                                           for k, v in res.items()},
                "values_ok": True, "max_rel_err": max(v["max_rel_err"] for v in res.values()),
                "timing": "torch CUDA graph of T steps (product + add + tanh)"})
    return out


def run_cusparse(layer, *, repeats: int = 10, warmup: int = 2, seed: int = 0,
                 short_steps: int | None = None, tolerance: float = 1e-3) -> dict:
    torch = require_torch()
    b, T = layer.batch, layer.timesteps
    Ts = short_steps or max(1, T // 8)
    step, H, reset = cusparse_step(torch, layer, seed)
    reset.restore()
    for t in range(T):
        step(t)
    torch.cuda.synchronize()
    err = _check(H, layer, "cusparse", tolerance)
    r = _graph_time(torch, step, T, Ts, repeats, warmup, reset)
    r.update({"max_rel_err": err, "values_ok": True, "best": "spmv" if b == 1 else "spmm",
              "timing": "torch CUDA graph of T steps (sparse product + copy + add + tanh)"})
    return r


BASELINES = {"cublas": run_cublas, "cusparse": run_cusparse}
