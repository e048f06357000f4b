"""Real-GPU backends. Nothing here imports CuPy or torch at import time: each backend does it
lazily and raises :class:`kernels_ir.errors.BackendUnavailable` (one clear message, exit 2 in the
CLI) when the library or a GPU is missing.

- :mod:`gpusim.backends.cupy_backend` - generated CUDA through CuPy (persistent kernels, the CSR
  baseline, microbenchmarks): values checked, bounded spins, event timing.
- :mod:`gpusim.backends.baselines` - cuBLAS / cuSPARSE per-step baselines in torch CUDA graphs.
"""
