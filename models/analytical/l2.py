"""The exchange of h through L2: staging, broadcast, polls, the grid barrier, shared sectors.

The model's side of ``gpusim/engine/l2.py``: L2 round trips over near and far partitions
(:func:`l2_latency`), polls that must be served after the data reached L2, the counter's
same-address atomics, the slices' bandwidth, and the hand-over of a line between SMs.
The terms of the step (:mod:`.persistent` adds them up) that live here:

- ``stage`` (:func:`_stage_parts`, ``_stage_h``): HBASE, TID4 and the chunks' zeroing, then
  per group of ``STAGE_GROUP`` 128-bit chunks the dependent index ops, the loads issued back to
  back (one L2 round trip per group), for Lamport the dependent checks as SASS issues them
  (``gpusim.engine.lowering``: one ISETP per word, its POR and BITCAST folded; ISETP and POR
  when the slot ends inside a group, the PAND folded), the STS, and the CTA barrier, which
  releases once
  the shared pipe has served the last round's stores (:func:`_stage_release`). INT ops of the
  sub-partition's two warps share the INT pipe after a barrier (``ig``/``ia``). ``broadcast``:
  all SMs read h through the L2 slices and contention groups; the Lamport kernel's pipelined
  with the rounds (one round's service, or the whole service less the later rounds' trips),
  the barrier kernel's the whole service less its CTAs' release spread.
- ``sync``: Lamport: at least one extra poll round (the first poll of a group almost always
  misses on the GPU), re-polled at once, and more when the busiest warp's stores are seen
  (``l2_store_visibility_cycles`` after the slice serves them, then ``l2_poll_sharer_cycles``
  per SM that polled the line before, every SM here, as the engine's ``L2.seen_delay``) later
  than that (the idlest warp's first poll comes a poll's ``lead`` after its own store); ``spread`` =
  FIFO stagger + per-warp wavefront difference of the mapping + the h broadcast (the servers
  serve the SMs' staging loads in order of arrival, so the SMs start their rows up to ``bw``
  cycles apart). A warp's load of its
  own pending store waits instead of re-polling (never longer than a re-poll). Lines of the
  exchanged h written by several SMs (:func:`shared_lines`: where a CTA's words do not fill
  whole 128-byte lines) are handed to each further writer SM by one GPU-wide server, one every
  ``l2_line_handover_cycles`` (:func:`_handover_cycles`): the exchange waits for the last
  hand-over when the server is still busy after the last store of the step.
  Barrier (:func:`_barrier_cycles`): BAR, FENCE (its latency from issue, or its after-store
  time from thread 0's store acknowledgement, whichever ends later),
  the atomic arrive (``l2_atomic_latency / 2``) behind what the counter's FIFO has not drained
  of the other SMs' arrivals (``(sm_count - 1) * l2_atomic_same_address_cycles`` less the
  spread of the arrivals: poll phases and the other CTAs' shorter work), then the last CTA to
  notice: the slowest CTA's own polls or another CTA one poll phase late
  (:func:`_poll_phases`), the reply, the CTA barrier. After the barrier the h broadcast only
  costs what the slices have not drained while the CTAs were being released.
"""

from __future__ import annotations

import functools

import numpy as np

from kernels_ir.codegen_cuda import SPIN_TESTS
from kernels_ir.kernels.sparse_rnn import STAGE_GROUP

from .. import capacity as cap
from .timing import _cyc, _loop_edge_cycles, _prefetch_cycles, _test_cycles
from .variants import WARP


