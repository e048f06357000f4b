"""The H100 measurement campaign: one script, one device call.

    PYTHONPATH=. python3 measurements/campaign.py --out $OUT            # everything
    PYTHONPATH=. python3 measurements/campaign.py --out $OUT --smoke    # < 3 min check
    PYTHONPATH=. python3 measurements/campaign.py --out $OUT --fresh 16 --seed 7  # fresh draw

``--fresh N --seed S`` draws N random layers that no recorded campaign holds (:func:`fresh_layers`:
hidden 256..8192 log-uniform, batch 1/2/4/8, density 0.01..0.5 log-uniform, layers where no
sparse persistent kernel fits are redrawn and listed) and measures every variant and baseline of
each (:func:`fresh_cases`) with the same checks, without the microbenchmarks. ``campaign.json``
then carries ``fresh = {seed, n, layers, rejected, model_fingerprint, fingerprint_gpu}``: the
fingerprint of the model that prices this GPU at measurement time
(:func:`gpusim.measurements.model_fingerprint` with ``gpu``), which tells
``gpusim crosscheck`` whether the draw is still out of sample. Store the files in a new dated
directory ``measurements/<gpu>/fresh_<date>_s<S>/``.

``--cells M`` adds M layers of the other kernels the IR builds (:func:`fresh_cell_layers`): gated
cells (LSTM, GRU) with fp32 or fp16 weights and RNN layers with fp16 weights, each with every
sparse variant, the dense kernel where it fits, cuBLAS and cuSPARSE over the gated rows (the
fp16 library paths with fp16 weights; :mod:`gpusim.backends.baselines`) and, for fp32 weights,
the CSR kernel (a warp per unit for a gated cell; it has fp32 weights only, so the fp16 layers
have no CSR case). Their cases carry ``cell`` and ``dtype``; ``fresh`` then also holds
``cell_layers``.

``--heads K`` adds K multi-head (block-diagonal) layers (:func:`fresh_head_layers`, RNN and LSTM
fp32): their sparse variants and dense kernel, values checked and timed, without baselines
(:func:`fresh_head_cases` says why); their cases carry ``heads``, ``fresh`` holds
``head_layers`` (each with the exchange its kernel builds: ``cta`` or ``grid``).

Stages (progress on stdout, a short table last):
1. provenance: GPU, driver, CUDA runtime, NVRTC, CuPy, torch versions, nvidia-smi, date, command;
2. microbenchmarks (kernels_ir.kernels.microbench), two sizes each -> ``microbench.json``;
3. cases (:func:`cases`): every persistent variant, the CSR kernel, cuBLAS and cuSPARSE per layer,
   each values-checked against float64 (a gated layer's CSR kernel: h and, LSTM, the cell state)
   then timed -> ``campaign.json``;
4. Nsight Compute: ``ncu`` re-runs this script with ``--ncu-worker``, which launches every
   persistent / CSR case once at T = NCU_STEPS; the counters (shared wavefronts and bank conflicts,
   L2 sectors by op) are parsed per launch -> ``ncu.json`` (+ the raw CSV).

Provenance of the kernels (``format_version`` 2): every case that runs a kernel of ours records
``kernel = {cuda_sha256, ir_sha256, steps}`` (sha256 of the generated CUDA source and of
``kernels_ir.format_kernel`` of exactly the kernel that was timed, at T = ``steps``); every
microbenchmark size records the same for its kernel, and every ncu launch the hashes of the
profiled kernel (T = NCU_STEPS). ``gpusim crosscheck`` rebuilds each case and reports the cases
whose kernel changed since as ``stale``.

Each stage catches its own failures per case and records them (``status``), so one bad case
never loses the others.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import time
import traceback

NCU_STEPS = 4
STEPS = 128
SHORT_STEPS = 32
NCU_METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
    "lts__t_sectors_op_atom.sum",
    "lts__t_sectors_op_red.sum",
    "gpu__time_duration.sum",
    # the shared wavefronts the addresses alone need (SASS-patched, loads and stores together)
    # and the data banks' arbitration conflicts, which the hardware conflict counters include
    # (measurements/bank_sass.py; gpusim.measurements.SASS_WAVEFRONTS / ARBITRATION)
    "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_bank_conflicts_type_arbitration.sum",
)
NCU_KERNELS = "regex:^(sparse|dense)_(rnn|lstm|gru)|csr_row_per_warp"
FORMAT_VERSION = 2   # gpusim.measurements.FORMAT_VERSION: cases carry their kernel's hashes
MICRO_SIZES = {"smem_latency": (64, 256), "l2_latency": (32, 128), "flag_round_trip": (500, 2000),
               "atomic_same": (8, 32), "atomic_distinct": (16, 64), "grid_barrier": (100, 400),
               "flag_round_trip_same_sm": (500, 2000), "flag_round_trip_delay16": (200, 800),
               "store_visibility": (500, 2000), "poll_storm": (100, 400),
               "l2_latency_sys": (32, 128), "flag_round_trip_sys": (500, 2000),
               "store_visibility_sys": (500, 2000), "poll_storm_sys": (100, 400),
               "poll_storm_rot": (128, 512), "poll_storm_plain": (128, 512)}

# (hidden, batch, density): hidden 256..8192, batch 1/2/4/8, density 0.01..0.5
LAYERS = [(256, 1, 0.5), (512, 8, 0.5), (1024, 4, 0.1), (2048, 2, 0.05), (2048, 8, 0.2),
          (4096, 4, 0.02), (8192, 1, 0.01)]
DENSE_LAYERS = [(256, 1), (1024, 4), (2048, 1)]
ALL_VARIANTS = [(s, w, lay) for s in ("lamport", "barrier") for w in (True, False)
                for lay in ("naive", "greedy")]
FULL_VARIANT_LAYERS = {(1024, 4, 0.1), (4096, 4, 0.02)}   # all 8 variants here
SOME_VARIANTS = [("lamport", True, "naive"), ("lamport", False, "naive"),
                 ("barrier", True, "naive"), ("barrier", False, "naive"),
                 ("lamport", True, "greedy")]


def cases() -> list[dict]:
    """The campaign's cases: a case = one layer configuration with one kernel or baseline."""
    out = []
    for n, b, d in LAYERS:
        variants = ALL_VARIANTS if (n, b, d) in FULL_VARIANT_LAYERS else SOME_VARIANTS
        for sync, wide, lay in variants:
            out.append({"kind": "sparse_persistent", "hidden": n, "batch": b, "density": d,
                        "sync": sync, "wide_loads": wide, "layout": lay})
        out.append({"kind": "csr", "hidden": n, "batch": b, "density": d})
        out.append({"kind": "cublas", "hidden": n, "batch": b, "density": d})
        out.append({"kind": "cusparse", "hidden": n, "batch": b, "density": d})
    for n, b in DENSE_LAYERS:
        out.append({"kind": "dense_persistent", "hidden": n, "batch": b, "density": 1.0,
                    "sync": "lamport", "wide_loads": True, "layout": "naive"})
    for i, c in enumerate(out):
        c["id"] = case_id(c)
        _kernel_options(c)
        c["seed"] = 1000 + i
    return out


