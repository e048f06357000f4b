"""Bank conflicts of whole kernels by address (Nsight's SASS-patched counters) beside the
hardware counters: one device call over the kernel cases of a recorded draw.

    PYTHONPATH=. python3 measurements/bank_sass.py --out $OUT \
        --draw measurements/h100/fresh_2026-11-25_s14          # H100: $OUT/ncu_sass.json

The campaign's conflict counts (``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}``)
are hardware counters of the L1TEX data banks. Besides the conflicts that the addresses of one
warp-instruction cause, they count *arbitration*: cycles a shared access loses to other users of
the same data banks (global loads returning through L1TEX, for instance), which depend on timing
and change from run to run; Nsight counts those apart too
(``l1tex__data_bank_conflicts_type_arbitration``). Nsight's SASS-patched counters are computed
from the addresses that each executed instruction touches, so they are what a bank rule
predicts. On the H100, with the device's Nsight Compute, the per-op SASS conflict counters
answer n/a; the SASS-patched shared wavefronts of loads and stores together
(``smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared``) are available, and a case whose hardware
conflict count differs from the bank rule is checked with them: the simulator's load plus store
wavefronts must equal them exactly.

This script re-profiles every kernel case of ``--draw`` (sparse and dense persistent, CSR) at
the campaign's T = ``NCU_STEPS`` with the hardware counters, the arbitration counter and the
SASS-patched ones in the same launches, and writes ``ncu_sass.json`` (the format of
``ncu.json``) for that draw's directory: :func:`gpusim.measurements.load_campaign` adds its
SASS-patched wavefronts and arbitration counts to the draw's Nsight record (the hardware counts
stay those of ``ncu.json``), and ``gpusim crosscheck`` checks the mismatching cases by address.
The campaign records the same two counters itself since (``campaign.NCU_METRICS``).

Run time on an H100: under a minute for a 16-layer draw (121 launches, 40 s with start-up).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements import campaign  # noqa: E402

# The hardware pass of the campaign, the arbitration counter, and the SASS-patched counters
# (the H100's Nsight answers n/a for the per-op SASS conflict and wavefront counters; it gives
# the wavefronts of loads and stores together, and the executed instructions by op)
SASS_METRICS = (
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
METRICS = tuple(dict.fromkeys(campaign.NCU_METRICS + SASS_METRICS))
CASE_KEYS = ("id", "kind", "hidden", "batch", "density", "seed", "sync", "wide_loads", "layout")


def draw_cases(draw: str) -> list[dict]:
    """The kernel cases (kinds Nsight profiles) of a recorded draw, as the campaign built them."""
    from measurements.probe import read_record
    data = read_record(os.path.join(draw, "campaign.json"))     # or its .gz
    return [{k: c[k] for k in CASE_KEYS if k in c} for c in data["cases"]
            if c["kind"] in campaign.KERNEL_KINDS_NCU and c.get("status") == "ok"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "measurements/out"))
    ap.add_argument("--draw", required=True, help="a recorded draw directory (campaign.json)")
    ap.add_argument("--timeout", type=int, default=420, help="seconds for the ncu run")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    selected = draw_cases(args.draw)
    prov = campaign.provenance([os.path.relpath(__file__)] + (argv or sys.argv[1:]))
    print(f"[bank_sass] {len(selected)} kernel cases of {args.draw}", flush=True)
    res = campaign.run_ncu(args.out, timeout=args.timeout, selected=selected, metrics=METRICS,
                           log_name="ncu_sass_raw.csv")
    res["provenance"] = prov
    res["draw"] = os.path.normpath(args.draw)
    with open(os.path.join(args.out, "ncu_sass.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    cases = res.get("cases", {})
    print(f"[bank_sass] rc={res.get('returncode')} launches={res.get('launches_parsed')} "
          f"in {res.get('seconds', 0):.0f}s {res.get('error', '')}", flush=True)
    for cid, rec in cases.items():
        m = rec["metrics"]
        print(f"{cid:62s} hw ld/st {m.get(campaign.NCU_METRICS[2])} / "
              f"{m.get(campaign.NCU_METRICS[3])}  sass wavefronts {m.get(SASS_METRICS[0])}"
              f"  arbitration "
              f"{m.get('l1tex__data_bank_conflicts_type_arbitration.sum')}")
    return 0 if cases else 1


if __name__ == "__main__":
    sys.exit(main())
