"""Load and validate recorded GPU measurements (``measurements/<gpu>/*.json``).

Three files per campaign directory, written by ``measurements/campaign.py`` (format in
``measurements/README.md``):

- ``campaign.json``: ``provenance`` + ``cases`` (each: id, kind, hidden, batch, density, seed,
  status, and for ``status == "ok"`` a ``result`` with per_step_s, max_rel_err, values_ok, ...);
- ``microbench.json``: ``provenance`` + ``results`` (name -> per_op_s, sizes, status);
- ``ncu.json``: ``steps`` (T of the profiled launches), ``metrics`` and ``cases`` (id -> metrics);
- ``ncu_sass.json`` (optional, ``measurements/bank_sass.py``): a second Nsight pass over the same
  kernels with its SASS-patched counters (the shared wavefronts that the addresses alone cause);
  its ``smsp__sass_*`` values and its arbitration counter join the cases of ``ncu.json``.

Every file is checked against one schema (:data:`SCHEMAS`: types, finiteness, ranges), the
only definition of these records; :mod:`gpusim.calibrate` loads through it too. A file with a
missing or impossible field is rejected with an :class:`InputError` that names the field, the
value and what is accepted; nothing downstream sees a half-valid record. Cases whose values did
not match the reference on the GPU (``values_ok: false``) are loaded but never scored
(:attr:`Campaign.ok_cases` leaves them out, :attr:`Campaign.unscored` names them).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from gpusim.validate import (
    BATCH_MAX,
    DENSITY_MIN,
    HIDDEN_MAX,
    JSON_FILE_MAX,
    SEED_MAX,
    SWEEP_HIDDEN_MAX,
    TIMESTEPS_MAX,
    Any_,
    Bool,
    Int,
    Map,
    Nullable,
    Num,
    Obj,
    OneOf,
    Seq,
    Str,
    check_schema,
    load_json_text,
    read_file,
    read_text,
    show,
)
from kernels_ir.errors import InputError
from kernels_ir.ir import SLEEP_MAX_NS

__all__ = ["Campaign", "load_campaign", "load_json", "spec_name_for_gpu", "SCHEMAS",
           "PROVENANCE_FIELDS", "CASE_FIELDS", "RESULT_FIELDS", "MICRO_FIELDS", "NCU_FIELDS",
           "BANK_METRICS", "KERNEL_FIELDS", "KERNEL_KINDS", "FORMAT_VERSION", "kernel_fingerprint",
           "case_fingerprint", "kernel_staleness", "program_fingerprint", "inputs_fingerprint",
           "model_fingerprint", "MODEL_SOURCES", "fingerprint_is_current", "fingerprints_at",
           "FINGERPRINT_ALIASES", "FINGERPRINT_UNCHANGED", "unchanged_pairs", "SASS_WAVEFRONTS",
           "ARBITRATION",
           "case_layer_kind", "CELLS", "DTYPES"]

BANK_METRICS = {
    "conflicts_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "conflicts_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "wavefronts_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "wavefronts_st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
}
KINDS = ("sparse_persistent", "dense_persistent", "csr", "cublas", "cusparse")
SYNCS = ("lamport", "barrier")
LAYOUTS = ("naive", "random", "greedy", "optimal")
CELLS = ("rnn", "lstm", "gru")          # models.capacity.CELLS; a case without "cell" is rnn
CELL_GATES = {"rnn": 1, "lstm": 4, "gru": 3}
DTYPES = ("fp32", "fp16")               # the weights' type; a case without "dtype" is fp32
NCU_STEPS_MAX = 64  # Nsight profiles short launches (the recorded ones have 4 steps)
KERNEL_KINDS = ("sparse_persistent", "dense_persistent", "csr")   # kinds that run our own kernel
# Provenance of the exact kernel a case ran (format_version >= 2): sha256 of the generated CUDA
# source and of the IR text (kernels_ir.format_kernel) of the case rebuilt with ``steps`` steps.
KERNEL_FIELDS = ("cuda_sha256", "ir_sha256", "steps")
FORMAT_VERSION = 2


# --- the schema of every recorded-measurement file (one definition, used by every loader) -----

_SECONDS = Num(0.0, 1.0, lo_open=True, unit="seconds")      # a per-step / per-op time
_LAUNCH = Num(-1.0, 10.0, unit="seconds")  # an intercept: noise can leave it slightly negative
# a microbenchmark's slope over two sizes: noise can leave an unused one slightly negative
# (h200 atomic_distinct); gpusim.calibrate refuses a non-positive one it fits to
_PER_OP = Num(-1.0, 1.0, unit="seconds")
_COUNT = Num(0.0, 1e15, integer=True)                       # an Nsight counter
_VERSION = OneOf(Str(max_len=200), Num(0, 1e9))
_CLOCKS = Seq(Num(0.0, 10_000.0, unit="MHz"), max_len=1_000_000)
_ID = Str(max_len=200)

PROVENANCE = Obj({"gpu_name": Str(max_len=200), "driver_version": _VERSION,
                  "cuda_runtime_version": _VERSION, "cupy_version": _VERSION,
                  "date": Str(max_len=200), "command": Str()},
                 optional={"sm_clock_mhz_samples": _CLOCKS})
RESULT = Obj({"per_step_s": _SECONDS,
              "max_rel_err": Nullable(Num(0.0, math.inf, allow_inf=True)),
              "values_ok": Bool(), "launch_s": _LAUNCH,
              "steps": Seq(Int(1, TIMESTEPS_MAX), length=2)})
KERNEL = Obj({"cuda_sha256": Str(max_len=64), "ir_sha256": Str(max_len=64),
              "steps": Int(1, TIMESTEPS_MAX)}, {"inputs_sha256": Str(max_len=64)})
CASE = Obj(
    {"id": _ID, "kind": Str(choices=KINDS), "hidden": Int(1, HIDDEN_MAX),
     "batch": Int(1, BATCH_MAX), "density": Num(DENSITY_MIN, 1.0), "seed": Int(0, SEED_MAX),
     "status": Str(max_len=200)},
    {"cell": Str(choices=CELLS), "dtype": Str(choices=DTYPES), "heads": Int(1, HIDDEN_MAX),
     "step_wait": Int(0, SLEEP_MAX_NS), "stage_unroll": Bool()},
    rules=[lambda c: ({"sync": Str(choices=SYNCS), "wide_loads": Bool(),
                       "layout": Str(choices=LAYOUTS)}
                      if c["kind"].endswith("persistent") else None),
           lambda c: {"result": RESULT} if c["status"] == "ok" else None])
CAMPAIGN = Obj({"provenance": PROVENANCE,
                "steps": Seq(Int(1, TIMESTEPS_MAX), length=2),
                "cases": Seq(CASE, max_len=100_000)},
               optional={"format_version": Int(1, FORMAT_VERSION)})
MICRO_RESULT = Obj({"status": Str(max_len=200)},
                   rules=[lambda r: ({"name": Str(max_len=200), "per_op_s": _PER_OP,
                                      "sizes": Map(Any_())} if r["status"] == "ok" else None)])
MICROBENCH = Obj({"provenance": Obj({}, optional={"sm_clock_mhz_samples": _CLOCKS}),
                  "results": Map(MICRO_RESULT, max_len=10_000)})
NCU = Obj({"steps": Int(1, NCU_STEPS_MAX), "metrics": Seq(Str(max_len=200)),
           "cases": Map(Obj({"metrics": Obj({m: _COUNT for m in BANK_METRICS.values()})}),
                        max_len=100_000)})
LIBRARY_PROFILE = Obj({}, optional={"graph_node": Nullable(Obj(
    {}, optional={"per_node_s": Nullable(_SECONDS)}))})
LIBRARY_SWEEP = Obj({"layers": Map(Obj({"hidden": Int(1, SWEEP_HIDDEN_MAX),
                                        "batch": Int(1, BATCH_MAX),
                                        "nnz": Int(0, SWEEP_HIDDEN_MAX ** 2),
                                        "paths": Map(Obj({"per_step_s": _SECONDS}))}),
                                   max_len=100_000)})
PROVENANCE_FIELDS = tuple(PROVENANCE.required)
CASE_FIELDS = tuple(CASE.required)
RESULT_FIELDS = tuple(RESULT.required)
MICRO_FIELDS = ("name", "per_op_s", "sizes")
NCU_FIELDS = tuple(NCU.required)
# file name -> schema: what every loader of this package (and gpusim.calibrate) checks
# Nsight's shared wavefronts by address (SASS-patched: what the addresses of each executed
# instruction need, loads and stores together) and the data banks' arbitration conflicts (cycles
# lost to other users of the banks, which the hardware conflict counters include)
SASS_WAVEFRONTS = "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum"
ARBITRATION = "l1tex__data_bank_conflicts_type_arbitration.sum"
NCU_SASS = Obj({"steps": Int(1, NCU_STEPS_MAX), "metrics": Seq(Str(max_len=200)),
                "cases": Map(Obj({"metrics": Obj({SASS_WAVEFRONTS: _COUNT})}),
                             max_len=100_000)})
SCHEMAS = {"campaign.json": CAMPAIGN, "microbench.json": MICROBENCH, "ncu.json": NCU,
           "ncu_sass.json": NCU_SASS,
           "l2_partition.json": MICROBENCH, "library_profile.json": LIBRARY_PROFILE,
           "library_sweep.json": LIBRARY_SWEEP}


@dataclass(frozen=True, slots=True, eq=False)
class Campaign:
    """A validated campaign directory."""

    path: Path
    provenance: dict
    steps: tuple[int, int]
    cases: tuple[dict, ...]          # every recorded case (ok or not)
    microbench: dict                 # name -> result (status ok only); {} if no file
    ncu: dict                        # case id -> {metric: value}; {} if no file
    ncu_steps: int | None
    format_version: int = 1          # 1: no kernel hashes (old files); 2: ``case["kernel"]``

    @property
    def ok_cases(self) -> tuple[dict, ...]:
        """The cases that may be scored: status ok and values that matched the reference."""
        return tuple(c for c in self.cases
                     if c["status"] == "ok" and c["result"]["values_ok"] is True)

    @property
    def unscored(self) -> dict[str, str]:
        """id -> why, for the cases that ran (status ok) but are not scored: their values did
        not match the reference on the GPU, so their time describes a wrong kernel."""
        return {c["id"]: f"values_ok is false on the GPU (max_rel_err "
                         f"{c['result']['max_rel_err']})"
                for c in self.cases
                if c["status"] == "ok" and c["result"]["values_ok"] is not True}

    @property
    def spec_name(self) -> str:
        return spec_name_for_gpu(self.provenance["gpu_name"])


def record_file(path: Path | str) -> Path:
    """``path``, or ``path`` + ``.xz`` / ``.gz`` where only that compressed copy exists (the
    fresh draws' ``campaign.json`` and ``ncu.json`` are kept xz-compressed, the archives' and
    older records gzipped); ``path`` when none does, so that an error names the plain file."""
    path = Path(path)
    if os.path.lexists(path):
        return path
    for suffix in (".xz", ".gz"):
        packed = path.with_name(path.name + suffix)
        if os.path.lexists(packed):
            return packed
    return path


def record_exists(path: Path | str) -> bool:
    """Whether ``path`` or its compressed copy (:func:`record_file`) exists."""
    return os.path.lexists(record_file(path))


def _read_record_text(path: Path) -> str:
    """The UTF-8 text of measurement file ``path``, decompressed when it ends in ``.gz`` or
    ``.xz`` (at most :data:`JSON_FILE_MAX` bytes either way: a larger expansion is refused, not
    read)."""
    if path.suffix not in (".gz", ".xz"):
        return read_text(path, "measurement file", JSON_FILE_MAX)
    raw = read_file(path, "measurement file", JSON_FILE_MAX)
    if path.suffix == ".gz":
        import zlib

        inflate, kind, bad = zlib.decompressobj(wbits=31), "gzip", zlib.error
    else:
        import lzma

        inflate, kind, bad = lzma.LZMADecompressor(), "xz", lzma.LZMAError
    try:
        data = inflate.decompress(raw, JSON_FILE_MAX + 1)
    except bad as exc:
        raise InputError(f"measurement file {path} is not {kind} data ({exc})") from None
    if kind == "xz" and not inflate.eof and inflate.needs_input:   # the stream stops short
        raise InputError(f"measurement file {path} is not xz data (it ends before the stream "
                         f"does)")
    # what the size cap left undecompressed: zlib keeps it as the tail, lzma as not at the end
    left = inflate.unconsumed_tail if kind == "gzip" else not inflate.eof
    if len(data) > JSON_FILE_MAX or left:
        raise InputError(f"measurement file {path} expands beyond {JSON_FILE_MAX} bytes; "
                         f"accepted: a measurement file of at most that size")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"measurement file {path} does not hold UTF-8 text (byte "
                         f"{exc.start}); accepted: {kind}-compressed UTF-8 JSON") from None


def load_json(path: Path | str, schema: Obj | None = None) -> dict:
    """A measurement file: a regular file of at most :data:`JSON_FILE_MAX` bytes of UTF-8 JSON
    (or its gzipped copy, :func:`record_file`) whose top level is an object, checked against
    ``schema`` (by default the one :data:`SCHEMAS` gives its file name, if any)."""
    name = Path(path).name
    path = record_file(path)
    text = _read_record_text(path)
    data = load_json_text(text, f"measurement file {path}")
    if not isinstance(data, dict):
        raise InputError(f"measurement file {path}: top level must be an object")
    schema = schema if schema is not None else SCHEMAS.get(name)
    if schema is not None:
        check_schema(schema, data, f"measurement file {path}")
    return data


def spec_name_for_gpu(gpu_name: str) -> str:
    """The spec file that models a recorded GPU (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    low = gpu_name.lower()
    for key in ("h200", "h100", "v100"):
        if key in low:
            return key
    raise InputError(f"gpu_name={gpu_name!r} has no matching spec; accepted: names containing "
                     f"H100, H200 or V100")


def _check_cases(data: dict, path: Path, version: int) -> None:
    """What the schema cannot say: unique ids, long > short steps, kernel hashes (format 2)."""
    seen = set()
    for i, c in enumerate(data["cases"]):
        if c["id"] in seen:
            raise InputError(f"measurement file {path}: cases[{i}].id={show(c['id'])} is "
                             f"recorded twice; accepted: unique ids")
        seen.add(c["id"])
        if c["status"] == "ok" and version >= 2 and c["kind"] in KERNEL_KINDS:
            check_schema(Obj({"kernel": KERNEL}), c, f"measurement file {path}",
                         where=f"cases[{i}]")
    long, short = data["steps"]
    if not long > short:
        raise InputError(f"measurement file {path}: steps={data['steps']}; accepted: [T, T'] "
                         f"with T > T' (the per-step time is the slope between them)")


def load_campaign(directory: Path | str) -> Campaign:
    """Load and validate ``campaign.json`` (required), ``microbench.json``, ``ncu.json`` and
    ``ncu_sass.json``."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"measurement directory {d} does not exist")
    cpath = d / "campaign.json"
    data = load_json(cpath)
    version = data.get("format_version", 1)
    _check_cases(data, cpath, version)
    micro = {}
    mpath = d / "microbench.json"
    if record_exists(mpath):
        m = load_json(mpath)
        micro = {name: r for name, r in m["results"].items() if r["status"] == "ok"}
    ncu, ncu_steps = {}, None
    npath = d / "ncu.json"
    if record_exists(npath):
        n = load_json(npath)
        ncu_steps = n["steps"]
        ncu = {cid: rec["metrics"] for cid, rec in n["cases"].items()}
    spath = d / "ncu_sass.json"
    if record_exists(spath):
        sass = load_json(spath)
        if ncu_steps is not None and sass["steps"] != ncu_steps:
            raise InputError(f"measurement file {spath}: steps={sass['steps']}; accepted: the "
                             f"steps of ncu.json ({ncu_steps}): both must profile the same "
                             f"launches")
        for cid, rec in sass["cases"].items():   # the address counters only: the hardware
            if cid in ncu:                          # ones stay those of ncu.json
                ncu[cid] = {**ncu[cid], **{k: v for k, v in rec["metrics"].items()
                                           if k in (SASS_WAVEFRONTS, ARBITRATION)}}
    steps = tuple(data["steps"])
    return Campaign(d, data["provenance"], steps, tuple(data["cases"]), micro, ncu, ncu_steps,
                    version)


def _check_case_size(case: dict, steps: int, spec) -> None:
    """Refuse, before its matrix is generated, a recorded case this spec cannot hold or whose
    layer is too large to rebuild (a dense case 14000 wide would allocate ~10 GB first)."""
    from gpusim.validate import check_layer_fits, check_nnz, check_sequence

    where = f"recorded case {case['id']!r}"
    cell, dtype, heads = case_layer_kind(case)
    rows = CELL_GATES[cell] * case["hidden"]
    try:
        check_sequence(case["hidden"], case["batch"], steps, rows=rows)
        check_nnz(case["hidden"], case["density"], rows=rows)
        # a multi-head layer's fit is its builder's (block-diagonal: far fewer weights a row
        # than the single-head layer this check prices); the builder refuses what does not fit
        if case["kind"].endswith("persistent") and cell == "rnn" and heads == 1:
            check_layer_fits(spec, case["hidden"], case["batch"], case["density"],
                             dense=case["kind"] == "dense_persistent", dtype=dtype)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def case_layer_kind(case: dict) -> tuple[str, str, int]:
    """``(cell, dtype, heads)`` of a recorded case: ``("rnn", "fp32", 1)`` where the record
    names none (every campaign before the gated and fp16 draws)."""
    return case.get("cell", "rnn"), case.get("dtype", "fp32"), int(case.get("heads", 1))


def recorded_step_wait(case: dict) -> int | None:
    """The ``__nanosleep`` (ns) that closed each step of a recorded Lamport kernel case: its
    ``step_wait``, or 0 where the case has none (the Lamport kernels had no wait before it was
    recorded); None for a case whose kernel takes none (barrier kernels, baselines)."""
    if case.get("sync") != "lamport" or case["kind"] not in KERNEL_KINDS:
        return None
    return int(case.get("step_wait", 0))


def build_case(case: dict, steps: int, spec):
    """Rebuild a recorded case's program (same layer seed) with ``steps`` timesteps.

    Persistent kinds give an :class:`RNNProgram`, ``csr`` a :class:`CSRProgram`, the library
    baselines the layer itself.
    """
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    _check_case_size(case, steps, spec)
    cell, dtype, heads = case_layer_kind(case)
    layer = make_layer(case["hidden"], case["batch"], case["density"], steps, case["seed"],
                       cell=cell, heads=heads)
    kw = {} if dtype == "fp32" else {"dtype": dtype}
    wait = recorded_step_wait(case)
    if wait is not None:      # a Lamport kernel: the options it ran with (older cases lack them)
        # the staging loop over two groups or more: unrolled where the case says so, else rolled
        # (``sparse_rnn.LAMPORT_STAGE_UNROLL``; the loop was rolled before cases recorded it)
        kw.update(step_wait=wait, stage_unroll=bool(case.get("stage_unroll", False)))
    if case["kind"] == "sparse_persistent":
        return build_sparse_rnn(layer, spec, sync=case["sync"], wide_loads=case["wide_loads"],
                                layout=case["layout"], **kw)
    if case["kind"] == "dense_persistent":
        return build_dense_rnn(layer, spec, sync=case["sync"], wide_loads=case["wide_loads"],
                               **kw)
    if case["kind"] == "csr":
        if dtype != "fp32":
            raise InputError(f"recorded case {case['id']!r}: the CSR kernel in the IR has fp32 "
                             f"weights only (dtype={dtype})")
        return build_csr_baseline(layer)      # a multi-head layer: its block-diagonal U
    return layer


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_fingerprint(kernel) -> dict:
    """sha256 of the generated CUDA source and of the IR text of ``kernel``."""
    from kernels_ir import format_kernel
    from kernels_ir.codegen_cuda import generate

    return {"cuda_sha256": _sha256(generate(kernel).code),
            "ir_sha256": _sha256(format_kernel(kernel))}


def inputs_fingerprint(inputs: dict) -> str:
    """sha256 of a program's input buffers (name, dtype, bytes): the weight layout is input
    data, not code, so a new layout of the same kernel changes this hash and not the others."""
    import numpy as np

    h = hashlib.sha256()
    for name in sorted(inputs):
        a = np.ascontiguousarray(inputs[name])
        h.update(name.encode() + b"\0" + str(a.dtype).encode() + b"\0" + a.tobytes())
    return h.hexdigest()


def program_fingerprint(prog, steps: int) -> dict:
    """:func:`kernel_fingerprint` of ``prog.kernel`` plus ``inputs_sha256`` of its inputs."""
    return {**kernel_fingerprint(prog.kernel), "inputs_sha256": inputs_fingerprint(prog.inputs),
            "steps": int(steps)}


def case_fingerprint(case: dict, steps: int, spec) -> dict | None:
    """The fingerprint (``KERNEL_FIELDS`` and ``inputs_sha256``) of a case's program at
    ``steps``; None for the library baselines (cuBLAS / cuSPARSE run no kernel of ours)."""
    if case["kind"] not in KERNEL_KINDS:
        return None
    return program_fingerprint(build_case(case, steps, spec), steps)


def kernel_staleness(case: dict, spec) -> str | None:
    """Why a recorded kernel case no longer describes today's kernel (None: it still does).

    The case's kernel is rebuilt (same layer seed, the recorded ``steps``) and its CUDA source and
    IR text hashes compared with the recorded ones, and its input buffers (weights in their
    layout) where the record has ``inputs_sha256``. A kernel case without a recorded hash (files
    of format 1) counts as stale: nothing shows that it ran today's kernel.
    """
    if case["kind"] not in KERNEL_KINDS:
        return None
    rec = case.get("kernel")
    if not rec:
        return "no kernel hash recorded (format 1 file)"
    now = case_fingerprint(case, int(rec["steps"]), spec)
    changed = [k for k in ("cuda_sha256", "ir_sha256", "inputs_sha256")
               if k in rec and now[k] != rec[k]]
    if not changed:
        return None
    return ", ".join(f"{k} {rec[k][:12]} -> {now[k][:12]}" for k in changed)


# What a prediction depends on: the simulator, the pricing path, the rules the simulator and the
# models share, the analytical and capacity models, the kernels (IR, mappings, layouts, bank
# rule), the GPU specs' values and the data files they name (the measured L2 contention groups).
MODEL_SOURCES = ("gpusim/engine/*.py", "gpusim/pricing.py", "gpusim/specs/rules.py",
                 "models/*.py", "models/*/*.py", "models/*/*.json", "kernels_ir/*.py",
                 "kernels_ir/kernels/*.py",
                 "kernels_ir/kernels/*/*.py",
                 "gpusim/specs/*.toml", "gpusim/specs/*_l2_groups.json",
                 "gpusim/specs/*_library_table.json")
_SPEC_TEXT_KEYS = frozenset({"source", "calibration", "note", "unit", "type"})


# Fields of the AST that hold statements: docstrings are the first statement of a ``body`` list,
# and statements only ever sit in these lists (expressions hold none), so walking them alone
# finds every docstring that ``ast.walk`` over every node would find, at a fraction of the cost.
_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _python_meaning(text: str) -> str:
    """A Python source without its comments, docstrings and blank lines: those do not change a
    prediction, so they do not change the fingerprint. (Line ranges from the AST and comment
    positions from the tokenizer; the text itself is hashed, since the AST's shape and the
    tokens of f-strings differ between Python versions.)"""
    import ast
    import io
    import tokenize

    lines = text.splitlines()
    stack: list = [ast.parse(text)]
    while stack:
        node = stack.pop()
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                lines[i] = ""
        for name in _STATEMENT_FIELDS:
            children = getattr(node, name, None)
            if isinstance(children, list):
                stack.extend(children)
    if "#" in text:   # no '#' at all: no comment to find (the tokenizer is the slow part)
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type == tokenize.COMMENT:
                row, col = t.start
                lines[row - 1] = lines[row - 1][:col]
    return "\n".join(ln.rstrip() for ln in lines if ln.strip())


def _spec_meaning(text: str) -> str:
    """A spec file's values without their sources and notes (citations are not the model)."""
    import tomllib

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in sorted(x.items()) if k not in _SPEC_TEXT_KEYS}
        return x

    return json.dumps(strip(tomllib.loads(text)), sort_keys=True, default=str)


