"""Which mix of sectors makes an L2 group cheap: ``l2_group_rate.py``'s ``rate4`` loads with the
sector of every (load, CTA, thread) slot taken from a table, one device call.

    PYTHONPATH=. python3 measurements/l2_sector_mix.py --out $OUT      # GPU: l2_sector_mix.json
    python measurements/l2_sector_mix.py --simulate measurements/h200/l2_sector_mix.json

Why: on the H200 every lane in one fixed sector (any of the four) makes the ``rate4`` loads over
random lines of 1 MiB run at the SM's own request rate (1.07-1.10 cycles a request and SM, the
busiest group at most 0.36 cycles a request), where the sectors rotating with the load and the
warp cost the groups 0.47-0.55 (``l2_group_rate.json.xz``); on lines of 8 groups (the groups
bind) the fixed sectors cost 0.51 and the rotation 0.55. The lockstep sweeps show the same
(``l2_sweep_reuse.json``, ``l2_sector_merge.json``: one sector for the whole GPU 0.29-0.31, one
sector per SM or per warp 0.51-0.59). The lines of a fixed-sector ``rand4`` run are random, so
few SMs ask for one sector at once: merging of requests to one sector cannot be all of it. This
probe keeps the lines and moves only the sectors, to part the candidates: the mix of sectors in
the GPU's traffic at a moment (``load``: every warp's load ``s`` in sector ``s``, so the lockstep
GPU asks for one sector at a time, a different one each load), each warp's or each SM's stream
(``warp``, ``cta``), the lanes of one request set (``lane``), the number of sectors in the mix
(``rot2``: sectors 0 and 1, ``rot02``: 0 and 2, ``cta2``: CTA mod 2) and a random sector a slot
(``rand``); ``s0`` and ``rot`` (``(load + warp) mod 4``) again as references. Word 0 of the
sector everywhere but ``rot`` (lane mod 8, as recorded before).

Line sets: ``l2_group_rate.rate4_sets``'s ``rand4`` (4 and 16 warps) and ``g8`` (4 warps), the
same lines as recorded there (regenerated from its seed); ``rand4`` at 4 warps also on 99 and 116
CTAs in ``s0`` and ``rot`` (how the rotation's cost grows with the SMs). Per run the median over
CTAs of each CTA's ``clock64`` span a round (4 warp loads), 256 rounds, 5 launches; the requests
a round on each group (``l2_group_rate.rate4_load``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEED = 23
ITERS = 256
LAUNCHES = 5
# the sector of slot (load s, CTA c, thread t = 32 w + lane) under each placement
PLACES = ("s0", "rot", "load", "warp", "cta", "lane", "rot2", "rot02", "cta2", "rand")
LINESETS = ("rand4_w4", "rand4_w16", "g8_w4")
SCALING = ((99, "s0"), (99, "rot"), (116, "s0"), (116, "rot"))   # rand4_w4 on fewer CTAs
OLD = "(sector < 4 ? sector : ((s + w) & 3))"
NEW = ("(sector < 4 ? sector : sector == 7 ? set[(size_t)4 * gridDim.x * nset + ((size_t)s * "
       "gridDim.x + blockIdx.x) * nset + threadIdx.x] : ((s + w) & 3))")


def source() -> str:
    """``l2_group_rate.SOURCE`` with ``sector`` = 7: each slot's sector read from the set buffer
    after its lines (the same layout as the lines: load, CTA, thread)."""
    from measurements.l2_group_rate import SOURCE

    assert OLD in SOURCE
    return SOURCE.replace(OLD, NEW)


def sectors(place: str, shape, seed: int = SEED):
    """The sector (0-3) of every slot of a run of ``shape`` (4, CTAs, 32 x warps) under
    ``place`` (one of :data:`PLACES`)."""
    import numpy as np

    loads, ctas, nset = shape
    s = np.arange(loads)[:, None, None]
    c = np.arange(ctas)[None, :, None]
    t = np.arange(nset)[None, None, :]
    w, lane = t // 32, t % 32
    table = {"s0": 0 * (s + c + t), "rot": (s + w) % 4, "load": s + 0 * (c + t),
             "warp": w % 4 + 0 * (s + c), "cta": c % 4 + 0 * (s + t),
             "lane": lane % 4 + 0 * (s + c),
             "rot2": (s + w) % 2 + 0 * c, "rot02": 2 * ((s + w) % 2) + 0 * c,
             "cta2": c % 2 + 0 * (s + t)}
    if place == "rand":
        return np.random.default_rng(seed).integers(0, 4, size=shape).astype(np.int32)
    if place not in table:
        raise ValueError(f"place {place!r}: one of {', '.join(PLACES)} expected")
    return np.broadcast_to(table[place], shape).astype(np.int32)


def runs(groups) -> dict:
    """Every run: ``{name: {"lineset", "place", "ctas", "warps", "word", "sets", "sectors"}}``
    (``sets`` and ``sectors`` of shape (4, CTAs, 32 x warps))."""
    import numpy as np

    from measurements.l2_group_rate import PLACES as RATE_PLACES
    from measurements.l2_group_rate import rate4_sets

    base = rate4_sets(groups)
    lines = {"rand4_w4": base["rand4_s0_w4"]["sets"], "rand4_w16": base["rand4_s0_w16"]["sets"],
             "g8_w4": base["g8_s0_w4"]["sets"]}
    out = {}
    for ls in LINESETS:
        arr = np.asarray(lines[ls])
        for place in PLACES:
            out[f"{ls}_{place}"] = {"lineset": ls, "place": place, "ctas": arr.shape[1],
                                    "warps": arr.shape[2] // 32,
                                    "word": RATE_PLACES["rot"][1] if place == "rot" else 0,
                                    "sets": arr, "sectors": sectors(place, arr.shape)}
    for ctas, place in SCALING:
        arr = np.asarray(lines["rand4_w4"])[:, :ctas]
        out[f"rand4_w4_{place}_c{ctas}"] = {
            "lineset": "rand4_w4", "place": place, "ctas": ctas, "warps": 4,
            "word": 1 if place == "rot" else 0, "sets": arr, "sectors": sectors(place, arr.shape)}
    return out


def measure(out: str, argv: list) -> dict:
    import hashlib
    import json

    import cupy as cp
    import numpy as np

    from measurements.l2_group_rate import rate4_load
    from measurements.l2_slice_map import mapped_region

    reg = mapped_region(argv)
    prov, clocks, groups = reg["prov"], reg["clocks"], reg["groups"]
    buf, sink, pairs, wrong = reg["buf"], reg["sink"], reg["pairs"], reg["wrong"]
    fn = cp.RawModule(code=source(), options=("-std=c++17",)).get_function("rate4")
    span = cp.zeros(132, dtype=cp.int64)
    rec_runs = {}
    for name, run in runs(groups).items():
        sets = np.asarray(run.pop("sets"), dtype=np.int32)
        secs = np.asarray(run.pop("sectors"), dtype=np.int32)
        run["lines_sha1"] = hashlib.sha1(sets.tobytes()).hexdigest()
        run["sectors_sha1"] = hashlib.sha1(secs.tobytes()).hexdigest()
        run["sector_counts"] = np.bincount(secs.reshape(-1), minlength=4).tolist()
        dev = cp.asarray(np.concatenate([sets.reshape(-1), secs.reshape(-1)]))
        reps = []
        for _ in range(LAUNCHES):
            fn((run["ctas"],), (32 * run["warps"],), (buf, dev, np.int32(ITERS), span, sink,
                                                      np.int32(sets.shape[2]), np.int32(7),
                                                      np.int32(run["word"])))
            cp.cuda.Device().synchronize()
            reps.append((cp.asnumpy(span[:run["ctas"]]) / ITERS).round(2).tolist())
        per_launch = [float(np.median(r)) for r in reps]
        run["cycles_per_round_per_cta"] = reps
        run["cycles_per_round_per_sm"] = per_launch
        med = float(np.median(per_launch))
        run["load"] = load = rate4_load(sets, groups)
        print(f"{name:22s} {med:9.1f} cycles a round; busiest group {load['max']:6.0f} requests: "
              f"{med / load['max']:.3f} cycles a request; "
              f"{med / (4 * 32 * run['warps']):.3f} a request and SM", flush=True)
        rec_runs[name] = run
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "iters": ITERS, "launches": LAUNCHES,
           "seed": SEED, "map_check": {"pairs": len(pairs), "wrong": wrong}, "runs": rec_runs}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "l2_sector_mix.json"), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


SIM_RUNS = ("rand4_w4_s0", "rand4_w4_rot", "rand4_w4_load", "rand4_w4_cta", "rand4_w4_rand",
            "rand4_w4_rot2", "g8_w4_s0", "g8_w4_rot", "g8_w4_load", "g8_w4_cta")


def simulate_into(path: str, names=SIM_RUNS, spec=None) -> dict:
    """Add the simulator's cycles a round (``l2_group_rate.rate4_simulated`` with the slots'
    sectors, unrolled as nvcc compiles the loop) to the runs ``names`` of the record; each run's
    lines and sectors are regenerated and checked against the record's SHA-1s."""
    import numpy as np

    from measurements.l2_group_rate import UNROLL, checked_lines, rate4_simulated
    from measurements.l2_slice_map import _load_map
    from measurements.probe import simulate_runs

    def price(spec, name, run, all_runs):
        sets = checked_lines(all_runs[name]["sets"], run, name)
        secs = checked_lines(all_runs[name]["sectors"], run, name, "sectors")
        return {"simulated": rate4_simulated(spec, sets, secs, run["word"], run["warps"], UNROLL)}

    return simulate_runs(path, price, names=list(names), spec=spec,
                         table=lambda rec: rec["runs"],
                         context=lambda rec: runs(np.asarray(
                             _load_map(rec["provenance"]["group_map"]))))


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
