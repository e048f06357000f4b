"""Every SM gathers the same small table at once, with L1 cold: how long, against the table's
size. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/cold_gather.py --out $OUT      # GPU: cold_gather.json
    python measurements/cold_gather.py --simulate measurements/h200/cold_gather.json

Why: on the H200 draws the simulated CSR kernel is 15-40% slow at batch 2-4 with long rows
(``h200/csr_trace_layers.json.xz``: its first chunk's gathers of h take 1.1-2.4 times the GPU's,
its later chunks 1.3-2 times). In the engine those gathers wait at the L2 contention groups
(``l2_group_*`` cycles a request; the H100's map of 40 groups then, the H200's own 47 since
``h200/l2_slice_map.json``): h's lines sat in about half of the 40 groups, up to 8 lines in one
(the measured map puts pairs of lines in one group), and every SM asks for every sector of h
at the start of the step, so one group's queue holds
the step back by up to 3000 cycles. With every line in its own group in turn (a balanced map,
simulator only) the same layers come out 7-31% fast. This probe takes the gathers alone.

The kernel (IR): ``CTAS_PER_SM`` x 132 CTAs of 256 threads; thread ``t`` loads its
:data:`GATHERS` indices (one coalesced load each, as the CSR kernel's columns), then gathers
16 bytes of the table at each (the CSR kernel's batch-4 gather of h: one sector a lane, at a
random 16-byte chunk of a random line), adds them and stores the sum. Tables of
:data:`TABLE_LINES` 128-byte lines (h of hidden 256 to 8192 at batch 4 holds 32 to 1024). The
GPU's CUDA text is stamped (the IR has no clock): lane 0 of every warp writes ``clock64`` and
``%globaltimer`` at the kernel's start and after its sum is ready. Summaries: the warps' median
and 90th percentile of end - start (cycles) and the span of the launch on the global timer
(first start to last end, ns); the simulator gives the warps' first issue and its store's issue.
:data:`CHAINED`: the 64-, 256- and 1024-line tables with each warp's gathers one after another;
:data:`FEW_WARPS`: the 64- and 1024-line tables with 1 or 4 warps an SM instead of 16;
:data:`RELAXED`: gathers that bypass L1, as the contention groups were measured.
Each table is launched 9 times (L1 cold at every launch: the launch starts with an invalidated
L1; L2 warm from the launch before). :data:`PLACED`: the 64-, 256- and 1024-line tables again,
each starting 8-64 lines into a larger buffer (the same gathers, shifted), so their lines fall
into other L2 contention groups.

``COLD_GATHER_MAPPED=1 ... --out $OUT`` (record ``cold_gather_mapped.json``): the table at a
known line of the GPU's measured contention-group map instead (``gpusim/specs/<gpu>_l2_groups
.json``, measured on a 2 MiB-aligned region as here: the low 21 address bits are physical ones;
the map's higher bits matter too, its second 2 MiB not being a relabelling of the first, and
this region is not pair-checked first, so the GPU's spans ordered as the map orders the places
are the check): :data:`MAPPED`'s tables at :data:`PLACEMENTS` (:func:`map_places`: where the
table's busiest group holds the fewest lines, a typical place, the most), and the simulator's
table at the same line of the same map. Without it the GPU's placement is unknown (``PLACED``).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS_PER_SM, SMS, THREADS = 2, 132, 256
GATHERS = 4
TABLE_LINES = (32, 64, 128, 256, 512, 1024)
# the tables of 64, 256 and 1024 lines again, placed PADS lines further into their buffer
PADS = (8, 16, 24, 40, 64)
PLACED = tuple((lines, pad) for lines in (64, 256, 1024) for pad in PADS)
# the same tables with each warp's gathers one after another (``chain``): a gather's index
# waits for the gather before it, so one is in flight a warp and the order in which the warps
# of a sub-partition issue cannot change which requests leave first
CHAINED = (64, 256, 1024)
# the 64- and 1024-line tables with 1 or 4 warps an SM (one CTA of 32 or 128 threads on each
# of the 132 SMs) instead of 16: the same gathers a warp, fewer warps behind each other
FEW_WARPS = tuple((lines, w) for lines in (64, 1024) for w in (1, 4))
# the tables of 64 to 1024 lines gathered with L2-coherent loads (``ld.relaxed.gpu``: L1
# bypassed, as the L2 contention groups were measured), 16 warps an SM, and at 64 lines 1 or 4
RELAXED = ((64, THREADS, CTAS_PER_SM * SMS), (256, THREADS, CTAS_PER_SM * SMS),
           (1024, THREADS, CTAS_PER_SM * SMS), (64, 32, SMS), (64, 128, SMS),
           (128, THREADS, CTAS_PER_SM * SMS), (512, THREADS, CTAS_PER_SM * SMS))
_FULL = (THREADS, CTAS_PER_SM * SMS)
# every case of a call: (lines, pad, chain, threads, CTAs)
CASES = (tuple((x, 0, False) + _FULL for x in TABLE_LINES)
         + tuple((x, p, False) + _FULL for x, p in PLACED)
         + tuple((x, 0, True) + _FULL for x in CHAINED)
         + tuple((x, 0, False, 32 * w, SMS) for x, w in FEW_WARPS)
         + tuple((x, 0, "relaxed", t, n) for x, t, n in RELAXED))
# the tables at a known line of the measured map (COLD_GATHER_MAPPED): (lines, chain, threads,
# CTAs), each at the PLACEMENTS of map_places
MAPPED = ((64, "relaxed") + _FULL, (256, "relaxed") + _FULL, (1024, "relaxed") + _FULL,
          (64, "relaxed", 128, SMS), (64, False) + _FULL, (256, False) + _FULL,
          (1024, False) + _FULL)
PLACEMENTS = ("even", "typical", "uneven")
MAP_LINES = 16384       # places are chosen in the map's first 2 MiB
FIELDS = ("c0", "g0", "c1", "g1")
SEED = 11


def _name(lines: int, pad: int = 0, chain: bool | str = False, threads: int = THREADS,
          ctas: int = CTAS_PER_SM * SMS) -> str:
    few = f"_w{threads * ctas // SMS // 32}" if threads != THREADS else ""
    kind = {False: "", True: "chain_", "relaxed": "rx_"}[chain]
    return f"cold_gather_{kind}{lines}" + (f"_p{pad}" if pad else "") + few


def map_places(lines: int, groups) -> dict:
    """Lines of the map ``groups`` (one group per line) at which a ``lines``-line table starts:
    ``even`` where its busiest group holds the fewest of its lines (the lowest such start),
    ``uneven`` the most (the highest such start), ``typical`` the median of the starts sorted by
    that count (stable). Starts are whole 512-byte units (4 lines) in the map's first
    :data:`MAP_LINES` lines."""
    import numpy as np

    g = np.asarray(groups)
    starts = np.arange(0, MAP_LINES - lines + 1, 4)
    busiest = np.array([np.bincount(g[a:a + lines]).max() for a in starts])
    order = np.argsort(busiest, kind="stable")
    return {"even": int(starts[order[0]]), "typical": int(starts[order[len(order) // 2]]),
            "uneven": int(starts[order[-1]]),
            "busiest": {k: int(busiest[order[i]]) for k, i in
                        (("even", 0), ("typical", len(order) // 2), ("uneven", -1))}}


def _map_name(lines: int, chain, threads: int, ctas: int, place: str) -> str:
    return _name(lines, 0, chain, threads, ctas).replace("cold_gather_",
                                                         f"cold_gather_map_{place}_", 1)


def sim_pad(lines: int, at: int, chain=False, threads: int = THREADS,
            ctas: int = CTAS_PER_SM * SMS, map_lines: int = 32768) -> int:
    """The ``pad`` that puts the simulator's table at line ``at`` of its contention-group map
    (the engine reads the map at line ``% map_lines``), from the table buffer's first word in
    the engine's own global space (256-byte aligned, so a whole line)."""
    from gpusim.engine.memory import global_space

    mb = cold_gather(lines, ctas=ctas, chain=chain, threads=threads)
    return (at - global_space(mb.kernel, mb.inputs).bases["tab"] // 32) % map_lines


def cold_gather(lines: int, ctas: int = CTAS_PER_SM * SMS, seed: int = SEED, pad: int = 0,
                chain: bool | str = False, threads: int = THREADS):
    """The probe's Microbench for a table of ``lines`` lines (values checked), starting
    ``pad`` lines into its buffer (the same random gathers, shifted); ``chain``: each gather's
    index adds the sign bit of the value gathered before it (0: the table holds no negative
    value, which the compiler cannot know), so a warp's gathers run one at a time, or
    ``"relaxed"``: the gathers are L2-coherent loads that bypass L1 (``ld.relaxed.gpu``);
    ``threads`` a CTA (a multiple of 32; the name then ends in ``_w<warps an SM>`` for 132 CTAs)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 1:
        raise InputError(f"lines={lines!r}: accepted whole numbers >= 1")
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise InputError(f"pad={pad!r}: accepted whole numbers >= 0")
    if chain not in (False, True, "relaxed"):
        raise InputError(f"chain={chain!r}: accepted False, True or 'relaxed'")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 32 <= threads <= 1024 \
            or threads % 32:
        raise InputError(f"threads={threads!r}: accepted multiples of 32 from 32 to 1024")
    n = ctas * threads
    name = _name(lines, pad, chain, threads, ctas)
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench="cold_gather", lines=lines,
                pad=pad, chain=str(chain))
    g_idx = b.global_buffer("idx", I32, n * GATHERS)
    g_tab = b.global_buffer("tab", F32, (pad + lines) * 32)
    g_out = b.global_buffer("out", F32, n, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    ix = [b.ldg(g_idx, gt, offset=k * n, dst=b.reg(I32, f"ix{k}")) for k in range(GATHERS)]
    vs = []
    load = b.ldg_volatile if chain == "relaxed" else b.ldg
    for k in range(GATHERS):
        if chain is True and k:
            sign = b.shr(b.bitcast(vs[-1][0], I32, dst=b.reg(I32, f"sb{k}")), 31,
                         dst=b.reg(I32, f"sg{k}"))
            b.iadd(ix[k], sign, dst=ix[k])
        vs.append(load(g_tab, ix[k], width=4, dst=b.reg(F32, f"v{k}", 4)))
    acc = b.mov(0.0, F32, dst=b.reg(F32, "acc"))
    for k in range(GATHERS):
        for x in range(4):
            b.fadd(acc, vs[k][x], dst=acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    rng = np.random.default_rng(seed + lines)
    idx = (rng.integers(0, lines, (GATHERS, n)) * 32 + rng.integers(0, 8, (GATHERS, n)) * 4
           + pad * 32)
    tab = rng.random((pad + lines) * 32, dtype=np.float32)
    want = np.zeros(n, np.float32)
    for k in range(GATHERS):
        for x in range(4):
            want = want + tab[idx[k] + x]

    def check(g) -> bool:
        return bool(np.allclose(np.asarray(g["out"]), want, rtol=1e-5))

    return Microbench(name, kernel,
                      {"idx": idx.astype(np.int32).reshape(-1), "tab": tab}, 1,
                      f"one launch: every thread gathers {GATHERS} x 16 bytes of a "
                      f"{lines}-line table", {"lines": lines, "ctas": ctas, "pad": pad,
                                              "chain": chain, "threads": threads}, check)


def instrumented_code(code: str) -> str:
    """The generated CUDA with the stamps (``g_ts``: 4 ints per warp). Raises if the code does
    not have the expected shape."""
    if code.count("{\n") < 1 or "g_out[" not in code:
        raise AssertionError("kernel body not found")
    i = code.index("{\n", code.index("__global__")) + 2
    stamp0 = ("    const unsigned int ts_i = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5))"
              " * 4u;\n    const bool ts_w = (threadIdx.x & 31u) == 0u;\n"
              "    if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
              " : \"=l\"(g)); g_ts[ts_i + 0] = (int)clock64(); g_ts[ts_i + 1] = (int)g; }\n")
    code = code[:i] + stamp0 + code[i:]
    st = code.rfind("g_out[")
    line_start = code.rfind("\n", 0, st) + 1
    stamp1 = ("    { int ts_d; asm volatile(\"mov.b32 %0, %1;\" : \"=r\"(ts_d) : \"f\"(r_acc));"
              " if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
              " : \"=l\"(g)); g_ts[ts_i + 2] = (int)clock64(); g_ts[ts_i + 3] = (int)g; } }\n")
    code = code[:line_start] + stamp1 + code[line_start:]
    if "int* g_ts" not in code:
        raise AssertionError("the ts buffer is not a parameter")
    return code


def _with_ts(kernel):
    from measurements.probe import with_stamp_buffer
    return with_stamp_buffer(kernel, kernel.grid * (kernel.block // 32) * len(FIELDS))


def gpu_summary(ts) -> dict:
    """Medians of the warps' end - start (cycles), their 90th percentile, and the launch's
    span on the global timer (ns)."""
    import numpy as np

    from measurements.probe import wrap32
    t = ts.astype(np.int64).reshape(-1, len(FIELDS))
    dc = wrap32(t[:, 2] - t[:, 0])
    g0 = t[:, 1] - t[:, 1].min()
    g1 = wrap32(t[:, 3] - t[:, 1]) + g0
    return {"warp_cycles_median": float(np.median(dc)),
            "warp_cycles_p90": float(np.percentile(dc, 90)),
            "span_ns": float(g1.max() - g0.min()),
            "start_spread_ns": float(np.percentile(g0, 90) - np.percentile(g0, 10))}


def _timed_runs(runner, mb, key: str, move=None) -> tuple[list, dict]:
    """Nine checked launches of ``mb`` with the stamps (L1 cold at each, L2 warm from the one
    before): every run's launch time and :func:`gpu_summary`, and their medians. ``move(bufs)``
    changes the device buffers before the first launch (a table placed elsewhere)."""
    import numpy as np

    from gpusim.backends.cupy_backend import _time_launch
    from kernels_ir.errors import InputError
    from measurements.probe import compile_instrumented

    cp = runner.cp
    kern = _with_ts(mb.kernel)
    comp = compile_instrumented(runner, kern, instrumented_code)
    bufs = runner.device_buffers(comp, dict(mb.inputs,
                                            ts=np.zeros(kern.buffers[-1].size, np.int32)))
    if move is not None:
        move(bufs)
    runs = []
    for _ in range(9):
        s = _time_launch(cp, runner, comp, bufs, lambda bb: None)
        got = {n: cp.asnumpy(v) for n, v in bufs.items()}
        if not mb.verify_result(got):
            raise InputError(f"{key}: wrong result")
        runs.append({"launch_s": s, **gpu_summary(got["ts"])})
    return runs, {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def _record(out: str, argv: list, filename: str, cases) -> dict:
    """Time every case that ``cases(runner, rec)`` yields as ``(key, fields, build)``
    (``build()`` gives the checked Microbench and a ``move`` for :func:`_timed_runs`, or None);
    a case that fails is recorded with its error and the others go on. Writes
    ``out/filename``."""
    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, "fields": list(FIELDS),
           "spec": spec_name_for_gpu(prov["gpu_name"]), "results": {}}
    t0 = time.time()
    for key, fields, build in cases(runner, rec):
        try:
            mb, move = build()
            runs, summ = _timed_runs(runner, mb, key, move)
            rec["results"][key] = {"status": "ok", **fields, "runs": runs, "summary": summ}
            print(key, json.dumps({k: round(v, 1) for k, v in summ.items()}), flush=True)
        except Exception as exc:     # record and go on
            rec["results"][key] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{key}: FAILED {type(exc).__name__}: {exc}", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, filename), rec)
    return rec


def measure(out: str, argv: list) -> dict:
    """Every case of :data:`CASES`; record ``cold_gather.json``."""
    def cases(runner, rec):
        for lines, pad, chain, threads, ctas in CASES:
            yield (_name(lines, pad, chain, threads, ctas),
                   {"lines": lines, "pad": pad, "chain": chain, "threads": threads,
                    "ctas": ctas},
                   lambda a=(lines, pad, chain, threads, ctas): (
                       cold_gather(a[0], ctas=a[4], pad=a[1], chain=a[2], threads=a[3]), None))
    return _record(out, argv, "cold_gather.json", cases)


def measure_mapped(out: str, argv: list) -> dict:
    """:data:`MAPPED` at :data:`PLACEMENTS` of the GPU's map: the table (the kernel's ``tab``
    buffer, ``pad`` 0) moved to line ``at`` of a 2 MiB-aligned region; record
    ``cold_gather_mapped.json``."""
    from gpusim.specs import load_group_map, load_spec
    from kernels_ir.errors import InputError

    page = 2 << 20

    def cases(runner, rec):
        cp = runner.cp
        rec["group_map"] = load_spec(rec["spec"]).l2_group_map
        groups = load_group_map(rec["group_map"])
        raw = cp.zeros(MAP_LINES * 128 * 2 + page, dtype=cp.uint8)
        off = (-raw.data.ptr) % page
        for lines, chain, threads, ctas in MAPPED:
            places = map_places(lines, groups)
            for place in PLACEMENTS:
                at, key = places[place], _map_name(lines, chain, threads, ctas, place)

                def move(bufs, key=key, at=at, lines=lines):
                    tab = raw[off + at * 128:off + (at + lines) * 128].view(cp.float32)
                    tab[:] = bufs["tab"]
                    bufs["tab"] = tab
                    if (tab.data.ptr % page) // 128 != at:
                        raise InputError(f"{key}: the table is not at line {at}")

                yield (key, {"lines": lines, "pad": 0, "at": at, "place": place,
                             "busiest": places["busiest"][place], "chain": chain,
                             "threads": threads, "ctas": ctas},
                       lambda a=(lines, chain, threads, ctas), m=move: (
                           cold_gather(a[0], ctas=a[3], chain=a[1], threads=a[2]), m))
    return _record(out, argv, "cold_gather_mapped.json", cases)


def simulate_table(spec, lines: int, pad: int = 0, chain: bool = False, threads: int = THREADS,
                   ctas: int = CTAS_PER_SM * SMS, at: int | None = None) -> dict:
    """The simulator's counterpart (L2 warm, L1 cold): per warp its first issue and its
    store's issue (cycles), their median and 90th percentile, and the launch's cycles.
    ``at``: the table at that line of the spec's contention-group map (``pad`` is then
    :func:`sim_pad`'s)."""
    import numpy as np

    from gpusim.engine import simulate
    from gpusim.engine import timing as tm
    from gpusim.specs import load_group_map
    from kernels_ir.ir import Op, instructions

    if at is not None:
        n_map = len(load_group_map(spec.l2_group_map))
        pad = sim_pad(lines, at, chain, threads, ctas, n_map)

    mb = cold_gather(lines, ctas=ctas, pad=pad, chain=chain, threads=threads)
    ins = list(instructions(mb.kernel))
    store = [i for i, x in enumerate(ins) if x.op is Op.STG][0]
    nw = mb.kernel.grid * mb.kernel.block // 32
    first, end = np.full(nw, np.nan), np.full(nw, np.nan)
    original = tm._Timing._instr

    def instr(self, sid, m, flat, polls, *rest):
        original(self, sid, m, flat, polls, *rest)
        ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
        first[ws] = np.fmin(first[ws], self.last[ws])
        if sid == store:
            end[ws] = self.last[ws]

    tm._Timing._instr = instr
    try:
        res = simulate(mb.kernel, mb.inputs, spec, l2_warm=True)
    finally:
        tm._Timing._instr = original
    if not mb.verify_result(res.globals):
        raise AssertionError(f"{mb.name}: the simulator's values fail the check")
    d = end - first
    return {"warp_cycles_median": float(np.median(d)),
            "warp_cycles_p90": float(np.percentile(d, 90)), "cycles": float(res.cycles)}


def simulate_into(path: str) -> None:
    """Add the simulator's values (:func:`simulate_table`) to the record at ``path``, with the
    contention-group map the simulator used."""
    from gpusim.specs import load_spec
    from measurements.probe import add_simulated, read_record

    def results(spec, rec):
        out = {}
        for key, r in rec["results"].items():
            out[key] = simulate_table(spec, int(r["lines"]), int(r.get("pad", 0)),
                                      r.get("chain", False),
                                      int(r.get("threads", THREADS)),
                                      int(r.get("ctas", CTAS_PER_SM * SMS)),
                                      r.get("at"))
            print(key, json.dumps(out[key]), flush=True)
        return out
    add_simulated(path, results, gpu=None,
                  group_map=load_spec(read_record(path)["spec"]).l2_group_map)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main
    mapped = bool(os.environ.get("COLD_GATHER_MAPPED"))
    return probe_main(argv, __doc__, "measurements/cold_gather.py",
                      measure_mapped if mapped else measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
