"""Bank probes: one shared-memory access pattern per warp instruction, for Nsight Compute.

The question these kernels answer: how many shared-memory wavefronts (and bank conflicts, as
Nsight Compute counts them) does ONE warp-wide ``LDS``/``STS`` of 32, 64 or 128 bits cost on the
GPU, for a given table of per-lane word addresses and active lanes? :mod:`kernels_ir.banks`
states a rule (phases of ``32 / w`` lanes for ``w``-word accesses); these probes measure the
hardware's, pattern by pattern.

A :class:`Pattern` is the table: 32 first-word addresses (aligned to the width), 32 active flags,
the width (1, 2 or 4 words), ``ld`` or ``st``. :func:`probe` turns it into a one-warp kernel:

- the pattern arrives in a global buffer (``pattern``: 32 addresses, 32 flags, one word that is 0
  at run time), so one compiled kernel per (op, width) serves every pattern;
- ``ld``: the CTA fills the shared array (word ``i`` = ``3 i + 1``, 32-bit stores: they count as
  *stores*, apart from the loads measured), ``__syncthreads()``, then ``repeats`` times each
  active lane loads its ``w`` words and adds them up; ``out[lane]`` = the sum;
- ``st``: ``repeats`` times each active lane stores ``w`` words (value ``256 r + w lane + k``),
  ``__syncthreads()``, and each active lane reads its words back into ``out`` (that one
  read-back load counts as a *load*, apart from the stores measured);
- the address of repetition ``r`` is ``addr + (r & zero)``: the compiler cannot see that it is
  the same address, so it neither hoists the load out of the loop nor drops the repeated
  stores; the loop is ``kind="seq"`` (rolled, one access per iteration). Inactive lanes sit
  out under an ``If`` (a predicated or branched-around access: the GPU executes the
  instruction with those lanes off, as the simulator does).

So one launch executes the pattern's instruction exactly ``repeats`` times (Nsight's
``smsp__inst_executed_op_shared_{ld,st}`` says whether the compiler split or merged it), and
every shared load (``ld``) or store (``st``) wavefront Nsight counts in that launch belongs to
the pattern. One launch per pattern: Nsight Compute counts per launch, so this keeps the counts
separable (a launch costs Nsight a fraction of a second; the catalogue has a few hundred).

``noise`` variants (:data:`NOISE_KINDS`) add 7 warps that, while warp 0 repeats the pattern 256
times, keep the CTA's L1TEX busy with global traffic: plain loads that hit L1 (``ldg``), L2
polls like the Lamport staging's (``ldg_volatile``), or stores (``stg``); ``idle`` is the
control (the same launch, the 7 warps do nothing). They test whether the
hardware's shared-memory counters see conflicts from other traffic in the same data banks
(the Lamport kernel's h staging stores are contiguous 128-bit stores, conflict-free by any bank
rule, yet Nsight counted store conflicts there that changed from run to run).

:func:`catalogue` lists the measured patterns: the kernels' own (the staging ``STS.128``, the
gather loads of naive and optimal layouts at hidden 2304 batch 4 density 0.3 and of four other
layers), structured ones (strides, broadcasts, one bank, pairs sharing an address, one conflict
between lane 0 and lane j, permutations of a contiguous block), active masks, random ones, and
the noise controls.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .. import banks
from ..builder import Builder
from ..errors import InputError
from ..ir import I32, PRED, Kernel
from ..verify import verify
from .microbench.core import Microbench

__all__ = ["Pattern", "OPS", "NOISE_KINDS", "SMEM_WORDS", "NCU_REPEATS", "NOISE_REPEATS",
           "probe_kernel", "probe", "expected_out", "catalogue", "kernel_patterns",
           "pattern_inputs", "kernel_key"]

WARP = banks.WARP
OPS = ("ld", "st")
NOISE_KINDS = ("none", "idle", "ldg", "ldg_volatile", "stg")
SMEM_WORDS = 16384          # 64 KiB: the h array of every kernel layer sampled below fits
NCU_REPEATS = 4             # pattern instructions per launch (plain probes)
NOISE_REPEATS = 256         # ... with noise warps (long enough to overlap their traffic)
NOISE_WARPS = 7             # warps 1..7 make the noise (the kernels run 8 warps per CTA)
NOISE_ITERS = 256           # loads / stores each noise thread issues
NOISE_LDG_WORDS = 4096      # 16 KiB re-read by the ``ldg`` noise (L1 hits after the first lap)
PATTERN_WORDS = 2 * WARP + 1  # addresses, active flags, the run-time zero
LD_VALUE = (3, 1)           # ld probes: shared word i holds 3 i + 1
ST_STRIDE = 256             # st probes: repetition r stores 256 r + w lane + k


@dataclass(frozen=True)
class Pattern:
    """One warp instruction's shared access: ``words[l]`` is lane ``l``'s first word (aligned to
    ``width``), ``active[l]`` whether lane ``l`` takes part. ``noise``: see the module doc."""

    name: str
    family: str
    op: str
    width: int
    words: tuple
    active: tuple
    noise: str = "none"
    source: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["words"] = [int(x) for x in self.words]
        d["active"] = [bool(x) for x in self.active]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Pattern:
        try:
            return check_pattern(cls(str(d["name"]), str(d["family"]), str(d["op"]),
                                     int(d["width"]), tuple(int(x) for x in d["words"]),
                                     tuple(bool(x) for x in d["active"]),
                                     str(d.get("noise", "none")), str(d.get("source", ""))))
        except KeyError as exc:
            raise InputError(f"pattern record {d.get('name', '?')!r} lacks field {exc}") from None

    @property
    def words_array(self) -> np.ndarray:
        return np.asarray(self.words, dtype=np.int64)

    @property
    def active_array(self) -> np.ndarray:
        return np.asarray(self.active, dtype=bool)

    @property
    def repeats(self) -> int:
        return NCU_REPEATS if self.noise == "none" else NOISE_REPEATS


def check_pattern(p: Pattern, smem_words: int = SMEM_WORDS) -> Pattern:
    """Return ``p`` or raise one :class:`InputError` naming what is wrong."""
    if p.op not in OPS:
        raise InputError(f"pattern {p.name!r}: op={p.op!r}; accepted: {', '.join(OPS)}")
    banks.check_width(p.width)
    if p.noise not in NOISE_KINDS:
        raise InputError(f"pattern {p.name!r}: noise={p.noise!r}; accepted: "
                         f"{', '.join(NOISE_KINDS)}")
    if len(p.words) != WARP or len(p.active) != WARP:
        raise InputError(f"pattern {p.name!r}: {len(p.words)} addresses and {len(p.active)} "
                         f"active flags; need 32 of each")
    w = p.words_array
    bad = np.flatnonzero((w < 0) | (w > smem_words - p.width) | (w % p.width != 0))
    if bad.size:
        lane = int(bad[0])
        raise InputError(f"pattern {p.name!r}: lane {lane} word {int(w[lane])} is not a "
                         f"{p.width}-word aligned address in 0..{smem_words - p.width}")
    if not any(p.active):
        raise InputError(f"pattern {p.name!r}: no lane is active (an access needs at least one)")
    return p


def _pattern(name: str, family: str, op: str, width: int, words, active=None,
             noise: str = "none", source: str = "") -> Pattern:
    words = tuple(int(x) for x in np.asarray(words, dtype=np.int64).reshape(WARP))
    act = (True,) * WARP if active is None else tuple(bool(x) for x in
                                                      np.asarray(active).reshape(WARP))
    return check_pattern(Pattern(name, family, op, int(width), words, act, noise, source))


# ------------------------------------------------------------------------------------ kernels


def kernel_key(p: Pattern) -> tuple[str, int, str]:
    """Patterns with the same key run the same compiled kernel (only the data differ)."""
    return (p.op, p.width, p.noise)


def probe_kernel(op: str, width: int, *, noise: str = "none", repeats: int | None = None,
                 smem_words: int = SMEM_WORDS) -> Kernel:
    """The probe kernel for (op, width, noise); see the module docstring."""
    if op not in OPS:
        raise InputError(f"op={op!r}; accepted: {', '.join(OPS)}")
    banks.check_width(width)
    if noise not in NOISE_KINDS:
        raise InputError(f"noise={noise!r}; accepted: {', '.join(NOISE_KINDS)}")
    if repeats is None:
        repeats = NCU_REPEATS if noise == "none" else NOISE_REPEATS
    if int(repeats) < 1:
        raise InputError(f"repeats={repeats} must be >= 1")
    if smem_words < WARP or smem_words % WARP:
        raise InputError(f"smem_words={smem_words} must be a positive multiple of 32")
    repeats = int(repeats)
    noisy = noise != "none"
    threads = WARP * (1 + NOISE_WARPS) if noisy else WARP
    name = f"bank_probe_{op}{32 * width}" + (f"_{noise}" if noisy else "")
    b = Builder(name, grid=1, block=threads, bench="bank_probe", op=op, width=width,
                repeats=repeats, noise=noise)
    g_pat = b.global_buffer("pattern", I32, PATTERN_WORDS)
    g_out = b.global_buffer("out", I32, WARP * width, role="out")
    g_noise = None
    if noise in ("ldg", "ldg_volatile"):
        g_noise = b.global_buffer("noise", I32, NOISE_LDG_WORDS)
    elif noise == "stg":
        g_noise = b.global_buffer("noise", I32, threads * 4 * NOISE_ITERS, role="out")
    g_nout = b.global_buffer("noise_out", I32, threads, role="out") if g_noise else None
    s = b.shared("s", I32, smem_words)

    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    addr = b.ldg(g_pat, lane, dst=b.reg(I32, "addr"))
    act = b.ldg(g_pat, lane, offset=WARP, dst=b.reg(I32, "act"))
    zero = b.ldg(g_pat, 0, offset=2 * WARP, dst=b.reg(I32, "zero"))
    on = b.isetp("ne", act, 0, dst=b.reg(PRED, "on"))
    off = b.reg(I32, "off")
    a = b.reg(I32, "a")
    v = b.reg(I32, "v", width)
    is_probe = None
    if noisy:
        warp = b.sreg("warp", dst=b.reg(I32, "warp"))
        is_probe = b.isetp("eq", warp, 0, dst=b.reg(PRED, "is_probe"))

    if op == "ld":
        idx = b.reg(I32, "fidx")
        val = b.reg(I32, "fval")
        with b.loop("f", 0, smem_words, threads) as f:
            b.iadd(f, tid, dst=idx)
            b.imad(idx, LD_VALUE[0], LD_VALUE[1], dst=val)
            b.sts(s, idx, val)
        b.bar()

        def pattern_part():
            acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
            with b.loop("r", 0, repeats, kind="seq") as r:
                b.and_(r, zero, dst=off)
                b.iadd(addr, off, dst=a)
                with b.if_(on):
                    b.lds(s, a, width=width, dst=v)
                    for k in range(width):
                        b.iadd(acc, v[k], dst=acc)
            b.stg(g_out, lane, acc)

        if g_noise is not None:
            with b.if_(is_probe):
                pattern_part()
            with b.else_():
                _noise_part(b, noise, g_noise, g_nout, tid, threads)
        elif noisy:
            with b.if_(is_probe):
                pattern_part()
        else:
            pattern_part()
    else:
        lw = b.imul(lane, width, dst=b.reg(I32, "lw"))
        base = b.reg(I32, "vbase", width)
        for k in range(width):
            b.iadd(lw, k, dst=base[k])
        vals = b.reg(I32, "val", width)

        def pattern_part():
            with b.loop("r", 0, repeats, kind="seq") as r:
                b.and_(r, zero, dst=off)
                b.iadd(addr, off, dst=a)
                for k in range(width):
                    b.imad(r, ST_STRIDE, base[k], dst=vals[k])
                with b.if_(on):
                    b.sts(s, a, tuple(vals[k] for k in range(width)))

        if g_noise is not None:
            with b.if_(is_probe):
                pattern_part()
            with b.else_():
                _noise_part(b, noise, g_noise, g_nout, tid, threads)
        elif noisy:
            with b.if_(is_probe):
                pattern_part()
        else:
            pattern_part()
        b.bar()
        back = b.pand(on, is_probe, dst=b.reg(PRED, "back")) if noisy else on
        with b.if_(back):
            b.lds(s, addr, width=width, dst=v)
            b.stg(g_out, lw, tuple(v[k] for k in range(width)))
    return verify(b.build(), smem_limit_bytes=4 * smem_words)


def _noise_part(b: Builder, noise: str, g_noise, g_nout, tid, threads: int) -> None:
    """Warps 1..7: NOISE_ITERS global loads (``ldg``: L1 hits, ``ldg_volatile``: L2 polls) or
    stores (``stg``), 16 bytes a thread each."""
    nidx = b.imul(tid, 4, dst=b.reg(I32, "nidx"))
    nacc = b.mov(0, I32, dst=b.reg(I32, "nacc"))
    nv = b.reg(I32, "nv", 4)
    with b.loop("n", 0, NOISE_ITERS, kind="seq") as n:
        if noise == "stg":
            b.stg(g_noise, nidx, (n, n, n, n))
            b.iadd(nidx, threads * 4, dst=nidx)
            b.iadd(nacc, 1, dst=nacc)
        else:
            load = b.ldg if noise == "ldg" else b.ldg_volatile
            load(g_noise, nidx, width=4, dst=nv)
            for k in range(4):
                b.iadd(nacc, nv[k], dst=nacc)
            b.iadd(nidx, WARP * 4, dst=nidx)
            b.and_(nidx, NOISE_LDG_WORDS - 1, dst=nidx)
    b.stg(g_nout, tid, nacc)


def pattern_inputs(p: Pattern) -> dict:
    """The global buffers of ``p``'s launch (the pattern table; noise data where needed)."""
    tab = np.zeros(PATTERN_WORDS, np.int32)
    tab[:WARP] = p.words_array
    tab[WARP:2 * WARP] = p.active_array
    inputs = {"pattern": tab, "out": np.zeros(WARP * p.width, np.int32)}
    if p.noise in ("ldg", "ldg_volatile"):
        inputs["noise"] = np.ones(NOISE_LDG_WORDS, np.int32)
    return inputs


