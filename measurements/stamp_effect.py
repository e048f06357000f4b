"""What the clock stamps do to the Lamport kernels they stamp: each stamp of ``exchange_groups``
alone, timed by the campaign's slope (GPU only).

    PYTHONPATH=. python3 measurements/stamp_effect.py --out $OUT     # stamp_effect.json

Why: at batch 1 the campaign measured the dense kernel 15-27% slower per step than the same
kernel with ``exchange_groups``' stamps runs (``dense_steps.json``: 2048-b1 1574 ns against 1242),
and the simulator agrees with the stamped kernel. Something in the plain kernel costs time that a
stamp takes away; which stamp does it says where.

Per layer (seed 7, 128 and 32 steps, values checked) the Lamport kernel's per-step slope
(medians of 9 launches each, the program's own inputs) in these forms of its CUDA:

- ``plain``: the generated kernel;
- ``none``: the stamped kernel with every stamp's store removed (its stamp buffer and indices
  stay);
- ``all``: the stamped kernel of ``exchange_groups``;
- ``only_<s>``: one stamp kept, for ``s`` in :data:`STAMPS`: ``top`` (the step's first
  instruction: ``clock64`` and ``%globaltimer``), ``tp`` (right before the first group's first
  poll), ``e`` (each poll loop's exit, with its poll count), ``t2`` (after the staging barrier),
  ``t3`` (the step's end);
- ``fence``: the generated kernel with a ``__threadfence()`` at the step's end (after the h
  stores; no stamp).

``STAMP_SET=delay`` (record ``stamp_effect_delay.json``, the first four layers): the plain and
fenced kernels beside two more closings of the step, waits with no memory operation:
``sleep200`` and ``sleep800`` (``__nanosleep(200)``, ``__nanosleep(800)``). ``STAMP_SET=waits``
(record ``stamp_effect_waits.json``, every layer): the plain kernel and waits of 50, 100, 200
and 400 ns.

The first four layers take every form; the others (sparse kernels at batch 1 with two staging
groups, at batch 4 and 8, and the dense kernel at 1536-b2) the plain, stamped, ``only_t3`` and
fenced ones. Every kernel is built by ``exchange_groups.build``: a sparse kernel whose last
staging group is partial (h4864-b1, h2304-b4) re-reads chunk 0 past the end, the form that probe
measured.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT, REPEATS = 128, 32, 9
# the dense kernel at batch 1 (one and two rows a warp), at batch 4 (the control: campaign and
# stamps agree), and the sparse kernel at batch 1
LAYERS = (("dense", 1024, 1, 0.05), ("dense", 2048, 1, 0.05), ("dense", 1024, 4, 0.05),
          ("sparse", 928, 1, 0.05), ("sparse", 4864, 1, 0.03), ("sparse", 2304, 4, 0.1),
          ("sparse", 2048, 8, 0.05), ("dense", 1536, 2, 0.05))
# each stamp's store in the stamped CUDA, by the text that identifies its line
STAMPS = {"top": "g_ts[ts_i + 0]", "tp": "g_ts[ts_i + 2]", "e": "g_ts[ts_i + 5 + r_g]",
          "t2": "g_ts[ts_i + 3]", "t3": "g_ts[ts_i + 4]"}
FORMS = ("plain", "none", "all", *(f"only_{s}" for s in STAMPS), "fence")
SHORT_FORMS = ("plain", "all", "only_t3", "fence")   # the layers past the first four
FENCE = "\n    }\n}"      # the end of the time loop, then of the kernel
# ``STAMP_SET=delay`` (record ``stamp_effect_delay.json``, the first four layers): what in a
# fence or a stamp at the step's end helps: the text that closes each step in each form
STEP_END = {"fence": "__threadfence();",
            # waits with no memory operation (the SASS NANOSLEEP: at most about that long)
            **{f"sleep{n}": f"__nanosleep({n});" for n in (50, 100, 200, 400, 800)}}
DELAY_FORMS = ("plain", "fence", "sleep200", "sleep800")
# ``STAMP_SET=waits`` (record ``stamp_effect_waits.json``, every layer): the wait's length
WAIT_FORMS = ("plain", "sleep50", "sleep100", "sleep200", "sleep400")
SETS = {"delay": ("stamp_effect_delay.json", LAYERS[:4], DELAY_FORMS),
        "waits": ("stamp_effect_waits.json", LAYERS, WAIT_FORMS)}


def _set():
    """(record, layers, forms) of ``STAMP_SET`` (None: the stamps' own set)."""
    return SETS.get(os.environ.get("STAMP_SET", ""))


def keep_stamps(code: str, keep: tuple) -> str:
    """The stamped CUDA with the store lines of the stamps not in ``keep`` removed (each must
    be found on exactly one line)."""
    lines = code.split("\n")
    for name, text in STAMPS.items():
        hits = [i for i, line in enumerate(lines) if text in line]
        if len(hits) != 1:
            raise AssertionError(f"stamp {name}: {len(hits)} lines, expected 1")
        if name not in keep:
            lines[hits[0]] = ""
    return "\n".join(lines)


def fenced(code: str, form: str = "fence") -> str:
    """The generated CUDA with :data:`STEP_END` ``[form]`` (a ``__threadfence()``) closing each
    step of its time loop."""
    if not code.rstrip("\n").endswith(FENCE):
        raise AssertionError("end of the time loop not found")
    i = code.rfind(FENCE)
    return code[:i] + "\n        " + STEP_END[form] + code[i:]


def _compiled(runner, prog, form: str):
    """(compiled kernel, its inputs) of ``prog`` in ``form``."""
    import numpy as np

    from measurements.exchange_groups import FIELDS, instrumented_code
    from measurements.probe import compile_instrumented, with_stamp_buffer

    if form == "plain" or form in STEP_END:
        comp = (runner.compile(prog.kernel, cooperative=True) if form == "plain" else
                compile_instrumented(runner, prog.kernel, lambda c: fenced(c, form),
                                     cooperative=True))
        runner.check_grid(comp)
        return comp, dict(prog.inputs)
    k = prog.kernel
    size = prog.timesteps * k.grid * (k.block // 32) * len(FIELDS)
    traced = with_stamp_buffer(k, size, suffix=f"_{form}", name="ts")
    keep = tuple(STAMPS) if form == "all" else (() if form == "none" else (form[5:],))
    comp = compile_instrumented(
        runner, traced,
        lambda c: keep_stamps(instrumented_code(c, prog.timesteps, "lamport"), keep),
        cooperative=True)
    runner.check_grid(comp)
    return comp, dict(prog.inputs) | {"ts": np.zeros(size, np.int32)}


def measure_layer(runner, spec, kind: str, h: int, b: int, d: float) -> dict:
    from measurements.exchange_groups import build
    from measurements.probe import timed_slope

    progs = {T: build(h, b, d, T, spec, "lamport", dense=kind == "dense")
             for T in (STEPS, SHORT)}
    forms = _set()[2] if _set() else (
        FORMS if (kind, h, b, d) in LAYERS[:4] else SHORT_FORMS)
    return {form: timed_slope(runner, {T: (prog, *_compiled(runner, prog, form))
                                       for T, prog in progs.items()}, REPEATS, f"{form} ")
            for form in forms}


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        print(key, json.dumps({f: round(v["per_step_s"] * 1e9) for f, v in r.items()
                               if f in FORMS or f in STEP_END}), flush=True)
    name, layers, forms = _set() or ("stamp_effect.json", LAYERS, FORMS)
    return record_layers(out, argv, name, layers, measure_layer, show, gpu=None,
                         layer_fields=("kernel", "hidden", "batch", "density"),
                         key=lambda k, h, b, d: f"{k}-h{h}-b{b}-d{d}",
                         steps=[STEPS, SHORT], repeats=REPEATS, forms=list(forms))


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main

    return gpu_probe_main(argv, __doc__, measure, "stamp_effect.json")


if __name__ == "__main__":
    raise SystemExit(main())
