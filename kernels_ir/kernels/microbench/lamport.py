"""Microbenchmarks that take the Lamport h exchange apart, one factor at a time (``lmech_*``).

The persistent kernel's Lamport exchange (:func:`kernels_ir.kernels.sparse_rnn._stage_h`): every
thread of every CTA polls its 16-byte chunks of the next h slot with relaxed (L2-coherent) 128-bit
loads, :data:`~kernels_ir.kernels.sparse_rnn.STAGE_GROUP` chunks back to back, and re-polls the
whole group while any word is still the sentinel -0.0; the owners of h write their words with
32-bit stores while the others poll. On an H100 the persistent Lamport kernels run about 20% slower
than the simulator says, the barrier kernels do not. Each family below varies one factor of that
exchange with every other fixed, so that comparing the GPU with the simulator per family says
which factor the engine gets wrong. All are registered in
:data:`kernels_ir.kernels.microbench.MICROBENCHES` (size argument ``rounds``); op = one round.

Families (name: what varies; what stays fixed):

- ``lmech_watch_{p}[_w{k}][_{where}]`` (:func:`watch`): a ping-pong round trip between CTA 0 and
  CTA 1 (as ``flag_round_trip``) while ``p`` CTAs, CTA 1 included, poll the ping word with ``k``
  warps each (every lane the same word): does a store's visibility, or the load of the word's
  slice, grow with the pollers of the line being written? ``where``: the watchers (every polling
  warp but CTA 1's warp 0) poll a word that CTA 0's ping store also writes, in the same sector
  (``sector``), another sector of the same line (``line``) or 1 KiB away (``unit``).
- ``lmech_x_{words}`` / ``lmech_xb_{words}`` (:func:`exchange`): the persistent kernel's exchange
  with no mat-vec, at the kernels' sizes N*B = 1K..32K words: the staging is ``_stage_h`` itself
  (Lamport, or the barrier variant's counter spin + plain loads; ``xb`` also does the kernel's
  fence + atomic arrive), the stores are the kernel's (warp ``w`` writes its rows' B = 4 words,
  owner-ordered positions from the kernel's deal, 32-bit stores of lanes < B). Varies the words
  exchanged, Lamport against barrier. ``lmech_xp_{words}`` / ``lmech_xq_{words}``: the same with
  every slot written by the host before the launch (no CTA waits for another), polled with the
  L2-coherent loads (``xp``) or read with plain loads (``xq``): the loads' own cost.
- ``lmech_ws_{n}`` (:func:`writers`): every 32-byte sector of a 4096-word slot is written by ``n``
  = 1, 2, 4, 8 CTAs (pieces of 8/n words, dealt round-robin to the CTAs; one 32-bit store per lane
  of warp 0, one store instruction per CTA and round); ``lmech_ws_2_warp``: the two halves by two
  warps of one CTA; ``lmech_split_{g}``: one warp writes every sector in two stores (two words
  of every 16-byte chunk each), ``g`` dependent shared loads apart; ``lmech_delay_{g}``: one
  store of whole sectors after the same ``g`` loads (the control of ``split``). Polls: 8 warps,
  groups of 4 chunks, as the kernel.
- ``lmech_readers_{g}`` (:func:`readers`): 16 CTAs write the 4096-word slot (every thread one
  word, 32 consecutive words per warp), ``g`` = 16..132 CTAs poll it: the poll traffic on the
  lines being written, with the writers and their stores fixed.
- ``lmech_pollers_{p}`` (:func:`writers` with ``pollers``): as ``lmech_ws_1`` but only ``p`` warps
  per CTA poll (each thread polls 8/p groups); ``p = 8`` is ``lmech_ws_1``.
- ``lmech_slot_{expect,ring,reset}`` (:func:`writers` with ``slots``): as ``lmech_ws_1`` but the
  poll waits for the round's expected value (not for "no sentinel"), so that slots can be reused:
  single-use slots (``expect``; against ``lmech_ws_1`` only the check differs), a ring of 4 slots
  (``ring``), and the ring with the sentinel reset stores that re-arm a slot once every CTA has
  read it (``reset``: each owner rewrites its words of the previous slot with the sentinel after
  it has seen the current one). The persistent kernel has no reset stores: the host fills its
  T single-use slots with the sentinel before the launch.

The kernels of the ``ws``/``readers``/``pollers``/``slot`` families count their poll iterations
per thread (buffer ``polls``): the executor runs each group's poll once per round (lockstep), the
GPU as often as it has to, so the GPU's count says how many re-polls the exchange really takes.
Every kernel checks its values (:meth:`Microbench.verify_result`): the slots hold what the
writers wrote and every thread staged the last round's values.

The builders live in :mod:`.lamport_watch` (``watch``), :mod:`.lamport_kernel` (``exchange``)
and :mod:`.lamport_writers` (``writers``, ``readers``); this module names the family
(:data:`REGISTRY`).
"""

