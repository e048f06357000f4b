"""``gpusim crosscheck``: predict every recorded GPU case and compare with the measurement.

- persistent kernels and the CSR baseline: the simulator (spec chosen from the recorded GPU name)
  runs the recorded case's kernel with ``T = ncu_steps`` (4) time steps, all of them simulated,
  and compares its shared-memory bank conflicts / wavefronts with the Nsight Compute counts of
  the same kernel at the same T (whole launch, h staging included). A persistent kernel whose
  steps are short is then simulated again with more steps
  (:func:`gpusim.pricing.price_persistent`, as ``gpusim predict --engine sim`` does; ``steps``
  in the row); the ``per_step_s`` of that pass (its steady state) is compared with the measured
  per-step time (slope between T=128 and T'=32 launches).
  The CSR kernel is one launch per step: predicted per step = kernel cycles / clock + the spec's
  graph launch overhead (it was timed in a CUDA graph); a gated layer's CSR case runs the gated
  kernel (a warp per unit, :mod:`kernels_ir.kernels.csr_baseline`).
- cuBLAS / cuSPARSE: ``models.analytical`` (when present) predicts the per-step time.

Provenance: every kernel case of the data (persistent, CSR) is rebuilt at its recorded ``steps``
and the sha256 of its generated CUDA source and IR text compared with the hashes the campaign
recorded (:func:`gpusim.measurements.kernel_staleness`). A case whose kernel changed since it was
measured (or that has no hash: old files) is reported as ``stale`` (JSON ``stale``: count,
``stale_cases``: id -> reason) and left out of every statistic: its measurement describes another
kernel. Whoever changes a kernel must re-measure it.

Reports per case, then MAPE, the worst case and the Spearman rank correlation
(``scipy.stats.spearmanr``) over all predicted cases (and per source). ``--json`` prints
``{"cases", "mape", "max_ape", "worst", "spearman", "bank_conflict_mismatches", ...}``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from gpusim.cli.common import emit_json, positive_int
from gpusim.data import measurement_dir
from gpusim.samples import IN_SAMPLE, OUT_OF_SAMPLE
from kernels_ir.errors import InputError

DEFAULT_DATA = measurement_dir("h100", required=False)  # the checkout or the installed copy
SIM_KINDS = ("sparse_persistent", "dense_persistent", "csr")
LIB_KINDS = ("cublas", "cusparse")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpusim.cli.common import add_list_argument, add_output_arguments

    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help="campaign directory (campaign.json, ncu.json) and its fresh_*/ draws")
    p.add_argument("--fresh", action=argparse.BooleanOptionalAction, default=True,
                   help="also read the fresh draws (fresh_*/) under --data")
    p.add_argument("--speedup", action="store_true",
                   help="also cross-check the predicted speedup per layer (gpusim predict with "
                        "the model and the simulator on every recorded layer; slow)")
    p.add_argument("--write-bands", action="store_true",
                   help="with --speedup: record the out-of-sample error bands that gpusim "
                        "predict prints (gpusim/specs/error_bands.json)")
    p.add_argument("--every", type=positive_int("every"), default=1,
                   help="use every k-th recorded case (a fast subset); 1 = all")
    add_list_argument(p, "--kinds", kind=str, default=None,
                      help="kinds to include (default all): " + ", ".join(SIM_KINDS + LIB_KINDS))
    p.add_argument("--jobs", type=positive_int("jobs"), default=1,
                   help="worker processes for the simulations (the result does not depend on it)")
    add_output_arguments(p, plot="predicted vs measured per-step time (log-log)", progress=True)


def _sim_counts(kernel, res) -> dict:
    """Split the simulator's per-instruction shared-memory counts into loads and stores."""
    from kernels_ir.ir import Op, instructions

    instrs = list(instructions(kernel))
    out = {"conflicts_ld": 0, "conflicts_st": 0, "wavefronts_ld": 0, "wavefronts_st": 0}
    for what, table in (("conflicts", res.bank_conflicts), ("wavefronts", res.smem_wavefronts)):
        for sid, n in table.get("per_instruction", {}).items():
            op = instrs[int(sid)].op
            if op is Op.LDS:
                out[f"{what}_ld"] += int(n)
            elif op is Op.STS:
                out[f"{what}_st"] += int(n)
    return out