def _stage_parts(spec, N, B, R, sync):
    """h_t from L2 into shared memory (_stage_h), cycles: (setup, per-round, poll, rounds, bw).

    setup: HBASE, TID4 and the chunks' zeroing, 2 G register pairs (INT, ``ig`` apart; SASS
    zeroes a pair with one CS2R, ``gpusim.engine.lowering``); per group round the IMAD and
    IADD (dependent INT ops ``ia`` apart) and the G loads back to back; when the slot is not a
    multiple of the group's words also G ISETPs (``inside``) and, for chunks 1..G-1, the
    selected address (IADD, SEL); poll: the L2 round trip of the group's first load then
    (Lamport) the dependent checks as SASS issues them (``gpusim.engine.lowering``), 4 G (one
    ISETP a word, BITCAST and POR folded) or 8 G with the ``inside`` guard (ISETP and POR, the
    PAND folded), the vote ``predicate_branch_cycles`` after the last check and the poll loop's
    exit test (the engine's loop edges); then G STS. With two groups or more a barrier kernel's
    round ends with the rolled group loop's edge (the Lamport kernel's group loop is unrolled).
    bw: every SM reads all of h through the L2 slices; their service ``S`` is
    ``sm_count * slot * 4`` bytes at ``l2_slices * l2_bytes_per_cycle_per_slice``, or
    ``sm_count`` requests for each line of the slot at the busiest contention group
    (:func:`group_cycles`; h's lines start anywhere in the group map, as step t's slot lies t
    slots into the sequence buffer), whichever is slower. The broadcast is pipelined with the
    group rounds: the servers take requests in order of arrival, so the first round's requests,
    issued together, stagger the warps by the round's service ``S / rounds``, and each later
    round's requests then arrive as spread as they were served. A round costs its round trip
    and checks (``trip``), and the broadcast adds one round's service, ``S / rounds``, unless
    the servers stay busy all along: then the whole ``S``, less what the rounds' trips after the
    first cover. What the GPU shows (``measurements/h200/exchange_passes.json``,
    ``exchange_groups*.json``: stamps per staging group): a later group costs about its
    unloaded round trip (the unrolled Lamport kernel's 271-345 ns against ``trip`` 267 ns), not
    a round's share of ``S`` more; summing ``S`` with every round's trip put the Lamport
    exchange 281-736 ns over ``exchange_passes.json`` (its four layers, every slot written), the
    pipelined broadcast 45-145 ns under (its whole step -4% to +5%).
    The barrier kernel keeps the sum, less the range of the CTAs' release after the grid
    barrier (:func:`_poll_phases`), which the service overlaps. Its later groups cost their
    trip too (231-344 ns against 232-254), but its exchange carries about 200 ns more than the
    pipelined broadcast gives: priced that way the barrier exchange of the 18 recorded layers
    of two groups or more is 112-301 ns under the GPU's (the step 10-19% under), where the sum
    ranges from 81 ns under to 1056 ns over on the same 18; part of it is
    its warps drifting apart within a CTA over the rounds (the staging's CTA barrier waits for
    the last: 205-306 ns from a warp's last group to the release, 106-131 in the Lamport
    kernel), which the model does not have; not placed yet.
    """
    c = _cyc(spec)
    slot = np.ceil(np.asarray(N) * np.asarray(B) / 4.0) * 4
    chunks = np.ceil(slot / (4 * cap.THREADS_PER_CTA))
    G = np.minimum(STAGE_GROUP, chunks)
    rounds = np.ceil(chunks / G)
    setup = (2 + 2 * G) * c["ig"]
    aligned = np.mod(slot, 4 * cap.THREADS_PER_CTA * G) == 0
    per_round = np.where(aligned, 2 * c["ia"] + G, 3 * G * c["ia"] + 2 * G)
    # the barrier kernel's group loop is rolled: with two groups or more each round ends with its
    # edge (the Lamport kernel's is unrolled, kernels_ir.kernels.sparse_rnn._stage_h)
    if sync != "lamport":
        per_round = per_round + np.where(rounds > 1, _loop_edge_cycles(spec), 0.0)
    # Lamport: the checks, the vote (its predicate ``predicate_branch_cycles`` after the last
    # check) and the poll loop's exit test
    check = ((np.where(aligned, 4, 8) * G - 1) * c["ia"] + spec.predicate_branch_cycles
             + _test_cycles(spec) if sync == "lamport" else 0 * G)
    poll = l2_latency(spec, G) + check   # the group's G loads lie in G partition units
    bw = spec.sm_count * slot * 4 / c["l2_bpc"]
    # ... or the busiest contention group: every SM's 128-bit loads ask for each line of the
    # slot once, and a small slot lies in a few groups
    lines = np.ceil(slot * 4 / 128.0)
    # (a 128-bit warp load covers 4 lines, which lie in 2 groups: every 1 KiB holds 2)
    bw = np.maximum(bw, group_cycles(spec, lines, spec.sm_count * lines,
                                     q=np.minimum(2.0, distinct_groups(spec, lines)),
                                     anywhere=True))
    if sync == "barrier":   # its CTAs' release spread overlaps the service (see above)
        bw = np.maximum(0.0, bw - _poll_phases(spec)[1])
    else:   # pipelined with the rounds: one round's service, or the whole service less what
        # the later rounds' trips cover when the servers never idle
        bw = np.maximum(bw / rounds, bw - (rounds - 1) * (per_round + poll))
    return setup, per_round, poll, rounds, bw


