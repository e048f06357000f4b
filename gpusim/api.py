"""The public Python API: one function per question, the same code path as the ``gpusim`` command.

Each function returns a frozen record (a dataclass) with typed fields, ``to_dict()`` (exactly
what the command prints with ``--json``) and, where the answer is a table, ``to_frame()`` (a
pandas DataFrame). The ``gpusim`` commands call these functions and only format the records, so
the API and the CLI give the same numbers for the same arguments; the defaults are the CLI's.

- :func:`predict`: per-step and total time of every kernel and baseline (``gpusim predict``);
- :func:`simulate`: cycle-approximate simulation of the persistent kernel (``gpusim simulate``);
- :func:`capacity`: the largest layer that fits and the binding limit (``gpusim capacity``);
- :func:`banks`: shared-memory bank conflicts of the weight layouts (``gpusim banks``);
- :func:`crosscheck`: the simulator against recorded GPU measurements (``gpusim crosscheck``).

Sweeps over many layers: :func:`gpusim.sweep.run_sweep` (``gpusim sweep``). Units: seconds
(``*_s``), bytes, cycles; densities are fractions of nonzero weights in (0, 1].
Bad arguments raise :class:`kernels_ir.errors.InputError` (one line naming the value and what
is accepted), as the commands report them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernels_ir.errors import InputError

__all__ = ["predict", "simulate", "capacity", "banks", "crosscheck", "Prediction",
           "Simulation", "Capacity", "CapacityRow", "BankAnalysis", "LayoutResult",
           "CrossCheck"]

CELLS = ("rnn", "gru", "lstm")
DTYPES = ("fp32", "fp16")
LAYOUTS = ("naive", "random", "greedy", "optimal")
SYNCS = ("lamport", "barrier")


# ----------------------------------------------------------------------------- argument checks

def _spec(gpu):
    """A spec from a name, a .toml path or a spec object (returned as is)."""
    if isinstance(gpu, str | Path):
        from gpusim.specs import load_spec

        return load_spec(str(gpu))
    if hasattr(gpu, "sm_count") and hasattr(gpu, "name"):
        return gpu
    raise InputError(f"gpu={gpu!r} is not a GPU spec name, .toml path or spec")


def _int(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name}={value!r} must be an integer")
    if value < minimum or (maximum is not None and value > maximum):
        hi = "" if maximum is None else f"..{maximum}"
        raise InputError(f"{name}={value!r} is outside the accepted {minimum}{hi}")
    return int(value)


def _density(value) -> float:
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"density={value!r} must be a number in (0, 1]")
    d = float(value)
    if not (0.0 < d <= 1.0):  # NaN fails too
        raise InputError(f"density={d} is outside (0, 1]")
    return d


def _choice(name: str, value, choices) -> str:
    if value not in choices:
        raise InputError(f"{name}={value!r} is not accepted; accepted: {', '.join(choices)}")
    return value


def _frame(rows: list[dict], index: str | None = None):
    import pandas as pd

    df = pd.DataFrame(rows)
    return df.set_index(index) if index is not None and len(df) else df


# ----------------------------------------------------------------------------- predict

@dataclass(frozen=True)
class Prediction:
    """Per-step and total time of every kernel and baseline for one layer (``gpusim predict``).

    ``kernels``: one :class:`models.analytical.Row` per kernel (name, family, engine, fits,
    per_step_s, total_s, reason, bound, breakdown), in the order of
    :data:`models.analytical.VARIANTS`. ``speedup``: the next best kernel's per-step time over the
    best sparse persistent kernel's (None when either does not fit). ``report``: the model's own
    :class:`models.analytical.Report`.
    """

    gpu: str
    gpu_name: str
    hidden: int
    batch: int
    density: float
    timesteps: int
    cell: str
    dtype: str
    engine: str
    seed: int
    kernels: tuple = field(repr=False)
    best_persistent: str | None
    next_best: str | None
    speedup: float | None
    note: str
    report: Any = field(repr=False, compare=False)
    uncertainty: Any = field(repr=False, compare=False, default=None)
    heads: int = 1
    heads_note: str = ""     # heads > 1: where the grid-wide exchange disappears (heads_note)

    def kernel(self, name: str):
        """The row of kernel ``name`` (e.g. ``"sparse-lamport"``, ``"cublas"``)."""
        for r in self.kernels:
            if r.name == name:
                return r
        raise InputError(f"kernel {name!r} is unknown; accepted: "
                         f"{', '.join(r.name for r in self.kernels)}")

    def to_dict(self) -> dict:
        """Exactly ``gpusim predict --json``."""
        unc = None if self.uncertainty is None else self.uncertainty.as_dict()
        out = {**self.report.as_dict(), "uncertainty": unc}
        if self.heads > 1:
            out.update(heads=self.heads, heads_note=self.heads_note)
        return out

    def to_frame(self):
        """One row per kernel, indexed by name; breakdown terms as ``breakdown.<term>`` columns
        (seconds per step)."""
        rows = []
        for r in self.kernels:
            d = {k: v for k, v in r.as_dict().items() if k != "breakdown"}
            d.update({f"breakdown.{k}": v for k, v in (r.breakdown or {}).items()})
            rows.append(d)
        return _frame(rows, "name")


def predict(gpu="v100", hidden: int = 2304, batch: int = 4, density: float = 0.1,
            timesteps: int = 256, cell: str = "rnn", dtype: str = "fp32", engine: str = "model",
            sample_steps: int | None = None, seed: int = 0, exact: bool = True,
            heads: int = 1) -> Prediction:
    """Per-step and total time of every kernel and baseline for one layer.

    ``gpu``: spec name (``"v100"``, ``"h100"``, ``"h200"``), .toml path or spec object.
    ``hidden``: hidden size N; ``batch``: batch size B; ``density``: fraction of nonzero weights;
    ``timesteps``: sequence length T (total = set-up + T x per-step); ``cell``: rnn, gru, lstm;
    ``dtype``: fp32 or fp16 weights. ``engine``: ``"model"`` (analytical, well under a second)
    or ``"sim"`` (the simulator runs every kernel of the IR: persistent, dense and CSR;
    cuBLAS/cuSPARSE keep the model). ``sample_steps``: with ``engine="sim"``, the steps of each
    persistent kernel simulated in full (None: as many as its steps' scatter needs,
    :func:`gpusim.pricing.price_persistent`). ``uncertainty``: the
    out-of-sample error bands (:mod:`gpusim.uncertainty`).
    ``seed``: the random layer. ``exact``: price the sparse persistent kernels on that concrete
    layer's mapping (exact wavefronts and row lengths) when it has at most
    :data:`models.analytical.EXACT_NNZ_LIMIT` nonzeros, as ``gpusim predict`` does; ``False``
    uses the expectation over random layers (:func:`models.analytical.predict_many`, what a
    sweep uses), which differs by a few percent. ``heads`` H (a divisor of ``hidden``):
    H independent recurrences of N/H units (block-diagonal U, ``density`` within each head's
    block, docs/heads.md); both engines price the persistent kernels on the multi-head layer
    (the model with the CTA-local exchange where a CTA holds whole heads), the baselines keep
    their single-head rows. ``heads_note`` says which persistent kernels exchange h inside a
    CTA.
    """
    from models.analytical import predict_layer
    from models.sparse import check_heads

    spec = _spec(gpu)
    _choice("engine", engine, ("model", "sim"))
    heads = check_heads(heads, _int("hidden", hidden))
    sim = None
    if engine == "sim":
        from gpusim.cli.predict import simulator

        steps = None if sample_steps is None else _int("sample_steps", sample_steps)
        sim = simulator(steps, heads=heads)
    seed = _int("seed", seed, minimum=0)
    from gpusim.uncertainty import annotate

    rep = predict_layer(spec, hidden, batch, density, timesteps=timesteps, cell=cell,
                        dtype=dtype, engine=engine, seed=seed, simulator=sim, exact=exact,
                        **({} if heads == 1 else {"heads": heads}))
    return Prediction(rep.gpu, spec.full_name, rep.hidden, rep.batch, rep.density,
                      rep.timesteps, rep.cell, rep.dtype, rep.engine, seed, tuple(rep.rows),
                      rep.best_persistent, rep.next_best, rep.speedup, rep.note, rep,
                      annotate(rep), heads,
                      heads_note(spec, hidden, batch, density, cell, seed, heads, engine))


def heads_note(spec, hidden: int, batch: int, density: float, cell: str, seed: int,
               heads: int, engine: str = "sim") -> str:
    """One line on a multi-head layer's exchange: which persistent kernels (the default
    variant of each, sparse and dense) hold whole heads per CTA and so exchange h inside the
    CTA with no grid-wide sync, which keep the grid-wide exchange; "" for ``heads`` 1."""
    if heads == 1:
        return ""
    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import make_layer
    from models.analytical.persistent import builder_mapping
    from models.analytical.variants import Variant

    local, grid = [], []
    # the builders' defaults (build_sparse_rnn / build_dense_rnn): Lamport, wide loads, the
    # naive layout; only the mapping is needed, not the kernel
    for kind, sparse, d in (("sparse", True, density), ("dense", False, 1.0)):
        v = Variant(kind, "persistent", sparse, "lamport", True, "naive")
        try:
            m = builder_mapping(spec, v, make_layer(hidden, batch, d, 1, seed, cell=cell,
                                                    heads=heads), seed=seed)
        except CapacityError:
            continue
        if m.cta_local:
            local.append(f"{kind} ({m.heads_per_cta} per CTA)")
        else:
            grid.append(kind)
    parts = [f"heads={heads} of {hidden // heads} units"]
    if local:
        parts.append(f"heads fit in one CTA for {', '.join(local)}: no grid-wide exchange "
                     f"(h through shared memory, CTA barriers)")
    if grid:
        parts.append(f"a CTA cannot hold whole heads for {', '.join(grid)}: grid-wide exchange")
    parts.append("cuBLAS multiplies the full dense N x N; "
                 + ("cuSPARSE is" if engine == "sim" else "cuSPARSE and the CSR kernel are")
                 + f" priced by the model on the layer's nonzeros (density {density:g}/{heads} "
                 f"over N x N; a head's columns lying in one block of h is not modelled)"
                 + ("; the CSR kernel is simulated on the block-diagonal U" if engine == "sim"
                    else ""))
    return "; ".join(parts)


# ----------------------------------------------------------------------------- simulate

@dataclass(frozen=True)
class Simulation:
    """One simulated launch of the persistent kernel (``gpusim simulate``).

    Times in seconds, ``cycles`` at the spec's clock (extrapolated to ``total_steps`` when only
    ``steps`` were simulated). ``breakdown``: cycles per category (``total``, ``per_step``,
    ``per_sm``); ``smem_wavefronts``, ``bank_conflicts``, ``l2_transactions``: counts.
    ``max_rel_err``: the simulated values against the float64 reference. ``result``: the
    engine's :class:`gpusim.engine.SimResult` (timeline, globals).
    """

    gpu: str
    kernel: str
    hidden: int
    batch: int
    density: float
    timesteps: int
    seed: int
    dense: bool
    sync: str
    wide_loads: bool
    layout: str
    sample_steps: int | None
    ctas: int
    threads_per_cta: int
    cycles: float
    simulated_cycles: float
    time_s: float
    per_step_s: float
    launch_overhead_s: float
    steps: int
    total_steps: int
    extrapolated: bool
    max_rel_err: float
    warp_instructions: int
    step_cycles: tuple = field(repr=False)
    breakdown: dict = field(repr=False)
    smem_wavefronts: dict = field(repr=False)
    bank_conflicts: dict = field(repr=False)
    l2_transactions: dict = field(repr=False)
    wall_s: float = field(compare=False)
    result: Any = field(repr=False, compare=False)
    cell: str = "rnn"
    heads: int = 1
    heads_note: str = ""     # heads > 1: the step's exchange (CTA-local or grid-wide)
    dtype: str = "fp32"

    @property
    def values_ok(self) -> bool:
        """The simulated values match the float64 reference within the kernels' tolerance."""
        from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE

        return self.max_rel_err <= VALUE_TOLERANCE

    def to_dict(self) -> dict:
        """Exactly ``gpusim simulate --json``."""
        out = self.result.to_json()
        if self.heads > 1:
            out.update(heads=self.heads, heads_note=self.heads_note)
        out["wall_s"] = self.wall_s
        return out

    def to_frame(self):
        """One row per simulated step: its cycles and the per-SM breakdown by category."""
        per = self.breakdown.get("per_step", [])
        rows = [{"step": k, "cycles": c, **(per[k] if k < len(per) else {})}
                for k, c in enumerate(self.step_cycles)]
        return _frame(rows, "step")


