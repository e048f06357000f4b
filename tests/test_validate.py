"""The validation layer (gpusim.validate) on the inputs an adversarial review found mishandled:
each is refused with one line (exit 2) before any work, or accepted and correct."""

from __future__ import annotations

import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from gpusim.cli import main
from gpusim.validate import (
    DENSITY_MIN,
    LIST_MAX,
    check_output_path,
    check_scheduler,
    check_values,
    expand_list,
)
from kernels_ir.errors import InputError, SpecError, ValueMismatchError

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"
V100 = ROOT / "gpusim" / "specs" / "v100.toml"


def run(argv, capsys):
    """(exit status, stdout, stderr lines) of gpusim.cli.main in-process."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, [ln for ln in err.splitlines() if ln.strip()]


def refused(argv, capsys, needle: str) -> str:
    rc, _, err = run(argv, capsys)
    assert rc == 2, (argv, err)
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert needle in err[0], err[0]
    return err[0]


# --- 1. files and paths that used to give a traceback --------------------------------------------

@pytest.fixture
def odd_files(tmp_path):
    (tmp_path / "x.toml").mkdir()
    (tmp_path / "bin.toml").write_bytes(bytes(range(256)) * 4)
    os.mkfifo(tmp_path / "fifo.toml")
    return tmp_path


@pytest.mark.parametrize("name,needle", [
    ("x.toml", "is a directory"), ("bin.toml", "is not UTF-8 text"),
    ("fifo.toml", "is not a regular file"),
])
def test_spec_path_that_is_not_a_text_file(odd_files, capsys, name, needle):
    refused(["predict", "--gpu", str(odd_files / name)], capsys, needle)


def test_spec_device_and_huge_file(tmp_path, capsys):
    refused(["specs", "--gpu", "/dev/zero"], capsys, "is not a regular file")
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    refused(["specs", "--gpu", str(big)], capsys, "accepted: at most 1048576")
    nested = tmp_path / "nested.toml"
    nested.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SpecError):
        from gpusim.specs import load_spec

        load_spec(nested)


def _campaign(tmp_path, mutate=None, kinds=("cublas", "cusparse"), raw: str | None = None
              ) -> Path:
    """A small campaign directory: the recorded H100 cases of ``kinds`` (one per layer size up to
    1024), mutated by ``mutate(data)``."""
    data = json.loads((H100 / "campaign.json").read_text())
    data["cases"] = [c for c in data["cases"] if c["kind"] in kinds and c["hidden"] <= 1024]
    if mutate is not None:
        data = mutate(data) or data
    d = tmp_path / "camp"
    d.mkdir(exist_ok=True)
    (d / "campaign.json").write_text(raw if raw is not None else json.dumps(data))
    return d


def _set(path, value):
    def mutate(data):
        obj = data
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return mutate


@pytest.mark.parametrize("path,value,needle", [
    (["steps"], "128", "steps=\"128\"; accepted: a list of 2 entries"),
    (["steps"], 128, "steps=128; accepted: a list of 2"),
    (["steps"], [32, 128], "with T > T'"),
    (["provenance", "gpu_name"], 7, "provenance.gpu_name=7"),
    (["cases", 0, "seed"], -1, "cases[0].seed=-1; accepted: an integer in 0.."),
    (["cases", 0, "hidden"], 2.5, "cases[0].hidden=2.5"),
    (["cases", 0, "density"], 0, "cases[0].density=0"),
    (["cases", 0, "result", "per_step_s"], True, "per_step_s=true"),
    (["cases", 0, "result", "per_step_s"], 1e300, "per_step_s=1e+300; accepted: a number of "
                                                   "seconds in (0, 1]"),
    (["cases", 0, "result", "per_step_s"], float("inf"), "per_step_s=Infinity"),
    (["cases", 0, "result", "per_step_s"], float("nan"), "per_step_s=NaN"),
    (["cases", 0, "result", "values_ok"], "yes", "values_ok=\"yes\"; accepted: true or false"),
    (["cases", 0, "result"], [1, 2], "cases[0].result must be an object, not a list of 2"),
    (["cases"], {"a": 1}, "cases=an object; accepted: a list"),
    (["cases"], [[1]], "cases[0] must be an object, not a list of 1"),
    (["cases", 0, "id"], "cusparse-h1024-b4-d0.1", "recorded twice"),
])
def test_campaign_field_types(tmp_path, capsys, path, value, needle):
    d = _campaign(tmp_path, _set(path, value))
    refused(["crosscheck", "--data", str(d), "--kinds", "cublas"], capsys, needle)


def test_persistent_case_layout_null(tmp_path, capsys):
    d = _campaign(tmp_path, _set(["cases", 0, "layout"], None), kinds=("sparse_persistent",))
    refused(["crosscheck", "--data", str(d)], capsys,
            "cases[0].layout=null; accepted: one of naive, random, greedy, optimal")


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe\x00\x01", "is not UTF-8 text"), (b"[1, 2]", "top level must be an object"),
    (b"{" * 100_000, "is not valid JSON"), (b"1" * 5000, "is not valid JSON"),
])
def test_campaign_file_that_is_not_a_json_object(tmp_path, capsys, content, needle):
    d = tmp_path / "camp"
    d.mkdir()
    (d / "campaign.json").write_bytes(content)
    refused(["crosscheck", "--data", str(d)], capsys, needle)


def test_campaign_json_directory_and_bad_side_files(tmp_path, capsys):
    d = tmp_path / "dir"
    (d / "campaign.json").mkdir(parents=True)
    refused(["crosscheck", "--data", str(d)], capsys, "is a directory")
    d = _campaign(tmp_path)
    (d / "ncu.json").write_text(json.dumps({"steps": 10 ** 9, "metrics": [], "cases": {}}))
    refused(["crosscheck", "--data", str(d)], capsys, "ncu.json: steps=1000000000")
    (d / "ncu.json").unlink()
    (d / "microbench.json").write_text(json.dumps({"provenance": {}, "results": []}))
    refused(["crosscheck", "--data", str(d)], capsys, "results=a list of 0")


def test_calibrate_uses_the_same_schema(tmp_path, capsys):
    from gpusim.calibrate import main as calibrate

    (tmp_path / "microbench.json").write_text(json.dumps(
        {"provenance": {"sm_clock_mhz_samples": ["fast"]}, "results": {}}))
    assert calibrate(["--data", str(tmp_path)]) == 2
    assert "sm_clock_mhz_samples[0]=\"fast\"" in capsys.readouterr().err
    (tmp_path / "microbench.json").write_text(json.dumps(
        {"provenance": {}, "results": {"smem_latency": {"status": "ok", "name": "smem_latency",
                                                        "per_op_s": "1e-8", "sizes": {}}}}))
    assert calibrate(["--data", str(tmp_path)]) == 2
    assert "per_op_s=\"1e-8\"" in capsys.readouterr().err


def test_output_paths_checked_before_the_work(tmp_path, capsys, monkeypatch):
    import gpusim.cli.crosscheck as cc
    import gpusim.sweep as sweep

    def no_work(*a, **k):
        raise AssertionError("the work started before the output path was checked")

    monkeypatch.setattr(sweep, "run_sweep", no_work)
    monkeypatch.setattr(cc, "run_crosscheck", no_work)
    refused(["crosscheck", "--plot", str(tmp_path / "x.txt")], capsys, "must end in .png")
    refused(["sweep", "--csv", str(tmp_path / "x.csv"), "--png", str(tmp_path / "x.txt")],
            capsys, "must end in .png")
    refused(["sweep", "--csv", str(tmp_path / "nodir" / "x.csv")], capsys, "does not exist")
    refused(["sweep", "--csv", str(tmp_path)], capsys, "must end in .csv")
    (tmp_path / "d.csv").mkdir()
    refused(["sweep", "--csv", str(tmp_path / "d.csv")], capsys, "is a directory")
    refused(["sweep", "--csv", "/proc/x.csv"], capsys, "cannot be written")
    refused(["timeline", "--plot", str(tmp_path / "x.pdf")], capsys, "must end in .png")
    refused(["simulate", "--plot", "/proc/nope/x.png"], capsys, "does not exist")


def test_an_output_error_after_the_work_is_one_line(tmp_path, capsys, monkeypatch):
    import gpusim.sweep as sweep

    def fail(cols, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sweep, "write_csv", fail)
    refused(["sweep", "--hidden", "256", "--batch", "1", "--density", "0.1", "--csv",
             str(tmp_path / "x.csv"), "--no-progress"], capsys, "Permission denied")


def test_check_output_path_probe_leaves_nothing(tmp_path):
    p = tmp_path / "new.csv"
    check_output_path(p, (".csv",))
    assert not p.exists()
    p.write_text("keep")
    check_output_path(p, (".csv",))
    assert p.read_text() == "keep"


@pytest.mark.parametrize("value,needle", [
    ("dask://", "needs a host and a port"), ("dask://host", "needs a host and a port"),
    ("dask://:8786", "needs a host and a port"), ("tcp://h:99999", "port 1..65535"),
    ("mpi", "is not supported"),
])
def test_scheduler_addresses(value, needle, capsys, tmp_path):
    with pytest.raises(InputError, match=needle):
        check_scheduler(value, False)
    refused(["sweep", "--csv", str(tmp_path / "x.csv"), "--scheduler", value], capsys, needle)


def test_scheduler_accepted_forms():
    assert check_scheduler(None, False) == "local"
    assert check_scheduler(None, True) == "dask-local"
    assert check_scheduler("dask://10.0.0.1:8786", False) == "dask://10.0.0.1:8786"
    assert check_scheduler("serial", False) == "serial"


# --- 2. bounds counted before anything is allocated ----------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["--hidden", "1:1000000000:1"], "hidden=1000000000 is outside the accepted 1..1048576"),
    (["--hidden", "1:1000000:1"], "expands to more than 100000 values"),
    (["--density", "0.1:inf:0.1"], "is not a finite number"),
    (["--density", "0.01:0.02:1e-12"], "expands to more than 100000 values"),
    (["--density", "0.1:0.3:nan"], "is not a finite number"),
    (["--density", "0.1:0.3:0"], "must be positive"),
    (["--density", "0.3:0.1:0.1"], "is below start"),
    (["--density", "0.1:0.2"], "is not a list"),
    (["--batch", "1,,2"], "empty item"),
    (["--hidden", "256:4096:1", "--batch", "1:1024:1"], "configurations"),
])
def test_sweep_ranges_refused_before_expansion(argv, needle, capsys, tmp_path):
    refused(["sweep", *argv, "--csv", str(tmp_path / "x.csv")], capsys, needle)


def test_exact_decimal_ranges():
    d = expand_list("density", "0.01:1.0:0.01", integer=False, lo=DENSITY_MIN, hi=1.0)
    assert len(d) == 100 and d[-1] == 1.0 and d[0] == 0.01
    assert d == [float(Decimal(k) / 100) for k in range(1, 101)]
    assert expand_list("d", "0.1:0.3:0.1", integer=False, lo=0, hi=1) == [0.1, 0.2, 0.3]
    assert expand_list("h", "256:1024:256,2048", integer=True, lo=1, hi=4096) == \
        [256, 512, 768, 1024, 2048]
    assert expand_list("h", "1:10:4", integer=True, lo=1, hi=10) == [1, 5, 9]
    assert len(expand_list("h", f"1:{LIST_MAX}:1", integer=True, lo=1, hi=LIST_MAX)) == LIST_MAX
    with pytest.raises(InputError, match="is not an integer"):
        expand_list("h", "1.5", integer=True, lo=1, hi=10)
    for text in ("1e999999999", "9" * 100_000, "1:1e999999999:1"):  # never expanded to digits
        with pytest.raises(InputError, match="outside the accepted"):
            expand_list("h", text, integer=True, lo=1, hi=10)
    with pytest.raises(InputError, match="expands to more than"):
        expand_list("d", "0.1:0.2:1e-999999999", integer=False, lo=DENSITY_MIN, hi=1.0)


@pytest.mark.parametrize("argv,needle", [
    (["banks", "--warps-per-cta", "1000000"], "warps-per-cta=1000000"),
    (["banks", "--warps-per-cta", "33"], "warps-per-cta=33 (1056 threads) is outside 1..32"),
    (["banks", "--batch", "100000"], "batch=100000"),
    (["mapping", "--hidden", "65536", "--density", "0.01"], "weight positions to draw"),
    (["mapping", "--hidden", "20000", "--density", "0.1"], "does not fit"),
    (["banks", "--hidden", "30000", "--density", "0.1"], "this tool analyses at most 5e+07"),
    (["mapping", "--warp", "100000"], "warp=100000 is outside 0..639"),
    (["run", "--hidden", "2048", "--batch", "8", "--timesteps", "100000", "--no-wide-loads"],
     "input values"),
    (["simulate", "--hidden", "65536", "--density", "1"], "weight positions to draw"),
    (["simulate", "--hidden", "20000", "--density", "0.1"], "does not fit"),
    (["run", "--dense", "--hidden", "4000"], "does not fit"),
    (["predict", "--engine", "sim", "--sample-steps", "1000000"], "sample-steps=1000000"),
    (["predict", "--seed", str(2 ** 70)], "seed="),
    (["run", "--hidden", "9" * 50], "is not an integer"),
])
def test_sizes_refused_before_allocation(argv, needle, capsys):
    refused(argv, capsys, needle)


def test_predict_huge_layer_answers_fast(capsys):
    import time

    t0 = time.perf_counter()
    rc, out, _ = run(["predict", "--hidden", "65536", "--density", "1e-6"], capsys)
    assert rc == 0 and "expectations" in out
    assert time.perf_counter() - t0 < 15  # was ~60 s drawing 4.3e9 random numbers


def test_recorded_case_too_large_is_refused_before_it_is_built(tmp_path, capsys):
    def dense_case(data):
        c = next(c for c in json.loads((H100 / "campaign.json").read_text())["cases"]
                 if c["kind"] == "dense_persistent")
        c.update(hidden=14000, batch=1, id="dense-14000")
        data["cases"] = [c]

    d = _campaign(tmp_path, dense_case)
    refused(["crosscheck", "--data", str(d)], capsys, "recorded case 'dense-14000'")


# --- 3. absurd values refused --------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1e-300", "5e-324", "9.9e-7", "nan", "-inf", "inf"])
def test_absurd_densities(value, capsys):
    for cmd in ("predict", "run", "banks", "mapping"):
        refused([cmd, f"--density={value}"], capsys, "density=")
    refused(["capacity", "--density", "0.1", f"--density={value}"], capsys, "density=")


def test_density_floor_is_accepted(capsys):
    rc, out, _ = run(["predict", "--hidden", "1024", "--density", str(DENSITY_MIN), "--json"],
                     capsys)
    rep = json.loads(out)
    assert rc == 0 and rep["density"] == DENSITY_MIN


def _spec_text(**values) -> str:
    text = V100.read_text()
    import re

    for key, value in values.items():
        text, n = re.subn(rf"^{key} = {{ value = [^,]+,", f"{key} = {{ value = {value},", text,
                          flags=re.M)
        assert n == 1, key
    return text


@pytest.mark.parametrize("values,needle", [
    ({"max_threads_per_cta": 33}, "max_threads_per_cta = 33 is not a whole number of warps"),
    ({"max_threads_per_sm": 32, "max_threads_per_cta": 32}, "cannot hold the kernels' 256"),
    ({"max_threads_per_sm": 2000}, "max_threads_per_sm = 2000 is not a whole number of warps"),
    ({"l2_sector_bytes": 33}, "l2_sector_bytes = 33 must be a power of two"),
    ({"l2_sector_bytes": 256}, "l2_sector_bytes = 256 must be a power of two dividing"),
    ({"l1_unified_bytes_per_sm": 65536}, "is less than smem_bytes_per_sm"),
    ({"l2_hit_latency_cycles": 20}, "latencies"),
    ({"dram_latency_cycles": 100}, "latencies"),
    ({"regs_per_sm": 65000}, "allocation units"),
    ({"clock_hz": "inf"}, "clock_hz = inf"),
    ({"clock_hz": "nan"}, "clock_hz = nan"),
    ({"sm_count": "true"}, "sm_count = True is not a number"),
    ({"sm_count": '"80"'}, "sm_count = '80' is not a number"),
])
def test_inconsistent_spec_files(tmp_path, capsys, values, needle):
    p = tmp_path / "bad.toml"
    p.write_text(_spec_text(**values))
    refused(["specs", "--gpu", str(p)], capsys, needle)
    refused(["predict", "--gpu", str(p)], capsys, needle)


def test_predict_and_run_agree_on_what_a_spec_can_hold(tmp_path, capsys):
    """A spec that cannot hold the kernels' 256-thread CTAs is refused by every command (predict
    used to say the kernel fits where run refused it)."""
    p = tmp_path / "t32.toml"
    p.write_text(_spec_text(max_threads_per_sm=32, max_threads_per_cta=32))
    for cmd in ("predict", "run", "capacity", "simulate"):
        refused([cmd, "--gpu", str(p)], capsys, "256-thread CTAs")


@pytest.mark.parametrize("argv,needle", [
    (["sweep", "--csv", "x.csv", "--dask-local", "--scheduler", "serial"], "contradict"),
    (["sweep", "--csv", "x.csv", "--density", "0.1:0.3:nan"], "not a finite number"),
])
def test_contradicting_or_silently_changed_options(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(argv, capsys, needle)


def test_cases_with_wrong_values_are_not_scored(tmp_path, capsys):
    from gpusim.measurements import load_campaign

    def fail_first(data):
        data["cases"][0]["result"]["values_ok"] = False
        data["cases"][0]["result"]["max_rel_err"] = float("inf")

    d = _campaign(tmp_path, fail_first)
    camp = load_campaign(d)
    bad = json.loads((d / "campaign.json").read_text())["cases"][0]["id"]
    assert bad in camp.unscored and bad not in {c["id"] for c in camp.ok_cases}
    rc, out, _ = run(["crosscheck", "--data", str(d), "--json"], capsys)
    s = json.loads(out)
    assert rc == 0 and s["unscored"] == 1 and bad in s["unscored_cases"]
    assert bad not in {r["id"] for r in s["rows"]} and s["cases"] == len(camp.ok_cases)
    rc, out, _ = run(["crosscheck", "--data", str(d)], capsys)
    assert f"{bad}" in out and "not scored: values_ok is false" in out


# --- 5. wrong values are never a success ---------------------------------------------------------

class _Perturbed:
    """numpy with tanh 0.1% too large (what models.reference computes its reference with)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def tanh(x):
        return np.tanh(x) * 1.001