def _stage_release(spec, N, B, sync):
    """Cycles from the last staging round's shared stores to the CTA barrier's release: the
    barrier's latency, or (the engine's rule, ``measurements/stage_bar.py``) the SM's shared
    pipe serving the stores, one wavefront per 32 words (4 per warp and 128-bit chunk), then
    ``cta_barrier_drain_cycles``, whichever is later. After the grid barrier (``sync``
    "barrier") every warp of a CTA is released at once and the round's stores of all of them
    queue together; the Lamport kernel's warps leave their own poll loops spread by more than
    that drain (``lamport_trace.json``: 80-340 ns within a CTA), so only the last warp's share
    is left when it arrives."""
    slot = np.ceil(np.asarray(N) * np.asarray(B) / 4.0) * 4
    per_chunk = 4 * cap.THREADS_PER_CTA
    chunks = np.ceil(slot / per_chunk)
    G = np.minimum(STAGE_GROUP, chunks)
    last = slot - (np.ceil(chunks / G) - 1) * G * per_chunk   # words of the last round
    if sync == "lamport":
        last = last / (cap.THREADS_PER_CTA // WARP)
    drain = last / LINE_WORDS / spec.smem_wavefronts_per_cycle   # 32 words a wavefront
    return np.maximum(spec.cta_barrier_latency_cycles, drain + spec.cta_barrier_drain_cycles)


@functools.cache
def _busiest_mean(map_name: str, starts: tuple[int, ...]) -> np.ndarray:
    """For n = 0..len(map): the lines of n consecutive lines in their busiest group, the mean
    over the buffers that start at each of the lines ``starts`` (a buffer wraps at the map's
    end, as the map repeats)."""
    from gpusim.specs import load_group_map

    table = np.asarray(load_group_map(map_name), dtype=np.int64)
    period, groups = table.size, int(table.max()) + 1
    twice = np.concatenate([table, table])
    # occurrence[i]: 1-based rank of line i among the lines of its group in ``twice``; from a
    # start line, a line's rank in the buffer is that less the group's lines before the start,
    # and the running maximum of those ranks is the busiest group's count
    order = np.argsort(twice, kind="stable")
    first = np.searchsorted(twice[order], twice[order], side="left")
    occurrence = np.empty(twice.size, dtype=np.int64)
    occurrence[order] = np.arange(twice.size) - first + 1
    out = np.zeros(period + 1)
    for s in starts:
        before = np.bincount(twice[:s], minlength=groups)
        win = slice(s, s + period)
        out[1:] += np.maximum.accumulate(occurrence[win] - before[twice[win]])
    out[1:] /= len(starts)
    return out


def _busiest_counts(map_name: str) -> np.ndarray:
    """For n = 0..len(map): the lines of the map's first n lines in their busiest group."""
    return _busiest_mean(map_name, (0,))


# start lines over which :func:`_busiest_anywhere` averages (spread over the map by a stride
# prime to its length, so no alignment of the map's pattern is favoured)
ANYWHERE_STARTS = 64


@functools.cache
def _busiest_anywhere(map_name: str) -> np.ndarray:
    """:func:`_busiest_mean` over ``ANYWHERE_STARTS`` start lines spread over the map. The
    exchanged h of step t lies t slots into the sequence buffer, so over a launch its lines
    start anywhere in the map."""
    from gpusim.specs import load_group_map

    period = len(load_group_map(map_name))
    return _busiest_mean(map_name, tuple(int(k * 7919 % period)
                                         for k in range(ANYWHERE_STARTS)))


def distinct_groups(spec, lines):
    """How many contention groups the first ``lines`` 128-byte lines of a map period span
    (arrays; 1 without groups)."""
    name = getattr(spec, "l2_group_map", "")
    n = np.maximum(np.ceil(np.asarray(lines, dtype=np.float64)), 1.0)
    if not name:
        return np.ones_like(n)
    seen = _distinct_counts(name)
    return seen[np.minimum(n, seen.size - 1).astype(np.int64)]


@functools.lru_cache(maxsize=4)
def _distinct_counts(map_name: str) -> np.ndarray:
    """For n = 0..len(map): the distinct groups among the map's first n lines."""
    from gpusim.specs import load_group_map

    table = np.asarray(load_group_map(map_name), dtype=np.int64)
    first = np.zeros(table.size, dtype=np.float64)
    first[np.unique(table, return_index=True)[1]] = 1.0
    return np.concatenate(([0.0], np.cumsum(first)))


def group_cycles(spec, lines, requests, sharers=None, q=1.0, anywhere=False):
    """Cycles the busiest L2 contention group (``l2_group_map``; the engine's group server)
    needs for ``requests`` load requests spread evenly over the lines of a buffer of ``lines``
    128-byte lines that starts a map period (``anywhere``: that starts anywhere in the map,
    the mean busiest group, :func:`_busiest_anywhere`) (arrays), each costing
    :func:`gpusim.specs.rules.group_request_cost` of its line's ``sharers`` (SMs loading it;
    default every SM) and the ``q`` groups its warp-instruction spans; 0 when the spec has no
    groups."""
    from gpusim.specs.rules import group_request_cost

    name = getattr(spec, "l2_group_map", "")
    if not name or not float(getattr(spec, "l2_group_request_cycles", 0.0) or 0.0) > 0:
        return np.zeros(np.broadcast(lines, requests).shape)
    gc = group_request_cost(spec, spec.sm_count if sharers is None else sharers, q)
    busiest = _busiest_anywhere(name) if anywhere else _busiest_counts(name)
    period = busiest.size - 1
    n = np.maximum(np.asarray(lines, dtype=np.float64), 1.0)
    inside = np.minimum(np.ceil(n), period).astype(np.int64)
    share = np.where(n <= period, busiest[inside] / np.maximum(inside, 1),
                     busiest[period] / period)
    return np.asarray(requests, dtype=np.float64) * share * gc


def l2_latency(spec, units=1):
    """Expected L2 round trip (cycles) of loads issued together over ``units`` independent
    partition units (:mod:`gpusim.engine.l2`): the mean for one, the slowest of ``units`` draws of
    near / far otherwise (``np.inf``: the far latency)."""
    extra = spec.l2_far_extra_cycles if spec.l2_partitions > 1 else 0
    k = np.asarray(units, dtype=np.float64)
    return spec.l2_hit_latency_cycles + extra / 2.0 * (1.0 - 2.0 ** (1.0 - k))


def _poll_phases(spec):
    """Release of the CTAs after the grid barrier's last arrival (cycles): ``(lag, range)``.

    Thread 0 of every CTA polls the counter every ``l2_hit_latency + 2`` cycles (LDG -> ISETP ->
    branch) on its own phase, set by when its own atomic went out; the last arrival is seen by
    each CTA at a phase taken as uniform over one period. With ``n = sm_count`` CTAs the latest
    one sees it ``P (n - 1) / n`` late (largest of the other ``n - 1`` phases) and the releases
    span ``P (n - 1) / (n + 1)`` (expected range of ``n`` uniform phases).
    """
    period = l2_latency(spec, np.inf) + 2   # the last CTAs to notice poll the far partition
    n = spec.sm_count
    return period * (n - 1) / n, period * (n - 1) / (n + 1)


def _barrier_cycles(spec, R, cta_spread=0.0):
    """Grid barrier, from the slowest warp's last store to the CTA barrier releasing step t+1.

    BAR (all warps), thread 0's FENCE ends ``fence_latency_cycles`` after its issue or
    ``fence_after_store_cycles`` after its stores are acknowledged (one L2 round trip after its
    last store, taken as the slowest warp's), whichever is later, as in the engine; the atomic
    arrive reaches L2
    (``l2_atomic_latency / 2``) and waits in the counter's FIFO (the slice performs one
    same-address atomic every ``l2_atomic_same_address_cycles``, in order of arrival): the
    ``sm_count - 1`` earlier arrivals only delay it by what they do not drain before it arrives,
    ``max(0, (sm_count - 1) * same_address - spread)``, where ``spread`` is how far the arrivals
    are apart (the CTAs' poll phases, :func:`_poll_phases`, plus ``cta_spread``, how much
    earlier the other CTAs' work ends). The step then ends when the last CTA to notice is
    released: either the slowest CTA itself, whose thread 0 prefetches x and polls every
    ``l2_hit_latency + 2`` cycles from its own atomic (the poll served after the counter is
    complete; a poll that sees it behind runs the spin loop's three tests before the next, the
    one that sees it complete its exit test: the engine's loop edges), or another CTA, one poll
    phase late (:func:`_poll_phases`); the poll's reply returns half a round trip later and BAR
    releases the CTA.

    Store visibility (``l2_store_visibility_cycles``) is not on this path: the FENCE waits for
    the stores' acknowledgements, not their visibility, the counter is visible when the atomic
    is performed, and the staging loads after the barrier are plain loads that come a fence,
    an atomic and a poll (>= 2 L2 round trips) after the stores.
    """
    a = float(l2_latency(spec, np.inf))   # the counter and the slowest CTA's stores: far side
    bar = spec.cta_barrier_latency_cycles
    fence = max(2 + bar + 1 + spec.fence_latency_cycles, a + spec.fence_after_store_cycles)
    lag, phases = _poll_phases(spec)
    queue = np.maximum(0.0, (spec.sm_count - 1) * spec.l2_atomic_same_address_cycles
                       - phases - cta_spread)
    ready = spec.l2_atomic_latency_cycles / 2 + queue
    first = 3 + _prefetch_cycles(spec, R) + a / 2
    # a poll that sees the counter behind: the spin loop's three tests, then the next poll
    period = a + 2 + SPIN_TESTS * _test_cycles(spec)
    own = first + np.ceil(np.maximum(0.0, ready - first) / period) * period
    # ... and the poll that sees it complete: its exit test
    return fence + np.maximum(own, ready + lag) + a / 2 + 1 + _test_cycles(spec) + bar


LINE_WORDS = 32  # 32-bit words of h per 128-byte L2 line


def shared_lines(row_ids, positions, batch: int, warps_per_cta: int) -> int:
    """Line hand-overs of one step's exchange: the 128-byte lines of the exchanged h (slot of
    ``N x batch`` words) summed over their writer CTAs less one (a line's first writer takes it
    at once, every other CTA is handed it, the engine's :mod:`gpusim.engine.l2` rule). Row
    ``r`` of warp ``w`` stores its ``batch`` words at ``positions[r] * batch`` (one line:
    ``batch`` divides 8); ``positions`` None: row ``r`` at ``r``."""
    rid = np.asarray(row_ids)
    w, j = np.nonzero(rid >= 0)
    r = rid[w, j]
    pos = r if positions is None else np.asarray(positions)[r]
    line = pos.astype(np.int64) * int(batch) // LINE_WORDS
    cta = (w // int(warps_per_cta)).astype(np.int64)
    pairs = np.unique(line * (int(cta.max()) + 1 if cta.size else 1) + cta).size
    return int(pairs - np.unique(line).size)


def deal_handovers(n_rows, batch, n_warps: int, warps_per_cta: int) -> np.ndarray:
    """:func:`shared_lines` of equal rows dealt as :func:`kernels_ir.mapping.map_matrix` deals
    them, for the expectation path (no mapping), in closed form and vectorised over ``n_rows``
    and ``batch`` (arrays): every warp gets one row per full group of ``n_warps`` rows and the
    last group goes to the first (even group) or last (odd group) warps, snake order; h is in
    owner order, so CTA ``c``'s words are one run and it touches the lines of that run
    (``tests/models/test_analytical.py`` checks it against :func:`shared_lines` of the deal)."""
    n = np.atleast_1d(np.asarray(n_rows, dtype=np.int64))
    b = np.broadcast_to(np.asarray(batch, dtype=np.int64), n.shape)
    nw, wpc = int(n_warps), int(warps_per_cta)
    R = -(-n // nw)
    q = n - np.maximum(R - 1, 0) * nw                   # rows of the last group
    lo = np.where((R - 1) % 2 == 0, 0, nw - q)[:, None]  # its warps: [lo, lo + q)
    first = np.arange(0, nw, wpc)[None, :]              # each CTA's first warp
    last = np.minimum(first + wpc, nw)
    extra = np.clip(np.minimum(lo + q[:, None], last) - np.maximum(lo, first), 0, None)
    words = ((np.maximum(R - 1, 0)[:, None] * (last - first) + extra) * b[:, None])
    end = np.cumsum(words, axis=1)
    start = end - words
    touched = np.where(words > 0, (end - 1) // LINE_WORDS - start // LINE_WORDS + 1, 0).sum(1)
    return touched - (-(-end[:, -1] // LINE_WORDS))


def _handover_cycles(spec, handovers, spread) -> np.ndarray:
    """Cycles by which the exchange's last line completes after the step's last store: the
    GPU-wide server performs one hand-over every ``l2_line_handover_cycles`` from the first
    CTA's stores on, ``spread`` cycles before the last CTA's (the model's spread of the CTAs'
    stores), so the ``handovers`` of one step delay the exchange by what is left after that."""
    c = float(spec.l2_line_handover_cycles)
    return np.maximum(0.0, np.asarray(handovers, dtype=np.float64) * c - np.asarray(spread))