def simulate(gpu="v100", hidden: int = 1152, batch: int = 4, density: float = 0.1,
             timesteps: int = 16, seed: int = 0, sync: str = "lamport", wide_loads: bool = True,
             layout: str = "naive", dense: bool = False, sample_steps: int | None = None,
             progress: bool = False, cell: str = "rnn", heads: int = 1,
             dtype: str = "fp32") -> Simulation:
    """Simulate the persistent RNN kernel for one layer cycle-approximately.

    ``gpu``: spec name, .toml path or spec; ``hidden``, ``batch``, ``density``, ``timesteps``,
    ``seed``: the layer (random weights and inputs). ``sync``: ``"lamport"`` or ``"barrier"``
    between steps; ``wide_loads``: one 64/128-bit shared load per nonzero; ``layout``: order of
    each row's nonzeros (naive, random, greedy, optimal); ``dense``: the dense persistent kernel
    instead. ``sample_steps``: simulate K steps in full and extrapolate the rest (None: all).
    ``progress``: a progress bar on stderr. ``cell``: rnn, gru or lstm (the values are checked
    against :func:`models.reference.gru_reference` / ``lstm_reference``). ``heads`` H (a
    divisor of ``hidden``): a multi-head layer (block-diagonal U, docs/heads.md); ``heads_note``
    says whether h is exchanged inside the CTAs or grid-wide. ``dtype``: fp32 or fp16 weights
    (docs/fp16.md; the values are checked against the reference of the fp16-rounded weights).
    """
    from gpusim.cli.common import BATCH_MAX, HIDDEN_MAX, TIMESTEPS_MAX
    from gpusim.cli.run import build_program
    from gpusim.engine import simulate as engine_simulate
    from gpusim.pricing import PERSISTENT_L2_WARM
    from kernels_ir.kernels.sparse_rnn import max_rel_err

    args = SimpleNamespace(
        gpu=gpu, hidden=_int("hidden", hidden, 1, HIDDEN_MAX),
        batch=_int("batch", batch, 1, BATCH_MAX), density=_density(density),
        timesteps=_int("timesteps", timesteps, 1, TIMESTEPS_MAX),
        seed=_int("seed", seed, 0), sync=_choice("sync", sync, SYNCS),
        wide_loads=bool(wide_loads), layout=_choice("layout", layout, LAYOUTS),
        dense=bool(dense), cell=_choice("cell", cell, CELLS),
        dtype=_choice("dtype", dtype, DTYPES))
    from models.sparse import check_heads

    args.heads = check_heads(heads, args.hidden)
    if sample_steps is not None:
        sample_steps = _int("sample_steps", sample_steps)
    t0 = time.perf_counter()
    steps = args.timesteps if sample_steps is None else min(sample_steps, args.timesteps)
    if not isinstance(gpu, str | Path):
        args.gpu = _spec(gpu)
    spec, prog = build_program(args)
    res = engine_simulate(prog.kernel, prog.inputs, spec, sample_steps=sample_steps,
                          progress=bool(progress), l2_warm=PERSISTENT_L2_WARM)
    H = prog.outputs(res.globals)[: steps + 1]
    res = res.with_error(max_rel_err(H, prog.reference()[: steps + 1]))
    wall = time.perf_counter() - t0
    return Simulation(
        res.gpu, res.kernel, args.hidden, args.batch, args.density, args.timesteps, args.seed,
        args.dense, args.sync, args.wide_loads, args.layout, sample_steps, prog.kernel.grid,
        prog.kernel.block, float(res.cycles), float(res.simulated_cycles), float(res.time_s),
        float(res.per_step_s), float(res.launch_overhead_s), int(res.steps),
        int(res.total_steps), bool(res.extrapolated), float(res.max_rel_err),
        int(res.warp_instructions), tuple(res.step_cycles), res.breakdown, res.smem_wavefronts,
        res.bank_conflicts, res.l2_transactions, wall, res, args.cell, args.heads,
        _exchange_note(prog, args.heads), args.dtype)