def predict_case(case: dict, spec, steps: int) -> dict:
    """Simulator prediction (per-step time and counts) for one recorded case, priced as
    ``gpusim predict --engine sim`` prices it (:func:`gpusim.pricing.price_program`, values
    checked against the float64 reference)."""
    from gpusim.measurements import build_case
    from gpusim.pricing import price_persistent, price_program

    prog = build_case(case, steps, spec)
    counted = price_program(prog, spec, what=case["id"])
    p = counted
    if case["kind"] != "csr":     # a persistent kernel: as many steps as its scatter needs
        p = price_persistent(lambda t: build_case(case, t, spec), spec, what=case["id"],
                             first=counted)
    return {"per_step_s": p.per_step_s, "source": "simulator", "steps": int(p.result.steps),
            "model_s": predict_model(case, spec, prog), **_sim_counts(prog.kernel,
                                                                    counted.result)}


def _predict_one(case: dict, spec, steps: int) -> tuple[str, object]:
    """("ok", prediction), ("stale", why) or ("skipped", why) for one recorded case."""
    from gpusim.measurements import kernel_staleness

    try:   # a recorded layer that today's capacity refuses (e.g. ptxas would spill) is skipped
        why = kernel_staleness(case, spec)
        if why is not None:
            return "stale", why
        if case["kind"] in SIM_KINDS:
            return "ok", predict_case(case, spec, steps)
        return "ok", predict_library(case, spec)
    except InputError as exc:
        return "skipped", str(exc)


