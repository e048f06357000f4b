"""Regenerate the tables of docs/case_studies.md from ``gpusim.api.predict`` (engine sim).

Run from the repository root::

    python benchmarks/case_studies.py [--study gnmt,ds2,slstm] [--write]

Every row of the three case studies is recomputed with the simulator (``engine="sim"``, the
defaults otherwise: 256 steps, as many simulated in full as each kernel needs, seed 0, fp32)
and printed on stdout as the Markdown table the page shows: its header, its separator and its
rows. Progress (one line per layer, with the seconds it took) goes to stderr. ``--write`` also
replaces, in docs/case_studies.md, each selected table's rows in place: the lines after the
table's header and separator, up to the first blank line. The prose around the tables is not
touched: after a change of the model, read it again against the new rows.

The whole run took 18 minutes on two shared cores (GNMT 3, Deep Speech 2 3, sLSTM 12) on
2026-11-28, 9 minutes (526 s, no layer over 60 s) on 2026-11-29 with the step sampling of
``gpusim.pricing.price_persistent``, 13 minutes (794 s, none over 60 s) after the waves (the
CSR kernel's registers from ptxas); the head-wise layers of hidden 2048 took 45 to 90 s each
then, even where no kernel fits (``--study gnmt,ds2`` skips them).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "case_studies.md"
SLOW_S = 60.0       # a layer slower than this is flagged in the progress lines


@dataclass(frozen=True)
class Case:
    """One layer of a case study: the arguments of ``gpusim.api.predict`` and a label."""

    gpu: str
    hidden: int
    batch: int
    density: float
    cell: str
    heads: int = 1
    label: str = ""

    def predict(self) -> dict:
        from gpusim.api import predict

        return predict(self.gpu, hidden=self.hidden, batch=self.batch, density=self.density,
                       cell=self.cell, engine="sim", heads=self.heads).to_dict()


@dataclass(frozen=True)
class Study:
    name: str
    header: str
    cases: list = field(default_factory=list)

    def row(self, case: Case, p: dict) -> str:
        return ROWS[self.name](case, p)


# ----------------------------------------------------------------------------- the rows

def _kernels(p: dict) -> dict:
    return {r["name"]: r for r in p["kernels"]}


def _at(k: dict, name: str) -> str:
    """``name t`` with the kernel's time per step in us."""
    return f"{name} {k[name]['per_step_s'] * 1e6:.2f}"


def _largest(k: dict) -> str:
    """What the sparse kernels' refusal says fits: ``none fits (largest: hidden N)``."""
    for name in ("sparse-lamport", "sparse-bank", "sparse-wide", "sparse-naive"):
        m = re.search(r"largest that fits: hidden=(\d+)", (k.get(name) or {}).get("reason") or "")
        if m:
            return f"none fits (largest: hidden {m.group(1)})"
    return "none fits"


def _speedup(p: dict) -> tuple[str, str]:
    """The speedup with its 80% range, and the kernels that could be the fastest."""
    u = p["uncertainty"]
    if p["speedup"] is None:
        return "-", "-"
    rng = u.get("speedup_range")
    sp = f"{p['speedup']:.2f}x" + ("" if rng is None else f" ({rng[0]:.2f}-{rng[1]:.2f})")
    return sp, ", ".join(u["could_be_fastest"]) or "-"


def _best_and_next(p: dict) -> tuple[str, str]:
    k = _kernels(p)
    best = _at(k, p["best_persistent"]) if p["best_persistent"] else _largest(k)
    nb = _at(k, p["next_best"]) if p["next_best"] else "-"
    return best, nb


def gnmt_row(c: Case, p: dict) -> str:
    """| GPU | batch | density | best persistent | next best | speedup | could be the fastest |"""
    best, nb = _best_and_next(p)
    sp, cbf = _speedup(p)
    return f"| {c.gpu.upper()} | {c.batch} | {c.density:g} | {best} | {nb} | {sp} | {cbf} |"


def ds2_row(c: Case, p: dict) -> str:
    """As :func:`gnmt_row`, with the layer (cell and hidden size) after the GPU."""
    best, nb = _best_and_next(p)
    sp, cbf = _speedup(p)
    return (f"| {c.gpu.upper()} | {c.label} | {c.batch} | {c.density:g} | {best} | {nb} | {sp} "
            f"| {cbf} |")


def _exchange(note: str) -> str:
    """Where the sparse and the dense persistent kernel exchange h, from ``heads_note``."""
    local = re.search(r"heads fit in one CTA for (.*?): no grid-wide", note)
    grid = re.search(r"a CTA cannot hold whole heads for (.*?): grid-wide", note)
    out = []
    for kind in ("sparse", "dense"):
        m = local and re.search(rf"\b{kind} \((\d+) per CTA\)", local.group(1))
        if m:
            n = int(m.group(1))
            out.append(f"{kind}: in the CTA ({n} head{'s' if n > 1 else ''} each)")
        elif grid and re.search(rf"\b{kind}\b", grid.group(1)):
            out.append(f"{kind}: grid-wide")
    return "; ".join(out) or "-"


