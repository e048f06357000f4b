"""The GPU backends on a machine without a GPU: one clear BackendUnavailable, never a traceback;
and the kernels they run, checked functionally on the executor (differential against float64)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels_ir.errors import BackendUnavailable, InputError

HAS_CUPY = importlib.util.find_spec("cupy") is not None


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cupy_missing_is_one_clear_error():
    from gpusim.backends import cupy_backend

    with pytest.raises(BackendUnavailable, match="CuPy"):
        cupy_backend.require_cupy()
    with pytest.raises(BackendUnavailable):
        cupy_backend.run_program(object(), repeats=1, warmup=0, seed=0)
    assert issubclass(BackendUnavailable, InputError)  # the CLI turns it into exit 2


def test_backends_import_without_cupy_or_torch():
    before = set(sys.modules)
    import gpusim.backends.baselines  # noqa: F401
    import gpusim.backends.cupy_backend  # noqa: F401

    new = set(sys.modules) - before
    assert not any(m.split(".")[0] in ("cupy", "torch") for m in new)


def test_torch_baselines_without_gpu():
    from gpusim.backends import baselines

    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    with pytest.raises(BackendUnavailable):
        baselines.require_torch()


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 3])
def test_csr_baseline_values_on_the_executor(batch):
    from gpusim.engine import execute
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import make_layer, max_rel_err

    layer = make_layer(96, batch, 0.3, 3, 7)
    prog = build_csr_baseline(layer, threads_per_cta=64)
    h, hs = np.asarray(layer.h0), [np.asarray(layer.h0)]
    for t in range(layer.timesteps):
        out = execute(prog.kernel, prog.step_inputs(t, h)).globals["h_out"]
        h = np.asarray(out).view(np.float32).reshape(96, batch)
        hs.append(h)
    assert max_rel_err(np.array(hs), prog.reference()) < 1e-5


def test_csr_rows_sorted_and_padded_to_128_bit():
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import make_layer

    layer = make_layer(128, 4, 0.2, 1, 1)
    prog = build_csr_baseline(layer)
    ptr, perm = prog.inputs["rowptr"], prog.inputs["perm"]
    assert np.all(ptr % 4 == 0)
    lengths = np.diff(layer.U.indptr)[perm]
    assert np.all(np.diff(lengths) <= 0)          # longest rows first (the swizzle)


@pytest.mark.parametrize("name", ["smem_latency", "l2_latency", "flag_round_trip",
                                  "atomic_same", "atomic_distinct", "grid_barrier"])
def test_microbenchmarks_run_and_check_on_the_executor(name):
    from gpusim.engine import execute
    from kernels_ir.kernels import microbench as mb

    kw = {"ctas": 3, "threads": 64} if name in ("atomic_same", "atomic_distinct",
                                                 "grid_barrier") else {}
    m = mb.build(name, 3, **kw)
    assert m.ops > 0
    assert m.verify_result(execute(m.kernel, m.inputs).globals)


def test_microbench_unknown_name():
    from kernels_ir.kernels import microbench as mb

    with pytest.raises(InputError, match="unknown"):
        mb.build("nope", 2)


def _campaign():
    path = Path(__file__).resolve().parents[2] / "measurements" / "campaign.py"
    spec = importlib.util.spec_from_file_location("campaign", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_campaign_covers_the_required_space():
    cases = _campaign().cases()
    assert len(cases) >= 40
    assert len({c["id"] for c in cases}) == len(cases)
    kinds = {c["kind"] for c in cases}
    assert kinds == {"sparse_persistent", "dense_persistent", "csr", "cublas", "cusparse"}
    variants = {(c["sync"], c["wide_loads"], c["layout"]) for c in cases
                if c["kind"] == "sparse_persistent"}
    assert len(variants) == 8
    assert {c["batch"] for c in cases} == {1, 2, 4, 8}
    hs = [c["hidden"] for c in cases]
    ds = [c["density"] for c in cases if c["kind"] != "dense_persistent"]
    assert min(hs) == 256 and max(hs) == 8192 and min(ds) == 0.01 and max(ds) == 0.5


def test_ncu_csv_parser():
    text = ('==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"0","k","a.sum","","1,234"\n"0","k","b.sum","ns","5"\n"1","k2","a.sum","","7"\n')
    launches = _campaign().parse_ncu_csv(text)
    assert [x["id"] for x in launches] == [0, 1]
    assert launches[0]["metrics"] == {"a.sum": 1234.0, "b.sum": 5.0}


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("th", ["float", "__half"])
def test_fused_cell_tails_compile(tmp_path, cell, th):
    """The gated baselines' fused gate kernels (CUDA graph node after the product) compile for
    both state types, as the CuPy call builds them."""
    import subprocess

    from gpusim.backends.baselines import CELL_TAIL

    src = ("#include <cuda_fp16.h>\n" if th == "__half" else "") + \
        f"#define T_H {th}\n#define T_P {th}\n" + CELL_TAIL[cell]
    cu = tmp_path / "tail.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "t.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_library_baselines_check_against_the_cells_reference(cell):
    """The values check of a baseline uses the layer's own cell (and the fp16-rounded weights
    with fp16)."""
    from gpusim.backends.baselines import _reference
    from kernels_ir.kernels.sparse_rnn import fp16_layer, make_layer
    from models.reference import gru_reference, lstm_reference, rnn_reference

    layer = make_layer(64, 2, 0.2, 3, 7, cell=cell)
    ref = {"rnn": rnn_reference, "gru": gru_reference,
           "lstm": lambda *a: lstm_reference(*a)[0]}[cell]
    np.testing.assert_array_equal(_reference(layer, "fp32"),
                                  ref(layer.U, layer.x_proj, layer.h0))
    r16 = fp16_layer(layer)
    np.testing.assert_array_equal(_reference(layer, "fp16"), ref(r16.U, r16.x_proj, r16.h0))
    assert not np.array_equal(_reference(layer, "fp16"), _reference(layer, "fp32"))
