"""Bring fresh draws measured on a GPU machine into the repository, in one step: copy each draw,
gzip its records, merge its cross-check report into the GPU's merged record, rewrite the error
bands from it and print the out-of-sample figures the READMEs quote.

    python measurements/add_draws.py --gpu h200 OUT_1 OUT_2     # the device calls' $OUT copies

Each source folder is what one device call of the fresh-draw protocol brought back: one or more
``fresh_<date>_s<seed>/`` folders (``campaign.json``, ``ncu.json``, their logs; plain or
gzipped) and their ``gpusim crosscheck --no-fresh --speedup --json`` reports ``cc_s<seed>.json``.
The reports name the draws by the machine's paths; those become ``measurements/<gpu>/...``.
A draw already in the repository is refused (it would be merged twice). ``--dry-run`` only
says what it would do.
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
GZIPPED = ("campaign.json", "ncu.json")        # kept gzipped (measurements/README.md, "Files")
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
    """Copy one draw folder, gzipping its :data:`GZIPPED` records (``gzip -n -9`` alike)."""
    dest.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name in GZIPPED:
            with open(f, "rb") as a, gzip.GzipFile(dest / (f.name + ".gz"), "wb", 9, mtime=0) as b:
                shutil.copyfileobj(a, b)
        elif f.is_file():
            shutil.copy2(f, dest / f.name)


def add(gpu: str, sources, dry_run: bool = False) -> dict | None:
    from gpusim.cli.crosscheck import _write_bands
    from measurements.merge_crosschecks import merge
    from measurements.probe import read_record, save_record

    data = ROOT / "measurements" / gpu
    if not data.is_dir():
        raise SystemExit(f"--gpu {gpu!r}: no folder {data}")
    draws, reports = find(sources)
    clash = [p.name for p in draws if (data / p.name).exists()]
    if clash:
        raise SystemExit(f"already in {data}: {', '.join(clash)} (a draw is merged once)")
    merged_path = data / "crosscheck_fresh.json.gz"
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


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+", help="device output folders (fresh_*/ and cc_s*.json)")
    ap.add_argument("--gpu", required=True, help="h100 or h200: measurements/<gpu>/")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    args = ap.parse_args(argv)
    merged = add(args.gpu, args.sources, args.dry_run)
    if merged is not None:
        print(figures(merged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
