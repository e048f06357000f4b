"""The main job cross-checked: ``gpusim predict``'s speedup per recorded layer against the GPU's.

For every layer of a campaign directory (and its fresh draws, :mod:`gpusim.samples`) on which the
four sparse persistent variants that ``gpusim predict`` reports were all measured, the measured
speedup is the per-step time of the best of them over the best of every other measured kernel
(dense persistent where it fits, the CSR row-per-warp kernel, cuBLAS, cuSPARSE): the same
"best persistent over next best" that ``predict`` prints. ``predict`` is then run on the same
layer exactly as a user would run it (``models.analytical.predict_layer``, default seed), with the
analytical model and with the simulator, and its speedup and the names it gives compared.
"""

from __future__ import annotations

import numpy as np

__all__ = ["predict_name", "measured_layers", "required_baselines", "check_speedups",
           "print_speedups"]


def predict_name(case: dict) -> str | None:
    """The ``gpusim predict`` row a recorded case measures (None: a variant predict omits)."""
    kind = case["kind"]
    if kind == "sparse_persistent":
        key = (case["sync"], bool(case["wide_loads"]), case["layout"])
        return {("barrier", False, "naive"): "sparse-naive",
                ("barrier", True, "naive"): "sparse-wide",
                ("barrier", True, "optimal"): "sparse-bank",
                ("lamport", True, "optimal"): "sparse-lamport"}.get(key)
    if kind == "dense_persistent":
        return "dense-persistent"
    return {"csr": "csr-row-per-warp", "cublas": "cublas", "cusparse": "cusparse"}[kind]


SPARSE = ("sparse-naive", "sparse-wide", "sparse-bank", "sparse-lamport")
BASELINES = ("csr-row-per-warp", "cublas", "cusparse")
# gated cells and fp16 weights: the library baselines; the CSR kernel in the IR has fp32 weights
# only, and draws measured before it built the gated cells hold no CSR case of a gated layer
CELL_BASELINES = ("cublas", "cusparse")
RNN_FP32 = ("rnn", "fp32")


def required_baselines(layer: tuple, gated_csr: bool) -> tuple[str, ...]:
    """The per-step baselines a layer ``(hidden, batch, density, cell, dtype)`` must have
    measured: :data:`BASELINES` for RNN fp32; for a gated fp32 layer :data:`CELL_BASELINES` and,
    where its draw measured the CSR kernel on gated layers (``gated_csr``), the CSR kernel too;
    :data:`CELL_BASELINES` for fp16."""
    if layer[3:] == RNN_FP32:
        return BASELINES
    if layer[4] == "fp32" and gated_csr:
        return CELL_BASELINES + ("csr-row-per-warp",)
    return CELL_BASELINES


def measured_layers(cases) -> dict[tuple, dict[str, float]]:
    """layer ``(hidden, batch, density, cell, dtype)`` -> {predict row name: measured per-step
    s} for layers with all of :data:`SPARSE` and of the per-step baselines measured (values
    checked; :func:`required_baselines`): a layer missing one of them would compare against a
    slower alternative than the one a user has."""
    cases = list(cases)
    gated_csr = any(c["kind"] == "csr" and c.get("cell", "rnn") != "rnn" for c in cases)
    out: dict = {}
    for c in cases:
        if c["status"] != "ok" or not c["result"].get("values_ok", True):
            continue
        name = predict_name(c)
        if name is None or int(c.get("heads", 1)) > 1:   # head-wise layers: no baselines
            continue
        key = (int(c["hidden"]), int(c["batch"]), float(c["density"]), c.get("cell", "rnn"),
               c.get("dtype", "fp32"))
        out.setdefault(key, {})[name] = float(c["result"]["per_step_s"])
    return {k: v for k, v in out.items()
            if all(s in v for s in SPARSE + required_baselines(k, gated_csr))}