def _exchange_note(prog, heads: int) -> str:
    """:attr:`Simulation.heads_note` of a built program."""
    if heads == 1:
        return ""
    m = prog.mapping
    if m.cta_local:
        return (f"heads={heads} of {m.n_cols // heads} units, {m.heads_per_cta} per CTA: heads "
                f"fit in one CTA: no grid-wide exchange (h through shared memory, CTA barriers)")
    return (f"heads={heads} of {m.n_cols // heads} units: a CTA cannot hold whole heads: "
            f"grid-wide exchange ({prog.variant['sync']})")


# ----------------------------------------------------------------------------- capacity

@dataclass(frozen=True)
class CapacityRow:
    """The largest hidden size that fits one kernel at one density, and the limit at the next."""

    kernel: str                  # "sparse" or "dense"
    density: float               # 1.0 for the dense kernel
    hidden: int                  # largest N that fits (0 if none)
    limit: str                   # "registers" or "shared memory": what stops N + 1
    message: str
    registers_per_thread: int    # at the answer
    smem_bytes: int              # per CTA, at the answer

    def to_dict(self) -> dict:
        return {"hidden": self.hidden, "limit": self.limit, "message": self.message,
                "registers_per_thread": self.registers_per_thread,
                "smem_bytes": self.smem_bytes}