def slstm_row(c: Case, p: dict) -> str:
    """| GPU | heads x units | batch | density | best sparse persistent | dense persistent |
    could be the fastest | h exchange |; no baseline and no speedup (see the page)."""
    k = _kernels(p)
    best = _at(k, p["best_persistent"]) if p["best_persistent"] else _largest(k)
    dense = k.get("dense-persistent")
    dense = f"{dense['per_step_s'] * 1e6:.2f}" if dense and dense["fits"] else "does not fit"
    cbf = ", ".join(p["uncertainty"]["could_be_fastest"]) or "-"
    return (f"| {c.gpu.upper()} | {c.heads} x {c.hidden // c.heads} | {c.batch} | "
            f"{c.density:g} | {best} | {dense} | {cbf} | {_exchange(p.get('heads_note', ''))} |")


ROWS = {"gnmt": gnmt_row, "ds2": ds2_row, "slstm": slstm_row}

# ----------------------------------------------------------------------------- the studies

GPUS = ("v100", "h100")

GNMT = Study(
    "gnmt",
    "| GPU | batch | density | best persistent, us | next best, us | speedup (80% range) "
    "| could be the fastest |",
    [Case(g, 1024, b, d, "lstm") for g in GPUS for b in (1, 4, 8) for d in (0.1, 0.2)])

DS2_LAYERS = (("rnn", 1760, "RNN 1760"), ("gru", 2560, "GRU 2560"))
DS2 = Study(
    "ds2",
    "| GPU | layer | batch | density | best persistent, us | next best, us "
    "| speedup (80% range) | could be the fastest |",
    [Case(g, n, b, d, cell, label=label) for g in GPUS for cell, n, label in DS2_LAYERS
     for b in (1, 2, 4) for d in (0.05, 0.1)])

SLSTM_LAYERS = ((768, 12), (1024, 4), (2048, 4))
SLSTM = Study(
    "slstm",
    "| GPU | heads x units | batch | density in the heads | best sparse persistent, us "
    "| dense persistent, us | could be the fastest | h exchange |",
    [Case(g, n, b, d, "lstm", heads=h) for g in GPUS for n, h in SLSTM_LAYERS
     for b in (1, 8) for d in (0.1, 0.5)])

STUDIES = {s.name: s for s in (GNMT, DS2, SLSTM)}


def separator(header: str) -> str:
    return "|" + "---|" * (header.count("|") - 1)


# ----------------------------------------------------------------------------- run, write

def compute(study: Study, done: int, total: int) -> tuple[list[str], list[tuple[Case, float]]]:
    """The study's rows, and the cases that took more than SLOW_S seconds."""
    rows, slow = [], []
    for i, c in enumerate(study.cases, done + 1):
        t = time.perf_counter()
        rows.append(study.row(c, c.predict()))
        dt = time.perf_counter() - t
        heads = f" heads={c.heads}" if c.heads > 1 else ""
        flag = f" (over {SLOW_S:.0f} s)" if dt > SLOW_S else ""
        print(f"[{i}/{total}] {study.name}: {c.gpu} {c.cell} hidden={c.hidden}{heads} "
              f"batch={c.batch} density={c.density:g}: {dt:.1f} s{flag}", file=sys.stderr,
              flush=True)
        if dt > SLOW_S:
            slow.append((c, dt))
    return rows, slow


def replace_rows(text: str, header: str, rows: list[str]) -> str:
    """``text`` with the rows of the table under ``header`` (the lines after its separator, up
    to the first blank line) replaced by ``rows``."""
    lines = text.split("\n")
    at = [i for i, ln in enumerate(lines) if ln == header]
    if len(at) != 1:
        raise SystemExit(f"docs/case_studies.md: the table header occurs {len(at)} times, not "
                         f"once: {header}")
    start = at[0] + 2               # after the header and its separator
    if not lines[at[0] + 1].startswith("|---"):
        raise SystemExit(f"docs/case_studies.md: no separator under the header: {header}")
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    return "\n".join(lines[:start] + rows + lines[end:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=",".join(STUDIES),
                    help=f"comma-separated studies to recompute (default: all: "
                    f"{','.join(STUDIES)})")
    ap.add_argument("--write", action="store_true",
                    help="replace the selected tables' rows in docs/case_studies.md in place")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.study.split(",") if s.strip()]
    unknown = [n for n in names if n not in STUDIES]
    if unknown:
        ap.error(f"unknown study {', '.join(unknown)}; known: {', '.join(STUDIES)}")
    studies = [STUDIES[n] for n in names]
    total = sum(len(s.cases) for s in studies)
    t0, done, tables, slow = time.perf_counter(), 0, {}, []
    for s in studies:
        rows, sl = compute(s, done, total)
        done += len(rows)
        tables[s.name] = rows
        slow += sl
        print("\n".join([s.header, separator(s.header), *rows, ""]), flush=True)
    print(f"{total} layers in {time.perf_counter() - t0:.0f} s; {len(slow)} took over "
          f"{SLOW_S:.0f} s" + "".join(f"\n  {c.gpu} {c.cell} hidden={c.hidden} heads={c.heads} "
                                    f"batch={c.batch} density={c.density:g}: {dt:.0f} s"
                                    for c, dt in slow), file=sys.stderr)
    if args.write:
        text = DOC.read_text()
        for s in studies:
            text = replace_rows(text, s.header, tables[s.name])
        DOC.write_text(text)
        print(f"wrote {len(studies)} table(s) into {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
