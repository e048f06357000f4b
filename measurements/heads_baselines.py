"""Baselines of the fresh draws' multi-head layers, measured: is the head-wise speedup right?

    PYTHONPATH=. python3 measurements/heads_baselines.py --out $OUT            # GPU
    PYTHONPATH=. python3 measurements/heads_baselines.py --check FILE --jobs N  # predictions

Why: the draws' multi-head (block-diagonal) layers are measured per step only (the campaign gives
them no baselines), so the speedup that `gpusim predict --heads H` prints has never been
compared with the GPU. Since the model prices a head-wise layer's cuSPARSE and CSR rows on its
nonzeros (density d / H over N x N) and `--engine sim` simulates the CSR kernel on the
block-diagonal U, that speedup is a prediction that can be checked.

``--out``: for every multi-head layer of the draws in :data:`DRAWS` (``fresh.head_layers`` of
their ``campaign.json``), the campaign's three baselines on a seeded draw of the same layer
(:func:`measurements.campaign.run_case`: the CSR row-per-warp kernel of the IR, values checked,
in a CUDA graph; cuBLAS on the dense N x N and cuSPARSE on the block-diagonal CSR matrix, fp32;
a gated cell's libraries with their fused gate kernel), timed as the campaign times them. The
record (``heads_baselines.json``) has the campaign's case format and provenance.

``--check``: per layer, the measured speedup (the draw's fastest sparse persistent kernel over
the fastest of the kernels measured beside it: its dense persistent kernel where measured, and
the three baselines here) against `predict --heads` with each engine, restricted to the
kernels measured on the layer (as the speedup check does for gated layers,
:func:`gpusim.speedup_check._predicted`); per case, the simulator's CSR step (the block-diagonal
U itself) and the model's rows against the measurements. Written into the record under
``check``. The draw's kernels and these baselines were timed in different launches of the same
GPU kind (the draw's machine, then this probe's), a difference the campaign does not have.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRAWS = tuple(f"measurements/h100/fresh_2026-11-28_s{s}" for s in (28, 29, 30, 31))
BASELINE_KINDS = ("csr", "cublas", "cusparse")
SEED_BASE = 7_000_000   # case seeds: distinct from every draw's


def head_cases(draws=DRAWS) -> list[dict]:
    """The baseline cases of every multi-head layer of ``draws`` (fp32 only: the CSR kernel in the
    IR has fp32 weights)."""

    from measurements.campaign import case_id
    from measurements.probe import read_record

    out = []
    for d in draws:
        fresh = read_record(os.path.join(d, "campaign.json"))["fresh"]     # or its .gz
        for lay in fresh.get("head_layers", []):
            if lay["dtype"] != "fp32":
                continue
            base = {k: lay[k] for k in ("hidden", "batch", "density", "cell", "dtype", "heads")}
            for kind in BASELINE_KINDS:
                c = {"kind": kind, **base, "draw": os.path.basename(d)}
                c["id"] = case_id(c)
                c["seed"] = SEED_BASE + len(out)
                out.append(c)
    return out


def measure(out: str, argv: list) -> dict:
    import json

    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from measurements.campaign import FORMAT_VERSION, provenance, run_recorded

    prov = provenance(argv)
    spec = load_spec("h200" if "H200" in prov["gpu_name"] else "h100")
    runner = Runner()
    todo = head_cases()
    results = [run_recorded(c, runner, spec, 9, f"[{i + 1}/{len(todo)}] {c['draw'][-3:]}")
               for i, c in enumerate(todo)]
    res = {"format_version": FORMAT_VERSION, "provenance": prov, "draws": list(DRAWS),
           "cases": results}
    with open(os.path.join(out, "heads_baselines.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def _layer_key(draw: str, c: dict) -> tuple:
    return (draw, int(c["hidden"]), int(c["batch"]), float(c["density"]), c.get("cell", "rnn"),
            int(c["heads"]))


def measured_times(rec: dict, root: str = ".") -> dict:
    """layer key -> {predict row name: measured per-step s}: the draw's persistent kernels of the
    layer (values checked) and the probe's baselines."""

    from gpusim.speedup_check import predict_name
    from measurements.probe import read_record

    def ok(c):
        return c.get("status") == "ok" and c["result"].get("values_ok", True)

    out: dict = {}
    for c in filter(ok, rec["cases"]):
        out.setdefault(_layer_key(c["draw"], c), {})[predict_name(c)] = \
            float(c["result"]["per_step_s"])
    for d in rec["draws"]:
        cases = read_record(os.path.join(root, d, "campaign.json"))["cases"]   # or .gz
        for c in filter(ok, cases):
            key = _layer_key(os.path.basename(d), c) if int(c.get("heads", 1)) > 1 else None
            if key in out and predict_name(c) is not None:
                out[key][predict_name(c)] = float(c["result"]["per_step_s"])
    return out