def _data_meaning(text: str) -> str:
    """A data file the specs name (the L2's measured contention groups): its values, in a
    canonical form (key order and whitespace do not change a prediction)."""
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def model_fingerprint(root: Path | str | None = None, gpu: str | None = None) -> str:
    """sha256 of everything a prediction depends on (:data:`MODEL_SOURCES`, by meaning).

    A fresh draw of layers measured on a GPU records the fingerprint of the model at the time it
    was measured. ``gpusim crosscheck`` counts the draw as out of sample only while the model
    still has that fingerprint: once any mechanism, spec value, kernel or pricing rule changes,
    the draw may have guided the change and counts as in sample.

    ``gpu`` (a spec name, ``h100``): the fingerprint of that GPU's predictions: of the spec
    files only its own and the data files it names (its L2 map, its measured library grid)
    count, since another GPU's values cannot change its predictions. Without ``gpu`` every spec
    counts (the fingerprint the draws recorded before 2026-11-28;
    :func:`fingerprint_is_current` reads those through :data:`FINGERPRINT_ALIASES`).
    """
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    files = [f for pattern in MODEL_SOURCES for f in sorted(root.glob(pattern))]
    if gpu is not None:
        files = _gpu_sources(root, files, gpu)
    stamp = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _fingerprint(root, stamp)