FRESH_HIDDEN = (256, 8192)       # log-uniform, rounded to a multiple of FRESH_HIDDEN_STEP
FRESH_HIDDEN_STEP = 8            # draw s1 used 32; 8 also reaches layers whose CTAs share h sectors
FRESH_BATCHES = (1, 2, 4, 8)
FRESH_DENSITY = (0.01, 0.5)      # log-uniform, 3 significant digits
# every sparse variant: both syncs x (scalar naive, wide naive, wide bank-aware optimal); these
# include the four of ``gpusim predict`` (sparse-naive, -wide, -bank, -lamport)
FRESH_VARIANTS = [(s, w, lay) for s in ("lamport", "barrier")
                  for w, lay in ((False, "naive"), (True, "naive"), (True, "optimal"))]


def recorded_layers(root: str | None = None) -> set[tuple[int, int, float]]:
    """(hidden, batch, density) of every layer any recorded campaign file holds (archives and
    earlier fresh draws included)."""
    import glob
    import gzip
    import lzma

    root = root or os.path.join(os.path.dirname(os.path.abspath(__file__)))
    out = set()
    for path in sorted(p for name in ("campaign.json", "campaign.json.gz", "campaign.json.xz")
                       for p in glob.glob(os.path.join(root, "**", name), recursive=True)):
        try:
            opener = (gzip.open if path.endswith(".gz") else
                      lzma.open if path.endswith(".xz") else open)
            with opener(path, "rt") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        for c in data.get("cases", []) if isinstance(data, dict) else []:
            if isinstance(c, dict) and {"hidden", "batch", "density"} <= c.keys():
                out.add((int(c["hidden"]), int(c["batch"]), float(c["density"])))
    return out


def seen_layers() -> set[tuple[int, int, float]]:
    """The layers a fresh draw must not hold: every recorded campaign's (:func:`recorded_layers`)
    and the library grid's (``measurements/library_grid.py``, measured for the library tables:
    s210 drew one of them, (192, 1, 0.0103), before they were excluded)."""
    from measurements import library_grid as lg

    grid = {(int(n), int(b), float(d)) for pts in lg.GRID.values() for _, n, b, d in pts}
    return recorded_layers() | grid


def fresh_layers(n: int, seed: int, spec, exclude: set | None = None):
    """``n`` random layers (hidden, batch, density) not in ``exclude`` on which the sparse
    persistent kernel fits ``spec``; also the rejected draws with the reason."""
    import numpy as np

    from models import capacity as cap

    exclude = seen_layers() if exclude is None else exclude
    rng = np.random.default_rng(seed)
    layers, rejected = [], []
    for _ in range(50 * n):
        if len(layers) == n:
            break
        layer = _draw_layer(rng, FRESH_HIDDEN)
        hidden, batch, density = layer
        if layer in exclude or layer in layers:
            rejected.append({"layer": layer, "why": "already recorded"})
            continue
        f = cap.fit(spec, hidden, batch, density, exact=False)
        if not f.fits:
            rejected.append({"layer": layer, "why": f"does not fit: {f.limit}"})
            continue
        layers.append(layer)
    return layers, rejected


def fresh_cases(layers, seed: int, spec) -> list[dict]:
    """Every sparse variant (:data:`FRESH_VARIANTS`), the dense persistent kernel where it fits,
    the CSR kernel, cuBLAS and cuSPARSE for each layer; seeds derived from ``seed``."""
    from models import capacity as cap

    out = []
    for n, b, d in layers:
        for sync, wide, lay in FRESH_VARIANTS:
            out.append({"kind": "sparse_persistent", "hidden": n, "batch": b, "density": d,
                        "sync": sync, "wide_loads": wide, "layout": lay})
        if cap.fit(spec, n, b, 1.0, dense=True, exact=False).fits:
            out.append({"kind": "dense_persistent", "hidden": n, "batch": b, "density": d,
                        "sync": "lamport", "wide_loads": True, "layout": "naive"})
        for kind in ("csr", "cublas", "cusparse"):
            out.append({"kind": kind, "hidden": n, "batch": b, "density": d})
    for i, c in enumerate(out):
        c["id"] = case_id(c)
        _kernel_options(c)
        c["seed"] = 100_000 * (seed + 1) + i
    return out


