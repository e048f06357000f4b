"""The sweep engine: the analytical model over a grid of layers and GPUs, on one machine or many.

A sweep is the cartesian product of GPUs x hidden sizes x batches x densities (one cell and
precision). It is cut into chunks of configurations of one GPU; :func:`evaluate_chunk` is a pure,
picklable function of a chunk (spec name and plain lists in, plain columns out), so the same
chunks run in-process, on a local ``ProcessPoolExecutor`` with one worker per core, or on a Dask
cluster (``distributed.Client``: a scheduler address, or a ``LocalCluster``). Results are columns
(one row per configuration) that :func:`write_csv` / :func:`write_json` store and
:mod:`gpusim.plots.speedup` draws.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
from dataclasses import dataclass

from gpusim.validate import (
    BATCH_MAX,
    SWEEP_CONFIGS_MAX,
    SWEEP_HIDDEN_MAX,
    WORKERS_MAX,
    check_scheduler,
    density_value,
)
from kernels_ir.errors import InputError

__all__ = ["Grid", "chunks", "evaluate_chunk", "run_sweep", "write_csv", "write_json",
           "Progress"]

CHUNK = 4096  # configurations per task: large enough to amortise numpy and task overhead


@dataclass(frozen=True, slots=True)
class Grid:
    gpus: tuple[str, ...]
    hidden: tuple[int, ...]
    batch: tuple[int, ...]
    density: tuple[float, ...]
    cell: str = "rnn"
    dtype: str = "fp32"
    heads: int = 1

    def __post_init__(self):
        for name in ("gpus", "hidden", "batch", "density"):
            if not getattr(self, name):
                raise InputError(f"sweep: {name} is empty; give at least one value")
        for n in self.hidden:
            if int(n) != n or n < 1 or n > SWEEP_HIDDEN_MAX:
                raise InputError(f"sweep: hidden={n} must be an integer in 1..{SWEEP_HIDDEN_MAX}")
        if isinstance(self.heads, bool) or int(self.heads) != self.heads or self.heads < 1:
            raise InputError(f"sweep: heads={self.heads!r} must be a positive integer")
        odd = [int(n) for n in self.hidden if int(n) % int(self.heads)]
        if odd:
            raise InputError(f"sweep: heads={self.heads} does not divide hidden="
                             f"{','.join(map(str, odd[:8]))}{' ...' if len(odd) > 8 else ''}; "
                             f"accepted: hidden sizes that are multiples of {self.heads}")
        for b in self.batch:
            if int(b) != b or b < 1 or b > BATCH_MAX:
                raise InputError(f"sweep: batch={b} must be an integer in 1..{BATCH_MAX}")
        for d in self.density:
            density_value(d, "sweep: density")
        if self.size > SWEEP_CONFIGS_MAX:
            raise InputError(f"sweep: {self.size:,} configurations; accepted: at most "
                             f"{SWEEP_CONFIGS_MAX:,}")

    @property
    def size(self) -> int:
        return len(self.gpus) * len(self.hidden) * len(self.batch) * len(self.density)


HEAD_CHUNK = 4   # configurations per task of a multi-head sweep: each is a concrete layer


def chunks(grid: Grid, size: int = CHUNK):
    """Tasks ``(gpu, hidden list, batch list, density list, cell, dtype, heads)`` of <= size
    configs (<= :data:`HEAD_CHUNK` for a multi-head grid: those configurations cost seconds)."""
    if grid.heads > 1:
        size = min(size, HEAD_CHUNK)
    for gpu in grid.gpus:
        combos = list(itertools.product(grid.hidden, grid.batch, grid.density))
        for lo in range(0, len(combos), size):
            part = combos[lo:lo + size]
            yield (gpu, [c[0] for c in part], [c[1] for c in part], [c[2] for c in part],
                   grid.cell, grid.dtype, grid.heads)


def evaluate_chunk(task) -> dict:
    """Evaluate one chunk with the analytical model; returns plain columns (lists).

    A multi-head chunk (``heads`` > 1) is priced one configuration at a time by
    :func:`models.analytical.predict_layer` on the seeded block-diagonal layer (its persistent
    kernels fitted and priced on their builder's mapping, the baselines on its nonzeros), as
    ``gpusim predict --heads`` does; the vectorised model has no heads."""
    import numpy as np

    from gpusim.specs import load_spec
    from models.analytical import predict_many, speedup_summary

    gpu, hidden, batch, density, cell, dtype, *rest = task
    heads = int(rest[0]) if rest else 1
    spec = load_spec(gpu)
    n = len(hidden)
    cols: dict = {"gpu": [spec.name] * n, "hidden": list(map(int, hidden)),
                  "batch": list(map(int, batch)), "density": list(map(float, density)),
                  "cell": [cell] * n, "dtype": [dtype] * n, "heads": [heads] * n}
    if heads > 1:
        return cols | _head_columns(spec, hidden, batch, density, cell, dtype, heads)
    times = predict_many(spec, np.asarray(hidden), np.asarray(batch), np.asarray(density),
                         cell=cell, dtype=dtype)
    bp_name, bp, nb_name, nb, speed = speedup_summary(times)
    for name, kt in times.items():
        cols[f"{name}_s"] = [None if not math.isfinite(x) else float(x) for x in kt.per_step_s]
        cols[f"{name}_fits"] = [bool(x) for x in kt.fits]
    cols["best_persistent"] = [str(x) or None for x in bp_name]
    cols["next_best"] = [str(x) or None for x in nb_name]
    cols["speedup"] = [None if not math.isfinite(x) else float(x) for x in speed]
    return cols


def _head_columns(spec, hidden, batch, density, cell, dtype, heads) -> dict:
    """The kernel columns of multi-head configurations (:func:`evaluate_chunk`)."""
    from models.analytical import VARIANTS, predict_layer

    cols: dict = {c: [] for name in VARIANTS for c in (f"{name}_s", f"{name}_fits")}
    cols |= {"best_persistent": [], "next_best": [], "speedup": []}
    for h, b, d in zip(hidden, batch, density, strict=True):
        rep = predict_layer(spec, int(h), int(b), float(d), cell=cell, dtype=dtype,
                            heads=heads)
        rows = {r.name: r for r in rep.rows}
        for name in VARIANTS:
            r = rows.get(name)
            cols[f"{name}_s"].append(r.per_step_s if r is not None and r.fits else None)
            cols[f"{name}_fits"].append(bool(r is not None and r.fits))
        cols["best_persistent"].append(rep.best_persistent)
        cols["next_best"].append(rep.next_best)
        cols["speedup"].append(rep.speedup)
    return cols


def _columns():
    from models.analytical import VARIANTS

    base = ["gpu", "hidden", "batch", "density", "cell", "dtype", "heads"]
    for name in VARIANTS:
        base += [f"{name}_s", f"{name}_fits"]
    return base + ["best_persistent", "next_best", "speedup"]


class Progress:
    """The sweep's progress bar on stderr (tqdm): ``update(n)`` after each chunk of n configs."""

    def __init__(self, total: int, stream=None, enabled: bool = True):
        from gpusim.progress import bar

        self.total, self.done = max(1, total), 0
        self._bar = bar(total=self.total, desc="sweep", unit=" configs", enabled=enabled,
                        stream=stream)

    def update(self, n: int) -> None:
        self.done += n
        self._bar.update(n)
        if self.done >= self.total:
            self._bar.close()


def _merge(parts: list[dict]) -> dict:
    cols = _columns()
    out = {c: [] for c in cols}
    for p in parts:
        for c in cols:
            out[c].extend(p[c])
    return out


def run_sweep(grid: Grid, *, scheduler: str = "local", workers: int | None = None,
              progress: Progress | None = None, chunk: int = CHUNK, client=None) -> dict:
    """Evaluate every configuration of ``grid``; returns columns in grid order.

    ``scheduler``: ``"serial"`` (in-process), ``"local"`` (ProcessPoolExecutor, ``workers``
    processes, default ``os.cpu_count()``), ``"dask-local"`` (a ``distributed.LocalCluster``),
    or ``"dask://host:port"`` / ``"tcp://host:port"`` (an existing Dask scheduler). A ready
    ``distributed.Client`` may be passed as ``client``.
    """
    if client is None:
        scheduler = check_scheduler(scheduler, False)
    if workers is not None and not 1 <= workers <= WORKERS_MAX:
        raise InputError(f"workers={workers} is outside 1..{WORKERS_MAX}")
    tasks = list(chunks(grid, chunk))
    results: list = [None] * len(tasks)
    progress = progress or Progress(grid.size, enabled=False)
    if client is not None or scheduler.startswith(("dask", "tcp://")):
        _run_dask(tasks, results, progress, scheduler, client)
    elif scheduler == "serial" or len(tasks) == 1:
        for i, t in enumerate(tasks):
            results[i] = evaluate_chunk(t)
            progress.update(len(t[1]))
    elif scheduler == "local":
        from concurrent.futures import ProcessPoolExecutor, as_completed

        n = workers or os.cpu_count() or 1
        with ProcessPoolExecutor(max_workers=n) as ex:
            futs = {ex.submit(evaluate_chunk, t): i for i, t in enumerate(tasks)}
            for f in as_completed(futs):
                i = futs[f]
                results[i] = f.result()
                progress.update(len(tasks[i][1]))
    else:
        raise InputError(f"scheduler={scheduler!r} is not supported; accepted: serial, local, "
                         f"dask-local, dask://host:port")
    return _merge(results)


def _run_dask(tasks, results, progress, scheduler, client) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("the Dask scheduler needs 'distributed': pip install "
                         "\"dask[distributed]\"") from None
    own = None
    if client is None:
        if scheduler == "dask-local":
            own = Client(LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                      dashboard_address=None))
        else:
            addr = scheduler.replace("dask://", "tcp://", 1)
            try:
                own = Client(addr, timeout=10)
            except OSError as exc:
                raise InputError(f"cannot reach the Dask scheduler at {addr}: {exc}") from None
        client = own
    try:
        futs = client.map(evaluate_chunk, tasks, pure=True)
        index = {f.key: i for i, f in enumerate(futs)}
        for f in as_completed(futs):
            i = index[f.key]
            results[i] = f.result()
            progress.update(len(tasks[i][1]))
    finally:
        if own is not None:
            cluster = getattr(own, "cluster", None)
            own.close()
            if cluster is not None:
                cluster.close()


def write_csv(cols: dict, path) -> None:
    names = list(cols)
    n = len(cols[names[0]]) if names else 0
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for i in range(n):
            w.writerow(["" if cols[c][i] is None else cols[c][i] for c in names])


def write_json(cols: dict, path, meta: dict | None = None) -> None:
    names = list(cols)
    n = len(cols[names[0]]) if names else 0
    rows = [{c: cols[c][i] for c in names} for i in range(n)]
    with open(path, "w") as fh:
        json.dump({"meta": meta or {}, "configs": rows}, fh, indent=1)