def _predicted(rep, measured: dict, restrict: bool | None = None):
    """(best persistent, next best, speedup) of a predict report. An RNN fp32 layer: as
    ``predict`` prints them. A gated or fp16 layer (or any, with ``restrict``): among the
    kernels measured on it (the CSR kernel where its draw measured it on a gated fp32 layer,
    simulated by ``predict --engine sim`` like the RNN's; not on fp16 layers, nor in the draws
    before the gated CSR kernel; a multi-head layer's CTA-local kernels: its Lamport ones)."""
    if restrict is None:
        restrict = (rep.cell, rep.dtype) != RNN_FP32
    if not restrict:
        return rep.best_persistent, rep.next_best, rep.speedup
    times = {r.name: r.per_step_s for r in rep.rows
             if r.name in measured and r.per_step_s is not None}
    if not any(n in times for n in SPARSE) or not any(n not in SPARSE for n in times):
        return None, None, None
    bp, tp = _best(times, SPARSE)
    nb, tn = _best(times, [n for n in times if n not in SPARSE])
    return bp, nb, tn / tp


def _best(times: dict, names) -> tuple[str, float]:
    cand = [(times[n], n) for n in names if n in times and times[n] is not None]
    t, n = min(cand)
    return n, t


def _predict(spec, h, b, d, cell, dtype, eng, sample_steps):
    from gpusim.cli.predict import simulator
    from models.analytical import predict_layer

    kw = {} if (cell, dtype) == RNN_FP32 else {"cell": cell, "dtype": dtype}
    return predict_layer(spec, h, b, d, timesteps=1, engine=eng,
                         simulator=simulator(sample_steps, parallel=False) if eng == "sim"
                         else None, **kw)


def check_speedups(data, *, engines=("model", "sim"), include_fresh: bool = True,
                   sample_steps: int | None = None, progress: bool = False,
                   jobs: int = 1) -> dict:
    """Per-layer speedup rows and their summary per sample and engine; ``jobs`` worker
    processes predict the layers (one layer per process)."""
    from gpusim.cli.crosscheck import _map
    from gpusim.measurements import load_campaign
    from gpusim.samples import draws
    from gpusim.specs import load_spec

    rows = []
    for g in draws(data, include_fresh=include_fresh):
        camp = load_campaign(g.path)
        spec = load_spec(camp.spec_name)
        layers = measured_layers(camp.cases)
        items = sorted(layers.items())
        reps = _map(_predict, [(spec, *key, eng, sample_steps) for key, _ in items
                               for eng in engines], jobs, desc=f"speedups {g.name}",
                    progress=progress)
        for i, ((h, b, d, cell, dtype), times) in enumerate(items):
            row = {"draw": g.name, "sample": g.sample, "hidden": h, "batch": b, "density": d,
                   **layer_speedups(times, dict(zip(engines, reps[i * len(engines):
                                                                 (i + 1) * len(engines)],
                                                      strict=True)))}
            if (cell, dtype) != RNN_FP32:
                row.update({"cell": cell, "dtype": dtype})
            rows.append(row)
    return summarise_speedups(rows, engines)


def layer_speedups(times: dict, reports: dict, restrict: bool | None = None) -> dict:
    """``{"measured": ..., engine: ...}`` of one layer: the measured per-step ``times`` {predict
    row name: s}, and per engine its predict report's speedup against them (:func:`_predicted`,
    ``restrict`` as there): the best persistent kernel, the next best, the speedup, its error
    and whether the fastest kernel was named."""
    others = [n for n in times if n not in SPARSE]
    bp, tp = _best(times, SPARSE)
    nb, tn = _best(times, others)
    out = {"measured": {"best_persistent": bp, "next_best": nb, "speedup": tn / tp,
                        "fastest": bp if tp <= tn else nb, "times_s": times}}
    for eng, rep in reports.items():
        pbp, pnb, sp = _predicted(rep, times, restrict)
        fastest = None if sp is None else (pbp if sp >= 1 else pnb)
        out[eng] = {"best_persistent": pbp, "next_best": pnb, "speedup": sp, "fastest": fastest,
                    "ape": None if sp is None else abs(sp / out["measured"]["speedup"] - 1),
                    "ratio": None if sp is None else out["measured"]["speedup"] / sp,
                    "persistent_named": pbp == bp,
                    "fastest_named": fastest == out["measured"]["fastest"],
                    "times_s": {r.name: r.per_step_s for r in rep.rows}}
    return out


