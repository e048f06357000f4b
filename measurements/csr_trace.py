"""Where a step of the CSR baseline goes on the GPU: per-warp time stamps inside its own kernel.

    PYTHONPATH=. python3 measurements/csr_trace.py --out $OUT      # GPU: csr_trace.json
    python measurements/csr_trace.py --simulate measurements/h100/csr_trace.json
    PYTHONPATH=. python3 measurements/csr_trace.py --layers regimes --out $OUT  # csr_trace_layers
    PYTHONPATH=. python3 measurements/csr_trace.py --layers l1edge --out $OUT   # csr_trace_l1edge
    PYTHONPATH=. python3 measurements/csr_trace.py --layers batch8 --out $OUT   # csr_trace_batch8

Why: the simulator's CSR row-per-warp step is 20-40% too fast from hidden ~1900 up, while
Nsight shows no unit near its peak (``csr_limit.json``: the warps wait on long-scoreboard
loads, L1TEX and L2 at 20-50% of peak). So some load takes longer on the GPU than in the
simulator, or warps start later. The kernel is the campaign's (one step of recorded layers of
``csr_l1.py``), generated from the IR as always; only its CUDA text is instrumented here (the
IR has no clock). Lane 0 of every warp writes, into a buffer of its own:

- ``g0`` / ``g1``: ``%globaltimer`` (ns) at the warp's entry and after its store;
- ``c0``: ``clock64`` at entry; ``row``, ``se``, ``vc``, ``hv``, ``red``, ``x``: ``clock64`` once
  the row index, the row's bounds, the first chunk's values and columns, its four gathers of h,
  the shuffle-reduced sum and x are in registers (a ``MOV`` of the register makes the in-order
  warp wait for it; the MOVs' results are summed into ``sink`` so that ptxas keeps them);
  ``end``: ``clock64`` after the store is issued; ``sm``: the SM.

The stamps serialise each warp at these points (ptxas otherwise overlaps some of them), so the
instrumented kernel's time is recorded next to the plain one's (events around one launch, L2
warm: 3 warm-up launches, median of 9).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LAYERS = ((944, 4, 0.0198, 500017), (1336, 2, 0.0234, 500121), (2824, 1, 0.0211, 500130),
          (1928, 4, 0.0285, 500111), (5840, 1, 0.0539, 500035), (6464, 1, 0.0225, 400122))
# ``--layers regimes``: cases of the H200 draws (hidden, batch, density, the case's seed) where the
# simulated step is 15-40% slow (batch 2 and 4, rows of 230-850 nonzeros, hidden 1592-2112),
# 13-25% fast (batch 8 at hidden 4760, batch 1 at 5712) or within 5% (hidden 1728-b1, 2696-b4)
REGIME_LAYERS = ((1704, 4, 0.499, 6100082), (1632, 4, 0.412, 5900046), (2112, 4, 0.212, 6300006),
                 (1776, 4, 0.215, 6500065), (1592, 2, 0.145, 5900084), (4760, 8, 0.0612, 5900103),
                 (5712, 1, 0.0158, 5300035), (1728, 1, 0.484, 6100017), (2696, 4, 0.0922, 6100036))
# ``--layers l1edge``: the H200 at batch 8, density 0.05, across the edge where h_{t-1} (4 N B
# bytes) no longer fits in an SM's L1 beside the row pointers (about hidden 6550): the model's
# CSR price jumped 3x there while the simulator's L1 lets h pass through as a direct-mapped cache
# of what is left; the GPU decided for the pass-through (no step at the edge), which the model
# now has too (models/analytical/csr.py, _h_kept)
L1EDGE_LAYERS = tuple((h, 8, 0.05, 7000000 + h) for h in (6144, 6400, 6528, 6592, 6656, 6784,
                                                           7040))
# ``--layers batch8``: batch 8, where both engines price the CSR step 9-20% below the GPU at every
# row length of the draws s161-s186 (hidden 1600-7248, 41-830 nonzeros a row) while batch 4 at the
# same sizes is within a few percent; the same layers at batch 4 beside them, to tell what the
# eighth column of h brings (two 16-byte gathers a nonzero, 8 x loads, more registers, waves)
BATCH8_LAYERS = tuple((h, b, d, 8100000 + 10 * h + b)
                      for h, d in ((3088, 0.013), (2800, 0.015), (5072, 0.014), (3384, 0.083),
                                   (2976, 0.130), (2192, 0.202), (6632, 0.049), (1600, 0.052))
                      for b in ((8, 4) if h in (3088, 3384, 2976, 2192) else (8,)))
# the layer sets of ``--layers``: their layers and the record they make
LAYER_SETS = {"regimes": (REGIME_LAYERS, "csr_trace_layers.json"),
              "l1edge": (L1EDGE_LAYERS, "csr_trace_l1edge.json"),
              "batch8": (BATCH8_LAYERS, "csr_trace_batch8.json")}
FIELDS = ("g0", "c0", "row", "se", "vc", "hv", "red", "x", "end", "g1", "sm", "sink")
TS_BUFFER = "ts"


def _stamp(k: int, regs: tuple, fmt: str = "r") -> str:
    movs = "".join(f"asm volatile(\"mov.b32 %0, %1;\" : \"=r\"(ts_d) : \"{fmt}\"({r})); "
                   "ts_sink += ts_d; " for r in regs)
    return f"if (ts_w) {{ int ts_d; {movs}g_ts[ts_i + {k}] = (int)clock64(); }}\n"


def _once(code: str, anchor: str, insert: str, after: bool = True) -> str:
    if code.count(anchor) != 1:
        raise AssertionError(f"{anchor.strip()!r} not found once in the generated CUDA")
    return code.replace(anchor, anchor + insert if after else insert + anchor)


def instrumented_code(code: str, batch: int) -> str:
    """The generated CUDA of the CSR kernel with the stamps of the module docstring. Raises if
    the code does not have the expected shape (a change of the generator cannot silently move
    a stamp)."""
    f = {n: i for i, n in enumerate(FIELDS)}
    nf = len(FIELDS)
    code = _once(code, "    r_lane = (int)(threadIdx.x & 31u);\n",
                 f"    const unsigned int ts_i = (blockIdx.x * (blockDim.x >> 5) + "
                 f"(threadIdx.x >> 5)) * {nf}u;\n"
                 "    const bool ts_w = (threadIdx.x & 31u) == 0u;\n"
                 "    int ts_sink = 0;\n"
                 "    if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
                 f" : \"=l\"(g)); g_ts[ts_i + {f['g0']}] = (int)g; "
                 f"g_ts[ts_i + {f['c0']}] = (int)clock64(); }}\n", after=False)
    code = _once(code, "    r_row = g_perm[r_slot];\n", "    " + _stamp(f["row"], ("r_row",)))
    code = _once(code, "    r_end = g_rowptr[r_row + 1];\n",
                 "    " + _stamp(f["se"], ("r_start", "r_end")))
    first = "r_i == 0 && "
    vc = "            r_c_3 = t_2.w;\n"
    code = _once(code, vc, "            if (" + first + "true) "
                 + "{ " + _stamp(f["vc"], ("r_c_0",)).rstrip("\n") + " }\n")
    last_h = f"r_hv_{4 * batch - 1}"
    i = code.find(f"            {last_h} = ")
    if i < 0:
        raise AssertionError(f"{last_h} not found")
    j = code.index("\n", code.index(";", i)) + 1
    code = code[:j] + ("            if (r_i == 0) { " + _stamp(f["hv"], (last_h,), "f")
                       .rstrip("\n") + " }\n") + code[j:]
    code = _once(code, "    r_is0 = (r_lane == 0);\n",
                 "    " + _stamp(f["red"], ("r_acc",) if batch == 1 else ("r_acc_0",), "f"),
                 after=False)
    x_last = "r_xv" if batch == 1 else f"r_xv_{batch - 1}"
    i = code.find(f"        {x_last} = ")
    if i < 0:
        i = code.find(f"{x_last} = ")
    if i < 0:
        raise AssertionError(f"{x_last} not found")
    j = code.index("\n", code.index(";", i)) + 1
    code = code[:j] + "        " + _stamp(f["x"], (x_last,), "f") + code[j:]
    end = "\n}\n"
    if not code.endswith(end):
        raise AssertionError("end of the kernel not found")
    code = code[:-len(end)] + (
        "\n    if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
        f" : \"=l\"(g)); g_ts[ts_i + {f['end']}] = (int)clock64(); g_ts[ts_i + {f['g1']}] = "
        f"(int)g; unsigned int s; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(s)); "
        f"g_ts[ts_i + {f['sm']}] = (int)s; g_ts[ts_i + {f['sink']}] = ts_sink; }}" + end)
    if "int* g_ts" not in code:
        raise AssertionError("the ts buffer is not a parameter")
    return code


def _with_ts(kernel):
    """The kernel with a ``ts`` buffer (int, role out): the generator makes every global buffer
    a parameter, used or not."""
    import dataclasses

    from kernels_ir.ir import I32, Buffer

    size = kernel.grid * (kernel.block // 32) * len(FIELDS)
    bufs = tuple(kernel.buffers) + (Buffer(TS_BUFFER, "global", I32, size, "out"),)
    return dataclasses.replace(kernel, name=kernel.name + "_traced", buffers=bufs)


def trace_layer(runner, h: int, b: int, d: float, seed: int) -> dict:
    import dataclasses

    import numpy as np

    import gpusim.backends.cupy_backend as cb
    from gpusim.backends.cupy_backend import _time_launch
    from measurements.csr_l1 import step

    cp = runner.cp
    st = step(h, b, d, seed)
    plain = runner.compile(st.kernel, cooperative=False)
    traced_kernel = _with_ts(st.kernel)
    original = cb.generate

    def generate(kernel, *a, **k):
        src = original(kernel, *a, **k)
        if kernel.name.endswith("_traced"):
            src = dataclasses.replace(src, code=instrumented_code(src.code, b))
        return src

    cb.generate = generate
    try:
        traced = runner.compile(traced_kernel, cooperative=False)
    finally:
        cb.generate = original
    ref = None
    out = {}
    ts_size = traced_kernel.buffers[-1].size
    for name, comp in (("plain", plain), ("traced", traced)):
        inputs = dict(st.inputs)
        if name == "traced":
            inputs[TS_BUFFER] = np.zeros(ts_size, np.int32)
        bufs = runner.device_buffers(comp, inputs)
        times = [_time_launch(cp, runner, comp, bufs, lambda bb: None) for _ in range(12)][3:]
        got = cp.asnumpy(bufs["h_out"])
        if ref is None:
            ref = got
        elif not np.array_equal(ref, got):
            raise AssertionError(f"csr h{h} b{b}: the traced kernel's h_out differs")
        out[name] = {"launch_s": sorted(times)}
        if name == "traced":
            out[name]["ts"] = cp.asnumpy(bufs[TS_BUFFER]).reshape(
                st.kernel.grid, st.kernel.block // 32, len(FIELDS)).tolist()
    want = st.kernel  # values: the plain kernel's output against the float64 step
    from gpusim.engine import execute
    sim = execute(want, st.inputs).globals["h_out"]
    err = float(np.max(np.abs(ref - sim)) / max(1e-30, float(np.max(np.abs(sim)))))
    if not err <= 1e-3:
        raise AssertionError(f"csr h{h} b{b}: GPU values differ from the executor ({err})")
    out["max_rel_err"] = err
    return out


def summarise(ts, clock_hz: float) -> dict:
    """Median and 90th percentile over warps of each stage (cycles from the previous stamp), the
    warps' start after the first warp's (ns), the kernel's span (first entry to last end), and
    the SMs' last ends by the number of CTAs each ran (:func:`sm_ends`). ``ts``: the traced
    buffer, ``(grid, warps a CTA, fields)``."""
    import numpy as np

    f = {n: i for i, n in enumerate(FIELDS)}
    a = np.asarray(ts, dtype=np.int64)
    cta = np.repeat(np.arange(a.shape[0]), a.shape[1])        # each warp's CTA
    a = a.reshape(-1, len(FIELDS))
    keep = (a[:, f["c0"]] != 0) & (a[:, f["x"]] != 0)   # warps past the last row store nothing
    a, cta = a[keep], cta[keep]
    out = {}
    prev = "c0"
    for k in ("row", "se", "vc", "hv", "red", "x", "end"):
        dt = (a[:, f[k]] - a[:, f[prev]]).astype(np.int64) & 0xFFFFFFFF
        out[k] = {"median": float(np.median(dt)), "p90": float(np.percentile(dt, 90))}
        prev = k
    g0 = (a[:, f["g0"]] - a[:, f["g0"]].min()) & 0xFFFFFFFF
    g1 = (a[:, f["g1"]] - a[:, f["g0"]].min()) & 0xFFFFFFFF
    out["start_ns"] = {"median": float(np.median(g0)), "p90": float(np.percentile(g0, 90)),
                       "max": float(g0.max())}
    out["span_ns"] = float(g1.max())
    out["warp_ns"] = {"median": float(np.median(g1 - g0)), "max": float((g1 - g0).max())}
    out["sm_end_ns"] = sm_ends(a[:, f["sm"]], cta, g1)
    return out


def sm_ends(sm, cta, end) -> dict:
    """Per number of CTAs an SM ran: how many SMs ran that many, and the median over them of the
    SM's last end (``end`` per warp: ns on the GPU, cycles in the simulator)."""
    import numpy as np

    last, ctas = {}, {}
    for s, c, e in zip(np.asarray(sm).tolist(), np.asarray(cta).tolist(),
                       np.asarray(end, dtype=np.float64).tolist(), strict=True):
        last[s] = max(last.get(s, -np.inf), e)
        ctas.setdefault(s, set()).add(c)
    out = {}
    for n in sorted({len(v) for v in ctas.values()}):
        ends = [last[s] for s in last if len(ctas[s]) == n]
        out[str(n)] = {"sms": len(ends), "median": float(np.median(ends))}
    return out