# --cells: (cell, dtype) kinds drawn uniformly; gated layers have 3-4x the rows of an RNN one,
# so their hidden range is lower (the largest fits near 2048 at low density on the H100)
CELL_KINDS = (("lstm", "fp32"), ("gru", "fp32"), ("lstm", "fp16"), ("gru", "fp16"),
              ("rnn", "fp16"))
CELL_HIDDEN = {"rnn": FRESH_HIDDEN, "lstm": (192, 2048), "gru": (192, 2048)}


def _draw_layer(rng, hidden_range) -> tuple[int, int, float]:
    """One (hidden, batch, density): hidden log-uniform in ``hidden_range`` rounded to
    :data:`FRESH_HIDDEN_STEP`, batch from :data:`FRESH_BATCHES`, density log-uniform in
    :data:`FRESH_DENSITY` (3 significant digits)."""
    import numpy as np

    lo, hi = np.log(hidden_range[0]), np.log(hidden_range[1])
    step = FRESH_HIDDEN_STEP
    hidden = int(min(hidden_range[1], max(hidden_range[0],
                                          step * round(np.exp(rng.uniform(lo, hi)) / step))))
    batch = int(rng.choice(FRESH_BATCHES))
    d = float(np.exp(rng.uniform(np.log(FRESH_DENSITY[0]), np.log(FRESH_DENSITY[1]))))
    return hidden, batch, float(f"{d:.3g}")


def fresh_cell_layers(m: int, seed: int, spec, exclude: set | None = None):
    """``m`` random layers ``{cell, dtype, hidden, batch, density}`` (:data:`CELL_KINDS`,
    :data:`CELL_HIDDEN`) whose (hidden, batch, density) no recorded file holds and on which the
    sparse persistent kernel of that cell and dtype fits ``spec``; also the rejected draws.
    The random stream is its own (``seed`` + 1_000_000), so adding ``--cells`` leaves the RNN
    draw of the same seed unchanged."""
    import numpy as np

    from models import capacity as cap

    exclude = seen_layers() if exclude is None else exclude
    rng = np.random.default_rng(seed + 1_000_000)
    layers, rejected = [], []
    for _ in range(50 * m):
        if len(layers) == m:
            break
        cell, dtype = CELL_KINDS[int(rng.integers(len(CELL_KINDS)))]
        hidden, batch, density = _draw_layer(rng, CELL_HIDDEN[cell])
        layer = {"cell": cell, "dtype": dtype, "hidden": hidden, "batch": batch,
                 "density": density}
        if (hidden, batch, density) in exclude or layer in layers:
            rejected.append({"layer": layer, "why": "already recorded"})
            continue
        f = cap.fit(spec, hidden, batch, density, cell=cell, dtype=dtype, exact=False)
        if not f.fits:
            rejected.append({"layer": layer, "why": f"does not fit: {f.limit}"})
            continue
        layers.append(layer)
    return layers, rejected


def fresh_cell_cases(layers, seed: int, spec, start: int = 0) -> list[dict]:
    """The cases of :func:`fresh_cell_layers`'s layers: every sparse variant
    (:data:`FRESH_VARIANTS`), the dense persistent kernel where it fits, the CSR kernel (fp32
    weights only), cuBLAS and cuSPARSE; seeds continue :func:`fresh_cases`'s from ``start``."""
    from models import capacity as cap

    out = []
    for lay in layers:
        base = {k: lay[k] for k in ("hidden", "batch", "density", "cell", "dtype")}
        n, b, cell, dtype = lay["hidden"], lay["batch"], lay["cell"], lay["dtype"]
        for sync, wide, layout in FRESH_VARIANTS:
            out.append({"kind": "sparse_persistent", **base, "sync": sync, "wide_loads": wide,
                        "layout": layout})
        if cap.fit(spec, n, b, 1.0, cell=cell, dtype=dtype, dense=True, exact=False).fits:
            out.append({"kind": "dense_persistent", **base, "sync": "lamport",
                        "wide_loads": True, "layout": "naive"})
        for kind in (("csr",) if dtype == "fp32" else ()) + ("cublas", "cusparse"):
            out.append({"kind": kind, **base})
    for i, c in enumerate(out):
        c["id"] = case_id(c)
        _kernel_options(c)
        c["seed"] = 100_000 * (seed + 1) + start + i
    return out


# --heads: multi-head (block-diagonal) layers, docs/heads.md: H heads of a head size drawn
# log-uniform and rounded to FRESH_HIDDEN_STEP, hidden = H x head size up to HEAD_HIDDEN_MAX
HEAD_KINDS = (("rnn", "fp32"), ("lstm", "fp32"))
HEAD_COUNTS = (4, 8, 16, 32, 64, 128)
HEAD_SIZE = (32, 512)
HEAD_HIDDEN_MAX = 4096


