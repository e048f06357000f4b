"""The GPU's shared-memory bank rule, pattern by pattern: one device call, and its analysis.

    PYTHONPATH=. python3 measurements/bank_rule.py --out $OUT          # GPU: bank_rule.json
    PYTHONPATH=. python3 measurements/bank_rule.py --out $OUT --limit 30 --budget-s 90  # smoke
    python3 measurements/bank_rule.py --analyse measurements/h100/bank_rule.json   # no GPU

``kernels_ir.banks`` charged a ``w``-word shared access ``w`` phases of ``32 / w`` lanes, each as
many wavefronts as its busiest bank has distinct words. Nsight Compute agreed with it on the
campaign's loads, but not everywhere: 128-bit gathers of the optimal layout on other layers, and
the h staging's ``STS.128`` (contiguous, conflict-free by that rule) at hidden 2304. This record
measures the rule directly (the H100 record, ``measurements/h100/bank_rule.json``, showed that
64/128-bit *loads* are return-packed: lane pairs on one address merge two lane phases into one;
``kernels_ir.banks`` now matches all 344 usable patterns; the staging stores are conflict-free
in isolation): every pattern of ``kernels_ir.kernels.bank_probe.catalogue()`` (about
350: the kernels' own accesses, structured, masked and random ones, and noise controls) is one
kernel launch that executes that one warp instruction ``repeats`` times, and Nsight Compute
counts that launch's shared wavefronts, bank conflicts (by type), bank reads / writes and
executed shared instructions.

Why one launch per pattern: Nsight's hardware counters are totals per launch, so a launch can
hold only one pattern if its counts are to stay separable; the same compiled kernel serves every
pattern of one (op, width, noise) (the pattern is data), so the cost is Nsight's per-launch
overhead only (the campaign profiled 51 larger launches in 18 s). The alternative, many
patterns in one launch read back per SASS instruction, works only for the SASS-patched counters,
which are Nsight's own model of the addresses, not the hardware's count: they are recorded as
a second opinion (stage 5), not as the measurement.

Stages of ``--out`` (each failure recorded, not raised; progress on stdout):

1. provenance (GPU, driver, CUDA runtime, NVRTC, CuPy, ncu, nvcc, date, command);
2. values: every pattern launched once without a profiler, its output checked (the loads
   return the right words, the stores land);
3. SASS: each probe kernel compiled with ``nvcc -cubin -arch=sm_90`` and disassembled
   (``cuobjdump``, if present): one SASS LDS/STS of the pattern's width per kernel, nothing
   merged or split (``bank_rule_sass.txt``); Nsight's executed-instruction counts check the
   same on the kernels CuPy actually ran;
4. Nsight Compute, hardware counters: ``ncu`` re-runs this script with ``--worker`` on chunks of
   the catalogue (one process per chunk, so a slow chunk costs only itself), one launch per
   pattern;
5. Nsight Compute, SASS-patched counters (``smsp__sass_*``: Nsight's own per-instruction
   wavefront model, shown in its source view), as far as the time budget allows.

Expected run time on an H100: 2 to 4 minutes, never much more than ``--budget-s`` (210 s):
an Nsight chunk that would not fit in what is left is skipped and listed as such in
``ncu_runs`` (the catalogue is ordered most informative first).

Output (``--out``): ``bank_rule.json`` (provenance, metrics, per pattern: addresses, active lanes,
width, ld/st, kernel, repeats, values check, kernels_ir.banks' wavefronts and conflicts, the raw
Nsight values), ``bank_rule_ncu_raw.csv`` (every ncu log), ``bank_rule_sass.txt``.

``--analyse FILE`` (no GPU): per pattern, the measured per-instruction values (counter /
repeats) against ``kernels_ir.banks`` and against candidate rules (:data:`WAVEFRONT_RULES`,
:data:`IDEAL_RULES`), for the wavefront counter and the conflict counter separately, by op and
width; prints the rules that match every pattern (or the closest and its mismatches), the
patterns ``kernels_ir.banks`` misses (:data:`KNOWN_EXCEPTIONS`: none) and those where the lane
phases alone (the rule before the record, :data:`BEFORE`) miss.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FORMAT_VERSION = 1
BUDGET_S = 210           # the whole call, Nsight passes included (one device call < 4 min)
CHUNK = 90               # launches per ncu process
KERNEL_REGEX = "regex:bank_probe"
HW_METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__data_bank_conflicts_pipe_lsu.sum",
    "l1tex__data_bank_conflicts_type_arbitration.sum",
    "l1tex__data_bank_reads.sum",
    "l1tex__data_bank_writes.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
)
SASS_METRICS = (
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_ideal.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_ld_ideal.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_st_ideal.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
# the campaign's counters (measurements/campaign.py NCU_METRICS): known to this ncu
CORE_METRICS = HW_METRICS[:4] + HW_METRICS[-2:]
# the per-op counters one pattern's access is read from: (wavefronts, conflicts, instructions)
OP_METRICS = {
    "ld": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "smsp__inst_executed_op_shared_ld.sum", "l1tex__data_bank_reads.sum"),
    "st": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
           "smsp__inst_executed_op_shared_st.sum", "l1tex__data_bank_writes.sum"),
}


# =============================================================================== the GPU side


def _tool_version(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
        return lines[-1].strip() if lines else None
    except (OSError, subprocess.SubprocessError):
        return None


def _patterns_from(path: str):
    from kernels_ir.kernels.bank_probe import Pattern

    with open(path) as f:
        data = json.load(f)
    return [Pattern.from_dict(d) for d in data["patterns"]]


def worker(args) -> int:
    """Launch patterns ``start .. stop - 1`` of the record once each (the launches ncu
    profiles); ``args.order`` lists ``[name, launched]`` in order (``launched``: the kernel was
    launched, so ncu profiled it, even if its error check failed afterwards)."""
    from gpusim.backends.cupy_backend import Runner
    from kernels_ir.kernels import bank_probe as bp
    from kernels_ir.kernels.bank_probe import kernel_key

    pats = _patterns_from(args.patterns)[args.start:args.stop]
    runner = Runner()
    cp = runner.cp
    kernels: dict = {}
    order: list = []
    for p in pats:
        launched = False
        try:
            key = kernel_key(p)
            if key not in kernels:
                kernels[key] = runner.compile(bp.probe_kernel(p.op, p.width, noise=p.noise))
            comp = kernels[key]
            bufs = runner.device_buffers(comp, bp.pattern_inputs(p))
            runner.launch(comp, bufs)
            launched = True
            cp.cuda.Device().synchronize()
            runner.check_err(comp, bufs)
            order.append([p.name, True])
        except Exception as exc:  # record and go on
            order.append([None if not launched else p.name, launched])
            print(f"worker {p.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        with open(args.order, "w") as f:
            json.dump(order, f)
    return 0


def values_pass(pats) -> dict:
    """Launch every pattern once (no profiler) and check its output: name -> ok / error."""
    from gpusim.backends.cupy_backend import Runner
    from kernels_ir.kernels import bank_probe as bp

    runner = Runner()
    cp = runner.cp
    out, comps = {}, {}
    for p in pats:
        try:
            key = bp.kernel_key(p)
            if key not in comps:
                comps[key] = runner.compile(bp.probe_kernel(p.op, p.width, noise=p.noise))
            comp = comps[key]
            bufs = runner.device_buffers(comp, bp.pattern_inputs(p))
            runner.launch(comp, bufs)
            cp.cuda.Device().synchronize()
            runner.check_err(comp, bufs)
            ok = bp.check_out(p, p.repeats, cp.asnumpy(bufs["out"]))
            out[p.name] = {"values_ok": bool(ok)}
        except Exception as exc:
            out[p.name] = {"values_ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return out


SASS_OPS = re.compile(r"^(LDS|STS)(\.|$)")


def sass_pass(out_dir: str) -> dict:
    """Compile each probe kernel with nvcc for sm_90, disassemble, count its LDS / STS opcodes;
    ``ok``: every kernel has exactly one LDS/STS of the pattern's op and width in its pattern
    loop (ld: one ``LDS<w>``; st: one ``STS<w>`` and the read-back ``LDS<w>``)."""
    import concurrent.futures as cf
    import tempfile

    from kernels_ir import sass
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels import bank_probe as bp

    nvcc = shutil.which("nvcc")
    cuobjdump = sass.find_cuobjdump()
    res = {"nvcc": nvcc, "cuobjdump": cuobjdump, "kernels": {}, "ok": None}
    if nvcc is None or cuobjdump is None:
        res["error"] = "nvcc or cuobjdump not found: SASS not checked"
        return res
    keys = [(op, w, n) for op in bp.OPS for w in (1, 2, 4) for n in bp.NOISE_KINDS]
    text = []

    def one(key, tmp):
        k = bp.probe_kernel(key[0], key[1], noise=key[2])
        cu = os.path.join(tmp, k.name + ".cu")
        cubin = cu[:-3] + ".cubin"
        with open(cu, "w") as f:
            f.write(generate(k).code)
        p = subprocess.run([nvcc, "-cubin", "-arch=sm_90", cu, "-o", cubin],
                           capture_output=True, text=True, timeout=300)
        if p.returncode:
            return k.name, key, None, p.stderr[-1000:]
        return k.name, key, sass.disassemble(cubin, cuobjdump), ""

    with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(8) as ex:
        done = list(ex.map(lambda key: one(key, tmp), keys))
    ok = True
    for name, key, dis, err in done:
        if dis is None:
            res["kernels"][name] = {"error": err}
            ok = False
            continue
        ins = sass.parse(dis)
        counts: dict = {}
        for i in ins:
            if SASS_OPS.match(i.opcode):
                counts[i.opcode] = counts.get(i.opcode, 0) + 1
        op, width, _ = key
        suffix = {1: "", 2: ".64", 4: ".128"}[width]
        want = ({"LDS" + suffix: 1} if op == "ld" else
                {"STS" + suffix: 1, "LDS" + suffix: 1})
        lds_sts = {k: v for k, v in counts.items()
                   if not (op == "ld" and k == "STS")}   # the ld probes' fill stores
        good = lds_sts == want
        ok &= good
        res["kernels"][name] = {"counts": counts, "expected": want, "ok": good}
        text.append(f"== {name}: {counts} expected {want} {'ok' if good else 'MISMATCH'}")
        text += [f"   {i.text}" for i in ins if SASS_OPS.match(i.opcode) and
                 not (op == "ld" and i.opcode == "STS")]
    res["ok"] = ok
    with open(os.path.join(out_dir, "bank_rule_sass.txt"), "w") as f:
        f.write("\n".join(text) + "\n")
    return res


def available_metrics() -> set[str] | None:
    """Base metric names ``ncu --query-metrics`` lists for this GPU (None if it fails)."""
    try:
        p = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    names = set(re.findall(r"^([a-z0-9]+__[a-z0-9_]+)", p.stdout, flags=re.M))
    return names or None


def _usable(metrics, avail: set[str] | None) -> list[str]:
    """The metrics ``ncu`` offers; all of them when the list could not be read (a list without
    the basic shared-memory counters is taken as unread: its format was not understood)."""
    if avail is None or OP_METRICS["ld"][0].split(".")[0] not in avail:
        return list(metrics)
    return [m for m in metrics if m.split(".")[0] in avail]


def ncu_chunk(out_dir: str, patterns_path: str, start: int, stop: int, metrics, tag: str,
              timeout: float) -> dict:
    """One ncu process over patterns ``start .. stop - 1``: its record and parsed launches."""
    from measurements.exchange_ncu import parse_raw_csv

    order = os.path.join(out_dir, f"order_{tag}_{start}.json")
    log = os.path.join(out_dir, f"ncu_{tag}_{start}.csv")
    cmd = ["ncu", "--csv", "--page", "raw", "--clock-control", "none", "--kernel-name",
           KERNEL_REGEX, "--metrics", ",".join(metrics), "--log-file", log,
           sys.executable, os.path.abspath(__file__), "--worker", "--patterns", patterns_path,
           "--order", order, "--start", str(start), "--stop", str(stop)]
    t0 = time.time()
    rec = {"pass": tag, "start": start, "stop": stop, "command": " ".join(cmd)}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONPATH=os.getcwd()))
        rec.update(returncode=p.returncode, stderr_tail=p.stderr[-2000:])
    except subprocess.TimeoutExpired:
        rec.update(returncode="timeout", stderr_tail="")
    rec["seconds"] = round(time.time() - t0, 2)
    launches, names, raw = [], [], ""
    try:
        with open(log) as f:
            raw = f.read()
        launches = parse_raw_csv(raw)
        with open(order) as f:
            names = [name for name, launched in json.load(f) if launched]
    except (OSError, ValueError) as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["launches"] = len(launches)
    if len(launches) != len(names):
        rec["error"] = (rec.get("error", "") + f" {len(launches)} profiled launches for "
                        f"{len(names)} patterns launched: not used").strip()
        launches = []
    for path in (order, log):
        if os.path.exists(path):
            os.remove(path)
    cases = {}
    for name, launch in zip(names, launches, strict=False):
        m = launch["metrics"]
        cases[name] = {k: m[k] for k in metrics if isinstance(m.get(k), float)}
    return {"record": rec, "cases": cases, "raw": f"# ncu {tag} {start}..{stop}\n" + raw}


def measure(out: str, argv: list, budget_s: float = BUDGET_S, chunk: int = CHUNK,
            limit: int | None = None) -> dict:
    from kernels_ir import banks
    from kernels_ir.kernels import bank_probe as bp
    from measurements.campaign import provenance

    t_start = time.time()
    prov = provenance(argv)
    prov["ncu_version"] = _tool_version(["ncu", "--version"])
    prov["nvcc_version"] = _tool_version(["nvcc", "--version"])
    pats = bp.catalogue()[:limit]
    print(f"{len(pats)} patterns ({time.time() - t_start:.1f}s)", flush=True)
    from gpusim.measurements import kernel_fingerprint

    records, kernels = [], {}
    for p in pats:
        key = bp.kernel_key(p)
        if key not in kernels:
            k = bp.probe_kernel(p.op, p.width, noise=p.noise)
            kernels[key] = (k.name, kernel_fingerprint(k))
        d = p.to_dict()
        w, a = p.words_array, p.active_array
        wf, cf = banks.cost(w, p.width, a, p.op)
        d.update(kernel=kernels[key][0], repeats=p.repeats,
                 model={"wavefronts": int(wf), "conflicts": int(cf)})
        records.append(d)
    res = {"format_version": FORMAT_VERSION, "provenance": prov,
           "constants": {"ncu_repeats": bp.NCU_REPEATS, "noise_repeats": bp.NOISE_REPEATS,
                         "smem_words": bp.SMEM_WORDS, "noise_warps": bp.NOISE_WARPS,
                         "noise_iters": bp.NOISE_ITERS},
           "kernels": dict(kernels.values()), "patterns": records, "ncu_runs": []}
    path = os.path.join(out, "bank_rule.json")

    def save():
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=float)

    save()
    t0 = time.time()
    vals = values_pass(pats)
    for d in records:
        d.update(vals.get(d["name"], {"values_ok": None}))
    bad = [n for n, v in vals.items() if not v["values_ok"]]
    print(f"values: {len(pats) - len(bad)}/{len(pats)} ok ({time.time() - t0:.1f}s)"
          + (f"; wrong: {bad[:5]}" if bad else ""), flush=True)
    t0 = time.time()
    try:
        res["sass"] = sass_pass(out)
    except Exception as exc:
        res["sass"] = {"ok": None, "error": f"{type(exc).__name__}: {exc}"}
    print(f"SASS: ok={res['sass'].get('ok')} {res['sass'].get('error', '')} "
          f"({time.time() - t0:.1f}s)", flush=True)
    save()
    t0 = time.time()
    avail = available_metrics()
    res["metrics"] = {"hardware": _usable(HW_METRICS, avail),
                      "sass": _usable(SASS_METRICS, avail),
                      "queried": avail is not None}
    print(f"metrics: {len(res['metrics']['hardware'])} hardware, {len(res['metrics']['sass'])} "
          f"SASS-patched ({time.time() - t0:.1f}s)", flush=True)
    raw_parts: list[str] = []
    per_launch = [None]

    def one(tag, key, start, stop, metrics):
        left = budget_s - (time.time() - t_start)
        est = (per_launch[0] or 1.0) * (stop - start) + 10
        if est > left:
            res["ncu_runs"].append({"pass": tag, "start": start, "stop": stop,
                                    "skipped": f"time budget: {left:.0f}s left, about "
                                               f"{est:.0f}s needed"})
            print(f"ncu {tag} {start}..{stop}: skipped (budget)", flush=True)
            return None
        got = ncu_chunk(out, path, start, stop, metrics, tag, timeout=max(60, left + 30))
        rec = got["record"]
        res["ncu_runs"].append(rec)
        raw_parts.append(got["raw"])
        if tag == "hardware" and rec["launches"]:
            per_launch[0] = rec["seconds"] / rec["launches"]
        byname = {d["name"]: d for d in records}
        for name, m in got["cases"].items():
            byname[name][key] = m
        print(f"ncu {tag} {start}..{stop}: {rec['launches']} launches, {rec['seconds']:.1f}s, "
              f"rc {rec.get('returncode')}" + (f", {rec['error']}" if rec.get("error") else ""),
              flush=True)
        save()
        return rec["launches"]

    for tag, key in (("hardware", "ncu"), ("sass", "ncu_sass")):
        metrics = res["metrics"][tag]
        for start in range(0, len(pats), chunk):
            if not metrics:
                break
            stop = min(len(pats), start + chunk)
            n = one(tag, key, start, stop, metrics)
            if n == 0 and tag == "hardware" and metrics != list(CORE_METRICS):
                # a metric this ncu does not know fails the whole run: fall back to the
                # campaign's counters for this chunk and the rest
                metrics = res["metrics"][tag] = list(CORE_METRICS)
                n = one(tag, key, start, stop, metrics)
            if n == 0 and start == 0:
                print(f"ncu {tag}: the first chunk failed; pass abandoned", flush=True)
                break
    with open(os.path.join(out, "bank_rule_ncu_raw.csv"), "w") as f:
        f.write("\n".join(raw_parts))
    res["seconds"] = round(time.time() - t_start, 1)
    save()
    print(f"done in {res['seconds']}s -> {path}", flush=True)
    try:
        report(res)
    except Exception as exc:  # the record stands without the summary
        print(f"analysis failed: {type(exc).__name__}: {exc}")
    return res


# ============================================================================ the analysis side
#
# Candidate rules for ONE warp instruction: ``words`` (32,) first words, ``active`` (32,) bool,
# ``width`` in words. Wavefront rules give the data-pipe wavefronts; ideal rules the count the
# conflict counter subtracts (conflicts = wavefronts - ideal).


def _words_of(words, active, width, lanes) -> list[np.ndarray]:
    """The distinct words each lane touches, for ``lanes`` (indices), active ones only."""
    return [words[lane] + np.arange(width) for lane in lanes if active[lane]]


def _max_distinct(ws: list[np.ndarray]) -> int:
    """Busiest bank's distinct words over the given lanes' words (0 when none)."""
    if not ws:
        return 0
    u = np.unique(np.concatenate(ws))
    return int(np.bincount(u % 32, minlength=32).max())


def _phases(width: int, lanes_per: int) -> list[range]:
    return [range(s, s + lanes_per) for s in range(0, 32, lanes_per)]


def wf_lane_phase(words, active, width) -> int:
    """``kernels_ir.banks``: ``w`` phases of ``32 / w`` lanes (quarter warps for 128 bits)."""
    return sum(_max_distinct(_words_of(words, active, width, ph))
               for ph in _phases(width, 32 // width))


def wf_half_warp(words, active, width) -> int:
    """Phases of twice as many lanes (half warps for 128 bits, the whole warp for 64 bits)."""
    return sum(_max_distinct(_words_of(words, active, width, ph))
               for ph in _phases(width, min(32, 64 // width)))


def wf_warp(words, active, width) -> int:
    """No phases: the busiest bank's distinct words over the whole warp."""
    return _max_distinct(_words_of(words, active, width, range(32)))


