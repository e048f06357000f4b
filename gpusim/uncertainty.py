"""How far ``gpusim predict`` can be trusted: error bands measured out of sample.

``gpusim crosscheck --speedup --write-bands`` derives, from the fresh draws that are out of sample
(:mod:`gpusim.samples`: random layers measured on a GPU after the last model change), the ratio
measured / predicted of

- every kernel family's per-step time (sparse barrier, sparse Lamport, dense persistent, CSR,
  cuBLAS, cuSPARSE), per engine (the analytical model, the simulator), and
- the speedup that ``predict`` reports (best sparse persistent over the next best), per engine,

and keeps an 80% prediction interval of it with the validated ranges of hidden, batch and
density in ``gpusim/specs/error_bands.json``. The interval (:func:`band_ends`, rule ``ranks``)
is the distribution-free one of the order statistics: of ``n`` ratios sorted, the ``k``-th
lowest and the ``k``-th highest, ``k = max(1, floor(0.1 (n + 1)))``, which holds a new layer's
ratio with probability ``(n + 1 - 2k) / (n + 1)``, at least 80%, when the layers are
exchangeable. Until 2026-12-01 the bands were numpy's 10th and 90th percentiles (rule
``percentile``, interpolated between the sorted ratios): with 10 to 30 ratios an interval that
holds a new value with about 65-75% probability (``0.8 (n - 1) / (n + 1)``); judged on the draws
measured after them the recorded bands held 74-79% of the ratios, the interval 79-84%
(``measurements/band_rule_screen.py``). Each band says its rule; a band without one is a
``percentile`` band. The errors depend on the layer's size (out of sample, the CSR baseline was
priced 1-12% too slow below hidden ~600 and 29-64% too fast above ~1500), so each band is also
kept per third of the out-of-sample layers' hidden sizes (``hidden_edges``: the terciles of
their log hidden size, a property of the draws, not a chosen threshold), where a third holds at
least :data:`MIN_BIN` values (the fewest for which ``k = 1`` gives 80%). :func:`annotate` turns
them into ranges for one prediction, the band of the layer's third where there is one, else the
whole band: a per-step time ``t`` becomes ``t * lo .. t * hi``, a speedup ``s`` becomes ``s * lo
.. s * hi`` (``lo``, ``hi``: the band's ``ratio_p10`` and ``ratio_p90``, the names its ends kept
from the percentile rule), with a plain note when the layer or the GPU lies outside what was
validated. The bands are only as good as the draws behind them (their count is in the file and
in the note).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["BANDS_FILE", "BAND_RULE", "Uncertainty", "annotate", "load_bands", "bands_from",
           "band_ends", "min_bin",
           "row_family", "contenders", "for_hidden", "judge_bands", "contender_hits",
           "contenders_judged", "band_draws", "draw_seed"]

BANDS_FILE = Path(__file__).resolve().parent / "specs" / "error_bands.json"
BAND_RULE = "ranks"      # how a band's ends are taken from its ratios (band_ends)
BAND_RULES = ("ranks", "percentile")
MIN_BIN = 9   # values a third of the hidden range needs for a band of its own (rule ranks)
MIN_BIN_PERCENTILE = 6   # the same under the percentile rule (the bands before 2026-12-01)


def band_ends(values, rule: str = BAND_RULE) -> tuple[float, float]:
    """The ends of a band over the ratios ``values``: under ``ranks`` the ``k``-th lowest and
    ``k``-th highest, ``k = max(1, floor(0.1 (n + 1)))`` (an interval that holds a further
    exchangeable value with probability ``(n + 1 - 2k) / (n + 1)``, at least 80% from ``n`` =
    9, ``(n - 1) / (n + 1)`` below: :func:`annotate` says so of a band of fewer); under
    ``percentile`` numpy's interpolated 10th and 90th percentiles."""
    a = np.sort(np.asarray(values, dtype=float))
    if a.size == 0:
        raise ValueError("band_ends: no value")
    if check_rule(rule) == "percentile":
        return float(np.percentile(a, 10)), float(np.percentile(a, 90))
    k = max(1, int(np.floor(0.1 * (a.size + 1))))
    return float(a[k - 1]), float(a[a.size - k])


