"""GPU specs as data: one TOML file per GPU, every value with its unit and source.

Each parameter is declared once in :data:`PARAMS` (unit, type, bounds, one-line description, as
gem5 declares its params). A spec file gives, for every parameter, a table
``name = { value = ..., unit = "...", source = "...", type = "D|M|I|S|C" }`` where ``type`` is the
evidence class of ``docs/hardware_sources.md`` (D documented, M measured, I inferred, S
simulator config) plus ``C`` for values calibrated by this project, which must name the
measurement file in ``calibration``. The loader rejects a missing, unknown or impossible value
with a message naming the field and the file.

Only :mod:`tomllib` and the standard library are imported here, so ``models`` can use specs
without importing the simulator engine.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from kernels_ir.errors import InputError, SpecError

SPEC_DIR = Path(__file__).parent
GROUP_MAP_SUFFIX = "_l2_groups.json"   # measured line -> L2 contention group maps beside the specs
TABLE_SUFFIX = "_library_table.json"   # measured library step times on a grid of layer shapes
DEFAULT_GPU = "v100"


@dataclass(frozen=True, slots=True)
class Param:
    unit: str
    kind: type
    lo: float
    hi: float
    doc: str


# name -> declaration. Units are in the names where they are not counts.
PARAMS: dict[str, Param] = {
    "clock_hz": Param("Hz", float, 1e8, 5e9, "SM core clock used to convert cycles to seconds"),
    "sm_count": Param("SMs", int, 1, 1024, "enabled streaming multiprocessors"),
    "subpartitions_per_sm": Param("count", int, 1, 8, "sub-partitions (warp schedulers) per SM"),
    "issue_per_cycle_per_subpartition": Param("warp-instr/cycle", int, 1, 4,
                                              "warp-instructions one scheduler issues per cycle"),
    "fp32_lanes_per_subpartition": Param("lanes", int, 1, 64,
                                         "FP32 lanes per sub-partition (32/lanes = pipe cycles)"),
    "int32_lanes_per_subpartition": Param("lanes", int, 1, 64, "INT32 lanes per sub-partition"),
    "sfu_lanes_per_subpartition": Param("lanes", int, 1, 32, "special-function lanes"),
    "fma_latency_cycles": Param("cycles", int, 1, 64, "dependent-issue latency of FP32 FMA/ADD"),
    "alu_latency_cycles": Param("cycles", int, 1, 64, "dependent-issue latency of INT32 ops"),
    "sfu_latency_cycles": Param("cycles", int, 1, 400,
                                "latency of tanh as the kernels compute it (CUDA tanhf)"),
    "exp_latency_cycles": Param("cycles", int, 1, 1000, "latency of exp (CUDA expf)"),
    "sigmoid_latency_cycles": Param("cycles", int, 1, 1000,
                                    "latency of sigmoid (CUDA 1 / (1 + expf(-x)))"),
    "shfl_latency_cycles": Param("cycles", int, 1, 200, "latency of a warp shuffle"),
    "shfl_per_cycle_per_sm": Param("warp-instr/cycle", float, 0.1, 8,
                                   "warp shuffles an SM issues per cycle (the LSU pipe to "
                                   "L1TEX, shared with the shared-memory wavefronts)"),
    "regs_per_sm": Param("32-bit registers", int, 1024, 1 << 20, "register file per SM"),
    "max_regs_per_thread": Param("registers", int, 16, 1024, "largest register count per thread"),
    "reg_alloc_unit_per_warp": Param("registers", int, 1, 4096,
                                     "registers are allocated per warp in units of this many"),
    "max_threads_per_sm": Param("threads", int, 32, 8192, "resident threads per SM"),
    "max_ctas_per_sm": Param("CTAs", int, 1, 64, "resident CTAs per SM"),
    "max_threads_per_cta": Param("threads", int, 32, 2048, "threads per CTA"),
    "smem_bytes_per_sm": Param("bytes", int, 1024, 1 << 22, "shared memory per SM (max carve-out)"),
    "smem_bytes_per_cta": Param("bytes", int, 1024, 1 << 22, "shared memory one CTA may use"),
    "smem_banks": Param("banks", int, 1, 64, "shared-memory banks"),
    "smem_bank_bytes": Param("bytes", int, 1, 16, "width of one bank"),
    "smem_latency_cycles": Param("cycles", int, 1, 200, "shared-memory load latency"),
    "smem_wavefronts_per_cycle": Param("wavefronts/cycle", float, 0.1, 8,
                                       "wavefronts the SM's shared-memory pipe serves per cycle"),
    "cta_barrier_latency_cycles": Param("cycles", int, 1, 500, "__syncthreads() latency"),
    "cta_barrier_drain_cycles": Param("cycles", int, 0, 500,
                                      "a CTA barrier releases no earlier than this after the "
                                      "SM's shared-memory pipe has served the accesses issued "
                                      "before it"),
    "divergent_branch_cycles": Param("cycles", int, 0, 500,
                                     "cycles a warp loses to an if-block that the compiler "
                                     "branches around (one holding an activation) when its lanes "
                                     "split over it"),
    "mio_issue_interval_cycles": Param("cycles", int, 1, 64,
                                       "cycles between a warp's consecutive memory-pipe "
                                       "instructions (shared and global loads and stores, "
                                       "shuffles): the stall count ptxas encodes after each"),
    "mio_operand_extra_cycles": Param("cycles", int, 0, 16,
                                      "cycles a memory-pipe instruction (shared or global load "
                                      "or store, shuffle) waits for a fixed-latency arithmetic "
                                      "result beyond the arithmetic latency: the stall count "
                                      "ptxas encodes before it"),
    "predicate_branch_cycles": Param("cycles", int, 0, 64,
                                     "cycles between a compare (or vote) and the branch or vote "
                                     "that reads its predicate: the stall count ptxas encodes"),
    "branch_cycles": Param("cycles", float, 0, 64,
                           "cycles from a branch to the warp's next instruction, taken or not "
                           "(its stall count and the fetch after it)"),
    "dependency_barriers": Param("count", int, 0, 16,
                                 "a warp's dependency barriers (scoreboards) that track the "
                                 "results of variable-latency instructions"),
    "l1_hit_latency_cycles": Param("cycles", int, 1, 500, "global load round trip on an L1 hit"),
    "l1_unified_bytes_per_sm": Param("bytes", int, 1024, 1 << 22,
                                     "L1 + shared-memory SRAM per SM (L1 gets what shared "
                                     "memory does not use)"),
    "l2_size_bytes": Param("bytes", int, 1 << 16, 1 << 32, "L2 capacity"),
    "l2_slices": Param("slices", int, 1, 1024, "L2 slices (banks) that serve requests in parallel"),
    "l2_bytes_per_cycle_per_slice": Param("bytes/cycle", float, 1, 1024, "L2 slice bandwidth"),
    "l2_sector_bytes": Param("bytes", int, 8, 256, "L2 access granularity (sector)"),
    "l2_hit_latency_cycles": Param("cycles", int, 10, 2000, "load round trip SM -> L2 hit -> SM, "
                                   "mean over the L2 partitions (one random sector)"),
    "l2_partitions": Param("count", int, 1, 2, "L2 partitions; an SM is near one of them"),
    "l2_partition_interleave_bytes": Param("bytes", int, 32, 1 << 20,
                                           "contiguous bytes that live in one L2 partition"),
    "l2_far_extra_cycles": Param("cycles", int, 0, 2000,
                                 "round-trip cycles a sector in the far partition costs more than "
                                 "one in the near one (0 with one partition)"),
    "l2_atomic_latency_cycles": Param("cycles", int, 10, 4000,
                                      "dependent global atomic round trip at L2"),
    "l2_atomic_same_address_cycles": Param("cycles", float, 0.1, 1000,
                                           "interval between two atomics on one address"),
    "fence_latency_cycles": Param("cycles", int, 0, 10000,
                                  "__threadfence() cost from its issue, with nothing to wait for"),
    "fence_after_store_cycles": Param("cycles", int, 0, 10000,
                                      "cycles a __threadfence() ends after the acknowledgement "
                                      "of the warp's last store or atomic (it overlaps them)"),
    "l2_store_visibility_cycles": Param("cycles", int, 0, 2000,
                                        "extra cycles, beyond half the L2 round trip, until a "
                                        "global store is visible at L2 to a strong load"),
    "l2_line_handover_cycles": Param("cycles", float, 0, 1000,
                                     "the GPU-wide server hands a polled 128-byte line to one "
                                     "more writer SM every this many cycles"),
    "l2_group_map": Param("file", str, 0, 0,
                          "JSON file beside the spec giving the contention group of every "
                          "128-byte line of a 2 MiB-aligned region (\"\": no groups)"),
    "l2_group_request_cycles": Param("cycles/request", float, 0, 64,
                                     "a contention group serves one load request (the sectors "
                                     "of one line of one warp-instruction) every this many "
                                     "cycles (0: no limit)"),
    "l2_group_private_request_cycles": Param("cycles/request", float, 0, 64,
                                             "what a group's request costs when few SMs share "
                                             "its line (0: l2_group_request_cycles for all)"),
    "l2_group_private_sharers": Param("SMs", float, 1, 64,
                                      "up to this many SMs loading a line, its requests cost "
                                      "l2_group_private_request_cycles"),
    "l2_group_shared_sharers": Param("SMs", float, 1, 64,
                                     "from this many SMs loading a line on, its requests cost "
                                     "l2_group_request_cycles (log-linear between)"),
    "l2_group_span_per_doubling": Param("fraction", float, 0, 1,
                                        "a group's request costs 1 + this x log2(q) times more "
                                        "when its warp-instruction spans q groups"),
    "l2_group_share_window_cycles": Param("cycles", float, 0, 1e6,
                                          "a line's sharers are the SMs whose loads of it "
                                          "reached L2 in the request's window of this many "
                                          "cycles or the one before (0: every SM so far)"),
    "l2_request_cycles_per_sm": Param("cycles/request", float, 0, 64,
                                      "an SM sends at most one load request to L2 every this "
                                      "many cycles (0: no limit)"),
    "l2_poll_sharer_cycles": Param("cycles/SM", float, 0, 64,
                                   "a word written into a line of a polled data buffer (not an "
                                   "atomic counter) is seen by the polls N x this many cycles "
                                   "after it is visible at L2, N the SMs whose polls of the line "
                                   "reached L2 before that"),
    "sleep_tick_lead_ns": Param("ns", float, 0, 1000,
                                "a __nanosleep(ns) ends on the next tick of a timer whose period "
                                "is ns rounded up to a power of two, that comes more than this "
                                "many nanoseconds after it issued"),
    "lamport_step_spread_ns": Param("ns", float, 0, 1000,
                                    "the spread (standard deviation) from step to step of when "
                                    "a Lamport step's work ends after its tick: the analytical "
                                    "model's wake on the next tick is the mean over it"),
    "sleep_min_ns": Param("ns", float, 0, 10000,
                          "what __nanosleep(0) keeps a warp (a wait with an argument ends "
                          "on the tick, however soon it comes)"),
    "dram_latency_cycles": Param("cycles", int, 10, 10000, "load round trip on an L2 miss"),
    "dram_bandwidth_bytes_per_s": Param("bytes/s", float, 1e9, 1e14, "sustained DRAM bandwidth"),
    "launch_overhead_s": Param("s", float, 1e-8, 1e-3, "extra time per back-to-back launch"),
    "graph_launch_overhead_s": Param("s", float, 1e-8, 1e-3, "per kernel inside a CUDA graph"),
}

# The optional [library] table: the library baselines' kernels (cuBLAS / cuSPARSE, black boxes
# the simulator cannot run), fitted by gpusim.calibrate to measurements/<gpu>/library_sweep.json.
# A step of a library path is its small graph nodes (elementwise, copies, memsets, reductions,
# partitions: ``node_s`` each) plus its product kernel(s) of one class below, each costing
# ``<class>_fixed_s`` + bytes streamed / ``<class>_bytes_per_s``. A GPU whose libraries were
# not measured may carry a table transferred from a measured one (``transferred_from = "<gpu>"``,
# values of type I computed by gpusim.calibrate.transfer_library); a spec without the table keeps
# the bandwidth model of models.analytical. The optional [library_fp16] table has the same
# parameters for the fp16 library paths (fp16 weights; measurements/<gpu>/library_sweep_cells.json,
# models.analytical.libraries.LIBRARY_NODES_FP16); without it fp16 layers use [library].
LIBRARY_TABLES = ("library", "library_fp16")
LIBRARY_CLASSES = ("gemv", "gemm", "gemm8", "spmv", "spmm")
LIBRARY_PARAMS: dict[str, Param] = {
    "node_s": Param("s", float, 1e-8, 1e-3, "one small library graph node (elementwise, copy, "
                    "memset, split-K reduce, CSR partition)"),
    **{f"{c}_fixed_s": Param("s", float, 0.0, 1e-3, f"fixed cost of one {c} kernel node")
       for c in LIBRARY_CLASSES},
    **{f"{c}_bytes_per_s": Param("bytes/s", float, 1e9, 1e14, f"bytes one {c} kernel streams "
                                 f"per second") for c in LIBRARY_CLASSES},
}

EVIDENCE = {"D": "documented by NVIDIA", "M": "measured (published literature)", "I": "inferred",
            "S": "simulator configuration", "C": "calibrated by this project (measurements/)"}


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU, as data. Use ``dataclasses.replace(spec, sm_count=2)`` to shrink it in tests."""

    name: str
    full_name: str
    arch: str
    clock_hz: float
    sm_count: int
    subpartitions_per_sm: int
    issue_per_cycle_per_subpartition: int
    fp32_lanes_per_subpartition: int
    int32_lanes_per_subpartition: int
    sfu_lanes_per_subpartition: int
    fma_latency_cycles: int
    alu_latency_cycles: int
    sfu_latency_cycles: int
    exp_latency_cycles: int
    sigmoid_latency_cycles: int
    shfl_latency_cycles: int
    shfl_per_cycle_per_sm: float
    regs_per_sm: int
    max_regs_per_thread: int
    reg_alloc_unit_per_warp: int
    max_threads_per_sm: int
    max_ctas_per_sm: int
    max_threads_per_cta: int
    smem_bytes_per_sm: int
    smem_bytes_per_cta: int
    smem_banks: int
    smem_bank_bytes: int
    smem_latency_cycles: int
    smem_wavefronts_per_cycle: float
    cta_barrier_latency_cycles: int
    cta_barrier_drain_cycles: int
    divergent_branch_cycles: int
    mio_issue_interval_cycles: int
    mio_operand_extra_cycles: int
    predicate_branch_cycles: int
    branch_cycles: float
    dependency_barriers: int
    l1_hit_latency_cycles: int
    l1_unified_bytes_per_sm: int
    l2_size_bytes: int
    l2_slices: int
    l2_bytes_per_cycle_per_slice: float
    l2_sector_bytes: int
    l2_hit_latency_cycles: int
    l2_partitions: int
    l2_partition_interleave_bytes: int
    l2_far_extra_cycles: int
    l2_atomic_latency_cycles: int
    l2_atomic_same_address_cycles: float
    fence_latency_cycles: int
    fence_after_store_cycles: int
    l2_store_visibility_cycles: int
    l2_line_handover_cycles: float
    l2_group_map: str
    l2_group_request_cycles: float
    l2_group_private_request_cycles: float
    l2_group_private_sharers: float
    l2_group_shared_sharers: float
    l2_group_span_per_doubling: float
    l2_group_share_window_cycles: float
    l2_request_cycles_per_sm: float
    l2_poll_sharer_cycles: float
    sleep_tick_lead_ns: float
    lamport_step_spread_ns: float
    sleep_min_ns: float
    dram_latency_cycles: int
    dram_bandwidth_bytes_per_s: float
    launch_overhead_s: float
    graph_launch_overhead_s: float
    sources: tuple[tuple[str, str, str, str], ...] = ()  # (field, source, type, calibration)
    library: tuple[tuple[str, float], ...] = ()  # the [library] table, () when absent
    library_from: str = ""  # the measured GPU a transferred [library] table came from, else ""
    library_fp16: tuple[tuple[str, float], ...] = ()   # the [library_fp16] table, () when absent
    library_fp16_from: str = ""
    library_table: str = ""   # the [library] table's measured grid (a *_library_table.json), or ""

    @property
    def library_params(self) -> dict[str, float] | None:
        """The fitted library-kernel parameters (:data:`LIBRARY_PARAMS`), or None."""
        return dict(self.library) if self.library else None

    @property
    def library_params_fp16(self) -> dict[str, float] | None:
        """The fp16 library paths' parameters (``[library_fp16]``), or None."""
        return dict(self.library_fp16) if self.library_fp16 else None

    @property
    def cycle_s(self) -> float:
        return 1.0 / self.clock_hz

    @property
    def warp_size(self) -> int:
        return 32

    def cycles_to_s(self, cycles: float) -> float:
        return cycles / self.clock_hz

    def source(self, field: str) -> str:
        for f, src, typ, cal in self.sources:
            if f == field:
                return f"[{typ}] {src}" + (f" (calibration: {cal})" if cal else "")
        return "(set in code, e.g. by dataclasses.replace)"