def _in_order(words, active, width, lanes) -> int:
    n, held = 0, {}
    for lane in lanes:
        if not active[lane]:
            continue
        ws = words[lane] + np.arange(width)
        if n == 0 or any(held.get(int(x) % 32, int(x)) != int(x) for x in ws):
            n += 1
            held = {}
        for x in ws:
            held[int(x) % 32] = int(x)
    return n


def wf_in_order(words, active, width) -> int:
    """Lanes in order; a new wavefront whenever a lane needs a bank the current one holds with
    another word (phases formed by address, in lane order)."""
    return _in_order(words, active, width, range(32))


def wf_in_order_phase(words, active, width) -> int:
    """Lane phases as ``lane_phase``, each cut in lane order as ``in_order``."""
    return sum(_in_order(words, active, width, ph) for ph in _phases(width, 32 // width))


def wf_addr_phase(words, active, width) -> int:
    """Phases of ``32 / w`` active lanes taken in address order instead of lane order."""
    lanes = sorted(np.flatnonzero(active), key=lambda lane: (int(words[lane]), int(lane)))
    per = 32 // width
    return sum(_max_distinct(_words_of(words, active, width, lanes[i:i + per]))
               for i in range(0, len(lanes), per))


def wf_pair_pack(words, active, width) -> int:
    """Lane phases, but two neighbouring phases (0+1, 2+3) that need one wavefront together
    share it (the cc 7.x "return packing" of lane pairs with one address, generalised)."""
    phases = _phases(width, 32 // width)
    if width == 1:
        return wf_lane_phase(words, active, width)
    total = 0
    for p in range(0, len(phases), 2):
        a = _words_of(words, active, width, phases[p])
        b = _words_of(words, active, width, phases[p + 1])
        if a and b and _max_distinct(a + b) == 1:
            total += 1
        else:
            total += _max_distinct(a) + _max_distinct(b)
    return total


def _return_packed(words, active, width) -> bool:
    """Every lane pair ``(l, l ^ 1)``, or every pair ``(l, l ^ 2)``, whose lanes are both active
    reads one address (64/128 bits only)."""
    return width > 1 and any(
        all(not (active[lane] and active[lane ^ x]) or words[lane] == words[lane ^ x]
            for lane in range(32)) for x in (1, 2))


def _packed_phases(words, active, width) -> list[range]:
    lanes = 64 // width if _return_packed(words, active, width) else 32 // width
    return _phases(width, lanes)


def wf_return_packed(words, active, width) -> int:
    """Lane phases, but a return-packed access (:func:`_return_packed`) has phases of twice
    the lanes: the whole warp for 64 bits, half warps for 128 bits (the cc 7.x rule of NVIDIA's
    developer forum thread 77228, "4 requests per LDS.128 reduce to 2")."""
    return sum(_max_distinct(_words_of(words, active, width, ph))
               for ph in _packed_phases(words, active, width))


def ideal_active_phases(words, active, width) -> int:
    """Lane phases with an active lane (``kernels_ir.banks`` for stores)."""
    return sum(bool(active[list(ph)].any()) for ph in _phases(width, 32 // width))


def ideal_packed_phases(words, active, width) -> int:
    """Phases of :func:`wf_return_packed` with an active lane (``kernels_ir.banks`` for
    loads)."""
    return sum(bool(active[list(ph)].any()) for ph in _packed_phases(words, active, width))


def ideal_width(words, active, width) -> int:
    return width


def ideal_data(words, active, width) -> int:
    """128 bytes a wavefront: distinct words / 32, rounded up."""
    ws = _words_of(words, active, width, range(32))
    return -(-int(np.unique(np.concatenate(ws)).size) // 32) if ws else 0


def ideal_lanes(words, active, width) -> int:
    """Bytes the active lanes move / 128, rounded up (no broadcast saving)."""
    return -(-int(np.asarray(active).sum()) * width // 32)


def ideal_one(words, active, width) -> int:
    return 1


WAVEFRONT_RULES: dict[str, Callable] = {
    "lane_phase": wf_lane_phase, "half_warp": wf_half_warp, "warp": wf_warp,
    "in_order": wf_in_order, "in_order_phase": wf_in_order_phase, "addr_phase": wf_addr_phase,
    "pair_pack": wf_pair_pack, "return_packed": wf_return_packed}
IDEAL_RULES: dict[str, Callable] = {
    "active_phases": ideal_active_phases, "packed_phases": ideal_packed_phases,
    "width": ideal_width, "data": ideal_data, "lanes": ideal_lanes, "one": ideal_one}
# what kernels_ir.banks computes, per op (loads are return-packed, stores never), and the rule
# it computed before this record (lane phases for every op)
MODEL = {"ld": ("return_packed", "packed_phases"), "st": ("lane_phase", "active_phases")}
BEFORE = ("lane_phase", "active_phases")
# usable patterns of measurements/h100/bank_rule.json that kernels_ir.banks does not match
KNOWN_EXCEPTIONS: tuple[str, ...] = ()


def measured(p: dict, key: str = "ncu") -> dict | None:
    """Per-instruction values of one pattern record: wavefronts, conflicts, instructions,
    bank accesses (reads for ld, writes for st), arbitration conflicts; None without data.
    ``exact``: every counter was a multiple of the repeats."""
    m = p.get(key)
    if not m:
        return None
    wf_k, cf_k, in_k, bank_k = OP_METRICS[p["op"]]
    if wf_k not in m or cf_k not in m or in_k not in m:
        return None
    r = int(p["repeats"])
    vals = {"wavefronts": m[wf_k], "conflicts": m[cf_k], "instructions": m[in_k],
            "bank_accesses": m.get(bank_k),
            "arbitration": m.get("l1tex__data_bank_conflicts_type_arbitration.sum")}
    out = {k: (None if v is None else v / r) for k, v in vals.items()}
    out["exact"] = all(float(vals[k]) % r == 0
                       for k in ("wavefronts", "conflicts", "instructions"))
    return out


def sass_measured(p: dict) -> dict | None:
    """Per-instruction values of Nsight's SASS-patched counters (its own wavefront model, from
    the addresses it instruments): ``wavefronts`` and ``ideal`` of the pattern's op."""
    m = p.get("ncu_sass")
    wk = f"smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_{p['op']}.sum"
    ik = f"smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared_op_{p['op']}_ideal.sum"
    if not m or wk not in m:
        return None
    r = int(p["repeats"])
    return {"wavefronts": m[wk] / r, "ideal": m[ik] / r if ik in m else None}


def predict(p: dict) -> dict:
    """Every candidate's wavefronts and ideal for a pattern record, and ``kernels_ir.banks``'
    ``(wavefronts, conflicts)`` (``banks``)."""
    from kernels_ir import banks

    words = np.asarray(p["words"], dtype=np.int64)
    active = np.asarray(p["active"], dtype=bool)
    w = int(p["width"])
    wf, cf = banks.cost(words, w, active, p["op"])
    return {"wf": {k: f(words, active, w) for k, f in WAVEFRONT_RULES.items()},
            "ideal": {k: f(words, active, w) for k, f in IDEAL_RULES.items()},
            "banks": (int(wf), int(cf))}


def banks_misses(a: dict) -> list[str]:
    """Names of the usable patterns of :func:`analyse`'s result whose wavefronts or conflicts
    ``kernels_ir.banks`` does not reproduce."""
    return [p["name"] for p, m, pr in a["usable"]
            if pr["banks"] != (m["wavefronts"], m["conflicts"])]


def analyse(record: dict) -> dict:
    """Compare every pattern with Nsight data against the candidates (see the module doc).

    Returns ``{"groups": {(op, width): {...}}, "usable": [...], "excluded": [...],
    "noise": [...], "kernel": [...]}``; a group holds per rule the number of exact matches of
    the wavefront counter (``wf``), of Nsight's own ideal (``ideal``: wavefronts - conflicts)
    and of the conflict counter (``conflicts``, per wavefront rule x ideal rule), and the
    rules that match every pattern of the group."""
    usable, excluded, noise, kernel = [], [], [], []
    for p in record["patterns"]:
        meas = measured(p)
        if meas is None:
            continue
        if p.get("noise", "none") != "none":
            noise.append((p, meas))
            continue
        if meas["instructions"] != 1 or not meas["exact"] or p.get("values_ok") is False:
            why = ("instructions per access " + f"{meas['instructions']:g}"
                   if meas["instructions"] != 1 else
                   "a counter is not a multiple of the repeats" if not meas["exact"]
                   else "wrong values")
            excluded.append((p, meas, why))
            continue
        usable.append((p, meas, predict(p)))
        if p["family"] == "kernel":
            kernel.append(usable[-1])
    groups: dict = {}
    for p, meas, pred in usable:
        g = groups.setdefault((p["op"], int(p["width"])), {
            "n": 0, "wf": dict.fromkeys(WAVEFRONT_RULES, 0),
            "ideal": dict.fromkeys(IDEAL_RULES, 0),
            "conflicts": {(a, b): 0 for a in WAVEFRONT_RULES for b in IDEAL_RULES},
            "first_miss": {}, "banks_wf": 0, "banks_conflicts": 0})
        g["n"] += 1
        g["banks_wf"] += pred["banks"][0] == meas["wavefronts"]
        g["banks_conflicts"] += pred["banks"][1] == meas["conflicts"]
        for a, v in pred["wf"].items():
            g["wf"][a] += v == meas["wavefronts"]
        for b, v in pred["ideal"].items():
            g["ideal"][b] += v == meas["wavefronts"] - meas["conflicts"]
        for (a, b) in g["conflicts"]:
            hit = pred["wf"][a] - pred["ideal"][b] == meas["conflicts"]
            g["conflicts"][(a, b)] += hit
            if not hit and (a, b) not in g["first_miss"]:
                g["first_miss"][(a, b)] = p["name"]
    for g in groups.values():
        g["wf_all"] = [a for a, v in g["wf"].items() if v == g["n"]]
        g["ideal_all"] = [b for b, v in g["ideal"].items() if v == g["n"]]
        g["conflicts_all"] = [k for k, v in g["conflicts"].items() if v == g["n"]]
    return {"groups": groups, "usable": usable, "excluded": excluded, "noise": noise,
            "kernel": kernel}


def _best(d: dict) -> tuple:
    k = max(d, key=d.get)
    return k, d[k]


def report(record: dict, show: int = 8) -> dict:
    """Print :func:`analyse`'s findings; returns its result."""
    a = analyse(record)
    n_total = sum(1 for p in record["patterns"] if measured(p) is not None)
    print(f"\n{n_total} patterns with Nsight data: {len(a['usable'])} usable, "
          f"{len(a['excluded'])} excluded, {len(a['noise'])} noise runs")
    for p, _meas, why in a["excluded"][:show]:
        print(f"  excluded {p['name']}: {why}")
    n = len(a["usable"])
    model_w = sum(m["wavefronts"] == pr["banks"][0] for _, m, pr in a["usable"])
    model_c = sum(m["conflicts"] == pr["banks"][1] for _, m, pr in a["usable"])
    before_w = sum(m["wavefronts"] == pr["wf"][BEFORE[0]] for _, m, pr in a["usable"])
    before_c = sum(m["conflicts"] == pr["wf"][BEFORE[0]] - pr["ideal"][BEFORE[1]]
                   for _, m, pr in a["usable"])
    print(f"kernels_ir.banks: conflicts match {model_c}/{n}, wavefronts {model_w}/{n} "
          f"(lane phases for every op, the rule before this record: conflicts {before_c}/{n}, "
          f"wavefronts {before_w}/{n})")
    misses = banks_misses(a)
    print("  patterns kernels_ir.banks does not match: " + (", ".join(misses) or "none")
          + f" (known exceptions: {', '.join(KNOWN_EXCEPTIONS) or 'none'})")
    for (op, width), g in sorted(a["groups"].items()):
        print(f"\n== {op.upper()} {32 * width}-bit: {g['n']} patterns")
        print("  wavefront counter:  " + ", ".join(f"{k} {v}" for k, v in g["wf"].items()))
        print("  Nsight ideal (wf - conflicts):  "
              + ", ".join(f"{k} {v}" for k, v in g["ideal"].items()))
        if g["conflicts_all"]:
            print("  conflict counter matched by EVERY pattern: "
                  + "; ".join(f"{a_} - {b_}" for a_, b_ in g["conflicts_all"]))
        else:
            (a_, b_), v = _best(g["conflicts"])
            print(f"  conflict counter: no rule matches all; closest {a_} - {b_} ({v}/{g['n']}, "
                  f"first miss {g['first_miss'].get((a_, b_))})")
        best, nbest = _best(g["wf"])
        print("  wavefront counter matched by every pattern: "
              + (", ".join(g["wf_all"]) or f"none (closest {best}: {nbest})"))
        print("  Nsight ideal matched by every pattern: " + (", ".join(g["ideal_all"]) or "none"))
        print(f"  kernels_ir.banks ({' - '.join(MODEL[op])}): wavefronts "
              f"{g['banks_wf']}/{g['n']}, conflicts {g['banks_conflicts']}/{g['n']}")
        rows = [(p, m, pr) for p, m, pr in a["usable"]
                if (p["op"], int(p["width"])) == (op, width)]
        for p, m, pr in [r for r in rows if r[2]["banks"] != (r[1]["wavefronts"],
                                                               r[1]["conflicts"])][:show]:
            print(f"    model miss {p['name']}: Nsight wf {m['wavefronts']:g} conflicts "
                  f"{m['conflicts']:g}; banks wf {pr['banks'][0]} conflicts {pr['banks'][1]}")
        changed = [(p, m, pr) for p, m, pr in rows
                   if (pr["wf"][BEFORE[0]], pr["wf"][BEFORE[0]] - pr["ideal"][BEFORE[1]])
                   != pr["banks"]]
        for p, m, pr in changed[:show]:
            print(f"    lane phases miss, banks matches: {p['name']}: Nsight wf "
                  f"{m['wavefronts']:g} conflicts {m['conflicts']:g}; lane phases wf "
                  f"{pr['wf'][BEFORE[0]]} conflicts "
                  f"{pr['wf'][BEFORE[0]] - pr['ideal'][BEFORE[1]]}"
                  if pr["banks"] == (m["wavefronts"], m["conflicts"]) else
                  f"    lane phases and banks differ: {p['name']}")
        if len(changed) > show:
            print(f"    ... and {len(changed) - show} more where lane phases and banks differ")
    if a["kernel"]:
        print("\n== the kernels' own accesses (Nsight conflicts vs kernels_ir.banks)")
        by: dict = {}
        for p, m, pr in a["kernel"]:
            src = re.sub(r"_(w\d+.*|split_.*)$", "", p["name"])
            e = by.setdefault(src, [0, 0, 0])
            e[0] += 1
            e[1] += m["conflicts"]
            e[2] += pr["banks"][1]
        for src, (n, cm, cb) in sorted(by.items()):
            print(f"  {src:40s} {n:3d} patterns: Nsight {cm:7g} conflicts, model {cb:7d}")
    sass = [(p, m, predict(p), measured(p)) for p in record["patterns"]
            if p.get("noise", "none") == "none" and (m := sass_measured(p)) is not None]
    if sass:
        hw = sum(h is not None and m["wavefronts"] == h["wavefronts"] for _, m, _, h in sass)
        print(f"\n== Nsight's SASS-patched wavefronts ({len(sass)} patterns): equal to the "
              f"hardware counter in {hw}")
        for k in WAVEFRONT_RULES:
            n = sum(m["wavefronts"] == pr["wf"][k] for _, m, pr, _ in sass)
            print(f"  {k:16s} wavefronts {n}/{len(sass)}")
        for k in IDEAL_RULES:
            n = sum(m["ideal"] == pr["ideal"][k] for _, m, pr, _ in sass)
            print(f"  {k:16s} ideal      {n}/{len(sass)}")
    if a["noise"]:
        print("\n== noise runs (per pattern instruction; contiguous, conflict-free by any rule)")
        for p, m in a["noise"]:
            print(f"  {p['name']:32s} wf {m['wavefronts']:7.3f} conflicts {m['conflicts']:7.3f} "
                  f"instr {m['instructions']:5.3f} arbitration/instr "
                  f"{m['arbitration'] if m['arbitration'] is not None else float('nan'):7.3f}")
    return a


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for the GPU record")
    ap.add_argument("--analyse", metavar="FILE", help="analyse a recorded bank_rule.json")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S)
    ap.add_argument("--chunk", type=int, default=CHUNK)
    ap.add_argument("--limit", type=int, default=None, help="only the first N patterns")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--patterns", help=argparse.SUPPRESS)
    ap.add_argument("--order", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)
    if a.analyse:
        from kernels_ir.errors import InputError

        try:
            from measurements.probe import read_record

            record = read_record(a.analyse)       # plain or gzipped
        except (OSError, ValueError) as exc:
            raise InputError(f"--analyse {a.analyse}: cannot read a JSON record ({exc})") from None
        if not isinstance(record, dict) or "patterns" not in record:
            raise InputError(f"--analyse {a.analyse}: no 'patterns' list; not a bank_rule.json")
        report(record)
        return 0
    if not a.out:
        ap.error("--out DIR (on a GPU) or --analyse FILE")
    os.makedirs(a.out, exist_ok=True)
    measure(a.out, ["measurements/bank_rule.py"] + argv, a.budget_s, a.chunk, a.limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
