"""Where a step of the Lamport kernel goes on the GPU: per-warp time stamps inside the campaign's
own kernel (GPU only).

    PYTHONPATH=. python3 measurements/lamport_trace.py --out $OUT     # -> lamport_trace.json(.gz)
    python measurements/lamport_trace.py --simulate measurements/h100/lamport_trace.json
    ... --dense --out $OUT   # the dense kernel: lamport_trace_dense.json (DENSE_LAYERS)
    ... --layers regimes --out $OUT   # REGIME_LAYERS: lamport_trace_layers.json (+ _raw)

Why: ``lamport_wait.py`` found that the kernel's wait (its step time minus that of the same
kernel with every slot already written) is 350-1050 ns on the GPU and 170-310 ns in the
simulator, that stores landing on polled lines cost nothing by themselves, and that a back-off
after a failed poll lengthens the step as a detection process would. This probe says which
part of the step is long, per CTA and warp.

The kernel is the campaign's (sparse, Lamport, wide loads, optimal layout; seed 7 layers of
``lamport_wait.py``), generated from the IR as always; only its CUDA text is instrumented here
(the IR has no clock): lane 0 of every warp writes, per step ``t``, into a buffer of its own:

- ``t0``: the SM's ``clock64`` at the top of the step (before the x load and the polls);
- ``t1``: after its poll loop has seen every word of the slot (the last group's exit);
- ``polls``: the poll iterations of the step, summed over the groups (1 per group = no re-poll);
- ``t2``: after the ``__syncthreads`` that ends the staging;
- ``t3``: after its h stores (the end of the step's body);
- ``g0``: ``%globaltimer`` (ns) next to ``t0``, to place the SMs' clocks on one axis;
- ``tp``: just before the first poll of the step (after the x loads and the address set-up);
- with ``--rows`` (record ``lamport_trace_rows.json``) also ``tr``, ``tt``: when the warp's
  first row's reduced value, and that value after ``tanhf``, are ready (a ``MOV`` reads the
  register, so the in-order warp stalls on it; lane 0 owns the row's first batch value); 0 when
  the warp has no row. These stalls perturb the mat-vec they time (its span grows by 60-145 ns),
  so they are kept out of the main record.

Two launches per layer: ``normal`` (the campaign's) and ``inplace`` (every slot already holds its
value and the stores write the same values, as in ``lamport_wait.py``: no poll waits, so
``t1 - tp`` is a poll's own duration inside the kernel).

``--dense``: the dense persistent kernel (Lamport exchange, wide loads) on the layers of
``lamport_prefill_dense`` (:data:`DENSE_LAYERS`), where the GPU waits 2.0-2.4 times as long as
the simulator at batch 1-2, and its controls; the spec is the measured GPU's.

Stamps cost a few instructions per warp and step; the per-step time of the instrumented kernel
is recorded next to the plain kernel's, so their cost is visible. Cycle differences within one SM
need no common clock; across SMs, each SM's ``clock64`` is fitted to ``%globaltimer`` over its
steps (slope and offset by least squares), which places the stamps on one axis to about the
timer's resolution.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.lamport_wait import LAYERS, build  # noqa: E402
from measurements.probe import stamp_loop_end, timer_axis, wrap32  # noqa: E402

_wrap = wrap32
STEPS = 48
# the dense kernel's layers of lamport_prefill_dense (seed 7): six where the GPU waited 2.0-2.4x
# the simulator's wait, then the three controls (0.95-1.15x)
DENSE_LAYERS = ((624, 1, 0.1), (712, 1, 0.1), (984, 1, 0.1), (1160, 1, 0.1), (656, 2, 0.1),
                (928, 2, 0.1), (264, 1, 0.1), (392, 1, 0.1), (1296, 2, 0.1))
# ``--layers regimes``: one-staging-group layers (N x B <= 4096 words) of the H200 draws' Lamport
# regimes, seed 7 as above: batch 4 with one row a warp (hidden <= 1056), where the simulated
# kernels are 10-45% slow; batch 2 just past one row a warp (hidden 1057-1330: +15-50%); and
# controls: batch 2 with one row a warp, batch 1 (the simulator 7-19% fast), batch 8
REGIME_LAYERS = ((320, 4, 0.068), (464, 4, 0.018), (560, 4, 0.108), (832, 4, 0.114),
                 (1008, 4, 0.036), (1080, 2, 0.1), (1112, 2, 0.061), (1176, 2, 0.054),
                 (720, 2, 0.015), (1040, 2, 0.145), (744, 1, 0.016), (880, 1, 0.299),
                 (280, 8, 0.326), (512, 8, 0.05))
FIELDS = ("t0", "t1", "polls", "t2", "t3", "g0", "tp")
ROW_FIELDS = FIELDS + ("tr", "tt")      # with --rows
DENSE_FIELDS = FIELDS + ("tq",)         # with --dense: right before the step's last h store
ONE_GROUP_WORDS = 4 * 4 * 256           # h words one staging group of 256 threads covers
MODES = ("normal", "inplace")
TS_BUFFER = "ts"


def fields_of(rows: bool = False, dense: bool = False) -> tuple:
    """The stamps a traced kernel records (``--rows`` and ``--dense`` exclude each other)."""
    return ROW_FIELDS if rows else DENSE_FIELDS if dense else FIELDS


def instrumented_code(code: str, steps: int, rows: bool = False, dense: bool = False) -> str:
    """The generated CUDA of the sparse Lamport kernel with the stamps of the module docstring
    (``g_ts``: one int per field, warp, CTA and step). Raises if the code does not have the
    expected shape (so a change of the generator cannot silently move a stamp)."""
    from measurements.probe import stamp_loop_top

    code, _ = stamp_loop_top(code, steps, len(fields_of(rows, dense)), 5,
                             declare="unsigned int ts_polls = 0u;")
    spin = "/* spin loop 0: lamport_poll"
    if code.count(spin) != 1:
        raise AssertionError("poll loop not found once")
    code = code.replace(spin, "if (ts_w && r_g == 0) g_ts[ts_i + 6] = (int)clock64();\n"
                        "            " + spin)
    brk = "if (!r_warp_waiting) break;"
    if code.count(brk) != 1:
        raise AssertionError("poll exit not found once")
    code = code.replace(brk, "++ts_polls; " + brk)
    tail = "if ((spin_0 & 1023u) == 0u && err_seen(g___err)) break;\n            }\n"
    if code.count(tail) != 1:
        raise AssertionError("end of the poll loop not found once")
    code = code.replace(tail, tail + "            if (ts_w) { g_ts[ts_i + 1] = (int)clock64(); "
                        "g_ts[ts_i + 2] = (int)ts_polls; }\n")
    sync = "        }\n        __syncthreads();\n"
    if code.count(sync) != 1:
        raise AssertionError("staging barrier not found once")
    code = code.replace(sync, sync + "        if (ts_w) g_ts[ts_i + 3] = (int)clock64();\n")
    if dense:      # tq: the clock before each h store, the last one executed kept (a store
        st = "g_hseq[r_tmp] = r_val;"       # that cannot issue shows as t3 - tq)
        if st not in code:
            raise AssertionError("h store not found")
        code = code.replace(st, "if (ts_w) g_ts[ts_i + 7] = (int)clock64();\n            " + st)
    if not rows:
        return _end_stamp(code)
    red = next((r for r in ("        if (r_mine_0) {\n", "        if (r_mine) {\n")
                if r in code), None)
    if red is None:
        raise AssertionError("first row's epilogue not found")
    stamp = ("        if (ts_w) {{ int ts_d; asm volatile(\"mov.b32 %0, %1;\" : \"=r\"(ts_d) : "
             "\"f\"(r_val)); g_ts[ts_i + {k}] = (int)clock64(); }}\n")
    code = code.replace(red, stamp.format(k=7) + red, 1)
    th = "            r_val = tanhf(r_val);\n"
    if th not in code:
        raise AssertionError("first row's tanh not found")
    code = code.replace(th, th + "    " + stamp.format(k=8), 1)
    return _end_stamp(code)


def _end_stamp(code: str) -> str:
    return stamp_loop_end(code, 4)


def _with_ts(kernel, steps: int, rows: bool = False, dense: bool = False):
    """The kernel with a ``ts`` buffer (int, role out) after ``hseq``: the generator makes
    every global buffer a parameter, used or not."""
    import dataclasses

    from kernels_ir.ir import I32, Buffer

    size = steps * kernel.grid * (kernel.block // 32) * len(fields_of(rows, dense))
    bufs = []
    for b in kernel.buffers:
        bufs.append(b)
        if b.name == "hseq":
            bufs.append(Buffer(TS_BUFFER, "global", I32, size, "out"))
    return dataclasses.replace(kernel, name=kernel.name + "_traced", buffers=tuple(bufs))


def build_kernel(h: int, b: int, d: float, steps: int, spec, dense: bool = False):
    """The traced program: the sparse kernel of ``lamport_wait`` or the dense one (seed 7)."""
    if not dense:
        return build(h, b, d, steps, spec)
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, make_layer
    from measurements.lamport_wait import SEED
    return build_dense_rnn(make_layer(h, b, d, steps, SEED), spec, sync="lamport",
                           wide_loads=True, step_wait=0)    # the form measured: no step wait


def trace_layer(runner, h: int, b: int, d: float, spec, rows: bool = False,
                dense: bool = False) -> dict:
    import numpy as np

    import gpusim.backends.cupy_backend as cb
    from gpusim.backends.cupy_backend import _time_launch

    cp = runner.cp
    prog = build_kernel(h, b, d, STEPS, spec, dense)
    plain = runner.compile(prog.kernel)
    runner.check_grid(plain)
    traced_kernel = _with_ts(prog.kernel, STEPS, rows, dense)
    fields = fields_of(rows, dense)
    original = cb.generate

    def generate(kernel, *a, **k):
        src = original(kernel, *a, **k)
        if kernel.name.endswith("_traced"):
            import dataclasses
            src = dataclasses.replace(src, code=instrumented_code(src.code, STEPS, rows,
                                                                  dense))
        return src

    cb.generate = generate
    try:
        traced = runner.compile(traced_kernel)
    finally:
        cb.generate = original
    runner.check_grid(traced)
    pristine = cp.asarray(prog.inputs["hseq"])
    ts_size = traced_kernel.buffers[[x.name for x in traced_kernel.buffers].index(TS_BUFFER)].size
    out, filled = {}, None
    for name, comp in (("plain", plain), ("normal", traced), ("inplace", traced)):
        inputs = dict(prog.inputs)
        if name != "plain":
            inputs[TS_BUFFER] = np.zeros(ts_size, np.int32)
        if name == "inplace":
            inputs["hseq"] = np.asarray(filled).view(np.float32).reshape(-1).copy()
        start = cp.asarray(inputs["hseq"]) if name == "inplace" else pristine
        bufs = runner.device_buffers(comp, inputs)

        def reset(bb, start=start):
            bb["hseq"][...] = start
            bb["__err"][...] = 0
        times = [_time_launch(cp, runner, comp, bufs, reset) for _ in range(7)]
        got = {n: cp.asnumpy(v) for n, v in bufs.items()}
        err = float(prog.max_rel_err(got))
        if not err <= 1e-3:
            raise AssertionError(f"{name}: values differ from the reference ({err})")
        if name == "plain":
            filled = got["hseq"]
        out[name] = {"launch_s": sorted(times), "max_rel_err": err}
        if name != "plain":
            out[name]["ts"] = got[TS_BUFFER].reshape(STEPS, prog.kernel.grid,
                                                     prog.kernel.block // 32, len(fields))
    return out


def summarise(ts, clock_hz: float) -> dict:
    """Per-step medians over the steady steps (8..STEPS-2) of what the module docstring lists,
    in ns: ``compute`` (t3 - t2: the warp's mat-vec and store after staging; with the row
    stamps also ``first_row_reduced`` = tr - t2 and ``first_row_tanh`` = tt - tr), ``poll`` (t1 -
    t0), ``staging_wait`` (t2 - t1: the warp waiting at the barrier for the CTA's slowest
    poller), ``step`` (t0 of the next step - t0), the CTAs' spread of t3 (the last store of the
    step; on one axis via each SM's fit to the global timer) and polls per warp and step; with
    ``tq`` (``--dense``) also ``before_store`` (tq - t2) and ``store_issue`` (t3 - tq: the h
    store and the stamp's own store issuing)."""
    import numpy as np

    t = ts.astype(np.int64)
    t0, t1, polls, t2, t3, g0, tp = (t[..., i] for i in range(len(FIELDS)))
    wrap = _wrap
    ns = 1e9 / clock_hz
    s = slice(8, t.shape[0] - 1)
    step = wrap(t0[1:] - t0[:-1])[s.start:s.stop - 1 if s.stop else None] * ns
    res = {}
    if t.shape[-1] == len(ROW_FIELDS):
        tr, tt = t[..., len(FIELDS)], t[..., len(FIELDS) + 1]
        res["first_row_reduced_ns"] = float(np.median(wrap(tr - t2)[s][tr[s] != 0]) * ns)
        res["first_row_tanh_ns"] = float(np.median(wrap(tt - tr)[s][tt[s] != 0]) * ns)
    if t.shape[-1] == len(DENSE_FIELDS):    # tq: 0 where the warp stored no h (padding rows)
        tq = t[..., len(FIELDS)]
        res["before_store_ns"] = float(np.median(wrap(tq - t2)[s][tq[s] != 0]) * ns)
        res["store_issue_ns"] = float(np.median(wrap(t3 - tq)[s][tq[s] != 0]) * ns)
        res["store_issue_p90_ns"] = float(np.percentile(wrap(t3 - tq)[s][tq[s] != 0], 90) * ns)
    res |= {
        "compute_ns": float(np.median(wrap(t3 - t2)[s]) * ns),
        "compute_cta_max_ns": float(np.median(wrap(t3 - t2)[s].max(axis=2)) * ns),
        "poll_ns": float(np.median(wrap(t1 - t0)[s]) * ns),
        "first_poll_ns": float(np.median(wrap(t1 - tp)[s][polls[s] == polls[s].min()]) * ns),
        "setup_ns": float(np.median(wrap(tp - t0)[s]) * ns),
        "poll_cta_max_ns": float(np.median(wrap(t1 - t0)[s].max(axis=2)) * ns),
        "staging_wait_ns": float(np.median(wrap(t2 - t1)[s]) * ns),
        "step_ns": float(np.median(step)),
        "polls_per_warp_step": float(np.mean(polls[s])),
        "polls_hist": np.bincount(np.minimum(polls[s].ravel(), 15), minlength=16).tolist(),
    }
    # one axis: per CTA (one per SM), clock = a * globaltimer + c over its steps (warp 0)
    c0 = t0[:, :, 0].astype(np.float64)
    c0 = np.unwrap(c0, period=2 ** 32)
    g = np.unwrap(g0[:, :, 0].astype(np.float64), period=2 ** 32)
    axis_end = np.empty_like(c0)
    for c in range(c0.shape[1]):
        a, b = np.polyfit(c0[:, c], g[:, c], 1)
        last = np.unwrap(t3[:, c, :].astype(np.float64), period=2 ** 32, axis=0).max(axis=1)
        axis_end[:, c] = a * last + b
    spread = axis_end[s].max(axis=1) - axis_end[s].min(axis=1)
    res["store_spread_ns"] = float(np.median(spread))
    res["last_store_cta_counts"] = np.bincount(axis_end[s].argmax(axis=1),
                                               minlength=c0.shape[1]).tolist()
    return res


def parse_layers(text: str) -> tuple:
    """``--layers``: ``regimes`` (:data:`REGIME_LAYERS`) or ``h:b:d`` items separated by commas,
    each of one staging group (``h * b <= 4096`` words)."""
    from kernels_ir.errors import InputError

    if text == "regimes":
        return REGIME_LAYERS
    out = []
    for item in text.split(","):
        try:
            h, b, d = item.split(":")
            layer = (int(h), int(b), float(d))
        except ValueError:
            raise InputError(f"--layers item {item!r} is not h:b:d (e.g. 464:4:0.018) nor "
                             "'regimes'") from None
        if not (layer[0] > 0 and layer[1] > 0 and 0 < layer[2] <= 1
                and layer[0] * layer[1] <= ONE_GROUP_WORDS):
            raise InputError(f"--layers item {item!r}: hidden and batch must be positive with "
                             f"hidden x batch <= {ONE_GROUP_WORDS} and density in (0, 1]")
        out.append(layer)
    return tuple(out)


def measure(out: str, argv: list, rows: bool = False, dense: bool = False,
            layers: tuple | None = None) -> dict:
    import numpy as np

    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    runner = Runner()
    prov = provenance(argv)
    spec_name = spec_name_for_gpu(prov["gpu_name"]) if dense or layers else "h100"
    spec = load_spec(spec_name)
    clocks = ClockSampler()
    name = "lamport_trace_dense" if dense else "lamport_trace_rows" if rows else \
        "lamport_trace_layers" if layers else "lamport_trace"
    rec = {"format_version": 1, "provenance": prov, "steps": STEPS,
           "fields": list(fields_of(rows, dense)), "kernel": "dense" if dense else
           "sparse", "spec": spec_name, "results": {}}
    raw = {}
    t0 = time.time()
    for h, b, d in DENSE_LAYERS if dense else layers or LAYERS:
        key = f"h{h}-b{b}-d{d}"
        try:
            r = trace_layer(runner, h, b, d, spec, rows, dense)
            entry = {"hidden": h, "batch": b, "density": d, "status": "ok",
                     "plain": r["plain"]}
            prods = producers(build_kernel(h, b, d, 4, spec, dense)) if dense else None
            for mode in MODES:
                ts = r[mode].pop("ts")
                summ = summarise(ts, spec.clock_hz)
                entry[mode] = {**r[mode], "summary": summ}
                if dense:        # the stamps' distributions (the raw stamps are not kept)
                    entry[mode]["distribution"] = dense_distribution(ts, spec.clock_hz, prods)
                else:
                    raw[f"{key}/{mode}"] = ts.tolist()
                print(key, mode, json.dumps({k: (round(v, 1) if isinstance(v, float) else v)
                                             for k, v in summ.items()
                                             if k != "last_store_cta_counts"}),
                      f"launch {np.median(r[mode]['launch_s']) * 1e6:.1f} us", flush=True)
            rec["results"][key] = entry
        except Exception as exc:   # record and go on
            rec["results"][key] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{key}: FAILED {type(exc).__name__}: {exc}", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, f"{name}.json"), rec)
    if not dense:   # the dense record keeps distributions only: its stamps are 10 MB
        # xz: the stamps compress to 60% of gzip's size (the raw records are the largest files)
        with lzma.open(os.path.join(out, f"{name}_raw.json.xz"), "wt", preset=9) as f:
            json.dump(raw, f)
    return rec


def dense_distribution(ts, clock_hz: float, prods) -> dict:
    """What the dense record keeps of its stamps (steps 8 to the last but two, ns):
    :func:`gpu_distribution`; per number of polls a warp made in a step, the share of the
    polling warps' steps and the median ``t1 - tp``; and per warp of the CTA the medians of
    ``t1``, ``t2`` and ``tq`` after ``t0`` (``t2`` is not the barrier's release for warps
    that arrive early: see measurements/README.md)."""
    import numpy as np

    t = ts.astype(np.int64)[8:-2]
    ns = 1e9 / clock_hz
    polling = np.array([len(c) > 0 for c in prods])
    by = polls_by_count(t[..., 2][..., polling], (_wrap(t[..., 1] - t[..., 6]) * ns)[..., polling])
    warp = {}
    for f, i in (("t1", 1), ("t2", 3), ("tq", 7)):     # tq: 0 where the warp stored no h
        x = np.where(t[..., i] != 0, _wrap(t[..., i] - t[..., 0]) * ns, np.nan)
        warp[f] = np.nanmedian(x, axis=(0, 1)).round(1).tolist()
    return {**gpu_distribution(ts, clock_hz, prods), "polls": by, "per_warp_after_t0_ns": warp}


def polls_by_count(polls, first) -> dict:
    """Per number of polls a warp made in a step (``polls``, an int array), the share of the
    warp-steps and the median of ``first`` (the same shape: ``t1 - tp``, ns) over them."""
    import numpy as np

    return {str(k): [float((polls == k).mean()), float(np.nanmedian(first[polls == k]))]
            for k in range(1, int(polls.max()) + 1) if (polls == k).any()}


def producers(prog) -> list:
    """Per warp of a CTA: the CTAs whose h stores its poll chunks hold (one staging group:
    thread ``t`` polls words ``4t .. 4t + 3`` of the slot; word ``k`` is position ``k // B``).
    Every CTA polls the whole slot with the same map, so the list holds for all of them."""
    import numpy as np

    m = prog.mapping
    b = prog.layer.batch
    where = np.full(m.n_cols, -1)                       # position -> the CTA that stores it
    rows = m.row_ids.reshape(m.n_ctas, -1)
    for c in range(m.n_ctas):
        r = rows[c][rows[c] >= 0] % m.n_cols
        where[m.h_positions[r]] = c
    words, warps = m.n_cols * b, prog.kernel.block // 32
    out = []
    for w in range(warps):
        k = np.arange(128 * w, min(128 * (w + 1), words))
        out.append(np.unique(where[k // b]) if k.size else np.array([], int))
    return out


def _last_stores(t3):
    """Per step and CTA, its last h store (max over its warps; NaN for a CTA that stores
    nothing: padding rows)."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(t3, axis=2)


def detection_matrix(t1, t3, prods, keep):
    """Each polling warp's poll exit ``t1[s + 1, c, w]`` after the last store ``t3[s]`` (max
    over that CTA's warps) of the CTAs it polls (:func:`producers`), for ``s`` in ``keep``
    (stamps on one time axis): an array (steps, CTAs, polling warps)."""
    import numpy as np

    last = _last_stores(t3)
    return np.array([np.stack([t1[s + 1, :, w] - np.max(last[s][cs])
                               for w, cs in enumerate(prods) if len(cs)], axis=-1)
                     for s in keep])


def detection_spread(x) -> dict:
    """Where the detection latency (:func:`detection_matrix`, steps x CTAs x warps) varies:
    its standard deviation, and those of its means per step, per CTA, per warp of the CTA and
    per step and warp (every CTA's warp ``w`` polls the same lines)."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"total": float(np.nanstd(x)),
                "step_means": float(np.nanstd(np.nanmean(x, axis=(1, 2)))),
                "cta_means": float(np.nanstd(np.nanmean(x, axis=(0, 2)))),
                "warp_means": float(np.nanstd(np.nanmean(x, axis=(0, 1)))),
                "step_warp_means": float(np.nanstd(np.nanmean(x, axis=1)))}


def producer_lateness(t3, prods, x, keep) -> float:
    """The correlation, over (step, warp) pairs, between how late the last of a warp's
    producers stored (its last store after the median CTA's) and the warp's mean detection
    latency over the CTAs (``x``: :func:`detection_matrix` of the same steps)."""
    import warnings

    import numpy as np

    last = _last_stores(t3)
    late = [[np.max(last[s][cs]) - np.nanmedian(last[s]) for cs in prods if len(cs)]
            for s in keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(x, axis=1)
    return float(np.corrcoef(np.ravel(late), mean.ravel())[0, 1])


def gpu_axis(ts):
    """``(t1, t3)`` of a raw record (steps, CTAs, warps, fields) in ns on one axis: each SM's
    ``clock64`` fitted to ``%globaltimer`` over its steps (warp 0's ``t0`` and ``g0``)."""
    return timer_axis(ts, (1, 4), timer=5)


def simulate_layer(spec, h: int, b: int, d: float, steps: int = 8, dense: bool = False) -> dict:
    """The same quantities in the simulator, for the normal kernel and for the kernel with
    pre-written slots and redirected stores (``lamport_prefill``; the simulator cannot run
    ``inplace``: its staleness rule re-polls a slot written again with the same value): per
    warp and step the issue cycles of the step's first instruction (``t0``), the first poll
    (``tp``), the first staging store (``t1``: the poll loop's exit), the first instruction
    after the staging barrier (``t2``) and the step's last instruction (``t3``), as the GPU's
    stamps place them, taken from the timing model as it issues them; the detection latency
    takes the last h store (``ts``) as a producer's store. Layers with one staging group only
    (``t1`` is the exit of the only poll loop).

    (Until 2026-11-29 ``t3`` was the last h store and ``t2`` the first shared load: a warp
    whose second row belongs to no one still runs that row's reduction after its last store,
    and the GPU's ``t3`` counts it, so the compute compared was the GPU's whole body against
    the simulator's body up to its last store.)"""
    import numpy as np

    from gpusim.engine import simulate
    from kernels_ir.ir import Op, instructions
    from measurements.lamport_prefill import prefilled_inputs, redirect_stores
    from measurements.probe import simulate_stepping

    def stamps(kernel, inputs):
        ins = list(instructions(kernel))

        def first(pred):
            return [i for i, x in enumerate(ins) if pred(x)][:1]
        poll = first(lambda x: x.op is Op.LDG_VOLATILE)
        bar = [i for i, x in enumerate(ins) if x.op is Op.BAR and i > poll[0]][0]
        pick = {"tp": poll,
                "t1": [i for i, x in enumerate(ins) if x.op is Op.STS and i > poll[0]
                       and x.srcs[0].buffer.name == "h_s"][:1],   # not the dense zero fill
                "ts": [i for i, x in enumerate(ins) if x.op is Op.STG]}
        # the first (fmin) and last (fmax) issue of the step, and the first after the barrier
        spans = {"t0": (range(len(ins)), np.fmin), "t3": (range(len(ins)), np.fmax),
                 "t2": (range(bar + 1, len(ins)), np.fmin)}
        rec = {k: {} for k in (*pick, *spans)}
        replays: dict = {}

        def instr(self, sid, m, flat, polls, *rest):
            step = int(getattr(self, "step_index", -1))
            if self.replaying:       # a replayed poll: one more poll of the warp this step
                if sid in poll and step >= 0:
                    ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
                    n = replays.setdefault(step, np.zeros(self.nw))
                    n[ws] += 1
                return
            if step < 0:                # before the time loop (the dense kernel's zero fill)
                return
            ws = None
            for k, ids in pick.items():
                if sid in ids:
                    ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
                    a = rec[k].setdefault(step, np.full(self.nw, np.nan))
                    a[ws] = np.fmax(a[ws], self.last[ws])
            if self.static[sid].folded:      # issued nothing: ``last`` is the one before
                return
            for k, (ids, agg) in spans.items():
                if sid in ids:
                    if ws is None:
                        ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
                    a = rec[k].setdefault(step, np.full(self.nw, np.nan))
                    a[ws] = agg(a[ws], self.last[ws])

        res = simulate_stepping(kernel, inputs, spec, instr)
        ns = 1e9 / spec.clock_hz
        keep = sorted(rec["t1"])[2:-1]
        R = {k: np.array([rec[k][t] for t in keep]) for k in rec}
        w = kernel.block // 32
        fp = (R["t1"] - R["tp"]) * ns
        cta_max = np.nanmax(fp.reshape(fp.shape[0], -1, w), axis=2)
        t1w = R["t1"].reshape(R["t1"].shape[0], -1, w)     # NaN: warps with no row
        t3 = R["ts"].reshape(R["ts"].shape[0], -1, w)
        prods = producers(prog)
        x = detection_matrix(t1w * ns, t3 * ns, prods, range(t1w.shape[0] - 1))
        lat = np.nanpercentile(x, [10, 50, 90, 99]).tolist()
        polling = np.array([len(c) > 0 for c in prods])
        n = 1 + np.array([replays.get(t, np.zeros(kernel.grid * w)) for t in keep])
        n = n.reshape(n.shape[0], -1, w)[..., polling].astype(int)
        by = polls_by_count(n, fp.reshape(fp.shape[0], -1, w)[..., polling])
        return {"per_step_ns": res.per_step_s * 1e9,
                "detection_latency_percentiles_ns": lat, "polls": by,
                "detection_sd_ns": detection_spread(x),
                "setup_ns": float(np.nanmedian(R["tp"] - R["t0"]) * ns),
                "poll_ns": float(np.nanmedian(R["t1"] - R["t0"]) * ns),
                "staging_wait_ns": float(np.nanmedian(R["t2"] - R["t1"]) * ns),
                "compute_ns": float(np.nanmedian(R["t3"] - R["t2"]) * ns),
                "first_poll_percentiles_ns": np.nanpercentile(fp, [10, 50, 90, 99]).tolist(),
                "slowest_warp_ns": float(np.nanmedian(np.nanmax(cta_max, axis=1))),
                "cta_spread_ns": float(np.nanmedian(np.nanmax(t1w, axis=2) -
                                                    np.nanmin(t1w, axis=2)) * ns)}

    prog = build_kernel(h, b, d, steps, spec, dense)
    first = simulate(prog.kernel, prog.inputs, spec, l2_warm=True)
    return {"normal": stamps(prog.kernel, prog.inputs),
            "prefilled": stamps(redirect_stores(prog.kernel),
                                prefilled_inputs(prog, first.globals["hseq"]))}


def gpu_distribution(ts, clock_hz: float, prods=None) -> dict:
    """``t1 - tp`` over the steady steps: percentiles and the median over steps of the
    slowest warp, and the median spread of ``t1`` over the warps of one CTA (ns), as
    :func:`simulate_layer` gives them; with ``prods`` (:func:`producers`) also the detection
    latency (:func:`detection_matrix`, stamps placed on one axis by :func:`gpu_axis`)."""
    import numpy as np
    extra = {}
    if prods is not None:
        t1, t3 = gpu_axis(ts)
        x = detection_matrix(t1, t3, prods, range(8, ts.shape[0] - 2))
        extra["detection_latency_percentiles_ns"] = np.nanpercentile(
            x, [10, 50, 90, 99]).tolist()
        extra["detection_sd_ns"] = detection_spread(x)
        extra["producer_lateness_corr"] = producer_lateness(t3, prods, x,
                                                            range(8, ts.shape[0] - 2))
    t = ts.astype(np.int64)[8:-2]
    fp = _wrap(t[..., 1] - t[..., 6]) * 1e9 / clock_hz
    t1 = t[..., 1] - t[..., 1].min(axis=2, keepdims=True)
    spread = _wrap(t1).max(axis=2) * 1e9 / clock_hz
    return {"first_poll_percentiles_ns": np.percentile(fp, [10, 50, 90, 99]).tolist(),
            "slowest_warp_ns": float(np.median(fp.max(axis=(1, 2)))),
            "cta_spread_ns": float(np.median(spread)), **extra}


def poll_table(rec: dict) -> list[str]:
    """measurements/README.md's table of the dense record (GPU / simulator): the polling warps'
    steps whose first poll succeeds and that poll three times or more, a one-poll warp's poll
    waiting and without waiting (GPU), and the detection latency's p50 / p90 / p99 (ns)."""
    sim = rec["simulated"]["results"]

    def share(polls, ok):
        return sum(v[0] for k, v in polls.items() if ok(int(k))) * 100
    rows = []
    for key, r in rec["results"].items():
        g, s = r["normal"]["distribution"], sim[key]["normal"]
        gl, sl = g["detection_latency_percentiles_ns"], s["detection_latency_percentiles_ns"]
        rows.append(
            f"| {key.rsplit('-d', 1)[0]} | {share(g['polls'], lambda n: n == 1):.0f}% / "
            f"{share(s['polls'], lambda n: n == 1):.0f}% | "
            f"{share(g['polls'], lambda n: n >= 3):.0f}% / "
            f"{share(s['polls'], lambda n: n >= 3):.0f}% | "
            f"{g['polls']['1'][1]:.0f} / {r['inplace']['distribution']['polls']['1'][1]:.0f} | "
            + " | ".join(f"{gl[i]:.0f} / {sl[i]:.0f}" for i in (1, 2, 3)) + " |")
    return rows


def raw_path_of(path: str) -> str:
    """The raw stamps' file of the record at ``path``: ``*_raw.json.xz``, or the gzipped
    ``*_raw.json.gz`` that earlier runs wrote."""
    xz = path.replace(".json", "_raw.json.xz")
    gz = path.replace(".json", "_raw.json.gz")
    return gz if os.path.exists(gz) and not os.path.exists(xz) else xz


def read_raw(path: str) -> dict:
    """The per-warp stamps of the record at ``path`` (:func:`raw_path_of`): ``key/mode`` ->
    array (steps, CTAs, warps, fields)."""
    import numpy as np
    raw_path = raw_path_of(path)
    opener = gzip.open if raw_path.endswith(".gz") else lzma.open
    with opener(raw_path, "rt") as f:
        return {k: np.array(v) for k, v in json.load(f).items()}


def simulate_into(path: str) -> None:
    """Add the simulator's values (:func:`simulate_layer`) of the one-group layers to the
    record at ``path`` (``"simulated"``), with the GPU's distribution next to them."""
    import numpy as np

    from gpusim.specs import load_spec

    with open(path) as f:
        rec = json.load(f)
    dense = rec.get("kernel") == "dense"
    spec = load_spec(rec.get("spec", "h100"))
    raw_path = raw_path_of(path)
    old = rec.get("simulated", {}).get("results", {})
    # without the raw stamps (not kept for the large records) the GPU's distributions of an
    # earlier run are kept
    raw = None if dense or not os.path.exists(raw_path) else read_raw(path)
    if not dense and raw is None and not old:
        raise FileNotFoundError(f"{raw_path}: the raw stamps are needed to simulate {path}")
    sim = {"spec": spec.name, "results": {}}
    for key, r in rec["results"].items():
        if r["hidden"] * r["batch"] > ONE_GROUP_WORDS:
            continue
        s = simulate_layer(spec, r["hidden"], r["batch"], r["density"], dense=dense)
        prods = producers(build_kernel(r["hidden"], r["batch"], r["density"], 4, spec, dense))
        for mode, gm in (("normal", "normal"), ("prefilled", "inplace")):
            s[mode]["gpu_" + gm] = r[gm]["distribution"] if dense else old[key][mode][
                "gpu_" + gm] if raw is None else gpu_distribution(
                np.array(raw[f"{key}/{gm}"]), spec.clock_hz, prods)
        sim["results"][key] = s
        print(key, json.dumps(s, default=lambda x: round(x, 1)), flush=True)
    rec["simulated"] = sim
    with open(path, "w") as f:
        json.dump(rec, f, indent=1, default=float)


def main(argv: list | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="GPU run: write lamport_trace.json here")
    g.add_argument("--simulate", metavar="FILE", help="add the simulator's values to FILE")
    ap.add_argument("--rows", action="store_true",
                    help="also time the first row's reduction and tanh (lamport_trace_rows.json)")
    ap.add_argument("--dense", action="store_true",
                    help="the dense kernel on DENSE_LAYERS (lamport_trace_dense.json)")
    ap.add_argument("--layers", metavar="LIST",
                    help="'regimes' (REGIME_LAYERS) or h:b:d,... of one staging group "
                         "(lamport_trace_layers.json, the GPU's own spec)")
    args = ap.parse_args(argv)
    if args.simulate:
        simulate_into(args.simulate)
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.layers and (args.rows or args.dense):
        ap.error("--layers traces the sparse kernel without --rows or --dense")
    from kernels_ir.errors import InputError
    try:
        layers = parse_layers(args.layers) if args.layers else None
    except InputError as exc:
        ap.error(str(exc))
    measure(args.out, sys.argv if argv is None else argv, args.rows, args.dense, layers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
