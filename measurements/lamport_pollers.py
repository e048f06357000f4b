"""How many CTAs poll a line, and how it is written: the smallest IR kernel with the Lamport gap,
varied. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/lamport_pollers.py --out $OUT   # GPU: lamport_pollers.json
    python measurements/lamport_pollers.py --simulate measurements/h100/lamport_pollers.json
    ... --curve --out $OUT / --curve --simulate FILE     # the curve: lamport_pollers_curve.json

``ring_33_exact_few_warps_c1`` (``lamport_ring.py``, ``h100/lamport_ring_ir_repeat.json``) is the
exchange of a small persistent Lamport kernel in miniature: 33 of 132 CTAs write a line a round
(8 warps of 4 words each), every CTA polls those 33 lines in the same order and checks one word
per 16-byte chunk. It is the smallest IR kernel whose round the simulator prices too fast (533
against 609 ns, -12%), as it prices the Lamport kernels. The experiments here change one thing
at a time (:func:`measurements.lamport_ring.ring`):

- ``_solo``: only the 33 writer CTAs poll (the other 99 only pass the round's barrier), so a line
  has 33 pollers instead of 132;
- ``33_exact_few_c1``: each line written by one warp store of 32 words instead of 8 warps' stores
  of 4 (and its ``_solo``);
- ``132_exact_c1`` / ``132_exact_warps_c1``: all 132 CTAs write and wait for all 132 lines.

``--curve`` (:data:`CURVE`): the round against the pollers of a line, 33 / 66 / 132 CTAs polling
33 lines (``_p66``: the even CTAs) and 66 / 132 polling 66 lines, and 132 of 132.

``--merge`` (:data:`MERGE`): what the 99 CTAs that only poll cost, by what they send: the 33-line
ring with 132 pollers, with 33 (``_solo``), and with the 99 loading only the first sector of
each line (``_q1``: a quarter of the bytes, the same line requests) or backing off about 400
cycles after every failed poll (``_bo``: about half the poll rate; GPU only, the simulator's
replays cannot run a back-off).

``--wait`` (:data:`WAIT`): the curve's 33- and 66-line points and 132 of 132, each also with
every thread sleeping 100 (33 lines only), 200 or 400 ns after the round's stores
(``__nanosleep``, as the Lamport kernel closes its step), so that the pollers start after the
words reached L2 (``lamport_pollers_wait.json``).

``--half`` (:data:`HALF`): the 33-, 66- and 132-line rings with no wait, with every thread
sleeping 200 or 400 ns after the round's stores, and with only the even CTAs sleeping (``_wh``),
the odd ones polling the next round's lines while they are written
(``lamport_pollers_half.json``).

``--fit-sharers FOLDER [--gpu SPEC]`` (:func:`fit_sharers`): ``l2_poll_sharer_cycles`` from the
curve's three runs (``lamport_pollers_curve.json``, ``_repeat.json``, ``_repeat2.json``); the grid
and the choice are written to ``FOLDER/lamport_pollers_fit.json``.

ns per round: slope between 64 and 256 rounds (9 repeats); the simulator's between 4 and 8
rounds, buffers warm in L2, both partition assignments averaged, values checked.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (key, k, order, writes) as measurements/lamport_ring.py's EXPERIMENTS
EXPERIMENTS = (
    ("33_exact_few_warps_c1", 33, "exact", "warps_few_c1"),
    ("33_exact_few_warps_c1_solo", 33, "exact", "warps_few_c1_solo"),
    ("33_exact_few_c1", 33, "exact", "line_few_c1"),
    ("33_exact_few_c1_solo", 33, "exact", "line_few_c1_solo"),
    ("132_exact_c1", 132, "exact", "line_c1"),
    ("132_exact_warps_c1", 132, "exact", "warps_c1"),
)
# the curve (measurements/README.md, "How many CTAs poll"): pollers 33 / 66 / 132 of 33 lines,
# 66 / 132 of 66 lines (``lamport_pollers_curve.json``, ``--curve``)
CURVE = (
    ("33_exact_few_warps_c1_solo", 33, "exact", "warps_few_c1_solo"),
    ("33_exact_few_warps_c1_p66", 33, "exact", "warps_few_c1_p66"),
    ("33_exact_few_warps_c1", 33, "exact", "warps_few_c1"),
    ("66_exact_few_warps_c1_solo", 66, "exact", "warps_few_c1_solo"),
    ("66_exact_few_warps_c1", 66, "exact", "warps_few_c1"),
    ("132_exact_warps_c1", 132, "exact", "warps_c1"),
)

# what the extra pollers cost, by bytes, requests and poll rate (``lamport_pollers_merge.json``)
MERGE = (
    ("33_exact_few_warps_c1", 33, "exact", "warps_few_c1"),
    ("33_exact_few_warps_c1_solo", 33, "exact", "warps_few_c1_solo"),
    ("33_exact_few_warps_c1_q1", 33, "exact", "warps_few_c1_q1"),
    ("33_exact_few_warps_c1_bo", 33, "exact", "warps_few_c1_bo"),
)
GPU_ONLY = ("33_exact_few_warps_c1_bo",)

# the curve's ends again, every thread sleeping after the round's stores (``_w<ns>``), as the
# Lamport kernel closes its step: do the pollers still cost when they start polling after the
# words reached L2? (``lamport_pollers_wait.json``, ``--wait``)
WAIT = tuple((f"{key}{w}", k, order, f"{writes}{w}")
             for w in ("", "_w100", "_w200", "_w400")
             for key, k, order, writes in (CURVE[0], CURVE[2], CURVE[3], CURVE[4], CURVE[5])
             if not (w == "_w100" and k != 33))

# half the CTAs sleeping (``_wh<ns>``: the even ones), the odd ones polling at once while the words
# are written, next to all and none sleeping: do the pollers that poll before a word arrives
# cost it, and those that come after it not? (``lamport_pollers_half.json``, ``--half``)
HALF = tuple((f"{key}{w}", k, order, f"{writes}{w}")
             for w in ("", "_w200", "_wh200", "_w400", "_wh400")
             for key, k, order, writes in (CURVE[2], CURVE[4], CURVE[5]))


def measure(out: str, argv: list, experiments=EXPERIMENTS,
            filename: str = "lamport_pollers.json") -> dict:
    from measurements.lamport_ring import ring
    from measurements.probe import record_rounds

    return record_rounds(out, argv, filename, [
        (key, lambda s, k=k, o=order, w=writes: ring(s, k, o, w))
        for key, k, order, writes in experiments], label="ring_")


def _simulated(spec, rec, experiments=EXPERIMENTS) -> dict:
    from measurements.lamport_ring import simulate_k

    res = {}
    for key, k, order, writes in experiments:
        if key in GPU_ONLY:
            continue
        res[key] = simulate_k(spec, k, order, writes)
        g = rec.get("results", {}).get(key, {}).get("per_op_s")
        print(f"ring_{key:28s}: simulated {res[key]['per_op_s'] * 1e9:7.1f} ns per round"
              + (f"   GPU {g * 1e9:7.1f}" if g else ""), flush=True)
    return res


CURVE_RECORDS = ("lamport_pollers_curve.json", "lamport_pollers_curve_repeat.json",
                 "lamport_pollers_curve_repeat2.json")
SHARER_GRID = (0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)


def fit_sharers(folder: str, grid=SHARER_GRID, spec_name: str = "h100") -> dict:
    """``l2_poll_sharer_cycles`` (:mod:`gpusim.engine.l2`): the value of ``grid`` whose
    simulated ns per round of the :data:`CURVE` experiments have the smallest mean absolute log
    error against the mean of the GPU's runs in :data:`CURVE_RECORDS` under ``folder`` (every
    other parameter as in the spec ``spec_name``)."""
    import json

    from measurements.lamport_ring import grid_fit

    runs = []
    for name in CURVE_RECORDS:
        with open(os.path.join(folder, name)) as f:
            runs.append(json.load(f)["results"])
    gpu = {key: sum(r[key]["per_op_s"] for r in runs) / len(runs) for key, *_ in CURVE}
    fit = grid_fit("l2_poll_sharer_cycles", grid, CURVE, gpu, spec_name)
    return {**fit, "spec": spec_name, "gpu_mean_s": gpu, "records": list(CURVE_RECORDS),
            "benchmarks": [e[0] for e in CURVE]}


def main(argv: list | None = None) -> int:
    from measurements.probe import variant_probe_main

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--fit-sharers"]:
        if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--gpu"):
            print("usage: lamport_pollers.py --fit-sharers FOLDER [--gpu SPEC] "
                  "(measurements/h100; the spec: h100)", file=sys.stderr)
            return 2
        import datetime

        from measurements.probe import save_record

        rec = fit_sharers(argv[1], spec_name=argv[3] if len(argv) == 4 else "h100")
        rec["command"] = "python measurements/lamport_pollers.py --fit-sharers " + " ".join(
            argv[1:])
        rec["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        save_record(os.path.join(argv[1], "lamport_pollers_fit.json"), rec)
        return 0
    return variant_probe_main(argv, __doc__, "measurements/lamport_pollers.py",
                              (EXPERIMENTS, "lamport_pollers.json"),
                              (("--curve", CURVE, "lamport_pollers_curve.json"),
                               ("--merge", MERGE, "lamport_pollers_merge.json"),
                               ("--wait", WAIT, "lamport_pollers_wait.json"),
                               ("--half", HALF, "lamport_pollers_half.json")),
                              measure, _simulated)


if __name__ == "__main__":
    raise SystemExit(main())