def fresh_head_layers(m: int, seed: int, spec, exclude: set | None = None):
    """``m`` random multi-head layers ``{cell, dtype, heads, hidden, batch, density}``
    (:data:`HEAD_KINDS`, :data:`HEAD_COUNTS`, :data:`HEAD_SIZE`; ``density`` within the
    diagonal blocks) whose (hidden, batch, density) no recorded file holds and whose sparse
    persistent kernel builds for ``spec`` (whole heads per CTA or, when a CTA cannot hold them,
    the grid-wide exchange); also the rejected draws. Its own random stream (``seed`` +
    2_000_000), so ``--heads`` leaves the other layers of a seed unchanged."""
    import numpy as np

    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    exclude = seen_layers() if exclude is None else exclude
    rng = np.random.default_rng(seed + 2_000_000)
    layers, rejected = [], []
    for _ in range(50 * m):
        if len(layers) == m:
            break
        cell, dtype = HEAD_KINDS[int(rng.integers(len(HEAD_KINDS)))]
        heads = int(rng.choice(HEAD_COUNTS))
        hi = min(HEAD_SIZE[1], HEAD_HIDDEN_MAX // heads)
        size, batch, density = _draw_layer(rng, (HEAD_SIZE[0], max(HEAD_SIZE[0], hi)))
        layer = {"cell": cell, "dtype": dtype, "heads": heads, "hidden": heads * size,
                 "batch": batch, "density": density}
        if (layer["hidden"], batch, density) in exclude or layer in layers:
            rejected.append({"layer": layer, "why": "already recorded"})
            continue
        try:
            prog = build_sparse_rnn(make_layer(layer["hidden"], batch, density, 2, 0, cell=cell,
                                               heads=heads), spec, layout="optimal")
        except CapacityError as exc:
            rejected.append({"layer": layer, "why": f"does not fit: {exc}"})
            continue
        layer["exchange"] = dict(prog.kernel.meta).get("exchange", "grid")
        layers.append(layer)
    return layers, rejected


def fresh_head_cases(layers, seed: int, spec, start: int = 0) -> list[dict]:
    """The cases of :func:`fresh_head_layers`'s layers: the sparse variants
    (:data:`FRESH_VARIANTS`; a layer whose CTAs hold whole heads exchange h inside the CTA
    whatever the sync, so only its Lamport ones) and the dense kernel where it fits. No
    baselines: the libraries would see one block-diagonal matrix, not the per-head products a
    head-wise layer is run with, so these layers are checked per step, not for a speedup."""
    from models import capacity as cap

    out = []
    for lay in layers:
        base = {k: lay[k] for k in ("hidden", "batch", "density", "cell", "dtype", "heads")}
        local = lay.get("exchange") == "cta"
        for sync, wide, layout in FRESH_VARIANTS:
            if local and sync != "lamport":
                continue
            out.append({"kind": "sparse_persistent", **base, "sync": sync, "wide_loads": wide,
                        "layout": layout})
        if cap.fit(spec, lay["hidden"], lay["batch"], 1.0, cell=lay["cell"], dtype=lay["dtype"],
                   dense=True, exact=False).fits:
            out.append({"kind": "dense_persistent", **base, "sync": "lamport",
                        "wide_loads": True, "layout": "naive"})
    for i, c in enumerate(out):
        c["id"] = case_id(c)
        _kernel_options(c)
        c["seed"] = 100_000 * (seed + 1) + start + i
    return out


def _kernel_options(c: dict) -> None:
    """Record in a Lamport persistent case the options its kernel is built with that older
    records lack: ``step_wait``, the ``__nanosleep`` closing each step
    (``sparse_rnn.LAMPORT_STEP_WAIT_NS``; a case without it ran the kernel without a wait,
    :func:`gpusim.measurements.build_case`), and ``stage_unroll``, the staging loop unrolled
    (``sparse_rnn.LAMPORT_STAGE_UNROLL``; a case without it ran the rolled loop)."""
    from kernels_ir.kernels.sparse_rnn import LAMPORT_STAGE_UNROLL, LAMPORT_STEP_WAIT_NS

    if c.get("sync") == "lamport":
        c["step_wait"] = LAMPORT_STEP_WAIT_NS
        c["stage_unroll"] = LAMPORT_STAGE_UNROLL


def case_id(c: dict) -> str:
    tag = "".join(f"-{x}" for x, default in ((c.get("cell", "rnn"), "rnn"),
                                             (c.get("dtype", "fp32"), "fp32"))
                  if x != default)
    if int(c.get("heads", 1)) > 1:
        tag += f"-H{int(c['heads'])}"
    base = f"{c['kind']}{tag}-h{c['hidden']}-b{c['batch']}-d{c['density']}"
    if "sync" in c:
        base += f"-{c['sync']}-{'wide' if c['wide_loads'] else 'scalar'}-{c['layout']}"
    return base


def build_case(c: dict, steps: int, spec):
    from gpusim.measurements import build_case as _build

    return _build(c, steps, spec)


def provenance(argv) -> dict:
    from gpusim.backends.cupy_backend import device_info

    info = device_info()
    try:
        import torch
        info["torch_version"] = torch.__version__
    except Exception:
        info["torch_version"] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,"
                              "clocks.max.sm,clocks.mem,power.limit,temperature.gpu",
                              "--format=csv"], capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:
        smi = f"nvidia-smi failed: {exc}"
    info.update({"nvidia_smi": smi.strip(), "date": datetime.datetime.now(
        datetime.UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "python": platform.python_version(), "command": " ".join(["python3"] + argv)})
    return info


KERNEL_KINDS_NCU = ("sparse_persistent", "dense_persistent", "csr")
# --deadline: what the Nsight pass leaves for saving the records after it, and the least it needs
NCU_MARGIN_S = 15
NCU_MIN_S = 30


def _save_campaign(out: str, prov: dict, results: list, fresh: dict | None) -> None:
    obj = {"format_version": FORMAT_VERSION, "provenance": prov,
           "steps": [STEPS, SHORT_STEPS], "cases": results}
    if fresh is not None:
        obj["fresh"] = fresh
    _save(os.path.join(out, "campaign.json"), obj)


def _save(path, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=float)


def run_microbenchmarks(runner, quick: bool) -> dict:
    from measurements.probe import time_microbench

    out = {}
    for name, sz in MICRO_SIZES.items():
        if quick and name not in ("smem_latency", "flag_round_trip", "store_visibility",
                                  "poll_storm"):
            continue
        out[name] = time_microbench(runner, name, sz, repeats=7, warmup=2,
                                    label=f"[micro] {name}")
    return out


def run_case(c: dict, runner, spec, repeats: int) -> tuple[dict, dict | None]:
    """(result, kernel fingerprint of the timed T = STEPS kernel, None for library baselines)."""
    from gpusim.backends import baselines
    from gpusim.backends.cupy_backend import run_csr_program, run_program
    from gpusim.measurements import KERNEL_KINDS, program_fingerprint

    prog = build_case(c, STEPS, spec)
    fp = program_fingerprint(prog, STEPS) if c["kind"] in KERNEL_KINDS else None
    if c["kind"] in ("sparse_persistent", "dense_persistent"):
        r = run_program(prog, repeats=repeats, warmup=2, seed=c["seed"],
                        short_steps=SHORT_STEPS, spec=spec, runner=runner)
        r["slots"] = prog.mapping.total_slots
        r["layout_resolved"] = prog.mapping.layout
    elif c["kind"] == "csr":
        r = run_csr_program(prog, repeats=repeats, warmup=2, seed=c["seed"],
                            short_steps=SHORT_STEPS, runner=runner)
    else:
        r = baselines.BASELINES[c["kind"]](prog, repeats=repeats, warmup=2, seed=c["seed"],
                                           short_steps=SHORT_STEPS,
                                           dtype=c.get("dtype", "fp32"))
    return r, fp


def run_recorded(c: dict, runner, spec, repeats: int, tag: str) -> dict:
    """The record of case ``c``: the case with its ``result`` (and ``kernel`` fingerprint) and
    ``status`` "ok", or ``status`` "error" with the error and its traceback; one line printed
    (``tag`` first)."""
    t0 = time.time()
    rec = dict(c)
    try:
        rec["result"], fp = run_case(c, runner, spec, repeats)
        if fp is not None:
            rec["kernel"] = fp
        rec["status"] = "ok"
        ps = rec["result"]["per_step_s"]
        print(f"{tag} {c['id']:58s} {ps * 1e6:8.3f} us/step "
              f"err={rec['result']['max_rel_err']:.1e} ({time.time() - t0:.1f}s)", flush=True)
    except Exception as exc:
        rec["status"] = "error"
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["traceback"] = traceback.format_exc()[-2000:]
        print(f"{tag} {c['id']}: FAILED {rec['error']}", flush=True)
    return rec


def launch_once(runner, kernel, inputs: dict, check_grid: bool = True) -> None:
    """Compile ``kernel``, launch it once on ``inputs`` and raise on its error flag (the launch
    an ``ncu`` worker profiles); ``check_grid``: require a co-resident grid first."""
    comp = runner.compile(kernel, cooperative=check_grid)
    if check_grid:
        runner.check_grid(comp)
    bufs = runner.device_buffers(comp, inputs)
    runner.launch(comp, bufs)
    runner.cp.cuda.Device().synchronize()
    runner.check_err(comp, bufs)


def launch_jobs(runner, jobs, order_path: str, check_grid: bool = True) -> None:
    """Launch each ``(name, program)`` once (the launches an ``ncu`` run profiles) and keep
    ``order_path`` up to date: the names in launch order, ``None`` for a launch that failed
    (its error goes to stderr and the others go on). ``program`` has ``kernel`` and
    ``inputs``; ``check_grid``: see :func:`launch_once`."""
    order = []
    for name, prog in jobs:
        try:
            launch_once(runner, prog.kernel, prog.inputs, check_grid=check_grid)
            order.append(name)
        except Exception as exc:  # record and go on
            order.append(None)
            print(f"worker {name}: {exc}", file=sys.stderr)
        with open(order_path, "w") as f:
            json.dump(order, f)


def ncu_worker(args) -> int:
    """Launch every persistent / CSR case once at T = NCU_STEPS (run under ncu)."""
    import numpy as np

    from gpusim.backends.cupy_backend import Runner, device_info
    from gpusim.measurements import kernel_fingerprint, spec_name_for_gpu
    from gpusim.specs import load_spec

    spec = load_spec(spec_name_for_gpu(device_info()["gpu_name"]))

    runner = Runner()
    order, prints = [], {}
    todo = cases()
    if args.cases_file:   # the parent's selection (a fresh draw)
        with open(args.cases_file) as f:
            todo = json.load(f)
    for c in todo:
        if c["kind"] not in ("sparse_persistent", "dense_persistent", "csr"):
            continue
        if args.only and c["id"] not in args.only.split(","):
            continue
        try:
            prog = build_case(c, NCU_STEPS, spec)
            prints[c["id"]] = {**kernel_fingerprint(prog.kernel), "steps": NCU_STEPS}
            if c["kind"] == "csr":
                launch_once(runner, prog.kernel, prog.step_inputs(0, np.asarray(prog.layer.h0)),
                            check_grid=False)
            else:
                launch_once(runner, prog.kernel, prog.inputs)
            order.append(c["id"])
        except Exception as exc:
            order.append(None)
            print(f"ncu-worker {c['id']}: {exc}", file=sys.stderr)
        with open(args.ncu_order, "w") as f:  # after every case: survives an ncu timeout
            json.dump(order, f)
        with open(args.ncu_order + ".kernels", "w") as f:
            json.dump(prints, f)
    return 0


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of ``ncu --csv --page raw``-style or details output -> one dict per kernel launch."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    launches: dict[str, dict] = {}
    for r in rows:
        if "Metric Name" not in r:
            continue
        key = r.get("ID")
        d = launches.setdefault(key, {"id": int(key), "kernel": r.get("Kernel Name"),
                                      "metrics": {}})
        val = r.get("Metric Value", "").replace(",", "")
        try:
            d["metrics"][r["Metric Name"]] = float(val)
        except ValueError:
            d["metrics"][r["Metric Name"]] = val
    return [launches[k] for k in sorted(launches, key=lambda k: int(k))]


def run_ncu(out_dir: str, only: str | None = None, timeout: int = 420,
            selected: list[dict] | None = None, metrics=NCU_METRICS,
            log_name: str = "ncu_raw.csv") -> dict:
    """Profile the kernel cases (all of :func:`cases`, or ``selected``) under ``ncu``, counting
    ``metrics`` (the raw CSV goes to ``out_dir/log_name``)."""
    order_path = os.path.join(out_dir, "ncu_order.json")
    log = os.path.join(out_dir, log_name)
    cmd = ["ncu", "--csv", "--metrics", ",".join(metrics), "--kernel-name", NCU_KERNELS,
           "--clock-control", "none", "--log-file", log,
           sys.executable, os.path.abspath(__file__), "--ncu-worker", "--ncu-order", order_path]
    if only:
        cmd += ["--only", only]
    if selected is not None:
        import tempfile

        fd, cases_file = tempfile.mkstemp(suffix="_ncu_cases.json")
        with os.fdopen(fd, "w") as f:
            json.dump(selected, f)
        cmd += ["--cases-file", cases_file]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONPATH=os.getcwd()))
        rc, err, out = p.returncode, p.stderr, p.stdout
    except subprocess.TimeoutExpired as exc:  # keep what the log already holds
        rc, err, out = "timeout", str(exc.stderr or "")[-3000:], ""
    res = {"command": " ".join(cmd), "returncode": rc, "seconds": time.time() - t0,
           "stderr_tail": err[-3000:], "stdout_tail": out[-2000:],
           "steps": NCU_STEPS, "metrics": list(metrics)}
    try:
        with open(log) as f:
            launches = parse_ncu_csv(f.read())
        with open(order_path) as f:
            order = [x for x in json.load(f) if x is not None]
    except (OSError, ValueError) as exc:
        res["error"] = str(exc)
        return res
    res["cases"] = dict(zip(order, launches, strict=False))
    try:
        with open(order_path + ".kernels") as f:
            prints = json.load(f)
        for cid, rec in res["cases"].items():
            rec["kernel"] = prints.get(cid)
    except (OSError, ValueError):
        pass
    res["launches_parsed"] = len(launches)
    return res


