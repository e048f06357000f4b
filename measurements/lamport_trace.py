"""Where a step of the Lamport kernel goes on the GPU: per-warp time stamps inside the campaign's
own kernel (GPU only).

    PYTHONPATH=. python3 measurements/lamport_trace.py --out $OUT     # -> lamport_trace.json(.gz)

Why: ``lamport_wait.py`` found that the kernel's wait (its step time minus that of the same
kernel with every slot already written) is 350-1050 ns on the GPU and 170-310 ns in the
simulator, that stores landing on polled lines cost nothing by themselves, and that a back-off
after a failed poll lengthens the step as a detection process would. This probe says which
part of the step is long, per CTA and warp.

The kernel is the campaign's (sparse, Lamport, wide loads, optimal layout; seed 7 layers of
``lamport_wait.py``), generated from the IR as always; only its CUDA text is instrumented here
(the IR has no clock): lane 0 of every warp writes, per step ``t``, into a buffer of its own:

- ``t0``: the SM's ``clock64`` at the top of the step (before the x load and the polls);
- ``t1``: after its poll loop has seen every word of the slot (the last group's exit);
- ``polls``: the poll iterations of the step, summed over the groups (1 per group = no re-poll);
- ``t2``: after the ``__syncthreads`` that ends the staging;
- ``t3``: after its h stores (the end of the step's body);
- ``g0``: ``%globaltimer`` (ns) next to ``t0``, to place the SMs' clocks on one axis.

Stamps cost a few instructions per warp and step; the per-step time of the instrumented kernel
is recorded next to the plain kernel's, so their cost is visible. Cycle differences within one SM
need no common clock; across SMs, each SM's ``clock64`` is fitted to ``%globaltimer`` over its
steps (slope and offset by least squares), which places the stamps on one axis to about the
timer's resolution.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.lamport_wait import LAYERS, build  # noqa: E402

STEPS = 48
FIELDS = ("t0", "t1", "polls", "t2", "t3", "g0")
TS_BUFFER = "ts"


def instrumented_code(code: str, steps: int) -> str:
    """The generated CUDA of the sparse Lamport kernel with the stamps of the module docstring
    (``g_ts``: one int per field, warp, CTA and step). Raises if the code does not have the
    expected shape (so a change of the generator cannot silently move a stamp)."""
    nf = len(FIELDS)
    loop = f"for (r_t = 0; r_t < {steps}; r_t += 1) {{\n"
    if code.count(loop) != 1:
        raise AssertionError("time loop not found once")
    top = (f"{loop}        const unsigned int ts_i = ((r_t * gridDim.x + blockIdx.x) * "
           f"(blockDim.x >> 5) + (threadIdx.x >> 5)) * {nf}u;\n"
           "        const bool ts_w = (threadIdx.x & 31u) == 0u;\n"
           "        unsigned int ts_polls = 0u;\n"
           "        if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
           " : \"=l\"(g)); g_ts[ts_i + 0] = (int)clock64(); g_ts[ts_i + 5] = (int)g; }\n")
    code = code.replace(loop, top)
    brk = "if (!r_warp_waiting) break;"
    if code.count(brk) != 1:
        raise AssertionError("poll exit not found once")
    code = code.replace(brk, "++ts_polls; " + brk)
    tail = "if ((spin_0 & 1023u) == 0u && err_seen(g___err)) break;\n            }\n"
    if code.count(tail) != 1:
        raise AssertionError("end of the poll loop not found once")
    code = code.replace(tail, tail + "            if (ts_w) { g_ts[ts_i + 1] = (int)clock64(); "
                        "g_ts[ts_i + 2] = (int)ts_polls; }\n")
    sync = "        }\n        __syncthreads();\n"
    if code.count(sync) != 1:
        raise AssertionError("staging barrier not found once")
    code = code.replace(sync, sync + "        if (ts_w) g_ts[ts_i + 3] = (int)clock64();\n")
    end = "\n    }\n}"
    if not code.endswith(end + "\n") and not code.endswith(end):
        raise AssertionError("end of the time loop not found")
    i = code.rfind(end)
    code = code[:i] + "\n        if (ts_w) g_ts[ts_i + 4] = (int)clock64();" + code[i:]
    if "int* g_ts," not in code:
        raise AssertionError("the ts buffer is not a parameter")
    return code


def _with_ts(kernel, steps: int):
    """The kernel with a ``ts`` buffer (int, role out) after ``hseq``: the generator makes
    every global buffer a parameter, used or not."""
    import dataclasses

    from kernels_ir.ir import I32, Buffer

    size = steps * kernel.grid * (kernel.block // 32) * len(FIELDS)
    bufs = []
    for b in kernel.buffers:
        bufs.append(b)
        if b.name == "hseq":
            bufs.append(Buffer(TS_BUFFER, "global", I32, size, "out"))
    return dataclasses.replace(kernel, name=kernel.name + "_traced", buffers=tuple(bufs))


def trace_layer(runner, h: int, b: int, d: float, spec) -> dict:
    import numpy as np

    import gpusim.backends.cupy_backend as cb
    from gpusim.backends.cupy_backend import _time_launch

    cp = runner.cp
    prog = build(h, b, d, STEPS, spec)
    plain = runner.compile(prog.kernel)
    runner.check_grid(plain)
    traced_kernel = _with_ts(prog.kernel, STEPS)
    original = cb.generate

    def generate(kernel, *a, **k):
        src = original(kernel, *a, **k)
        if kernel.name.endswith("_traced"):
            import dataclasses
            src = dataclasses.replace(src, code=instrumented_code(src.code, STEPS))
        return src

    cb.generate = generate
    try:
        traced = runner.compile(traced_kernel)
    finally:
        cb.generate = original
    runner.check_grid(traced)
    pristine = cp.asarray(prog.inputs["hseq"])
    out = {}
    for name, comp in (("plain", plain), ("traced", traced)):
        inputs = dict(prog.inputs)
        if name == "traced":
            inputs[TS_BUFFER] = np.zeros(traced_kernel.buffers[
                [x.name for x in traced_kernel.buffers].index(TS_BUFFER)].size, np.int32)
        bufs = runner.device_buffers(comp, inputs)

        def reset(bb):
            bb["hseq"][...] = pristine
            bb["__err"][...] = 0
        times = [_time_launch(cp, runner, comp, bufs, reset) for _ in range(7)]
        got = {n: cp.asnumpy(v) for n, v in bufs.items()}
        err = float(prog.max_rel_err(got))
        if not err <= 1e-3:
            raise AssertionError(f"{name}: values differ from the reference ({err})")
        out[name] = {"launch_s": sorted(times), "max_rel_err": err}
        if name == "traced":
            ts = got[TS_BUFFER].reshape(STEPS, prog.kernel.grid, prog.kernel.block // 32,
                                        len(FIELDS))
            out["ts"] = ts
    return out


def summarise(ts, clock_hz: float) -> dict:
    """Per-step medians over the steady steps (8..STEPS-2) of what the module docstring lists,
    in ns: ``compute`` (t3 - t2: the warp's mat-vec and store after staging), ``poll`` (t1 -
    t0), ``staging_wait`` (t2 - t1: the warp waiting at the barrier for the CTA's slowest
    poller), ``step`` (t0 of the next step - t0), the CTAs' spread of t3 (the last store of the
    step; on one axis via each SM's fit to the global timer) and polls per warp and step."""
    import numpy as np

    t = ts.astype(np.int64)
    t0, t1, polls, t2, t3, g0 = (t[..., i] for i in range(len(FIELDS)))

    def wrap(x):
        return (x + 2 ** 31) % 2 ** 32 - 2 ** 31
    ns = 1e9 / clock_hz
    s = slice(8, t.shape[0] - 1)
    step = wrap(t0[1:] - t0[:-1])[s.start:s.stop - 1 if s.stop else None] * ns
    res = {
        "compute_ns": float(np.median(wrap(t3 - t2)[s]) * ns),
        "compute_cta_max_ns": float(np.median(wrap(t3 - t2)[s].max(axis=2)) * ns),
        "poll_ns": float(np.median(wrap(t1 - t0)[s]) * ns),
        "poll_cta_max_ns": float(np.median(wrap(t1 - t0)[s].max(axis=2)) * ns),
        "staging_wait_ns": float(np.median(wrap(t2 - t1)[s]) * ns),
        "step_ns": float(np.median(step)),
        "polls_per_warp_step": float(np.mean(polls[s])),
        "polls_hist": np.bincount(np.minimum(polls[s].ravel(), 15), minlength=16).tolist(),
    }
    # one axis: per CTA (one per SM), clock = a * globaltimer + c over its steps (warp 0)
    c0 = t0[:, :, 0].astype(np.float64)
    c0 = np.unwrap(c0, period=2 ** 32)
    g = np.unwrap(g0[:, :, 0].astype(np.float64), period=2 ** 32)
    axis_end = np.empty_like(c0)
    for c in range(c0.shape[1]):
        a, b = np.polyfit(c0[:, c], g[:, c], 1)
        last = np.unwrap(t3[:, c, :].astype(np.float64), period=2 ** 32, axis=0).max(axis=1)
        axis_end[:, c] = a * last + b
    spread = axis_end[s].max(axis=1) - axis_end[s].min(axis=1)
    res["store_spread_ns"] = float(np.median(spread))
    res["last_store_cta_counts"] = np.bincount(axis_end[s].argmax(axis=1),
                                               minlength=c0.shape[1]).tolist()
    return res


