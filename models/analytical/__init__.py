"""Closed-form per-step time of every kernel and baseline, vectorised over configurations.

This is an independent witness of the simulator: it reads only the GPU spec (never
``gpusim.engine``) and the structure of the kernels as written in
``kernels_ir/kernels/sparse_rnn.py``. Every hardware number is a spec field; the counts in its
modules are instruction counts of that kernel, not fitted constants.

The modules mirror the simulator engine's units (``gpusim/engine/``), so that model and
simulator can be read side by side; each module's docstring documents its part of the model:

- :mod:`.variants`: the kernels and baselines priced (:class:`Variant`, :data:`VARIANTS`), why
  a kernel does not fit (:data:`REASONS`), the result type :class:`KernelTimes`, the constants
  the modules share.
- :mod:`.banks` (beside ``kernels_ir/banks.py`` and ``gpusim/engine/smem.py``): expected
  shared-memory wavefronts for random columns (occupancy tables, geometry classes, row
  wavefronts), exact ones of a mapping (:func:`mapping_wavefronts`).
- :mod:`.timing` (``gpusim/engine/timing.py``): per-SM resources, the chains of a row (loads,
  FFMAs, reduction, epilogue), its throughput bounds, the prefetch depths.
- :mod:`.l2` (``gpusim/engine/l2.py``): h staging and broadcast, polls, the L2 latency, the grid
  barrier, the sectors several SMs write and their hand-over.
- :mod:`.persistent`: a persistent kernel's step assembled from those terms, expected over
  random layers or for a concrete mapping (:func:`predict_mapping`).
- :mod:`.csr`: the CSR row-per-warp baseline, round by round.
- :mod:`.libraries`: the cuBLAS / cuSPARSE baselines (:data:`LIBRARY_NODES`, the graph nodes of
  a step) and the per-step baselines' dispatch.
- :mod:`.predict`: every kernel over arrays of configurations (:func:`predict_many`,
  :func:`speedup_summary`) and the report of one layer (:func:`predict_layer`, :class:`Report`).

Everything is re-exported here, so ``from models.analytical import ...`` names what it always
named.
"""

from __future__ import annotations

# the public names and the model's terms (tests and the measurement notes name private ones)
from .banks import (  # noqa: F401 (re-exports)
    _dense_slot_wavefronts,
    _expected_row_wavefronts,
    _occupancy_table,
    expected_max_occupancy,
    geometry_classes,
    mapping_wavefronts,
)
from .csr import (  # noqa: F401 (re-exports)
    TAG_SETS_PER_CYCLE,
    _csr_gathers,
    _csr_row_per_warp,
    _csr_tail_cycles,
)
from .l2 import (  # noqa: F401 (re-exports)
    LINE_WORDS,
    _barrier_cycles,
    _handover_cycles,
    _poll_phases,
    _stage_parts,
    deal_handovers,
    l2_latency,
    shared_lines,
)
from .libraries import (  # noqa: F401 (re-exports)
    LIBRARY_NODES,
    _baselines,
    library_class,
    library_matrix_bytes,
    library_path_parts,
)
from .persistent import (  # noqa: F401 (re-exports)
    _layer_arrays,
    _persistent_fast,
    _persistent_from_slots,
    predict_mapping,
)
from .predict import (  # noqa: F401 (re-exports)
    ENGINES,
    EXACT_DRAW_LIMIT,
    EXACT_NNZ_LIMIT,
    Report,
    Row,
    predict_layer,
    predict_many,
    speedup_summary,
)
from .timing import (  # noqa: F401 (re-exports)
    _cyc,
    _epilogue_cycles,
    _prefetch_cycles,
    _reduction_cycles,
    _row_chain,
    _row_throughput,
    _tail_cycles,
    prefetch_depths,
)
from .variants import (  # noqa: F401 (re-exports)
    BASELINES,
    PERSISTENT,
    REASONS,
    REDUCTION_STEPS,
    SIMULATED,
    VARIANTS,
    WARP,
    KernelTimes,
    Variant,
)

__all__ = ["Variant", "VARIANTS", "PERSISTENT", "BASELINES", "REASONS", "KernelTimes",
           "predict_many", "predict_mapping", "mapping_wavefronts", "expected_max_occupancy",
           "geometry_classes", "speedup_summary", "Row", "Report", "predict_layer",
           "EXACT_NNZ_LIMIT", "ENGINES", "SIMULATED"]
