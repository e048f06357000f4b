"""The name table of every microbenchmark: :data:`MICROBENCHES` (name -> builder of keyword
arguments), :data:`SIZE_ARG` (the argument each benchmark scales with: two values give the slope)
and :func:`build`. The mechanism families (CSR gathers ``cmech_*``, Lamport exchange ``lmech_*``)
bring their own tables (:data:`.csr_gathers.REGISTRY`, :data:`.lamport.REGISTRY`), merged here.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import InputError
from . import csr_gathers, lamport
from .atomics import atomic_throughput, fence_cost, grid_barrier
from .core import Microbench
from .gathers import gather
from .grid_exchange import LAMPORT_OWNERS, broadcast, lamport_exchange
from .l2 import l2_latency, l2_latency_block, l2_latency_wide
from .pipes import CHAIN_OPS, SHFL_MIXES, bar_latency, chain_latency, shfl_throughput, stage_bar
from .polls import flag_round_trip, poll_storm, store_visibility
from .smem import smem_latency

__all__ = ["FENCE_BENCHES", "MICROBENCHES", "SIZE_ARG", "build"]

MICROBENCHES: dict[str, Callable[..., Microbench]] = {
    "smem_latency": smem_latency,
    "l2_latency": l2_latency,
    "flag_round_trip": flag_round_trip,
    "atomic_same": lambda **kw: atomic_throughput(same=True, **kw),
    "atomic_distinct": lambda **kw: atomic_throughput(same=False, **kw),
    "grid_barrier": grid_barrier,
    "flag_round_trip_same_sm": lambda **kw: flag_round_trip(same_sm=True, **kw),
    "flag_round_trip_delay16": lambda **kw: flag_round_trip(delay=16, **kw),
    "store_visibility": store_visibility,
    "poll_storm": poll_storm,
    "l2_latency_sys": lambda **kw: l2_latency(poll="volatile_sys", **kw),
    "flag_round_trip_sys": lambda **kw: flag_round_trip(poll="volatile_sys", **kw),
    "store_visibility_sys": lambda **kw: store_visibility(poll="volatile_sys", **kw),
    "poll_storm_sys": lambda **kw: poll_storm(load="volatile_sys", **kw),
    "poll_storm_rot": lambda **kw: poll_storm(regions=32, **kw),
    "poll_storm_plain": lambda **kw: poll_storm(load="plain", regions=32, **kw),
}
for _op in CHAIN_OPS:      # the SM pipes' latencies: one warp, a dependent chain
    MICROBENCHES[f"{_op}_latency"] = lambda _op=_op, **kw: chain_latency(op=_op, **kw)
MICROBENCHES["bar_latency"] = bar_latency
MICROBENCHES["stage_bar"] = stage_bar      # staging stores + CTA barrier (+ a load after it)
SHFL_BENCHES = {}   # the shuffle pipe: warps per SM, and what shares it (measurements/shfl_pipe.py)
for _w in (1, 2, 4, 8, 16, 32):
    SHFL_BENCHES[f"shfl_tput_w{_w}"] = lambda _w=_w, **kw: shfl_throughput(warps=_w, **kw)
for _m in SHFL_MIXES[1:]:
    for _w in (4, 8, 16):
        SHFL_BENCHES[f"shfl_tput_w{_w}_{_m}"] = (
            lambda _w=_w, _m=_m, **kw: shfl_throughput(warps=_w, mix=_m, **kw))
MICROBENCHES.update(SHFL_BENCHES)
for _c in (0, 1, 2, 4, 8):                 # by name, as measurements/stage_bar.py records them
    for _ld in ((False, True) if _c else (False,)):
        MICROBENCHES[f"stage_bar_c{_c}" + ("_ld" if _ld else "")] = (
            lambda _c=_c, _ld=_ld, **kw: stage_bar(chunks=_c, load=_ld, **kw))
FENCE_BENCHES = {}   # the fence: alone, after 1 / 8 stores, before an atomic; 1 or 132 CTAs;
for _c in (1, 132):  # one warp, or 8 warps that all store before a CTA barrier (the kernel's)
    for _s, _a, _w in ((0, False, 1), (1, False, 1), (8, False, 1), (0, True, 1),
                       (1, True, 1), (1, False, 8), (1, True, 8)):
        _n = f"fence_st{_s}" + ("_atom" if _a else "") + (f"_w{_w}" if _w > 1 else "") + \
            (f"_c{_c}" if _c > 1 else "")
        FENCE_BENCHES[_n] = (lambda _c=_c, _s=_s, _a=_a, _w=_w, **kw:
                             fence_cost(ctas=_c, stores=_s, atomic=_a, warps=_w, **kw))
FENCE_BENCHES["grid_barrier_nofence"] = lambda **kw: grid_barrier(fence=False, **kw)
FENCE_BENCHES["grid_barrier_c1"] = lambda **kw: grid_barrier(ctas=1, **kw)
for _c in (1, 2, 8, 33, 66):   # the arrive and spin alone against the number of CTAs
    FENCE_BENCHES[f"grid_barrier_nofence_c{_c}"] = (
        lambda _c=_c, **kw: grid_barrier(ctas=_c, fence=False, **kw))
FENCE_BENCHES["grid_barrier_nofence_flag"] = (
    lambda **kw: grid_barrier(fence=False, flag=True, **kw))
MICROBENCHES.update(FENCE_BENCHES)
MICROBENCHES["store_visibility_8"] = lambda **kw: store_visibility(flags=8, **kw)
for _k in (1, 2, 4, 8, 16, 32):   # the L2 partitions: max over k random lines
    MICROBENCHES[f"l2_latency_wide_{_k}"] = lambda _k=_k, **kw: l2_latency_wide(lanes=_k, **kw)
for _k in (1, 4, 8, 16, 32):      # the L2 partitions' interleave: one line .. a 4 KiB block
    MICROBENCHES[f"l2_latency_block_{_k}"] = (
        lambda _k=_k, **kw: l2_latency_block(block_lines=_k, **kw))
for _k in (1, 2, 4, 8, 16, 32):   # L1TEX cost of a warp load over k lines (CSR gathers)
    MICROBENCHES[f"gather_l1_{_k}"] = lambda _k=_k, **kw: gather(k=_k, **kw)
MICROBENCHES["gather_l1_8_s4"] = lambda **kw: gather(k=8, sectors=4, **kw)
MICROBENCHES["gather_l1_32_w4"] = lambda **kw: gather(k=32, width=4, **kw)
MICROBENCHES["gather_l1_8_s4_w4"] = lambda **kw: gather(k=8, sectors=4, width=4, **kw)
for _k in (1, 8, 32):
    MICROBENCHES[f"gather_l2_{_k}"] = lambda _k=_k, **kw: gather(k=_k, path="l2", **kw)
for _w in (4096, 16384):    # the exchange cost per word: fresh vs unchanged data
    for _f in (True, False):
        MICROBENCHES[f"broadcast_{'fresh' if _f else 'same'}_{_w}"] = (
            lambda _w=_w, _f=_f, **kw: broadcast(words=_w, fresh=_f, **kw))
for _st in ("none", "sts", "smem"):  # the persistent kernel's differences, at h8192-b4's size
    MICROBENCHES["broadcast_fresh_32768" + ("" if _st == "none" else f"_{_st}")] = (
        lambda _st=_st, **kw: broadcast(words=32768, stage=_st, **kw))
for _o in LAMPORT_OWNERS:  # the Lamport exchange probes (H1: "one", H2: the other two)
    for _d in (0, 16):
        MICROBENCHES[f"lamport_{_o}" + (f"_delay{_d}" if _d else "")] = (
            lambda _o=_o, _d=_d, **kw: lamport_exchange(owner=_o, delay=_d, **kw))

# The size argument each benchmark scales with (two values give the slope).
SIZE_ARG = {"smem_latency": "rounds", "l2_latency": "rounds", "flag_round_trip": "rounds",
            "atomic_same": "per_warp", "atomic_distinct": "per_warp", "grid_barrier": "rounds",
            "flag_round_trip_same_sm": "rounds", "flag_round_trip_delay16": "rounds",
            "store_visibility": "rounds", "poll_storm": "rounds", "l2_latency_sys": "rounds",
            "flag_round_trip_sys": "rounds", "store_visibility_sys": "rounds",
            "poll_storm_sys": "rounds", "poll_storm_rot": "rounds", "poll_storm_plain": "rounds"}
SIZE_ARG.update({k: "rounds" for k in MICROBENCHES
                 if k.startswith(("lamport_", "broadcast_", "l2_latency_", "store_visibility",
                                 "gather_"))})
SIZE_ARG.update({f"{op}_latency": "rounds" for op in CHAIN_OPS} | {"bar_latency": "rounds",
                                                                  "stage_bar": "rounds"})
SIZE_ARG.update({k: "rounds" for k in FENCE_BENCHES})
SIZE_ARG.update({k: "rounds" for k in SHFL_BENCHES})
SIZE_ARG.update({k: "rounds" for k in MICROBENCHES if k.startswith("stage_bar_")})


def build(name: str, size: int, **kwargs) -> Microbench:
    """Microbenchmark ``name`` at ``size`` (its :data:`SIZE_ARG`)."""
    if name not in MICROBENCHES:
        raise InputError(f"microbenchmark {name!r} is unknown; accepted: "
                         f"{', '.join(MICROBENCHES)}")
    return MICROBENCHES[name](**{SIZE_ARG[name]: size}, **kwargs)


# the CSR-gather (cmech_*) and Lamport-exchange (lmech_*) mechanism families
for _family in (csr_gathers.REGISTRY, lamport.REGISTRY):
    MICROBENCHES.update(_family)
    SIZE_ARG.update({k: "rounds" for k in _family})
