"""The Lamport exchange taken apart, one factor at a time: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/lamport_mech.py --out $OUT        # GPU: lamport_mech.json
    python measurements/lamport_mech.py --simulate measurements/h100/lamport_mech.json
    python measurements/lamport_mech.py --predict FILE     # the simulator alone, no GPU record
    python measurements/lamport_mech.py --compile-only     # nvcc sm_90: spills, SASS load order

The persistent Lamport kernels are 19-25% slower on an H100 than the simulator says, the barrier
kernels are not. The ``lmech_*`` microbenchmarks (:mod:`kernels_ir.kernels.microbench.lamport`)
each vary one factor of the exchange with the others fixed (families below); each is timed at
two sizes (rounds), cost per round = slope of the medians, 11 repeats after 2 warm-ups, every
repeat's time kept (``t.raw``), values checked on the first launch; then the whole set again
(``second_pass``, ``per_op_s_passes``: the spread within one session). The kernels of the counting
families record their poll iterations per thread; the record keeps, per timed repeat, the polls
per group and round (``polls``): 1.0 means no re-poll (what the executor's lockstep order gives;
the simulator replays the rest in time, counted as ``poll`` L2 transactions).

Families (``FAMILIES``): ``watch`` (a ping-pong round trip while 1..131 CTAs x 1 or 8 warps poll
the ping word, or a word of its sector, line or 1 KiB unit), ``exchange`` (the kernel's staging and
stores without the mat-vec, Lamport and barrier, N*B = 1K..32K words), ``writers`` (1, 2, 4, 8
CTAs per sector; two warps of one SM; one warp in two stores, 0 or 16 shared loads apart, and its
control), ``readers`` (16 writer CTAs, 16..132 polling CTAs), ``pollers`` (1, 2, 4 of 8 warps per
CTA poll), ``slots`` (expected-value polls on fresh slots, a ring of 4, the ring with sentinel
reset stores), and ``reference`` (``flag_round_trip``, ``lamport_contiguous`` /
``_interleaved``, ``poll_storm``, as recorded before, re-timed in the same call).

Then an Nsight Compute pass (``--worker``) launches ``NCU_NAMES`` once each and records warp
global-load instructions (polls), L2 read/write requests and sectors from the SMs (``tex``) and
from the other L2 partition (``ltcfabric``). Files under ``--out``: ``lamport_mech.json``,
``lamport_mech_ncu_raw.csv`` and ``order.json`` (the Nsight launch order).
``--simulate FILE`` adds the simulator's values (the measured GPU's spec, buffers warm in L2
as after the GPU runner's reset copies, both L2 partition assignments averaged) under
``"simulated"``.
The line hand-over (``l2_line_handover_cycles``, :mod:`gpusim.engine.l2`) is fitted to the IR
ring exchange (``measurements/lamport_ring.py --fit-handover``); the ``lmech_ws`` family here is
its check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXCHANGE = (16, 64)          # rounds on the GPU for the exchange-like benchmarks
SIM = (4, 8)                 # rounds in the simulator (an even difference: see steady_step_cycles)
REPEATS, WARMUP = 11, 2


def _entries() -> dict:
    """name -> (family, GPU sizes, simulator sizes)."""
    from kernels_ir.kernels.microbench import lamport as lm

    out = {}
    for name in lm.REGISTRY:
        fam = name.split("_")[1]
        fam = {"watch": "watch", "x": "exchange", "xb": "exchange", "xp": "exchange",
               "xq": "exchange", "ws": "writers",
               "split": "writers", "delay": "writers", "readers": "readers",
               "pollers": "pollers", "slot": "slots"}[fam]
        out[name] = (fam, (250, 1000) if fam == "watch" else EXCHANGE, SIM)
    out["flag_round_trip"] = ("reference", (500, 2000), (4, 8))
    out["lamport_contiguous"] = ("reference", EXCHANGE, SIM)
    out["lamport_interleaved"] = ("reference", EXCHANGE, SIM)
    out["poll_storm"] = ("reference", (100, 400), (2, 4))
    return out


ENTRIES = _entries()
FAMILIES = sorted({f for f, _, _ in ENTRIES.values()})
NCU_NAMES = ("lmech_x_4096", "lmech_x_32768", "lmech_xb_4096", "lmech_xb_32768", "lmech_xp_4096",
             "lmech_xp_32768", "lmech_xq_4096", "lmech_xq_32768", "lmech_ws_1",
             "lmech_ws_2", "lmech_ws_8", "lmech_split_16", "lmech_readers_16",
             "lmech_readers_132", "lmech_watch_1", "lmech_watch_131_w8", "lmech_slot_reset")
NCU_METRICS = ("gpu__time_duration.sum", "smsp__inst_executed_op_global_ld.sum",
               "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
               "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
               "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum",
               "lts__t_requests_srcunit_tex_op_write.sum",
               "lts__t_sectors_srcunit_tex_op_write.sum",
               "lts__t_requests_srcunit_ltcfabric.sum", "lts__t_sectors_srcunit_ltcfabric.sum")


def _ncu_size(name: str) -> int:
    return ENTRIES[name][1][0]


def poll_stats(m, polls) -> dict | None:
    """Polls per group and round from a kernel's ``polls`` buffer (None without one)."""
    import numpy as np

    if polls is None:
        return None
    p = m.params
    a = np.asarray(polls, dtype=np.float64)
    if m.name.startswith("lmech_watch"):   # per warp (lane 0): polls per round
        wpc = p["threads"] // 32
        a = a.reshape(p["pollers"] + 1, wpc) / p["rounds"]
        watchers = a[1:, :p["warps"]].reshape(-1)[1:]
        return {"per_round_pinger": float(a[0, 0]), "per_round_ponger": float(a[1, 0]),
                "per_round_watchers_mean": float(watchers.mean()) if watchers.size else None,
                "per_round_watchers_max": float(watchers.max()) if watchers.size else None}
    pt = 32 * p.get("pollers", p["threads"] // 32)
    per = a.reshape(-1, p["threads"])[:, :pt:32] / (p["rounds"] * p["groups"])  # per warp
    q = np.percentile(per, [50, 90])
    return {"per_group_round_mean": float(per.mean()), "p50": float(q[0]), "p90": float(q[1]),
            "max": float(per.max()), "min": float(per.min())}


def time_bench(runner, name: str, sizes: tuple, repeats: int = REPEATS,
               warmup: int = WARMUP) -> dict:
    """Microbenchmark ``name`` timed at ``sizes`` (as ``gpusim.backends.cupy_backend.
    run_microbench``: a reset of every buffer outside the timed region, one launch between two
    events) plus, per timed repeat, its poll statistics; an error is recorded, not raised."""
    from gpusim.backends.cupy_backend import _summary, _time_launch
    from gpusim.measurements import kernel_fingerprint
    from kernels_ir.errors import InputError
    from kernels_ir.kernels import microbench as mb

    cp = runner.cp
    t0 = time.time()
    rec = {"benchmark": name, "family": ENTRIES[name][0], "sizes": {}}
    try:
        for size in sizes:
            m = mb.build(name, size)
            comp = runner.compile(m.kernel)
            runner.check_grid(comp)
            bufs = runner.device_buffers(comp, m.inputs)
            pristine = {k: v.copy() for k, v in bufs.items()}

            def reset(bb, pristine=pristine):
                for k, v in pristine.items():
                    bb[k][...] = v

            times, polls = [], []
            for i in range(warmup + repeats):
                t = _time_launch(cp, runner, comp, bufs, reset)
                if i == 0:
                    out = {k: cp.asnumpy(v) for k, v in bufs.items()}
                    if not m.verify_result(out):
                        raise InputError(f"microbenchmark {m.name} (size {size}): wrong result")
                if i >= warmup:
                    times.append(t)
                    if "polls" in bufs:
                        polls.append(poll_stats(m, cp.asnumpy(bufs["polls"])))
            rec["sizes"][str(size)] = {
                "ops": m.ops, "t": _summary(times), "params": m.params, "unit": m.unit,
                "kernel": kernel_fingerprint(m.kernel), "compile_s": comp.compile_s,
                "attributes": comp.attributes, "polls": polls or None}
        (_, r1), (_, r2) = list(rec["sizes"].items())[:2]
        rec["per_op_s"] = (r2["t"]["median"] - r1["t"]["median"]) / (r2["ops"] - r1["ops"])
        rec["unit"] = r1["unit"]
        rec["status"] = "ok"
        extra = ""
        if r2["polls"]:
            k = "per_group_round_mean" if "per_group_round_mean" in r2["polls"][0] else \
                "per_round_watchers_mean"
            vals = [x[k] for x in r2["polls"] if x[k] is not None]
            if vals:
                extra = f"  polls {k} {sum(vals) / len(vals):.2f}"
        print(f"{name:28s} {rec['per_op_s'] * 1e9:9.1f} ns/round ({time.time() - t0:.1f}s)"
              f"{extra}", flush=True)
    except Exception as exc:  # record and go on
        rec.update(status="error", error=f"{type(exc).__name__}: {exc}")
        print(f"{name}: FAILED {rec['error']}", flush=True)
    return rec


def _save(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=float)


def measure(out: str, argv: list, only: list | None = None, ncu: bool = True) -> dict:
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    path = os.path.join(out, "lamport_mech.json")
    res = {"format_version": 2, "provenance": prov, "repeats": REPEATS, "warmup": WARMUP,
           "families": {f: [n for n, e in ENTRIES.items() if e[0] == f] for f in FAMILIES},
           "results": {}}
    t0 = time.time()
    names = [n for n in ENTRIES if not only or n in only]
    for name in names:
        res["results"][name] = time_bench(runner, name, ENTRIES[name][1])
        _save(path, res)
    print("second pass (the same benchmarks again: the spread within one session)", flush=True)
    for name in names:
        again = time_bench(runner, name, ENTRIES[name][1])
        rec = res["results"][name]
        rec["second_pass"] = {k: again.get(k) for k in ("status", "error", "per_op_s")}
        rec["second_pass"]["sizes"] = {s: {"t": r["t"], "polls": r["polls"]}
                                       for s, r in again.get("sizes", {}).items()}
        if rec["status"] == "ok" and again["status"] == "ok":
            rec["per_op_s_passes"] = [rec["per_op_s"], again["per_op_s"]]
        _save(path, res)
    clocks.stop(prov)
    res["timing_s"] = time.time() - t0
    _save(path, res)
    if ncu:
        from measurements.exchange_ncu import run_ncu

        try:
            res["ncu"] = run_ncu(os.path.abspath(__file__), out, "lamport_mech_ncu_raw.csv",
                                 "regex:mb_lmech", (), NCU_METRICS)
            res["ncu"]["sizes"] = {n: _ncu_size(n) for n in NCU_NAMES}
        except Exception as exc:  # the timings stand without it
            res["ncu"] = {"error": f"{type(exc).__name__}: {exc}"}
        _save(path, res)
        for name, rec in res["ncu"].get("cases", {}).items():
            m = rec["metrics"]
            print(name, {k: v for k, v in m.items() if k in NCU_METRICS}, flush=True)
    ok = sum(r["status"] == "ok" for r in res["results"].values())
    print(f"total {time.time() - t0:.0f} s; {ok}/{len(res['results'])} ok", flush=True)
    return res


def worker(order_path: str) -> int:
    """Launch every ``NCU_NAMES`` benchmark once (run under ncu)."""
    from gpusim.backends.cupy_backend import Runner
    from kernels_ir.kernels import microbench as mb
    from measurements.campaign import launch_jobs

    jobs = [(n, mb.build(n, _ncu_size(n))) for n in NCU_NAMES]
    launch_jobs(Runner(), jobs, order_path)
    return 0


def simulate_bench(spec, name: str, sizes: tuple) -> dict:
    """Simulated cycles per round (slope between ``sizes``, buffers warm in L2, both partition
    assignments averaged), the values check, and per-round L2 transactions and instructions."""
    from gpusim.engine import simulate
    from kernels_ir.kernels import microbench as mb

    flips = (False, True) if spec.l2_partitions > 1 and spec.l2_far_extra_cycles else (False,)
    pts = []
    for s in sizes:
        m = mb.build(name, s)
        runs = [simulate(m.kernel, m.inputs, spec, l2_warm=True, l2_flip=f) for f in flips]
        if not all(m.verify_result(r.globals) for r in runs):
            raise AssertionError(f"{name} (rounds {s}): the simulator's values fail the check")
        n = len(runs)
        tx = {k: sum(r.l2_transactions[k] for r in runs) / n for k in runs[0].l2_transactions}
        pts.append({"rounds": s, "ops": m.ops, "cycles": sum(r.cycles for r in runs) / n,
                    "l2_transactions": tx,
                    "warp_instructions": sum(r.warp_instructions for r in runs) / n})
    a, b = pts
    d = b["ops"] - a["ops"]
    per = (b["cycles"] - a["cycles"]) / d
    out = {"per_op_cycles": per, "per_op_s": per / spec.clock_hz, "sizes": pts,
           "l2_per_op": {k: (b["l2_transactions"][k] - a["l2_transactions"][k]) / d
                         for k in a["l2_transactions"]},
           "warp_instructions_per_op": (b["warp_instructions"] - a["warp_instructions"]) / d}
    tx = out["l2_per_op"]
    if tx.get("data"):
        out["poll_replays_per_first_load"] = tx.get("poll", 0.0) / tx["data"]
    return out


def _mean_passes(rec: dict, name: str) -> float:
    r = rec["results"][name]
    passes = r.get("per_op_s_passes") or [r["per_op_s"]]
    return sum(passes) / len(passes)


def _simulated(names=None, spec_name: str = "h100") -> dict:
    from gpusim.specs import load_spec

    spec = load_spec(spec_name)
    sim = {"spec": spec_name, "clock_hz": spec.clock_hz, "l2_warm": True,
           "flips_averaged": bool(spec.l2_partitions > 1 and spec.l2_far_extra_cycles),
           "results": {}}
    for name, (_, _, sizes) in ENTRIES.items():
        if names and name not in names:
            continue
        t0 = time.time()
        try:
            sim["results"][name] = simulate_bench(spec, name, sizes)
            r = sim["results"][name]
            print(f"{name:28s} sim {r['per_op_s'] * 1e9:8.1f} ns/round "
                  f"replays/first load {r.get('poll_replays_per_first_load', 0):.2f} "
                  f"({time.time() - t0:.0f}s)", flush=True)
        except Exception as exc:  # record and go on
            sim["results"][name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{name}: FAILED {exc}", flush=True)
    return sim


def simulate_into(path: str, names=None) -> None:
    with open(path) as f:
        data = json.load(f)
    # the measured GPU's spec (the H100's for the records taken before the H200 was lent)
    from gpusim.measurements import spec_name_for_gpu
    gpu = data.get("provenance", {}).get("gpu_name")
    sim = _simulated(names, spec_name_for_gpu(gpu) if gpu else "h100")
    for name, r in sim["results"].items():
        meas = data.get("results", {}).get(name, {}).get("per_op_s")
        r["measured_per_op_s"] = meas
        if meas and "per_op_s" in r:
            r["sim_over_measured"] = r["per_op_s"] / meas
    data["simulated"] = sim
    _save(path, data)


def predict(path: str, names=None) -> None:
    """The simulator's values alone (no GPU record): what the engine predicts before any
    measurement."""
    import datetime

    from gpusim.measurements import kernel_fingerprint
    from kernels_ir.kernels import microbench as mb

    sim = _simulated(names)
    for name, r in sim["results"].items():
        if "per_op_s" in r:
            r["kernel"] = {str(s): kernel_fingerprint(mb.build(name, s).kernel)
                           for s in ENTRIES[name][1]}
    _save(path, {"kind": "simulator prediction, no measurement",
                 "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                 "families": {f: [n for n, e in ENTRIES.items() if e[0] == f]
                              for f in FAMILIES},
                 "simulated": sim})


_PTXAS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def compile_only(arch: str = "sm_90", names=None) -> int:
    """nvcc every benchmark at its GPU sizes: registers, no spill or stack frame, and (with
    cuobjdump) every group of 128-bit poll loads issued back to back in the SASS."""
    from kernels_ir import sass
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels import microbench as mb

    cuobjdump = sass.find_cuobjdump()
    bad = n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, sizes, _) in ENTRIES.items():
            if names and name not in names:
                continue
            for size in sizes:
                n += 1
                cu = os.path.join(tmp, f"k{n}.cu")
                with open(cu, "w") as f:
                    f.write(generate(mb.build(name, size).kernel).code)
                cubin = cu[:-3] + ".cubin"
                r = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "--ptxas-options=-v",
                                    "-o", cubin, cu], capture_output=True, text=True)
                regs = re.findall(r"Used (\d+) registers", r.stderr)
                sp = _PTXAS.findall(r.stderr)
                ok = r.returncode == 0 and bool(sp) and not any(int(x) for x in sp[-1])
                note = ""
                if ok and cuobjdump:
                    ins = sass.parse(sass.disassemble(cubin, cuobjdump))
                    groups = sass.wide_load_groups(ins)
                    inter = sass.interleaved_loads(ins)
                    ok = not inter
                    note = f" 128-bit load groups {[len(g) for g in groups]}" + (
                        f" INTERLEAVED {inter[:2]}" if inter else "")
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name:28s} {size:5d} "
                      f"regs={regs[-1] if regs else '?'}{note}"
                      + ("" if ok or r.returncode == 0 else f"\n{r.stderr[-800:]}"), flush=True)
    print(f"{n - bad}/{n} kernels compiled for {arch} without spills"
          + ("" if cuobjdump else " (no cuobjdump: SASS order not checked)"))
    return 1 if bad else 0


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="GPU run: write lamport_mech.json (+ Nsight files) here")
    ap.add_argument("--simulate", metavar="FILE", help="add the simulator's values to FILE")
    ap.add_argument("--predict", metavar="FILE", help="write the simulator's values alone")
    ap.add_argument("--compile-only", action="store_true", help="nvcc sm_90 check, no GPU")
    ap.add_argument("--only", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute pass")
    a = ap.parse_args(argv)
    only = a.only.split(",") if a.only else None
    if only:
        unknown = [n for n in only if n not in ENTRIES]
        if unknown:
            ap.error(f"unknown benchmark(s) {', '.join(unknown)}; accepted: "
                     f"{', '.join(ENTRIES)}")
    if a.compile_only:
        return compile_only(names=only)
    if a.simulate:
        simulate_into(a.simulate, only)
    elif a.predict:
        predict(a.predict, only)
    elif a.out:
        os.makedirs(a.out, exist_ok=True)
        measure(a.out, ["measurements/lamport_mech.py"] + argv, only, not a.no_ncu)
    else:
        ap.error("one of --out, --simulate, --predict, --compile-only")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
