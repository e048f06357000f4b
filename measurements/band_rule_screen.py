"""How often ``predict``'s error bands held on layers measured after them, under each rule for a
band's ends: every recorded pair of (the draws a GPU's bands were made from, the draws measured
next), no new measurement.

    python measurements/band_rule_screen.py --out measurements/h200/band_rule_screen.json

Why: a band is meant to hold 80% of the layers it was not made from. Judged on the draws that
followed them, the recorded bands (the 10th and 90th percentiles of measured / predicted, rule
``percentile``) held fewer: the README counts the H200's speedup bands too narrow in
twenty-seven of thirty-eight judgements. With ``n`` ratios numpy's 10th percentile interpolates
at rank ``1 + 0.1 (n - 1)``, so the interval holds a further exchangeable value with probability
about ``(n + 1 - 2 (1 + 0.1 (n - 1))) / (n + 1)``: 0.73 at 21 ratios, 0.57 at 6 (the fewest a
third of the sizes could band). The distribution-free interval (rule ``ranks``,
:func:`gpusim.uncertainty.band_ends`) takes the ``k``-th lowest and highest, ``k = max(1,
floor(0.1 (n + 1)))``, at least 80%, and a third needs 9 ratios. Neither rule is fitted to
anything. The pooled counts overstate their precision: the pairs overlap, a layer's ratios are
correlated, and most pairs span a model change (the layers are not strictly exchangeable). The
record, kept with the H200's, holds the H100's pairs too.

For every pair (:data:`PAIRS`: the H100's and the H200's recorded ``error_bands_*.json`` and the
draws measured after each, as ``tests/test_recorded_reports.py`` judges them) the bands are made
again from the rows of the draws they were made from, as priced when those were merged (the
merged ``crosscheck_fresh`` records), under each rule, and judged
(:func:`gpusim.uncertainty.judge_bands`) on the next draws' rows. The record keeps per pair and
rule the shares inside (per step and speedups, by the layer's third of the sizes and over all
sizes), the contenders' hits and the speedup bands' widths, and the pooled counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RULES = ("percentile", "ranks")


def _r(a: int, b: int) -> tuple:
    return tuple(range(a, b + 1))


# (gpu, bands record, seeds they were made from, seeds measured after them that judge them)
PAIRS = (
    ("h100", "error_bands_s22.json", (22,), (23, 24)),
    ("h100", "error_bands_s22_s24.json", (22, 23, 24), (25,)),
    ("h100", "error_bands_s22_s25.json", (22, 23, 24, 25), (26, 27)),
    ("h100", "error_bands_s26_s27.json", (26, 27), (28, 29, 30, 31)),
    ("h200", "error_bands_s109_s110.json", (109, 110), _r(111, 116)),
    ("h200", "error_bands_s111_s116.json", _r(111, 116), _r(117, 122)),
    ("h200", "error_bands_s117_s122.json", _r(117, 122), _r(123, 128)),
    ("h200", "error_bands_s123_s128.json", _r(123, 128), _r(129, 134)),
    ("h200", "error_bands_s129_s134.json", _r(129, 134), _r(135, 140)),
    ("h200", "error_bands_s135_s140.json", _r(135, 140), _r(141, 144)),
    ("h200", "error_bands_s141_s144.json", _r(141, 144), _r(145, 148)),
    ("h200", "error_bands_s141_s148.json", _r(141, 148), _r(149, 154)),
    ("h200", "error_bands_s149_s152.json", _r(149, 152), (153, 154)),
    ("h200", "error_bands_s149_s154.json", _r(149, 154), _r(155, 158)),
    ("h200", "error_bands_s155_s158.json", _r(155, 158), (159, 160)),
    ("h200", "error_bands_s155_s160.json", _r(155, 160), _r(161, 166)),
    ("h200", "error_bands_s161_s166.json", _r(161, 166), _r(167, 172)),
    ("h200", "error_bands_s167_s172.json", _r(167, 172), (173, 174)),
    ("h200", "error_bands_s167_s174.json", _r(167, 174), _r(175, 180)),
    ("h200", "error_bands_s175_s180.json", _r(175, 180), _r(181, 186)),
    ("h200", "error_bands_s181_s186.json", _r(181, 186), _r(187, 190)),
    ("h200", "error_bands_s187_s190.json", _r(187, 190), _r(191, 194)),
    ("h200", "error_bands_s191_s194.json", _r(191, 194), _r(195, 198)),
    ("h200", "error_bands_s195_s198.json", _r(195, 198), _r(199, 204)),
)


def _draws(gpu: str) -> dict:
    """{seed: draw folder name} of a GPU's recorded fresh draws."""
    from pathlib import Path

    from gpusim.uncertainty import draw_seed

    root = Path(__file__).resolve().parent / gpu
    return {draw_seed(p.name): p.name for p in root.glob("fresh_*_s*") if p.is_dir()}