def _gpu_sources(root: Path, files: list, gpu: str) -> list:
    """``files`` less the spec files of other GPUs (``gpu``'s spec and the data files it names
    stay)."""
    import tomllib

    specs = root / "gpusim" / "specs"
    own = specs / f"{gpu}.toml"
    if own not in files:
        names = sorted(f.stem for f in files if f.parent == specs and f.suffix == ".toml")
        raise InputError(f"gpu={gpu!r} has no spec file; accepted: {', '.join(names)}")
    named = set()
    doc = tomllib.loads(own.read_text())
    for table in ("params", "library", "library_fp16"):
        for v in doc.get(table, {}).values():
            val = v.get("value") if isinstance(v, dict) else v
            if isinstance(val, str) and val.endswith(".json"):
                named.add(specs / val)
    return [f for f in files if f.parent != specs or f.suffix == ".py" or f == own or f in named]


# Fingerprints recorded before they were per GPU: ``{all-spec fingerprint: {"commit": the
# commit whose tree had it, "per_gpu": {spec name: model_fingerprint(gpu=...) of that tree}}}``,
# written by :func:`fingerprints_at` and checked against the commit by a test.
FINGERPRINT_ALIASES = Path(__file__).resolve().parent / "specs" / "fingerprint_aliases.json"


