"""Bring fresh draws measured on a GPU machine into the repository, in one step: copy each draw,
xz-compress its records, merge its cross-check report into the GPU's merged record, rewrite the
error bands from it and print the out-of-sample figures the READMEs quote.

    python measurements/add_draws.py --gpu h200 OUT_1 OUT_2     # the device calls' $OUT copies
    python measurements/add_draws.py --gpu h200 --details       # the merged record's details

Each source folder is what one device call of the fresh-draw protocol brought back: one or more
``fresh_<date>_s<seed>/`` folders (``campaign.json``, ``ncu.json``, their logs; plain or
gzipped) and their ``gpusim crosscheck --no-fresh --speedup --json`` reports ``cc_s<seed>.json``.
The reports name the draws by the machine's paths; those become ``measurements/<gpu>/...``.
A draw already in the repository is refused (it would be merged twice). ``--dry-run`` only
says what it would do. After a merge, and with ``--details`` alone, it prints the figures the
READMEs quote (:func:`readme_rows`, :func:`details`): per draw, the bootstrap interval, the
naming misses, the largest errors, the signed errors by regime and the bank-conflict cases.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRAW = re.compile(r"fresh_\d{4}-\d\d-\d\d_s\d+$")
# kept xz-compressed (measurements/README.md, "Files"): the records, the device call's log and
# the Nsight CSV (a device call gzips the CSV and the records; they are recompressed here)
COMPRESSED = ("campaign.json", "ncu.json", "campaign_log.txt", "ncu_raw.csv")
ROOT = Path(__file__).resolve().parents[1]


def find(sources) -> tuple[list[Path], list[Path]]:
    """The draw folders and the cross-check reports (``cc_s<seed>.json``) under ``sources``."""
    draws, reports = [], []
    for s in map(Path, sources):
        if not s.is_dir():
            raise SystemExit(f"{s}: not a folder; accepted: a device call's output folder")
        draws += sorted(p for p in s.iterdir() if p.is_dir() and DRAW.match(p.name))
        reports += sorted(s.glob("cc_s*.json"))
    seeds = {p.name.rsplit("_s", 1)[1] for p in draws}
    have = {p.stem[len("cc_s"):] for p in reports}
    if not draws or seeds != have:
        raise SystemExit(f"draws {sorted(seeds)} and reports {sorted(have)} under "
                         f"{', '.join(map(str, sources))} do not pair up; accepted: every "
                         f"fresh_*_sN/ with its cc_sN.json")
    return draws, reports


def local_paths(text: str, gpu: str) -> str:
    """A report's text with every machine path of a draw (``.../fresh_<date>_s<seed>``) made
    the repository's (``measurements/<gpu>/fresh_<date>_s<seed>``)."""
    return re.sub(r'"[^"]*/(fresh_\d{4}-\d\d-\d\d_s\d+)', rf'"measurements/{gpu}/\1', text)


def copy_draw(src: Path, dest: Path) -> None:
    """Copy one draw folder, xz-compressing its :data:`COMPRESSED` files, plain or gzipped
    (``xz -9`` alike: the same bytes for the same content)."""
    import lzma

    dest.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        name = f.name[:-3] if f.name.endswith(".gz") else f.name
        if name in COMPRESSED:
            opener = gzip.open if f.name.endswith(".gz") else open
            with opener(f, "rb") as a, lzma.open(dest / (name + ".xz"), "wb", preset=9) as b:
                shutil.copyfileobj(a, b)
        elif f.is_file():
            shutil.copy2(f, dest / f.name)


