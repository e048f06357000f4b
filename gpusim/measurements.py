"""Load and validate recorded GPU measurements (``measurements/<gpu>/*.json``).

Three files per campaign directory, written by ``measurements/campaign.py`` (format in
``measurements/README.md``):

- ``campaign.json``: ``provenance`` + ``cases`` (each: id, kind, hidden, batch, density, seed,
  status, and for ``status == "ok"`` a ``result`` with per_step_s, max_rel_err, values_ok, ...);
- ``microbench.json``: ``provenance`` + ``results`` (name -> per_op_s, sizes, status);
- ``ncu.json``: ``steps`` (T of the profiled launches), ``metrics`` and ``cases`` (id -> metrics).

A file with a missing field is rejected with an :class:`InputError` that names the field and the
file; nothing downstream sees a half-valid record.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from kernels_ir.errors import InputError

__all__ = ["Campaign", "load_campaign", "load_json", "spec_name_for_gpu", "PROVENANCE_FIELDS",
           "CASE_FIELDS", "RESULT_FIELDS", "MICRO_FIELDS", "NCU_FIELDS", "BANK_METRICS",
           "KERNEL_FIELDS", "KERNEL_KINDS", "FORMAT_VERSION", "kernel_fingerprint",
           "case_fingerprint", "kernel_staleness", "model_fingerprint", "MODEL_SOURCES"]

PROVENANCE_FIELDS = ("gpu_name", "driver_version", "cuda_runtime_version", "cupy_version", "date",
                     "command")
CASE_FIELDS = ("id", "kind", "hidden", "batch", "density", "seed", "status")
RESULT_FIELDS = ("per_step_s", "max_rel_err", "values_ok", "launch_s", "steps")
MICRO_FIELDS = ("name", "per_op_s", "sizes")
NCU_FIELDS = ("steps", "metrics", "cases")
BANK_METRICS = {
    "conflicts_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "conflicts_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "wavefronts_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "wavefronts_st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
}
KINDS = ("sparse_persistent", "dense_persistent", "csr", "cublas", "cusparse")
KERNEL_KINDS = ("sparse_persistent", "dense_persistent", "csr")   # kinds that run our own kernel
# Provenance of the exact kernel a case ran (format_version >= 2): sha256 of the generated CUDA
# source and of the IR text (kernels_ir.format_kernel) of the case rebuilt with ``steps`` steps.
KERNEL_FIELDS = ("cuda_sha256", "ir_sha256", "steps")
FORMAT_VERSION = 2


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
        return tuple(c for c in self.cases if c["status"] == "ok")

    @property
    def spec_name(self) -> str:
        return spec_name_for_gpu(self.provenance["gpu_name"])


def load_json(path: Path | str) -> dict:
    path = Path(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise InputError(f"measurement file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"measurement file {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"measurement file {path}: top level must be an object")
    return data


def _require(obj, fields, where: str, path: Path) -> None:
    if not isinstance(obj, dict):
        raise InputError(f"measurement file {path}: {where} must be an object")
    for f in fields:
        if f not in obj:
            raise InputError(f"measurement file {path}: {where} has no field {f!r} "
                             f"(required: {', '.join(fields)})")


def spec_name_for_gpu(gpu_name: str) -> str:
    """The spec file that models a recorded GPU (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    low = gpu_name.lower()
    for key in ("h200", "h100", "v100"):
        if key in low:
            return key
    raise InputError(f"gpu_name={gpu_name!r} has no matching spec; accepted: names containing "
                     f"H100, H200 or V100")


def _validate_case(c: dict, i: int, path: Path, version: int) -> None:
    where = f"cases[{i}]"
    _require(c, CASE_FIELDS, where, path)
    if c["kind"] not in KINDS:
        raise InputError(f"measurement file {path}: {where} kind={c['kind']!r}; accepted: "
                         f"{', '.join(KINDS)}")
    if c["kind"].endswith("persistent"):
        _require(c, ("sync", "wide_loads", "layout"), where, path)
    if c["status"] == "ok":
        _require(c, ("result",), where, path)
        _require(c["result"], RESULT_FIELDS, f"{where}.result", path)
        ps = c["result"]["per_step_s"]
        if not isinstance(ps, (int, float)) or not ps > 0:
            raise InputError(f"measurement file {path}: {where}.result.per_step_s={ps!r} must "
                             f"be a positive number of seconds")
        if version >= 2 and c["kind"] in KERNEL_KINDS:
            _require(c, ("kernel",), where, path)
            _require(c["kernel"], KERNEL_FIELDS, f"{where}.kernel", path)


def load_campaign(directory: Path | str) -> Campaign:
    """Load and validate ``campaign.json`` (required), ``microbench.json`` and ``ncu.json``."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"measurement directory {d} does not exist")
    cpath = d / "campaign.json"
    data = load_json(cpath)
    _require(data, ("provenance", "steps", "cases"), "the top level", cpath)
    _require(data["provenance"], PROVENANCE_FIELDS, "provenance", cpath)
    if not isinstance(data["cases"], list):
        raise InputError(f"measurement file {cpath}: cases must be a list")
    version = data.get("format_version", 1)
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise InputError(f"measurement file {cpath}: format_version={version!r}; accepted: 1.."
                         f"{FORMAT_VERSION}")
    for i, c in enumerate(data["cases"]):
        _validate_case(c, i, cpath, version)
    micro = {}
    mpath = d / "microbench.json"
    if mpath.exists():
        m = load_json(mpath)
        _require(m, ("provenance", "results"), "the top level", mpath)
        for name, r in m["results"].items():
            _require(r, ("status",), f"results[{name!r}]", mpath)
            if r["status"] == "ok":
                _require(r, MICRO_FIELDS, f"results[{name!r}]", mpath)
                micro[name] = r
    ncu, ncu_steps = {}, None
    npath = d / "ncu.json"
    if npath.exists():
        n = load_json(npath)
        _require(n, NCU_FIELDS, "the top level", npath)
        ncu_steps = int(n["steps"])
        for cid, rec in n["cases"].items():
            _require(rec, ("metrics",), f"cases[{cid!r}]", npath)
            _require(rec["metrics"], tuple(BANK_METRICS.values()), f"cases[{cid!r}].metrics",
                     npath)
            ncu[cid] = rec["metrics"]
    steps = tuple(int(x) for x in data["steps"])
    return Campaign(d, data["provenance"], steps, tuple(data["cases"]), micro, ncu, ncu_steps,
                    version)


def build_case(case: dict, steps: int, spec):
    """Rebuild a recorded case's program (same layer seed) with ``steps`` timesteps.

    Persistent kinds give an :class:`RNNProgram`, ``csr`` a :class:`CSRProgram`, the library
    baselines the layer itself.
    """
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    layer = make_layer(case["hidden"], case["batch"], case["density"], steps, case["seed"])
    if case["kind"] == "sparse_persistent":
        return build_sparse_rnn(layer, spec, sync=case["sync"], wide_loads=case["wide_loads"],
                                layout=case["layout"])
    if case["kind"] == "dense_persistent":
        return build_dense_rnn(layer, spec, sync=case["sync"], wide_loads=case["wide_loads"])
    if case["kind"] == "csr":
        return build_csr_baseline(layer)
    return layer


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_fingerprint(kernel) -> dict:
    """sha256 of the generated CUDA source and of the IR text of ``kernel``."""
    from kernels_ir import format_kernel
    from kernels_ir.codegen_cuda import generate

    return {"cuda_sha256": _sha256(generate(kernel).code),
            "ir_sha256": _sha256(format_kernel(kernel))}


def case_fingerprint(case: dict, steps: int, spec) -> dict | None:
    """The fingerprint (``KERNEL_FIELDS``) of a case's kernel at ``steps``; None for the library
    baselines (cuBLAS / cuSPARSE run no kernel of ours)."""
    if case["kind"] not in KERNEL_KINDS:
        return None
    return {**kernel_fingerprint(build_case(case, steps, spec).kernel), "steps": int(steps)}


def kernel_staleness(case: dict, spec) -> str | None:
    """Why a recorded kernel case no longer describes today's kernel (None: it still does).

    The case's kernel is rebuilt (same layer seed, the recorded ``steps``) and its CUDA source and
    IR text hashes compared with the recorded ones. A kernel case without a recorded hash (files
    of format 1) counts as stale: nothing shows that it ran today's kernel.
    """
    if case["kind"] not in KERNEL_KINDS:
        return None
    rec = case.get("kernel")
    if not rec:
        return "no kernel hash recorded (format 1 file)"
    now = case_fingerprint(case, int(rec["steps"]), spec)
    changed = [k for k in ("cuda_sha256", "ir_sha256") if now[k] != rec[k]]
    if not changed:
        return None
    return ", ".join(f"{k} {rec[k][:12]} -> {now[k][:12]}" for k in changed)


# What a prediction depends on: the simulator, the pricing path, the analytical and capacity
# models, the kernels (IR, mappings, layouts, bank rule) and the GPU specs' values.
MODEL_SOURCES = ("gpusim/engine/*.py", "gpusim/pricing.py", "models/*.py", "kernels_ir/*.py",
                 "kernels_ir/kernels/*.py", "kernels_ir/kernels/*/*.py", "gpusim/specs/*.toml")
_SPEC_TEXT_KEYS = frozenset({"source", "calibration", "note", "unit", "type"})


def _python_meaning(text: str) -> str:
    """A Python source without its comments, docstrings and blank lines: those do not change a
    prediction, so they do not change the fingerprint. (Line ranges from the AST and comment
    positions from the tokenizer; the text itself is hashed, since the AST's shape and the
    tokens of f-strings differ between Python versions.)"""
    import ast
    import io
    import tokenize

    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                lines[i] = ""
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


def model_fingerprint(root: Path | str | None = None) -> str:
    """sha256 of everything a prediction depends on (:data:`MODEL_SOURCES`, by meaning).

    A fresh draw of layers measured on a GPU records the fingerprint of the model at the time it
    was measured. ``gpusim crosscheck`` counts the draw as out of sample only while the model
    still has that fingerprint: once any mechanism, spec value, kernel or pricing rule changes,
    the draw may have guided the change and counts as in sample.
    """
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    files = [f for pattern in MODEL_SOURCES for f in sorted(root.glob(pattern))]
    stamp = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _fingerprint(root, stamp)


@functools.lru_cache(maxsize=8)
def _fingerprint(root: Path, stamp: tuple) -> str:
    h = hashlib.sha256()
    for name, _, _ in stamp:
        f = Path(name)
        rel = f.relative_to(root).as_posix()
        text = f.read_text()
        meaning = _spec_meaning(text) if f.suffix == ".toml" else _python_meaning(text)
        h.update(rel.encode() + b"\0" + meaning.encode() + b"\0")
    return h.hexdigest()
