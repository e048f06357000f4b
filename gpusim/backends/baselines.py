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

Gated cells and fp16 weights (``layer.cell`` lstm / gru, ``dtype="fp16"``) keep the two nodes
after the product: ``torch.add`` of the input projection (for the GRU only its r and z rows: its
n gate adds ``x_n`` after the reset gate multiplies ``U_n h``), then one fused elementwise kernel
of the cell (:data:`CELL_TAIL`, a CuPy kernel launched on the stream torch captures; it replaces
``torch.tanh``), as a cuDNN-style layer fuses its gates. The LSTM's cell state stays fp32. With
fp16 weights the product is cuBLAS's / cuSPARSE's fp16 path: ``U`` in fp16 and the state h kept
in fp16 (the product's inputs), the pre-activations and the cell state in fp32. Values are
checked against the float64 reference of the fp16-rounded layer within
:data:`FP16_TOLERANCE`: h is rounded to fp16 once per step and the fp16 product is rounded
once (each at most 2^-11 relative, about 4.9e-4); with tanh's slope at most 1 and the step's
scale as the norm (``max_rel_err``) one step adds at most about 1e-3, and the bound leaves 5x
that for the steps' carried error.
"""

from __future__ import annotations

import statistics

import numpy as np

from kernels_ir.errors import BackendUnavailable, InputError

__all__ = ["require_torch", "run_cublas", "run_cusparse", "cublas_paths", "cusparse_step",
           "BASELINES", "CELL_TAIL", "FP16_TOLERANCE"]

FP16_TOLERANCE = 5e-3   # max_rel_err of an fp16 library path (module docstring)

# One fused elementwise kernel per gated cell: thread i of n*B handles unit u = i / B, column
# i % B; gate g of the pre-activations (rows x B, row-major) is at g*n*B + i. T_H: the state's
# type (float, or __half with fp16 weights), T_P: the product's.
CELL_TAIL = {
    "lstm": r"""
extern "C" __global__ void lstm_tail(const float* pre, const float* c_prev, float* c_next,
                                     T_H* h_next, int nb) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb) return;
    float ig = 1.0f / (1.0f + expf(-pre[i]));
    float fg = 1.0f / (1.0f + expf(-pre[nb + i]));
    float gg = tanhf(pre[2 * nb + i]);
    float og = 1.0f / (1.0f + expf(-pre[3 * nb + i]));
    float c = fg * c_prev[i] + ig * gg;
    c_next[i] = c;
    h_next[i] = (T_H)(og * tanhf(c));
}""",
    "gru": r"""