def merged(gpu: str) -> dict:
    """A GPU's merged cross-check record of its fresh draws (rows as priced when merged)."""
    from measurements.probe import read_record

    here = os.path.dirname(os.path.abspath(__file__))
    return read_record(os.path.join(here, gpu, "crosscheck_fresh.json"))


def subset(cc: dict, names: set, sample: str | None = None) -> tuple[dict, dict]:
    """The crosscheck and speedup summaries of the draws ``names`` of ``cc``, every row and draw
    marked ``sample`` where given."""
    mark = (lambda r: dict(r, sample=sample)) if sample else (lambda r: r)
    return ({"rows": [mark(r) for r in cc["rows"] if r["draw"] in names],
             "draws": [mark(d) for d in cc["draws"] if d["draw"] in names], "gpu": cc["gpu"]},
            {"engines": cc["speedup"]["engines"],
             "rows": [mark(r) for r in cc["speedup"]["rows"] if r["draw"] in names]})


def judge_pair(cc: dict, draws: dict, made: tuple, judged: tuple, rule: str) -> dict:
    """Bands of the draws ``made`` (seeds) under ``rule``, judged on the draws ``judged``: the
    counts inside per engine, the contenders' hits and the speedup bands' log widths."""
    import numpy as np

    from gpusim.samples import OUT_OF_SAMPLE
    from gpusim.uncertainty import bands_from, judge_bands

    c, s = subset(cc, {draws[n] for n in made}, OUT_OF_SAMPLE)
    bands = bands_from(c, s, "screen", rule=rule)
    c2, s2 = subset(cc, {draws[n] for n in judged})
    j = judge_bands(bands, c2["rows"], s2["rows"])
    out = {"contenders_held": j["contenders_held"], "layers": j["contenders_layers"]}
    for eng in ("sim", "model"):
        e = j[eng]
        sp = bands["speedup"][eng]
        out[eng] = {
            "per_step_n": e["per_step_n"], "speedup_n": e["speedup_n"],
            "per_step_by_size": round(e["per_step_by_size"] * e["per_step_n"]),
            "per_step_whole": round(e["per_step_whole"] * e["per_step_n"]),
            "speedup_by_size": round(e["speedup_by_size"] * e["speedup_n"]),
            "speedup_whole": round(e["speedup_whole"] * e["speedup_n"]),
            "speedup_log_width": float(np.log(sp["ratio_p90"] / sp["ratio_p10"]))}
    return out


def screen() -> dict:
    import numpy as np

    records = {g: merged(g) for g in {p[0] for p in PAIRS}}
    draws = {g: _draws(g) for g in records}
    pairs = []
    for gpu, rec, made, judged in PAIRS:
        row = {"gpu": gpu, "bands": rec, "made_from": list(made), "judged_on": list(judged)}
        for rule in RULES:
            row[rule] = judge_pair(records[gpu], draws[gpu], made, judged, rule)
        pairs.append(row)
    summary = {}
    keys = ("per_step_by_size", "per_step_whole", "speedup_by_size", "speedup_whole")
    for rule in RULES:
        s = {}
        for eng in ("sim", "model"):
            for k in keys:
                n = "per_step_n" if k.startswith("per_step") else "speedup_n"
                inside = sum(p[rule][eng][k] for p in pairs)
                total = sum(p[rule][eng][n] for p in pairs)
                s[f"{eng}_{k}"] = {"inside": inside, "of": total, "share": inside / total,
                                   "pairs_under_80": sum(p[rule][eng][k] < 0.8 * p[rule][eng][n]
                                                         for p in pairs)}
            s[f"{eng}_speedup_log_width_mean"] = float(np.mean(
                [p[rule][eng]["speedup_log_width"] for p in pairs]))
        s["contenders"] = {"held": sum(p[rule]["contenders_held"] for p in pairs),
                           "of": sum(p[rule]["layers"] for p in pairs)}
        summary[rule] = s
    return {"format_version": 1, "rules": list(RULES), "nominal": 0.8, "pairs": pairs,
            "summary": summary,
            "command": "python measurements/band_rule_screen.py --out "
                       "measurements/h200/band_rule_screen.json"}


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the record here (else print only)")
    a = ap.parse_args(argv)
    rec = screen()
    for rule, s in rec["summary"].items():
        print(f"{rule}:")
        for k, v in s.items():
            if isinstance(v, dict) and "share" in v:
                print(f"  {k:28s} {v['inside']:5d} of {v['of']:5d} = {100 * v['share']:5.1f}%"
                      f"   pairs under 80%: {v['pairs_under_80']} of {len(rec['pairs'])}")
            elif isinstance(v, float):
                print(f"  {k:28s} {v:.3f}")
        print(f"  contenders held {s['contenders']['held']} of {s['contenders']['of']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