def add(gpu: str, sources, dry_run: bool = False) -> dict | None:
    from gpusim.cli.crosscheck import _write_bands
    from measurements.merge_crosschecks import merge
    from measurements.probe import read_record, record_path, save_record

    data = ROOT / "measurements" / gpu
    if not data.is_dir():
        raise SystemExit(f"--gpu {gpu!r}: no folder {data}")
    draws, reports = find(sources)
    clash = [p.name for p in draws if (data / p.name).exists()]
    if clash:
        raise SystemExit(f"already in {data}: {', '.join(clash)} (a draw is merged once)")
    # the merged record, kept compressed (xz; an older GPU's gzip copy is kept as it is)
    merged_path = Path(record_path(str(data / "crosscheck_fresh.json")))
    if not merged_path.exists():
        merged_path = data / "crosscheck_fresh.json.xz"
    print(f"{len(draws)} draws ({', '.join(p.name for p in draws)}) into {data}; merged into "
          f"{merged_path}")
    if dry_run:
        return None
    for p in draws:
        copy_draw(p, data / p.name)
    before = [read_record(str(merged_path))] if merged_path.exists() else []
    with tempfile.TemporaryDirectory() as tmp:
        parts = []
        for r in reports:
            local = Path(tmp) / r.name
            local.write_text(local_paths(r.read_text(), gpu))
            parts.append(read_record(str(local)))
    note = "".join(p.get("command", "") + "; then " for p in before) + \
        f"{', '.join(p.name for p in draws)} added by measurements/add_draws.py"
    merged = merge(before + parts, str(data.relative_to(ROOT)), note)
    save_record(str(merged_path), merged)
    keep_previous_bands(gpu, data)
    _write_bands(merged)
    return merged


def keep_previous_bands(gpu: str, data: Path) -> Path | None:
    """The GPU's bands as ``predict`` prints them now, kept as ``<data>/error_bands_sA_sB.json``
    (their draws' first and last seed) before new draws replace them: the contenders that
    :func:`gpusim.uncertainty.contenders_judged` judges on the new draws, and the test that
    checks that judgement, read them there."""
    from gpusim.uncertainty import band_draws, draw_seed, load_bands

    prev = load_bands().get(gpu)
    if prev is None:
        return None
    seeds = sorted(draw_seed(d) for d in band_draws(prev))
    path = data / f"error_bands_s{seeds[0]}_s{seeds[-1]}.json"
    if not path.exists():
        path.write_text(json.dumps(prev, indent=1) + "\n")
    return path


def readme_rows(merged: dict) -> list[str]:
    """The rows of the top-level README's table for the GPU of ``merged`` (its out-of-sample
    draws ``sA`` to ``sB``): speedup error, naming, and per-step error of our kernels."""
    o = merged["samples"]["out of sample"]
    sp = merged["speedup"]["samples"]["out of sample"]
    sim, mod = o["by_source"]["simulator"], o["model_vs_simulator"]["model"]
    m, s = sp["model"], sp["sim"]
    from gpusim.uncertainty import draw_seed

    seeds = sorted(draw_seed(d["draw"]) for d in merged["draws"] if d["sample"] == "out of sample")
    return [
        f"| speedup MAPE, out of sample (s{seeds[0]}-s{seeds[-1]}) | "
        f"{m['speedup_mape'] * 100:.1f}% | {s['speedup_mape'] * 100:.1f}% |",
        f"| fastest kernel named | {m['fastest_named']} of {m['layers']} | "
        f"{s['fastest_named']} of {s['layers']} |",
        f"| the named kernel within 5% of the fastest | {m['named_within_5pct']} of "
        f"{m['layers']} | {s['named_within_5pct']} of {s['layers']} |",
        f"| per-step time, our kernels ({sim['cases']} cases) | {mod['mape'] * 100:.1f}% | "
        f"{sim['mape'] * 100:.1f}% (Spearman {sim['spearman']:.3f}) |"]


def figures(merged: dict) -> str:
    """:func:`readme_rows`, the simulator's mean signed error by family and the draws."""
    o = merged["samples"]["out of sample"]
    fam = ", ".join(f"{k} {v['mean_signed'] * 100:+.1f}%" for k, v in o["by_family"].items())
    return "\n".join(readme_rows(merged) + [
        f"mean signed by family: {fam}",
        f"draws: {', '.join(d['draw'] + ' (' + d['sample'] + ')' for d in merged['draws'])}"])


