"""Which rule does Nsight Compute's shared-load wavefront counter follow for 64/128-bit loads?

    PYTHONPATH=. python3 measurements/wavefront_rule.py [--data measurements/h100] [--every 1]

For every profiled persistent / CSR case (``ncu.json``: whole kernel, T = ``ncu_steps``) the
kernel is simulated at the same T and the per-lane word addresses of every executed LDS
warp-instruction are recorded (the simulator's shared pipe sees exactly the addresses that
``kernels_ir.banks`` counts). Candidate rules for the wavefronts of one warp-instruction of
width ``w`` words (``d(bank)`` = distinct words the instruction's active lanes touch in a bank):

- ``phase``: sum over the w phases (32 / w lanes each) of max_bank d_phase(bank) - what
  ``kernels_ir.banks.wavefronts`` counts (its conflicts match ncu's conflict counter exactly);
- ``warp_max``: max_bank d(bank) over the whole warp (no phase split, broadcasts merged
  across phases);
- ``warp_max_floor_w``: max(w, warp_max);
- ``pairs``: phases merged in pairs (a 128-bit access as 2 half-warp phases of 16 lanes x 16 B,
  a 64-bit access as 1), sum of the max per merged phase.

Each rule's sum over the kernel is compared with
``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld``;
cases where ncu executed a different number of LDS than the IR (compiler merged loads) are
reported apart. Prints one row per case and the number of exact matches per rule.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

BANKS = 32


def _max_distinct(words: np.ndarray, active: np.ndarray) -> np.ndarray:
    """max over banks of distinct words per row: ``words`` (rows, k) with -1 = inactive."""
    w = np.where(active, words, -1)
    srt = np.sort(w, axis=1)
    valid = srt >= 0
    distinct = valid.copy()
    distinct[:, 1:] &= srt[:, 1:] != srt[:, :-1]
    rows = np.arange(w.shape[0])[:, None]
    key = rows * BANKS + np.where(valid, srt % BANKS, 0)
    counts = np.bincount(key.ravel(), weights=distinct.ravel(),
                         minlength=w.shape[0] * BANKS).reshape(-1, BANKS)
    return counts.max(axis=1).astype(np.int64)


def rules(words: np.ndarray, active: np.ndarray, width: int) -> dict:
    """Wavefronts per rule summed over the rows (warps) of one warp-instruction."""
    n = words.shape[0]
    every = words[:, :, None] + np.arange(width)              # (n, 32, w)
    act = np.broadcast_to(active[:, :, None], every.shape)
    out = {}
    ph = every.reshape(n, width, BANKS)                        # phases of 32/w lanes
    pa = act.reshape(n, width, BANKS)
    out["phase"] = int(_max_distinct(ph.reshape(-1, BANKS), pa.reshape(-1, BANKS)).sum())
    wm = _max_distinct(every.reshape(n, -1), act.reshape(n, -1))
    out["warp_max"] = int(wm.sum())
    anyact = active.any(axis=1)
    out["warp_max_floor_w"] = int(np.where(anyact, np.maximum(wm, width), 0).sum())
    m = max(1, width // 2)                                     # merged phases
    pp = every.reshape(n, m, -1)
    pq = act.reshape(n, m, -1)
    out["pairs"] = int(_max_distinct(pp.reshape(n * m, -1), pq.reshape(n * m, -1)).sum())
    return out


def record_case(case: dict, spec, steps: int) -> tuple[dict, int]:
    """Rule totals over every LDS of the case's kernel at ``steps``, and the LDS count."""
    from gpusim.engine import simulate
    from gpusim.engine import smem as smem_mod
    from gpusim.measurements import build_case
    from kernels_ir.ir import Op, instructions

    prog = build_case(case, steps, spec)
    kernel = prog.kernel
    ops = [ins.op for ins in instructions(kernel)]
    tot = {"phase": 0, "warp_max": 0, "warp_max_floor_w": 0, "pairs": 0}
    count = [0]
    orig = smem_mod.SharedPipe.access

    def access(self, sid, issue, warps, sm, words, active, width):
        if ops[sid] is Op.LDS:
            r = rules(words[warps], active[warps], width)
            for k, v in r.items():
                tot[k] += v
            count[0] += int(active[warps].any(axis=1).sum())
        return orig(self, sid, issue, warps, sm, words, active, width)

    smem_mod.SharedPipe.access = access
    try:
        inputs = (prog.step_inputs(0, prog.layer.h0) if case["kind"] == "csr"
                  else prog.inputs)
        simulate(kernel, inputs, spec)
    finally:
        smem_mod.SharedPipe.access = orig
    return tot, count[0]


def main(argv: list[str] | None = None) -> int:
    from gpusim.measurements import load_campaign
    from gpusim.specs import load_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="measurements/h100")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the per-case table here")
    args = ap.parse_args(argv)
    camp = load_campaign(args.data)
    spec = load_spec(camp.spec_name)
    steps = camp.ncu_steps or 4
    names = ("phase", "warp_max", "warp_max_floor_w", "pairs")
    exact = dict.fromkeys(names, 0)
    exact_same_ins = dict.fromkeys(names, 0)
    n_same = 0
    rows = []
    cases = [c for c in camp.cases if c["status"] == "ok" and c["id"] in camp.ncu][::args.every]
    print(f"{'case':58s} {'ncu wf':>8s} {'ncu ins':>8s} {'IR ins':>8s} "
          + " ".join(f"{n:>16s}" for n in names))
    for c in cases:
        m = camp.ncu[c["id"]]
        wf = int(m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"])
        ins = int(m["smsp__inst_executed_op_shared_ld.sum"])
        tot, n_ins = record_case(c, spec, steps)
        same = n_ins == ins
        n_same += same
        for k in names:
            exact[k] += tot[k] == wf
            exact_same_ins[k] += same and tot[k] == wf
        rows.append({"id": c["id"], "ncu_wavefronts_ld": wf, "ncu_lds": ins, "ir_lds": n_ins,
                     **tot})
        print(f"{c['id']:58s} {wf:8d} {ins:8d} {n_ins:8d} "
              + " ".join(f"{tot[k]:16d}" for k in names), flush=True)
    print(f"\n{len(cases)} cases ({n_same} with ncu LDS count = IR LDS count); exact matches:")
    for k in names:
        print(f"  {k:18s} {exact[k]:3d} of {len(cases)}  ({exact_same_ins[k]} of {n_same} "
              f"with the same LDS count)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "exact": exact, "exact_same_ins": exact_same_ins}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