@dataclass(frozen=True)
class Capacity:
    """The largest layer that fits, sparse (per density) and dense (``gpusim capacity``)."""

    gpu: str
    gpu_name: str
    batch: int
    dtype: str
    cell: str
    sparse: tuple[CapacityRow, ...]
    dense: CapacityRow
    heads: int = 1
    # heads > 1: the largest with whole heads per CTA (no grid-wide exchange), per density
    sparse_local: tuple[CapacityRow, ...] = ()
    dense_local: CapacityRow | None = None

    def to_dict(self) -> dict:
        """Exactly ``gpusim capacity --json``."""
        out = {"gpu": self.gpu, "batch": self.batch, "dtype": self.dtype, "cell": self.cell,
               "max_hidden": {
                   "sparse": [{"density": r.density, **r.to_dict()} for r in self.sparse],
                   "dense": self.dense.to_dict()}}
        if self.heads > 1:
            out["heads"] = self.heads
            out["max_hidden_cta_local"] = {
                "sparse": [{"density": r.density, **r.to_dict()} for r in self.sparse_local],
                "dense": self.dense_local.to_dict()}
        return out

    def to_frame(self):
        """One row per sparse density, then the dense kernel's row (with heads, then the
        CTA-local rows, their ``kernel`` suffixed "-cta-local")."""
        rows = [r.__dict__.copy() for r in (*self.sparse, self.dense)]
        if self.heads > 1:
            rows += [r.__dict__ | {"kernel": r.kernel + "-cta-local"}
                     for r in (*self.sparse_local, self.dense_local)]
        return _frame(rows)


