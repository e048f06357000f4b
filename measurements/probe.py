"""Pieces the measurement scripts share: timing one microbenchmark the way the campaign does
(two sizes, slope of the medians, the kernel's hashes per size, failures recorded, not raised),
a record of several microbenchmarks or of one probe over several layers, the ``--out DIR`` /
``--simulate FILE`` command line of the probe scripts, and the SM clock sampler every device
record carries (``provenance["sm_clock_mhz_samples"]``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


class ClockSampler:
    """``nvidia-smi`` samples of the SM clock every 250 ms from construction to :meth:`stop`."""

    def __init__(self):
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm",
                                      "--format=csv,noheader,nounits", "-lms", "250"],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self, prov: dict) -> list[int]:
        """End the sampling; the samples (MHz) go to ``prov["sm_clock_mhz_samples"]``."""
        self.proc.terminate()
        samples = [int(x) for x in self.proc.communicate(timeout=10)[0].split() if x.isdigit()]
        prov["sm_clock_mhz_samples"] = samples
        return samples


def time_microbench(runner, name: str, sizes: tuple, kw: dict | None = None, *,
                    repeats: int = 7, warmup: int = 2, label: str | None = None,
                    build=None) -> dict:
    """Microbenchmark ``name`` (builder arguments ``kw``) timed at ``sizes`` on the GPU: the
    record of :func:`gpusim.backends.cupy_backend.run_microbench` plus every size's kernel
    hashes and ``status``; an error becomes ``{"status": "error", "error": ...}``. ``build``
    (``size -> Microbench``): a probe's own builder in place of the registry's ``name``."""
    from gpusim.backends.cupy_backend import run_microbench
    from gpusim.measurements import kernel_fingerprint
    from kernels_ir.kernels import microbench as mb

    kw = kw or {}
    label = label or name
    build = build or (lambda s: mb.build(name, s, **kw))
    t0 = time.time()
    try:
        r = run_microbench(sizes, build, repeats=repeats, warmup=warmup, runner=runner)
        for size in sizes:
            r["sizes"][str(size)]["kernel"] = kernel_fingerprint(build(size).kernel)
        r["status"] = "ok"
        print(f"{label:30s} {r['per_op_s'] * 1e9:9.2f} ns/op ({time.time() - t0:.1f}s)",
              flush=True)
    except Exception as exc:  # record and go on
        r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        print(f"{label}: FAILED {r['error']}", flush=True)
    return r


def record_microbenches(out: str, argv: list, filename: str, entries) -> dict:
    """Time ``entries`` (``(key, name, sizes, builder arguments)``, optionally a fifth item: a
    probe's own ``size -> Microbench`` builder) on the GPU with :func:`time_microbench` (11
    repeats, 2 warm-ups), with provenance and the SM clock samples, and write them to
    ``out/filename`` (format 2: ``results[key]``, ``benchmark`` = ``name``)."""
    import json

    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import provenance

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    res = {"format_version": 2, "provenance": prov, "results": {}}
    for key, name, sizes, kw, *build in entries:
        r = time_microbench(runner, name, sizes, kw, repeats=11, warmup=2, label=key,
                            build=build[0] if build else None)
        if r["status"] == "ok":
            r["benchmark"] = name
        res["results"][key] = r
    clocks.stop(prov)
    with open(os.path.join(out, filename), "w") as f:
        json.dump(res, f, indent=1, default=float)
    return res


LAYER_FIELDS = ("hidden", "batch", "density")


def _layer_key(h, b, d) -> str:
    return f"h{h}-b{b}-d{d}"


def record_layers(out: str, argv: list, filename: str, layers, run, show, *,
                  gpu: str | None = "h100", layer_fields: tuple = LAYER_FIELDS, key=_layer_key,
                  **meta) -> dict:
    """One record of a layer probe: ``run(runner, spec, *layer)`` per tuple of ``layers``
    (``(hidden, batch, density)`` unless ``layer_fields`` names other items), recorded under
    ``key(*layer)`` with the layer's fields and ``status`` "ok" unless the result has one (an
    exception is recorded as ``status`` "error" and the next layer runs); ``show(key, result)``
    prints it; provenance, the SM clock samples, ``meta`` and the wall time go with the results
    into ``out/filename``. ``spec`` is ``gpu``'s (``None``: the measured GPU's, named in the
    record's ``spec``)."""
    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance

    runner = Runner()
    prov = provenance(argv)
    spec = load_spec(gpu or spec_name_for_gpu(prov["gpu_name"]))
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, **meta,
           **({} if gpu else {"spec": spec.name}), "results": {}}
    t0 = time.time()
    for layer in layers:
        name = key(*layer)
        try:
            r = run(runner, spec, *layer)
            r.setdefault("status", "ok")     # a run may name another (a layer that does not fit)
            show(name, r)
        except Exception as exc:   # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{name}: FAILED {r['error']}", flush=True)
        rec["results"][name] = {**dict(zip(layer_fields, layer, strict=True)), **r}
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, filename), rec)
    return rec


