"""ptxas' registers against the kernel builder's count, for layers at the capacity limit.

    PYTHONPATH=. python3 measurements/ptxas_sweep.py [--gpu v100,h100] \
        [--out measurements/ptxas_sweep.json]

No GPU: every kernel is built from a random layer (``timesteps`` = 2: the time loop stays a loop,
so T changes constants only), its CUDA generated and compiled by :mod:`kernels_ir.ptxas` for the
spec's architecture (V100: sm_70 with CUDA 12's NVRTC; H100: sm_90 with nvcc). Each record holds
the builder's count (``registers_needed`` of the kernel as built, and at prefetch depth 1) and
ptxas' registers, spill stores / loads and stack frame.

Passes (:func:`plan`), per GPU:

1. ``builder``: the builder alone (its own count decides, as before ptxas was consulted).
   Sparse, for every density of :data:`DENSITIES` and batch of :data:`BATCHES`: the largest
   hidden size the kernel's count accepts (``models.capacity.max_hidden(..., ptxas=False)``),
   stepped down by 0.5% while the concrete random matrix does not fit; variants Lamport-wide,
   barrier-wide and barrier-scalar everywhere, Lamport-scalar at densities 0.1 and 0.5, the
   optimal layout (Lamport-wide) at density 0.1 (the layout changes the data, not the code);
   Lamport-wide :data:`BELOW` of that size, where the builder prefetches shared loads into the
   registers the layer leaves over, and the same kernel built at prefetch depth 1
   (``below-pf1``: ptxas allocates the same registers, ``summary.prefetch_depth_check``).
   Dense: for every batch, 1, 1.5, 2 and 2.5 row-slots per warp and the kernel count's limit
   (Lamport-wide; barrier-wide at the limit); on the H100 also dense h1536 batch 4, which
   spilled on the GPU, and sparse barrier-wide h3061 and h3012 at batch 4, density 0.3, which
   spilled in trial runs of this sweep.
2. ``limit`` (repeated while it changes the table): :func:`derive_extra` of every record so far
   becomes ``PTXAS_EXTRA_REGS``, and the layers are those ``models.capacity.max_hidden`` now
   accepts: sparse Lamport-wide and barrier-wide (128-bit loads: the largest excess) at every
   density and batch and Lamport-wide :data:`BELOW` of it, dense Lamport and barrier.

``excess`` of a kernel: ptxas' registers (256 if it spilled) minus ``declared``, the builder's
count at prefetch depth 1 (``counted_registers``: dense with R >= 2 row-slots it holds
``dense_reuse_registers``, the shared h words).
``summary``: per architecture and kernel family, ptxas' registers minus ``declared`` over the
kernels that did not spill (``excess_pf1``: mean, min, max), and the kernels that spilled.
``extra``: the table the capacity model and the builder use
(``kernels_ir.kernels.sparse_rnn.PTXAS_EXTRA_REGS``; ``tests/models/test_capacity_ptxas.py``
checks it against this file).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

GPUS = {"v100": "sm_70", "h100": "sm_90"}
DENSITIES = (0.01, 0.1, 0.3, 0.5)
BATCHES = (1, 2, 4, 8)
TIMESTEPS = 2
SEED = 0
BELOW = 0.93           # the prefetching layers: this fraction of the limit
STEP_DOWN = 0.005      # the concrete matrix does not fit: try 0.5% smaller
STEP_TRIES = 12
DENSE_ROW_SLOTS = (1.0, 1.5, 2.0, 2.5)
MAX_ROUNDS = 3         # "limit" passes at most
FORMAT_VERSION = 1


def family(rec: dict) -> str:
    """``sparse-lamport-wide``, ``dense-barrier-wide``, ...: the summary's unit."""
    return f"{rec['kind']}-{rec['sync']}-{'wide' if rec['wide_loads'] else 'scalar'}"


def _case(kind, where, n, b, d, sync, wide, layout="naive") -> dict:
    return {"kind": kind, "where": where, "hidden": int(n), "batch": b, "density": d,
            "sync": sync, "wide_loads": wide, "layout": layout}


def plan(spec, stage: str) -> list[dict]:
    """The kernels of one pass on ``spec`` (see the module docstring)."""
    from models import capacity as cap

    builder = stage == "builder"
    out = []
    for d in DENSITIES:
        for b in BATCHES:
            n0 = cap.max_hidden(spec, d, b, ptxas=not builder).hidden
            if builder:
                variants = [("lamport", True, "naive"), ("barrier", False, "naive"),
                            ("barrier", True, "naive")]
                if d in (0.1, 0.5):
                    variants += [("lamport", False, "naive")]
                if d == 0.1:
                    variants += [("lamport", True, "optimal")]
            else:
                variants = [("lamport", True, "naive"), ("barrier", True, "naive")]
            out += [_case("sparse", "limit", n0, b, d, *v) for v in variants]
            out.append(_case("sparse", "below", round(BELOW * n0), b, d, "lamport", True))
            if builder:  # the same kernel at prefetch depth 1: does ptxas care about the depth?
                out.append({**out[-1], "where": "below-pf1", "force_prefetch": 1})
    nw = cap.n_warps(spec)
    for b in BATCHES:
        n0 = cap.max_hidden(spec, 1.0, b, dense=True, ptxas=not builder).hidden
        sizes = {round(f * nw) for f in DENSE_ROW_SLOTS if round(f * nw) < n0} if builder else \
            set()
        for n in sorted(sizes | {n0}):
            for sync in ("lamport", "barrier") if n == n0 else ("lamport",):
                out.append(_case("dense", "limit" if n == n0 else "grid", n, b, 1.0, sync, True))
    if builder and spec.name == "h100":
        # seen spilling on the GPU (255 registers, 356 bytes of spill stores)
        out.append(_case("dense", "hardware", 1536, 4, 1.0, "lamport", True))
        # seen spilling in trial runs of this sweep, below the limit where the same variant
        # did not (ptxas is not monotone in the layer size)
        out += [_case("sparse", "seen", n, 4, 0.3, "barrier", True) for n in (3061, 3012)]
    return out