def measure(out: str, argv: list, layer_set: str | None = None) -> dict:
    """The GPU run: :data:`LAYERS` (``csr_trace.json``, the H100's spec) or the layers of
    ``layer_set`` (:data:`LAYER_SETS`: ``regimes``, ``csr_trace_layers.json``; ``l1edge``,
    ``csr_trace_l1edge.json``; the measured GPU's spec)."""
    import json

    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from measurements.campaign import provenance
    from measurements.csr_l1 import case_name
    from measurements.probe import ClockSampler

    layers, record = LAYER_SETS.get(layer_set, (LAYERS, "csr_trace.json"))
    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    res = {"format_version": 1, "provenance": prov, "fields": FIELDS, "layers": layers,
           "spec": spec_name_for_gpu(prov["gpu_name"]) if layer_set else "h100",
           "results": {}}
    for h, b, d, s in layers:
        name = case_name(h, b, d)
        try:
            r = trace_layer(runner, h, b, d, s)
            r["summary"] = summarise(r["traced"]["ts"], 1.98e9)
            p, t = r["plain"]["launch_s"][4] * 1e6, r["traced"]["launch_s"][4] * 1e6
            print(f"{name} plain {p:.2f} us traced {t:.2f} us", json.dumps(r["summary"]),
                  flush=True)
        except Exception as exc:  # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(name, "FAILED", r["error"], flush=True)
        res["results"][name] = r
    clocks.stop(prov)
    with open(os.path.join(out, record), "w") as fh:
        json.dump(res, fh)
    return res