def fingerprints_at(commit: str, repo: Path | str | None = None) -> dict:
    """``{"all": model_fingerprint(), spec name: model_fingerprint(gpu=...)}`` of the tree of
    ``commit`` in the git repository ``repo`` (the checkout by default), from ``git archive``
    of the model's sources into a temporary directory."""
    import subprocess
    import tarfile
    import tempfile

    repo = Path(repo) if repo is not None else Path(__file__).resolve().parents[1]
    # the folders of the patterns (a pattern naming one file: its folder, which an older tree
    # has even where the file is not there yet)
    dirs = sorted({(pat.split("*")[0] if "*" in pat else str(Path(pat).parent)).rstrip("/")
                   for pat in MODEL_SOURCES})
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "tree.tar"
        r = subprocess.run(["git", "-C", str(repo), "archive", "-o", str(tar), commit, *dirs],
                           capture_output=True, text=True)
        if r.returncode:
            raise InputError(f"commit={commit!r}: git archive failed: {r.stderr.strip()}")
        tree = Path(tmp) / "tree"
        with tarfile.open(tar) as t:
            try:
                t.extractall(tree, filter="data")
            except TypeError:      # Python 3.11 before 3.11.4: no extraction filters (the
                t.extractall(tree)  # archive is git's own, of the repository's tracked files)
        specs = sorted(p.stem for p in (tree / "gpusim" / "specs").glob("*.toml"))
        return {"all": model_fingerprint(tree),
                **{g: model_fingerprint(tree, gpu=g) for g in specs}}