extern "C" __global__ void gru_tail(const float* pre, const T_P* prod, const float* x,
                                    const T_H* h_prev, T_H* h_next, int nb) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb) return;
    float r = 1.0f / (1.0f + expf(-pre[i]));
    float z = 1.0f / (1.0f + expf(-pre[nb + i]));
    float n = tanhf(x[2 * nb + i] + r * (float)prod[2 * nb + i]);
    h_next[i] = (T_H)((1.0f - z) * n + z * (float)h_prev[i]);
}""",
}
TAIL_THREADS = 256


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


def _setup(torch, layer, seed, dtype: str = "fp32"):
    """State of a baseline run: ``H`` (T+1, N, B) in the product's input type (fp16 with fp16
    weights), ``X`` (T, rows, B) fp32, the LSTM's cell state ``C`` (T+1, N, B) fp32 (None for
    the other cells) and ``reset`` (fresh inputs; ``reset.restore()``: the layer's own)."""
    dev = torch.device("cuda")
    n, b, T = layer.hidden, layer.batch, layer.timesteps
    hdt = torch.float16 if dtype == "fp16" else torch.float32
    H = torch.zeros((T + 1, n, b), dtype=hdt, device=dev)
    C = (torch.zeros((T + 1, n, b), dtype=torch.float32, device=dev)
         if getattr(layer, "cell", "rnn") == "lstm" else None)
    h0 = torch.from_numpy(np.array(layer.h0, np.float32)).to(dev)
    x0 = torch.from_numpy(np.array(layer.x_proj, np.float32)).to(dev)
    X = x0.clone()
    gen = torch.Generator(device=dev).manual_seed(seed)

    def reset():  # fresh inputs, never zeros
        H[0].normal_(0.0, 0.5, generator=gen)
        X.normal_(0.0, 0.5, generator=gen)
        if C is not None:
            C[0].zero_()

    def restore():  # the layer's own inputs, for the values check
        H.zero_()
        H[0].copy_(h0)
        X.copy_(x0)
        if C is not None:
            C.zero_()
    reset.restore = restore
    return dev, H, X, C, reset


def _reference(layer, dtype: str):
    """float64 h of ``layer`` (its fp16-rounded weights with ``dtype`` fp16)."""
    from kernels_ir.kernels.sparse_rnn import fp16_layer
    from models.reference import gru_reference, lstm_reference, rnn_reference

    if dtype == "fp16":
        layer = fp16_layer(layer)
    cell = getattr(layer, "cell", "rnn")
    if cell == "lstm":
        return lstm_reference(layer.U, layer.x_proj, layer.h0)[0]
    ref = gru_reference if cell == "gru" else rnn_reference
    return ref(layer.U, layer.x_proj, layer.h0)


def _check(H, layer, what: str, tolerance: float, dtype: str = "fp32") -> float:
    from kernels_ir.kernels.sparse_rnn import max_rel_err

    err = float(max_rel_err(H.float().cpu().numpy(), _reference(layer, dtype)))
    if not err <= tolerance:
        raise InputError(f"{what}: values differ from the float64 reference: "
                         f"max_rel_err={err:.3g} > {tolerance}")
    return err


def _tail(torch, layer, H, X, C, dtype: str):
    """``finish(t, Y)``: the step's nodes after the product ``Y`` (rows x B): ``torch.add`` +
    ``torch.tanh`` for the RNN cell, ``torch.add`` + the fused :data:`CELL_TAIL` kernel for the
    gated cells (module docstring). Returns ``finish`` and the fp32 pre-activation buffer."""
    n, b = layer.hidden, layer.batch
    cell = getattr(layer, "cell", "rnn")
    rows = X.shape[1]
    pre = torch.empty((rows, b), dtype=torch.float32, device=H.device)
    if cell == "rnn":
        def finish(t, Y):
            torch.add(Y, X[t], out=pre)
            torch.tanh(pre, out=H[t + 1])
        return finish, pre
    import cupy as cp

    th = "__half" if dtype == "fp16" else "float"
    src = ("#include <cuda_fp16.h>\n" if dtype == "fp16" else "") + \
        f"#define T_H {th}\n#define T_P {th}\n" + CELL_TAIL[cell]
    kern = cp.RawKernel(src, f"{cell}_tail")
    nb = n * b
    grid = ((nb + TAIL_THREADS - 1) // TAIL_THREADS,)
    ptr = lambda a: np.uint64(a.data_ptr())  # noqa: E731

    def launch(args):
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        kern(grid, (TAIL_THREADS,), args, stream=stream)

    if cell == "lstm":
        def finish(t, Y):
            torch.add(Y, X[t], out=pre)
            launch((ptr(pre), ptr(C[t]), ptr(C[t + 1]), ptr(H[t + 1]), np.int32(nb)))
    else:
        def finish(t, Y):
            torch.add(Y[:2 * n], X[t][:2 * n], out=pre[:2 * n])
            launch((ptr(pre), ptr(Y), ptr(X[t]), ptr(H[t]), ptr(H[t + 1]), np.int32(nb)))
    return finish, pre


def cublas_paths(torch, layer, seed: int = 0, dtype: str = "fp32"):
    """The cuBLAS step functions ``{name: step(t)}`` of ``layer`` (see the module docstring) and
    the state ``(H, reset)`` they share."""
    rows, b = layer.U.shape[0], layer.batch
    dev, H, X, C, reset = _setup(torch, layer, seed, dtype)
    wdt = H.dtype
    U = torch.from_numpy(layer.U.toarray().astype(np.float32)).to(dev).to(wdt)
    finish, pre = _tail(torch, layer, H, X, C, dtype)
    # fp32 weights: the product lands in the pre-activation buffer (for the RNN cell, the
    # harness's original nodes); fp16: in an fp16 buffer the add reads
    Y = pre if (dtype == "fp32") else torch.empty((rows, b), dtype=wdt, device=dev)
    P = torch.zeros((layer.hidden, 8), dtype=wdt, device=dev)   # batch padded to 8
    YP = torch.empty((rows, 8), dtype=wdt, device=dev)

    def gemm(t):
        torch.mm(U, H[t], out=Y)
        finish(t, Y)

    def gemv(t):
        for j in range(b):  # one GEMV per batch column (strided column copied in/out)
            Y[:, j].copy_(torch.mv(U, H[t][:, j]))
        finish(t, Y)

    def gemm8(t):
        P[:, :b].copy_(H[t])
        torch.mm(U, P, out=YP)
        Y.copy_(YP[:, :b])
        finish(t, Y)

    paths = {"gemm": gemm, "gemv": gemv}
    if b < 8:
        paths["gemm_pad8"] = gemm8
    return paths, H, reset


def cusparse_step(torch, layer, seed: int = 0, dtype: str = "fp32"):
    """The cuSPARSE step function of ``layer`` and the state ``(H, reset)`` it uses."""
    rows, b = layer.U.shape[0], layer.batch
    dev, H, X, C, reset = _setup(torch, layer, seed, dtype)
    csr = layer.U.tocsr()
    U = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int32)),
                                torch.from_numpy(csr.indices.astype(np.int32)),
                                torch.from_numpy(csr.data.astype(np.float32)).to(H.dtype),
                                size=csr.shape, device=dev)
    finish, pre = _tail(torch, layer, H, X, C, dtype)
    Y = pre if dtype == "fp32" else torch.empty((rows, b), dtype=H.dtype, device=dev)

    def step(t):
        if b == 1:
            Y[:, 0].copy_(torch.mv(U, H[t][:, 0]))
        else:
            Y.copy_(U @ H[t])
        finish(t, Y)

    return step, H, reset


