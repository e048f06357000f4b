"""Every kernel and baseline at once, and the report of one layer.

Over arrays of configurations (:func:`predict_many`, what ``gpusim sweep`` evaluates), the
speedup of the best sparse persistent kernel (:func:`speedup_summary`), and the report of one
layer (:func:`predict_layer`, what ``gpusim predict`` prints), priced on a concrete random
layer when it is small enough (:data:`EXACT_NNZ_LIMIT`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels_ir.errors import InputError
from kernels_ir.mapping import MAX_BATCH, WIDE_BATCHES, access_pattern

from .. import capacity as cap
from .banks import mapping_wavefronts
from .libraries import _baselines
from .persistent import _layer_arrays, _persistent_fast, predict_mapping
from .variants import REASONS, SIMULATED, VARIANTS, KernelTimes, Variant


def predict_many(spec, hidden, batch, density, *, cell: str = "rnn", dtype: str = "fp32",
                 kernels=None) -> dict[str, KernelTimes]:
    """Per-step time of every kernel (or those named) for arrays of configurations."""
    cap.check_cell(cell)
    cap.check_dtype(dtype)
    N, B, d = _layer_arrays(hidden, batch, density)
    names = tuple(VARIANTS) if kernels is None else tuple(kernels)
    out = {}
    for name in names:
        if name not in VARIANTS:
            raise InputError(f"kernel {name!r} is unknown; accepted: {', '.join(VARIANTS)}")
        v = VARIANTS[name]
        if v.family == "persistent":
            out[name] = _persistent_fast(spec, v, N, B, d, cell, dtype)
        else:
            out[name] = _baselines(spec, name, N, B, d, cell, dtype)
    return out


def speedup_summary(times: dict[str, KernelTimes]):
    """Best sparse persistent kernel vs the best of everything else (arrays of names/speedup)."""
    sparse_p = [n for n in times if VARIANTS[n].family == "persistent" and VARIANTS[n].sparse]
    others = [n for n in times if n not in sparse_p]
    shape = next(iter(times.values())).per_step_s.shape

    def best(names):
        if not names:
            return np.full(shape, ""), np.full(shape, np.nan)
        arr = np.stack([np.where(times[n].fits, times[n].per_step_s, np.inf) for n in names])
        idx = arr.argmin(axis=0)
        val = arr.min(axis=0)
        nm = np.array(names, dtype=object)[idx]
        return np.where(np.isfinite(val), nm, ""), np.where(np.isfinite(val), val, np.nan)

    bp_name, bp = best(sparse_p)
    nb_name, nb = best(others)
    return bp_name, bp, nb_name, nb, nb / bp


# ----------------------------------------------------------------------------- one layer report

EXACT_NNZ_LIMIT = 1_000_000  # above this the mapping takes > 0.3 s: use the expectation
# the random layer draws one number per weight position (rows x hidden) whatever the density:
# above this (hidden 16384 for an RNN cell, ~4 s) use the expectation too (hidden 65536 took 70 s)
EXACT_DRAW_LIMIT = 1 << 28
ENGINES = ("model", "sim")


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    family: str
    engine: str
    fits: bool
    per_step_s: float | None
    total_s: float | None
    reason: str            # why it does not fit ("" if it fits)
    bound: str             # persistent: the compute bound that won; baselines: ""
    breakdown: dict

    def as_dict(self) -> dict:
        return {"name": self.name, "family": self.family, "engine": self.engine,
                "fits": self.fits, "per_step_s": self.per_step_s, "total_s": self.total_s,
                "reason": self.reason, "bound": self.bound, "breakdown": self.breakdown}


@dataclass(frozen=True, slots=True)
class Report:
    gpu: str
    hidden: int
    batch: int
    density: float
    timesteps: int
    cell: str
    dtype: str
    engine: str
    rows: tuple[Row, ...]
    best_persistent: str | None
    next_best: str | None
    speedup: float | None
    note: str

    def as_dict(self) -> dict:
        return {"gpu": self.gpu, "hidden": self.hidden, "batch": self.batch,
                "density": self.density, "timesteps": self.timesteps, "cell": self.cell,
                "dtype": self.dtype, "engine": self.engine,
                "kernels": [r.as_dict() for r in self.rows],
                "best_persistent": self.best_persistent, "next_best": self.next_best,
                "speedup": self.speedup, "note": self.note}


def _validate(hidden, batch, density, timesteps, cell, dtype, engine):
    for name, v in (("hidden", hidden), ("batch", batch), ("timesteps", timesteps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}={v!r} must be a positive integer")
    if not (0.0 < float(density) <= 1.0):
        raise InputError(f"density={density} is outside (0, 1]")
    if batch > 1024:
        raise InputError(f"batch={batch} is absurd for a recurrent layer; accepted: 1..1024")
    if hidden > 1 << 20:
        raise InputError(f"hidden={hidden} is absurd; accepted: 1..{1 << 20}")
    cap.check_cell(cell)
    cap.check_dtype(dtype)
    if engine not in ENGINES:
        raise InputError(f"engine={engine!r} is not supported; accepted: {', '.join(ENGINES)}")


def _reason(spec, code: int, hidden, batch, density, cell, dtype, dense, slots=None) -> str:
    label = REASONS[code]
    if code in (1, 2, 5):
        f = cap.fit(spec, hidden, batch, density, cell=cell, dtype=dtype, dense=dense,
                    slots=slots, exact=False)
        best = cap.max_hidden(spec, density, batch, cell=cell, dtype=dtype, dense=dense,
                              exact=False)
        msg = f.message or label
        return f"{msg}; largest that fits: hidden={best.hidden} ({best.limit})"
    if code == 3:
        return (f"batch={batch} cannot use wide loads; accepted with wide loads: "
                f"{', '.join(map(str, WIDE_BATCHES))}")
    if code == 4:
        return f"batch={batch} exceeds the kernel's {MAX_BATCH} batch columns"
    return label


def _f(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x


def predict_layer(spec, hidden: int, batch: int, density: float, *, timesteps: int = 1,
                  cell: str = "rnn", dtype: str = "fp32", engine: str = "model", seed: int = 0,
                  simulator=None, exact: bool = True, heads: int = 1) -> Report:
    """Per-step and total time of every kernel and baseline for one layer (``gpusim predict``).

    The persistent kernels are evaluated on a concrete random layer (seeded) mapped onto the GPU
    when it has at most :data:`EXACT_NNZ_LIMIT` nonzeros (exact ``K_j`` and wavefronts from the
    layout analysis), else from the expectation. ``engine="sim"`` calls
    ``simulator(spec, variants, hidden, batch, density, seed) -> {name: (per_step_s, setup_s,
    breakdown)}`` for every kernel of :data:`SIMULATED` that fits; a gru / lstm cell is passed
    on as ``cell=`` (the persistent kernels and the CSR kernel build every cell) and fp16 as
    ``dtype=`` for the persistent kernels, while the CSR kernel (fp32 weights only in the IR)
    keeps the model for fp16, with a note. This package never imports the simulator: the CLI
    passes it in. Every row names the engine that produced it.

    ``heads`` H > 1 (a multi-head layer, docs/heads.md): whether a persistent kernel fits is its
    builder's answer for the seeded block-diagonal layer, and the model prices it on that
    mapping (:func:`.persistent.builder_mapping`: whole heads per CTA and the CTA-local exchange
    where they fit, else the grid-wide exchange); ``engine="sim"`` then simulates the kernels
    that fit (the simulator callable builds the same layer). The model prices cuSPARSE and the
    CSR kernel on the layer's nonzeros, ``d / H`` of the full ``N x N`` (their work goes by
    nonzeros and rows; that a head's columns lie in one block of h is not modelled), and cuBLAS
    on the full dense ``N x N``; ``engine="sim"`` simulates the CSR kernel on the
    block-diagonal ``U`` itself.
    """
    _validate(hidden, batch, density, timesteps, cell, dtype, engine)
    if engine == "sim" and simulator is None:
        raise InputError("engine='sim' needs a simulator callable (see gpusim predict)")
    fast = predict_many(spec, hidden, batch, density, cell=cell, dtype=dtype)
    gates = cap.CELLS[cell]
    nnz_expected = gates * hidden * hidden * density
    # a multi-head layer's persistent kernels are fitted and priced on their builder's mapping of
    # the block-diagonal layer (_head_price), not on a single-head one
    use_exact = (exact and heads == 1 and nnz_expected <= EXACT_NNZ_LIMIT and
                 gates * hidden * hidden <= EXACT_DRAW_LIMIT)
    U = None
    mappings: dict = {}
    wavefronts: dict = {}
    if use_exact:
        from kernels_ir.mapping import map_matrix_layouts

        from ..sparse import random_sparse

        U = random_sparse(gates * hidden, hidden, density, np.random.default_rng(seed))
        # every mapping the loop below prices, made together: they share the sorted, dealt rows
        want: dict = {}
        for name, kt in fast.items():
            v = VARIANTS[name]
            if v.family == "persistent" and v.sparse and int(kt.reason[0]) not in (3, 4):
                want.setdefault(_mapping_key(v), (v.layout, v.wide_loads))
        made = map_matrix_layouts(U, list(want.values()), n_ctas=spec.sm_count,
                                  warps_per_cta=cap.THREADS_PER_CTA // cap.WARP, batch=batch,
                                  seed=seed, **({} if gates == 1 else {"gates": gates}))
        mappings = dict(zip(want, made, strict=True))
    rows = []
    notes = []
    to_simulate: list[str] = []
    head_layers: dict = {}
    if heads > 1:
        # the baselines multiply the block-diagonal U as a sparse matrix: its nonzeros are those
        # of density d / H over the full N x N (cuBLAS multiplies the full dense N x N)
        spread = predict_many(spec, hidden, batch, density / heads, cell=cell, dtype=dtype)
        fast = {n: (spread[n] if VARIANTS[n].family != "persistent" else kt)
                for n, kt in fast.items()}
    for name, kt in fast.items():
        v = VARIANTS[name]
        eng = "model"
        per = float(kt.per_step_s[0])
        setup = float(kt.setup_s[0])
        ok = bool(kt.fits[0])
        code = int(kt.reason[0])
        bound = str(kt.bound[0]) if kt.bound is not None else ""
        bd = {k: _f(val[0]) for k, val in kt.breakdown.items()}
        if bd.get("measured_grid_s"):
            eng = "model (measured grid)"
        slots = None
        if v.family == "persistent" and v.sparse and U is not None and code not in (3, 4):
            key = _mapping_key(v)
            m = mappings[key]
            slots = m.slots
            f = cap.fit(spec, hidden, batch, density, cell=cell, dtype=dtype, slots=m.slots)
            ok = f.fits
            code = 0 if ok else REASONS.index(f.limit)
            if ok:
                # keyed by the loads, not by wide_loads: at batch 1 both read one 32-bit word
                wkey = (key, tuple(access_pattern(batch, v.wide_loads)))
                if wkey not in wavefronts:
                    wavefronts[wkey] = mapping_wavefronts(m, batch, v.wide_loads)
                ex = predict_mapping(spec, name, m, batch, dtype=dtype,
                                     wavefronts=wavefronts[wkey])
                per, setup = float(ex.per_step_s[0]), float(ex.setup_s[0])
                bound = str(ex.bound[0])
                bd = {k: _f(val[0]) for k, val in ex.breakdown.items()}
                eng = "model (exact layout)"
        if heads > 1 and v.family == "persistent":
            # whether it fits is the builder's answer for the block-diagonal layer (whole heads
            # per CTA where they fit, else the grid-wide exchange), not the single-head one
            ex, why = _head_price(spec, v, hidden, batch, density, cell, dtype, seed, heads,
                                  head_layers)
            if ex is None:
                rows.append(Row(name, v.family, "model", False, None, None, why, "", {}))
                continue
            ok = True
            per, setup = float(ex.per_step_s[0]), float(ex.setup_s[0])
            bound = str(ex.bound[0])
            bd = {k: _f(val[0]) for k, val in ex.breakdown.items()}
            eng = "model (exact layout)"
        if ok and engine == "sim" and name in SIMULATED:
            if dtype != "fp32" and v.family != "persistent":
                notes.append(f"{name}: the kernel in the IR has fp32 weights only; priced by the "
                             f"model for {dtype} weights")
            else:
                to_simulate.append(name)
        if ok:
            rows.append(Row(name, v.family, eng, True, per, setup + timesteps * per, "", bound,
                            bd))
        else:
            rows.append(Row(name, v.family, eng, False, None, None,
                            _reason(spec, code, hidden, batch, density, cell, dtype,
                                    not v.sparse, slots), "", {}))
    if to_simulate and not any(r.fits and r.family == "persistent" and VARIANTS[r.name].sparse
                               for r in rows):
        # no sparse persistent kernel fits: there is no speedup to predict, so the baselines keep
        # the model (a CSR step of the largest layers takes minutes to simulate)
        to_simulate = [n for n in to_simulate if VARIANTS[n].family == "persistent"]
        notes.append("no sparse persistent kernel fits: the CSR baseline is priced by the model")
    if to_simulate:
        kw = ({} if cell == "rnn" else {"cell": cell}) | \
            ({} if dtype == "fp32" else {"dtype": dtype})
        simulated = simulator(spec, [VARIANTS[n] for n in to_simulate], hidden, batch, density,
                              seed, **kw)
        for i, r in enumerate(rows):
            if r.name in simulated:
                per, setup, bd = simulated[r.name]
                rows[i] = Row(r.name, r.family, "sim", True, per, setup + timesteps * per, "",
                              "", bd)
    if heads > 1 and _grid_note(head_layers, heads):
        notes.append(_grid_note(head_layers, heads))
    best_p = _best([r for r in rows if r.family == "persistent" and
                    VARIANTS[r.name].sparse])
    nxt = _best([r for r in rows if not (r.family == "persistent" and
                                        VARIANTS[r.name].sparse)])
    speed = (nxt.per_step_s / best_p.per_step_s) if best_p and nxt else None
    if not use_exact and exact and heads == 1:
        notes.append(f"{nnz_expected:.3g} nonzeros: wavefronts and K_j are expectations for "
                     f"random columns, not from a concrete matrix")
    return Report(spec.name, int(hidden), int(batch), float(density), int(timesteps), cell,
                  dtype, engine, tuple(rows), best_p.name if best_p else None,
                  nxt.name if nxt else None, speed, "; ".join(notes))


def _head_price(spec, v: Variant, hidden, batch, density, cell, dtype, seed, heads, cache):
    """``(KernelTimes, "")`` of persistent variant ``v`` on the seeded multi-head layer (the
    layer the simulator builds: same draw of ``U``), priced on its builder's mapping; ``(None,
    why)`` when the builder finds no mapping that fits. ``cache``: layers and mappings by key."""
    from kernels_ir.errors import CapacityError

    from ..sparse import random_layer
    from .persistent import builder_mapping

    d = density if v.sparse else 1.0
    if d not in cache:
        cache[d] = random_layer(hidden, batch, d, 1, seed, cell=cell, heads=heads)
    key = (_mapping_key(v), v.sparse, v.sync)
    if key not in cache:
        try:
            cache[key] = builder_mapping(spec, v, cache[d], seed=seed, dtype=dtype)
        except CapacityError as exc:
            cache[key] = str(exc)
    m = cache[key]
    if isinstance(m, str):
        return None, m
    t = predict_mapping(spec, v, m, batch, dtype=dtype)
    if not bool(t.fits[0]):
        return None, f"the multi-head mapping does not fit: {REASONS[int(t.reason[0])]}"
    if m.cta_local and v.sparse:
        # the builder takes whole heads per CTA whenever they fit; with few heads that leaves
        # most SMs idle, and the heads dealt over all warps may be faster: price that too
        grid = builder_mapping(spec, v, cache[d], seed=seed, dtype=dtype, local=False)
        if grid is not None:
            tg = predict_mapping(spec, v, grid, batch, dtype=dtype)
            if bool(tg.fits[0]):
                cache.setdefault("grid", {})[v.name] = (float(t.per_step_s[0]),
                                                        float(tg.per_step_s[0]))
    return t, ""


def _grid_note(cache: dict, heads: int) -> str:
    """A note when the heads dealt over all warps (grid-wide exchange) would be faster, by the
    model, than the whole heads per CTA that the builder chose (:func:`_head_price`)."""
    faster = {n: (a, b) for n, (a, b) in cache.get("grid", {}).items() if b < 0.9 * a}
    if not faster:
        return ""
    n, (a, b) = min(faster.items(), key=lambda kv: kv[1][1])
    return (f"{', '.join(faster)}: the builder holds whole heads per CTA ({heads} heads use "
            f"{heads if heads < 132 else 'every'} SMs); dealt over all warps with the grid-wide "
            f"exchange the model gives {n} {b * 1e6:.2f} us a step instead of {a * 1e6:.2f} "
            f"(not built: kernels_ir's builder prefers the CTA-local exchange)")


def _mapping_key(v: Variant) -> tuple:
    """Variants with equal keys share one mapping (the naive layout ignores wide loads)."""
    return (v.layout, v.wide_loads if v.layout != "naive" else None)


def _best(rows):
    ok = [r for r in rows if r.fits and r.per_step_s is not None]
    return min(ok, key=lambda r: r.per_step_s) if ok else None
