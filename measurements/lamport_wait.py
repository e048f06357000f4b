"""What the Lamport kernel's wait is made of: the whole kernel with its polls slowed down, or
with its stores landing on slots that already hold their values, on the GPU and in the
simulator.

    PYTHONPATH=. python3 measurements/lamport_wait.py --out $OUT     # GPU: lamport_wait.json
    python measurements/lamport_wait.py --simulate measurements/h100/lamport_wait.json

Why: ``lamport_prefill.py`` found that the Lamport kernel's error is its waiting (380-1030 ns
a step on the GPU against 0-310 in the simulator), while the same kernel with nothing to wait
for is priced within 5-12%. This probe (built here, a probe: not a calibration benchmark)
separates two explanations of the long wait by the way each responds to a change of the kernel:

- the stores are slow to become visible because the lines they land on are being polled (the
  polls of 132 SMs delay the stores): then stores into polled lines cost something even when no
  poll waits (``inplace`` slower than ``prefilled``), and polling less often shortens the wait
  (``backoff_*`` no slower, or faster, than ``normal``);
- the stores are visible as the simulator says but the polls see them late: then ``inplace``
  costs what ``prefilled`` does, and a back-off lengthens the wait by about half of it, as in
  the simulator.

Variants of the sparse Lamport kernel (wide loads, optimal layout) per layer:

- ``normal``: the campaign's kernel and measurement (slots hold the sentinel);
- ``prefilled``: every slot already holds its value and the h stores go to a buffer of their
  own (``lamport_prefill.redirect_stores``): nothing waits, no store lands on a polled line;
- ``inplace``: every slot already holds its value and the stores write the same values into the
  slots, while the other CTAs poll them: nothing waits, every store lands on a polled line;
- ``backoff_<n>``: ``normal`` with ``n`` dependent FFMAs (about ``4 n`` cycles) after every poll
  of a group that still saw a sentinel, before the warp polls again (the first poll of a group
  is not delayed).

Per-step time = the slope between T = 128 and T' = 32 steps (GPU: median of ``REPEATS``
interleaved launches; values checked: the normal and back-off kernels against the float64
reference, the prefilled ones' stores against the slots) or the simulator's steady state over
4 steps (buffers warm in L2, as on the GPU).
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.lamport_prefill import (  # noqa: E402
    SEED,
    SHORT_STEPS,
    SIM_STEPS,
    STEPS,
    check_sink,
    prefilled_inputs,
    redirect_stores,
    simulate_pair,
)

# (hidden, batch, density), seed 7 as in lamport_prefill: three layers whose GPU wait is long
# (680-1030 ns), one shorter (450) and one that waits nothing (the control)
LAYERS = ((2824, 1, 0.0211), (1336, 2, 0.0234), (2944, 2, 0.135), (944, 4, 0.0198),
          (1416, 8, 0.425))
BACKOFFS = (32, 128, 512)
VARIANTS = ("normal", "prefilled", "inplace") + tuple(f"backoff_{n}" for n in BACKOFFS)
REPEATS, WARMUP = 9, 2
SENTINEL_CHECK = 12345.0     # the back-off's chain never reaches it: it only keeps the chain live


@contextlib.contextmanager
def backoff(n: int):
    """Kernels built inside this block get ``n`` dependent FFMAs at the end of every
    ``lamport_poll`` loop body, executed only when the warp polls again (its vote said a
    sentinel was seen). The chain starts from the first word the poll loaded (a value of
    unknown range: started from the thread index, the compiler proved the comparison below
    false and removed the chain) and its result feeds the loop condition (the warp polls again only
    if the chain did not reach a value that no finite start reaches after 32 or more halvings
    towards 0.5; the polled words are h values or the sentinel), so that it is not removed as
    dead code (an OR into the condition, which is true there, was removed); the kernel
    computes the same values."""
    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, PRED, Instr, Op, walk

    original = Builder.while_

    @contextlib.contextmanager
    def while_(self, spin_limit: int = 1 << 20, label: str = "spin"):
        with original(self, spin_limit, label) as handle:
            yield handle
            if label == "lamport_poll" and n > 0:    # still inside the loop body's block
                cond = handle.cond
                j = getattr(self, "_backoffs", 0)
                self._backoffs = j + 1
                seed = next(s.dsts[0] for s in walk(tuple(self._stack[-1]))
                            if isinstance(s, Instr) and s.op is Op.LDG_VOLATILE)
                with self.if_(cond):
                    f = self.fadd(seed, 0.0, dst=self.reg(F32, f"bo_f{j}"))
                    for _ in range(n):
                        self.ffma(f, 0.5, 0.25, dst=f)
                    ok = self.fsetp("ne", f, SENTINEL_CHECK, dst=self.reg(PRED, f"bo_ok{j}"))
                    self.pand(cond, ok, dst=cond)

    Builder.while_ = while_
    try:
        yield
    finally:
        Builder.while_ = original


def build(h: int, b: int, d: float, steps: int, spec, n_backoff: int = 0):
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer
    layer = make_layer(h, b, d, steps, SEED)
    with backoff(n_backoff):
        # the form measured: without the step's closing wait (sparse_rnn.LAMPORT_STEP_WAIT_NS)
        return build_sparse_rnn(layer, spec, sync="lamport", wide_loads=True, layout="optimal",
                                step_wait=0)


def _short(prog, spec, n_backoff: int):
    from gpusim.backends.cupy_backend import _short_program
    with backoff(n_backoff):
        return _short_program(prog, SHORT_STEPS, spec)


def _gpu_layer(runner, h: int, b: int, d: float, spec) -> dict:
    """Per-step time of every variant of one layer (GPU)."""
    import numpy as np

    from gpusim.backends.cupy_backend import _summary, _time_launch, launch_program_checked
    cp = runner.cp
    setups = {}     # variant -> {"long"/"short": (compiled, buffers, reset)}
    filled, base = {}, {}
    for k in ("long", "short"):
        p = build(h, b, d, STEPS, spec)
        base[k] = p if k == "long" else _short(p, spec, 0)
        comp, bufs, out, _ = launch_program_checked(runner, base[k])
        if np.any(out["hseq"].view(np.int32) == np.int32(-2 ** 31)):
            raise AssertionError(f"{k}: a slot still holds the sentinel after the launch")
        filled[k] = cp.asarray(out["hseq"])
        pristine = cp.asarray(base[k].inputs["hseq"])

        def reset_normal(bb, src=pristine):
            bb["hseq"][...] = src
            bb["__err"][...] = 0
        setups.setdefault("normal", {})[k] = (comp, bufs, reset_normal)

        kern = redirect_stores(base[k].kernel)
        c = runner.compile(kern)
        runner.check_grid(c)
        pre = runner.device_buffers(c, prefilled_inputs(base[k], out["hseq"]))

        def reset_pre(bb):
            bb["hsink"][...] = 0
            bb["__err"][...] = 0
        setups.setdefault("prefilled", {})[k] = (c, pre, reset_pre)

        c2 = runner.compile(base[k].kernel)
        inp = dict(base[k].inputs)
        inp["hseq"] = np.asarray(out["hseq"]).view(np.float32).reshape(-1).copy()
        ip = runner.device_buffers(c2, inp)

        def reset_in(bb, src=filled[k]):
            bb["hseq"][...] = src
            bb["__err"][...] = 0
        setups.setdefault("inplace", {})[k] = (c2, ip, reset_in)

        for n in BACKOFFS:
            pb = build(h, b, d, STEPS, spec, n)
            pb = pb if k == "long" else _short(pb, spec, n)
            cb, bb_, _, _ = launch_program_checked(runner, pb)
            pr = cp.asarray(pb.inputs["hseq"])

            def reset_bo(bb, src=pr):
                bb["hseq"][...] = src
                bb["__err"][...] = 0
            setups.setdefault(f"backoff_{n}", {})[k] = (cb, bb_, reset_bo)

    for v in VARIANTS:      # warm-up
        for k in ("long", "short"):
            for _ in range(WARMUP):
                _time_launch(cp, runner, *setups[v][k])
    times = {v: {"long": [], "short": []} for v in VARIANTS}
    for _ in range(REPEATS):     # interleaved, so drifts hit every variant alike
        for v in VARIANTS:
            for k in ("long", "short"):
                times[v][k].append(_time_launch(cp, runner, *setups[v][k]))
    res = {}
    for v in VARIANTS:
        comp, bufs, _ = setups[v]["long"]
        got = {n: cp.asnumpy(x) for n, x in bufs.items()}
        if v == "prefilled":
            check_sink(base["long"], cp.asnumpy(filled["long"]), got["hsink"], "GPU")
        elif v == "inplace":
            if not np.array_equal(got["hseq"].view(np.int32),
                                  cp.asnumpy(filled["long"]).view(np.int32)):
                raise AssertionError("inplace: the slots changed")
        elif not float(base["long"].max_rel_err(got)) <= 1e-3:
            raise AssertionError(f"{v}: values differ from the reference after timing")
        sl, ss = _summary(times[v]["long"]), _summary(times[v]["short"])
        res[v] = {"per_step_s": (sl["median"] - ss["median"]) / (STEPS - SHORT_STEPS),
                  "t_long": sl, "t_short": ss}
    return res


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        print(key + "  " + "  ".join(f"{v} {r[v]['per_step_s'] * 1e9:6.0f}"
                                     for v in VARIANTS) + " ns", flush=True)

    return record_layers(out, argv, "lamport_wait.json", LAYERS,
                         lambda runner, spec, h, b, d: _gpu_layer(runner, h, b, d, spec), show,
                         steps=[STEPS, SHORT_STEPS], repeats=REPEATS, seed=SEED,
                         variants=list(VARIANTS))


def simulate_layer(spec, h: int, b: int, d: float) -> dict:
    """The simulator's per-step time of every variant (values checked)."""
    import numpy as np

    from gpusim.engine import simulate
    from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE, max_rel_err

    prog = build(h, b, d, SIM_STEPS, spec)
    out, first = simulate_pair(spec, prog)
    inp = dict(prog.inputs)
    inp["hseq"] = np.asarray(first.globals["hseq"]).view(np.float32).reshape(-1).copy()
    inplace = simulate(prog.kernel, inp, spec, l2_warm=True)
    out["inplace"] = {"per_step_s": float(inplace.per_step_s)}
    for n in BACKOFFS:
        pb = build(h, b, d, SIM_STEPS, spec, n)
        r = simulate(pb.kernel, pb.inputs, spec, l2_warm=True)
        if not max_rel_err(pb.outputs(r.globals), pb.reference()) <= VALUE_TOLERANCE:
            raise AssertionError(f"h{h}-b{b} backoff {n}: simulated values differ")
        out[f"backoff_{n}"] = {"per_step_s": float(r.per_step_s)}
    return out


def _simulated(spec, rec) -> dict:
    res = {}
    for key, r in rec["results"].items():
        s = simulate_layer(spec, r["hidden"], r["batch"], r["density"])
        res[key] = s
        print(key + "  sim " + "  ".join(f"{v} {s[v]['per_step_s'] * 1e9:6.0f}"
                                        for v in VARIANTS) + " ns", flush=True)
        if r.get("status") == "ok":
            print(" " * len(key) + "  GPU " + "  ".join(
                f"{v} {r[v]['per_step_s'] * 1e9:6.0f}" for v in VARIANTS) + " ns", flush=True)
    return res


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main
    return probe_main(argv, __doc__, "measurements/lamport_wait.py", measure,
                      lambda path: add_simulated(path, _simulated, steps=SIM_STEPS))


if __name__ == "__main__":
    raise SystemExit(main())