_FIELDS = [f.name for f in dataclasses.fields(GPUSpec)]
assert set(PARAMS) == set(_FIELDS) - {"name", "full_name", "arch", "sources", "library",
                                    "library_from", "library_fp16", "library_fp16_from",
                                    "library_table"}


@functools.lru_cache(maxsize=4)
def load_group_map(name: str) -> tuple[int, ...]:
    """The L2 contention group of every 128-byte line in the map file ``name`` (a
    ``*_l2_groups.json`` in this directory, the value of a spec's ``l2_group_map``): a
    power-of-two number of lines, groups numbered from 0. A bad file is one SpecError."""
    import json

    path = SPEC_DIR / name
    try:
        doc = json.loads(path.read_text())
        n = int(doc["groups"])
        table = tuple(map(int, doc["map"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"L2 group map {path}: unreadable ({type(exc).__name__}: {exc}); "
                        f"accepted: JSON with 'groups' and 'map' (one group per line)") from None
    size = len(table)
    if not size or size & (size - 1) or min(table) < 0 or max(table) >= n:
        raise SpecError(f"L2 group map {path}: 'map' must give a power-of-two number of lines "
                        f"a group each in 0..{n - 1}; got {size} lines, groups "
                        f"{min(table, default=0)}..{max(table, default=0)}")
    return table


@functools.lru_cache(maxsize=4)
def load_library_table(name: str) -> dict:
    """The measured library grid ``name`` (a :data:`TABLE_SUFFIX` file in this directory, the
    value of a spec's ``[library] table``), checked: ``{library: {cell: {batch: entry}}}`` with
    ``library`` "cublas" (entry: increasing ``hidden`` and one ``per_step_s`` each) or "cusparse"
    (entry: increasing ``hidden`` and ``density``, ``per_step_s`` one row per hidden), and
    optionally "cublas_fp16" / "cusparse_fp16" (the fp16 paths, same entries). A ``per_step_s``
    of ``null`` is a point that failed its values check (``nan`` here). Written by ``python -m
    gpusim.calibrate --library-table``. A bad file is one SpecError."""
    import json

    import numpy as np

    path = SPEC_DIR / name

    def bad(why: str):
        return SpecError(f"library table {path}: {why}; accepted: the JSON that "
                         f"'python -m gpusim.calibrate --library-table GPU' writes")

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise bad(f"unreadable ({type(exc).__name__}: {exc})") from None
    out: dict = {}
    for lib in ("cublas", "cusparse", "cublas_fp16", "cusparse_fp16"):
        cells = doc.get(lib) if isinstance(doc, dict) else None
        if lib.endswith("_fp16") and cells is None:
            continue
        if not isinstance(cells, dict) or not cells:
            raise bad(f"no '{lib}' table")
        for cell, batches in cells.items():
            if cell not in ("rnn", "lstm", "gru") or not isinstance(batches, dict):
                raise bad(f"{lib}: cell {cell!r} is not rnn, lstm or gru with a table per batch")
            for b, e in batches.items():
                where = f"{lib} {cell} batch {b}"
                try:
                    batch = int(b)
                    hid = np.asarray(e["hidden"], dtype=np.float64)
                    t = np.asarray(_nulls_to_nan(e["per_step_s"]), dtype=np.float64)
                    dens = (np.asarray(e["density"], dtype=np.float64)
                            if lib.startswith("cusparse") else None)
                except (TypeError, KeyError, ValueError) as exc:
                    raise bad(f"{where}: {type(exc).__name__}: {exc}") from None
                shape = (hid.size,) if dens is None else (hid.size, dens.size)
                if batch not in (1, 2, 4, 8) or hid.ndim != 1 or hid.size < 2 or \
                        not np.all(np.diff(hid) > 0) or hid[0] < 1:
                    raise bad(f"{where}: the batch must be 1, 2, 4 or 8 and 'hidden' at least "
                              f"two increasing sizes")
                if dens is not None and (dens.ndim != 1 or dens.size < 2 or
                                         not np.all(np.diff(dens) > 0) or dens[0] <= 0 or
                                         dens[-1] > 1):
                    raise bad(f"{where}: 'density' must be at least two increasing values in "
                              f"(0, 1]")
                ok = np.isnan(t) | (np.isfinite(t) & (t > 0))
                if t.shape != shape or not np.all(ok) or np.all(np.isnan(t)):
                    raise bad(f"{where}: 'per_step_s' must be {shape} positive seconds (null: "
                              f"a point that failed its values check)")
                out.setdefault(lib, {}).setdefault(cell, {})[batch] = (hid, dens, t)
    return out


def _nulls_to_nan(x):
    """A JSON list (or list of lists) with ``null`` for a missing value, as floats."""
    if isinstance(x, list):
        return [_nulls_to_nan(v) for v in x]
    return float("nan") if x is None else x


def spec_path(name: str) -> Path:
    return SPEC_DIR / f"{name.lower()}.toml"


def available() -> list[str]:
    """Names of the bundled GPU specs."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


def load_spec(name_or_path: str | Path = DEFAULT_GPU) -> GPUSpec:
    """Load a bundled spec by name (``v100``, ``h100``, ``h200``) or any spec file by path.

    A path must name a regular file (not a directory, FIFO or device) of at most
    :data:`gpusim.validate.SPEC_FILE_MAX` bytes of UTF-8 TOML; every problem is one
    :class:`SpecError`.
    """
    from gpusim.validate import SPEC_FILE_MAX, read_text, show

    text = str(name_or_path)
    if text.lower() in available() and not text.endswith(".toml"):
        path = spec_path(text)
    elif text.endswith(".toml") or os.path.lexists(text):
        path = Path(text)
    else:
        raise SpecError(f"unknown GPU {show(text)}; accepted: {', '.join(available())} "
                        f"(or a path to a spec .toml file)")
    try:
        body = read_text(path, "spec file", SPEC_FILE_MAX)
    except InputError as exc:
        raise SpecError(str(exc)) from None
    return _parse_text(body, str(path))


@functools.lru_cache(maxsize=8)
def _parse_text(body: str, path: str) -> GPUSpec:
    """A spec file's text, parsed and checked once per content and path: a command loads its
    spec twice (the argument check, then the command itself), and a :class:`GPUSpec` is frozen.
    A file whose text changed is parsed again; a bad one raises every time."""
    try:
        data = tomllib.loads(body)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"spec file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"spec file {path} is not valid TOML: nested too deeply") from None
    return parse_spec(data, path)


def parse_spec(data: dict, origin: str = "<spec>") -> GPUSpec:
    """Validate a parsed spec document; every problem names the field."""
    gpu = data.get("gpu")
    if not isinstance(gpu, dict):
        raise SpecError(f"{origin}: missing [gpu] table with name, full_name, arch")
    for key in ("name", "full_name", "arch"):
        if not isinstance(gpu.get(key), str) or not gpu[key]:
            raise SpecError(f"{origin}: [gpu] {key} is missing or not a string")
        if len(gpu[key]) > 200 or not gpu[key].isprintable():
            raise SpecError(f"{origin}: [gpu] {key} = {gpu[key][:40]!r}...: accepted: printable "
                            f"text of at most 200 characters")
    params = data.get("params")
    if not isinstance(params, dict):
        raise SpecError(f"{origin}: missing [params] table")
    _check_names(params, PARAMS, origin, "")
    values, sources = {}, []
    for key, decl in PARAMS.items():
        values[key] = _param_value(params[key], key, decl, origin, sources)
    library, library_from, table = _library_table(data.get("library"), origin, sources)
    library16, library16_from, table16 = _library_table(data.get("library_fp16"), origin,
                                                        sources, "library_fp16")
    if table16:
        raise SpecError(f"{origin}: [library_fp16] table = {table16!r}: a measured grid is "
                        f"accepted in [library] only (fp32 weights)")
    spec = GPUSpec(name=gpu["name"], full_name=gpu["full_name"], arch=gpu["arch"],
                   sources=tuple(sources), library=library, library_from=library_from,
                   library_fp16=library16, library_fp16_from=library16_from,
                   library_table=table, **values)
    _check_consistency(spec, origin)
    return spec


def _check_names(table: dict, decls: dict[str, Param], origin: str, what: str) -> None:
    """Every declared parameter present, no other (``what``: "" or "[library] ")."""
    unknown = sorted(set(table) - set(decls))
    if unknown:
        raise SpecError(f"{origin}: unknown {what}parameter {unknown[0]!r}; accepted: "
                        f"{', '.join(decls)}")
    missing = [k for k in decls if k not in table]
    if missing:
        raise SpecError(f"{origin}: missing {what}parameter {missing[0]!r} "
                        f"({decls[missing[0]].doc}, unit {decls[missing[0]].unit})")


TABLE_PARAM = Param("file", str, 0, 0, "JSON file beside the spec with the library baselines' "
                    "step times measured on a grid of layer shapes (models.analytical."
                    "library_table); the fitted classes price what it does not cover")


def _library_table(table, origin: str, sources: list, name: str = "library"
                   ) -> tuple[tuple[tuple[str, float], ...], str, str]:
    """The ``[library]`` (or ``[library_fp16]``) values, the GPU they were transferred from
    (``""``: fitted) and the optional measured grid (``table``, a :data:`TABLE_SUFFIX` file)."""
    if table is None:
        return (), "", ""
    if not isinstance(table, dict):
        raise SpecError(f"{origin}: [{name}] must be a table of {', '.join(LIBRARY_PARAMS)}")
    table = dict(table)
    has_from = "transferred_from" in table
    frm = table.pop("transferred_from", "")
    if has_from and (not isinstance(frm, str) or not frm.strip()):
        raise SpecError(f"{origin}: [{name}] transferred_from = {frm!r} must name the measured "
                        f"GPU whose fitted table was transferred (e.g. \"h100\")")
    grid = table.pop("table", None)
    grid = "" if grid is None else _param_value(grid, f"{name}.table", TABLE_PARAM, origin,
                                                sources)
    _check_names(table, LIBRARY_PARAMS, origin, f"[{name}] ")
    values = tuple((k, _param_value(table[k], f"{name}.{k}", d, origin, sources))
                   for k, d in LIBRARY_PARAMS.items())
    return values, frm, grid


def _param_value(entry, key: str, decl: Param, origin: str, sources: list):
    """Validate one ``{ value, unit, type, source[, calibration] }`` entry; append its source."""
    if not isinstance(entry, dict) or "value" not in entry:
        raise SpecError(f"{origin}: parameter {key!r} must be a table with value, unit, "
                        f"source, type")
    value = entry["value"]
    if decl.kind is str:
        suffix = TABLE_SUFFIX if decl is TABLE_PARAM else GROUP_MAP_SUFFIX
        if not isinstance(value, str) or (value and not (
                value.endswith(suffix) and "/" not in value
                and (SPEC_DIR / value).is_file())):
            have = ", ".join(p.name for p in sorted(SPEC_DIR.glob(f"*{suffix}")))
            raise SpecError(f"{origin}: {key} = {str(value)[:60]!r}: accepted: \"\" or the name "
                            f"of a *{suffix} file in gpusim/specs/ ({have})")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{origin}: {key} = {value!r} is not a number")
    if decl.kind is int and not float(value).is_integer():
        raise SpecError(f"{origin}: {key} = {value} must be a whole number of {decl.unit}")
    if decl.kind is not str and (not math.isfinite(float(value))
                                 or not decl.lo <= value <= decl.hi):
        raise SpecError(f"{origin}: {key} = {value} {decl.unit} is impossible; accepted "
                        f"{decl.lo:g} .. {decl.hi:g} {decl.unit}")
    if entry.get("unit") != decl.unit:
        raise SpecError(f"{origin}: {key} has unit {entry.get('unit')!r}; expected "
                        f"{decl.unit!r}")
    src, typ = entry.get("source"), entry.get("type")
    if not isinstance(src, str) or not src.strip():
        raise SpecError(f"{origin}: {key} has no source")
    if len(src) > 4000:
        raise SpecError(f"{origin}: {key} has a source of {len(src)} characters; accepted: at "
                        f"most 4000")
    if typ not in EVIDENCE:
        raise SpecError(f"{origin}: {key} has type {typ!r}; accepted {', '.join(EVIDENCE)}")
    cal = entry.get("calibration", "")
    if not isinstance(cal, str) or len(cal) > 1000:
        raise SpecError(f"{origin}: {key} calibration = {str(cal)[:40]!r}: accepted: the path of "
                        f"a measurement record")
    if typ == "C" and not cal:
        raise SpecError(f"{origin}: {key} is calibrated (type C) but names no calibration "
                        f"record")
    sources.append((key, src, typ, cal))
    return decl.kind(value)


# The L1/L2 line the engine models (gpusim.engine.smem / l1: 128-byte lines of 32 words) and the
# CTA size of the project's kernels (models.capacity.THREADS_PER_CTA, sparse_rnn.DEFAULT_THREADS):
# a spec whose CTAs cannot hold it describes a GPU none of the kernels can run on.
LINE_BYTES = 128
KERNEL_THREADS_PER_CTA = 256


def _check_consistency(s: GPUSpec, origin: str) -> None:
    for key in ("max_threads_per_sm", "max_threads_per_cta"):
        if getattr(s, key) % 32:
            raise SpecError(f"{origin}: {key} = {getattr(s, key)} is not a whole number of "
                            f"warps; accepted: a multiple of 32")
    if s.max_threads_per_cta < KERNEL_THREADS_PER_CTA:
        raise SpecError(f"{origin}: max_threads_per_cta = {s.max_threads_per_cta} cannot hold "
                        f"the kernels' {KERNEL_THREADS_PER_CTA}-thread CTAs; accepted: "
                        f"{KERNEL_THREADS_PER_CTA}..max_threads_per_sm, a multiple of 32")
    sector = s.l2_sector_bytes
    if sector & (sector - 1) or LINE_BYTES % sector:
        raise SpecError(f"{origin}: l2_sector_bytes = {sector} must be a power of two dividing "
                        f"the {LINE_BYTES}-byte line; accepted: 8, 16, 32, 64, 128")
    if s.l2_size_bytes < s.l2_slices * sector:
        raise SpecError(f"{origin}: l2_size_bytes = {s.l2_size_bytes} is less than one sector "
                        f"per slice ({s.l2_slices} x {sector} bytes)")
    if s.l1_unified_bytes_per_sm < s.smem_bytes_per_sm:
        raise SpecError(f"{origin}: l1_unified_bytes_per_sm = {s.l1_unified_bytes_per_sm} is "
                        f"less than smem_bytes_per_sm = {s.smem_bytes_per_sm}: shared memory is "
                        f"carved out of the unified L1; accepted: at least {s.smem_bytes_per_sm}")
    if s.regs_per_sm % s.reg_alloc_unit_per_warp:
        raise SpecError(f"{origin}: regs_per_sm = {s.regs_per_sm} is not a whole number of "
                        f"allocation units (reg_alloc_unit_per_warp = {s.reg_alloc_unit_per_warp})")
    if not s.l1_hit_latency_cycles < s.l2_hit_latency_cycles <= s.dram_latency_cycles:
        raise SpecError(f"{origin}: latencies l1_hit {s.l1_hit_latency_cycles} < l2_hit "
                        f"{s.l2_hit_latency_cycles} <= dram {s.dram_latency_cycles} cycles do "
                        f"not hold; accepted: each level of the hierarchy slower than the one "
                        f"above")
    if s.smem_bytes_per_cta > s.smem_bytes_per_sm:
        raise SpecError(f"{origin}: smem_bytes_per_cta = {s.smem_bytes_per_cta} exceeds "
                        f"smem_bytes_per_sm = {s.smem_bytes_per_sm}")
    if s.max_threads_per_cta > s.max_threads_per_sm:
        raise SpecError(f"{origin}: max_threads_per_cta = {s.max_threads_per_cta} exceeds "
                        f"max_threads_per_sm = {s.max_threads_per_sm}")
    if s.max_regs_per_thread * 32 > s.regs_per_sm:
        raise SpecError(f"{origin}: max_regs_per_thread = {s.max_regs_per_thread} does not fit "
                        f"one warp in regs_per_sm = {s.regs_per_sm}")
    from kernels_ir.banks import BANKS

    if (s.smem_banks, s.smem_bank_bytes) != (BANKS, 4):
        raise SpecError(f"{origin}: smem_banks = {s.smem_banks} x smem_bank_bytes = "
                        f"{s.smem_bank_bytes}: the bank arithmetic (kernels_ir.banks) models "
                        f"{BANKS} banks x 4 bytes only; accepted: 32 and 4")
    if s.l2_partitions == 1 and s.l2_far_extra_cycles:
        raise SpecError(f"{origin}: l2_far_extra_cycles = {s.l2_far_extra_cycles} with "
                        f"l2_partitions = 1: one partition has no far side; accepted: 0")
    g = s.l2_partition_interleave_bytes
    if g & (g - 1) or g < s.l2_sector_bytes:
        raise SpecError(f"{origin}: l2_partition_interleave_bytes = {g} must be a power of two "
                        f"and at least one sector ({s.l2_sector_bytes} bytes)")
    if s.l2_far_extra_cycles >= 2 * s.l2_hit_latency_cycles:
        raise SpecError(f"{origin}: l2_far_extra_cycles = {s.l2_far_extra_cycles} leaves no "
                        f"near latency (l2_hit_latency_cycles = {s.l2_hit_latency_cycles} is the "
                        f"mean of near and far); accepted: below {2 * s.l2_hit_latency_cycles}")
    for lanes in ("fp32_lanes_per_subpartition", "int32_lanes_per_subpartition",
                  "sfu_lanes_per_subpartition"):
        if 32 % getattr(s, lanes):
            raise SpecError(f"{origin}: {lanes} = {getattr(s, lanes)} must divide the warp (32)")


__all__ = ["GPUSpec", "PARAMS", "load_spec", "parse_spec", "available", "DEFAULT_GPU"]
