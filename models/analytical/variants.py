"""The kernels and baselines the model prices, and what the other modules share.

:class:`Variant` (one kernel: persistent or a per-step baseline, sparse or dense, its
exchange, loads and layout), :data:`VARIANTS`, the groups :data:`PERSISTENT`,
:data:`SIMULATED` and :data:`BASELINES`, :data:`REASONS` (why a kernel does not fit), the
result of every prediction (:class:`KernelTimes`: arrays over configurations) and the
constants of the kernels' instruction counts (``WARP``, ``REDUCTION_STEPS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

WARP = 32
REDUCTION_STEPS = 5        # log2(32) butterfly steps (xor masks) per batch column


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    family: str            # "persistent" or "baseline"
    sparse: bool
    sync: str = ""
    wide_loads: bool = False
    layout: str = ""
    doc: str = ""
    # the Lamport step's closing __nanosleep in ns (None: the kernel's own,
    # kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_WAIT_NS; a recorded case's own where it differs)
    step_wait: int | None = None


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("sparse-naive", "persistent", True, "barrier", False, "naive",
            "sparse persistent: grid barrier, B scalar loads, columns in order"),
    Variant("sparse-wide", "persistent", True, "barrier", True, "naive",
            "+ wide (64/128-bit) shared loads"),
    Variant("sparse-bank", "persistent", True, "barrier", True, "optimal",
            "+ bank-aware layout (optimal)"),
    Variant("sparse-lamport", "persistent", True, "lamport", True, "optimal",
            "+ Lamport timestamps: all optimisations (Zhu et al. 2018)"),
    Variant("dense-persistent", "persistent", False, "lamport", True, "naive",
            "dense persistent (Diamos et al. 2016), Lamport exchange, wide loads"),
    Variant("cublas", "baseline", False, doc="cuBLAS per step: best of GEMM and B GEMVs + tanh"),
    Variant("cusparse", "baseline", True, doc="cuSPARSE CSR SpMV/SpMM per step + tanh"),
    Variant("csr-row-per-warp", "baseline", True,
            doc="CSR row-per-warp kernel per step, tanh fused"),
)}
PERSISTENT = tuple(n for n, v in VARIANTS.items() if v.family == "persistent")
# kernels that exist in the IR (kernels_ir.kernels): ``engine="sim"`` simulates these; the library
# baselines (cuBLAS, cuSPARSE) are black boxes and keep their model
SIMULATED = PERSISTENT + ("csr-row-per-warp",)
BASELINES = tuple(n for n, v in VARIANTS.items() if v.family == "baseline")

REASONS = ("", "registers", "shared memory", "batch not supported by wide loads",
           "batch too large", "fp16 column index")


@dataclass(frozen=True, slots=True)
class KernelTimes:
    """One kernel over many configurations: arrays of the same shape (NaN time = does not fit)."""

    name: str
    per_step_s: np.ndarray
    fits: np.ndarray
    reason: np.ndarray                  # index into REASONS
    setup_s: np.ndarray                 # once per launch (persistent: launch + weight load)
    breakdown: dict = field(default_factory=dict)  # term -> seconds per step (array)
    bound: np.ndarray | None = None     # persistent: which compute bound won (str array)

    def total_s(self, timesteps) -> np.ndarray:
        return self.setup_s + np.asarray(timesteps) * self.per_step_s
