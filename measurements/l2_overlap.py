"""Does an SM overlap one warp's L2 round trips with the others'? The ``rate4`` loads of
``l2_group_rate.py`` on 66 SMs, where the L2 does not bind, by warps an SM: one device call.

    PYTHONPATH=. python3 measurements/l2_overlap.py --out $OUT     # GPU: l2_overlap.json
    python measurements/l2_overlap.py --simulate measurements/h200/l2_overlap.json

Why: on 66 SMs the H200 sends one one-line request a cycle per SM with 4 warps as with 16
(``l2_group_rate.json.xz``: 0.999-1.002 cycles a request), so a warp's round trip (4 loads of 32
lines, then the sum) hides behind the other warps' requests; the simulator gives 1.5-1.6 cycles
with 4 warps and 1.00 with 16: it leaves the round trip exposed where few warps share the SM.
This sweep finds where the GPU stops hiding it: each warp's 4 loads over its own 32 random lines
of 1 MiB, every lane in sector 0 or the sectors rotating, 1, 2, 4, 8 and 16 warps a CTA, 66
CTAs; cycles a round (a warp's 4 loads) per CTA, the median over the CTAs, 5 launches. Per
request per SM = cycles a round / (4 x 32 x warps). ``--simulate`` adds the simulator's.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS = 66
WARPS = (1, 2, 4, 8, 16)
PLACES = ("s0", "rot")
SEED = 21
ITERS = 256
LAUNCHES = 5


def run_sets(seed: int = SEED) -> dict:
    """Every run's lines, shape (4, CTAs, 32 x warps): random lines of the gathers' 1 MiB."""
    import numpy as np

    rng = np.random.default_rng(seed)
    runs = {}
    for w in WARPS:
        n = 4 * CTAS * w
        sets = np.stack([rng.choice(8192, 32, replace=False) for _ in range(n)])
        for place in PLACES:
            runs[f"{place}_w{w}"] = {"place": place, "warps": w,
                                     "sets": sets.reshape(4, CTAS, 32 * w)}
    return runs


def measure(out: str, argv: list) -> dict:
    import hashlib
    import json

    import cupy as cp
    import numpy as np

    from measurements.campaign import provenance
    from measurements.l2_group_rate import PLACES as ALL_PLACES
    from measurements.l2_group_rate import SOURCE
    from measurements.l2_slice_map import _region
    from measurements.probe import ClockSampler

    prov = provenance(argv)
    clocks = ClockSampler()
    _raw, buf, sink, _mod = _region()
    rate4 = cp.RawModule(code=SOURCE, options=("-std=c++17",)).get_function("rate4")
    span = cp.zeros(CTAS, dtype=cp.int64)
    runs = run_sets()
    for name, run in runs.items():
        sets = np.asarray(run.pop("sets"), dtype=np.int32)
        run["lines_sha1"] = hashlib.sha1(sets.tobytes()).hexdigest()
        sector, word = ALL_PLACES[run["place"]]
        sdev = cp.asarray(sets.reshape(-1))
        reps = []
        for _ in range(LAUNCHES):
            rate4((CTAS,), (32 * run["warps"],), (buf, sdev, np.int32(ITERS), span, sink,
                                                  np.int32(sets.shape[2]), np.int32(sector),
                                                  np.int32(word)))
            cp.cuda.Device().synchronize()
            reps.append((cp.asnumpy(span) / ITERS).round(2).tolist())
        run["cycles_per_round_per_cta"] = reps
        run["cycles_per_round_per_sm"] = [float(np.median(r)) for r in reps]
        med = float(np.median(run["cycles_per_round_per_sm"]))
        print(f"{name:8s} {med:8.1f} cycles a round; {med / (128 * run['warps']):.3f} cycles a "
              f"request per SM", flush=True)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "iters": ITERS,
           "launches": LAUNCHES, "seed": SEED, "runs": runs}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "l2_overlap.json"), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def simulate_into(path: str) -> dict:
    """Add the simulator's cycles a round (the measured GPU's spec) to every run: the IR form
    (``simulated``) and unrolled as nvcc compiles the CUDA loop (``simulated_unrolled``)."""
    from measurements.l2_group_rate import PLACES as ALL_PLACES
    from measurements.l2_group_rate import UNROLL, checked_lines, rate4_simulated
    from measurements.probe import simulate_runs

    def price(spec, name, run, sets):
        arr = checked_lines(sets[name]["sets"], run, name)
        sector, word = ALL_PLACES[run["place"]]
        return {key: rate4_simulated(spec, arr, sector, word, run["warps"], unroll)
                for key, unroll in (("simulated", 1), ("simulated_unrolled", UNROLL))}

    return simulate_runs(path, price, context=lambda rec: run_sets(rec["seed"]))


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
