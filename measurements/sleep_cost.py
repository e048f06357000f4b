"""What ``__nanosleep(ns)`` keeps a warp waiting (``kernels_ir.kernels.microbench.control``,
:func:`sleep_latency`): one warp alone, and eight warps on every SM. One device call, or the
simulator.

    PYTHONPATH=. python3 measurements/sleep_cost.py --out $OUT     # GPU (sleep_cost.json)
    python measurements/sleep_cost.py --simulate measurements/h200/sleep_cost.json

Why: the Lamport kernels can close each step with a ``__nanosleep`` (``step_wait``,
``kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_WAIT_NS``); CUDA documents the wait as
approximate (between 0 and twice the argument), so what the GPU keeps is measured before the
simulator prices it (``gpusim.specs.rules.sleep_wake_cycles``: to the next tick of a timer). Each
benchmark's cost per iteration = slope of the medians between 200 and 2000 iterations (11
repeats); ``seq`` (the loop and its IMAD alone) is what an iteration costs without the wait.

    PYTHONPATH=. python3 measurements/sleep_cost.py --stairs --out $OUT   # sleep_stairs.json
    python measurements/sleep_cost.py --stairs --simulate measurements/h200/sleep_stairs.json

``--stairs`` (:data:`STAIRS`): one warp, the wait of 200 or 400 ns followed by ``16 n`` more
dependent IMADs (n = 0 to 24), and the IMADs alone at every fourth point: does the wait add a
fixed time to whatever the warp does between two waits, or end on a tick of a timer, so that
the iteration is rounded up to it? ``--fit-lead RECORD`` (:func:`fit_lead`): the spec's
``sleep_tick_lead_ns`` from it (``sleep_lead_fit.json`` beside the record).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WAITS = (0, 50, 100, 200, 400, 800)
ENTRIES = (("seq", {}),) + tuple((f"sleep{ns}", {"ns": ns}) for ns in WAITS) + tuple(
    (f"sleep{ns}_w8_c132", {"ns": ns, "warps": 8, "ctas": 132}) for ns in (50, 200, 400))
# ``--stairs`` (sleep_stairs.json): the wait followed by 16 n more dependent IMADs, and the IMADs
# alone: a wait of a fixed length adds the same to every point, one that ends on a tick of a
# timer rounds the iteration up to the tick
STAIRS_WORK = tuple(range(0, 400, 16))
STAIRS = tuple((f"work_k{k}", {"ns": None, "work": k}) for k in STAIRS_WORK[::4]) + tuple(
    (f"sleep{ns}_k{k}", {"ns": ns, "work": k}) for ns in (200, 400) for k in STAIRS_WORK)
SIZES, SIM_SIZES = (200, 2000), (16, 32)


def _builder(key: str, kw: dict):
    from kernels_ir.kernels.microbench.control import seq_count, sleep_latency

    if key == "seq":
        return lambda rounds: seq_count(rounds)
    return lambda rounds: sleep_latency(rounds, **kw)


def _probe(stairs: bool = False):
    from measurements.probe import per_op_probe

    if stairs:
        return per_op_probe("sleep_stairs.json", STAIRS, _builder, SIZES, SIM_SIZES)
    return per_op_probe("sleep_cost.json", ENTRIES, _builder, SIZES, SIM_SIZES)


LEAD_GRID = tuple(range(0, 22, 2))


def _lead_row(args):
    """(lead, key, the simulator's ns an iteration) of one stairs entry under that lead."""
    import dataclasses

    from gpusim.specs import load_spec
    from measurements.probe import simulated_slope

    lead, key, kw, gpu = args
    spec = dataclasses.replace(load_spec(gpu), sleep_tick_lead_ns=float(lead))
    return lead, key, simulated_slope(spec, _builder(key, kw), SIM_SIZES) / spec.clock_hz * 1e9


def fit_lead(path: str, gpu: str = "h200", grid=LEAD_GRID, jobs: int = 2) -> dict:
    """``sleep_tick_lead_ns`` from the stairs record ``path``: the value of ``grid`` whose
    simulated iterations of the waits (:data:`STAIRS`, every other parameter as in the spec
    ``gpu``) have the smallest mean absolute log error against the GPU's (the middle of the
    values that tie for it)."""
    import math
    from concurrent.futures import ProcessPoolExecutor

    from measurements.probe import read_record

    res = read_record(path)["results"]
    waits = [(k, kw) for k, kw in STAIRS if kw["ns"] is not None]
    with ProcessPoolExecutor(jobs) as ex:
        rows = list(ex.map(_lead_row, [(v, k, kw, gpu) for v in grid for k, kw in waits]))
    out = []
    for v in grid:
        sims = {k: ns for lead, k, ns in rows if lead == v}
        err = sum(abs(math.log(sims[k] / (res[k]["per_op_s"] * 1e9))) for k in sims) / len(sims)
        out.append({"value": v, "mean_abs_log_error": err, "simulated_ns": sims})
        print(f"  lead {v:4.1f} ns: mean |log error| {err:.4f}", flush=True)
    # the staircase's points lie about 32 ns of work apart and sleep_min_ns governs the window
    # just before a tick, so several values tie: the middle of the tied run
    low = min(r["mean_abs_log_error"] for r in out)
    tied = [r["value"] for r in out if r["mean_abs_log_error"] <= low + 1e-4]
    value = (min(tied) + max(tied)) / 2
    print(f"sleep_tick_lead_ns = {value} (the middle of {tied})")
    return {"value": value, "tied": tied, "grid": out, "record": os.path.basename(path),
            "spec": gpu}


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--fit-lead"]:
        if len(argv) != 2:
            print("usage: sleep_cost.py --fit-lead measurements/h200/sleep_stairs.json",
                  file=sys.stderr)
            return 2
        import datetime

        from measurements.probe import save_record

        rec = fit_lead(argv[1])
        rec["command"] = "python measurements/sleep_cost.py --fit-lead " + argv[1]
        rec["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        save_record(os.path.join(os.path.dirname(argv[1]), "sleep_lead_fit.json"), rec)
        return 0
    stairs = "--stairs" in argv
    measure, _, simulate_into = _probe(stairs)
    argv = [a for a in argv if a != "--stairs"]
    return probe_main(argv, __doc__, "measurements/sleep_cost.py",
                      (lambda out, a: measure(out, a + ["--stairs"])) if stairs else measure,
                      simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
