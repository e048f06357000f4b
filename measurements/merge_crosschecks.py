"""Merge cross-check reports of disjoint draws into the one that the README and the error bands
quote (``h100/crosscheck_fresh.json.gz``).

    python measurements/merge_crosschecks.py --data measurements/h100 \
        --out measurements/h100/crosscheck_fresh.json.gz --note "how each part was made" \
        measurements/h100/crosscheck_fresh.json.gz /tmp/cc_s23.json /tmp/cc_s24.json

Each part is a ``gpusim crosscheck --json`` report (``--speedup`` ones carry their per-layer
speedup rows), possibly itself a merge, all under one model. The per-case rows are merged by
``gpusim.cli.crosscheck.merge_reports`` and the speedup rows summarised again by
``gpusim.speedup_check.summarise_speedups``; a draw in two parts is refused. The draws'
in/out-of-sample labels are today's (``gpusim.samples``), so a report made under an older model
is relabelled as today's rule says. Parts that are gzip files (``.gz``) are read as such, and an
``--out`` ending in ``.gz`` is written gzipped.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import read_record, save_record  # noqa: E402


def merge(parts: list[dict], data: str, note: str) -> dict:
    from gpusim.cli.crosscheck import merge_reports
    from gpusim.samples import draws
    from gpusim.speedup_check import summarise_speedups

    label = {g.name: g.sample for g in draws(data)}
    speed_rows, engines = [], None
    for p in parts:
        for d in p["draws"]:
            d["sample"] = label.get(d["draw"], d["sample"])
        for r in p["rows"]:
            r["sample"] = label.get(r["draw"], r["sample"])
        sp = p.get("speedup")
        if sp:
            engines = engines or sp["engines"]
            if sp["engines"] != engines:
                raise SystemExit(f"parts with different speedup engines: {engines} and "
                                 f"{sp['engines']}")
            for r in sp["rows"]:
                r["sample"] = label.get(r["draw"], r["sample"])
            speed_rows += sp["rows"]
    merged = merge_reports(parts, data)
    if speed_rows:
        seen = [(r["draw"], r["hidden"], r["batch"], r["density"], r.get("cell"),
                 r.get("dtype"), r.get("heads")) for r in speed_rows]
        if len(set(seen)) != len(seen):
            raise SystemExit("a layer's speedup row is in two parts")
        merged["speedup"] = summarise_speedups(speed_rows, tuple(engines))
    merged["command"] = note
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", help="crosscheck --json reports (.json or .json.gz)")
    ap.add_argument("--data", default="measurements/h100")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", required=True, help="how the parts were made (kept as 'command')")
    args = ap.parse_args(argv)
    parts = [read_record(p) for p in args.parts]
    merged = merge(parts, args.data, args.note)
    save_record(args.out, merged)
    print(f"{args.out}: {len(merged['rows'])} case rows, "
          f"{len(merged.get('speedup', {}).get('rows', []))} speedup rows, draws "
          f"{[d['draw'] for d in merged['draws']][-4:]} (last four)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
