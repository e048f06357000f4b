"""``gpusim specs``: list the bundled GPU specs, or every value of one with unit and source."""

from __future__ import annotations

import argparse

from .common import add_output_arguments, emit_json

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default=None, help="show every value of this spec (name or path); "
                   "default: list the bundled specs")
    add_output_arguments(p)


def legend(evidence: dict[str, str]) -> str:
    """The line that explains the evidence tags and where the sources are described."""
    tags = ", ".join(f"[{k}] {v}" for k, v in evidence.items())
    return (f"  evidence: {tags}\n"
            f"  sources: 'docs/hardware_sources.md sN' is section N of that page, [KEY] a public "
            f"source listed there, measurements/... a record in the repository")


def main(args) -> int:
    from gpusim.specs import EVIDENCE, LIBRARY_PARAMS, PARAMS, available, load_spec

    if args.gpu is None:
        specs = [load_spec(name) for name in available()]
        rows = [{"name": s.name, "full_name": s.full_name, "arch": s.arch,
                 "sm_count": s.sm_count, "clock_hz": s.clock_hz} for s in specs]
        if args.json:
            emit_json(rows)
        else:
            for r in rows:
                print(f"{r['name']:<8} {r['arch']:<7} {r['sm_count']:>4} SMs "
                      f"{r['clock_hz'] / 1e6:>7.0f} MHz  {r['full_name']}")
        return 0
    s = load_spec(args.gpu)
    values = {k: {"value": getattr(s, k), "unit": d.unit, "source": s.source(k),
                  "doc": d.doc} for k, d in PARAMS.items()}
    def table(lib, name):
        return None if lib is None else {
            k: {"value": lib[k], "unit": d.unit, "source": s.source(f"{name}.{k}"), "doc": d.doc}
            for k, d in LIBRARY_PARAMS.items()}
    library = table(s.library_params, "library")
    library16 = table(s.library_params_fp16, "library_fp16")
    if args.json:
        emit_json({"name": s.name, "full_name": s.full_name, "arch": s.arch, "params": values,
                   "library": library, "library_transferred_from": s.library_from or None,
                   "library_fp16": library16,
                   "library_fp16_transferred_from": s.library_fp16_from or None,
                   "library_table": ({"value": s.library_table,
                                      "source": s.source("library.table")}
                                     if s.library_table else None)})
    else:
        print(f"{s.name}: {s.full_name} ({s.arch})")
        print(legend(EVIDENCE))
        for k, v in values.items():
            print(f"  {k:<34} {v['value']!s:>12} {v['unit']:<18} {v['source']}")
        print("  [library] (cuBLAS / cuSPARSE baselines of models.analytical): " +
              ("not measured; the bandwidth model is used" if library is None else
               f"transferred from the {s.library_from} fit" if s.library_from else ""))
        for k, v in (library or {}).items():
            print(f"  {k:<34} {v['value']:>12.4g} {v['unit']:<18} {v['source']}")
        if s.library_table:   # layers the measured grid covers (fp32, fp16) are priced from it
            print(f"  {'table':<34} {s.library_table} {s.source('library.table')}")
        if library16 is not None:
            print("  [library_fp16] (their fp16 paths, for fp16 weights)" +
                  (f": transferred from the {s.library_fp16_from} fit"
                   if s.library_fp16_from else ""))
            for k, v in library16.items():
                print(f"  {k:<34} {v['value']:>12.4g} {v['unit']:<18} {v['source']}")
    return 0
