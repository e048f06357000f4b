"""``gpusim crosscheck``: predict every recorded GPU case and compare with the measurement.

- persistent kernels and the CSR baseline: the simulator (spec chosen from the recorded GPU name)
  runs the recorded case's kernel with ``T = ncu_steps`` (4) time steps, all of them simulated:
  its ``per_step_s`` (steady state of those steps) is compared with the measured per-step time
  (slope between T=128 and T'=32 launches), and its shared-memory bank conflicts / wavefronts with
  the Nsight Compute counts of the same kernel at the same T (whole launch, h staging included).
  The CSR kernel is one launch per step: predicted per step = kernel cycles / clock + the spec's
  graph launch overhead (it was timed in a CUDA graph).
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
from pathlib import Path

from gpusim.cli.common import emit_json, positive_int
from kernels_ir.errors import InputError

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "measurements" / "h100"
SIM_KINDS = ("sparse_persistent", "dense_persistent", "csr")
LIB_KINDS = ("cublas", "cusparse")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help="campaign directory (campaign.json, ncu.json); default measurements/h100")
    p.add_argument("--plot", default=None, help="write predicted vs measured (log-log) to FILE.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--every", type=positive_int("every"), default=1,
                   help="use every k-th recorded case (a fast subset); default 1 = all")
    p.add_argument("--kinds", default=None,
                   help="comma-separated kinds to include (default all): " +
                   ", ".join(SIM_KINDS + LIB_KINDS))


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
    """Simulator prediction (per-step time and counts) for one recorded case."""
    from gpusim.engine import simulate
    from gpusim.measurements import build_case

    prog = build_case(case, steps, spec)
    if case["kind"] == "csr":
        # steady state of the T-launch graph: the previous step's launch left the layer in L2
        res = simulate(prog.kernel, prog.step_inputs(0, prog.layer.h0), spec, l2_warm=True)
        per_step = res.time_s - res.launch_overhead_s + spec.graph_launch_overhead_s
    else:
        res = simulate(prog.kernel, prog.inputs, spec)
        per_step = res.per_step_s
    return {"per_step_s": float(per_step), "source": "simulator",
            "model_s": predict_model(case, spec, prog), **_sim_counts(prog.kernel, res)}


def predict_model(case: dict, spec, prog) -> float | None:
    """The analytical model's per-step time for a recorded persistent or CSR case (the same
    layer and mapping the simulator ran), so its error is reported next to the simulator's."""
    try:
        from models import analytical
    except ImportError:
        return None
    if case["kind"] == "csr":
        t = analytical.predict_many(spec, case["hidden"], case["batch"], case["density"],
                                    kernels=["csr-row-per-warp"])["csr-row-per-warp"]
        return float(t.per_step_s.reshape(-1)[0])
    v = analytical.Variant(case["id"], "persistent", case["kind"] == "sparse_persistent",
                           case["sync"], bool(case["wide_loads"]), case.get("layout", "naive"))
    t = analytical.predict_mapping(spec, v, prog.mapping, case["batch"])
    val = float(t.per_step_s.reshape(-1)[0])
    return None if math.isnan(val) else val