@pytest.fixture
def perturbed_reference(monkeypatch):
    import models.reference as ref

    monkeypatch.setattr(ref, "np", _Perturbed())


@pytest.mark.parametrize("argv", [
    ["run", "--hidden", "40", "--batch", "2", "--timesteps", "2"],
    ["simulate", "--hidden", "40", "--batch", "2", "--timesteps", "2"],
    ["timeline", "--hidden", "64", "--batch", "1", "--timesteps", "3", "--sample-steps", "2",
     "--sms", "2"],
    ["timeline", "--hidden", "64", "--batch", "1", "--timesteps", "3", "--sample-steps", "2",
     "--sms", "2", "--json"],
])
def test_perturbed_tanh_fails_every_executing_command(argv, capsys, perturbed_reference):
    refused(argv, capsys, "values differ from the float64 reference")


def test_unperturbed_commands_pass(capsys):
    rc, _, err = run(["timeline", "--hidden", "64", "--batch", "1", "--timesteps", "3",
                      "--sample-steps", "2", "--sms", "2"], capsys)
    assert rc == 0, err


def _small_programs():
    import dataclasses

    from gpusim.specs import load_spec
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    spec = dataclasses.replace(load_spec("v100"), sm_count=2)
    layer = make_layer(64, 2, 0.2, 3, 1)
    return spec, build_sparse_rnn(layer, spec, sync="lamport"), build_csr_baseline(layer)