def check_rule(rule: str) -> str:
    """``rule`` if it is one of :data:`BAND_RULES`, else a ValueError naming them."""
    if rule not in BAND_RULES:
        raise ValueError(f"band rule {rule!r}: one of {', '.join(BAND_RULES)} expected")
    return rule


def min_bin(rule: str) -> int:
    """Values a third of the sizes needs for a band of its own under ``rule``."""
    return MIN_BIN_PERCENTILE if rule == "percentile" else MIN_BIN


def _third(hidden: int, edges) -> int:
    """Which third of the validated hidden sizes (``edges``: the two terciles) holds ``hidden``:
    0, 1 or 2 (below, between, above)."""
    return int(sum(hidden >= e for e in edges))


def row_family(name: str) -> str:
    """The family of a ``predict`` row (the names :mod:`gpusim.samples` keeps bands under)."""
    if name == "sparse-lamport":
        return "sparse lamport"
    if name.startswith("sparse-"):
        return "sparse barrier"
    return {"dense-persistent": "dense persistent"}.get(name, name)


def load_bands(path: Path | str = BANDS_FILE) -> dict:
    """{gpu spec name: bands}; {} when no bands were recorded."""
    p = Path(path)
    if not p.exists():
        return {}
    return json.loads(p.read_text())


@dataclass(frozen=True)
class Uncertainty:
    rows: dict = field(default_factory=dict)     # kernel name -> (lo_s, hi_s)
    speedup: tuple | None = None                 # (lo, hi)
    notes: tuple = ()
    basis: str = ""                              # where the bands come from
    contenders: tuple = ()                       # persistent kernels that may be the fastest

    def as_dict(self) -> dict:
        return {"per_step_range_s": {k: list(v) for k, v in self.rows.items()},
                "speedup_range": None if self.speedup is None else list(self.speedup),
                "could_be_fastest": list(self.contenders),
                "notes": list(self.notes), "basis": self.basis}


PERSISTENT_FAMILIES = ("sparse barrier", "sparse lamport", "dense persistent")


def for_hidden(band: dict, hidden: int, edges) -> tuple[dict, bool]:
    """``(the band to use for a layer of this hidden size, whether it is its third's)``: the
    band of the layer's third of the validated sizes where it has one, else the whole band."""
    if edges and band.get("by_hidden"):
        own = band["by_hidden"][_third(hidden, edges)]
        if own:
            return own, True
    return band, False


def contenders(rows: dict, family=row_family) -> tuple:
    """The persistent kernels of ``rows`` (name -> (lo, hi) per-step range; ``family`` names a
    key's kernel family) whose range starts below the end of the best one's: the GPU's fastest
    persistent kernel may be any of them. Ordered by the start of their ranges."""
    pers = {k: v for k, v in rows.items() if family(k) in PERSISTENT_FAMILIES}
    if not pers:
        return ()
    top = min(hi for _, hi in pers.values())
    return tuple(sorted((k for k, (lo, _) in pers.items() if lo <= top),
                        key=lambda k: pers[k][0]))


def borrowed_bands(bands: dict) -> str:
    """The GPU whose bands a GPU that was never measured (the V100) borrows: one whose bands
    describe today's model (measured after the last model change), the H100 first among
    those, then by name; when none does, the H100's, else the first by name."""
    from gpusim.measurements import fingerprint_is_current

    order = sorted(bands, key=lambda g: (g != "h100", g))
    current = [g for g in order if fingerprint_is_current(
        bands[g].get("model_fingerprint"), bands[g].get("fingerprint_gpu"), g)]
    return (current or order)[0]