def record_programs(out: str, argv: list, filename: str, cases, key, build, extra=None,
                    **meta) -> dict:
    """One H100 record of persistent-kernel cases: per case of ``cases``, ``build(case, steps,
    spec)`` at ``steps`` = ``meta["steps"]`` (T, T') is run by
    :func:`gpusim.backends.cupy_backend.run_program` (values checked before any timing) and
    recorded under ``key(case)`` with the case's fields, ``extra(program)`` and status "ok"; a
    case the registers refuse is recorded as "skipped" with the reason, any other failure as
    "error" (the next case runs). Provenance, SM clock samples, ``meta`` and the wall time go
    with the results into ``out/filename``."""
    from gpusim.backends.cupy_backend import Runner, run_program
    from gpusim.specs import load_spec
    from kernels_ir.errors import CapacityError
    from measurements.campaign import provenance

    spec = load_spec("h100")
    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, **meta, "results": {}}
    steps, short = meta["steps"]
    t0 = time.time()
    for c in cases:
        k = key(c)
        try:
            prog = build(c, steps, spec)
            r = run_program(prog, repeats=meta["repeats"], warmup=meta.get("warmup", 2),
                            short_steps=short, spec=spec, runner=runner)
            r = {"status": "ok", **(extra(prog) if extra else {}), **r}
            print(f"{k:58s} {r['per_step_s'] * 1e6:7.2f} us/step  max_rel_err "
                  f"{r['max_rel_err']:.2g}", flush=True)
        except CapacityError as exc:
            r = {"status": "skipped", "reason": str(exc)}
            print(f"{k}: skipped ({str(exc)[:120]})", flush=True)
        except Exception as exc:   # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{k}: FAILED {r['error']}", flush=True)
        rec["results"][k] = {**c, **r}
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, filename), rec)
    return rec


def price_recorded(spec, rec, fields, build, steps: int) -> dict:
    """The simulator's side of a :func:`record_programs` record: each "ok" case rebuilt from
    its ``fields`` with ``steps`` steps and priced (values checked), next to the GPU's time."""
    from gpusim.pricing import price_program

    res = {}
    for k, r in rec["results"].items():
        if r.get("status") != "ok":
            continue
        p = price_program(build({f: r[f] for f in fields}, steps, spec), spec, what=k)
        res[k] = {"per_step_s": p.per_step_s, "max_rel_err": p.max_rel_err}
        g = r["per_step_s"]
        print(f"{k:58s} sim {p.per_step_s * 1e6:7.2f} us  GPU {g * 1e6:7.2f} us  "
              f"{100 * (p.per_step_s / g - 1):+5.1f}%", flush=True)
    return res


# What an L2-count probe (l1_merge.py, l1_pair.py) asks Nsight: the L2's read sectors and
# requests from the SMs, L1's global-load sectors, hits and misses, the loads issued, the time
L2_COUNT_METRICS = ("lts__t_sectors_srcunit_tex_op_read.sum",
                    "lts__t_requests_srcunit_tex_op_read.sum",
                    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
                    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum",
                    "smsp__inst_executed_op_global_ld.sum", "gpu__time_duration.sum")