def summarise_speedups(rows: list, engines=("model", "sim")) -> dict:
    """The speedup summary of per-layer ``rows`` (:func:`check_speedups`' rows, from one run
    or from several runs over disjoint draws under one model), per sample and engine."""
    from gpusim.samples import IN_SAMPLE, OUT_OF_SAMPLE

    summary = {"engines": list(engines), "rows": rows, "samples": {}, "cells": {}}
    # the headline samples are the RNN fp32 layers (the main job's); the gated and fp16 layers
    # are summarised apart under "cells"
    for label in (IN_SAMPLE, OUT_OF_SAMPLE):
        for part, sel in (("samples", [r for r in rows if r["sample"] == label
                                       and "cell" not in r]),
                          ("cells", [r for r in rows if r["sample"] == label and "cell" in r])):
            if sel:
                summary[part][label] = _speedup_stats(sel, engines)
    return summary


def named_slowdown(row: dict, eng: str) -> float | None:
    """How much slower on the GPU the kernel that ``eng`` names fastest ran than the fastest one
    (0 where it named the fastest; None where it named nothing or a kernel that was not
    measured): what following the prediction costs."""
    times = row["measured"]["times_s"]
    named = row[eng].get("fastest")
    if named not in times or not times[named]:
        return None
    return times[named] / times[row["measured"]["fastest"]] - 1


def _speedup_stats(sel: list, engines) -> dict:
    """Speedup MAPE, names, the named kernel's slowdown and the measured / predicted ratio band
    of rows ``sel``."""
    per = {"layers": len(sel)}
    for eng in engines:
        ok = [r[eng] for r in sel if r[eng]["ape"] is not None]
        apes = np.array([x["ape"] for x in ok])
        ratios = np.array([x["ratio"] for x in ok])
        slow = np.array([x for x in (named_slowdown(r, eng) for r in sel
                                     if r[eng]["ape"] is not None) if x is not None])
        per[eng] = {
            "layers": len(ok),
            "speedup_mape": float(apes.mean()) if ok else None,
            "speedup_max_ape": float(apes.max()) if ok else None,
            "fastest_named": sum(x["fastest_named"] for x in ok),
            "persistent_named": sum(x["persistent_named"] for x in ok),
            # the named kernel's measured time over the fastest's, less 1 (0 when named right)
            "named_slowdown_mean": float(slow.mean()) if slow.size else None,
            "named_slowdown_max": float(slow.max()) if slow.size else None,
            "named_within_5pct": int((slow <= 0.05).sum()),
            # measured / predicted speedup, described (predict's bands take their ends by
            # gpusim.uncertainty.band_ends)
            "ratio_p10": float(np.percentile(ratios, 10)) if ok else None,
            "ratio_p90": float(np.percentile(ratios, 90)) if ok else None,
            "ratio_min": float(ratios.min()) if ok else None,
            "ratio_max": float(ratios.max()) if ok else None,
        }
    return per


def print_speedups(s: dict) -> None:
    engines = s["engines"]
    head = f"{'draw':28s} {'layer':22s} {'measured':>22s}"
    for e in engines:
        head += f" {('predict --engine ' + e):>30s}"
    print(head)
    for r in s["rows"]:
        m = r["measured"]
        layer = f"h{r['hidden']} b{r['batch']} d{r['density']:g}"
        if "cell" in r:
            layer = f"{r['cell']} {r['dtype']} {layer}"
        line = (f"{r['draw'][:28]:28s} {layer:22s} "
                f"{m['speedup']:5.2f}x {m['best_persistent']:>15s}")
        for e in engines:
            p = r[e]
            if p["speedup"] is None:
                line += f" {'-':>30s}"
            else:
                mark = "" if p["persistent_named"] else "*"
                line += (f" {p['speedup']:5.2f}x ({100 * p['ape']:4.0f}%) "
                         f"{p['best_persistent'] + mark:>15s}")
        print(line)
    print("(* = the fastest persistent variant named differently from the GPU's)")
    parts = [(label, per) for label, per in s["samples"].items()]
    parts += [(f"{label}, gated / fp16 layers", per)
              for label, per in s.get("cells", {}).items()]
    for label, per in parts:
        for e in engines:
            st = per[e]
            if not st["layers"]:
                continue
            print(f"{label}, --engine {e}: {st['layers']} layers, speedup MAPE "
                  f"{100 * st['speedup_mape']:.1f}% (worst {100 * st['speedup_max_ape']:.0f}%), "
                  f"fastest kernel named in {st['fastest_named']}/{st['layers']} (the named one "
                  f"within 5% of the fastest in {st.get('named_within_5pct', '?')}), fastest "
                  f"persistent variant in {st['persistent_named']}/{st['layers']}")