def _map(fn, args: list[tuple], jobs: int, *, desc: str = "", progress: bool = False) -> list:
    """``[fn(*a) for a in args]``, in ``jobs`` worker processes when ``jobs > 1``; the results
    keep the order of ``args``."""
    from gpusim.progress import bar

    if jobs <= 1 or len(args) <= 1:
        return [fn(*a) for a in bar(args, desc=desc, unit=" cases", enabled=progress)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(min(jobs, len(args)), mp_context=ctx) as ex:
        futures = [ex.submit(fn, *a) for a in args]
        return [f.result() for f in bar(futures, desc=desc, unit=" cases", enabled=progress)]


def predict_model(case: dict, spec, prog) -> float | None:
    """The analytical model's per-step time for a recorded persistent or CSR case (the same
    layer and mapping the simulator ran), so its error is reported next to the simulator's."""
    try:
        from models import analytical
    except ImportError:
        return None
    from gpusim.measurements import case_layer_kind, recorded_step_wait

    cell, dtype, _ = case_layer_kind(case)
    if case["kind"] == "csr":
        t = analytical.predict_many(spec, case["hidden"], case["batch"], case["density"],
                                    kernels=["csr-row-per-warp"], cell=cell)["csr-row-per-warp"]
        return float(t.per_step_s.reshape(-1)[0])
    v = analytical.Variant(case["id"], "persistent", case["kind"] == "sparse_persistent",
                           case["sync"], bool(case["wide_loads"]), case.get("layout", "naive"),
                           step_wait=recorded_step_wait(case))     # the kernel that ran
    t = analytical.predict_mapping(spec, v, prog.mapping, case["batch"],
                                   **({} if dtype == "fp32" else {"dtype": dtype}))
    val = float(t.per_step_s.reshape(-1)[0])
    return None if math.isnan(val) else val


def predict_library(case: dict, spec) -> dict:
    """The analytical model's per-step time for a recorded cuBLAS / cuSPARSE case; raises
    :class:`InputError` (reported as a skipped case) when the model cannot predict it."""
    from gpusim.measurements import case_layer_kind
    from models import analytical

    cell, dtype, _ = case_layer_kind(case)
    try:
        t = analytical.predict_many(spec, case["hidden"], case["batch"], case["density"],
                                    kernels=[case["kind"]], cell=cell, dtype=dtype)[case["kind"]]
    except KeyError as exc:
        raise InputError(f"the analytical model has no kernel {exc}") from None
    val = float(t.per_step_s.reshape(-1)[0])
    if math.isnan(val):
        raise InputError("the analytical model says the layer does not fit")
    return {"per_step_s": val, "source": "analytical"}


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def run_crosscheck(data: str | Path, *, every: int = 1, kinds: tuple[str, ...] | None = None,
                   include_fresh: bool = True, progress: bool = False, jobs: int = 1) -> dict:
    """Predict every (selected) recorded case of ``data`` (a campaign directory and its fresh
    draws, :func:`gpusim.samples.draws`); return per-case rows and the summary, overall and per
    sample (in sample / out of sample, :mod:`gpusim.samples`). ``jobs``: worker processes
    (each case is simulated independently; the result does not depend on ``jobs``)."""
    from gpusim.measurements import (
        ARBITRATION,
        BANK_METRICS,
        SASS_WAVEFRONTS,
        case_layer_kind,
        load_campaign,
    )
    from gpusim.samples import draws, family
    from gpusim.specs import load_spec

    groups = draws(data, include_fresh=include_fresh)
    rows = []
    stale, skipped, mismatched = {}, {}, {}
    specs, gpus, versions = set(), set(), set()
    draw_info = []
    for g in groups:
        camp = load_campaign(g.path)
        spec = load_spec(camp.spec_name)
        specs.add(spec.name)
        gpus.add(camp.provenance["gpu_name"])
        versions.add(camp.format_version)
        steps = camp.ncu_steps or 4
        cases = [c for c in camp.ok_cases if kinds is None or c["kind"] in kinds][::every]
        not_ok = [c for c in camp.cases if c["status"] == "ok" and
                  not c["result"].get("values_ok", True)]
        for c in not_ok:   # measured with wrong values: never scored
            mismatched[c["id"]] = "values_ok is false in the record"
        cases = [c for c in cases if c["result"].get("values_ok", True)]
        draw_info.append({"draw": g.name, "path": str(g.path), "sample": g.sample, "why": g.why,
                          "cases": len(cases)})
        preds = _map(_predict_one, [(c, spec, steps) for c in cases], jobs,
                     desc=f"crosscheck {g.name}", progress=progress)
        for c, (why, pred) in zip(cases, preds, strict=True):
            key = c["id"] if g.name == "campaign" else f"{g.name}/{c['id']}"
            if why == "stale":
                stale[key] = pred
                continue
            if why == "skipped":
                skipped[key] = pred
                continue
            meas = c["result"]["per_step_s"]
            row = {"id": key, "kind": c["kind"], "family": family(c), "draw": g.name,
                   "sample": g.sample, "hidden": c["hidden"], "batch": c["batch"],
                   "density": c["density"], "measured_s": meas,
                   "predicted_s": pred["per_step_s"], "source": pred["source"],
                   "ape": _ape(pred["per_step_s"], meas),
                   "signed": pred["per_step_s"] / meas - 1.0}
            for k in ("sync", "wide_loads", "layout"):
                if k in c:
                    row[k] = c[k]
            if "steps" in pred:
                row["steps_simulated"] = pred["steps"]
            cell, dtype, heads = case_layer_kind(c)
            if (cell, dtype, heads) != ("rnn", "fp32", 1):   # summarised apart ("cells")
                row.update({"cell": cell, "dtype": dtype, "heads": heads})
            if pred.get("model_s") is not None:
                row["model_s"] = pred["model_s"]
                row["model_ape"] = _ape(pred["model_s"], meas)
            ncu = camp.ncu.get(c["id"])
            if ncu is not None and pred["source"] == "simulator":
                for k, metric in BANK_METRICS.items():
                    row[f"{k}_measured"] = int(ncu[metric])
                    row[f"{k}_predicted"] = pred[k]
                row["conflicts_match"] = (row["conflicts_ld_measured"] == pred["conflicts_ld"]
                                          and row["conflicts_st_measured"] ==
                                          pred["conflicts_st"])
                row["conflicts_ld_match"] = row["conflicts_ld_measured"] == pred["conflicts_ld"]
                if SASS_WAVEFRONTS in ncu:   # the addresses' wavefronts, loads and stores
                    row["wavefronts_sass_measured"] = int(ncu[SASS_WAVEFRONTS])
                    row["wavefronts_sass_match"] = row["wavefronts_sass_measured"] == (
                        pred["wavefronts_ld"] + pred["wavefronts_st"])
                    if ARBITRATION in ncu:
                        row["arbitration_measured"] = int(ncu[ARBITRATION])
            rows.append(row)
    if not rows:
        first = next(iter(skipped.items()), None)
        raise InputError(f"no recorded case in {data} could be predicted (kinds={kinds}; "
                         f"{len(stale)} stale; {len(skipped)} not predicted"
                         + (f", e.g. {first[0]}: {first[1]})" if first else ")"))
    return _report(rows, mismatched, stale, skipped, min(versions), str(data), gpus, specs,
                   draw_info, every)


def _report(rows, mismatched, stale, skipped, version, data, gpus, specs, draw_info,
            every) -> dict:
    """The summary of per-case ``rows``, overall and per sample, with the cases left out."""
    from scipy.stats import spearmanr

    # the whole summary covers every predicted case; per sample, the RNN fp32 layers (the main
    # job's, the headline) and the gated, fp16 and multi-head layers of the fresh draws
    # ("cells") are summarised apart
    rnn = [r for r in rows if "cell" not in r]
    cells = [r for r in rows if "cell" in r]
    summary = _summarise(rows, spearmanr)
    summary["samples"], summary["cells"] = {}, {}
    for label in (IN_SAMPLE, OUT_OF_SAMPLE):
        for part, pool in (("samples", rnn), ("cells", cells)):
            sel = [r for r in pool if r["sample"] == label]
            if sel:
                summary[part][label] = _summarise(sel, spearmanr)
    summary.update({"unscored": len(mismatched), "unscored_cases": mismatched,
                    "stale": len(stale), "stale_cases": stale,
                    "skipped": len(skipped), "skipped_cases": skipped,
                    "format_version": version, "data": data,
                    "gpu": ", ".join(sorted(gpus)), "spec": ", ".join(sorted(specs)),
                    "draws": draw_info, "every": every, "rows": rows})
    return summary


def merge_reports(parts: list[dict], data: str) -> dict:
    """One report of ``data`` from cross-checks of disjoint sets of its draws (each a
    :func:`run_crosscheck` report, e.g. the campaign and the earlier draws in one run and a new
    draw right after its measurement in another, under the same model): their rows, draws and
    left-out cases together, summarised as :func:`run_crosscheck` summarises. The draws come
    out in :func:`gpusim.samples.draws` order; a draw in two parts, or parts with different
    ``every``, are refused."""
    from gpusim.samples import draws

    names = [d["draw"] for p in parts for d in p["draws"]]
    if len(set(names)) != len(names):
        raise InputError(f"merge_reports: a draw is in two parts ({sorted(names)})")
    if len({p["every"] for p in parts}) != 1:
        raise InputError("merge_reports: the parts used different --every")
    order = {g.name: i for i, g in enumerate(draws(data))}
    info = sorted((d for p in parts for d in p["draws"]), key=lambda d: order.get(d["draw"], 1e9))
    rank = {d["draw"]: i for i, d in enumerate(info)}
    rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: rank[r["draw"]])

    def joined(key):
        return {k: v for p in parts for k, v in p[key].items()}

    return _report(rows, joined("unscored_cases"), joined("stale_cases"),
                   joined("skipped_cases"), min(p["format_version"] for p in parts), str(data),
                   {g for p in parts for g in p["gpu"].split(", ")},
                   {x for p in parts for x in p["spec"].split(", ")}, info, parts[0]["every"])


