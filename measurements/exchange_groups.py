"""Where a large slot's exchange goes: per-group clock stamps inside the campaign's Lamport and
barrier kernels at layers whose h takes several staging groups (GPU, then the simulator).

    PYTHONPATH=. python3 measurements/exchange_groups.py --out $OUT    # exchange_groups.json
    ... --layers partial --out $OUT     # PARTIAL_LAYERS: exchange_groups_partial.json
    EXCHANGE_FALLBACK=previous ... --layers partial --out $OUT   # today's kernel, no forms:
                                        # exchange_groups_partial_previous.json
    ... --layers dense --out $OUT       # DENSE_LAYERS: exchange_groups_dense.json
    ... --layers passes --out $OUT      # PASS_LAYERS, the poll pass's forms: exchange_passes.json
    python measurements/exchange_groups.py --simulate measurements/h200/exchange_groups.json

Why: on the H200 draws the simulator prices the Lamport kernel's saving over the barrier kernel
(the same body, wide loads and optimal layout) too large, the most from hidden 2000 up at batch
4 and 8. There the GPU's Lamport kernel is 1-5% slower than its barrier kernel, the simulator's
3-5% faster. Those layers stage h into shared memory in several groups of 4096 words (256
threads x four 16-byte loads), one group after the other; the Lamport kernel polls each group
until no word holds the sentinel. ``lamport_trace.py`` stamps one-group layers only.

Both kernels are generated from the IR as always; only their CUDA text is stamped. Lane 0 of
every warp writes, per step, into a buffer of its own (``clock64`` unless said):

- ``t0``: the top of the step; ``g0``: ``%globaltimer`` next to it;
- ``tp``: Lamport: right before the first group's first poll; barrier: right after the
  ``__syncthreads`` that follows the grid barrier's spin;
- ``e0`` .. ``e7``: Lamport: when the poll loop of group ``g`` exits (every word of it seen);
  barrier: when group ``g``'s first load has arrived (a ``MOV`` reads its register, so the
  in-order warp stalls on the load), right before its shared stores;
- ``q0`` .. ``q7``: Lamport: the polls of group ``g`` (1: no re-poll); barrier: 0;
- ``t2``: after the ``__syncthreads`` that ends the staging; ``t3``: the end of the step.

Per layer: the plain kernels' launches (values checked), the stamped ones (values checked), and
the Lamport kernel with every slot already written (``inplace``: no poll waits, the exchange's
own cost), also in the forms of :data:`FORMS` (``inplace_plain``, ``inplace_nocheck``,
``inplace_plain_nocheck``: which part of a poll group costs what; GPU only).

The simulator's counterpart takes the issue cycles of the same instructions: the
step's first and last, the first poll (Lamport) or the first instruction after the first
barrier (barrier), the first shared store of each group, and the first instruction after the
staging barrier; its re-polls are counted per group.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 48
SIM_STEPS = 8
SEED = 7
GROUP_WORDS = 4096
MAX_GROUPS = 8
# several staging groups at batch 1-8 in the regime of the draws' gap (hidden 2000-6200), one
# group as a control; shapes and densities of no draw, the matrices of seed 7
LAYERS = ((2304, 4, 0.1), (3072, 4, 0.05), (4096, 4, 0.02), (2048, 8, 0.05), (3584, 8, 0.02),
          (5120, 2, 0.05), (6144, 1, 0.03), (1024, 4, 0.05))
FIELDS = ("t0", "g0", "tp", "t2", "t3", *(f"e{g}" for g in range(MAX_GROUPS)),
          *(f"q{g}" for g in range(MAX_GROUPS)))
E, Q = FIELDS.index("e0"), FIELDS.index("q0")
KERNELS = ("lamport", "barrier")
# the Lamport kernel's poll in other forms, run with every slot written before the launch
# (nothing to wait for, so the values stay right): ``plain``, plain 16-byte loads (L1-cached,
# as the barrier kernel's staging) in place of the relaxed ones; ``nocheck``, the relaxed loads
# with no sentinel test (the loop exits after one pass; ptxas drops the compares and the vote);
# ``plain_nocheck``, both: the barrier kernel's staging inside the Lamport kernel;
# ``noguard``, the poll loop without the generated guards (the spin limit and the error poll),
# so that the loop exits by falling through rather than by a taken branch over the guards' code;
# ``onecheck``, the sentinel test of the lane's first word only (one compare, then the vote);
# ``unrolled``, the staging's loop over the groups unrolled (``#pragma unroll`` for the
# generated ``#pragma unroll 1``), run waiting too
# ``distinct`` (``--layers partial``): in a last group partly past the end of the slot, a chunk
# past the end reads the lane's chunk of the previous group (polled and seen already, so valid
# while other CTAs still store) instead of re-reading the lane's chunk 0 of this group; run
# waiting and with every slot written
FORMS = ("kernel", "plain", "nocheck", "plain_nocheck", "distinct", "noguard", "onecheck",
         "unrolled")
INPLACE_FORMS = ("plain", "nocheck", "plain_nocheck")
# ``--layers passes``: what a poll pass of a later group costs, form by form (every slot
# written, so every poll succeeds at once); shapes of no draw nor of the sets above
PASS_FORMS = ("nocheck", "noguard", "onecheck", "unrolled")
PASS_WAITING_FORMS = ("unrolled",)
# ``--layers partial``: two staging groups at batch 1 whose second holds 128 to 3072 words (the
# draws' Lamport kernels at batch 1 with a small last group run 20-30% slower than their barrier
# kernels on the GPU), one such at batch 4, and a full second group as the control
PARTIAL_LAYERS = ((4224, 1, 0.03), (4480, 1, 0.03), (4864, 1, 0.03), (5632, 1, 0.03),
                  (7168, 1, 0.03), (8192, 1, 0.02), (2176, 4, 0.1))
# ``--layers dense``: the dense persistent kernel (its campaign form: wide loads, Lamport, and
# here its barrier form beside it) at batch 1, where the draws' dense kernels run 15% slower on
# the GPU than the simulator says, at batch 2 (9%) and at batch 4 as the control (within 3%);
# one and two rows a warp, h in one staging group
DENSE_LAYERS = ((512, 1, 0.1), (1024, 1, 0.1), (1536, 1, 0.1), (2048, 1, 0.1), (1024, 2, 0.1),
                (1024, 4, 0.1))
PASS_LAYERS = ((4096, 2, 0.05), (3072, 4, 0.03), (2560, 8, 0.03), (6144, 2, 0.02))
LAYER_SETS = {"large": LAYERS, "partial": PARTIAL_LAYERS, "dense": DENSE_LAYERS,
              "passes": PASS_LAYERS}
RECORDS = {"large": "exchange_groups.json", "partial": "exchange_groups_partial.json",
           "dense": "exchange_groups_dense.json", "passes": "exchange_passes.json"}
TS_BUFFER = "ts"
# the generated spin loop's guards (kernels_ir.codegen_cuda), as the poll loop has them
SPIN_GUARDS = ("if (spin_0 >= 1048576u) { err_report(g___err, 1, 0); break; }\n",
               "if ((spin_0 & 1023u) == 0u && err_seen(g___err)) break;\n")
GROUP_STORE = "*reinterpret_cast<float4*>(&s_h_s[r_first]) ="


STAGE_GROUP = 4      # chunks a thread loads back to back (kernels_ir.kernels.sparse_rnn)
# the Lamport kernel as both records measured it: a chunk past the end of the slot re-read the
# lane's chunk 0 (``sparse_rnn.PARTIAL_GROUP_FALLBACK`` was "chunk0" until these records showed
# its cost); the ``distinct`` form is the kernel since then
FALLBACK = os.environ.get("EXCHANGE_FALLBACK", "chunk0")


def groups_of(h: int, b: int) -> int:
    return -(-h * b // GROUP_WORDS)


def build(h: int, b: int, d: float, steps: int, spec, sync: str, fallback: str = FALLBACK,
          dense: bool = False):
    """The campaign's sparse kernel (wide loads, optimal layout) with ``sync`` (seed 7); its
    Lamport staging with ``fallback`` (``kernels_ir.kernels.sparse_rnn.FALLBACKS``); ``dense``:
    the dense persistent kernel (wide loads) of the same layer instead. The Lamport step does not
    end with a fence or a wait (``sparse_rnn.LAMPORT_STEP_FENCE``, ``LAMPORT_STEP_WAIT_NS``): the
    form measured."""
    from kernels_ir.errors import InputError
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    if sync not in KERNELS:
        raise InputError(f"sync={sync!r}: accepted {', '.join(KERNELS)}")
    if groups_of(h, b) > MAX_GROUPS:
        raise InputError(f"hidden x batch = {h * b}: at most {MAX_GROUPS * GROUP_WORDS} words "
                         f"({MAX_GROUPS} staging groups) are stamped")
    # the step without the Lamport kernel's closing fence or wait, and with the staging's group
    # loop rolled: the form every record of this probe (and of dense_steps and stamp_effect,
    # which build through here) measured (the ``unrolled`` form edits this rolled text)
    plain = {"step_fence": False, "step_wait": 0, "stage_unroll": False}
    if dense:
        return build_dense_rnn(make_layer(h, b, d, steps, SEED), spec, sync=sync, **plain)
    return build_sparse_rnn(make_layer(h, b, d, steps, SEED), spec, sync=sync,
                            wide_loads=True, layout="optimal", stage_fallback=fallback, **plain)


def _once(code: str, what: str, text: str) -> None:
    if code.count(text) != 1:
        raise AssertionError(f"{what} not found once ({code.count(text)} times)")


def _before_group_store(code: str, text: str) -> str:
    """``code`` with ``text`` inserted before the statement that stores a group's first chunk
    into shared memory (its ``if (r_inside_0)`` where a group is partly outside the slot)."""
    i = code.rfind("\n", 0, code.index(GROUP_STORE)) + 1
    j = code.rfind("\n", 0, i - 1) + 1
    if code[j:i].strip() == "if (r_inside_0) {":
        i = j
    return code[:i] + text + code[i:]


def instrumented_code(code: str, steps: int, sync: str, form: str = "kernel") -> str:
    """The generated CUDA of either kernel with the module docstring's stamps (``g_ts``: one
    int per field, warp, CTA and step), in ``form`` (:data:`FORMS`; Lamport only, for the
    launches whose slots are all written before the launch). Raises if the code does not have
    the expected shape, so that a change of the generator cannot silently move a stamp."""
    from measurements.probe import loop_top, stamp_loop_end

    if form not in FORMS or (form != "kernel" and sync != "lamport"):
        raise AssertionError(f"form {form!r} of the {sync} kernel")
    if form in ("plain", "plain_nocheck"):
        load = "ld.relaxed.gpu.global.v4.f32"
        if load not in code:
            raise AssertionError("the poll's relaxed loads not found")
        code = code.replace(load, "ld.global.v4.f32")
    if form == "distinct":
        n = 0
        for i in range(1, STAGE_GROUP):
            sel = f"r_bits = r_inside_{i} ? r_bits : r_gfirst;"
            back = GROUP_WORDS // STAGE_GROUP * (STAGE_GROUP - i)   # the previous group's chunk
            if sel in code:
                code = code.replace(sel, f"r_bits = r_inside_{i} ? r_bits : (r_gfirst - {back});")
                n += 1
        if n != STAGE_GROUP - 1:
            raise AssertionError(f"{n} chunk address selects found, expected {STAGE_GROUP - 1}"
                                 " (the distinct form needs a last group partly past the end)")
    if form == "onecheck":
        test = "r_waiting = r_waiting || r_sent;"
        if code.count(test) < 2:
            raise AssertionError(f"{code.count(test)} sentinel tests, expected several")
        first = code.index(test) + len(test)
        code = code[:first] + code[first:].replace(test, "")
    if form == "unrolled":
        loop = "#pragma unroll 1\n        for (r_g = 0;"
        _once(code, "the staging's group loop", loop)
        code = code.replace(loop, "#pragma unroll\n        for (r_g = 0;")
    if form in ("nocheck", "plain_nocheck"):
        vote = "r_warp_waiting = __any_sync(0xffffffffu, r_waiting);"
        _once(code, "the poll's vote", vote)
        code = code.replace(vote, "r_warp_waiting = false;")

    loop, top = loop_top(steps, len(FIELDS), 1, declare="unsigned int ts_polls = 0u;")
    _once(code, "time loop", loop)
    head, _, body = code.partition(loop)
    sync_line = "        __syncthreads();\n"
    stamp = "        if (ts_w) g_ts[ts_i + {k}] = (int)clock64();\n"
    _once(body, "a staging group's first shared store", GROUP_STORE)
    if sync == "lamport":
        spin = "/* spin loop 0: lamport_poll"
        _once(body, "poll loop", spin)
        body = body.replace(spin, "if (ts_w && r_g == 0) g_ts[ts_i + 2] = (int)clock64();\n"
                            "            " + spin)
        brk = "if (!r_warp_waiting) break;"
        _once(body, "poll exit", brk)
        body = body.replace(brk, "++ts_polls; " + brk)
        tail = SPIN_GUARDS[1] + "            }\n"
        _once(body, "end of the poll loop", tail)
        body = body.replace(tail, tail + (
            f"            if (ts_w && r_g < {MAX_GROUPS}) {{ g_ts[ts_i + {E} + r_g] = "
            f"(int)clock64(); g_ts[ts_i + {Q} + r_g] = (int)ts_polls; }}\n"
            "            ts_polls = 0u;\n"))
        parts = body.split(sync_line)
        if len(parts) != 2:
            raise AssertionError(f"{len(parts) - 1} __syncthreads in the time loop, expected 1")
        body = parts[0] + sync_line + stamp.format(k=3) + parts[1]
    else:
        parts = body.split(sync_line)
        if len(parts) != 4:
            raise AssertionError(f"{len(parts) - 1} __syncthreads in the time loop, expected 3")
        arrival = (f"            if (ts_w && r_g < {MAX_GROUPS}) {{ int ts_d; asm volatile("
                   "\"mov.b32 %0, %1;\" : \"=r\"(ts_d) : \"f\"(r_chunk0_0)); "
                   f"g_ts[ts_i + {E} + r_g] = (int)clock64(); }}\n")
        parts[1] = _before_group_store(parts[1], arrival)
        body = (parts[0] + sync_line + stamp.format(k=2) + parts[1] + sync_line
                + stamp.format(k=3) + sync_line.join(parts[2:]))
    code = stamp_loop_end(head + top + body, 4)
    if form == "noguard":      # after the stamps: the loop's end is found by its last guard
        for guard in SPIN_GUARDS:
            _once(code, "a spin guard", guard)
            code = code.replace(guard, "")
    return code


def _compile_traced(runner, kernel, sync: str, form: str = "kernel", steps: int = STEPS):
    from measurements.probe import compile_instrumented, with_stamp_buffer

    traced_kernel = with_stamp_buffer(
        kernel, steps * kernel.grid * (kernel.block // 32) * len(FIELDS),
        suffix="_traced" if form == "kernel" else f"_traced_{form}", name=TS_BUFFER)
    traced = compile_instrumented(runner, traced_kernel,
                                  lambda c: instrumented_code(c, steps, sync, form),
                                  cooperative=True)
    runner.check_grid(traced)
    return traced, traced_kernel.buffers[-1].size


def summarise(st: dict, groups: int, step_ns: float) -> dict:
    """Per-step medians (ns) of per-warp arrays (steps, CTAs, warps) of the stamps ``st``
    (``t0``, ``tp``, ``t2``, ``t3``, ``e0``.., ``q0``.. on one clock per SM; NaN where a warp
    has no stamp): ``head`` (tp - t0), ``group_ns`` (the first from ``tp``, each next from the
    previous group's ``e``), ``staging_tail`` (t2 - the last group's ``e``), ``exchange`` (t2 -
    t0), ``body`` (t3 - t2), the polls a warp makes per group (mean) and ``step_ns``."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = lambda x: float(np.nanmedian(x))    # noqa: E731
        e = [st[f"e{g}"] for g in range(groups)]
        prev = [st["tp"], *e[:-1]]
        return {"step_ns": step_ns, "head_ns": med(st["tp"] - st["t0"]),
                "group_ns": [med(a - p) for a, p in zip(e, prev, strict=True)],
                "staging_tail_ns": med(st["t2"] - e[-1]),
                "exchange_ns": med(st["t2"] - st["t0"]),
                "exchange_cta_max_ns": med(np.nanmax(st["t2"] - st["t0"], axis=2)),
                "body_ns": med(st["t3"] - st["t2"]),
                "polls": [float(np.nanmean(st[f"q{g}"])) for g in range(groups)]}


