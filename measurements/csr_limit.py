"""Which unit limits the CSR baseline's step on the GPU? Nsight's throughput breakdowns.

    PYTHONPATH=. python3 measurements/csr_limit.py --out $OUT     # GPU + Nsight: csr_limit.json
    PYTHONPATH=. python3 measurements/csr_limit.py --layers batch8 --out $OUT   # csr_limit_batch8

The simulator's CSR row-per-warp step is 20-40% too fast from hidden ~1900 up, and the gap
follows the number of rows more than the nonzeros (``measurements/README.md``). It moves the
data the GPU moves (``csr_l1.json``), so the question is which unit the GPU's step waits on.
One step of the same 8 recorded layers as ``csr_l1.py``, launched twice each under Nsight
(``--cache-control none``: the second launch finds L2 warm, as the campaign's CUDA graph does; the
record keeps both, ``<case>/cold`` and ``<case>``) with
the throughput breakdowns of L1TEX and L2 (every sub-unit's busy share of the elapsed cycles),
the warp stall reasons and the memory tables. The unit whose share approaches 100% is the
limit; the simulator's model of that unit is what to check with a microbenchmark.

``--layers batch8``: the layers of ``csr_trace.py --layers batch8`` (batch 8 and their batch-4
twins) instead, into ``csr_limit_batch8.json`` (the worker Nsight starts learns the set from the
environment variable ``CSR_LIMIT_LAYERS``).

    python measurements/csr_limit.py --l2-sectors measurements/h200/csr_limit_batch8.json.xz \
        measurements/h200/csr_l2_sectors_sim.json

``--l2-sectors NCU_RECORD OUT``: the simulator's L2 data sectors of one step of each of the
record's layers (L2 warm, :func:`simulated_l2_sectors`) beside Nsight's L1 lookup-miss
sectors and L2 sectors and requests of the same kernels (the record's warm launches).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
            "WarpStateStats", "Occupancy", "LaunchStats")
METRICS = ("breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
           "breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum",
           "l1tex__m_xbar2l1tex_read_sectors.sum", "dram__bytes_read.sum",
           "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
           "sm__cycles_elapsed.avg", "sm__cycles_active.avg", "smsp__inst_executed.sum",
           "smsp__inst_executed_op_global_ld.sum", "gpu__time_duration.sum")


LAYER_ENV = "CSR_LIMIT_LAYERS"


def layer_sets() -> dict:
    """``--layers`` name -> (layers, record)."""
    from measurements.csr_trace import BATCH8_LAYERS

    return {"batch8": (BATCH8_LAYERS, "csr_limit_batch8.json")}


def _layers(which: str | None):
    from measurements.csr_l1 import LAYERS

    return (LAYERS, "csr_limit.json") if not which else layer_sets()[which]


def worker(order_path: str) -> int:
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import launch_jobs
    from measurements.csr_l1 import case_name, step

    jobs = []
    for h, b, d, s in _layers(os.environ.get(LAYER_ENV))[0]:
        st = step(h, b, d, s)
        jobs += [(case_name(h, b, d) + "/cold", st), (case_name(h, b, d), st)]
    launch_jobs(Runner(), jobs, order_path, check_grid=False)
    return 0


def summary(m: dict) -> dict:
    """The breakdown's sub-units above 20% of peak, highest first, and the stall reasons above
    0.5 warps per issue."""
    top = {k: v for k, v in m.items() if isinstance(v, float) and "pct_of_peak" in k and v > 20}
    stalls = {k.replace("smsp__average_warps_issue_stalled_", "").replace(
        "_per_issue_active.ratio", ""): v for k, v in m.items()
        if isinstance(v, float) and "issue_stalled" in k and "per_issue_active" in k and v > 0.5}
    return {"units": dict(sorted(top.items(), key=lambda kv: -kv[1])), "stalls": stalls}


def measure(out: str, argv: list, which: str | None = None) -> dict:
    from measurements.campaign import provenance
    from measurements.exchange_ncu import run_ncu
    from measurements.probe import save_record

    layers, record = _layers(which)
    os.environ[LAYER_ENV] = which or ""
    res = {"format_version": 1, "provenance": provenance(argv), "layers": layers}
    res["ncu"] = run_ncu(os.path.abspath(__file__), out, "csr_limit_ncu_raw.csv",
                         "regex:csr_row_per_warp", SECTIONS, METRICS,
                         flags=("--cache-control", "none"))
    res["summary"] = {}
    for name, rec in res["ncu"].get("cases", {}).items():
        res["summary"][name] = s = summary(rec.get("metrics", {}))
        print(name, s, flush=True)
    save_record(os.path.join(out, record), res)
    return res


def simulated_l2_sectors(spec, h: int, b: int, d: float, seed: int) -> dict:
    """The simulator's L2 data sectors and cycles of one CSR step of the layer, L2 warm."""
    from gpusim.engine import simulate
    from measurements.csr_l1 import step

    st = step(h, b, d, seed)
    res = simulate(st.kernel, st.inputs, spec, l2_warm=True)
    return {"sim_l2_data": int(res.l2_transactions["data"]), "sim_cycles": float(res.cycles)}


L2_METRICS = {"gpu_l1_miss_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum",
              "gpu_l2_sectors": "lts__t_sectors_srcunit_tex_op_read.sum",
              "gpu_l2_requests": "lts__t_requests_srcunit_tex_op_read.sum"}


def l2_sectors_record(ncu_path: str, out: str) -> dict:
    """``--l2-sectors``: per layer of the Nsight record at ``ncu_path``, the simulator's L2 data
    sectors of one step beside Nsight's counts (:data:`L2_METRICS`), written to ``out``."""
    import json
    import subprocess

    from gpusim.specs import load_spec
    from measurements.probe import read_record

    rec = read_record(ncu_path)
    spec = load_spec(rec.get("spec", "h200"))
    results = {}
    for h, b, d, seed in rec["layers"]:
        name = f"csr-h{h}-b{b}-d{d:g}"
        m = rec["ncu"]["cases"][name]["metrics"]
        results[name] = {**simulated_l2_sectors(spec, h, b, d, seed),
                         **{k: m[v] for k, v in L2_METRICS.items()}}
        print(name, results[name], flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    doc = {"format_version": 1,
           "what": "the simulator's L2 data sectors of one CSR step (L2 warm) beside Nsight's "
                   "counts of the same kernels (warm launches): L1 lookup-miss sectors of global "
                   "loads, L2 sectors and requests from L1TEX",
           "commit": commit, "spec": spec.name,
           "command": f"python measurements/csr_limit.py --l2-sectors {ncu_path} {out}",
           "gpu_source": f"{ncu_path}, ncu.cases[<layer>].metrics", "results": results}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    return doc


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main, take_layer_set

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--l2-sectors"] and len(argv) == 3:
        l2_sectors_record(argv[1], argv[2])
        return 0
    if argv[:1] != ["--worker"]:
        argv, which = take_layer_set(argv, layer_sets())
    else:
        which = None
    flag = [] if which is None else ["--layers", which]
    return probe_main(argv, __doc__, os.path.relpath(__file__),
                      lambda out, a: measure(out, a + flag, which), lambda path: None,
                      worker=worker)


if __name__ == "__main__":
    sys.exit(main())