def _summarise(rows, spearmanr) -> dict:
    def stats(rs):
        if not rs:
            return None
        apes = [r["ape"] for r in rs]
        worst = max(rs, key=lambda r: r["ape"])
        rho = (float(spearmanr([r["predicted_s"] for r in rs],
                               [r["measured_s"] for r in rs]).statistic)
               if len(rs) > 2 else float("nan"))
        return {"cases": len(rs), "mape": sum(apes) / len(apes), "max_ape": worst["ape"],
                "worst": worst["id"], "spearman": rho,
                "mean_signed": sum(r["predicted_s"] / r["measured_s"] - 1 for r in rs) / len(rs)}

    out = stats(rows)
    out["by_source"] = {s: stats([r for r in rows if r["source"] == s])
                        for s in ("simulator", "analytical")}
    out["by_kind"] = {k: stats([r for r in rows if r["kind"] == k])
                      for k in sorted({r["kind"] for r in rows})}
    out["by_family"] = {k: stats([r for r in rows if r["family"] == k])
                        for k in sorted({r["family"] for r in rows})}
    # the analytical model on the same simulator cases: its error next to the simulator's
    both = [r for r in rows if "model_s" in r]
    model_rows = [{**r, "predicted_s": r["model_s"], "ape": r["model_ape"]} for r in both]
    out["model_vs_simulator"] = None if not both else {
        "cases": len(both),
        "simulator": stats(both),
        "model": stats(model_rows),
        "model_by_family": {k: stats([r for r in model_rows if r["family"] == k])
                            for k in sorted({r["family"] for r in model_rows})},
    }
    counted = [r for r in rows if "conflicts_match" in r]
    out["bank_conflict_cases"] = len(counted)
    out["bank_conflict_mismatches"] = sum(not r["conflicts_match"] for r in counted)
    out["bank_conflict_ld_mismatches"] = sum(not r["conflicts_ld_match"] for r in counted)
    # the cases whose hardware counts differ, checked by address: Nsight's SASS-patched
    # wavefronts equal the simulator's (the difference is the banks' arbitration, not addresses)
    off = [r for r in counted if not r["conflicts_match"]]
    out["bank_conflict_address_checked"] = sum("wavefronts_sass_match" in r for r in off)
    out["bank_conflict_address_matches"] = sum(r.get("wavefronts_sass_match", False)
                                               for r in off)
    return out