def test_simulated_programs_are_value_checked(monkeypatch):
    """The check predict --engine sim and crosscheck make on each program they simulate
    (gpusim.pricing.price_program: every simulated step of a persistent program, the one launch
    of a CSR program)."""
    from gpusim.pricing import price_program

    spec, rnn, csr = _small_programs()
    assert price_program(rnn, spec, sample_steps=2, what="rnn").max_rel_err < 1e-5
    assert price_program(csr, spec, what="csr").max_rel_err < 1e-5
    import models.reference as ref

    monkeypatch.setattr(ref, "np", _Perturbed())
    for prog in (rnn, csr):
        with pytest.raises(ValueMismatchError, match="values differ from the float64 reference"):
            price_program(prog, spec, sample_steps=2, what="kernel")


def test_check_values_shapes_and_nan():
    ref = np.ones((3, 4, 2))
    assert check_values(ref.astype(np.float32), ref, "k") == 0.0
    with pytest.raises(ValueMismatchError, match="shape"):
        check_values(ref[:2], ref, "k")
    bad = ref.copy()
    bad[2, 0, 0] = np.nan
    with pytest.raises(ValueMismatchError, match="max_rel_err=inf"):
        check_values(bad, ref, "k")


def test_predict_engine_sim_fails_on_wrong_values(capsys, monkeypatch, perturbed_reference):
    import dataclasses

    import gpusim.specs as specs

    real = specs.load_spec
    monkeypatch.setattr(specs, "load_spec",
                        lambda name="v100": dataclasses.replace(real(name), sm_count=2))
    refused(["predict", "--hidden", "128", "--batch", "2", "--density", "0.2", "--engine",
             "sim", "--sample-steps", "2"], capsys, "values differ from the float64 reference")


def test_crosscheck_fails_on_wrong_values(tmp_path, capsys, perturbed_reference):
    d = _campaign(tmp_path, lambda data: data.update(cases=[
        c for c in data["cases"] if c["hidden"] == 256 and c["batch"] == 1][:1]),
        kinds=("csr",))
    shutil.copy(H100 / "ncu.json", d / "ncu.json")
    refused(["crosscheck", "--data", str(d)], capsys, "values differ from the float64 reference")


def test_spec_constants_are_the_kernels():
    """The spec loader's line and CTA size are the ones the engine and the kernels use."""
    from gpusim.specs import KERNEL_THREADS_PER_CTA, LINE_BYTES
    from kernels_ir.kernels.microbench import LINE_WORDS
    from kernels_ir.kernels.sparse_rnn import DEFAULT_THREADS
    from models.capacity import THREADS_PER_CTA

    assert KERNEL_THREADS_PER_CTA == THREADS_PER_CTA == DEFAULT_THREADS
    assert LINE_BYTES == 4 * LINE_WORDS