def fingerprint_is_current(recorded: str | None, scope: str | None, gpu: str) -> bool:
    """Whether a fingerprint recorded for GPU ``gpu`` (a spec name) is today's model's:
    ``scope`` is the GPU it was computed for (``model_fingerprint(gpu=scope)``), None for the
    all-spec fingerprint of earlier records, which is current while every spec is unchanged or,
    through :data:`FINGERPRINT_ALIASES`, while ``gpu``'s own sources are; either, also across a
    change of the sources listed in :data:`FINGERPRINT_UNCHANGED` for ``gpu``."""
    if not isinstance(recorded, str):
        return False
    if scope is not None:   # a fingerprint of another GPU's sources says nothing of this one's
        return scope == gpu and _is_today(recorded, gpu)
    if recorded == model_fingerprint():
        return True
    alias = (load_json(FINGERPRINT_ALIASES) if FINGERPRINT_ALIASES.exists() else {}).get(recorded)
    if alias is None:
        return False
    per_gpu = alias.get("per_gpu") if isinstance(alias, dict) else None
    if not isinstance(per_gpu, dict):
        raise InputError(f"{FINGERPRINT_ALIASES}: entry {recorded[:12]}... must be an object "
                         f"with a 'per_gpu' object of spec name -> fingerprint")
    return _is_today(per_gpu.get(gpu), gpu)