def annotate(report, bands: dict | None = None) -> Uncertainty:
    """Ranges for the rows and the speedup of a ``models.analytical.Report``."""
    from gpusim.measurements import fingerprint_is_current

    bands = load_bands() if bands is None else bands
    notes = []
    gpu = src = report.gpu     # src: the GPU whose bands are used
    b = bands.get(gpu)
    if b is None:
        if not bands:
            return Uncertainty(notes=("no out-of-sample measurement is recorded: the prediction "
                                      "carries no error band",))
        src = borrowed_bands(bands)
        b = bands[src]
        notes.append(f"no {gpu} was ever measured: the bands are the {src}'s out-of-sample "
                     f"errors, which assumes the mechanisms transfer (spec values of the {gpu} "
                     f"are from the literature, see gpusim specs)")
    if not fingerprint_is_current(b.get("model_fingerprint"), b.get("fingerprint_gpu"), src):
        notes.append("the model changed after these bands were measured: they describe an "
                     "earlier model (re-measure a fresh draw)")
    r = b["ranges"]
    out = []
    if not r["hidden"][0] <= report.hidden <= r["hidden"][1]:
        out.append(f"hidden={report.hidden} (validated {r['hidden'][0]}..{r['hidden'][1]})")
    if report.batch not in r["batch"]:
        out.append(f"batch={report.batch} (validated {r['batch']})")
    if not r["density"][0] <= report.density <= r["density"][1]:
        out.append(f"density={report.density:g} (validated {r['density'][0]:g}.."
                   f"{r['density'][1]:g})")
    eng = "sim" if report.engine == "sim" else "model"
    gated = report.cell != "rnn" or report.dtype != "fp32"
    c = (b.get("cells") or {}).get("speedup", {}).get(eng) if gated else None
    if gated and not c:
        out.append(f"cell={report.cell} dtype={report.dtype} (validated rnn fp32)")
    if out:
        notes.append("outside what was validated: " + ", ".join(out))
    fam = b["families"].get(eng, {})
    edges = b.get("hidden_edges")
    used_third = False

    def pick(band):
        nonlocal used_third
        band, own = for_hidden(band, report.hidden, edges)
        used_third |= own
        return band

    rows = {}
    for row in report.rows:
        if row.per_step_s is None:
            continue
        key = "sim" if row.engine == "sim" else "model"
        f = b["families"].get(key, {}).get(row_family(row.name)) or fam.get(row_family(row.name))
        if f:
            f = pick(f)
            rows[row.name] = (row.per_step_s * f["ratio_p10"], row.per_step_s * f["ratio_p90"])
    sp = None
    # a gated / fp16 layer: the speedup band of the out-of-sample gated / fp16 layers (whole);
    # an RNN fp32 layer: the RNN band of its third of the sizes
    s = c or b["speedup"].get(eng)
    if c:
        notes.append(f"cell={report.cell} dtype={report.dtype}: the speedup's range is that of "
                     f"the {b['cells']['layers']} out-of-sample gated and fp16 layers "
                     f"({b['cells']['draws']}), which measured {c['ratio_p10']:.2f}-"
                     f"{c['ratio_p90']:.2f} times the predicted speedup; the kernels' ranges "
                     f"are the RNN fp32 layers'")
    if report.speedup is not None and s:
        if not c:
            s = pick(s)
        sp = (report.speedup * s["ratio_p10"], report.speedup * s["ratio_p90"])
        n = int(s.get("n", MIN_BIN))
        if b.get("rule") == "ranks" and n < MIN_BIN:
            notes.append(f"the speedup's range rests on {n} out-of-sample layers: from so few "
                         f"the interval holds the next layer with probability "
                         f"{(n - 1) / (n + 1):.0%}, not 80%")
        if not c and not sp[0] <= report.speedup <= sp[1]:
            side = "above" if sp[0] > report.speedup else "below"
            notes.append(f"the speedup's range lies {side} the prediction: the out-of-sample "
                         f"layers behind it measured "
                         f"{s['ratio_p10']:.2f}-{s['ratio_p90']:.2f} times the predicted speedup")
    nm = (b.get("named") or {}).get("cells" if gated else "rnn", {}).get(eng)
    if nm and nm["layers"] and nm["slowdown_mean"] is not None:
        notes.append(f"on the out-of-sample {'gated and fp16' if gated else 'RNN'} layers "
                     f"--engine {eng} named the kernel the GPU ran fastest in {nm['fastest']} of "
                     f"{nm['layers']}; the one it named ran within 5% of it in "
                     f"{nm['within_5pct']} ({100 * nm['slowdown_mean']:.1f}% slower on "
                     f"average): near-ties are common, see the kernels that could be the fastest")
    cj = b.get("contenders_judged")
    if cj and not gated:
        notes.append(f"the kernels that could be the fastest (the simulator's, under the bands "
                     f"of {_seeds(cj['bands_of'])}) held the one the GPU ran fastest in "
                     f"{cj['held']} of {cj['layers']} RNN layers measured after those bands "
                     f"({_seeds(cj['judged_on'])}; {cj['mean']:.1f} kernels a layer)")
    what = ("an 80% prediction interval (the k-th lowest to the k-th highest, k = 0.1 (n + 1) "
            "rounded down)" if b.get("rule", "percentile") == "ranks"
            else "10th-90th percentile")
    basis = (f"{what} of measured/predicted over {b['layers']} out-of-sample "
             f"layers on the {b['gpu_name']} ({_seeds(b['draws'])}, measured {b['date']})")
    if used_third:
        a, z = (int(np.ceil(e)) for e in edges)
        span = [f"hidden <= {a - 1}", f"hidden {a}-{z - 1}",
                f"hidden >= {z}"][_third(report.hidden, edges)]
        basis += f"; where enough of them fall in this layer's third of the sizes ({span}), theirs"
    return Uncertainty(rows, sp, tuple(notes), basis, contenders(rows))


