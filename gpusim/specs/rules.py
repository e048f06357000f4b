"""Rules that the engine and the analytical model both compute from spec values.

The engine (``gpusim.engine``) and the model (``models``) are independent witnesses and do not
import each other; a rule they must share lives here, beside the spec it reads. This file is one
of the fingerprinted model sources (``gpusim.measurements.MODEL_SOURCES``): changing it puts
every recorded draw in sample.
"""

from __future__ import annotations

import numpy as np

__all__ = ["group_request_cost", "sleep_cycles"]


def group_request_cost(spec, sharers, q):
    """Cycles a load request costs its L2 contention group (arrays broadcast): the rate
    ``l2_group_private_request_cycles`` for a line that at most ``l2_group_private_sharers``
    SMs load, ``l2_group_request_cycles`` from ``l2_group_shared_sharers`` SMs on (log-linear
    between; ``l2_group_private_request_cycles`` 0: that rate for all), times
    ``1 + l2_group_span_per_doubling x log2(q)`` for a warp-instruction whose requests lie in
    ``q`` groups. Measured on the H100 (``measurements/l2_slice_map.py``): the split runs (one
    group, 5.5 to 132 SMs a line: 0.58 to 0.45-0.53 cycles a request) and the queues runs (16
    groups equally loaded, a warp load over 1 to 16 of them: 0.58 to 0.66)."""
    shared = float(spec.l2_group_request_cycles)
    private = float(getattr(spec, "l2_group_private_request_cycles", 0.0) or 0.0) or shared
    lo = np.log2(max(1.0, float(getattr(spec, "l2_group_private_sharers", 8) or 8)))
    hi = np.log2(max(2.0, float(getattr(spec, "l2_group_shared_sharers", 32) or 32)))
    n = np.maximum(np.asarray(sharers, dtype=np.float64), 1.0)
    f = np.clip((np.log2(n) - lo) / max(hi - lo, 1e-9), 0.0, 1.0)
    span = float(getattr(spec, "l2_group_span_per_doubling", 0.0) or 0.0)
    return (private + f * (shared - private)) * (
        1.0 + span * np.log2(np.maximum(np.asarray(q, dtype=np.float64), 1.0)))


def sleep_cycles(spec, ns):
    """Cycles a warp's ``__nanosleep(ns)`` keeps it from issuing: ``sleep_scale x ns``
    nanoseconds, at least ``sleep_min_ns``, at the SM clock (``clock_hz``); measured on the
    H200 (``measurements/sleep_cost.py``: 1.26 times the argument from 100 to 800 ns, 39 ns for
    0)."""
    wait = np.maximum(float(spec.sleep_scale) * np.asarray(ns, dtype=np.float64),
                      float(spec.sleep_min_ns))
    return wait * 1e-9 * float(spec.clock_hz)