def speedup_parts(rows: list, eng: str) -> dict:
    """Where an engine's speedup error comes from, over speedup ``rows`` (RNN layers): with the
    GPU's best persistent kernel ``b`` and next best ``n``, ``log(predicted / measured speedup)``
    is the engine's log error on ``n`` (the baseline) less its log error on ``b`` (the best
    persistent kernel), plus what naming other kernels adds (the picks; 0 when the engine names
    ``b`` and ``n``). Means of their absolute values (and the baseline's signed mean by the
    kernel the GPU ran as the next best, with its count), as fractions."""
    import numpy as np

    parts = {"speedup": [], "baseline": [], "persistent": [], "picks": []}
    by = {}
    for r in rows:
        m, p = r["measured"], r[eng]
        tm, tp = m["times_s"], p["times_s"]
        b, n = m["best_persistent"], m["next_best"]
        e_n, e_b = np.log(tp[n] / tm[n]), np.log(tp[b] / tm[b])
        total = np.log(p["speedup"] / m["speedup"])
        for k, v in (("speedup", total), ("baseline", e_n), ("persistent", e_b),
                     ("picks", total - (e_n - e_b))):
            parts[k].append(v)
        by.setdefault(n, []).append(e_n)
    out = {k: float(np.mean(np.abs(v))) for k, v in parts.items()}
    out["by_baseline"] = {k: {"layers": len(v), "signed": float(np.mean(v)),
                              "abs": float(np.mean(np.abs(v)))} for k, v in sorted(by.items())}
    return out