DEFAULT_DENSITIES = (0.01, 0.05, 0.1, 0.3, 1.0)


def capacity(gpu="v100", density: float | Sequence[float] = DEFAULT_DENSITIES, batch: int = 4,
             dtype: str = "fp32", cell: str = "rnn", heads: int = 1) -> Capacity:
    """The largest hidden size that fits, for each density (sparse) and dense, with the limit.

    ``gpu``: spec name, .toml path or spec; ``density``: one density or a sequence of them;
    ``batch``: batch size B (1..1024); ``dtype``: fp32 or fp16 (16-bit values and indices);
    ``cell``: rnn, gru, lstm; ``heads`` H: a multi-head layer (block-diagonal U, the density
    within its blocks; hidden sizes are multiples of H): the largest that fits either exchange,
    and the largest with whole heads per CTA, where the grid-wide sync disappears.
    """
    from models.capacity import capacity_table

    spec = _spec(gpu)
    densities = [density] if not isinstance(density, Sequence) else list(density)
    if not densities:
        raise InputError("density is empty; give at least one value in (0, 1]")
    densities = [_density(d) for d in densities]
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > 1024:
        raise InputError(f"batch={batch} is absurd for a recurrent layer; accepted: 1..1024")
    batch = _int("batch", batch, 1, 1024)
    _choice("dtype", dtype, DTYPES)
    _choice("cell", cell, CELLS)
    heads = _int("heads", heads, 1, 1 << 20)
    table = capacity_table(spec, densities, batch, cell=cell, dtype=dtype, heads=heads)

    def row(kind, d, m):
        return CapacityRow(kind, float(d), int(m.hidden), m.limit, m.message, int(m.registers),
                           int(m.smem_bytes))

    local = {} if heads == 1 else dict(
        sparse_local=tuple(row("sparse", r["density"], r["sparse_local"]) for r in table),
        dense_local=row("dense", 1.0, table[0]["dense_local"]))
    return Capacity(spec.name, spec.full_name, batch, dtype, cell,
                    tuple(row("sparse", r["density"], r["sparse"]) for r in table),
                    row("dense", 1.0, table[0]["dense"]), heads, **local)


