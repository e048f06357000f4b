"""How much a persistent kernel's measured step depends on where its buffers lie in memory: the
campaign's slope, with the buffers allocated at six different addresses (GPU only).

    PYTHONPATH=. python3 measurements/alloc_spread.py --out $OUT     # alloc_spread.json

Why: measured twice in two processes, the same stamped Lamport kernel at batch 1 took 1065
and 1294 ns a step (``stamp_effect_first.json`` and ``stamp_effect.json``, ``only_top``), and
the exchange alone moved by up to 30% between two runs (``store_flush_first.json``,
``store_flush.json``). One process's repeats agree within a few percent. Where ``hseq`` lies
decides which L2 slices hold the few lines of a small slot that every SM polls; if that moves
the step, one campaign measurement of such a layer carries that spread.

Per layer (seed 7, 128 and 32 steps, the program's own inputs, values checked) and per
placement ``i`` (a pad of :data:`PADS` ``[i]`` bytes allocated before the buffers and kept):
the per-step slope (medians of 7 launches each) and the device address of ``hseq``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT, REPEATS = 128, 32, 7
PADS = (0, 4096, 65536 + 512, (1 << 20) + 12288, (7 << 20) + 40960, (33 << 20) + 102400)
# the Lamport kernels at small slots (where the stamps and a fence moved them), a larger slot,
# and the barrier kernel as the control: (kernel, sync, hidden, batch, density)
LAYERS = (("dense", "lamport", 1024, 1, 0.05), ("sparse", "lamport", 928, 1, 0.05),
          ("sparse", "lamport", 2304, 4, 0.1), ("sparse", "barrier", 928, 1, 0.05))


def measure_layer(runner, spec, kind, sync, h, b, d) -> dict:
    from measurements.exchange_groups import build
    from measurements.probe import timed_slope

    cp = runner.cp
    comps = {}
    for T in (STEPS, SHORT):
        prog = build(h, b, d, T, spec, sync, dense=kind == "dense")
        comp = runner.compile(prog.kernel, cooperative=True)
        runner.check_grid(comp)
        comps[T] = (prog, comp)
    pads, out = [], []
    for pad in PADS:
        if pad:
            pads.append(cp.zeros(pad, cp.uint8))
        kept = []             # kept: the next placement cannot reuse their blocks
        r = timed_slope(runner, {T: (prog, comp, dict(prog.inputs))
                                 for T, (prog, comp) in comps.items()},
                        REPEATS, f"pad {pad} ", keep=kept)
        addr = {str(T): int(bufs["hseq"].data.ptr) for T, bufs in zip(comps, kept, strict=True)}
        pads += kept
        out.append({"pad_bytes": pad, "hseq_address": addr, **r})
    return {"placements": out}


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        print(key, [round(p["per_step_s"] * 1e9) for p in r["placements"]], flush=True)
    return record_layers(out, argv, "alloc_spread.json", LAYERS, measure_layer, show, gpu=None,
                         layer_fields=("kernel", "sync", "hidden", "batch", "density"),
                         key=lambda k, s, h, b, d: f"{k}-{s}-h{h}-b{b}-d{d}",
                         steps=[STEPS, SHORT], repeats=REPEATS, pads=list(PADS))


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main

    return gpu_probe_main(argv, __doc__, measure, "alloc_spread.json")


if __name__ == "__main__":
    raise SystemExit(main())