def simulate_layer(spec, h: int, b: int, d: float, seed: int) -> dict:
    """The simulator's stages of the same step (L2 warm), as :func:`summarise` gives the GPU's:
    per warp, when the row index, the bounds, the first chunk's values and columns, its
    gathers and x are in registers (the ready cycle of each load's destinations, first
    execution), medians and 90th percentiles of the differences; ``red_x`` is the later chunks,
    the reduction and x together (x is loaded after the reduction), the kernel's cycles, and
    for a grid that runs in one wave the SMs' last ends by the number of CTAs each ran
    (``sm_end_cycles``, :func:`sm_ends`)."""
    import numpy as np

    from gpusim.engine import simulate
    from gpusim.engine import timing as T
    from kernels_ir.ir import Op, instructions
    from measurements.csr_l1 import step

    st = step(h, b, d, seed)
    first: dict = {}           # static load -> ready cycle per warp of its first execution
    orig = T._Timing._instr

    def instr(self, sid, m, flat, polls, *rest):
        orig(self, sid, m, flat, polls, *rest)
        s_ = self.static[sid]
        if s_.kind == "ldg" and sid not in first:
            r = np.full(self.nw, np.nan)
            ws = np.flatnonzero(m.wany)
            r[ws] = np.max([self.ready[dd][ws] for dd in s_.dsts], axis=0)
            first[sid] = r

    ends = {}
    orig_result = T._result

    def result(kernel, spec_, obs, *rest):
        out = orig_result(kernel, spec_, obs, *rest)
        if obs.last.size == kernel.grid * obs.W:     # one wave: every warp still in its slot
            ends["sm"], ends["end"] = obs.sm.copy(), np.maximum(obs.last, obs.store_ack)
        return out

    T._Timing._instr = instr
    T._result = result
    try:
        res = simulate(st.kernel, st.inputs, spec, l2_warm=True)
    finally:
        T._Timing._instr = orig
        T._result = orig_result
    # the loads by buffer: perm, rowptr x 2, values, columns, the gathers of h (one or two a
    # nonzero), x (one or two)
    buf = {sid: i.srcs[0].buffer.name for sid, i in enumerate(instructions(st.kernel))
           if i.op is Op.LDG}

    def last(*names):
        got = [first[k] for k in sorted(first) if buf[k] in names]
        return np.nanmax(np.vstack(got), axis=0)
    at = {"row": last("perm"), "se": last("rowptr"), "vc": last("vals", "cols"),
          "hv": last("h_in"), "x": last("x")}
    out, prev = {}, np.zeros_like(at["row"])
    for k in ("row", "se", "vc", "hv", "x"):
        dt = at[k] - prev
        ok = np.isfinite(dt)
        out["red_x" if k == "x" else k] = {"median": float(np.median(dt[ok])),
                                           "p90": float(np.percentile(dt[ok], 90))}
        prev = at[k]
    out["cycles"] = float(res.cycles)
    if ends:   # the SMs' last ends by CTAs run (cycles; one-wave grids only)
        w = st.kernel.block // 32
        out["sm_end_cycles"] = sm_ends(ends["sm"], np.arange(ends["sm"].size) // w, ends["end"])
    return out


def simulate_into(path: str) -> None:
    from gpusim.specs import load_spec
    from measurements.csr_l1 import case_name
    from measurements.probe import read_record, record_path, save_record

    path = record_path(path)
    rec = read_record(path)
    spec = load_spec(rec.get("spec", "h100"))
    sim = {}
    for h, b, d, s in (tuple(x) for x in rec.get("layers", LAYERS)):
        name = case_name(h, b, d)
        sim[name] = simulate_layer(spec, h, b, d, s)
        r = rec["results"].get(name, {})
        if "ts" in r.get("traced", {}) and "sm_end_ns" not in r.get("summary", {}):
            r["summary"] = summarise(r["traced"]["ts"], 1.98e9)   # a record made before it
        g = r.get("summary", {})
        print(name, "simulated", {k: v.get("median", v) if isinstance(v, dict) else v
                                  for k, v in sim[name].items()},
              "GPU", {k: v["median"] for k, v in g.items() if isinstance(v, dict)
                      and "median" in v}, "GPU SM ends", g.get("sm_end_ns"), flush=True)
    rec["simulated"] = {"spec": spec.name, "l2_warm": True, "results": sim}
    save_record(path, rec)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main, take_layer_set

    # --layers regimes | l1edge: those layers' record (GPU run)
    argv, which = take_layer_set(list(sys.argv[1:] if argv is None else argv), LAYER_SETS)
    flag = [] if which is None else ["--layers", which]
    return probe_main(argv, __doc__, os.path.relpath(__file__),
                      lambda out, a: measure(out, a + flag, which), simulate_into)


if __name__ == "__main__":
    sys.exit(main())
