"""Where a step of the barrier kernel goes on the GPU: per-warp time stamps inside the campaign's
sparse barrier kernel (wide loads, optimal layout), on the layers of the Lamport kernel's trace
(``lamport_trace.REGIME_LAYERS``). One device call, then the simulator's counterpart.

    PYTHONPATH=. python3 measurements/barrier_trace.py --out $OUT      # barrier_trace.json
    python measurements/barrier_trace.py --simulate measurements/h200/barrier_trace.json

Why: stamped inside the Lamport kernel (``lamport_trace_layers.json``), the simulator's body
after the staging barrier (the mat-vec from registers and shared memory, the reduction, the tanh
and the h store) is 25-90 ns shorter than the GPU's on all 14 layers, waiting or not. The barrier
kernels run the same body, and their per-step times are within about 1% of the GPU's on the
draws. Either their body is right and the Lamport kernel's is slowed by something around it, or
their body is short too and something else in the barrier step is over-priced. This probe says
which.

The kernel is generated from the IR as always; only its CUDA text is stamped (the IR has no
clock). Lane 0 of every warp writes, per step:

- ``t0``: ``clock64`` at the top of the step; ``g0``: ``%globaltimer`` next to it;
- ``tg``: after the ``__syncthreads`` that follows the grid barrier's spin (thread 0 spins);
- ``ta``: before the ``__syncthreads`` that ends the staging of h into shared memory, once the
  warp's staged values are in its registers (a ``MOV`` reads them: the warp's arrival there),
  ``t2``: after it;
- ``tq``: before the ``__syncthreads`` that closes the step (after the h stores);
- ``t3``: at the end of the step (after thread 0's arrive on the grid counter).

Per-step medians over the steady steps, in ns: ``grid_wait`` (tg - t0), ``staging`` (t2 - tg),
``body`` (tq - t2), ``arrive`` (t3 - tq), ``step`` (t0 to the next t0), and the body counted
from the staging barrier's release: ``body_from_release`` (a warp's ``tq`` after the last
``ta`` of its CTA) and ``cta_body_from_release`` (the CTA's last ``tq`` after its last ``ta``).
A clock read right after ``__syncthreads`` is not the barrier's release for a warp that arrives
early (ptxas's ``BAR.SYNC.DEFER_BLOCKING`` lets it issue before the barrier completes), so
``tg`` and ``t2`` can be early; the release cannot come before the CTA's last arrival, so the
``_from_release`` figures are an upper bound of the body that no early read inflates. The
simulator gives the same from its issue cycles: ``t0`` the step's first instruction, ``tg`` and
``t2`` the first instruction after the first and second barrier, ``ta`` the second barrier's
issue, ``tq`` the third barrier's issue, ``t3`` the step's last instruction.
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.lamport_trace import REGIME_LAYERS  # noqa: E402

STEPS = 48
# the kernel as the campaign runs it, and with its tanh made a move (values not checked: the
# barrier kernel's control flow does not depend on them), to price the activation in place
VARIANTS = ("full", "no_tanh")
FIELDS = ("t0", "tg", "ta", "t2", "tq", "t3", "g0")
PHASES = ("grid_wait", "staging", "body", "arrive")
TS_BUFFER = "ts"
SEED = 7
SIM_STEPS = 8


def build(h: int, b: int, d: float, steps: int, spec, variant: str = "full"):
    """The campaign's sparse barrier kernel (wide loads, optimal layout), seed 7; ``variant``
    ``no_tanh``: every ``tanh`` replaced by a move of its operand (:data:`VARIANTS`)."""
    import dataclasses

    from kernels_ir.errors import InputError
    from kernels_ir.ir import Instr, Op
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer
    from kernels_ir.verify import verify
    from measurements.probe import rewrite_statements

    if variant not in VARIANTS:
        raise InputError(f"variant={variant!r}: accepted {', '.join(VARIANTS)}")
    prog = build_sparse_rnn(make_layer(h, b, d, steps, SEED), spec, sync="barrier",
                            wide_loads=True, layout="optimal")
    if variant == "full":
        return prog

    def visit(node):
        if isinstance(node, Instr) and node.op is Op.TANH:
            return [dataclasses.replace(node, op=Op.MOV)]
        return None
    k = prog.kernel
    k = verify(dataclasses.replace(k, name=k.name + "_no_tanh",
                                   body=rewrite_statements(k.body, visit)))
    return dataclasses.replace(prog, kernel=k)


def instrumented_code(code: str, steps: int) -> str:
    """The generated CUDA of the barrier kernel with the module docstring's stamps (``g_ts``:
    one int per field, warp, CTA and step). Raises if the code does not have the expected shape
    (the time loop once, three ``__syncthreads`` in it), so that a change of the generator
    cannot silently move a stamp."""
    from measurements.probe import stamp_loop_end, stamp_loop_top

    code, loop = stamp_loop_top(code, steps, len(FIELDS), FIELDS.index("g0"))
    sync = "        __syncthreads();\n"
    head, sep, body = code.partition(loop)
    parts = body.split(sync)
    if len(parts) != 4:
        raise AssertionError(f"{len(parts) - 1} __syncthreads in the time loop, expected 3")
    stamp = "        if (ts_w) g_ts[ts_i + {k}] = (int)clock64();\n"
    # ta: after the staged values are in registers (a MOV reads each group's first chunk, so
    # the in-order warp stalls on its loads before the clock read)
    chunks = sorted(set(re.findall(r"\b(r_chunk\d+_0)\b", parts[1])))
    if not chunks:
        raise AssertionError("no staged chunk registers before the staging barrier")
    wait = "".join(f"asm volatile(\"mov.b32 %0, %1;\" : \"=r\"(ts_d) : \"f\"({c})); "
                   for c in chunks)
    arrival = f"        if (ts_w) {{ int ts_d; {wait}g_ts[ts_i + 2] = (int)clock64(); }}\n"
    body = (parts[0] + sync + stamp.format(k=1) + parts[1] + arrival + sync
            + stamp.format(k=3) + parts[2] + stamp.format(k=4) + sync + parts[3])
    return stamp_loop_end(head + sep + body, 5)


def _with_ts(kernel, steps: int):
    from measurements.probe import with_stamp_buffer
    return with_stamp_buffer(kernel, steps * kernel.grid * (kernel.block // 32) * len(FIELDS),
                             suffix="_traced", name=TS_BUFFER)


def summarise(t0, tg, ta, t2, tq, t3) -> dict:
    """Per-step medians (ns) from per-step arrays (steps, CTAs, warps) on one clock per SM."""
    import numpy as np

    step = np.diff(t0, axis=0)
    out = {f"{p}_ns": float(np.nanmedian(b - a)) for p, (a, b) in
           zip(PHASES, ((t0, tg), (tg, t2), (t2, tq), (tq, t3)), strict=True)}
    release = np.nanmax(ta, axis=2, keepdims=True)        # no earlier than the last arrival
    out["body_from_release_ns"] = float(np.nanmedian(tq - release))
    out["cta_body_from_release_ns"] = float(np.nanmedian(np.nanmax(tq, axis=2)
                                                         - release[..., 0]))
    out["body_cta_max_ns"] = float(np.nanmedian(np.nanmax(tq - t2, axis=2)))
    out["step_ns"] = float(np.nanmedian(step))
    return out


def gpu_summary(ts, clock_hz: float) -> dict:
    """:func:`summarise` of the GPU's stamps (steps, CTAs, warps, fields), steps 8 to the last
    but one (each SM's own clock: differences within one SM need no common axis; every stamp
    is placed by its 32-bit difference from warp 0's ``t0`` of its step, whose steps are
    unwrapped, so a wrap of the clock between two warps' stamps cannot split them)."""
    import numpy as np

    from measurements.probe import wrap32

    t = ts.astype(np.int64)[8:-1]
    ns = 1e9 / clock_hz
    base = np.unwrap(t[:, :, 0, 0].astype(np.float64), period=2 ** 32, axis=0)[..., None]
    return summarise(*((base + wrap32(t[..., i] - t[:, :, :1, 0])) * ns
                       for i in (0, 1, 2, 3, 4, 5)))


def _compile_traced(runner, kernel):
    """``kernel`` with the stamp buffer, compiled (cooperative, as the campaign launches it)
    with :func:`instrumented_code` applied to its generated CUDA; and the buffer's size."""
    from measurements.probe import compile_instrumented

    traced_kernel = _with_ts(kernel, STEPS)
    traced = compile_instrumented(runner, traced_kernel,
                                  lambda c: instrumented_code(c, STEPS), cooperative=True)
    runner.check_grid(traced)
    return traced, traced_kernel.buffers[-1].size


def stamp_layer(runner, spec, h: int, b: int, d: float) -> dict:
    """One layer on the GPU: the plain kernel's launches and, per :data:`VARIANTS`, the stamped
    kernel's launches and stamp summary; the full kernel's values checked against the float64
    reference (plain and stamped)."""
    import numpy as np

    from measurements.probe import time_launches

    out = {}
    for variant in VARIANTS:
        prog = build(h, b, d, STEPS, spec, variant)
        runs = [("stamped", *_compile_traced(runner, prog.kernel))]
        if variant == "full":
            plain = runner.compile(prog.kernel)
            runner.check_grid(plain)
            runs.insert(0, ("plain", plain, 0))
        for name, comp, ts_size in runs:
            inputs = dict(prog.inputs)
            if ts_size:
                inputs[TS_BUFFER] = np.zeros(ts_size, np.int32)
            times, got = time_launches(runner, comp, inputs)
            entry = {"launch_s": times}
            if variant == "full":
                err = float(prog.max_rel_err(got))
                if not err <= 1e-3:
                    raise AssertionError(f"{name}: values differ from the reference ({err})")
                entry["max_rel_err"] = err
            if ts_size:
                ts = got[TS_BUFFER].reshape(STEPS, prog.kernel.grid, prog.kernel.block // 32,
                                            len(FIELDS))
                entry["summary"] = gpu_summary(ts, spec.clock_hz)
            out[name if variant == "full" else variant] = entry
    return out


def simulate_layer(spec, h: int, b: int, d: float, steps: int = SIM_STEPS,
                   variant: str = "full") -> dict:
    """The simulator's counterpart of :func:`gpu_summary` (buffers warm in L2, as the
    runner's resets leave them; steps 2 to the last but one); the full kernel's values
    checked."""
    import numpy as np

    from kernels_ir.ir import Op, instructions
    from measurements.probe import simulate_stepping

    prog = build(h, b, d, steps, spec, variant)
    ins = list(instructions(prog.kernel))
    bars = [i for i, x in enumerate(ins) if x.op is Op.BAR]
    if len(bars) != 3:
        raise AssertionError(f"{len(bars)} barriers in the kernel, expected 3")
    spans = {"t0": (range(len(ins)), np.fmin), "tg": (range(bars[0] + 1, len(ins)), np.fmin),
             "ta": ((bars[1],), np.fmax), "t2": (range(bars[1] + 1, len(ins)), np.fmin),
             "tq": ((bars[2],), np.fmax),
             "t3": (range(len(ins)), np.fmax)}
    ids = {k: set(v[0]) for k, v in spans.items()}
    rec = {k: {} for k in spans}

    def instr(self, sid, m, flat, polls, *rest):
        step = int(getattr(self, "step_index", -1))
        if self.replaying or step < 0 or self.static[sid].folded:
            return
        ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
        for k, (_, agg) in spans.items():
            if sid in ids[k]:
                a = rec[k].setdefault(step, np.full(self.nw, np.nan))
                a[ws] = agg(a[ws], self.last[ws])

    res = simulate_stepping(prog.kernel, prog.inputs, spec, instr)
    if variant == "full" and not prog.max_rel_err(res.globals) <= 1e-3:
        raise AssertionError(f"h{h}-b{b}: the simulator's values differ from the reference")
    keep = sorted(rec["t0"])[2:-1]
    w = prog.kernel.block // 32
    ns = 1e9 / spec.clock_hz
    arr = [np.array([rec[k][t] for t in keep]).reshape(len(keep), -1, w) * ns for k in spans]
    out = summarise(*arr)
    out["per_step_ns"] = res.per_step_s * 1e9
    return out


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        print(key, json.dumps({v: r["stamped" if v == "full" else v]["summary"]
                               for v in VARIANTS}, default=lambda x: round(x, 1)), flush=True)
    return record_layers(out, argv, "barrier_trace.json", REGIME_LAYERS, stamp_layer, show,
                         gpu=None, steps=STEPS, fields=list(FIELDS),
                         kernel="sparse barrier, wide loads, optimal layout")


def simulate_into(path: str) -> None:
    """Add the simulator's values (:func:`simulate_layer`) to the record at ``path``."""
    from measurements.probe import simulate_layers_into

    def price(spec, key, r):
        out = simulate_layer(spec, r["hidden"], r["batch"], r["density"])
        for v in VARIANTS[1:]:
            if v in r:
                out[v] = simulate_layer(spec, r["hidden"], r["batch"], r["density"], variant=v)
        return out
    simulate_layers_into(path, price, SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main
    return probe_main(argv, __doc__, "measurements/barrier_trace.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