def _predict(spec, h, b, d, cell, heads, eng):
    from gpusim.cli.predict import simulator
    from models.analytical import predict_layer

    kw = {} if cell == "rnn" else {"cell": cell}
    return predict_layer(spec, h, b, d, timesteps=1, engine=eng, heads=heads,
                         simulator=simulator(3, parallel=False, heads=heads) if eng == "sim"
                         else None, **kw)


def _csr_sim(spec, case: dict) -> float:
    from gpusim.measurements import build_case
    from gpusim.pricing import price_program

    return float(price_program(build_case(case, 3, spec), spec, what=case["id"]).per_step_s)


def check(path: str, jobs: int = 1, engines=("model", "sim")) -> dict:
    """Add the per-layer speedup check and the per-case baseline errors to the record."""
    import json

    import numpy as np

    from gpusim.cli.crosscheck import _map
    from gpusim.specs import load_spec
    from gpusim.speedup_check import SPARSE, _speedup_stats, layer_speedups
    from measurements.probe import read_record, save_record

    rec = read_record(path)
    spec = load_spec("h100")
    times = measured_times(rec)
    keys = sorted(k for k, v in times.items()
                  if any(n in v for n in SPARSE) and any(n not in SPARSE for n in v))
    reps = _map(_predict, [(spec, k[1], k[2], k[3], k[4], k[5], eng) for k in keys
                           for eng in engines], jobs, desc="head-wise layers", progress=False)
    csr_cases = [c for c in rec["cases"] if c["kind"] == "csr" and c["status"] == "ok"]
    csr_sim = _map(_csr_sim, [(spec, c) for c in csr_cases], jobs, desc="CSR", progress=False)
    n = len(engines)
    # every prediction is compared among the kernels measured on the layer (restrict): a
    # CTA-local layer's draw has its Lamport kernels only
    rows = [{"draw": k[0], "hidden": k[1], "batch": k[2], "density": k[3], "cell": k[4],
             "heads": k[5], **layer_speedups(times[k], dict(zip(engines, reps[i * n:(i + 1) * n],
                                                                 strict=True)), restrict=True)}
            for i, k in enumerate(keys)]
    cases = []
    for c, sim in zip(csr_cases, csr_sim, strict=True):
        cases.append({"id": c["id"], "draw": c["draw"], "measured_s": c["result"]["per_step_s"],
                      "sim_s": sim})
    summary = _speedup_stats(rows, engines)
    if cases:
        err = [c["sim_s"] / c["measured_s"] - 1 for c in cases]
        summary["csr_sim"] = {"n": len(err), "mape": float(np.mean(np.abs(err))),
                              "mean_signed": float(np.mean(err))}
    rec["check"] = {"summary": summary, "layers": rows, "csr_cases": cases,
                    "command": f"python measurements/heads_baselines.py --check {path} "
                               f"--jobs {jobs}"}
    save_record(path, rec)
    for r in rows:
        print(f"{r['draw'][-3:]} {r['cell']} H{r['heads']} h{r['hidden']} b{r['batch']} "
              f"d{r['density']:g}: measured {r['measured']['best_persistent']} over "
              f"{r['measured']['next_best']} {r['measured']['speedup']:.2f}x; "
              + "; ".join(f"{e} {r[e]['best_persistent']} over {r[e]['next_best']} "
                          f"{r[e]['speedup'] or float('nan'):.2f}x" for e in engines))
    print(json.dumps(summary, indent=1))
    return rec


def main(argv: list | None = None) -> int:
    import argparse

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="GPU run: write heads_baselines.json here")
    ap.add_argument("--check", metavar="FILE", help="add the predictions' check to FILE")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    if a.check:
        check(a.check, a.jobs)
    elif a.out:
        os.makedirs(a.out, exist_ok=True)
        measure(a.out, [os.path.relpath(__file__)] + argv)
    else:
        ap.error("--out or --check")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