def predict_library(case: dict, spec) -> dict:
    """The analytical model's per-step time for a recorded cuBLAS / cuSPARSE case; raises
    :class:`InputError` (reported as a skipped case) when the model cannot predict it."""
    from models import analytical

    try:
        t = analytical.predict_many(spec, case["hidden"], case["batch"], case["density"],
                                    kernels=[case["kind"]])[case["kind"]]
    except KeyError as exc:
        raise InputError(f"the analytical model has no kernel {exc}") from None
    val = float(t.per_step_s.reshape(-1)[0])
    if math.isnan(val):
        raise InputError("the analytical model says the layer does not fit")
    return {"per_step_s": val, "source": "analytical"}


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def run_crosscheck(data: str | Path, *, every: int = 1, kinds: tuple[str, ...] | None = None
                   ) -> dict:
    """Predict every (selected) recorded case; return per-case rows and the summary."""
    from scipy.stats import spearmanr

    from gpusim.measurements import BANK_METRICS, kernel_staleness, load_campaign
    from gpusim.specs import load_spec

    camp = load_campaign(data)
    spec = load_spec(camp.spec_name)
    steps = camp.ncu_steps or 4
    cases = [c for c in camp.ok_cases if kinds is None or c["kind"] in kinds][::every]
    rows = []
    stale, skipped = {}, {}
    for c in cases:
        why = kernel_staleness(c, spec)
        if why is not None:
            stale[c["id"]] = why
            continue
        if c["kind"] in SIM_KINDS:
            pred = predict_case(c, spec, steps)
        else:
            try:
                pred = predict_library(c, spec)
            except InputError as exc:
                skipped[c["id"]] = str(exc)
                continue
        meas = c["result"]["per_step_s"]
        row = {"id": c["id"], "kind": c["kind"], "measured_s": meas,
               "predicted_s": pred["per_step_s"], "source": pred["source"],
               "ape": _ape(pred["per_step_s"], meas)}
        if pred.get("model_s") is not None:
            row["model_s"] = pred["model_s"]
            row["model_ape"] = _ape(pred["model_s"], meas)
        ncu = camp.ncu.get(c["id"])
        if ncu is not None and pred["source"] == "simulator":
            for key, metric in BANK_METRICS.items():
                row[f"{key}_measured"] = int(ncu[metric])
                row[f"{key}_predicted"] = pred[key]
            row["conflicts_match"] = (row["conflicts_ld_measured"] == pred["conflicts_ld"] and
                                      row["conflicts_st_measured"] == pred["conflicts_st"])
            row["conflicts_ld_match"] = row["conflicts_ld_measured"] == pred["conflicts_ld"]
        rows.append(row)
    if not rows:
        raise InputError(f"no recorded case in {data} could be predicted (kinds={kinds}; "
                         f"{len(stale)} stale)")
    summary = _summarise(rows, spearmanr)
    summary.update({"unscored": len(camp.unscored), "unscored_cases": camp.unscored,
                    "stale": len(stale), "stale_cases": stale,
                    "skipped": len(skipped), "skipped_cases": skipped,
                    "format_version": camp.format_version, "data": str(data),
                    "gpu": camp.provenance["gpu_name"], "spec": spec.name,
                    "ncu_steps": steps, "every": every, "rows": rows})
    return summary


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
                "worst": worst["id"], "spearman": rho}

    out = stats(rows)
    out["by_source"] = {s: stats([r for r in rows if r["source"] == s])
                        for s in ("simulator", "analytical")}
    out["by_kind"] = {k: stats([r for r in rows if r["kind"] == k])
                      for k in sorted({r["kind"] for r in rows})}
    # the analytical model on the same simulator cases: its error next to the simulator's
    both = [r for r in rows if "model_s" in r]
    out["model_vs_simulator"] = None if not both else {
        "cases": len(both),
        "simulator": stats(both),
        "model": stats([{**r, "predicted_s": r["model_s"], "ape": r["model_ape"]}
                        for r in both]),
    }
    counted = [r for r in rows if "conflicts_match" in r]
    out["bank_conflict_cases"] = len(counted)
    out["bank_conflict_mismatches"] = sum(not r["conflicts_match"] for r in counted)
    out["bank_conflict_ld_mismatches"] = sum(not r["conflicts_ld_match"] for r in counted)
    return out


def plot(summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    kinds = sorted({r["kind"] for r in summary["rows"]})
    for k in kinds:
        rs = [r for r in summary["rows"] if r["kind"] == k]
        ax.scatter([r["measured_s"] * 1e6 for r in rs], [r["predicted_s"] * 1e6 for r in rs],
                   label=k, s=22)
    vals = [v * 1e6 for r in summary["rows"] for v in (r["measured_s"], r["predicted_s"])]
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured per-step time on {summary['gpu']} (µs)")
    ax.set_ylabel(f"predicted per-step time, spec {summary['spec']} (µs)")
    ax.set_title(f"MAPE {100 * summary['mape']:.0f}%, Spearman {summary['spearman']:.2f}, "
                 f"{summary['cases']} cases")
    ax.legend(title="kernel kind", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args) -> int:
    kinds = None
    if args.kinds:
        kinds = tuple(k.strip() for k in args.kinds.split(","))
        bad = [k for k in kinds if k not in SIM_KINDS + LIB_KINDS]
        if bad:
            raise InputError(f"--kinds {bad[0]!r} is unknown; accepted: "
                             f"{', '.join(SIM_KINDS + LIB_KINDS)}")
    s = run_crosscheck(args.data, every=args.every, kinds=kinds)
    if args.plot:
        plot(s, args.plot)
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
    return 0