def expected_out(p: Pattern, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """``(out, known)``: what each word of ``out`` must hold (``known``: checked words).

    ``st``: when several active lanes store the same word, the GPU keeps one of them; the check
    accepts any (``out`` then holds -1 and the word is checked by :func:`check_out`)."""
    w, act, width = p.words_array, p.active_array, p.width
    out = np.zeros(WARP * width, np.int64)
    known = np.zeros(WARP * width, bool)
    if p.op == "ld":
        vals = LD_VALUE[0] * (w[:, None] + np.arange(width)) + LD_VALUE[1]
        out[:WARP] = np.where(act, repeats * vals.sum(axis=1), 0)
        known[:WARP] = True
        return out, known
    for lane in np.flatnonzero(act):
        for k in range(width):
            word = w[lane] + k
            writers = [(m, j) for m in np.flatnonzero(act) for j in range(width)
                       if w[m] + j == word]
            vals = {ST_STRIDE * (repeats - 1) + width * m + j for m, j in writers}
            out[lane * width + k] = vals.pop() if len(vals) == 1 else -1
            known[lane * width + k] = True
    return out, known


def check_out(p: Pattern, repeats: int, out) -> bool:
    """Whether the kernel's ``out`` is right for ``p`` (see :func:`expected_out`)."""
    got = np.asarray(out, dtype=np.int64).reshape(-1)
    exp, known = expected_out(p, repeats)
    if p.op == "ld":
        return bool(np.array_equal(got[:WARP], exp[:WARP]))
    w, act, width = p.words_array, p.active_array, p.width
    for i in np.flatnonzero(known):
        if exp[i] >= 0:
            if got[i] != exp[i]:
                return False
            continue
        lane, k = divmod(int(i), width)
        word = w[lane] + k
        ok = {ST_STRIDE * (repeats - 1) + width * m + j for m in np.flatnonzero(act)
              for j in range(width) if w[m] + j == word}
        if int(got[i]) not in ok:
            return False
    return True


def probe(p: Pattern, repeats: int | None = None) -> Microbench:
    """The launch for pattern ``p``: kernel, inputs, ``ops`` = instructions of the pattern."""
    check_pattern(p)
    repeats = p.repeats if repeats is None else int(repeats)
    kernel = probe_kernel(p.op, p.width, noise=p.noise, repeats=repeats)
    return Microbench(f"bank_probe:{p.name}", kernel, pattern_inputs(p), repeats,
                      f"one warp {p.op.upper()} of {32 * p.width} bits",
                      {"pattern": p.name, "repeats": repeats},
                      lambda g: check_out(p, repeats, g["out"]))


# ---------------------------------------------------------------------------------- catalogue


def _contig(width: int) -> np.ndarray:
    return np.arange(WARP) * width


def _structured(op: str, width: int, full: bool) -> list[Pattern]:
    """Strides, broadcasts, one bank, shared pairs, one conflict, permutations."""
    lanes = np.arange(WARP)
    out = []

    def add(name, words, active=None, source=""):
        out.append(_pattern(f"{op}{32 * width}_{name}", "structured", op, width, words, active,
                            source=source))

    add("contig", _contig(width), source="lane l -> chunk l")
    add("broadcast", np.zeros(WARP), source="every lane the same address")
    add("same_bank", lanes * WARP, source="lane l -> word 32 l: one bank (group), 32 words")
    strides = (2, 3, 4, 8, 16, 17, 32, 33) if full else (2, 4, 17, 32)
    for st in strides:
        add(f"stride{st}", (lanes * st * width) % SMEM_WORDS,
            source=f"lane l -> chunk {st} l")
    for k in ((1, 2, 4, 8, 16) if full else (1, 16)):
        shared = lanes & ~k
        rank = np.unique(shared, return_inverse=True)[1]
        add(f"pairs_xor{k}", rank * width,
            source=f"lanes l and l^{k} share an address; 16 distinct contiguous chunks")
    if full:
        quad = np.unique(lanes & ~3, return_inverse=True)[1]
        add("quads", quad * width, source="lanes 4q..4q+3 share an address")
        for j in (1, 2, 4, 7, 8, 15, 16, 24, 31):
            wds = _contig(width).copy()
            wds[j] = 8 * WARP
            add(f"conflict0_{j}", wds,
                source=f"contiguous, but lane {j} reads word 256 (lane 0's banks, another row)")
        add("perm_reverse", _contig(width)[::-1], source="lane l -> chunk 31 - l")
        add("perm_transpose", ((lanes % 8) * 4 + lanes // 8) * width,
            source="lane l -> chunk 4 (l % 8) + l // 8")
        rng = np.random.default_rng(1000 + 10 * width + OPS.index(op))
        for i in range(3):
            add(f"perm_random{i}", rng.permutation(WARP) * width,
                source="a random permutation of 32 contiguous chunks")
    return out


def _masks(op: str, width: int, full: bool) -> list[Pattern]:
    lanes = np.arange(WARP)
    out = []
    rng = np.random.default_rng(2000 + 10 * width + OPS.index(op))

    def add(name, words, active, source):
        out.append(_pattern(f"{op}{32 * width}_{name}", "mask", op, width, words, active,
                            source=source))

    masks = {"first1": lanes < 1, "quarter1": (lanes >= 8) & (lanes < 16),
             "evens": lanes % 2 == 0}
    if full:
        masks.update({"first8": lanes < 8, "first9": lanes < 9, "first16": lanes < 16,
                      "first31": lanes < 31, "quarter3": lanes >= 24, "odds": lanes % 2 == 1,
                      "every4th": lanes % 4 == 0, "last19": lanes >= 13})
    n_random = 3 if full else 1
    for i in range(n_random):
        masks[f"random{i}"] = rng.random(WARP) < 0.6
    for name, m in masks.items():
        m = m.copy()
        if not m.any():
            m[0] = True
        add(f"contig_{name}", _contig(width), m, f"contiguous chunks, lanes {name}")
    if full:
        one_bank = lanes * WARP
        for name, m in (("l0_8_16_24", lanes % 8 == 0), ("l0_1", lanes < 2),
                        ("l0_3", lanes < 4), ("l0_8", (lanes == 0) | (lanes == 8)),
                        ("first8", lanes < 8)):
            add(f"same_bank_{name}", one_bank, m, f"one bank (group), lanes {name} active")
    return out


def _random(op: str, width: int, n: int) -> list[Pattern]:
    rng = np.random.default_rng(3000 + 10 * width + OPS.index(op))
    out = []
    for i in range(n):
        chunks = (8, 16, 32, 64, 128)[i % 5]
        words = rng.integers(0, chunks, WARP) * width
        active = rng.random(WARP) < 0.75 if i % 2 else np.ones(WARP, bool)
        if not active.any():
            active[0] = True
        out.append(_pattern(f"{op}{32 * width}_random{i}", "random", op, width, words, active,
                            source=f"random chunks in 0..{chunks - 1}"
                                   + (", random active lanes" if i % 2 else "")))
    return out


# (hidden, batch, density, seed, samples per layout): the layers whose gathers are sampled.
# A campaign layer's seed is that of its Lamport / wide / naive case (measurements/campaign.py).
KERNEL_LAYERS = ((2304, 4, 0.3, 0, 24), (1024, 4, 0.1, 1016, 6), (2048, 2, 0.05, 1027, 6),
                 (2048, 8, 0.2, 1035, 3), (8192, 1, 0.01, 1054, 4))
KERNEL_LAYOUTS = ("naive", "optimal")
N_CTAS, WARPS_PER_CTA = 132, 8   # the H100 kernels' grid


def kernel_patterns(layers=KERNEL_LAYERS, layouts=KERNEL_LAYOUTS, seed: int = 0,
                    n_ctas: int = N_CTAS, warps_per_cta: int = WARPS_PER_CTA) -> list[Pattern]:
    """Gather loads of the sparse persistent kernel (wide loads), sampled per layer and layout:
    ``samples`` (warp, slot) pairs per layout (:func:`_spread`: common, padded and rare
    cases), and every load of a sampled slot (two 128-bit loads at batch 8)."""
    from ..layouts import analyse
    from ..mapping import access_pattern, map_matrix, slot_word_addresses
    from .sparse_rnn import make_layer

    out = []
    for hidden, batch, density, lseed, samples in layers:
        layer = make_layer(hidden, batch, density, 1, seed=lseed)
        if hidden * batch > SMEM_WORDS:
            raise InputError(f"layer h{hidden}-b{batch}: h_s has {hidden * batch} words; the "
                             f"probes' shared array has {SMEM_WORDS}")
        loads = access_pattern(batch, True)
        for layout in layouts:
            m = map_matrix(layer.U, n_ctas=n_ctas, warps_per_cta=warps_per_cta, batch=batch,
                           wide_loads=True, layout=layout, seed=seed)
            rep = analyse(m, batch, True)
            words = slot_word_addresses(m, batch, True)
            wf = rep.wavefronts.sum(axis=2)                       # (warps, S)
            real = (m.slot_rows >= 0)
            rng = np.random.default_rng(seed + hidden + batch)
            picks = _spread(wf, real, m.pad, samples, rng)
            for w, s in picks:
                pad = int(m.pad[w, s].sum())
                for i, (width, off) in enumerate(loads):
                    tag = f"h{hidden}b{batch}d{density}_{layout}_w{w}s{s}" + \
                        (f"_load{i}" if len(loads) > 1 else "")
                    out.append(_pattern(
                        f"ld{32 * width}_{tag}", "kernel", "ld", width, words[i][w, s],
                        source=f"sparse persistent gather: hidden {hidden}, batch {batch}, "
                               f"density {density}, layer seed {lseed}, layout {layout}, warp "
                               f"{w}, slot {s}, word offset {off}, {pad} padding lanes; model "
                               f"{int(rep.wavefronts[w, s, i])} wavefronts"))
    return out


def _spread(wf: np.ndarray, real: np.ndarray, pad: np.ndarray, n: int, rng
            ) -> list[tuple[int, int]]:
    """Up to ``n`` (warp, slot) pairs: half drawn at random (the common cases, as often as the
    kernel runs them), up to two with padding lanes (partly padded slots first), the rest
    round-robin over the distinct wavefront counts (rarest first), random within each."""
    cand = np.argwhere(real)
    if cand.size == 0:
        return []
    picks: list[tuple[int, int]] = []

    def take(idx):
        for i in idx:
            t = (int(cand[i, 0]), int(cand[i, 1]))
            if t not in picks and len(picks) < n:
                picks.append(t)
                return

    for i in rng.permutation(len(cand))[:n // 2]:
        take([i])
    npad = pad[cand[:, 0], cand[:, 1]].sum(axis=1)
    padded = np.flatnonzero((npad > 0) & (npad < WARP))     # partly padded slots first
    if padded.size == 0:
        padded = np.flatnonzero(npad > 0)
    for i in rng.permutation(padded)[:min(2, n // 3)]:
        take([i])
    vals = wf[cand[:, 0], cand[:, 1]]
    groups = {int(v): list(rng.permutation(np.flatnonzero(vals == v))) for v in np.unique(vals)}
    order = sorted(groups, key=lambda v: len(groups[v]))
    while len(picks) < n and any(groups[v] for v in order):
        for v in order:
            if groups[v]:
                take([groups[v].pop()])
    return sorted(picks)


def _staging(threads: int = 256, group: int = 4) -> list[Pattern]:
    """The h staging ``STS.128`` (``sparse_rnn._stage_h``): lane l of warp w stores chunk
    ``tid = 32 w + l`` of its group at ``g * 4 * threads * group + 4 tid + 4 * threads * i``; and
    the same store split into lane groups (as a warp whose lanes left the poll loop at different
    iterations would issue it)."""
    lanes = np.arange(WARP)
    out = []
    for warp, g, i in ((0, 0, 0), (5, 2, 0), (7, 1, 3)):
        words = g * 4 * threads * group + 4 * (warp * WARP + lanes) + 4 * threads * i
        out.append(_pattern(f"st128_staging_w{warp}g{g}i{i}", "kernel", "st", 4, words,
                            source=f"h staging STS.128 (threads {threads}, group {group}): warp "
                                   f"{warp}, group {g}, chunk {i}"))
    words = 4 * (5 * WARP + lanes) + 2 * 4 * threads * group
    splits = {"lanes0_12": lanes < 13, "lanes13_31": lanes >= 13, "odd_lanes": lanes % 2 == 1,
              "lanes0_3": lanes < 4, "lane31": lanes == 31}
    for name, m in splits.items():
        out.append(_pattern(f"st128_staging_split_{name}", "kernel", "st", 4, words, m,
                            source=f"h staging STS.128 of warp 5, group 2, only {name} "
                                   f"(one part of a split store)"))
    return out


def _noise() -> list[Pattern]:
    out = []
    for op in OPS:
        for width in (4, 1):
            for noise in NOISE_KINDS[1:]:
                what = ("7 idle warps (the control)" if noise == "idle" else
                        f"7 warps issuing {noise} traffic")
                out.append(_pattern(f"{op}{32 * width}_contig_noise_{noise}", "noise", op, width,
                                    _contig(width), noise=noise,
                                    source=f"contiguous, {NOISE_REPEATS} times, {what}"))
    return out


def catalogue(kernels: bool = True) -> list[Pattern]:
    """Every measured pattern, most informative first (a run that must stop early keeps the
    first ones): the kernels' gathers and staging stores, the noise controls, the structured
    and masked 128- and 64-bit patterns, the random ones, then the 32-bit ones."""
    pats: list[Pattern] = []
    if kernels:
        pats += kernel_patterns()
    pats += _staging()
    pats += _noise()
    for width in (4, 2):
        for op in OPS:
            pats += _structured(op, width, True) + _masks(op, width, width == 4)
    for width in (4, 2, 1):
        for op in OPS:
            pats += _random(op, width, 8)
    for op in OPS:
        pats += _structured(op, 1, False) + _masks(op, 1, False)
    names = [p.name for p in pats]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AssertionError(f"duplicate pattern names: {sorted(dup)[:5]}")
    return pats
