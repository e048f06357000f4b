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
  ``c_0 = 0``, and the ``c_1`` it writes is checked along with ``h_1``).

The values are checked against the float64 reference of exactly the steps simulated; a mismatch
raises :class:`kernels_ir.errors.ValueMismatchError` (a time is never reported for wrong values).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels_ir.errors import ValueMismatchError

__all__ = ["Priced", "price_program", "PERSISTENT_L2_WARM"]

# A persistent launch finds its buffers (x_proj, the h slots, the weights' arrays) in L2, smallest
# first while they fit (``simulate(l2_warm=True)``, :func:`gpusim.engine.l1.resident_buffers`):
# in a network the input projection's GEMM writes x_proj just before the recurrent kernel, and the
# campaign's runner rewrites x_proj and the h slots before every timed launch
# (``gpusim.backends.cupy_backend.run_program``), so the GPU's per-step times are of that state.
# Cold, the simulator paid a DRAM miss on every step's first x_proj load, which the kernels whose
# heads fit in one CTA (no polls to hide it behind) showed as 0.25 us a step too slow.
PERSISTENT_L2_WARM = True


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
