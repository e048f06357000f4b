"""Rules that the engine and the analytical model both compute from spec values.

The engine (``gpusim.engine``) and the model (``models``) are independent witnesses and do not
import each other; a rule they must share lives here, beside the spec it reads. This file is one
of the fingerprinted model sources (``gpusim.measurements.MODEL_SOURCES``): changing it puts
every recorded draw in sample.
"""

from __future__ import annotations

import numpy as np

__all__ = ["group_request_cost", "sleep_period_ns", "sleep_wake_cycles"]


def group_request_cost(spec, sharers, q):
    """Cycles a load request costs its L2 contention group (arrays broadcast): the rate
    ``l2_group_private_request_cycles`` for a line that at most ``l2_group_private_sharers``
    SMs load, ``l2_group_request_cycles`` from ``l2_group_shared_sharers`` SMs on (log-linear
    between; ``l2_group_private_request_cycles`` 0: that rate for all), times
    ``1 + f x l2_group_span_per_doubling x log2(q)`` for a warp-instruction whose requests lie
    in ``q`` groups, ``f`` the same log-linear fraction of sharing (0 up to the private
    sharers, 1 from the shared ones on): the span costs only lines that many SMs load.
    Measured on the H100 (``measurements/l2_slice_map.py``): the split runs (one group, 5.5 to
    132 SMs a line: 0.58 to 0.45-0.53 cycles a request) and the queues runs (16 groups equally
    loaded, a warp load over 1 to 16 of them: 0.58 to 0.66, where the SMs a line grew with the
    span, 8 to 128). The H200's ``measurements/l2_group_rate.py`` parts them: a warp load over
    16 groups whose lines one or two SMs load costs 0.56 a request, over 1 group 0.55 and over
    32 groups 0.57; the same 16 groups on 2 lines each that all 132 SMs load, 0.64."""
    shared = float(spec.l2_group_request_cycles)
    private = float(getattr(spec, "l2_group_private_request_cycles", 0.0) or 0.0) or shared
    lo = np.log2(max(1.0, float(getattr(spec, "l2_group_private_sharers", 8) or 8)))
    hi = np.log2(max(2.0, float(getattr(spec, "l2_group_shared_sharers", 32) or 32)))
    n = np.maximum(np.asarray(sharers, dtype=np.float64), 1.0)
    f = np.clip((np.log2(n) - lo) / max(hi - lo, 1e-9), 0.0, 1.0)
    span = float(getattr(spec, "l2_group_span_per_doubling", 0.0) or 0.0)
    return (private + f * (shared - private)) * (
        1.0 + f * span * np.log2(np.maximum(np.asarray(q, dtype=np.float64), 1.0)))


def sleep_period_ns(ns):
    """The period in nanoseconds of the timer that a ``__nanosleep(ns)`` waits on: the smallest
    power of two at least ``ns`` (1 for 0). Measured on the H200 (``measurements/sleep_cost.py``,
    ``sleep_cost.json``: one warp, the wait and one IMAD in a loop, 64, 131, 257, 514 and 1025 ns
    an iteration for 50, 100, 200, 400 and 800 ns)."""
    ns = np.maximum(np.asarray(ns, dtype=np.float64), 1.0)
    return 2.0 ** np.ceil(np.log2(ns))


def sleep_wake_cycles(spec, ns, issue):
    """The cycle (from the launch) at which a warp that issues ``__nanosleep(ns)`` at cycle
    ``issue`` issues again: at the next tick of a timer of period :func:`sleep_period_ns`
    (global, in nanoseconds, at phase 0 when the launch starts) that comes more than
    ``sleep_tick_lead_ns`` after the issue; ``__nanosleep(0)`` keeps the warp ``sleep_min_ns``
    (arrays broadcast). What the GPU shows (``measurements/sleep_cost.py --stairs``,
    ``sleep_stairs.json``): a warp doing ``W`` ns of work between two waits of 200 ns spends
    256 ns an iteration for ``W`` up to about 245 ns, then 512, 768 and 1024: the iteration is
    rounded up to the period, not lengthened by a fixed wait (with 400 ns: 512 up to about 500,
    then 1024). NVIDIA's patent on thread-level sleep (US 10,817,295) describes the unit: the
    sleep time is mapped to one bit of a timer, and the thread wakes when that bit changes.
    That the timer is one for the whole GPU is an assumption: its unit is a nanosecond, not a
    cycle, every wake of 132 CTAs reads ``%globaltimer`` at the same phase of the period
    (``sleep_phase.py``), and 132 CTAs that exchange 33 or 66 lines every round with a 400 ns
    wait between (``lamport_pollers.py --wait``) run a round in one period (511-523 ns). No
    minimum holds for a wait with an argument: a warp that issues it just before a tick wakes
    on that tick (no wake of ``sleep_phase.py`` falls after its tick)."""
    clock = float(spec.clock_hz) * 1e-9                      # cycles per nanosecond
    t = np.asarray(issue, dtype=np.float64) / clock
    period = sleep_period_ns(ns)
    lead = float(spec.sleep_tick_lead_ns)
    tick = (np.floor((t + lead) / period) + 1.0) * period
    wake = np.where(np.asarray(ns) > 0, tick, t + float(spec.sleep_min_ns))
    return wake * clock
