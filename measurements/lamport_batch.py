"""The persistent kernel's exchange by batch: is the Lamport wait a matter of how many SMs write
a line? One device call, or the simulator.

    PYTHONPATH=. python3 measurements/lamport_batch.py --out $OUT   # GPU: lamport_batch.json
    python measurements/lamport_batch.py --simulate measurements/h200/lamport_batch.json
    ... --work --out $OUT / --work --simulate FILE   # lamport_batch_work.json: FFMA chains
    ... --rows --out $OUT / --rows --simulate FILE   # lamport_batch_rows.json: mat-vec rows
    ... --parts --out $OUT / --parts --simulate FILE # lamport_batch_parts.json: loads / shuffles
    ... --small --out $OUT / --small --simulate FILE # lamport_batch_small.json: hidden 256-1024

The fresh draws put the simulator's Lamport kernels 8-13% fast at batch 1-2 and within a few
percent at batch 4-8, and the dense kernel (``lamport_prefill_dense.json``) waits on the GPU
twice as long as simulated at batch 1-2. At batch B a warp stores B words a row, so a 128-byte
line of h holds the words of 32 / B rows: at batch 1 about four CTAs' and 32 store
instructions, at batch 8 one CTA's. This probe is the kernel's own exchange with no mat-vec
(:func:`kernels_ir.kernels.microbench.lamport_kernel.exchange`: ``_stage_h`` and the kernel's
owner-ordered h stores, 132 CTAs x 256 threads) at B = 1, 2, 4, 8 over the same words, each
twice: ``x`` (the Lamport exchange) and ``xp`` (every slot written before the launch: no CTA
waits, the loads and stores only). ``x - xp`` is the wait, B is the one thing that changes the
writers of a line at a given number of words.

``--work`` (:data:`WORK_EXPERIMENTS`), ``--rows`` (:data:`ROW_EXPERIMENTS`) and ``--parts``
(:data:`PART_EXPERIMENTS`): hidden 1024 at
every batch, with work before each row's store (:func:`with_work`): a chain of FFMAs by the
storing lanes, or a row of the mat-vec by the whole warp (shared loads, FFMAs, the shuffle
butterfly), or one of the row's two parts.

ns per round: slope between 64 and 256 rounds (9 repeats), two passes in the same call for the
spread between runs; the simulator's between 4 and 8 rounds, buffers warm in L2, both partition
assignments averaged, values checked.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (words, batch): the kernels' sizes, hidden = words / batch from 512 to 2048
SIZES = ((1024, 1), (2048, 1), (1024, 2), (2048, 2), (4096, 2), (2048, 4), (4096, 4),
         (8192, 4), (4096, 8), (8192, 8))
EXPERIMENTS = tuple((f"w{w}_b{b}_{tag}", w, b, tag == "xp", "") for w, b in SIZES
                    for tag in ("x", "xp"))
# --work: hidden 1024 (one row a warp) at every batch, each row's store after a chain of
# WORK dependent FFMAs (about 4 cycles each), as the kernel stores a row after its mat-vec
WORK = (64, 192)
WORK_SIZES = ((1024, 1), (2048, 2), (4096, 4), (8192, 8))
WORK_EXPERIMENTS = tuple((f"w{w}_b{b}_{tag}_f{f}", w, b, tag == "xp", f"f{f}") for f in WORK
                         for w, b in WORK_SIZES for tag in ("x", "xp"))
# --rows: the same with a row of the mat-vec by the whole warp before each row's store
# (``with_work(kind="row")``: 16 or 48 128-bit shared loads, 4 FFMAs each, 5 shuffles)
ROW_WORK = (64, 192)
ROW_EXPERIMENTS = tuple((f"w{w}_b{b}_{tag}_r{f}", w, b, tag == "xp", f"r{f}") for f in ROW_WORK
                        for w, b in WORK_SIZES for tag in ("x", "xp"))
# --parts: the longer row split: its shared loads and FFMAs without the butterfly (l192), and
# 45 shuffles of the butterfly's masks without the loads (s192: nine butterflies, about as many
# shuffles as the row has loads, from a value that differs by lane)
PART_EXPERIMENTS = tuple((f"w{w}_b{b}_{tag}_{k}192", w, b, tag == "xp", f"{k}192")
                         for k in ("l", "s") for w, b in WORK_SIZES for tag in ("x", "xp"))
# --small: the smaller layers (hidden 256-1024), where the fresh draws' Lamport kernels are
# too slow in the simulator at batch 4 (and 8) and too fast at batch 1; the exchange needs a
# multiple of 1024 words. The plain exchange, and with a row of 64 FFMAs where the slot is a
# power of two (the row's wrap needs one)
SMALL_SIZES = ((1024, 1), (1024, 2), (1024, 4), (2048, 4), (3072, 4), (2048, 8), (3072, 8),
               (4096, 8))
SMALL_ROW_SIZES = tuple((w, b) for w, b in SMALL_SIZES if w & (w - 1) == 0)
SMALL_EXPERIMENTS = tuple((f"w{w}_b{b}_{tag}", w, b, tag == "xp", "") for w, b in SMALL_SIZES
                          for tag in ("x", "xp")) + \
    tuple((f"w{w}_b{b}_{tag}_r64", w, b, tag == "xp", "r64") for w, b in SMALL_ROW_SIZES
          for tag in ("x", "xp"))
PASSES = 2
# a work tag's letter (``_bench``'s ``work``, the records' keys) and its kind of work
WORK_KINDS = {"f": "ffma", "r": "row", "l": "lds", "s": "shfl"}


def with_work(kernel, ffmas: int, kind: str = "ffma", order: str = "pipelined"):
    """``kernel`` (an ``exchange``) with work before every h store.

    ``kind="ffma"``: a chain of ``ffmas`` dependent FFMAs by the storing lanes; it starts from
    the stored value (so the compiler can neither fold nor hoist it) and the store writes
    ``fma(chain, 0, value)``, the same value. ``kind="row"``: a row of the mat-vec by the whole
    warp before the ``if`` of the store: ``ffmas / 4`` 128-bit shared loads of the staged h
    (the lane's 16-byte chunk and then the next one per load, wrapped in the slot: the
    slot's size is a power of two), four FFMAs each into one sum, the five-shuffle butterfly,
    and the store of ``fma(sum, 0, value)``; ``order="pipelined"`` issues each load before the
    previous one's FFMAs (as ptxas schedules them), ``"interleaved"`` right before its own (the
    IR the records of 2026-11-28 were measured with: ptxas compiles both to the same SASS,
    ``tests/test_lamport_batch_record.py``), ``kind="lds"``: the row without its shuffles,
    ``"shfl"``: 45 shuffles of the butterfly's masks (nine butterflies) with their adds and no
    loads."""
    import dataclasses

    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, I32, If, Imm, Instr, MemRef, Op, Reg
    from kernels_ir.verify import verify
    from measurements.probe import rewrite_statements

    tags = {k: t for t, k in WORK_KINDS.items()}
    if kind not in tags:
        raise ValueError(f"kind={kind!r}: accepted {', '.join(map(repr, tags))}")
    if order not in ("pipelined", "interleaved"):
        raise ValueError(f"order={order!r}: accepted 'pipelined', 'interleaved'")
    ahead = 1 if order == "pipelined" else 0
    acc, out = Reg("work_acc", F32)[0], Reg("work_val", F32)[0]
    half, quarter, zero = Imm(0.5, F32), Imm(0.25, F32), Imm(0.0, F32)
    h_s = next(b for b in kernel.buffers if b.name == "h_s")
    extra = [acc.reg, out.reg]

    def chain(val):
        ops = [Instr(Op.FFMA, (acc,), (val, half, quarter))]
        ops += [Instr(Op.FFMA, (acc,), (acc, half, quarter)) for _ in range(ffmas - 1)]
        return ops + [Instr(Op.FFMA, (out,), (acc, zero, val))]

    def row(val):
        b = Builder("work_row", grid=kernel.grid, block=kernel.block)
        hb = b.shared(h_s.name, h_s.dtype, h_s.size)
        tid4 = Reg("tid4", I32)[0]
        v4 = [b.reg(F32, f"work_h{j}", 4) for j in range(2)]
        part = b.reg(F32, "work_part")
        b.mov(0.0, dst=acc)
        idx = b.reg(I32, "work_idx")
        n = max(1, ffmas // 4)

        def load(k):                # the lane's chunk + k, wrapped in the slot
            b.and_(b.iadd(tid4, 4 * k, dst=idx), h_s.size - 1, dst=idx)
            b.lds(hb, idx, width=4, dst=v4[k % 2])

        if kind != "shfl":          # pipelined: load k + 1 before the FFMAs of load k, as
            if ahead:               # ptxas schedules them (SASS: LDS.128, then 4 FFMA)
                load(0)
            for k in range(n):
                if k + ahead < n:
                    load(k + ahead)
                for i in range(4):
                    b.ffma(v4[k % 2][i], half, acc, dst=acc)
        else:   # as many shuffles as a row has loads, from a value that differs by lane (a
            # warp-uniform one lets the compiler drop every shuffle: a first run did)
            b.ffma(b.i2f(Reg("lane", I32)[0], dst=acc), quarter, val, dst=acc)
        masks = (16, 8, 4, 2, 1) * (n // 5 if kind == "shfl" else 1)
        for m in masks if kind != "lds" else ():
            b.shfl_xor(acc, m, dst=part)
            b.fadd(acc, part, dst=acc)
        b.ffma(acc, zero, val, dst=out)
        built = b.build()
        extra.extend(built.regs)
        return list(built.body)

    def stores_h(node) -> bool:
        return isinstance(node, Instr) and node.op is Op.STG and \
            isinstance(node.srcs[0], MemRef) and node.srcs[0].buffer.name in ("hseq", "sink")

    def visit(node):
        if kind == "ffma" and stores_h(node):
            return chain(node.srcs[1]) + [dataclasses.replace(node, srcs=(node.srcs[0], out))]
        if kind != "ffma" and isinstance(node, If) and any(map(stores_h, node.then)):
            st = next(n for n in node.then if stores_h(n))
            return row(st.srcs[1]) + [dataclasses.replace(node, then=tuple(
                dataclasses.replace(n, srcs=(n.srcs[0], out)) if stores_h(n) else n
                for n in node.then))]
        return None

    body = rewrite_statements(kernel.body, visit)
    regs = kernel.regs + tuple(dict.fromkeys(r for r in extra if r not in kernel.regs))
    return verify(dataclasses.replace(kernel, name=f"{kernel.name}_{tags[kind]}{ffmas}", regs=regs,
                                      body=body))


def _bench(rounds: int, words: int, batch: int, present: bool, work: str = "",
           order: str = "pipelined"):
    """The exchange; ``work`` "" (none), ``f<n>`` (a chain of n FFMAs), ``r<n>`` (a row of n
    FFMAs), ``l<n>`` (the row without its shuffles) or ``s<n>`` (its shuffles without the
    loads) before every h store (:func:`with_work`, with ``order``)."""
    import dataclasses

    from kernels_ir.kernels.microbench.lamport_kernel import exchange

    m = exchange(rounds=rounds, words=words, batch=batch, present=present)
    if not work:
        return m
    kind = WORK_KINDS[work[0]]
    return dataclasses.replace(m, name=f"{m.name}_{work}",
                               kernel=with_work(m.kernel, int(work[1:]), kind, order),
                               params={**m.params, "work": work})


def measure(out: str, argv: list, experiments=EXPERIMENTS,
            filename: str = "lamport_batch.json") -> dict:
    from measurements.probe import record_rounds

    return record_rounds(out, argv, filename, [
        (key, lambda s, w=w, b=b, pr=present, f=work: _bench(s, w, b, pr, f))
        for key, w, b, present, work in experiments], passes=PASSES)


def simulate_one(spec, words: int, batch: int, present: bool, work: str = "") -> dict:
    """The simulator's ns per round (slope between the two round counts, buffers warm in L2,
    both partition assignments averaged), values checked."""
    from gpusim.engine import simulate
    from measurements.lamport_ring import SIM_ROUNDS

    flips = (False, True) if spec.l2_partitions > 1 and spec.l2_far_extra_cycles else (False,)
    cyc = []
    for s in SIM_ROUNDS:
        m = _bench(s, words, batch, present, work)
        runs = [simulate(m.kernel, m.inputs, spec, l2_warm=True, l2_flip=f) for f in flips]
        if not all(m.verify_result(x.globals) for x in runs):
            raise AssertionError(f"{m.name} batch {batch} (rounds {s}): the simulator's values "
                                 f"fail the check")
        cyc.append(sum(x.cycles for x in runs) / len(runs))
    per = (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0]) / spec.clock_hz
    return {"per_op_s": per, "cycles": dict(zip(map(str, SIM_ROUNDS), cyc, strict=True))}


def _simulated(spec, rec, experiments=EXPERIMENTS) -> dict:
    res = {}
    for key, w, b, present, work in experiments:
        res[key] = simulate_one(spec, w, b, present, work)
        g = rec.get("results", {}).get(key, {}).get("per_op_s")
        print(f"{key:14s}: simulated {res[key]['per_op_s'] * 1e9:7.1f} ns per round"
              + (f"   GPU {g * 1e9:7.1f}" if g else ""), flush=True)
    return res


def wait_table(rec: dict, sizes=SIZES, work: str = "") -> list:
    """Per (words, batch): the GPU's and the simulator's round, free round and wait (ns);
    ``work`` as :func:`_bench`'s."""
    res, sim = rec.get("results", {}), rec.get("simulated", {}).get("results", {})
    tail = f"_{work}" if work else ""
    rows = []
    for w, b in sizes:
        x, xp = f"w{w}_b{b}_x{tail}", f"w{w}_b{b}_xp{tail}"
        row = {"words": w, "batch": b, "hidden": w // b, "work": work}
        for src, d in (("gpu", res), ("sim", sim)):
            if x in d and xp in d:
                row[src] = {"x": d[x]["per_op_s"] * 1e9, "xp": d[xp]["per_op_s"] * 1e9}
                row[src]["wait"] = row[src]["x"] - row[src]["xp"]
        rows.append(row)
    return rows


def main(argv: list | None = None) -> int:
    from measurements.probe import variant_probe_main

    argv = sys.argv[1:] if argv is None else list(argv)
    return variant_probe_main(argv, __doc__, "measurements/lamport_batch.py",
                              (EXPERIMENTS, "lamport_batch.json"),
                              (("--work", WORK_EXPERIMENTS, "lamport_batch_work.json"),
                               ("--rows", ROW_EXPERIMENTS, "lamport_batch_rows.json"),
                               ("--parts", PART_EXPERIMENTS, "lamport_batch_parts.json"),
                               ("--small", SMALL_EXPERIMENTS, "lamport_batch_small.json")),
                              measure, _simulated)


if __name__ == "__main__":
    raise SystemExit(main())