def gpu_summary(ts, clock_hz: float, groups: int, series: bool = False) -> dict:
    """:func:`summarise` of the GPU's stamps (steps, CTAs, warps, fields), steps 8 to the
    last but one: each stamp placed by its 32-bit difference from warp 0's ``t0`` of its step
    (those unwrapped over the steps), so a clock's wrap cannot split a step; ``series``: also
    each step's median over the warps and their mean."""
    import numpy as np

    from measurements.probe import wrap32

    t = ts.astype(np.int64)[8:-1]
    ns = 1e9 / clock_hz
    base = np.unwrap(t[:, :, 0, 0].astype(np.float64), period=2 ** 32, axis=0)[..., None]
    st = {f: (base + wrap32(t[..., i] - t[:, :, :1, 0])) * ns
          for i, f in enumerate(FIELDS) if f != "g0" and not f.startswith("q")}
    st |= {f"q{g}": t[..., Q + g].astype(float) for g in range(MAX_GROUPS)}
    steps = np.diff(st["t0"], axis=0)
    out = summarise(st, groups, float(np.median(steps)))
    if series:
        # each step's median over the warps, and their mean: a step now and then much longer
        # than the median one shows here and not in ``step_ns``
        per = np.median(steps.reshape(len(steps), -1), axis=1)
        out |= {"step_mean_ns": float(per.mean()), "step_series_ns": [float(x) for x in per]}
    return out