def _is_today(fingerprint, gpu: str) -> bool:
    """Whether ``gpu``'s fingerprint ``fingerprint`` is today's, or one whose predictions a
    chain of :data:`FINGERPRINT_UNCHANGED` pairs (each change leaving them as they were) leads
    to today's sources from."""
    now = model_fingerprint(gpu=gpu)
    nxt = dict(unchanged_pairs(gpu))
    seen = set()
    while fingerprint != now and fingerprint in nxt and fingerprint not in seen:
        seen.add(fingerprint)
        fingerprint = nxt[fingerprint]
    return fingerprint == now


# Changes of the sources that leave a GPU's predictions as they were (a mechanism switched off
# in that GPU's spec): ``{spec name: [{"from": its fingerprint before, "to": after, "commit": the
# commit of the change, "why": ..., "check": the test that re-simulates recorded cases}]}``. A
# draw measured under "from" stays out of sample while today's fingerprint is "to", or is
# reached from "to" by further such pairs; any later change without a pair of its own ends it.
FINGERPRINT_UNCHANGED = Path(__file__).resolve().parent / "specs" / "fingerprint_unchanged.json"


def unchanged_pairs(gpu: str) -> set[tuple[str, str]]:
    """The ``(from, to)`` fingerprints of :data:`FINGERPRINT_UNCHANGED` for ``gpu``."""
    if not FINGERPRINT_UNCHANGED.exists():
        return set()
    doc = load_json(FINGERPRINT_UNCHANGED)
    entries = doc.get(gpu, []) if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("from"), str) and isinstance(e.get("to"), str)
            for e in entries):
        raise InputError(f"{FINGERPRINT_UNCHANGED}: {gpu!r} must be a list of objects with "
                         f"'from' and 'to' fingerprint strings")
    return {(e["from"], e["to"]) for e in entries}


