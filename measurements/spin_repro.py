"""Does a recorded persistent case that stopped on its bounded spin stop again, and where?

    PYTHONPATH=. python3 measurements/spin_repro.py --out $OUT \
        --draw measurements/h100/fresh_2026-11-28_s22 \
        --case sparse_persistent-h984-b2-d0.013-lamport-wide-optimal --launches 400

Why: a fresh draw's case passed its value check and its warm-up launches, then one of its timed
launches (fresh random ``h_0`` and ``x_proj``, as the campaign's runner writes them) reported
``SpinTimeout`` in ``lamport_poll``. A kernel that can stop that way is either racy (a producer
never wrote, or wrote a word the consumers read as the sentinel) or was not co-resident. This
probe (built here, a probe) rebuilds the case from the draw's ``campaign.json`` (same layer seed)
and launches it many times the way the campaign does, each launch on fresh random inputs,
alternating with the same layer's ``lamport-wide-naive`` kernel as a control. On a stop it keeps
what a post-mortem needs: the error word (CTA, warp, lane, loop), the first slot of ``hseq`` that
still holds sentinels, which positions (and so which producer rows) hold them, whether any later
slot was written, and the launch's inputs (``spin_repro_fail.npz``).

``--positive-zeros`` draws the inputs as the runner does since (``fresh_normal``: no -0.0).

Writes ``spin_repro.json`` (per kernel: launches, stops, per stop its post-mortem) and the npz.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


MAX_STOPS = 10   # each stop costs a full bounded spin (about a second): stop early


def _control_id(case_id: str) -> str:
    base = case_id.rsplit("-", 3)[0]
    return f"{base}-lamport-wide-naive"


def _post_mortem(program, hseq: np.ndarray, err: np.ndarray) -> dict:
    from kernels_ir.kernels.sparse_rnn import SENTINEL_BITS

    n, b = program.hidden, program.batch
    nb = n * b
    slots = hseq.reshape(program.timesteps + 1, -1)[:, :nb].view(np.int32)
    sent = slots == SENTINEL_BITS
    incomplete = [t for t in range(slots.shape[0]) if sent[t].any()]   # slot 0 is h_0
    first = incomplete[0] if incomplete else None
    out = {"err": [int(x) for x in err[:5]], "first_incomplete_slot": first,
           "slots": int(slots.shape[0])}
    if first is not None:
        pos = np.nonzero(sent[first])[0]
        out["sentinel_words"] = int(pos.size)
        out["sentinel_positions"] = [int(p) for p in pos[:64]]
        # later slots written at all (a producer that ran ahead of the stop)?
        out["later_words_written"] = int((~sent[first + 1:]).sum()) if first + 1 < \
            slots.shape[0] else 0
        # the producer of each missing word: the warp whose row holds the unit's position
        rows = np.asarray(program.mapping.row_ids).reshape(program.mapping.n_warps, -1)
        pos_of_row = np.asarray(program.mapping.h_positions)
        owner = {}
        for w in range(rows.shape[0]):
            for r in rows[w]:
                if r >= 0:
                    owner[int(pos_of_row[r])] = w
        warps = sorted({owner.get(int(p) // b, -1) for p in pos})
        out["producer_warps"] = warps[:64]
        out["warps_per_cta"] = program.kernel.warps_per_cta
    return out


def run(draw: str, case_id: str, launches: int, out_dir: str,
        positive_zeros: bool = False) -> dict:
    from gpusim.backends.cupy_backend import Runner, fresh_normal, launch_program_checked
    from gpusim.measurements import build_case
    from gpusim.specs import load_spec
    from measurements.campaign import STEPS
    from measurements.probe import read_record
    rec = read_record(os.path.join(draw, "campaign.json"))     # or its .gz
    by_id = {c["id"]: c for c in rec["cases"]}
    if case_id not in by_id:
        raise SystemExit(f"--case {case_id!r}: not in {draw}/campaign.json")
    ids = [case_id, _control_id(case_id)]
    spec = load_spec("h100")
    runner = Runner()
    cp = runner.cp
    result = {"draw": draw, "case": case_id, "launches_each": launches,
              "positive_zeros": positive_zeros, "kernels": {}}
    progs, comps, bufs, pristine = {}, {}, {}, {}
    for cid in ids:
        c = by_id[cid]
        prog = build_case(c, STEPS, spec)   # the campaign's long launch
        comp, b, _, err = launch_program_checked(runner, prog)
        progs[cid], comps[cid], bufs[cid] = prog, comp, b
        pristine[cid] = cp.asarray(prog.inputs["hseq"])
        result["kernels"][cid] = {"max_rel_err": err, "stops": [], "launches": 0,
                                  "seconds": []}
    rng = cp.random.default_rng(int(by_id[case_id]["seed"]))
    saved = False
    t_start = time.time()
    for i in range(launches):
        for cid in ids:
            prog, comp, bb = progs[cid], comps[cid], bufs[cid]
            nb = prog.hidden * prog.batch
            bb["hseq"][...] = pristine[cid]
            bb["__err"][...] = 0
            if positive_zeros:   # the runner's inputs today
                bb["hseq"][:nb] = fresh_normal(cp, rng, nb)
                bb["x_proj"][...] = fresh_normal(cp, rng, bb["x_proj"].size)
            else:                # the runner's inputs when the stop was met (-0.0 possible)
                bb["hseq"][:nb] = 0.5 * rng.standard_normal(nb, dtype=cp.float32)
                bb["x_proj"][...] = 0.5 * rng.standard_normal(bb["x_proj"].size,
                                                              dtype=cp.float32)
            h0 = cp.asnumpy(bb["hseq"][:nb])
            x = cp.asnumpy(bb["x_proj"])
            cp.cuda.Device().synchronize()
            t0 = time.time()
            runner.launch(comp, bb)
            cp.cuda.Device().synchronize()
            k = result["kernels"][cid]
            k["launches"] += 1
            k["seconds"].append(time.time() - t0)
            err = cp.asnumpy(bb["__err"])
            if err[0] != 0:
                pm = _post_mortem(prog, cp.asnumpy(bb["hseq"]), err)
                pm["launch"] = i
                pm["seconds"] = k["seconds"][-1]
                k["stops"].append(pm)
                print(f"[{i}] {cid}: STOP {pm}", flush=True)
                if not saved:
                    np.savez_compressed(os.path.join(out_dir, "spin_repro_fail.npz"), h0=h0,
                                        x_proj=x, hseq=cp.asnumpy(bb["hseq"]), err=err,
                                        launch=i)
                    saved = True
        if sum(len(k["stops"]) for k in result["kernels"].values()) >= MAX_STOPS:
            print(f"[{i}] {MAX_STOPS} stops: enough for a post-mortem", flush=True)
            break
        if i % 200 == 0:
            print(f"[{i}/{launches}] {time.time() - t_start:.0f}s "
                  + " ".join(f"{cid.rsplit('-', 2)[-1]}:{len(result['kernels'][cid]['stops'])}"
                             for cid in ids), flush=True)
    for k in result["kernels"].values():
        s = sorted(k.pop("seconds"))
        k["launch_s_median"] = s[len(s) // 2]
        k["launch_s_max"] = s[-1]
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "measurements/out"))
    ap.add_argument("--draw", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--launches", type=int, default=400)
    ap.add_argument("--positive-zeros", action="store_true",
                    help="draw the inputs as the runner does today (every zero +0.0)")
    args = ap.parse_args(argv)
    if not 1 <= args.launches <= 100_000:
        raise SystemExit(f"--launches {args.launches}: accepted 1..100000")
    os.makedirs(args.out, exist_ok=True)
    from measurements.campaign import provenance

    prov = provenance([os.path.relpath(__file__)] + (argv or sys.argv[1:]))
    res = run(args.draw, args.case, args.launches, args.out, args.positive_zeros)
    res["provenance"] = prov
    with open(os.path.join(args.out, "spin_repro.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    for cid, k in res["kernels"].items():
        print(f"{cid}: {len(k['stops'])} stops in {k['launches']} launches, median "
              f"{k['launch_s_median'] * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