def ncu_budget(ncu_timeout: int, deadline: int, elapsed: float) -> int | None:
    """Seconds the Nsight pass may take: ``ncu_timeout``, or under ``deadline`` (the whole run's
    seconds, 0: none) what is left after ``elapsed`` less :data:`NCU_MARGIN_S`, whichever is
    less; None when that is under :data:`NCU_MIN_S` (the pass is skipped)."""
    if not deadline:
        return ncu_timeout
    left = int(deadline - elapsed - NCU_MARGIN_S)
    return None if left < NCU_MIN_S else min(ncu_timeout, left)


def ncu_lost_note(ncu: dict | None, budget: int | None, deadline: int, elapsed: float,
                  profiled: int) -> str | None:
    """The text of a draw's ``ncu_lost.txt`` when its Nsight pass was skipped (``ncu`` None) or
    cut by its time limit (``returncode`` "timeout"), else None. ``profiled``: the kernel cases
    the pass was to profile."""
    if ncu is None:
        return (f"Nsight Compute's pass did not finish: it was not started, because after "
                f"{elapsed:.0f} s the run's --deadline of {deadline} s left less than the "
                f"{NCU_MIN_S} s a pass needs (the campaign's timings had all been written, "
                f"every case checked). No ncu.json was produced; the draw's bank conflicts are "
                f"not compared.\n")
    if "cases" not in ncu:      # ncu failed, or its log could not be read: nothing to keep
        return (f"Nsight Compute's pass did not finish: ncu returned {ncu.get('returncode')!r}"
                f" ({ncu.get('error', 'no log')}); its report is ncu_error.json, no ncu.json was "
                f"produced, and the draw's bank conflicts are not compared.\n")
    if ncu.get("returncode") != "timeout":
        return None
    got = len(ncu["cases"])
    return (f"Nsight Compute's pass did not finish: its time limit ({budget} s"
            + (f", what the run's --deadline {deadline} left" if deadline else "")
            + f") ended it with {got} of the {profiled} kernel cases profiled. ncu.json keeps "
            f"those (partial); the others' bank conflicts are not compared.\n")