# ----------------------------------------------------------------------------- banks

_FALLBACK_WARPS = 8  # a spec without warps_per_cta: 8 warps (256 threads) per CTA


@dataclass(frozen=True)
class LayoutResult:
    """Shared-memory wavefronts and bank conflicts of one layout, against the lower bound."""

    layout: str
    wavefronts: int
    bank_conflicts: int
    lower_bound_wavefronts: int
    lower_bound_conflicts: int
    ideal_wavefronts: int
    ratio_to_bound: float
    gap_wavefronts: int
    layout_s: float = field(compare=False)    # seconds to compute the layout
    analyse_s: float = field(compare=False)   # seconds to analyse it

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("layout_s", "analyse_s")}
        d["seconds"] = {"layout_s": self.layout_s, "analyse_s": self.analyse_s}
        return d


@dataclass(frozen=True)
class BankAnalysis:
    """Bank conflicts of one or more weight layouts of a random layer (``gpusim banks``).

    ``layouts``: one :class:`LayoutResult` per layout analysed (the last is the one the command
    summarises and plots); ``reports``: the analyser's :class:`kernels_ir.layouts` reports, in
    the same order (per-warp counts, for plots).
    """

    gpu: str
    hidden: int
    density: float
    batch: int
    wide_loads: bool
    mapping: str
    ctas: int
    warps_per_cta: int
    seed: int
    nonzeros: int
    load_bits: int
    generate_s: float = field(compare=False)
    layouts: tuple[LayoutResult, ...]
    reports: tuple = field(repr=False, compare=False)

    def layout(self, name: str) -> LayoutResult:
        for r in self.layouts:
            if r.layout == name:
                return r
        raise InputError(f"layout {name!r} was not analysed; analysed: "
                         f"{', '.join(r.layout for r in self.layouts)}")

    def config(self) -> dict:
        return {"gpu": self.gpu, "hidden": self.hidden, "density": self.density,
                "batch": self.batch, "wide_loads": self.wide_loads, "mapping": self.mapping,
                "ctas": self.ctas, "warps_per_cta": self.warps_per_cta, "seed": self.seed,
                "nonzeros": self.nonzeros, "load_bits": self.load_bits}

    def to_dict(self) -> dict:
        """Exactly ``gpusim banks --json``."""
        out = self.layouts[-1].to_dict()
        out["config"] = self.config()
        out["generate_s"] = self.generate_s
        if len(self.layouts) > 1:
            out["layouts"] = {r.layout: r.to_dict() for r in self.layouts}
        return out

    def to_frame(self):
        """One row per layout, indexed by its name."""
        return _frame([r.__dict__.copy() for r in self.layouts], "layout")


