"""Where every weight lives: the mapping of ``U`` onto SMs, warps, lanes and register slots.

:func:`mapping_summary` gives the numbers (rows per warp, ``K_j`` per row-slot, padding,
registers per thread); :func:`plot_mapping` draws them in three panels:

(a) ``U`` itself, every nonzero coloured by the SM (CTA) whose registers hold it: rows are dealt
    whole, so each row is one colour;
(b) nonzeros per warp, stacked by row-slot, against the register slots every warp pays for
    (``32 * sum_j K_j``: the instruction stream is the same for all warps, so the longest row of
    each row-slot sets ``K_j`` for everyone);
(c) one warp's register file as a (slot x lane) grid: each cell is one (value, column) pair, the
    number is the column of ``h`` it gathers, the colour is the shared-memory bank of that
    column's first word (``col * B``, batch-interleaved ``[N][B]``), padding cells are hatched;
    on the right, the wavefronts each slot's loads cost (:func:`kernels_ir.banks.wavefronts`).
"""

from __future__ import annotations

import numpy as np

from kernels_ir.banks import BANKS, WARP, wavefronts
from kernels_ir.mapping import Mapping, access_pattern, slot_word_addresses

from .style import figure, label, pyplot

__all__ = ["mapping_summary", "plot_mapping", "warp_grid", "draw_warp_grid", "plot_warp_grids",
           "plot_capacity"]

_MAX_PIXELS = 1024  # panel (a) bins a larger matrix into at most this many pixels per side
_MAX_TEXT_CELLS = 32 * 40  # panel (c) writes column numbers only up to this many cells