def compile_only(arch: str = "sm_90", selected: list[dict] | None = None) -> int:
    """Build every case's kernel and every microbenchmark size, compile with ``nvcc -cubin``
    (no GPU needed) and check for spills / a stack frame: the campaign's local dry run."""
    import re
    import tempfile

    from gpusim.specs import load_spec
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels import microbench as mb

    spec = load_spec("h100")
    kernels = []
    for c in cases() if selected is None else selected:
        if c["kind"] in KERNEL_KINDS_NCU:
            kernels.append((c["id"], build_case(c, STEPS, spec).kernel))
    for name, sizes in MICRO_SIZES.items() if selected is None else ():
        for sz in sizes:
            kernels.append((f"micro {name} {sz}", mb.build(name, sz).kernel))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, k) in enumerate(kernels):
            cu = os.path.join(tmp, f"k{i}.cu")
            with open(cu, "w") as f:
                f.write(generate(k).code)
            r = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "--ptxas-options=-v", "-o",
                                cu[:-3] + ".cubin", cu], capture_output=True, text=True)
            regs = re.findall(r"Used (\d+) registers", r.stderr)
            spill = re.findall(r"(\d+) bytes spill", r.stderr)
            stack = re.findall(r"(\d+) bytes stack frame", r.stderr)
            ok = r.returncode == 0 and not any(int(x) for x in spill + stack)
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {label:58s} regs={regs[-1] if regs else '?'}"
                  + ("" if ok else f"\n{r.stderr[-800:]}"), flush=True)
    print(f"{len(kernels) - bad}/{len(kernels)} kernels compiled for {arch} without spills")
    return 1 if bad else 0