def _check_bits(bits: int | None, batch: int, wide: bool) -> None:
    if bits is None:
        return
    from kernels_ir.layouts import geometry, width_from_bits

    words = width_from_bits(bits)
    got = geometry(batch, wide).width
    if words != got:
        need = {1: "--no-wide-loads (any batch) or batch=1", 2: "batch=2 with --wide-loads",
                4: "batch=4 or 8 with --wide-loads"}[words]
        raise InputError(f"--load-bits={bits} is not compatible with batch={batch} "
                         f"{'with' if wide else 'without'} wide loads; {bits}-bit loads need "
                         f"{need}")


def banks(gpu="v100", hidden: int = 1152, density: float = 0.1, batch: int = 4,
          wide_loads: bool = True, layout: str = "optimal", mapping: str = "spread",
          warps_per_cta: int | None = None, load_bits: int | None = None,
          seed: int = 0) -> BankAnalysis:
    """Shared-memory bank conflicts of a random layer's weight layout, against the lower bound.

    ``gpu``: spec name, .toml path or spec (its SM count is the CTA count); ``hidden``,
    ``density``, ``batch``, ``seed``: the random matrix. ``wide_loads``: one 64/128-bit shared
    load per nonzero (B = 1, 2, 4, 8) instead of B 32-bit loads. ``layout``: naive, random,
    greedy, optimal, or ``"all"`` to compare the four. ``mapping``: ``"spread"`` (a row over the
    32 lanes of a warp: the kernel) or ``"row-per-lane"``. ``warps_per_cta``: default from the
    spec. ``load_bits``: check that the load width (32, 64, 128) is the one batch and wide loads
    imply.
    """
    import numpy as np

    from gpusim.cli.common import HIDDEN_MAX, check_nnz
    from kernels_ir.layouts import analyse, analyse_row_per_lane, geometry
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_sparse

    hidden = _int("hidden", hidden, 1, HIDDEN_MAX)
    density = _density(density)
    batch = _int("batch", batch)
    seed = _int("seed", seed, 0)
    _choice("layout", layout, (*LAYOUTS, "all"))
    _choice("mapping", mapping, ("spread", "row-per-lane"))
    wide_loads = bool(wide_loads)
    geometry(batch, wide_loads)  # bad batch/width: one error before any work
    check_nnz(hidden, density)
    _check_bits(load_bits, batch, wide_loads)
    spec = _spec(gpu)
    n_ctas = int(spec.sm_count)
    if warps_per_cta is not None:
        warps_per_cta = _int("warps_per_cta", warps_per_cta)
    warps = int(warps_per_cta or getattr(spec, "warps_per_cta", None) or _FALLBACK_WARPS)
    t0 = time.perf_counter()
    U = random_sparse(hidden, hidden, density, np.random.default_rng(seed))
    gen_s = time.perf_counter() - t0
    names = LAYOUTS if layout == "all" else (layout,)
    results, reports = [], []
    for name in names:
        t0 = time.perf_counter()
        if mapping == "spread":
            m = map_matrix(U, n_ctas=n_ctas, warps_per_cta=warps, batch=batch,
                           wide_loads=wide_loads, layout=name, seed=seed)
            t1 = time.perf_counter()
            rep = analyse(m, batch, wide_loads)
        else:
            t1 = time.perf_counter()
            rep = analyse_row_per_lane(U, n_ctas=n_ctas, warps_per_cta=warps, batch=batch,
                                       wide_loads=wide_loads, layout=name, seed=seed)
        t2 = time.perf_counter()
        reports.append(rep)
        results.append(LayoutResult(
            rep.layout, int(rep.total_wavefronts), int(rep.total_conflicts),
            int(rep.lower_bound_wavefronts), int(rep.lower_bound_conflicts),
            int(rep.ideal_wavefronts), float(rep.ratio_to_bound), int(rep.gap_wavefronts),
            t1 - t0, t2 - t1))
    gpu_name = gpu if isinstance(gpu, str | Path) else spec.name
    return BankAnalysis(str(gpu_name), hidden, density, batch, wide_loads, mapping, n_ctas,
                        warps, seed, int(U.nnz), 32 * geometry(batch, wide_loads).width, gen_s,
                        tuple(results), tuple(reports))