def mapping_summary(mapping: Mapping, *, batch: int, wide_loads: bool, spec=None,
                    threads_per_cta: int | None = None) -> dict:
    """The mapping in numbers (plain Python values, JSON-ready).

    ``registers_per_thread`` is the kernel's count (weights, indices, row bookkeeping and scalars;
    :func:`kernels_ir.kernels.sparse_rnn.registers_needed`); with ``spec`` the budget
    ``min(max_regs_per_thread, regs_per_sm // threads_per_cta)``, the registers ptxas needs
    (``registers_ptxas``, :func:`~kernels_ir.kernels.sparse_rnn.ptxas_registers`) and whether
    they fit are added.
    """
    from kernels_ir.kernels.sparse_rnn import registers_needed

    real = ~mapping.pad
    per_warp = real.sum(axis=(1, 2))
    rows_held = (mapping.row_ids >= 0).sum(axis=1)
    threads = threads_per_cta or mapping.warps_per_cta * WARP
    regs = registers_needed(mapping.total_slots, mapping.rows_per_warp, batch, mapping.dense)
    wf = [wavefronts(words, width) for words, (width, _)
          in zip(slot_word_addresses(mapping, batch, wide_loads),
                 access_pattern(batch, wide_loads), strict=True)]
    out = {
        "n_rows": mapping.n_rows,
        "n_cols": mapping.n_cols,
        "nonzeros": int(real.sum()),
        "layout": mapping.layout,
        "dense": mapping.dense,
        "ctas": mapping.n_ctas,
        "warps_per_cta": mapping.warps_per_cta,
        "warps": mapping.n_warps,
        "rows_per_warp": mapping.rows_per_warp,
        "warps_by_rows_held": {int(k): int(v) for k, v in
                               zip(*np.unique(rows_held, return_counts=True), strict=True)},
        "slots_per_row_slot": [int(k) for k in mapping.slots],
        "total_slots": mapping.total_slots,
        "register_slots_per_warp": WARP * mapping.total_slots,
        "nonzeros_per_warp": {"min": int(per_warp.min()), "mean": float(per_warp.mean()),
                              "max": int(per_warp.max())},
        "padding_fraction": mapping.padding_fraction,
        "loads_per_slot": [f"{32 * w}-bit at col*B+{o}" for w, o in
                           access_pattern(batch, wide_loads)],
        "wavefronts_per_step_per_warp": {
            "min": int(sum(w.sum(axis=1) for w in wf).min()),
            "max": int(sum(w.sum(axis=1) for w in wf).max())},
        "registers_per_thread": int(regs),
        "threads_per_cta": int(threads),
        "h_shared_bytes": 4 * (-(-mapping.n_cols * batch // 4) * 4),
    }
    if spec is not None:
        budget = min(spec.max_regs_per_thread, spec.regs_per_sm // threads)
        from kernels_ir.kernels.sparse_rnn import ptxas_registers

        # as ptxas allocates them (models.capacity: the count plus ptxas' measured excess)
        need = ptxas_registers(mapping.total_slots, mapping.rows_per_warp, batch, mapping.dense,
                               arch=spec.arch, kmax=max(mapping.slots))
        out["register_budget"] = int(budget)
        out["registers_ptxas"] = int(need)
        out["fits_registers"] = bool(need <= budget)
        out["gpu"] = spec.name
    return out


def warp_grid(mapping: Mapping, warp: int, *, batch: int, wide_loads: bool) -> dict:
    """One warp's (slot x lane) arrays: ``cols``, ``banks``, ``pad``, ``rows`` (per slot) and
    ``wavefronts`` (per slot, all loads of the slot)."""
    if not 0 <= warp < mapping.n_warps:
        from kernels_ir.errors import InputError

        raise InputError(f"warp={warp} is outside 0..{mapping.n_warps - 1} "
                         f"({mapping.n_ctas} CTAs x {mapping.warps_per_cta} warps)")
    cols = np.asarray(mapping.cols[warp], dtype=np.int64)
    loads = access_pattern(batch, wide_loads)
    words = [w[warp] for w in slot_word_addresses(mapping, batch, wide_loads)]
    wf = sum(wavefronts(wd, width) for wd, (width, _) in zip(words, loads, strict=True))
    return {"cols": cols, "banks": (cols * batch + loads[0][1]) % BANKS,
            "pad": np.asarray(mapping.pad[warp]), "rows": mapping.slot_rows[warp],
            "wavefronts": np.asarray(wf, dtype=np.int64),
            "ideal": sum(width for width, _ in loads)}


def _owner_image(mapping: Mapping) -> tuple[np.ndarray, int]:
    """(rows x cols) image: owning SM of every nonzero, NaN elsewhere; binned if large."""
    n_r, n_c = mapping.n_rows, mapping.n_cols
    step = max(1, -(-max(n_r, n_c) // _MAX_PIXELS))
    img = np.full((-(-n_r // step), -(-n_c // step)), np.nan, dtype=np.float32)
    w, s, lane = np.nonzero(~mapping.pad)
    rows = mapping.slot_rows[w, s]
    cols = mapping.cols[w, s, lane]
    img[rows // step, cols // step] = w // mapping.warps_per_cta
    return img, step


def plot_mapping(mapping: Mapping, *, batch: int, wide_loads: bool, warp: int = 0,
                 title: str | None = None):
    """Three panels (see the module docstring); returns the Figure."""
    plt = pyplot()
    warp_grid(mapping, warp, batch=batch, wide_loads=wide_loads)  # validates warp first
    S = mapping.total_slots
    fig, axes = figure(1, 3, size=(16.0, max(5.5, min(11.0, 2.5 + 0.22 * S))),
                       width_ratios=[1.0, 1.15, 1.25])
    ax_u, ax_w, ax_g = axes
    wpc = mapping.warps_per_cta

    # (a) U coloured by owning SM
    img, step = _owner_image(mapping)
    im = ax_u.imshow(img, cmap="turbo", vmin=0, vmax=max(1, mapping.n_ctas - 1),
                     interpolation="nearest", aspect="auto",
                     extent=(-0.5, img.shape[1] * step - 0.5, img.shape[0] * step - 0.5, -0.5))
    ax_u.set_facecolor("white")
    binned = f", {step}x{step} bins" if step > 1 else ""
    label(ax_u, "column of U (index of h)", "row of U (output element)",
          f"(a) nonzeros of U by owning SM{binned}")
    bar = fig.colorbar(im, ax=ax_u, shrink=0.85)
    bar.set_label("SM (CTA) holding the row in registers")

    # (b) nonzeros per warp, stacked by row-slot, against the padded capacity
    real = (~mapping.pad).sum(axis=2)  # (warps, S)
    rs = mapping.slot_row_slot
    colors = plt.get_cmap("tab10")
    x = np.arange(mapping.n_warps)
    bottom = np.zeros(mapping.n_warps)
    for j, k in enumerate(mapping.slots):
        nz = real[:, rs == j].sum(axis=1)
        ax_w.bar(x, nz, bottom=bottom, width=1.0, color=colors(j % 10), linewidth=0,
                 label=f"row-slot {j} (K={k}, {32 * k} pairs)" if j < 8 else None)
        bottom += nz
    cap = WARP * mapping.total_slots
    ax_w.axhline(cap, color="black", linestyle="--", linewidth=1.2,
                 label=f"register pairs per warp = 32 x {S} = {cap}")
    ax_w.axvline(warp, color="red", linewidth=0.8, alpha=0.7, label=f"warp {warp} (panel c)")
    if mapping.n_ctas <= 16:
        for c in range(1, mapping.n_ctas):
            ax_w.axvline(c * wpc - 0.5, color="grey", linewidth=0.5, alpha=0.6)
    ax_w.set_xlim(-0.5, mapping.n_warps - 0.5)
    ax_w.set_ylim(0, cap * 1.25)
    label(ax_w, f"warp (= SM x {wpc} + warp in CTA)", "nonzeros held", "(b) nonzeros per warp",
          yunit="(value, column) pairs")
    ax_w.legend(loc="upper right", fontsize=7, ncol=1, framealpha=0.9)

    # (c) one warp's (slot x lane) grid
    draw_warp_grid(ax_g, mapping, warp, batch=batch, wide_loads=wide_loads)
    if title is None:
        title = (f"mapping of U ({mapping.n_rows} x {mapping.n_cols}, {int((~mapping.pad).sum())}"
                 f" nonzeros, layout {mapping.layout}) onto {mapping.n_ctas} SMs x {wpc} warps "
                 f"x 32 lanes; B={batch}, {'wide' if wide_loads else '32-bit'} loads")
    fig.suptitle(title, fontsize=10)
    return fig


def draw_warp_grid(ax, mapping: Mapping, warp: int, *, batch: int, wide_loads: bool,
                   title: str | None = None, colorbar: bool = True):
    """Draw one warp's (slot x lane) grid on ``ax`` (panel (c) of :func:`plot_mapping`)."""
    from matplotlib.patches import Patch, Rectangle

    grid = warp_grid(mapping, warp, batch=batch, wide_loads=wide_loads)
    S = mapping.total_slots
    wpc = mapping.warps_per_cta
    fig = ax.figure
    banks = np.ma.masked_array(grid["banks"], mask=grid["pad"])
    gim = ax.imshow(banks, cmap="hsv", vmin=0, vmax=BANKS, interpolation="nearest",
                    aspect="auto", extent=(-0.5, WARP - 0.5, S - 0.5, -0.5))
    for s, lane in zip(*np.nonzero(grid["pad"]), strict=True):
        ax.add_patch(Rectangle((lane - 0.5, s - 0.5), 1, 1, facecolor="0.9",
                               edgecolor="0.5", hatch="///", linewidth=0.3))
    if S * WARP <= _MAX_TEXT_CELLS:
        fs = 5 if mapping.n_cols >= 1000 else 6
        for s in range(S):
            for lane in range(WARP):
                if not grid["pad"][s, lane]:
                    ax.text(lane, s, str(grid["cols"][s, lane]), ha="center", va="center",
                            fontsize=fs, rotation=90 if mapping.n_cols >= 100 else 0)
    off = 0
    for j, k in enumerate(mapping.slots):
        row = int(mapping.row_ids[warp, j])
        ax.axhline(off - 0.5, color="black", linewidth=1.2)
        ax.text(WARP / 2 - 0.5, off - 0.5, f"row-slot {j}: " + (
            f"row {row} of U, {int((~grid['pad'][off:off + k]).sum())} nonzeros in K={k} slots"
            if row >= 0 else f"no row (K={k} slots of padding)"), ha="center", va="center",
            fontsize=7, bbox={"facecolor": "white", "edgecolor": "black", "linewidth": 0.5,
                              "pad": 1.5})
        off += k
    ax.set_xticks(range(0, WARP, 4))
    ax.set_yticks(range(S))
    ax.tick_params(axis="y", labelsize=6 if S > 20 else 8)
    sec = ax.secondary_yaxis("right")
    sec.set_yticks(range(S))
    sec.set_yticklabels([str(int(v)) for v in grid["wavefronts"]], fontsize=6 if S > 20 else 8)
    total = int(grid["wavefronts"].sum())
    sec.set_ylabel(f"wavefronts per slot (ideal {grid['ideal']}; total {total})")
    if title is None:
        title = (f"warp {warp} = SM {warp // wpc}, warp {warp % wpc}: column of h per "
                 f"(slot, lane), layout {mapping.layout}")
    label(ax, "lane", "register slot (loaded at compile-time index)", title)
    if colorbar:
        gbar = fig.colorbar(gim, ax=ax, shrink=0.85, pad=0.12)
        gbar.set_label(f"shared-memory bank of word col x {batch}")
    ax.legend(handles=[Patch(facecolor="0.9", edgecolor="0.5", hatch="///",
                             label="padding (weight 0)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.08), fontsize=7, frameon=False)
    return gim


def plot_warp_grids(mappings, warp: int, *, batch: int, wide_loads: bool,
                    title: str | None = None):
    """The same warp's (slot x lane) grid under several mappings (e.g. one per layout)."""
    mappings = list(mappings)
    S = max(m.total_slots for m in mappings)
    fig, axes = figure(1, len(mappings), size=(6.5 * len(mappings),
                                               max(4.5, min(11.0, 2.5 + 0.22 * S))))
    axes = np.atleast_1d(axes)
    for i, (ax, m) in enumerate(zip(axes, mappings, strict=True)):
        draw_warp_grid(ax, m, warp, batch=batch, wide_loads=wide_loads,
                       title=f"layout {m.layout}: warp {warp}", colorbar=i == len(mappings) - 1)
    if title is None:
        title = (f"one warp's gathers: colour = bank of word col x {batch}, number = column, "
                 f"right axis = wavefronts per slot ({'wide' if wide_loads else '32-bit'} loads)")
    fig.suptitle(title, fontsize=10)
    return fig


def plot_capacity(specs, *, batch: int = 4, densities=None, hiddens=None,
                  density: float = 0.1, dtype: str = "fp32"):
    """Capacity of the persistent kernels (:mod:`models.capacity`), two panels.

    (a) the largest hidden size that fits against density, one line per spec, markers by the
    binding limit (registers or shared memory), the dense kernel's limit dashed;
    (b) for ``specs[0]`` at ``density``: registers per thread by purpose for several hidden
    sizes, against the per-thread budget ``min(max_regs_per_thread, regs_per_sm / threads)``.
    """
    from models import capacity as cap

    specs = list(specs)
    if densities is None:
        densities = np.geomspace(0.01, 1.0, 11)
    densities = [float(d) for d in densities]
    fig, (ax_a, ax_b) = figure(1, 2, size=(13.0, 5.2))
    colors = pyplot().get_cmap("tab10")
    for i, spec in enumerate(specs):
        best = [cap.max_hidden(spec, d, batch, dtype=dtype) for d in densities]
        ns = [b.hidden for b in best]
        ax_a.plot(densities, ns, color=colors(i), linewidth=1.5,
                  label=f"{spec.name} sparse ({spec.sm_count} SMs)")
        for lim, marker in (("registers", "o"), ("shared memory", "s")):
            sel = [k for k, b in enumerate(best) if b.limit == lim]
            ax_a.scatter([densities[k] for k in sel], [ns[k] for k in sel], marker=marker,
                         color=colors(i), s=28, zorder=3)
        dense = cap.max_hidden(spec, 1.0, batch, dtype=dtype, dense=True)
        ax_a.axhline(dense.hidden, color=colors(i), linestyle="--", linewidth=1.0,
                     label=f"{spec.name} dense: N <= {dense.hidden} ({dense.limit})")
    ax_a.scatter([], [], marker="o", color="grey", label="limited by registers")
    ax_a.scatter([], [], marker="s", color="grey", label="limited by shared memory (h)")
    ax_a.set_xscale("log")
    ax_a.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax_a.yaxis.set_major_formatter(plain)
    ax_a.yaxis.set_minor_formatter(plain)
    ax_a.tick_params(axis="y", which="minor", labelsize=7)
    label(ax_a, "density of U (fraction of nonzero weights)", "largest hidden size N that fits",
          f"(a) capacity, batch {batch}, {dtype}, one CTA of {cap.THREADS_PER_CTA} threads/SM")
    ax_a.legend(fontsize=7, loc="upper right")
    ax_a.grid(True, which="both", alpha=0.3)

    spec = specs[0]
    if hiddens is None:
        top = cap.max_hidden(spec, density, batch, dtype=dtype).hidden
        hiddens = sorted({int(x) for x in np.linspace(max(32, top // 6), top * 1.2, 6).round(-1)})
    parts = {"weight values": [], "column indices": [],
             "bookkeeping (per row, per batch column, scalars)": [],
             "ptxas beyond the count (measured)": []}
    for n in hiddens:
        f = cap.fit(spec, n, batch, density, dtype=dtype)
        per_value = 1 if dtype == "fp32" else 0.5
        parts["weight values"].append(f.slots * per_value)
        parts["column indices"].append(f.slots * per_value)
        parts["bookkeeping (per row, per batch column, scalars)"].append(
            f.registers - f.ptxas_extra - 2 * f.slots * per_value)
        parts["ptxas beyond the count (measured)"].append(f.ptxas_extra)
    x = np.arange(len(hiddens))
    bottom = np.zeros(len(hiddens))
    for i, (name, vals) in enumerate(parts.items()):
        ax_b.bar(x, vals, bottom=bottom, color=colors(i + 3), label=name, width=0.7)
        bottom += np.asarray(vals, dtype=float)
    limit = cap.reg_limit(spec)
    ax_b.axhline(limit, color="red", linestyle="--",
                 label=f"budget {limit}/thread ({spec.regs_per_sm} regs/SM, "
                       f"max {spec.max_regs_per_thread}/thread)")
    ax_b.set_xticks(x, [str(n) for n in hiddens])
    label(ax_b, "hidden size N", "registers per thread",
          f"(b) where the registers go: {spec.name}, density {density:g}, batch {batch}",
          yunit="32-bit registers")
    ax_b.legend(fontsize=7, loc="upper left")
    return fig