# The meaning of a file takes the tokenizer and the parser (about 0.5 s for all the sources, more
# than a whole `gpusim predict --engine model`, which compares the fingerprint with the error
# bands' one), so meanings are kept on disk, keyed by the sha256 of the file's text: a changed
# file misses and is recomputed, an unchanged one costs a hash. Only a cache: any failure to read
# or write it falls back to computing.
_MEANING_CACHE_VERSION = 1
_MEANING_CACHE_ENTRIES = 512  # files kept (several checkouts may share the cache)


def _meaning_cache_file() -> Path:
    """``$GPUSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpusim``, else ``~/.cache/gpusim``."""
    d = os.environ.get("GPUSIM_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "gpusim")
    return Path(d) / f"source_meaning_v{_MEANING_CACHE_VERSION}.json"


def _read_meaning_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _write_meaning_cache(path: Path, cache: dict) -> None:
    import threading

    keep = dict(list(cache.items())[-_MEANING_CACHE_ENTRIES:])   # newest entries last
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(keep))
        os.replace(tmp, path)   # atomic: a concurrent reader sees the old or the new file
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


@functools.cache
def _meaning_salt() -> bytes:
    """What the cached meanings were computed by: the source of the meaning functions and the
    keys they drop. Part of every cache key, so that a change to how a meaning is computed
    misses the cache everywhere instead of mixing old and new meanings (which would give the
    same sources two fingerprints on two machines)."""
    import inspect

    fns = (_python_meaning, _spec_meaning, _data_meaning)
    try:
        parts = [inspect.getsource(f) for f in fns]
    except (OSError, TypeError):   # no source file (a frozen or zipped install): the bytecode
        parts = [repr((f.__code__.co_code, f.__code__.co_consts)) for f in fns]
    parts += [repr(sorted(_SPEC_TEXT_KEYS)), repr(_STATEMENT_FIELDS)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest().encode()


@functools.lru_cache(maxsize=8)
def _fingerprint(root: Path, stamp: tuple) -> str:
    h = hashlib.sha256()
    cache_file = _meaning_cache_file()
    cache = _read_meaning_cache(cache_file)
    missed = False
    for name, _, _ in stamp:
        f = Path(name)
        rel = f.relative_to(root).as_posix()
        text = f.read_text()
        # the kind of file is part of the key: the same text means different things as TOML
        key = hashlib.sha256(_meaning_salt() + b"\0" + f.suffix.encode() + b"\0"
                             + text.encode()).hexdigest()
        meaning = cache.get(key)
        if meaning is None:
            meaning = (_spec_meaning(text) if f.suffix == ".toml" else
                       _data_meaning(text) if f.suffix == ".json" else _python_meaning(text))
            missed = True
        cache.pop(key, None)
        cache[key] = meaning   # (re)inserted last: the most recently used survive trimming
        h.update(rel.encode() + b"\0" + meaning.encode() + b"\0")
    if missed:
        _write_meaning_cache(cache_file, cache)
    return h.hexdigest()