def check_l2_count_probe(mode: str, modes, rounds, ctas, warps) -> None:
    """One InputError naming the value, for an L2-count probe's ``mode`` (one of ``modes``) and
    its whole-number sizes (``warps`` at most 32 per CTA)."""
    from kernels_ir.errors import InputError

    if mode not in modes:
        raise InputError(f"mode={mode!r} is unknown; accepted: {', '.join(modes)}")
    for n, v in (("rounds", rounds), ("ctas", ctas), ("warps", warps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{n}={v!r}: accepted whole numbers >= 1")
    if warps > 32:
        raise InputError(f"warps={warps}: accepted 1..32 warps per CTA")


def l2_count_probe_main(argv: list | None, doc: str, script: str, modes, probe, filename: str,
                        metrics) -> int:
    """:func:`probe_main` of an L2-count probe: one checked microbenchmark ``probe(mode)`` per
    mode, each launched once under Nsight (``metrics``) into ``filename``; ``--simulate`` adds
    the simulator's L2 transactions and cycles of each (L2 warm)."""
    def worker(order_path: str) -> int:
        return probe_worker(order_path, [probe(m) for m in modes])

    def measure(out: str, argv_: list) -> dict:
        return ncu_probe_record(out, argv_, os.path.abspath(script), [probe(m) for m in modes],
                                filename, metrics, format_version=2)

    def simulated(spec, rec) -> dict:
        out = {}
        for mode in modes:
            m = probe(mode)
            r = simulate_checked(m, spec, l2_warm=True)
            out[m.name] = {"l2_transactions": r.l2_transactions, "cycles": r.cycles}
            print(m.name, "simulated L2", r.l2_transactions, flush=True)
        return out

    return probe_main(argv, doc, os.path.relpath(script), measure,
                      lambda path: add_simulated(path, simulated, l2_warm=True), worker=worker)


def probe_main(argv: list | None, doc: str, script: str, measure, simulate_into,
               worker=None, report=None) -> int:
    """``script --out DIR`` runs ``measure(DIR, argv)`` (on the GPU); ``script --simulate FILE``
    runs ``simulate_into(FILE)``; ``script --worker ORDER`` runs ``worker(ORDER)`` (the
    launches an Nsight pass profiles) and ``script --report FILE`` runs ``report(FILE)`` (a
    table of the record), for scripts that have them."""
    argv = sys.argv[1:] if argv is None else argv
    if worker is not None and argv[:1] == ["--worker"] and len(argv) == 2:
        return worker(argv[1])
    if report is not None and argv[:1] == ["--report"] and len(argv) == 2:
        report(argv[1])
        return 0
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", help="GPU run: write the record (and any Nsight files) here")
    ap.add_argument("--simulate", metavar="FILE", help="add the simulator's values to FILE")
    a = ap.parse_args(argv)
    if a.simulate:
        simulate_into(a.simulate)
    elif a.out:
        os.makedirs(a.out, exist_ok=True)
        measure(a.out, [script] + argv)
    else:
        ap.error("--out or --simulate")
    return 0


def gpu_probe_main(argv: list | None, doc: str, measure, record: str) -> int:
    """The command line of a GPU-only probe: ``script --out DIR`` runs ``measure(DIR, argv)``,
    which writes ``record`` there."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True, help=f"GPU run: write {record} here")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    measure(a.out, sys.argv if argv is None else [sys.argv[0]] + argv)
    return 0


def record_rounds(out: str, argv: list, filename: str, items, passes: int = 1,
                  label: str = "") -> dict:
    """Time microbenchmarks at the IR rings' round counts (``lamport_ring.GPU_ROUNDS``, its
    repeats and warm-ups) and write ``out/filename``: ``items`` is ``(key, build)`` with
    ``build(rounds)`` a checked :class:`Microbench`. With ``passes`` > 1 every item is timed
    once a pass (all items per pass), ``passes_s`` keeps each pass's ns per round and
    ``results[key]["per_op_s"]`` is their mean."""
    from gpusim.backends.cupy_backend import Runner, run_microbench
    from measurements.campaign import provenance
    from measurements.lamport_ring import GPU_ROUNDS, REPEATS, WARMUP

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, "repeats": REPEATS, "warmup": WARMUP,
           "results": {}}
    if passes > 1:
        rec.update(passes=passes, passes_s={})
    t0 = time.time()
    for p in range(passes):
        for key, build in items:
            r = run_microbench(GPU_ROUNDS, build, repeats=REPEATS, warmup=WARMUP, runner=runner)
            head = f"pass {p} " if passes > 1 else ""
            print(f"{head}{label}{key:18s}: {r['per_op_s'] * 1e9:7.1f} ns per round", flush=True)
            if passes > 1:
                rec["passes_s"].setdefault(key, []).append(r["per_op_s"])
            if p == passes - 1:
                if passes > 1:
                    r["per_op_s"] = sum(rec["passes_s"][key]) / passes
                rec["results"][key] = r
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, filename), rec)
    return rec


def variant_probe_main(argv: list, doc: str, script: str, default: tuple, variants, measure,
                       simulated) -> int:
    """:func:`probe_main` of a probe with several experiment sets: ``default`` is
    ``(experiments, record file name)``, ``variants`` ``(option, experiments, file name)``
    (the option picks that set, and is kept in the record's command); ``measure(out, argv,
    experiments, name)`` and ``simulated(spec, rec, experiments)`` as the probe's own."""
    exps, name = default
    flag = []
    for opt, e, n in variants:
        if opt in argv:
            argv = [a for a in argv if a != opt]
            exps, name, flag = e, n, [opt]
    return probe_main(argv, doc, script, lambda out, a: measure(out, a + flag, exps, name),
                      lambda path: add_simulated(
                          path, lambda spec, rec: simulated(spec, rec, exps), l2_warm=True))


def wrap32(x):
    """A difference of two 32-bit clock stamps (``(int)clock64()``, ``%globaltimer``), wrapped
    into the signed range."""
    return (x + 2 ** 31) % 2 ** 32 - 2 ** 31


def timer_axis(ts, fields, timer: int) -> list:
    """Stamps ``fields`` of a probe's record ``ts`` (rounds or steps, CTAs, warps, fields: field
    0 the SM's ``clock64`` at the top of the round, field ``timer`` ``%globaltimer`` next to it)
    in ns on one time axis: each CTA's clock (one CTA an SM) fitted to the global timer over the
    rounds by least squares (warp 0's stamps), which places every SM's stamps to about the
    timer's resolution."""
    import numpy as np

    t = ts.astype(np.int64)
    c0 = np.unwrap(t[:, :, 0, 0].astype(np.float64), period=2 ** 32)
    g = np.unwrap(t[:, :, 0, timer].astype(np.float64), period=2 ** 32)
    fit = np.array([np.polyfit(c0[:, c], g[:, c], 1) for c in range(t.shape[1])])
    slope, offset = fit[:, 0][None, :, None], fit[:, 1][None, :, None]
    return [slope * (c0[..., None] + wrap32(t[..., f] - t[..., :1, 0])) + offset
            for f in fields]


def loop_top(steps: int, fields: int, timer: int, declare: str = "") -> tuple[str, str]:
    """The generated time loop's header (``steps`` steps) and that header followed by the
    stamps that start each step: ``ts_i`` (``fields`` ints a warp, CTA and step of ``g_ts``),
    ``ts_w`` (lane 0), the statement ``declare`` if any, then lane 0's ``clock64`` in stamp 0
    and ``%globaltimer`` in stamp ``timer``."""
    loop = f"for (r_t = 0; r_t < {steps}; r_t += 1) {{\n"
    return loop, (
        f"{loop}        const unsigned int ts_i = ((r_t * gridDim.x + blockIdx.x) * "
        f"(blockDim.x >> 5) + (threadIdx.x >> 5)) * {fields}u;\n"
        "        const bool ts_w = (threadIdx.x & 31u) == 0u;\n"
        + (f"        {declare}\n" if declare else "") +
        "        if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
        f" : \"=l\"(g)); g_ts[ts_i + 0] = (int)clock64(); g_ts[ts_i + {timer}] = (int)g; }}\n")


def stamp_loop_top(code: str, steps: int, fields: int, timer: int,
                   declare: str = "") -> tuple[str, str]:
    """Generated CUDA whose time loop (found once, else an error) starts each step with the
    stamps of :func:`loop_top`; and the loop's header, which the result still holds once."""
    loop, top = loop_top(steps, fields, timer, declare)
    if code.count(loop) != 1:
        raise AssertionError("time loop not found once")
    return code.replace(loop, top), loop


def stamp_loop_end(code: str, field: int) -> str:
    """Generated CUDA whose time (or round) loop closes the kernel, with lane 0's ``clock64``
    written into stamp ``field`` of ``g_ts`` (index ``ts_i``, set at the loop's top by the
    probe) at the end of each iteration. Raises if the code does not end with the loop or has
    no ``g_ts`` parameter, so that a change of the generator cannot move the stamp silently."""
    end = "\n    }\n}"
    if not code.endswith(end + "\n") and not code.endswith(end):
        raise AssertionError("end of the time loop not found")
    i = code.rfind(end)
    code = code[:i] + f"\n        if (ts_w) g_ts[ts_i + {field}] = (int)clock64();" + code[i:]
    if "int* g_ts," not in code:
        raise AssertionError("the ts buffer is not a parameter")
    return code


def simulate_stepping(kernel, inputs, spec, instr):
    """``simulate(kernel, inputs, spec, l2_warm=True)`` with ``instr(timing, sid, m, flat,
    polls, *rest)`` called after the timing model times each instruction (``_Timing._instr``),
    and ``timing.step_index`` counting the time loop's steps (-1 before the first; what a step
    issued, timed in ptxas's order, is flushed into it first): how the stepping probes read the
    simulator's issue cycles beside the GPU's stamps."""
    from gpusim.engine import simulate
    from gpusim.engine import timing as tm

    original, original_step = tm._Timing._instr, tm._Timing.on_step

    def hooked(self, sid, m, flat, polls, *rest):
        original(self, sid, m, flat, polls, *rest)
        instr(self, sid, m, flat, polls, *rest)

    def on_step(self, step):
        self._flush()
        self.step_index = getattr(self, "step_index", -1) + 1
        return original_step(self, step)
    tm._Timing._instr, tm._Timing.on_step = hooked, on_step
    try:
        return simulate(kernel, inputs, spec, l2_warm=True)
    finally:
        tm._Timing._instr, tm._Timing.on_step = original, original_step


def time_launches(runner, comp, inputs: dict, repeats: int = 7,
                  reset: tuple = ("hseq", "counter"), keep: list | None = None
                  ) -> tuple[list, dict]:
    """``repeats`` timed launches of the compiled ``comp`` on ``inputs``, the buffers of
    ``reset`` that it has (the h slots, the grid counter) and the error flag restored before
    each: (the times, sorted; every buffer read back after the last). ``keep``: a list the
    device buffers are appended to (kept alive, where they lie)."""
    from gpusim.backends.cupy_backend import _time_launch

    cp = runner.cp
    bufs = runner.device_buffers(comp, inputs)
    pristine = {k: cp.asarray(inputs[k]) for k in reset if k in inputs}

    def restore(bb):
        for k, v in pristine.items():
            bb[k][...] = v
        bb["__err"][...] = 0
    times = [_time_launch(cp, runner, comp, bufs, restore) for _ in range(repeats)]
    if keep is not None:
        keep.append(bufs)
    return sorted(times), {n: cp.asnumpy(v) for n, v in bufs.items()}


def timed_slope(runner, runs: dict, repeats: int, what: str = "",
                keep: list | None = None) -> dict:
    """The campaign's per-step time of a kernel timed at two step counts: ``runs`` maps each
    ``T`` to ``(program, compiled kernel, inputs)``; each gets ``repeats`` launches
    (:func:`time_launches`, ``keep`` passed on) and its values checked against the program's
    reference. ``per_step_s`` is the slope of the medians between the largest and smallest
    ``T``; ``launch_s`` the times by ``T``."""
    import numpy as np

    times = {}
    for T, (prog, comp, inputs) in runs.items():
        t, got = time_launches(runner, comp, inputs, repeats=repeats, keep=keep)
        err = float(prog.max_rel_err(got))
        if not err <= 1e-3:
            raise AssertionError(f"{what}T={T}: values differ from the reference ({err})")
        times[T] = t
    hi, lo = max(times), min(times)
    return {"per_step_s": float((np.median(times[hi]) - np.median(times[lo])) / (hi - lo)),
            "launch_s": {str(T): t for T, t in times.items()}}


def with_stamp_buffer(kernel, size: int, suffix: str = "_stamped", name: str = "ts"):
    """``kernel`` renamed ``<name><suffix>`` with an int output buffer ``name`` of ``size``
    words after its own (the generator makes it the parameter ``g_<name>``): the buffer a
    probe's clock stamps are written into."""
    import dataclasses

    from kernels_ir.ir import I32, Buffer
    return dataclasses.replace(kernel, name=kernel.name + suffix, buffers=(
        *kernel.buffers, Buffer(name, "global", I32, size, "out")))


def compile_instrumented(runner, kernel, instrument, cooperative: bool = False):
    """Compile ``kernel`` (non-cooperative unless ``cooperative``: the persistent kernels) with
    its generated CUDA passed through ``instrument(code)``: the probes stamp the CUDA text, the
    IR having no clock."""
    import dataclasses

    import gpusim.backends.cupy_backend as cb
    original = cb.generate

    def generate(k, *a, **kw):
        src = original(k, *a, **kw)
        if k.name == kernel.name:
            src = dataclasses.replace(src, code=instrument(src.code))
        return src
    cb.generate = generate
    try:
        return runner.compile(kernel, cooperative=cooperative)
    finally:
        cb.generate = original


def rewrite_statements(body: tuple, visit) -> tuple:
    """An IR statement tree with ``visit(node)`` applied to every statement, loops' and ifs'
    bodies included: it returns the statements that replace ``node``, or None to keep it (and
    rewrite inside it)."""
    import dataclasses

    from kernels_ir.ir import If, Loop, While

    out = []
    for node in body:
        got = visit(node)
        if got is not None:
            out.extend(got)
            continue
        if isinstance(node, (Loop, While)):
            node = dataclasses.replace(node, body=rewrite_statements(node.body, visit))
        elif isinstance(node, If):
            node = dataclasses.replace(node, then=rewrite_statements(node.then, visit),
                                       orelse=rewrite_statements(node.orelse, visit))
        out.append(node)
    return tuple(out)


def launch_checked(runner, m, what: str):
    """Compile microbenchmark ``m`` (non-cooperative), launch it once and check its values:
    ``(compiled, device buffers)``; a wrong result raises naming ``what``."""
    from kernels_ir.errors import InputError

    cp = runner.cp
    comp = runner.compile(m.kernel, cooperative=False)
    bufs = runner.device_buffers(comp, m.inputs)
    runner.launch(comp, bufs)
    cp.cuda.Device().synchronize()
    if not m.verify_result({k: cp.asnumpy(v) for k, v in bufs.items()}):
        raise InputError(f"{what}: wrong result")
    return comp, bufs


def probe_worker(order_path: str, probes) -> int:
    """The ``--worker`` of a probe script: launch each checked Microbench of ``probes`` once (the
    launches an Nsight pass profiles), names in ``order_path``."""
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import launch_jobs

    launch_jobs(Runner(), [(m.name, m) for m in probes], order_path)
    return 0


def ncu_probe_record(out: str, argv: list, script: str, probes, filename: str, metrics,
                     format_version: int = 1) -> dict:
    """One device record of single-launch probes: each Microbench of ``probes`` launched once
    with its values checked (a wrong one raises), then one Nsight pass over the script's
    ``--worker`` launches (``metrics``, kernels named ``mb_<stem of filename>``, raw CSV beside
    the record); written to ``out/filename``."""
    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import kernel_fingerprint
    from measurements.campaign import provenance
    from measurements.exchange_ncu import run_ncu

    stem = filename.removesuffix(".json")
    runner = Runner()
    res = {"format_version": format_version, "provenance": provenance(argv), "results": {}}
    for m in probes:                              # values first, on a plain launch
        launch_checked(runner, m, m.name)
        res["results"][m.name] = {"params": m.params, "kernel": kernel_fingerprint(m.kernel),
                                  "values_ok": True}
    res["ncu"] = run_ncu(script, out, f"{stem}_ncu_raw.csv", f"regex:mb_{stem}", (), metrics)
    for name, rec in res["ncu"].get("cases", {}).items():
        m = rec.get("metrics", {})
        print(name, {k.split("__")[1][:60]: m.get(k) for k in metrics}, flush=True)
    save_record(os.path.join(out, filename), res)
    return res


def simulate_checked(m, spec, **kw):
    """The simulator's run of Microbench ``m`` (``simulate`` keywords ``kw``); a value that fails
    the benchmark's check raises naming it."""
    from gpusim.engine import simulate

    r = simulate(m.kernel, m.inputs, spec, **kw)
    if not m.verify_result(r.globals):
        raise AssertionError(f"{m.name}: the simulator's values fail the check")
    return r


def simulated_slope(spec, build, sizes: tuple, **kw) -> float:
    """The simulator's cycles an operation of the checked Microbench ``build(n)``: the slope of
    its cycles between the two ``sizes`` over the operations they hold (values checked;
    ``simulate`` keywords ``kw``)."""
    runs = [build(n) for n in sizes]
    cyc = [simulate_checked(m, spec, **kw).cycles for m in runs]
    return (cyc[1] - cyc[0]) / (runs[1].ops - runs[0].ops)


def simulate_runs(path: str, price, *, table=None, names=None, context=None,
                  spec=None) -> dict:
    """Add the simulator's values to the runs of the record at ``path`` and save it: for each
    run (``table(rec)``, default ``rec["runs"]``; the runs ``names``, default all)
    ``price(spec, name, run, ctx)`` returns ``{key: cycles}``, stored rounded to 0.01 under each
    key; ``ctx`` is ``context(rec)`` (what the runs share, made once), ``spec`` the measured
    GPU's unless given. Prints each run's GPU median (``cycles_per_load_per_sm`` or
    ``cycles_per_round_per_sm``) beside its values."""
    import numpy as np

    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec

    rec = read_record(path)
    spec = spec or load_spec(spec_name_for_gpu(rec["provenance"]["gpu_name"]))
    runs = table(rec) if table else rec["runs"]
    ctx = context(rec) if context else None
    for name in names if names is not None else list(runs):
        run = runs[name]
        got = {k: round(float(v), 2) for k, v in price(spec, name, run, ctx).items()}
        run.update(got)
        gpu = float(np.median(run.get("cycles_per_load_per_sm")
                              or run["cycles_per_round_per_sm"]))
        print(f"{name:18s} GPU {gpu:9.1f}  " + "  ".join(
            f"{k} {v:9.1f} ({100 * (v / gpu - 1):+.0f}%)" for k, v in got.items()), flush=True)
    rec["simulated_spec"] = spec.name
    save_record(path, rec)
    return rec


def record_path(path: str) -> str:
    """``path``, or ``path + ".gz"`` or ``path + ".xz"`` where only a compressed copy of a
    record is kept (the large records are stored compressed to keep the repository small)."""
    if not os.path.exists(path):
        for ext in (".gz", ".xz"):
            if os.path.exists(path + ext):
                return path + ext
    return path


def open_record(path: str, mode: str = "rt"):
    """A recorded file's text, opened (``mode`` "rt" or "wt"): ``path``, or its compressed copy
    (:func:`record_path`) through gzip (``.gz``) or lzma (``.xz``)."""
    import gzip
    import lzma

    path = record_path(str(path))
    if path.endswith(".gz"):
        return gzip.open(path, mode)
    if path.endswith(".xz"):
        return lzma.open(path, mode, preset=9 | lzma.PRESET_EXTREME) if "w" in mode \
            else lzma.open(path, mode)
    return open(path, mode[0])


def read_record(path: str) -> dict:
    """A probe's record (JSON) at ``path``, or at its compressed copy (:func:`record_path`)."""
    import json

    with open_record(path) as f:
        return json.load(f)


def take_layer_set(argv: list, sets) -> tuple[list, str | None]:
    """``--layers NAME`` taken out of ``argv``: the rest and NAME, one of ``sets`` (else one
    SystemExit naming those accepted); ``(argv, None)`` without the option."""
    if "--layers" not in argv:
        return argv, None
    i = argv.index("--layers")
    which = (argv[i + 1:i + 2] or [""])[0]
    if which not in sets:
        raise SystemExit(f"--layers takes {' or '.join(map(repr, sets))}")
    return argv[:i] + argv[i + 2:], which


def save_record(path: str, rec: dict) -> None:
    """Write a probe's record (JSON, indented; gzipped where ``path`` ends in ``.gz``, xz where
    it ends in ``.xz``, or where only such a copy of ``path`` exists: :func:`record_path`)."""
    import json

    with open_record(path, "wt") as f:
        json.dump(rec, f, indent=1, default=float)


def add_simulated(path: str, results, gpu: str | None = "h100", *, section: str = "simulated",
                  overrides: dict | None = None, **meta) -> dict:
    """Read the record at ``path``, add ``{"spec": gpu, **meta, "results": results(spec, rec)}``
    under ``section`` (``results`` runs the simulator on the record's probes) and write it
    back; ``gpu=None``: the spec the record names (``"spec"``); ``overrides``: spec values
    replaced for a what-if (recorded with the section)."""
    import dataclasses

    from gpusim.specs import load_spec

    rec = read_record(path)            # plain or gzipped, written back in the same form
    gpu = gpu or rec["spec"]
    spec = load_spec(gpu)
    if overrides:
        spec = dataclasses.replace(spec, **overrides)
        meta = {"overrides": overrides, **meta}
    rec[section] = {"spec": gpu, **meta, "results": results(spec, rec)}
    save_record(path, rec)
    return rec


def simulate_layers_into(path: str, price, steps: int, gpu: str | None = None) -> dict:
    """:func:`add_simulated` over a layer probe's record: ``price(spec, key, result)`` for each
    of its layers whose status is "ok", printed as it goes."""
    import json

    def results(spec, rec):
        out = {}
        for key, r in rec["results"].items():
            if r.get("status", "ok") != "ok":
                continue
            out[key] = price(spec, key, r)
            print(key, json.dumps(out[key], default=lambda x: round(x, 1)), flush=True)
        return out
    return add_simulated(path, results, gpu=gpu, steps=steps)


def add_simulated_slopes(path: str, entries, builder, sizes: tuple = (4, 8),
                         gpu: str = "h200") -> dict:
    """:func:`add_simulated` for a probe of microbenchmarks built by ``builder(*args)`` (a
    ``rounds -> Microbench``) for each ``(key, *args)`` of ``entries``: the simulator's cycles
    per round (the slope between ``sizes`` rounds, L2 warm, values checked), in seconds at the
    spec's clock, beside the record's measured seconds, each printed."""
    def results(spec, rec):
        out = {}
        for key, *args in entries:
            cyc = simulated_slope(spec, builder(*args), sizes, l2_warm=True)
            meas = rec["results"].get(key, {}).get("per_op_s")
            out[key] = {"per_op_cycles": cyc, "per_op_s": cyc / spec.clock_hz,
                        "measured_per_op_s": meas}
            print(f"{key:22s} sim {cyc / spec.clock_hz * 1e9:8.1f} ns  measured "
                  f"{meas * 1e9 if meas else float('nan'):8.1f} ns", flush=True)
        return out
    return add_simulated(path, results, gpu, sizes=list(sizes))


def add_simulated_per_op(path: str, items, cycles, gpu: str = "h200", width: int = 20) -> dict:
    """:func:`add_simulated` for a probe of per-operation costs: ``items`` is ``(key, builder
    arguments)`` per benchmark, ``cycles(spec, key, kw)`` the simulator's cycles an operation;
    each result holds them, in seconds at the spec's clock, the record's measured seconds and the
    arguments, and is printed beside the measured cycles."""
    from gpusim.specs import load_spec

    def results(spec, rec):
        out = {}
        for key, kw in items:
            cyc = cycles(spec, key, kw)
            meas = rec["results"].get(key, {}).get("per_op_s")
            out[key] = {"per_op_cycles": cyc, "per_op_s": cyc / spec.clock_hz,
                        "measured_per_op_s": meas, "arguments": kw}
            print(f"{key:{width}s} sim {cyc:7.1f} cycles  measured "
                  f"{meas * spec.clock_hz if meas else float('nan'):7.1f}", flush=True)
        return out
    return add_simulated(path, results, gpu, clock_hz=load_spec(gpu).clock_hz)


def per_op_probe(record: str, entries, builder, sizes: tuple, sim_sizes: tuple):
    """``(measure, simulated_cycles, simulate_into)`` of a probe of per-operation
    microbenchmarks: ``entries`` is ``(key, builder arguments)``, ``builder(key, kw)`` a
    ``rounds -> Microbench``; ``measure(out, argv)`` times them on the GPU between ``sizes``
    rounds (:func:`record_microbenches`, written to ``record``), ``simulated_cycles(spec, key,
    kw)`` is the simulator's slope between ``sim_sizes`` (values checked) and
    ``simulate_into(path)`` adds it to the record (:func:`add_simulated_per_op`)."""
    def measure(out: str, argv: list) -> dict:
        return record_microbenches(out, argv, record, [(key, key, sizes, kw, builder(key, kw))
                                                       for key, kw in entries])

    def simulated_cycles(spec, key: str, kw: dict) -> float:
        return simulated_slope(spec, builder(key, kw), sim_sizes)

    def simulate_into(path: str) -> None:
        add_simulated_per_op(path, list(entries), simulated_cycles)
    return measure, simulated_cycles, simulate_into


def measure_interleaved(argv: list, items, sizes: tuple, *, repeats: int, warmup: int,
                        passes: int, field: str, unit: str, **meta) -> dict:
    """Time microbenchmarks in ``passes`` passes, each over every item in turn (so that a drift
    of the GPU's state between items falls on all of them alike): ``items`` is ``(key,
    build)`` with ``build(n)`` a checked Microbench of ``n`` operations, timed at ``sizes``
    (:func:`~gpusim.backends.cupy_backend.run_microbench`, kernel fingerprints added). Returns
    the record: ``results[key][field]`` lists each pass's run with its cycles per operation as
    ``unit``, and ``results[key][unit]`` is their median; ``meta`` goes to the top level.
    The caller adds what it derives and saves it."""
    import numpy as np

    from gpusim.backends.cupy_backend import Runner, run_microbench
    from gpusim.measurements import kernel_fingerprint
    from measurements.campaign import provenance

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    rec = {**meta, "provenance": prov, "repeats": repeats, "warmup": warmup, field: passes,
           "sizes": list(sizes), "results": {}}
    t0 = time.time()
    for i in range(passes):
        for key, build in items:
            r = run_microbench(sizes, build, repeats=repeats, warmup=warmup, runner=runner)
            for n in sizes:
                r["sizes"][str(n)]["kernel"] = kernel_fingerprint(build(n).kernel)
            r[unit] = r["per_op_s"] * prov["clock_rate_khz"] * 1e3
            rec["results"].setdefault(key, {"name": r["name"], "unit": r["unit"],
                                            field: []})[field].append(r)
        label = "pass" if field == "passes" else field[:-1]
        print(f"{label} {i + 1} of {passes} done, {time.time() - t0:.0f} s", flush=True)
    for r in rec["results"].values():
        r[unit] = float(np.median([x[unit] for x in r[field]]))
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    return rec


def simulate_slopes_into(path: str, items, sizes: tuple, unit: str, what: str,
                         spec_name: str = "h200", **sim_kw) -> None:
    """Add the simulator's cycles per operation to the record at ``path`` (under
    ``"simulated"``): ``items`` is ``(key, build)`` with ``build(n)`` a checked Microbench of
    ``n`` operations, simulated at the two ``sizes`` (``simulate`` keywords ``sim_kw``); each
    result holds both runs' cycles and their slope as ``unit``; ``what`` names the operation in
    the printed lines."""
    from gpusim.specs import load_spec

    spec = load_spec(spec_name)
    out = {"spec": spec_name, "sizes": list(sizes), **sim_kw, "results": {}}
    for key, build in items:
        cyc = [float(simulate_checked(build(n), spec, **sim_kw).cycles) for n in sizes]
        per = (cyc[1] - cyc[0]) / (sizes[1] - sizes[0])
        out["results"][key] = {"cycles": cyc, unit: per}
        print(f"{key:14s} simulated {per:7.2f} cycles {what}", flush=True)
    rec = read_record(path)
    rec["simulated"] = out
    save_record(path, rec)


def simulate_microbenches(path: str, entries, gpu: str = "h100") -> dict:
    """Add the simulator's cost per operation of the record's microbenchmarks at ``path`` (under
    ``"simulated"``, next to the measured one): ``entries`` is ``(key, benchmark, sizes,
    builder arguments)`` per benchmark, simulated at those sizes (slope, both L2 partition
    assignments averaged: :func:`gpusim.calibrate.simulated_cycles_per_op`)."""
    from gpusim.calibrate import simulated_cycles_per_op
    from gpusim.specs import load_spec

    def results(spec, rec):
        out = {}
        for key, name, sizes, kw in entries:
            cyc = simulated_cycles_per_op(spec, name, sizes, kw)
            meas = rec["results"].get(key, {}).get("per_op_s")
            out[key] = {"per_op_cycles": cyc, "per_op_s": cyc / spec.clock_hz,
                        "sizes": list(sizes), "measured_per_op_s": meas}
            if kw:
                out[key]["arguments"] = kw
            print(f"{key:28s} sim {cyc:8.1f} cycles  measured "
                  f"{meas * spec.clock_hz if meas else float('nan'):8.1f} cycles", flush=True)
        return out
    return add_simulated(path, results, gpu, clock_hz=load_spec(gpu).clock_hz)


class PerSMProbe:
    """A one-call probe of full-occupancy load microbenchmarks whose cost is read per warp load
    per SM (``gather.py``, ``csr_mech.py``): each benchmark timed at ``sizes`` rounds, then one
    Nsight Compute pass (a ``--worker`` process launching each once at ``ncu_rounds``) with
    ``metrics``; ``--simulate FILE`` adds the simulator's cycles at ``sim_sizes``."""

    def __init__(self, *, script: str, record: str, names, sizes, sim_sizes, ncu_rounds: int,
                 metrics, kernel_regex: str, format_version: int):
        self.script, self.record, self.names = script, record, list(names)
        self.sizes, self.sim_sizes, self.ncu_rounds = tuple(sizes), tuple(sim_sizes), ncu_rounds
        self.metrics, self.kernel_regex = tuple(metrics), kernel_regex
        self.format_version = format_version

    def measure(self, out: str, argv: list) -> dict:
        import json

        from gpusim.backends.cupy_backend import Runner
        from measurements.campaign import provenance
        from measurements.exchange_ncu import run_ncu

        runner = Runner()
        prov = provenance(argv)
        clocks = ClockSampler()
        res = {"format_version": self.format_version, "provenance": prov, "results": {}}
        for name in self.names:
            r = time_microbench(runner, name, self.sizes, {}, repeats=11, warmup=2)
            if r["status"] == "ok":
                r["benchmark"] = name
                r["per_sm_cycles"] = (r["per_op_s"] * prov["sm_count"] * prov["clock_rate_khz"]
                                      * 1e3)
            res["results"][name] = r
        clocks.stop(prov)
        path = os.path.join(out, f"{self.record}.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=float)
        try:   # the Nsight pass, in its own process under ncu
            res["ncu"] = run_ncu(os.path.abspath(self.script), out, f"{self.record}_ncu_raw.csv",
                                 self.kernel_regex, (), self.metrics)
        except Exception as exc:  # the timings stand without it
            res["ncu"] = {"error": f"{type(exc).__name__}: {exc}"}
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=float)
        for name, rec in res["ncu"].get("cases", {}).items():
            m = rec["metrics"]
            print(name, {k: v for k, v in m.items() if k.startswith(("l1tex", "lts", "sm__"))
                         and isinstance(v, float) and v})
        return res

    def worker(self, order_path: str) -> int:
        from gpusim.backends.cupy_backend import Runner
        from kernels_ir.kernels import microbench as mb
        from measurements.campaign import launch_jobs

        jobs = [(n, mb.build(n, self.ncu_rounds)) for n in self.names]
        launch_jobs(Runner(), jobs, order_path, check_grid=False)
        return 0

    def simulate_into(self, path: str) -> None:

        from gpusim.calibrate import simulated_cycles_per_op
        from gpusim.measurements import spec_name_for_gpu
        from gpusim.specs import load_spec

        path = record_path(path)
        data = read_record(path)
        # the measured GPU's spec (the H100 records name their GPU too)
        spec = load_spec(spec_name_for_gpu(data.get("provenance", {}).get("gpu_name", "H100")))
        sim = {"spec": spec.name, "clock_hz": spec.clock_hz, "sizes": list(self.sim_sizes),
               "results": {}}
        for name in self.names:
            cyc = simulated_cycles_per_op(spec, name, self.sim_sizes, {}) * spec.sm_count
            meas = data.get("results", {}).get(name, {}).get("per_sm_cycles")
            sim["results"][name] = {"per_sm_cycles": cyc, "measured_per_sm_cycles": meas}
            print(f"{name:22s} sim {cyc:7.2f}  measured {meas if meas else float('nan'):7.2f} "
                  f"cycles per warp load per SM", flush=True)
        data["simulated"] = sim
        save_record(path, data)

    def main(self, argv: list | None, doc: str) -> int:
        argv = sys.argv[1:] if argv is None else argv
        if argv[:1] == ["--worker"]:
            return self.worker(argv[1])
        rel = os.path.relpath(os.path.abspath(self.script),
                              os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return probe_main(argv, doc, rel, self.measure, self.simulate_into)