def _write_bands(s: dict) -> None:
    import json

    from gpusim.measurements import model_fingerprint
    from gpusim.uncertainty import BANDS_FILE, bands_from, contenders_judged, load_bands

    if "," in s["spec"]:
        raise InputError(f"--write-bands: the report covers the GPUs {s['spec']}; bands are "
                         f"kept per GPU (cross-check one GPU's measurement directory)")
    try:
        b = bands_from(s, s["speedup"], model_fingerprint(gpu=s["spec"]), s["spec"])
    except ValueError as exc:
        raise InputError(str(exc)) from None
    allb = load_bands()
    prev = allb.get(s["spec"])
    if prev is not None:   # the previous bands' contenders, on the draws they were not made from
        judged = contenders_judged(prev, b, s)
        if judged is not None:
            b["contenders_judged"] = judged
    allb[s["spec"]] = b
    BANDS_FILE.write_text(json.dumps(allb, indent=1, sort_keys=True) + "\n")
    print(f"error bands of {s['spec']} written to {BANDS_FILE}", file=sys.stderr)


def main(args) -> int:
    from gpusim.api import crosscheck
    from gpusim.cli.common import check_plot_path, show_progress

    check_plot_path(args)
    if args.write_bands and (not args.speedup or args.every != 1 or args.kinds):
        raise InputError("--write-bands needs --speedup and every case (no --every, no --kinds)")
    progress = show_progress(args)
    s = crosscheck(args.data, every=args.every, kinds=args.kinds, include_fresh=args.fresh,
                   progress=progress, jobs=args.jobs).to_dict()
    if args.speedup:
        from gpusim.speedup_check import check_speedups

        s["speedup"] = check_speedups(args.data, include_fresh=args.fresh, progress=progress,
                                      jobs=args.jobs)
    if args.write_bands:
        _write_bands(s)
    if args.plot:
        from gpusim.plots.crosscheck import plot_crosscheck

        plot_crosscheck(s, args.plot)
    if args.json:
        emit_json({k: v for k, v in s.items()})
        return 0
    print(f"{'case':58s} {'measured':>9s} {'predicted':>9s} {'err':>6s}  conflicts meas/pred")
    for r in s["rows"]:
        bc = ""
        if "conflicts_match" in r:
            bc = (f"ld {r['conflicts_ld_measured']}/{r['conflicts_ld_predicted']} "
                  f"st {r['conflicts_st_measured']}/{r['conflicts_st_predicted']}")
        print(f"{r['id']:58s} {r['measured_s'] * 1e6:8.2f}u {r['predicted_s'] * 1e6:8.2f}u "
              f"{100 * r['ape']:5.0f}%  {bc}")
    for cid, why in s["stale_cases"].items():
        print(f"{cid:58s} stale: {why}")
    for cid, why in s["skipped_cases"].items():
        print(f"{cid:58s} not predicted: {why}")
    for cid, why in s["unscored_cases"].items():
        print(f"{cid:58s} not scored: {why}")
    if s["stale"]:
        print(f"\n{s['stale']} stale case(s): their kernel changed since they were measured; "
              f"left out of the statistics (re-measure them)")
    print(f"\n{s['cases']} cases on {s['gpu']} (spec {s['spec']}): MAPE {100 * s['mape']:.1f}%, "
          f"worst {100 * s['max_ape']:.0f}% ({s['worst']}), Spearman {s['spearman']:.3f}")
    for src, st in s["by_source"].items():
        if st:
            print(f"  {src:10s}: {st['cases']} cases, MAPE {100 * st['mape']:.1f}%, "
                  f"Spearman {st['spearman']:.3f}" if not math.isnan(st["spearman"]) else
                  f"  {src:10s}: {st['cases']} cases, MAPE {100 * st['mape']:.1f}%")
    mv = s.get("model_vs_simulator")
    if mv:
        print(f"  on the same {mv['cases']} kernel cases: simulator MAPE "
              f"{100 * mv['simulator']['mape']:.1f}% (Spearman {mv['simulator']['spearman']:.3f}),"
              f" analytical model MAPE {100 * mv['model']['mape']:.1f}% (Spearman "
              f"{mv['model']['spearman']:.3f})")
    print(f"bank conflicts: {s['bank_conflict_cases'] - s['bank_conflict_mismatches']} of "
          f"{s['bank_conflict_cases']} cases match Nsight Compute exactly (loads only: "
          f"{s['bank_conflict_cases'] - s['bank_conflict_ld_mismatches']})")
    if s.get("bank_conflict_address_checked"):
        print(f"  of the others, {s['bank_conflict_address_matches']} of "
              f"{s['bank_conflict_address_checked']} checked by address match Nsight's "
              f"SASS-patched wavefronts exactly (the rest of their count is the banks' "
              f"arbitration)")
    print()
    for d in s["draws"]:
        print(f"  {d['draw']:28s} {d['sample']:14s} {d['cases']:4d} cases ({d['why']})")
    for label, st in s["samples"].items():
        sim = st["by_source"]["simulator"]
        print(f"{label}: {st['cases']} cases, MAPE {100 * st['mape']:.1f}%"
              + (f"; simulator {sim['cases']} kernel cases MAPE {100 * sim['mape']:.1f}%, "
                 f"Spearman {sim['spearman']:.3f}" if sim else ""))
        for fam, f in st["by_family"].items():
            print(f"    {fam:20s} {f['cases']:4d} cases  MAPE {100 * f['mape']:5.1f}%  "
                  f"mean signed {100 * f['mean_signed']:+5.1f}%")
    for label, st in s.get("cells", {}).items():
        sim = st["by_source"]["simulator"]
        print(f"{label}, gated / fp16 layers (apart from the figures above): {st['cases']} "
              f"cases, MAPE {100 * st['mape']:.1f}%"
              + (f"; simulator {sim['cases']} kernel cases MAPE {100 * sim['mape']:.1f}%, "
                 f"Spearman {sim['spearman']:.3f}" if sim else ""))
        for fam, f in st["by_family"].items():
            print(f"    {fam:20s} {f['cases']:4d} cases  MAPE {100 * f['mape']:5.1f}%  "
                  f"mean signed {100 * f['mean_signed']:+5.1f}%")
    if "speedup" in s:
        from gpusim.speedup_check import print_speedups

        print()
        print_speedups(s["speedup"])
    return 0