def details(merged: dict, resamples: int = 5000) -> list[str]:
    """The out-of-sample figures the READMEs quote beyond :func:`readme_rows`, from the merged
    record: per draw, the bootstrap 95% interval of the speedup MAPE (``resamples`` over the
    layers, seed 0), the simulator's naming misses and largest errors, the model's largest,
    where each engine's speedup error comes from (:func:`speedup_parts`), its mean signed error
    by family and by regime (batch 1-2 / 4-8, hidden below 1100 / 1100-2000 / above) and the
    bank-conflict cases that differ from Nsight's counters."""
    import collections

    import numpy as np

    from gpusim.uncertainty import draw_seed

    out_ = "out of sample"
    sp = [r for r in merged["speedup"]["rows"] if r["sample"] == out_ and "cell" not in r]
    lines = []
    seeds = sorted({r["draw"] for r in sp}, key=draw_seed)

    def named(rows, eng):
        return sum(r[eng]["fastest"] == r["measured"]["fastest"] for r in rows)

    per = []
    for d in seeds:
        rs = [r for r in sp if r["draw"] == d]
        per.append(f"s{draw_seed(d)} {100 * np.mean([r['sim']['ape'] for r in rs]):.1f} / "
                   f"{100 * np.mean([r['model']['ape'] for r in rs]):.1f}%, "
                   f"{named(rs, 'sim')} / {named(rs, 'model')}")
    lines.append("per draw (simulator / model speedup MAPE; fastest named): " + "; ".join(per))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(sp), (resamples, len(sp)))
    ci = []
    for eng, label in (("sim", "simulator"), ("model", "model")):
        ape = np.array([r[eng]["ape"] for r in sp])
        lo, hi = np.percentile(ape[idx].mean(axis=1), [2.5, 97.5]) * 100
        ci.append(f"{label} {lo:.1f}-{hi:.1f}%")
    lines.append(f"bootstrap 95% over the {len(sp)} layers: " + ", ".join(ci))
    miss = collections.Counter()
    near = 0
    for r in sp:
        t, f, g = r["measured"]["times_s"], r["sim"]["fastest"], r["measured"]["fastest"]
        if f != g:
            miss[f"{f} named where the GPU ran {g}"] += 1
            near += t[f] <= 1.05 * t[g]
    lines.append(f"the simulator's {sum(miss.values())} misses: " + ", ".join(
        f"{n} {k}" for k, n in miss.most_common()) + f"; {near} within 5% of the fastest")
    for eng in ("sim", "model"):
        worst = sorted(sp, key=lambda r: -r[eng]["ape"])[:5]
        lines.append(f"largest speedup errors ({eng}): " + ", ".join(
            f"{r['hidden']}-b{r['batch']} {100 * r[eng]['ape']:.0f}% ({r[eng]['speedup']:.2f}x "
            f"against {r['measured']['speedup']:.2f}x, {r['measured']['best_persistent']} over "
            f"{r['measured']['next_best']})" for r in worst))
    parts = []
    for eng, label in (("sim", "simulator"), ("model", "model")):
        q = speedup_parts(sp, eng)
        base = ", ".join(f"{k} {v['layers']} layers {100 * v['signed']:+.1f}% signed, "
                         f"{100 * v['abs']:.1f}%" for k, v in q["by_baseline"].items())
        parts.append(f"{label}: speedup {100 * q['speedup']:.1f}%, the baseline "
                     f"{100 * q['baseline']:.1f}% ({base}), the best persistent kernel "
                     f"{100 * q['persistent']:.1f}%, the picks {100 * q['picks']:.1f}%")
    lines.append("where the speedup error comes from (mean |log error|): " + "; ".join(parts))
    # our kernels (the simulator's) on the RNN fp32 layers: the crosscheck marks the gated,
    # fp16 and multi-head layers' rows with their ``cell``, as :func:`readme_rows` counts them
    cases = [r for r in merged["rows"] if r["sample"] == out_ and "cell" not in r
             and r["source"] == "simulator"]
    groups = collections.defaultdict(list)
    for r in cases:
        h = r["hidden"]
        third = "<1100" if h < 1100 else "1100-2000" if h < 2000 else ">=2000"
        groups[(r["family"], "b1-2" if r["batch"] <= 2 else "b4-8", third)].append(r["signed"])
    lines.append("signed by regime (simulator): " + "; ".join(
        f"{f} {b} {t} {100 * np.mean(v):+.1f}% ({len(v)})" for (f, b, t), v in sorted(
            groups.items())))
    checked = [r for r in cases if "conflicts_match" in r]
    off = [r for r in checked if not r["conflicts_match"]]
    addr = [r for r in off if r.get("wavefronts_sass_match")]
    rest = [r for r in off if not r.get("wavefronts_sass_match")]
    above = [(r["wavefronts_ld_predicted"] + r["wavefronts_st_predicted"])
             / r["wavefronts_sass_measured"] - 1 for r in rest if r.get("wavefronts_sass_measured")]
    lines.append(f"bank conflicts: {len(checked) - len(off)} of {len(checked)} equal Nsight's; of "
                 f"the other {len(off)}, {len(addr)} equal its SASS-patched wavefronts; the "
                 f"{len(rest)} left: " + ", ".join(sorted({
                     f"{'wide' if r.get('wide_loads') else 'scalar'}-{r.get('layout')} at batch "
                     f"{r['batch']}" for r in rest}))
                 + (f", {100 * min(above):.1f}-{100 * max(above):.1f}% above the SASS-patched "
                    "count" if above else ""))
    return lines


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="*", help="device output folders (fresh_*/ and cc_s*.json)")
    ap.add_argument("--gpu", required=True, help="h100 or h200: measurements/<gpu>/")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    ap.add_argument("--details", action="store_true",
                    help="only print the out-of-sample details of the GPU's merged record "
                         "(no sources needed)")
    args = ap.parse_args(argv)
    if args.details:
        from measurements.probe import read_record

        path = ROOT / "measurements" / args.gpu / "crosscheck_fresh.json"
        print("\n".join(details(read_record(str(path)))))
        return 0
    if not args.sources:
        ap.error("give the device output folders (or --details)")
    merged = add(args.gpu, args.sources, args.dry_run)
    if merged is not None:
        print(figures(merged))
        print("\n".join(details(merged)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