# ----------------------------------------------------------------------------- crosscheck

@dataclass(frozen=True)
class CrossCheck:
    """The simulator (and the analytical model) against recorded GPU measurements.

    ``mape`` / ``max_ape``: mean and largest absolute percentage error of the predicted per-step
    time (fractions, 0.1 = 10%) over ``cases`` predicted cases; ``worst``: its case id;
    ``spearman``: rank correlation of predicted and measured times. ``rows``: one dict per case
    (id, kind, measured_s, predicted_s, source, ape, and for simulator cases the Nsight bank
    conflict counts, measured and predicted). ``summary``: everything ``--json`` prints
    (per-source and per-kind statistics, stale and skipped cases).
    """

    gpu: str
    spec: str
    data: str
    every: int
    cases: int
    mape: float
    max_ape: float
    worst: str
    spearman: float
    stale: int
    skipped: int
    rows: tuple = field(repr=False)
    summary: dict = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        """Exactly ``gpusim crosscheck --json``."""
        return dict(self.summary)

    def to_frame(self):
        """One row per predicted case, indexed by its id."""
        return _frame([dict(r) for r in self.rows], "id")


def crosscheck(data: str | Path | None = None, every: int = 1,
               kinds: str | Sequence[str] | None = None, progress: bool = False,
               include_fresh: bool = True, jobs: int = 1) -> CrossCheck:
    """Predict every recorded GPU case and compare with its measurement.

    ``data``: a campaign directory (``campaign.json``, ``ncu.json``; default
    ``measurements/h100``); ``every``: use every k-th recorded case (a fast subset);
    ``kinds``: the kernel kinds to include (a sequence, or comma-separated; default all):
    sparse_persistent, dense_persistent, csr, cublas, cusparse. ``progress``: a bar on stderr.
    ``include_fresh``: also the fresh draws (``fresh_*/``) under ``data``; the summary reports
    them in sample / out of sample (:mod:`gpusim.samples`) under ``samples``. ``jobs``: worker
    processes for the simulations.
    """
    from gpusim.cli import crosscheck as cc

    every = _int("every", every)
    if isinstance(kinds, str):
        kinds = tuple(k.strip() for k in kinds.split(","))
    elif kinds is not None:
        kinds = tuple(kinds)
    accepted = cc.SIM_KINDS + cc.LIB_KINDS
    for k in kinds or ():
        if k not in accepted:
            raise InputError(f"--kinds {k!r} is unknown; accepted: {', '.join(accepted)}")
    data = str(cc.DEFAULT_DATA if data is None else data)
    s = cc.run_crosscheck(data, every=every, kinds=kinds, progress=bool(progress),
                          include_fresh=include_fresh, jobs=_int("jobs", jobs))
    return CrossCheck(s.get("gpu", ""), s.get("spec", ""), s.get("data", data),
                      s.get("every", every), s["cases"], s["mape"], s["max_ape"], s["worst"],
                      s["spearman"], s.get("stale", 0), s.get("skipped", 0),
                      tuple(s.get("rows", ())), s)
