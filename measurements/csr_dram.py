"""The CSR baseline where its values and indices stream from DRAM and its grid runs in waves.

    PYTHONPATH=. python3 measurements/csr_dram.py --out $OUT      # GPU: csr_dram.json
    python measurements/csr_dram.py --simulate measurements/h200/csr_dram.json
    PYTHONPATH=. python3 measurements/csr_dram.py --layers b4 --out $OUT   # csr_dram_b4.json

Why: where the matrix (4 bytes of value and 4 of column index a nonzero) does not fit in L2, the
analytical model's CSR step (``models/analytical/csr.py``) streams it from DRAM in its rounds; a
grid larger than the SMs hold runs in waves, and each later wave adds the chain of one of its
CTAs (``csr_step_cycles``). That chain's fill held the DRAM FIFO's wait for *every* row's values,
so each later wave streamed the whole matrix again (on the V100's hidden 8000, batch 2, density
0.05 the model was 2x the simulator); and the simulator's DRAM was one next-free FIFO. No fresh
draw reaches this regime on the H200 (its 60 MiB L2 held every drawn matrix), so these layers
are picked for it: hidden 8192 at density 0.15-0.5, batch 1-8, whose values and indices exceed
the H200's L2 (both arrays, or only the values in the control at density 0.15), in one wave or
two to four. What the record decided (the engine's DRAM channel with backfill; the model's FIFO
wait in the first round only, and a later wave's rounds less its share of the L2- or
DRAM-bound rounds): ``measurements/README.md``, "Where the matrix streams from DRAM, the channel
stays busy"; the record keeps the prices before those changes as ``simulated_before``.

GPU: the campaign's own CSR timing (:func:`gpusim.backends.cupy_backend.run_csr_program`: values
checked against the float64 reference first; per step = the slope between CUDA graphs of
``STEPS`` and ``SHORT_STEPS`` launches, median of interleaved repeats). ``--simulate``: the
simulator as ``gpusim crosscheck`` prices the case (:func:`gpusim.cli.crosscheck.predict_case`,
L2 warm) and the model, with the model's waves and which arrays it puts in DRAM.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (hidden, batch, density): both arrays past L2 in two waves (b8, b4, b1 at 0.3; b1 at 0.5), in
# one wave (b2 at 0.3), and one array past L2 in four waves (b2 at 0.15)
LAYERS = ((8192, 8, 0.3), (8192, 4, 0.3), (8192, 1, 0.3), (8192, 1, 0.5), (8192, 2, 0.3),
          (8192, 2, 0.15))
SEED = 8_100_000
# ``--layers b4``: the model's known gap (8192-b4-d0.3, two waves that leave the channel idle)
# taken apart: batch 4 in two waves of other sizes (6336 rows then 1856 at density 0.25; the
# kernel's registers set the CTAs an SM holds), at densities 0.4 and 0.5, at hidden 7168, in one
# wave (6144-b4-d0.5), and batch 2 in two waves (8192-b2-d0.5)
B4_LAYERS = ((8192, 4, 0.25), (8192, 4, 0.4), (8192, 4, 0.5), (7168, 4, 0.4), (6144, 4, 0.5),
             (8192, 2, 0.5))
LAYER_SETS = {"b4": (B4_LAYERS, "csr_dram_b4.json", SEED + 100)}
STEPS, SHORT_STEPS, REPEATS, SIM_STEPS = 24, 8, 7, 4
RECORD = "csr_dram.json"


def cases(layers=LAYERS, seed: int = SEED) -> list[dict]:
    from measurements.campaign import case_id

    out = []
    for i, (n, b, d) in enumerate(layers):
        c = {"kind": "csr", "hidden": n, "batch": b, "density": d, "seed": seed + i}
        c["id"] = case_id(c)
        out.append(c)
    return out


def measure(out: str, argv: list, layer_set: str | None = None) -> dict:
    import json
    import time

    from gpusim.backends.cupy_backend import Runner, run_csr_program
    from gpusim.measurements import build_case, spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    runner = Runner()
    prov = provenance(argv)
    spec_name = spec_name_for_gpu(prov["gpu_name"])
    spec = load_spec(spec_name)
    clocks = ClockSampler()
    layers, record, seed = LAYER_SETS.get(layer_set, (LAYERS, RECORD, SEED))
    rec = {"format_version": 1, "provenance": prov, "spec": spec_name,
           "steps": [STEPS, SHORT_STEPS], "repeats": REPEATS, "cases": cases(layers, seed),
           "results": {}}
    t0 = time.time()
    for c in rec["cases"]:
        try:
            prog = build_case(c, STEPS, spec)
            r = {"status": "ok", **run_csr_program(prog, repeats=REPEATS, warmup=2,
                                                   seed=c["seed"], short_steps=SHORT_STEPS,
                                                   runner=runner)}
            print(f"{c['id']:36s} {r['per_step_s'] * 1e6:8.2f} us/step  max_rel_err "
                  f"{r['max_rel_err']:.2g}", flush=True)
        except Exception as exc:   # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{c['id']}: FAILED {r['error']}", flush=True)
        rec["results"][c["id"]] = r
    rec["wall_s"] = time.time() - t0
    clocks.stop(prov)
    with open(os.path.join(out, record), "w") as fh:
        json.dump(rec, fh, default=float)
    return rec


def modelled(spec, n: int, b: int, d: float) -> dict:
    """The model's step (seconds, as the cross-check prices it), its waves and later waves'
    cycles, and which of the values and indices it puts in DRAM."""
    import numpy as np

    from gpusim.cli.crosscheck import predict_model
    from gpusim.measurements import build_case
    from models.analytical import csr as C

    a = [np.array([x], dtype=np.float64) for x in (n, n, b, d)]
    one = C.csr_step_cycles(spec, *a)
    waves = C.csr_waves(spec, *a)[0]
    case = {"kind": "csr", "hidden": n, "batch": b, "density": d, "seed": 0, "id": "model"}
    return {"model_s": predict_model(case, spec, build_case(case, 1, spec)),
            "waves": float(waves[0]), "later_waves_cycles": float(one["waves"][0]),
            "dram_cycles": float(one["dram"][0]), "chain_fifo_cycles": float(one["chain_fifo"][0])}


def simulate_into(path: str) -> None:
    from gpusim.cli.crosscheck import predict_case
    from measurements.probe import add_simulated

    def results(spec, rec):
        out = {}
        for c in rec["cases"]:
            g = rec["results"].get(c["id"], {})
            if g.get("status") != "ok":
                continue
            p = predict_case(c, spec, SIM_STEPS)
            m = modelled(spec, c["hidden"], c["batch"], c["density"])
            out[c["id"]] = {"per_step_s": p["per_step_s"], **m}
            gpu = g["per_step_s"]
            print(f"{c['id']:36s} GPU {gpu * 1e6:7.2f} us  sim {p['per_step_s'] * 1e6:7.2f} "
                  f"({p['per_step_s'] / gpu - 1:+.1%})  model {m['model_s'] * 1e6:7.2f} "
                  f"({m['model_s'] / gpu - 1:+.1%})  waves {m['waves']:.0f}", flush=True)
        return out

    add_simulated(path, results, gpu=None, steps=SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main, take_layer_set

    argv, which = take_layer_set(list(sys.argv[1:] if argv is None else argv), LAYER_SETS)
    flag = [] if which is None else ["--layers", which]     # --layers b4: that set's record
    return probe_main(argv, __doc__, "measurements/csr_dram.py",
                      lambda out, a: measure(out, a + flag, which), simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
