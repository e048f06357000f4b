"""What one step of each library baseline launches, and what one CUDA-graph node costs.

    PYTHONPATH=. python3 measurements/library_profile.py --out $OUT

Two records for the analytical model's cuBLAS / cuSPARSE baselines (``library_profile.json``):

1. ``graph_node``: the per-node cost of a CUDA graph, from a graph of K dependent launches of a
   one-element ``torch.add_`` (the smallest kernel torch launches) at K = 1000 and K = 100;
   per node = slope of the two medians over ``repeats`` replays. This is the microbenchmark
   ``graph_launch_overhead_s`` is calibrated from (:mod:`gpusim.calibrate`).
2. ``cases``: for every campaign layer (``campaign.LAYERS``) and every baseline path
   (:func:`gpusim.backends.baselines.cublas_paths` gemm / gemv / gemm_pad8, and
   :func:`~gpusim.backends.baselines.cusparse_step`), the kernels one step launches, from
   ``torch.profiler`` over ``STEPS`` eager steps after a warm-up: name, launches per step, mean
   device time. The analytical model takes the *number* of kernels per step from here (a
   structural fact of the library's algorithm choice, like the kernel a library picks); it
   predicts their time from the spec. The measured durations are kept for diagnosis only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 8
NODES = (1000, 100)


def graph_node(torch, repeats: int = 15) -> dict:
    x = torch.zeros(1, device="cuda")
    graphs = {}
    for k in NODES:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1.0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(k):
                x.add_(1.0)
        graphs[k] = g
    times = {k: [] for k in NODES}
    for i in range(repeats + 2):
        for k in NODES:
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[k].replay()
            e1.record()
            e1.synchronize()
            if i >= 2:
                times[k].append(e0.elapsed_time(e1) * 1e-3)
    hi, lo = NODES
    per = (statistics.median(times[hi]) - statistics.median(times[lo])) / (hi - lo)
    return {"per_node_s": per, "nodes": list(NODES), "raw_s": {str(k): v for k, v in
                                                                 times.items()},
            "kernel": "x.add_(1.0) on a 1-element float32 tensor, dependent chain",
            "repeats": repeats}


def profile_step(torch, step, steps: int = STEPS) -> dict:
    from torch.profiler import ProfilerActivity, profile

    for t in range(2):
        step(t)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for t in range(steps):
            step(t)
        torch.cuda.synchronize()
    kernels = []
    for e in prof.key_averages():
        dev = getattr(e, "device_time_total", None)
        if dev is None:
            dev = getattr(e, "cuda_time_total", 0.0)
        if not dev or e.count == 0:
            continue
        kernels.append({"name": e.key, "per_step": e.count / steps,
                        "mean_us": dev / e.count})
    kernels.sort(key=lambda k: -k["per_step"] * k["mean_us"])
    return {"kernels_per_step": sum(k["per_step"] for k in kernels), "kernels": kernels,
            "steps": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    from gpusim.backends.baselines import cublas_paths, cusparse_step, require_torch
    from kernels_ir.kernels.sparse_rnn import make_layer
    from measurements.campaign import LAYERS, provenance

    torch = require_torch()
    t0 = time.time()
    out = {"format_version": 1, "provenance": provenance(sys.argv), "graph_node": {},
           "cases": {}}
    out["graph_node"] = graph_node(torch)
    print(f"graph node: {out['graph_node']['per_node_s'] * 1e6:.3f} us", flush=True)
    for n, b, d in LAYERS:
        layer = make_layer(n, b, d, 16, seed=0)
        paths, _, _ = cublas_paths(torch, layer)
        rec = {f"cublas_{k}": profile_step(torch, fn) for k, fn in paths.items()}
        step, _, _ = cusparse_step(torch, layer)
        rec["cusparse"] = profile_step(torch, step)
        key = f"h{n}-b{b}-d{d}"
        out["cases"][key] = rec
        print(key, {k: round(v["kernels_per_step"], 2) for k, v in rec.items()}, flush=True)
    out["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "library_profile.json"), "w") as f:
        json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