def build(spec, case: dict, layers: dict):
    """The case's program; a concrete matrix that does not fit steps the hidden size down."""
    from unittest import mock

    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels import sparse_rnn
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    if case.get("force_prefetch"):
        with mock.patch.object(sparse_rnn, "_prefetch_depth",
                               lambda *a, **k: case["force_prefetch"]):
            return build(spec, {k: v for k, v in case.items() if k != "force_prefetch"}, layers)
    n = case["hidden"]
    for _ in range(STEP_TRIES):
        key = (n, case["batch"], case["density"])
        if key not in layers:
            layers.clear()  # one layer at a time: the largest have ~10^6 nonzeros
            layers[key] = make_layer(n, case["batch"], case["density"], TIMESTEPS, SEED)
        try:
            if case["kind"] == "dense":
                return build_dense_rnn(layers[key], spec, sync=case["sync"],
                                       wide_loads=case["wide_loads"])
            return build_sparse_rnn(layers[key], spec, sync=case["sync"],
                                    wide_loads=case["wide_loads"], layout=case["layout"],
                                    seed=SEED)
        except CapacityError as exc:
            last = str(exc)
            if case["kind"] == "dense":
                break
            n = int(n * (1 - STEP_DOWN))
    raise CapacityError(last)


def measure(spec, arch: str, case: dict, layers: dict) -> dict:
    from kernels_ir import ptxas
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import counted_registers, dense_reuse_registers
    from models import capacity as cap

    rec = {"gpu": spec.name, "arch": arch, **case, "planned_hidden": case["hidden"]}
    t0 = time.perf_counter()
    try:
        prog = build(spec, case, layers)
    except CapacityError as exc:
        return {**rec, "status": "refused", "error": str(exc)}
    t1 = time.perf_counter()
    m, meta = prog.mapping, dict(prog.kernel.meta)
    code = generate(prog.kernel).code
    rep = ptxas.compile_source(code, arch)
    t2 = time.perf_counter()
    counted1 = counted_registers(prog, prefetch=1)
    reuse = dense_reuse_registers(m.rows_per_warp, max(m.slots), prog.batch) if m.dense else 0
    # the reference of the excess: the count at prefetch depth 1 (ptxas pipelines the shared
    # loads itself, whatever depth the IR has), which holds the dense row-slots' shared h words
    declared = counted1
    need = 256 if rep.spills else rep.registers
    rec.update({
        "status": "ok", "hidden": prog.hidden, "slots": m.total_slots,
        "rows_per_warp": m.rows_per_warp, "kmax": max(m.slots), "prefetch": meta["prefetch"],
        "counted": counted_registers(prog), "counted_pf1": counted1, "dense_reuse": reuse,
        "declared": declared,
        "capacity_registers": cap.fit(spec, prog.hidden, prog.batch, case["density"],
                                      dense=m.dense, slots=tuple(m.slots)).registers,
        "ptxas": rep.as_dict(), "excess": need - declared,
        "cuda_sha256": hashlib.sha256(code.encode()).hexdigest(),
        "build_s": round(t1 - t0, 2), "compile_s": round(t2 - t1, 2)})
    return rec


def derive_extra(records: list[dict]) -> dict:
    """``{arch: {"sparse"|"dense": {batch: k}}}``: the largest ``excess`` (ptxas' registers, 256
    for a kernel that spilled, minus what the kernel declares) of the records, never below 0."""
    out: dict = {}
    for r in records:
        if r["status"] != "ok":
            continue
        t = out.setdefault(r["arch"], {"sparse": {}, "dense": {}})[r["kind"]]
        t[r["batch"]] = max(t.get(r["batch"], 0), r["excess"])
    return {a: {k: dict(sorted(v.items())) for k, v in t.items()} for a, t in sorted(out.items())}