def _tolerance(tolerance, dtype: str) -> float:
    return tolerance if tolerance is not None else (FP16_TOLERANCE if dtype == "fp16" else 1e-3)


def _timing_note(layer, product: str) -> str:
    cell = getattr(layer, "cell", "rnn")
    tail = "add + tanh" if cell == "rnn" else f"add + fused {cell} gates"
    return f"torch CUDA graph of T steps ({product} + {tail})"


def run_cublas(layer, *, repeats: int = 10, warmup: int = 2, seed: int = 0,
               short_steps: int | None = None, tolerance: float | None = None,
               dtype: str = "fp32") -> dict:
    torch = require_torch()
    T = layer.timesteps
    Ts = short_steps or max(1, T // 8)
    tol = _tolerance(tolerance, dtype)
    paths, H, reset = cublas_paths(torch, layer, seed, dtype)
    res = {}
    for name, fn in paths.items():
        reset.restore()
        for t in range(T):
            fn(t)
        torch.cuda.synchronize()
        err = _check(H, layer, f"cublas {name}", tol, dtype)
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
                "timing": _timing_note(layer, "product")})
    return out


def run_cusparse(layer, *, repeats: int = 10, warmup: int = 2, seed: int = 0,
                 short_steps: int | None = None, tolerance: float | None = None,
                 dtype: str = "fp32") -> dict:
    torch = require_torch()
    b, T = layer.batch, layer.timesteps
    Ts = short_steps or max(1, T // 8)
    step, H, reset = cusparse_step(torch, layer, seed, dtype)
    reset.restore()
    for t in range(T):
        step(t)
    torch.cuda.synchronize()
    err = _check(H, layer, "cusparse", _tolerance(tolerance, dtype), dtype)
    r = _graph_time(torch, step, T, Ts, repeats, warmup, reset)
    r.update({"max_rel_err": err, "values_ok": True, "best": "spmv" if b == 1 else "spmm",
              "timing": _timing_note(layer, "sparse product + copy")})
    return r


BASELINES = {"cublas": run_cublas, "cusparse": run_cusparse}
