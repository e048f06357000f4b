"""Does h stay in L1 in the CSR baseline's step, on the GPU as in the simulator?

    PYTHONPATH=. python3 measurements/csr_l1.py --out $OUT      # GPU + Nsight: csr_l1.json
    python measurements/csr_l1.py --simulate measurements/h100/csr_l1.json

The simulator's CSR row-per-warp step is 14-44% too fast from hidden ~1900 up
(``measurements/README.md``). Its L1 keeps every read-only buffer that fits (h of the step
among them) without eviction, while on the GPU the streamed matrix (values and column indices,
read once) passes through the same L1. ``measurements/l1_merge.py`` showed that the simulator's
L2 load count equals the GPU's L1 miss count (the L1 merges one SM's in-flight misses in both),
so the two can be compared directly: one step of the CSR kernel of recorded fresh-draw layers,
launched once each under Nsight (L1 sectors, hits and misses of global loads; L2 read sectors),
against the simulator's L2 ``data`` loads of the same step (L2 warm, as the campaign's CUDA graph
finds it).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (hidden, batch, density, seed) of recorded CSR cases (the seeds their campaign.json records):
# fresh_2026-11-24_s4, and the last one of _s3
LAYERS = ((944, 4, 0.0198, 500017), (1336, 2, 0.0234, 500121), (2824, 1, 0.0211, 500130),
          (1928, 4, 0.0285, 500111), (5840, 1, 0.0539, 500035), (1416, 8, 0.425, 500083),
          (5248, 8, 0.084, 500026), (6464, 1, 0.0225, 400122))
METRICS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum",
           "lts__t_sectors_srcunit_tex_op_read.sum", "smsp__inst_executed_op_global_ld.sum",
           "gpu__time_duration.sum")


def case_name(h, b, d) -> str:
    return f"csr-h{h}-b{b}-d{d:g}"


def step(h, b, d, seed):
    """The CSR program's first step: ``(kernel, inputs)``."""
    from types import SimpleNamespace

    import numpy as np

    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import make_layer

    layer = make_layer(h, b, d, 2, seed=seed)
    prog = build_csr_baseline(layer)
    return SimpleNamespace(kernel=prog.kernel, inputs=prog.step_inputs(0, np.asarray(layer.h0)))


def worker(order_path: str) -> int:
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import launch_jobs

    jobs = [(case_name(h, b, d), step(h, b, d, s)) for h, b, d, s in LAYERS]
    launch_jobs(Runner(), jobs, order_path, check_grid=False)
    return 0


def measure(out: str, argv: list) -> dict:
    from measurements.campaign import provenance
    from measurements.exchange_ncu import run_ncu
    from measurements.probe import save_record

    res = {"format_version": 2, "provenance": provenance(argv), "layers": LAYERS}
    res["ncu"] = run_ncu(os.path.abspath(__file__), out, "csr_l1_ncu_raw.csv",
                         "regex:csr_row_per_warp", (), METRICS)
    for name, rec in res["ncu"].get("cases", {}).items():
        m = rec.get("metrics", {})
        print(name, {k.split("__")[1]: m.get(k) for k in METRICS}, flush=True)
    save_record(os.path.join(out, "csr_l1.json"), res)
    return res


def _simulated(spec, rec) -> dict:
    from gpusim.engine import simulate

    out = {}
    for h, b, d, s in LAYERS:
        st = step(h, b, d, s)
        r = simulate(st.kernel, st.inputs, spec, l2_warm=True)
        name = case_name(h, b, d)
        out[name] = {"l2_transactions": r.l2_transactions, "cycles": r.cycles}
        m = rec.get("ncu", {}).get("cases", {}).get(name, {}).get("metrics", {})
        miss = m.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum")
        ratio = f"; GPU L1 misses / simulator L2 loads {miss / r.l2_transactions['data']:.2f}" \
            if miss else ""
        print(f"{name}: simulator L2 loads {r.l2_transactions['data']}{ratio}", flush=True)
    return out


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True), worker=worker)


if __name__ == "__main__":
    sys.exit(main())