def bands_from(crosscheck: dict, speedup: dict, fingerprint: str,
               fingerprint_gpu: str | None = None, rule: str = BAND_RULE) -> dict:
    """The bands of one GPU from an out-of-sample ``crosscheck --speedup`` summary;
    ``fingerprint`` is ``model_fingerprint(gpu=fingerprint_gpu)``; ``rule`` how each band's
    ends are taken (:func:`band_ends`)."""
    from gpusim.samples import OUT_OF_SAMPLE

    # the RNN fp32 layers (the gated / fp16 layers of a draw are reported, not banded)
    rows = [r for r in crosscheck["rows"] if r["sample"] == OUT_OF_SAMPLE and "cell" not in r]
    lays = [r for r in speedup["rows"] if r["sample"] == OUT_OF_SAMPLE and "cell" not in r]
    if not rows or not lays:
        raise ValueError("no out-of-sample draw: bands need a fresh draw measured with today's "
                         "model")

    edges = [float(e) for e in np.exp(np.percentile(np.log([r["hidden"] for r in lays]),
                                                     [100 / 3, 200 / 3]))]

    check_rule(rule)

    def one(ratios):
        a = np.asarray(ratios, dtype=float)
        lo, hi = band_ends(a, rule)
        return {"ratio_p10": lo, "ratio_p90": hi,
                "mape": float(np.mean(np.abs(1 / a - 1))), "n": int(a.size)}

    def band(pairs):
        """The band of ``(hidden, ratio)`` pairs, with one per third of the hidden sizes
        (None where a third has fewer than :func:`min_bin`)."""
        out = one([x for _, x in pairs])
        thirds = [[x for h, x in pairs if _third(h, edges) == k] for k in range(3)]
        out["by_hidden"] = [one(t) if len(t) >= min_bin(rule) else None for t in thirds]
        return out

    fams: dict = {"sim": {}, "model": {}}
    for f in sorted({r["family"] for r in rows}):
        sel = [r for r in rows if r["family"] == f]
        sim = [(r["hidden"], r["measured_s"] / r["predicted_s"]) for r in sel
               if r["source"] == "simulator"]
        mod = [(r["hidden"], r["measured_s"] / (r["model_s"] if "model_s" in r
                                                else r["predicted_s"]))
               for r in sel if "model_s" in r or r["source"] == "analytical"]
        if sim:
            fams["sim"][f] = band(sim)
        elif mod:   # the libraries: both engines price them with the model
            fams["sim"][f] = band(mod)
        if mod:
            fams["model"][f] = band(mod)
    sp = {}
    for eng in speedup["engines"]:
        ratios = [(r["hidden"], r[eng]["ratio"]) for r in lays if r[eng]["ratio"] is not None]
        if ratios:
            sp[eng] = band(ratios)
    draws = sorted({r["draw"] for r in lays})
    # the gated / fp16 layers: their own speedup band (no thirds: few layers), for predict's
    # gated and fp16 answers
    cell_lays = [r for r in speedup["rows"] if r["sample"] == OUT_OF_SAMPLE and "cell" in r]
    cells = None
    if cell_lays:
        cells = {"layers": len(cell_lays), "draws": ", ".join(sorted({r["draw"]
                                                                     for r in cell_lays})),
                 "kinds": sorted({f"{r['cell']} {r['dtype']}" for r in cell_lays}),
                 "speedup": {}}
        for eng in speedup["engines"]:
            ok = [r[eng]["ratio"] for r in cell_lays if r[eng]["ratio"] is not None]
            if ok:
                cells["speedup"][eng] = one(ok)
    named = {"rnn": _named(lays, speedup["engines"])}
    if cell_lays:
        named["cells"] = _named(cell_lays, speedup["engines"])
    dates = sorted({d["path"] for d in crosscheck["draws"] if d["sample"] == OUT_OF_SAMPLE})
    return {"gpu_name": crosscheck["gpu"], "draws": ", ".join(draws), "date": ", ".join(sorted(
            {Path(p).name.split("_")[1] for p in dates if "_" in Path(p).name})),
            "layers": len(lays), "rule": rule, "model_fingerprint": fingerprint,
            **({"fingerprint_gpu": fingerprint_gpu} if fingerprint_gpu else {}),
            "ranges": {"hidden": [min(r["hidden"] for r in lays), max(r["hidden"] for r in lays)],
                       "batch": sorted({r["batch"] for r in lays}),
                       "density": [min(r["density"] for r in lays),
                                   max(r["density"] for r in lays)]},
            "hidden_edges": edges, "families": fams, "speedup": sp, "cells": cells,
            "named": named}


