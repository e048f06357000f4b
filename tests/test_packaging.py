"""What ``pip install .`` installs: every package, the recorded data the package reads, the
license, and extras that match the recorded runs (the full walk through the README from an
installed wheel is ``tests/test_readme_walkthrough.py``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import gpusim.data as data
from kernels_ir.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
DATA_PACKAGES = {f"gpusim.data.{gpu}": f"measurements/{gpu}" for gpu in ("h100", "h200")}


def _source_packages() -> set[str]:
    found = set()
    for top in ("kernels_ir", "gpusim", "models"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_every_source_package_is_installed():
    """The package list is written by hand (for the data mapping): it must not miss one."""
    listed = set(SETUPTOOLS["packages"])
    assert listed - set(DATA_PACKAGES) == _source_packages()


def test_the_recorded_data_is_mapped_onto_measurements():
    assert SETUPTOOLS["package-dir"] == DATA_PACKAGES
    for package, folder in DATA_PACKAGES.items():
        assert (ROOT / folder / "campaign.json").is_file(), folder
        fresh = data.FRESH_RECORDS if any((ROOT / folder).glob("fresh_*")) else ()
        assert sorted(SETUPTOOLS["package-data"][package]) == sorted(data.RECORDS + fresh), \
            package


def test_the_files_the_package_reads_are_records():
    """crosscheck reads campaign/microbench/ncu; calibrate microbench, l2_partition,
    library_profile, library_sweep (gpusim/calibrate.py names them)."""
    import gpusim.calibrate as calibrate

    source = (ROOT / "gpusim" / "calibrate.py").read_text()
    read = {"campaign.json", "microbench.json", "ncu.json", *calibrate.EXTRA_RECORDS}
    read |= {name for name in ("library_profile.json", "library_sweep.json") if name in source}
    assert read <= set(data.RECORDS), read - set(data.RECORDS)


def test_measurement_dir_prefers_the_checkout():
    assert data.measurement_dir("h100") == ROOT / "measurements" / "h100"
    assert data.measurement_dir("H200") == ROOT / "measurements" / "h200"
    assert set(data.available_gpus()) >= {"h100", "h200"}


def test_measurement_dir_falls_back_to_the_installed_copy(tmp_path, monkeypatch):
    installed = tmp_path / "site" / "gpusim" / "data"
    (installed / "h100").mkdir(parents=True)
    (installed / "h100" / "campaign.json").write_text("{}")
    monkeypatch.setattr(data, "CHECKOUT_DIR", tmp_path / "no_checkout" / "measurements")
    monkeypatch.setattr(data, "PACKAGE_DIR", installed)
    assert data.measurement_dir("h100") == installed / "h100"
    with pytest.raises(InputError, match="gpu='v100'; accepted: h100"):
        data.measurement_dir("v100")


def test_measurement_dir_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CHECKOUT_DIR", tmp_path / "a" / "measurements")
    monkeypatch.setattr(data, "PACKAGE_DIR", tmp_path / "b")
    with pytest.raises(InputError) as err:
        data.measurement_dir("h100")
    text = str(err.value)
    assert str(tmp_path / "a" / "measurements" / "h100") in text
    assert str(tmp_path / "b" / "h100") in text and "--data" in text
    # the default of a command must not raise at import time
    assert data.measurement_dir("h100", required=False) == tmp_path / "b" / "h100"


def test_crosscheck_default_data_is_resolved():
    from gpusim.cli import crosscheck

    assert crosscheck.DEFAULT_DATA == data.measurement_dir("h100")


def test_license_is_the_full_apache_text():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    for part in ("Apache License", "Version 2.0, January 2004",
                 "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
                 "2. Grant of Copyright License.", "3. Grant of Patent License.",
                 "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS"):
        assert part in text, part
    assert len(text) > 10_000


def test_extras_match_the_recorded_runs():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["gpu"] == ["cupy-cuda13x>=14"]   # the campaigns ran CuPy 14.2 on CUDA 13
    names = {r.split(">")[0].split("=")[0].split("[")[0] for r in extras["notebooks"]}
    assert {"jupyterlab", "jupytext", "nbclient", "ipykernel"} <= names
    readme = (ROOT / "README.md").read_text()
    assert ".[gpu]" in readme and "cupy-cuda13x" in readme and ".[notebooks]" in readme