def summary(records: list[dict]) -> dict:
    """Per ``arch`` and :func:`family`: kernels, spills, ptxas' registers less the count at
    prefetch depth 1 (and less the dense reuse) over the kernels that did not spill."""
    out: dict = {}
    for r in records:
        if r["status"] != "ok":
            continue
        s = out.setdefault(r["arch"], {}).setdefault(family(r), {
            "kernels": 0, "spilled": [], "ex": []})
        s["kernels"] += 1
        if r["ptxas"]["spills"]:
            s["spilled"].append({k: r[k] for k in (
                "stage", "where", "hidden", "batch", "density", "layout", "rows_per_warp",
                "prefetch", "counted", "counted_pf1", "dense_reuse")} | {
                "registers": r["ptxas"]["registers"],
                "spill_stores": r["ptxas"]["spill_stores"]})
        else:
            s["ex"].append(r["ptxas"]["registers"] - r["counted_pf1"] - r["dense_reuse"])
    pairs = {}
    for r in records:
        if r["status"] == "ok" and r["where"] in ("below", "below-pf1"):
            key = (r["stage"], r["arch"], r["hidden"], r["batch"], r["density"])
            pairs.setdefault(key, {})[r["where"]] = r
    out["prefetch_depth_check"] = [
        {"arch": k[1], "hidden": k[2], "batch": k[3], "density": k[4],
         "prefetch": p["below"]["prefetch"], "registers": p["below"]["ptxas"]["registers"],
         "registers_at_depth_1": p["below-pf1"]["ptxas"]["registers"]}
        for k, p in pairs.items() if len(p) == 2]
    for arch in (v for k, v in out.items() if k != "prefetch_depth_check"):
        for s in arch.values():
            ex = s.pop("ex")
            s["excess_pf1"] = {"mean": round(sum(ex) / len(ex), 2), "min": min(ex),
                               "max": max(ex)} if ex else None
    return out


def provenance(argv) -> dict:
    from kernels_ir import ptxas

    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except OSError:
            return None

    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python3", os.path.relpath(__file__)] + argv),
            "host": platform.node(), "python": platform.python_version(),
            "git_commit": run(["git", "rev-parse", "HEAD"]),
            "compilers": {arch: ptxas.available(arch) for arch in sorted(set(GPUS.values()))},
            "nvcc_version": run(["nvcc", "--version"]),
            "timesteps": TIMESTEPS, "seed": SEED}


def run_pass(stage: str, gpus, table: dict, records: list) -> None:
    from unittest import mock

    from gpusim.specs import load_spec
    from kernels_ir.kernels import sparse_rnn

    def count_only(S, R, b, dense, *, arch, kmax=None, **kw):  # the builder before ptxas
        return sparse_rnn.registers_needed(S, R, b, dense, **kw)

    alone = mock.patch.object(sparse_rnn, "ptxas_registers", count_only) if stage == "builder" \
        else contextlib.nullcontext()
    with mock.patch.dict(sparse_rnn.PTXAS_EXTRA_REGS, table, clear=True), alone:
        for gpu in gpus:
            spec, arch = load_spec(gpu), GPUS[gpu]
            layers: dict = {}
            cases = plan(spec, stage)
            for i, case in enumerate(cases):
                rec = {"stage": stage, **measure(spec, arch, case, layers)}
                records.append(rec)
                head = f"[{stage} {gpu} {i + 1}/{len(cases)}]"
                if rec["status"] != "ok":
                    print(f"{head} {case}: {rec['error'][:100]}", flush=True)
                    continue
                p = rec["ptxas"]
                print(f"{head} {family(rec):22s} {rec['layout']:7s} h{rec['hidden']:<6d} "
                      f"b{rec['batch']} d{rec['density']:<4g} R{rec['rows_per_warp']} "
                      f"pf{rec['prefetch']} count {rec['counted']:3d} (pf1 "
                      f"{rec['counted_pf1']:3d}) ptxas {p['registers']:3d} spill "
                      f"{p['spill_stores']}/{p['spill_loads']} ({rec['compile_s']:.1f}s)",
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default=",".join(GPUS), help="comma-separated: v100,h100")
    ap.add_argument("--out", default="measurements/ptxas_sweep.json")
    args = ap.parse_args(argv)
    from kernels_ir.kernels import sparse_rnn

    gpus = args.gpu.split(",")
    prov = provenance(argv)
    records: list = []
    t_start = time.time()
    run_pass("builder", gpus, {}, records)
    table = derive_extra(records)
    rounds = [table]
    for r in range(MAX_ROUNDS):
        run_pass(f"limit{r + 1}", gpus, table, records)
        new = derive_extra(records)
        rounds.append(new)
        if new == table:
            break
        table = new
    out = {"format_version": FORMAT_VERSION, "provenance": prov,
           "seconds": round(time.time() - t_start), "extra": table, "extra_rounds": rounds,
           "converged": rounds[-1] == rounds[-2], "summary": summary(records),
           "records": records}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["summary"], indent=1))
    print("extra:", json.dumps(table), "converged:", out["converged"])
    code = {a: {k: dict(v) for k, v in t.items()} for a, t in sparse_rnn.PTXAS_EXTRA_REGS.items()}
    print("matches sparse_rnn.PTXAS_EXTRA_REGS" if json.loads(json.dumps(code)) ==
          json.loads(json.dumps(table)) else "differs from sparse_rnn.PTXAS_EXTRA_REGS: update it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
