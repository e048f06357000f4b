"""One way to price a kernel of the IR on the simulator: the per-step time a GPU would take.

``gpusim predict --engine sim`` and ``gpusim crosscheck`` both call :func:`price_program`, so a
kernel is timed the same way whether it is predicted for a new layer or compared with a recorded
measurement:

- a persistent kernel (sparse or dense, :class:`kernels_ir.kernels.sparse_rnn.RNNProgram`) runs
  its whole sequence in one launch; its per-step time is the simulator's steady state of the
  steps it simulated (``sample_steps`` of them, the rest extrapolated, or all). The launch
  starts with the layer's buffers in L2 (:data:`PERSISTENT_L2_WARM`);
- the CSR row-per-warp kernel (:class:`kernels_ir.kernels.csr_baseline.CSRProgram`) is one launch
  per step inside a CUDA graph: one launch is simulated with L2 warm (the previous step's launch
  left the layer there) and its per-step time is the launch's cycles plus the spec's graph-node
  overhead instead of a stand-alone launch. That launch is the first step (``h_0``; for the LSTM
  ``c_0 = 0``, and the ``c_1`` it writes is checked along with ``h_1``). A grid larger than the
  CTAs the registers let an SM hold runs in waves (:func:`gpusim.engine.simulate`).

The values are checked against the float64 reference of exactly the steps simulated; a mismatch
raises :class:`kernels_ir.errors.ValueMismatchError` (a time is never reported for wrong values).

How many steps a persistent kernel needs (:func:`price_persistent`): a simulated step's time
scatters by a few hundred cycles from one step to the next (a poll that just misses its data
waits another round trip; a Lamport kernel of 2,000-cycle steps moves by 10-25% a step), while
a measured per-step time is the mean of 96 steps. A few sampled steps therefore estimate the
mean with an error of their own (the mean of two steady steps was 41% off on the worst recorded
case). The kernel is first simulated for :data:`FIRST_STEPS` steps; when its steps are short it
is simulated again, long enough that its steady steps add up to :data:`STEADY_CYCLES`, with at
most :data:`STEPS_MAX` steps and :data:`STEPS_WORK` warp-instructions in that second pass. The
scatter and its cost are recorded in ``benchmarks/step_sampling.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels_ir.errors import ValueMismatchError

__all__ = ["Priced", "price_program", "price_persistent", "steps_needed", "PERSISTENT_L2_WARM",
           "STEADY_CYCLES", "STEPS_MAX", "FIRST_STEPS"]

# A persistent launch finds its buffers (x_proj, the h slots, the weights' arrays) in L2, smallest
# first while they fit (``simulate(l2_warm=True)``, :func:`gpusim.engine.l1.resident_buffers`):
# in a network the input projection's GEMM writes x_proj just before the recurrent kernel, and the
# campaign's runner rewrites x_proj and the h slots before every timed launch
# (``gpusim.backends.cupy_backend.run_program``), so the GPU's per-step times are of that state.
# Cold, the simulator paid a DRAM miss on every step's first x_proj load, which the kernels whose
# heads fit in one CTA (no polls to hide it behind) showed as 0.25 us a step too slow.
PERSISTENT_L2_WARM = True

# Sampling of a persistent kernel's steps (an estimator's settings, not hardware numbers; see the
# module docstring and benchmarks/step_sampling.md): the first pass simulates FIRST_STEPS steps;
# the kernel is simulated again when its steady steps are short, so that they add up to about
# STEADY_CYCLES (a step's scatter of ~400 cycles then leaves a standard error of a few percent of
# the mean), never more than STEPS_MAX steps, and no more than STEPS_WORK warp-instructions in
# the second pass (about 4 s on one core of a 2020s server: the long steps that it cuts short
# scatter least, 1-8% a step against 10-25% for steps of 2,000 cycles).
FIRST_STEPS = 3
STEADY_CYCLES = 32_000
STEPS_MAX = 21
STEPS_WORK = 2_000_000


@dataclass(frozen=True, slots=True)
class Priced:
    per_step_s: float     # steady-state time of one step (s)
    setup_s: float        # launch + what lies outside the steady steps (s); 0 for per-step kernels
    max_rel_err: float    # values vs the float64 reference over the simulated steps
    result: object        # the gpusim.engine.SimResult


def price_program(prog, spec, *, sample_steps: int | None = None, what: str = "kernel",
                  check: bool = True) -> Priced:
    """Simulate ``prog`` on ``spec`` and return its per-step time (see the module docstring)."""
    from gpusim.engine import simulate
    from kernels_ir.kernels.csr_baseline import CSRProgram
    from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE, max_rel_err

    if isinstance(prog, CSRProgram):
        h0 = np.asarray(prog.layer.h0)
        res = simulate(prog.kernel, prog.step_inputs(0, h0), spec, l2_warm=True)
        H, C = prog.states_reference()
        h1, c1 = prog.step_outputs(res.globals)
        err = max_rel_err(np.stack([H[0], h1]), H[:2])
        if C is not None:
            err = max(err, max_rel_err(np.stack([C[0], c1]), C[:2]))
        per = float(res.time_s - res.launch_overhead_s + spec.graph_launch_overhead_s)
        setup = 0.0
    else:
        res = simulate(prog.kernel, prog.inputs, spec, sample_steps=sample_steps,
                       l2_warm=PERSISTENT_L2_WARM)
        done = min(int(res.steps), prog.timesteps)
        err = max_rel_err(prog.outputs(res.globals)[: done + 1], prog.reference()[: done + 1])
        per = float(res.per_step_s)
        setup = float(res.time_s) - res.total_steps * per
    if check and not err <= VALUE_TOLERANCE:
        raise ValueMismatchError(f"{what} (simulated): values differ from the float64 reference: "
                            f"max_rel_err={err:.3g} > {VALUE_TOLERANCE:g}")
    return Priced(per, setup, float(err), res)


def steps_needed(step_cycles, warp_instructions: int = 0) -> int:
    """Steps to simulate so that the steady steps (all but the first, an even number of them:
    :func:`gpusim.engine.timing.steady_step_cycles`) add up to :data:`STEADY_CYCLES`, given the
    ``step_cycles`` of a first pass and its ``warp_instructions``; at most :data:`STEPS_MAX`
    steps and :data:`STEPS_WORK` warp-instructions, at least that pass's length."""
    from gpusim.engine.timing import steady_step_cycles

    done = len(step_cycles)
    if done == 0:
        return 0
    mean = steady_step_cycles(step_cycles)
    steady = int(np.ceil(STEADY_CYCLES / max(mean, 1.0)))
    steady += steady % 2
    want = min(STEPS_MAX, 1 + steady)
    if warp_instructions > 0:
        affordable = int(STEPS_WORK * done // warp_instructions)
        want = min(want, affordable - (affordable - 1) % 2)   # odd: an even steady window
    return int(max(done, want))


def price_persistent(build, spec, *, what: str = "kernel", first: Priced | None = None,
                     check: bool = True) -> Priced:
    """The per-step time of a persistent kernel with enough steps simulated.

    ``build(T)`` returns the program of the layer with ``T`` timesteps (same layer, same seed).
    ``first``: a pass already priced (all of its steps simulated), else one of
    :data:`FIRST_STEPS` steps is. When :func:`steps_needed` asks for more steps than that pass
    has, the kernel is simulated again with that many, and that pass prices it (every step of it
    simulated and values-checked).
    """
    if first is None:
        first = price_program(build(FIRST_STEPS), spec, what=what, check=check)
    want = steps_needed(first.result.step_cycles, first.result.warp_instructions)
    if want <= int(first.result.steps):
        return first
    return price_program(build(want), spec, what=what, check=check)