def _fresh_draw(args, spec):
    """(layers, rejected, cell layers, cell rejected, head layers, head rejected, cases) of
    ``--fresh N [--cells M] [--heads K]``."""
    layers, rejected = fresh_layers(args.fresh, args.seed, spec)
    cell_layers, cell_rejected = (fresh_cell_layers(args.cells, args.seed, spec) if args.cells
                                  else ([], []))
    head_layers, head_rejected = (fresh_head_layers(args.heads, args.seed, spec) if args.heads
                                  else ([], []))
    selected = fresh_cases(layers, args.seed, spec)
    selected += fresh_cell_cases(cell_layers, args.seed, spec, start=len(selected))
    selected += fresh_head_cases(head_layers, args.seed, spec, start=len(selected))
    return layers, rejected, cell_layers, cell_rejected, head_layers, head_rejected, selected


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "measurements/out"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--ncu-timeout", type=int, default=300)
    ap.add_argument("--deadline", type=int, default=0, metavar="S",
                    help="seconds the whole run may take (0: no limit): the Nsight pass gets "
                         "what is left, less a margin, at most --ncu-timeout, and is skipped "
                         "with under 30 s; a pass cut short or skipped leaves ncu_lost.txt")
    ap.add_argument("--ncu-worker", action="store_true")
    ap.add_argument("--ncu-order")
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--fresh", type=int, default=0, metavar="N",
                    help="measure N freshly drawn layers instead of the campaign's (no "
                         "microbenchmarks); see fresh_layers")
    ap.add_argument("--seed", type=int, default=0, help="--fresh: seed of the draw")
    ap.add_argument("--cells", type=int, default=0, metavar="M",
                    help="with --fresh: also M gated / fp16 layers (fresh_cell_layers)")
    ap.add_argument("--heads", type=int, default=0, metavar="K",
                    help="with --fresh: also K multi-head layers (fresh_head_layers)")
    ap.add_argument("--cases-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true",
                    help="--fresh: print the draw and stop (no GPU)")
    ap.add_argument("--compile-only", action="store_true",
                    help="build every kernel and compile it with nvcc (no GPU), then stop")
    args = ap.parse_args(argv)
    if (args.cells or args.heads) and not args.fresh:
        raise SystemExit(f"--cells {args.cells} --heads {args.heads}: accepted only with "
                         f"--fresh N (N >= 1)")
    if args.fresh and (args.compile_only or args.dry_run):   # local checks of a draw, no GPU
        from gpusim.specs import load_spec

        spec = load_spec("h100")
        layers, rejected, cell_layers, _, head_layers, _, selected = _fresh_draw(args, spec)
        print(f"seed {args.seed}: {len(layers)} + {len(cell_layers)} + {len(head_layers)} "
              f"layers, {len(selected)} cases; rejected: {rejected}")
        kinds: dict = {}
        for c in selected:
            kind = c["kind"] + "".join(f" {c[k]}" for k in ("cell", "dtype") if k in c)
            kinds[kind] = kinds.get(kind, 0) + 1
        print("  cases: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
        for layer in layers:
            print("  hidden={} batch={} density={}".format(*layer))
        for lay in cell_layers:
            print("  {cell} {dtype} hidden={hidden} batch={batch} density={density}".format(
                **lay))
        for lay in head_layers:
            print("  {cell} {dtype} heads={heads} hidden={hidden} batch={batch} "
                  "density={density} exchange={exchange}".format(**lay))
        return compile_only(selected=selected) if args.compile_only else 0
    if args.compile_only:
        return compile_only()
    if args.ncu_worker:
        return ncu_worker(args)
    os.makedirs(args.out, exist_ok=True)
    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.probe import ClockSampler

    t_start = time.time()
    prov = provenance([os.path.relpath(__file__)] + argv)
    print(json.dumps({k: v for k, v in prov.items() if k != "nvidia_smi"}), flush=True)
    print(prov["nvidia_smi"], flush=True)
    spec = load_spec(spec_name_for_gpu(prov["gpu_name"]))
    clocks = ClockSampler()
    runner = Runner()
    fresh = None
    if args.fresh:
        if not 1 <= args.fresh <= 64 or not 0 <= args.cells <= 64 or \
                not 0 <= args.heads <= 64 or args.seed < 0:
            raise SystemExit(f"--fresh {args.fresh} --cells {args.cells} --heads {args.heads} "
                             f"--seed {args.seed}: accepted 1..64 layers, 0..64 cell and head "
                             f"layers and a seed >= 0")
        from gpusim.measurements import model_fingerprint

        (layers, rejected, cell_layers, cell_rejected, head_layers, head_rejected,
         selected) = _fresh_draw(args, spec)
        fresh = {"seed": args.seed, "n": args.fresh, "layers": layers, "rejected": rejected,
                 "model_fingerprint": model_fingerprint(gpu=spec.name),
                 "fingerprint_gpu": spec.name,
                 "ranges": {"hidden": FRESH_HIDDEN, "batch": FRESH_BATCHES,
                            "density": FRESH_DENSITY}}
        if args.cells:
            fresh.update({"cells": args.cells, "cell_layers": cell_layers,
                          "cell_rejected": cell_rejected,
                          "cell_ranges": {"kinds": CELL_KINDS, "hidden": CELL_HIDDEN}})
        if args.heads:
            fresh.update({"heads": args.heads, "head_layers": head_layers,
                          "head_rejected": head_rejected,
                          "head_ranges": {"kinds": HEAD_KINDS, "heads": HEAD_COUNTS,
                                          "head_size": HEAD_SIZE,
                                          "hidden_max": HEAD_HIDDEN_MAX}})
        print(f"[fresh] seed {args.seed}: {len(layers)} layers {layers}; "
              f"{len(rejected)} draws rejected; {len(cell_layers)} cell layers; "
              f"{len(head_layers)} head layers", flush=True)
        micro = {}
    else:
        micro = run_microbenchmarks(runner, args.smoke)
        _save(os.path.join(args.out, "microbench.json"),
              {"format_version": FORMAT_VERSION, "provenance": prov, "results": micro})
        selected = cases()
    if args.smoke:
        want = {"sparse_persistent-h1024-b4-d0.1-lamport-wide-naive",
                "csr-h1024-b4-d0.1", "cublas-h1024-b4-d0.1", "cusparse-h1024-b4-d0.1"}
        selected = [c for c in selected if c["id"] in want]
    elif args.only:
        selected = [c for c in selected if c["id"] in args.only.split(",")]
    results = []
    for i, c in enumerate(selected):
        results.append(run_recorded(c, runner, spec, 3 if args.smoke else args.repeats,
                                    f"[{i + 1}/{len(selected)}]"))
        _save_campaign(args.out, prov, results, fresh)
    samples = clocks.stop(prov)
    _save_campaign(args.out, prov, results, fresh)
    if not fresh:
        _save(os.path.join(args.out, "microbench.json"),
              {"format_version": FORMAT_VERSION, "provenance": prov, "results": micro})
    print(f"[clock] SM clock samples: n={len(samples)} median="
          f"{sorted(samples)[len(samples) // 2] if samples else None} MHz", flush=True)
    if not args.skip_ncu:
        only = None
        if args.smoke:
            only = "sparse_persistent-h1024-b4-d0.1-lamport-wide-naive,csr-h1024-b4-d0.1"
        profile = (None if fresh is None else
                   [c for c in selected if c["kind"] in KERNEL_KINDS_NCU])
        elapsed = time.time() - t_start
        budget = ncu_budget(args.ncu_timeout, args.deadline, elapsed)
        ncu = None
        if budget is not None:
            try:
                ncu = run_ncu(args.out, only=only, timeout=budget, selected=profile)
            except Exception as exc:
                ncu = {"error": f"{type(exc).__name__}: {exc}"}
            ncu["provenance"] = prov
            # only a pass with cases makes an ncu.json (the loader's schema needs them)
            _save(os.path.join(args.out, "ncu.json" if "cases" in ncu else "ncu_error.json"),
                  ncu)
            print(f"[ncu] rc={ncu.get('returncode')} launches={ncu.get('launches_parsed')} "
                  f"{ncu.get('error', '')} {ncu.get('stderr_tail', '')[-600:]}", flush=True)
        note = ncu_lost_note(ncu, budget, args.deadline, elapsed,
                             sum(c["kind"] in KERNEL_KINDS_NCU for c in selected))
        if note:
            with open(os.path.join(args.out, "ncu_lost.txt"), "w") as f:
                f.write(note)
            print(f"[ncu] {note.strip()}", flush=True)
    print(f"\ntotal {time.time() - t_start:.0f}s\n{'case':58s} {'us/step':>9s} {'launch us':>9s}")
    for r in results:
        if r["status"] == "ok":
            print(f"{r['id']:58s} {r['result']['per_step_s'] * 1e6:9.3f} "
                  f"{r['result']['launch_s'] * 1e6:9.2f}")
        else:
            print(f"{r['id']:58s} {'ERROR':>9s} {r['error'][:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
