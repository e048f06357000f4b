"""Microbenchmarks written in the IR, so that the GPU and the simulator run the same code.

One module per unit of the simulator engine (:mod:`gpusim.engine`) that its benchmarks isolate:

- :mod:`.core` - :class:`Microbench` (kernel, initial buffers, timed ops), how a benchmark is
  timed (two sizes, the slope) and the helpers the families share;
- :mod:`.smem` - the shared-memory pipe (``smem_latency``);
- :mod:`.gathers` - gathers through L1TEX (``gather_*``); :mod:`.csr_gathers` - the CSR
  baseline's gathers taken apart (``cmech_*``);
- :mod:`.l2` - L2 latency and the split L2's partitions (``l2_latency*``);
- :mod:`.polls` - flags, store visibility and poll traffic (``flag_round_trip*``,
  ``store_visibility*``, ``poll_storm*``, both poll scopes);
- :mod:`.atomics` - L2 atomics and the grid barrier (``atomic_*``, ``grid_barrier``);
- :mod:`.grid_exchange` - the persistent kernels' h exchange without the mat-vec
  (``lamport_*``, ``broadcast_*``);
- :mod:`.lamport` - the Lamport exchange one factor at a time (``lmech_*``; builders in
  :mod:`.lamport_watch`, :mod:`.lamport_kernel`, :mod:`.lamport_writers`);
- :mod:`.registry` - :data:`MICROBENCHES` (name -> builder), :data:`SIZE_ARG` (the argument each
  scales with) and :func:`build` (``build(name, size, **kw)``).

The builders and the registry are importable from here
(``from kernels_ir.kernels import microbench as mb``; ``mb.build``, ``mb.MICROBENCHES``).
"""

from .atomics import atomic_throughput, grid_barrier
from .core import LINE_WORDS, WARP, Microbench, _positive
from .gathers import GATHER_LINES, gather
from .grid_exchange import LAMPORT_OWNERS, LAMPORT_SENTINEL, broadcast, lamport_exchange
from .l2 import l2_latency, l2_latency_block, l2_latency_wide
from .polls import flag_round_trip, poll_storm, store_visibility
from .registry import MICROBENCHES, SIZE_ARG, build
from .smem import smem_latency

__all__ = ["Microbench", "smem_latency", "l2_latency", "l2_latency_wide", "l2_latency_block",
           "flag_round_trip", "atomic_throughput",
           "grid_barrier", "store_visibility", "poll_storm", "lamport_exchange", "broadcast",
           "gather",
           "MICROBENCHES",
           "build", "SIZE_ARG", "WARP", "LINE_WORDS", "GATHER_LINES", "LAMPORT_OWNERS",
           "LAMPORT_SENTINEL", "_positive"]
