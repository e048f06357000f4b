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

import json
from dataclasses import dataclass
from pathlib import Path

from kernels_ir.errors import InputError

__all__ = ["Campaign", "load_campaign", "load_json", "spec_name_for_gpu", "PROVENANCE_FIELDS",
           "CASE_FIELDS", "RESULT_FIELDS", "MICRO_FIELDS", "NCU_FIELDS", "BANK_METRICS"]

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


def _validate_case(c: dict, i: int, path: Path) -> None:
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
    for i, c in enumerate(data["cases"]):
        _validate_case(c, i, cpath)
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
    return Campaign(d, data["provenance"], steps, tuple(data["cases"]), micro, ncu, ncu_steps)


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