def _named(lays: list, engines) -> dict:
    """Per engine, over speedup rows ``lays`` (the speedup summary's figures,
    :func:`gpusim.speedup_check._speedup_stats`): in how many layers it named the kernel the GPU
    ran fastest, in how many the one it named ran within 5% of that, and the mean slowdown of
    the named one (what following the prediction cost)."""
    from gpusim.speedup_check import _speedup_stats

    st = _speedup_stats(lays, engines)
    return {eng: {"layers": st[eng]["layers"], "fastest": st[eng]["fastest_named"],
                  "within_5pct": st[eng]["named_within_5pct"],
                  "slowdown_mean": st[eng]["named_slowdown_mean"]} for eng in engines}


def contender_hits(rows: list, bands: dict) -> tuple[int, list, list]:
    """Over the layers of crosscheck ``rows``: ``(layers whose fastest measured persistent
    kernel is among the :func:`contenders` of the simulator's ranges under ``bands``, the
    contenders' count per layer, the persistent kernels measured per layer)``."""
    edges = bands["hidden_edges"]
    per_layer: dict = {}
    for r in rows:
        if r["kind"] in ("sparse_persistent", "dense_persistent"):
            per_layer.setdefault((r["draw"], r["hidden"], r["batch"], r["density"]), []).append(r)
    held, sizes, kernels = 0, [], []
    for rs in per_layer.values():
        rng, fam = {}, {}
        for r in rs:
            f, _ = for_hidden(bands["families"]["sim"][r["family"]], r["hidden"], edges)
            rng[r["id"]] = (r["predicted_s"] * f["ratio_p10"], r["predicted_s"] * f["ratio_p90"])
            fam[r["id"]] = r["family"]
        cont = contenders(rng, family=fam.get)
        held += min(rs, key=lambda r: r["measured_s"])["id"] in cont
        sizes.append(len(cont))
        kernels.append(len(rs))
    return held, sizes, kernels