def measure(out: str, argv: list) -> dict:
    import numpy as np

    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    spec = load_spec("h100")
    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, "steps": STEPS, "fields": list(FIELDS),
           "results": {}}
    raw = {}
    t0 = time.time()
    for h, b, d in LAYERS:
        key = f"h{h}-b{b}-d{d}"
        try:
            r = trace_layer(runner, h, b, d, spec)
            ts = r.pop("ts")
            raw[key] = ts.tolist()
            summ = summarise(ts, spec.clock_hz)
            rec["results"][key] = {"hidden": h, "batch": b, "density": d, "status": "ok",
                                   **r, "summary": summ}
            print(key, json.dumps({k: (round(v, 1) if isinstance(v, float) else v)
                                   for k, v in summ.items() if k != "last_store_cta_counts"}),
                  f"plain {np.median(r['plain']['launch_s']) * 1e6:.1f} us traced "
                  f"{np.median(r['traced']['launch_s']) * 1e6:.1f} us", flush=True)
        except Exception as exc:   # record and go on
            rec["results"][key] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{key}: FAILED {type(exc).__name__}: {exc}", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "lamport_trace.json"), rec)
    with gzip.open(os.path.join(out, "lamport_trace_raw.json.gz"), "wt") as f:
        json.dump(raw, f)
    return rec


def main(argv: list | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="GPU run: write lamport_trace.json here")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    measure(args.out, sys.argv if argv is None else argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