def stamp_layer(runner, spec, h: int, b: int, d: float, distinct: bool = False,
                dense: bool = False, forms: tuple = INPLACE_FORMS,
                waiting_forms: tuple = ()) -> dict:
    """One layer on the GPU: per kernel the plain launches and the stamped ones (values
    checked against the float64 reference), and the Lamport kernel's stamped launches with
    every slot already written (``inplace``)."""
    import numpy as np

    from measurements.probe import time_launches

    groups = groups_of(h, b)
    out = {"groups": groups}
    for sync in KERNELS:
        prog = build(h, b, d, STEPS, spec, sync, dense=dense)
        plain = runner.compile(prog.kernel, cooperative=True)
        runner.check_grid(plain)
        traced, ts_size = _compile_traced(runner, prog.kernel, sync)
        runs = [("plain", plain, 0, None), ("stamped", traced, ts_size, None)]
        filled = None
        for name, comp, size, start in runs:
            inputs = dict(prog.inputs)
            if size:
                inputs[TS_BUFFER] = np.zeros(size, np.int32)
            if start is not None:
                inputs["hseq"] = start
            times, got = time_launches(runner, comp, inputs)
            err = float(prog.max_rel_err(got))
            if not err <= 1e-3:
                raise AssertionError(f"{sync} {name}: values differ from the reference ({err})")
            entry = {"launch_s": times, "max_rel_err": err}
            if size:
                ts = got[TS_BUFFER].reshape(STEPS, prog.kernel.grid, prog.kernel.block // 32,
                                            len(FIELDS))
                entry["summary"] = gpu_summary(ts, spec.clock_hz, groups)
            key = f"{sync}_{name}"
            out[key] = entry
            if sync == "lamport" and name == "plain":
                filled = got["hseq"].copy()
                runs.append(("inplace", traced, ts_size, filled))
                for form in forms:
                    comp = _compile_traced(runner, prog.kernel, sync, form)
                    runs.append((f"inplace_{form}", *comp, filled))
                    if form in waiting_forms:
                        runs.append((f"stamped_{form}", *comp, None))
                if distinct and groups > 1 and h * b % GROUP_WORDS:
                    comp = _compile_traced(runner, prog.kernel, sync, "distinct")
                    runs += [("stamped_distinct", *comp, None),
                             ("inplace_distinct", *comp, filled)]
    return out