from __future__ import annotations

from .lamport_kernel import exchange
from .lamport_watch import WATCH_WHERE, watch
from .lamport_writers import readers, writers

__all__ = ["watch", "exchange", "writers", "readers", "WATCH_WHERE", "REGISTRY"]

# the family: name -> builder (registered in MICROBENCHES by .registry, size argument rounds)
WATCH_POLLERS = (1, 8, 32, 131)
X_WORDS = (1024, 2048, 4096, 9216, 16384, 32768)   # 9216: hidden 2304 x batch 4
XP_WORDS = (1024, 4096, 9216, 32768)                # the free-running controls of X_WORDS
REGISTRY: dict = {}
for _p in WATCH_POLLERS:
    for _w in (1, 8):
        REGISTRY[f"lmech_watch_{_p}" + (f"_w{_w}" if _w > 1 else "")] = (
            lambda _p=_p, _w=_w, **kw: watch(pollers=_p, warps=_w, **kw))
for _wh in ("sector", "line", "unit"):
    REGISTRY[f"lmech_watch_131_w8_{_wh}"] = (
        lambda _wh=_wh, **kw: watch(pollers=131, warps=8, where=_wh, **kw))
for _n in X_WORDS:
    REGISTRY[f"lmech_x_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, **kw)
    REGISTRY[f"lmech_xb_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, sync="barrier", **kw)
for _n in XP_WORDS:
    REGISTRY[f"lmech_xp_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, present=True, **kw)
    REGISTRY[f"lmech_xq_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, sync="none", **kw)
for _n in (9216, 32768):   # several groups per thread: the rotation has something to rotate
    for _s, _t in (("lamport", "x"), ("barrier", "xb"), ("none", "xq")):
        REGISTRY[f"lmech_{_t}_{_n}_rot"] = (
            lambda _n=_n, _s=_s, **kw: exchange(words=_n, sync=_s, rotate=True, **kw))
for _n in (1, 2, 4, 8):
    REGISTRY[f"lmech_ws_{_n}"] = lambda _n=_n, **kw: writers(ws=_n, **kw)
REGISTRY["lmech_ws_2_warp"] = lambda **kw: writers(ws=2, layout="warp", **kw)
for _g in (0, 16):
    REGISTRY[f"lmech_split_{_g}"] = lambda _g=_g, **kw: writers(ws=2, layout="split", gap=_g,
                                                                **kw)
REGISTRY["lmech_delay_16"] = lambda **kw: writers(layout="delay", gap=16, **kw)
for _g in (16, 33, 66, 132):
    REGISTRY[f"lmech_readers_{_g}"] = lambda _g=_g, **kw: readers(ctas=_g, **kw)
for _p in (1, 2, 4):
    REGISTRY[f"lmech_pollers_{_p}"] = lambda _p=_p, **kw: writers(pollers=_p, **kw)
for _s in ("expect", "ring", "reset"):
    REGISTRY[f"lmech_slot_{_s}"] = lambda _s=_s, **kw: writers(slots=_s, **kw)