def band_draws(bands: dict) -> list[str]:
    """The names of the draws that ``bands`` (one GPU's, as :func:`bands_from` makes them)
    were made from."""
    return [d.strip() for d in bands.get("draws", "").split(",") if d.strip()]


def draw_seed(name: str) -> int | None:
    """The seed of a fresh draw's name (``fresh_<date>_s117``: 117), or None."""
    tail = name.rsplit("_s", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def _seeds(draws: str) -> str:
    """``"fresh_<date>_s111, ..., fresh_<date>_s116"`` as ``"s111-s116"`` when the seeds run
    on without a gap, else the seeds listed; names without a seed as they are."""
    seeds = [draw_seed(d) for d in band_draws({"draws": draws})]
    if not seeds or None in seeds:
        return draws
    seeds.sort()
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"s{seeds[0]}-s{seeds[-1]}"
    return ", ".join(f"s{n}" for n in seeds)


def contenders_judged(previous: dict, bands: dict, crosscheck: dict) -> dict | None:
    """How the contenders of a GPU's ``previous`` bands did on the draws of its new ``bands``
    that they were not made from (their rows in the merged ``crosscheck`` summary): ``{"bands_of",
    "judged_on", "held", "layers", "mean"}`` (RNN fp32 layers), or None when no such draw."""
    new = sorted(set(band_draws(bands)) - set(band_draws(previous)))
    rows = [r for r in crosscheck["rows"] if r["draw"] in new and "cell" not in r]
    if not rows:
        return None
    held, sizes, _ = contender_hits(rows, previous)
    if not sizes:
        return None
    return {"bands_of": previous["draws"], "judged_on": ", ".join(new), "held": held,
            "layers": len(sizes), "mean": float(np.mean(sizes))}


def judge_bands(bands: dict, rows: list, speedup_rows: list) -> dict:
    """How often ``bands`` (one GPU's, as :func:`bands_from` makes them) held on layers they were
    not made from: crosscheck ``rows`` and ``speedup_rows`` of the RNN fp32 layers of other
    draws. Per engine, the share of per-step ratios (measured / predicted) inside the family's
    band, by size (the layer's third where it has one) and whole; the
    share of speedup ratios inside the speedup band, both ways; and in how many layers the
    kernel the GPU ran fastest was among the simulator's contenders (with their mean count).
    A nominal band holds 80%."""
    edges = bands["hidden_edges"]
    rows = [r for r in rows if "cell" not in r]
    lays = [r for r in speedup_rows if "cell" not in r]
    if not rows or not lays:
        raise ValueError("judge_bands: no RNN layer to judge the bands on")

    def inside(band, ratio):
        return band["ratio_p10"] <= ratio <= band["ratio_p90"]

    out: dict = {"cases": len(rows), "layers": len(lays)}
    for eng in ("sim", "model"):
        fams = bands["families"][eng]
        by_size = whole = n = 0
        for r in rows:
            pred = r["predicted_s"] if eng == "sim" else r.get("model_s", r["predicted_s"])
            if r["family"] not in fams or not pred:
                continue
            ratio = r["measured_s"] / pred
            band = fams[r["family"]]
            by_size += inside(for_hidden(band, r["hidden"], edges)[0], ratio)
            whole += inside(band, ratio)
            n += 1
        sp = bands["speedup"][eng]
        ratios = [(r["hidden"], r[eng]["ratio"]) for r in lays if r[eng]["ratio"] is not None]
        out[eng] = {
            "per_step_by_size": by_size / n, "per_step_whole": whole / n, "per_step_n": n,
            "speedup_by_size": sum(inside(for_hidden(sp, h, edges)[0], x) for h, x in ratios)
            / len(ratios),
            "speedup_whole": sum(inside(sp, x) for _, x in ratios) / len(ratios),
            "speedup_n": len(ratios)}
    # the simulator's contenders per layer, from its per-step ranges under the bands
    held, sizes, _ = contender_hits(rows, bands)
    out["contenders_held"] = held
    out["contenders_layers"] = len(sizes)
    out["contenders_mean"] = float(np.mean(sizes)) if sizes else None
    return out