def simulate_layer(spec, h: int, b: int, d: float, sync: str, prefilled: bool = False,
                   steps: int = SIM_STEPS, fallback: str = FALLBACK,
                   dense: bool = False) -> dict:
    """The simulator's counterpart of :func:`gpu_summary` (buffers warm in L2, steps 2 to
    the last but one), the values checked; ``prefilled``: the Lamport kernel with every slot
    written before the launch and its stores redirected (``lamport_prefill``: the simulator's
    staleness rule would re-poll a slot written again with the same value)."""
    import numpy as np

    from gpusim.engine import simulate
    from kernels_ir.ir import Op, instructions
    from measurements.lamport_prefill import prefilled_inputs, redirect_stores
    from measurements.probe import simulate_stepping

    prog = build(h, b, d, steps, spec, sync, fallback, dense=dense)
    kernel, inputs = prog.kernel, prog.inputs
    if prefilled:
        first = simulate(kernel, inputs, spec, l2_warm=True)
        kernel, inputs = redirect_stores(kernel), prefilled_inputs(prog, first.globals["hseq"])
    ins = list(instructions(kernel))
    bars = [i for i, x in enumerate(ins) if x.op is Op.BAR]
    if sync == "lamport":
        poll = next(i for i, x in enumerate(ins) if x.op is Op.LDG_VOLATILE)
        tp, stage_bar = {poll}, bars[0]
    else:
        poll, stage_bar = None, bars[1]
        tp = set(range(bars[0] + 1, len(ins)))
    store = next(i for i, x in enumerate(ins) if x.op is Op.STS and i > min(tp)
                 and x.srcs[0].buffer.name == "h_s")
    t2 = set(range(stage_bar + 1, len(ins)))
    groups = groups_of(h, b)
    nw = kernel.grid * (kernel.block // 32)
    rec: dict = {}          # step -> field -> per-warp array
    def arr(step, f):
        return rec.setdefault(step, {}).setdefault(f, np.full(nw, np.nan))

    def instr(self, sid, m, flat, polls, *rest):
        step = int(getattr(self, "step_index", -1))
        if step < 0:
            return
        ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
        if self.replaying:
            if sid == poll:
                n = rec.setdefault(step, {}).setdefault("_re", np.zeros(nw))
                n[ws] += 1
            return
        if self.static[sid].folded:
            return
        t = self.last[ws]
        for f, agg in (("t0", np.fmin), ("t3", np.fmax)):
            a = arr(step, f)
            a[ws] = agg(a[ws], t)
        if sid in tp:
            a = arr(step, "tp")
            a[ws] = np.fmin(a[ws], t)
        if sid in t2:
            a = arr(step, "t2")
            a[ws] = np.fmin(a[ws], t)
        if sid == store:       # one issue per group: the group index is the count so far
            cnt = rec[step].setdefault("_n", np.zeros(nw, int))
            re = rec[step].get("_re", np.zeros(nw))
            done = rec[step].setdefault("_re_done", np.zeros(nw))
            g = cnt[ws]
            for k in np.unique(g[g < MAX_GROUPS]):    # the warps at their group k
                w = ws[g == k]
                arr(step, f"e{k}")[w] = t[g == k]
                arr(step, f"q{k}")[w] = 1 + re[w] - done[w] if sync == "lamport" else 0
            done[ws] = re[ws]
            cnt[ws] += 1

    res = simulate_stepping(kernel, inputs, spec, instr)
    if not prefilled and not prog.max_rel_err(res.globals) <= 1e-3:
        raise AssertionError(f"h{h}-b{b} {sync}: the simulator's values differ from the reference")
    keep = sorted(rec)[2:-1]
    w = kernel.block // 32
    ns = 1e9 / spec.clock_hz
    fields = ("t0", "tp", "t2", "t3", *(f"e{g}" for g in range(groups)),
              *(f"q{g}" for g in range(groups)))
    st = {f: np.array([rec[s].get(f, np.full(nw, np.nan)) for s in keep]).reshape(
        len(keep), -1, w) * (1 if f.startswith("q") else ns) for f in fields}
    out = summarise(st, groups, float(res.per_step_s * 1e9))
    return out


def measure(out: str, argv: list, which: str | None = None) -> dict:
    from measurements.probe import record_layers

    which = which or "large"

    def show(key, r):
        print(key, json.dumps({k: v["summary"] for k, v in r.items()
                               if isinstance(v, dict) and "summary" in v},
                              default=lambda x: round(x, 1)), flush=True)
    name = RECORDS[which]
    if FALLBACK != "chunk0":
        name = name.replace(".json", f"_{FALLBACK}.json")
    dense = which == "dense"
    forms, waiting = (PASS_FORMS, PASS_WAITING_FORMS) if which == "passes" else (INPLACE_FORMS, ())
    run = (lambda *a: stamp_layer(*a, distinct=FALLBACK == "chunk0")) \
        if which == "partial" else \
        (lambda *a: stamp_layer(*a, dense=dense, forms=forms, waiting_forms=waiting))
    kernel = ("dense, wide loads: Lamport and barrier" if dense
              else "sparse, wide loads, optimal layout: Lamport and barrier")
    return record_layers(out, argv, name, LAYER_SETS[which], run, show,
                         gpu=None, steps=STEPS, fields=list(FIELDS), fallback=FALLBACK,
                         kernel=kernel, dense=dense)


def simulate_into(path: str) -> None:
    """Add the simulator's values (:func:`simulate_layer`) to the record at ``path``."""
    from measurements.probe import add_simulated

    def results(spec, rec):
        out = {}
        fb = rec.get("fallback", "chunk0")      # the records before the option: chunk 0
        dense = bool(rec.get("dense", False))
        for key, r in rec["results"].items():
            h, b, d = r["hidden"], r["batch"], r["density"]
            out[key] = {"lamport": simulate_layer(spec, h, b, d, "lamport", fallback=fb,
                                                  dense=dense),
                        "barrier": simulate_layer(spec, h, b, d, "barrier", dense=dense),
                        "prefilled": simulate_layer(spec, h, b, d, "lamport", prefilled=True,
                                                    fallback=fb, dense=dense)}
            if "lamport_stamped_distinct" in r:      # the distinct form: the kernel since then
                out[key]["lamport_distinct"] = simulate_layer(spec, h, b, d, "lamport",
                                                              fallback="previous")
                out[key]["prefilled_distinct"] = simulate_layer(
                    spec, h, b, d, "lamport", prefilled=True, fallback="previous")
            print(key, json.dumps(out[key], default=lambda x: round(x, 1)), flush=True)
        return out
    add_simulated(path, results, gpu=None, steps=SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main, take_layer_set

    argv, which = take_layer_set(list(sys.argv[1:] if argv is None else argv), LAYER_SETS)
    flag = [] if which is None else ["--layers", which]
    return probe_main(argv, __doc__, "measurements/exchange_groups.py",
                      lambda out, a: measure(out, a + flag, which), simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
