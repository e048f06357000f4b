"""A newcomer's first hour: the README's commands, run from a non-editable install.

The checkout's package files are copied to a temporary folder, built into a wheel and installed
into a fresh virtual environment without its dependencies; numpy, scipy, matplotlib and networkx
come from the environment running the tests (its site-packages folders are appended to the new
environment's path by a ``.pth`` file, after the wheel's own folder; ``.pth`` files of those
folders, such as an editable install of this checkout, are not processed). Every
command of the README's tour then runs through that environment's ``gpusim`` script from a
folder outside the checkout, with small sizes, and must exit 0 and print what the README says
it prints. This is what ``pip install .`` followed by the README gives a user: a file that only
the checkout has (the recorded measurements, the specs) makes it fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ("pyproject.toml", "README.md", "LICENSE")
PACKAGE_DIRS = ("kernels_ir", "gpusim", "models")

pytestmark = pytest.mark.slow


def _copy_sources(dst: Path) -> None:
    """The files a wheel is built from: the packages, the project files, the recorded data."""
    for name in PACKAGED:
        shutil.copy2(ROOT / name, dst / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGE_DIRS:
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    for gpu_dir in sorted((ROOT / "measurements").iterdir()):
        if gpu_dir.is_dir() and (gpu_dir / "campaign.json").is_file():
            (dst / "measurements" / gpu_dir.name).mkdir(parents=True)
            for f in gpu_dir.glob("*.json"):
                shutil.copy2(f, dst / "measurements" / gpu_dir.name / f.name)


def _run(cmd: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A venv with the wheel of this checkout; the folder the commands run in."""
    base = tmp_path_factory.mktemp("walkthrough")
    src, wheels, venv, work = (base / "src", base / "wheels", base / "venv", base / "work")
    for d in (src, wheels, work):
        d.mkdir()
    _copy_sources(src)
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "-q", "-w", str(wheels), str(src)], cwd=base)
    if build.returncode != 0:   # no setuptools/wheel here: let pip fetch the build backend
        build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                      str(wheels), str(src)], cwd=base)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next(wheels.glob("gpusim_prnn-*.whl"))
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    own = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=base).stdout.strip()
    parents = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")
               and Path(p).is_dir()]
    (Path(own) / "zz_test_environment.pth").write_text("\n".join(parents) + "\n")
    inst = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                 "--no-index", str(wheel)], cwd=base)
    if inst.returncode != 0:   # a pip without --python: the parent pip is visible through .pth
        inst = _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                     str(wheel)], cwd=base)
    assert inst.returncode == 0, inst.stderr[-3000:]
    where = _run([str(py), "-c", "import gpusim, gpusim.data as d; print(gpusim.__file__); "
                  "print(d.measurement_dir('h100'))"], cwd=work)
    assert where.returncode == 0, where.stderr
    pkg, data = where.stdout.split()
    assert Path(pkg).is_relative_to(venv), f"gpusim imported from {pkg}, not the installed wheel"
    assert Path(data).is_relative_to(venv), f"measurements read from {data}, not the package"
    return {"gpusim": str(venv / "bin" / "gpusim"), "python": str(py), "work": work}


# (README command with small sizes, texts its output must contain, files it must write)
COMMANDS = [
    ("predict --gpu v100 --hidden 2304 --batch 4 --density 0.1",
     ["per step us", "sparse-lamport", "cublas", "cusparse", "csr-row-per-warp", "fits",
      "best persistent:", "speedup"], []),
    ("predict --gpu v100 --hidden 256 --batch 4 --density 0.1 --engine sim",
     ["sparse-lamport", "best persistent:", "speedup"], []),
    ("predict --gpu v100 --hidden 2304 --batch 4 --density 0.1 --cell lstm --json",
     ['"speedup"'], []),
    ("capacity --gpu v100 --density 0.01 0.1 0.3",
     ["binding limit", "registers", "dense"], []),
    ("sweep --gpu v100,h100 --hidden 256:1024:256 --density 0.01,0.1 --batch 4 "
     "--csv out.csv --png speedup.png --no-progress",
     ["configurations"], ["out.csv", "speedup.png"]),
    ("run --hidden 256 --batch 4 --density 0.1 --timesteps 4 --sync lamport --wide-loads",
     ["max_rel_err"], []),
    ("ir --hidden 100 --batch 4 --density 0.3 --timesteps 2",
     ["kernel sparse_rnn", "meta hidden = 100"], []),
    ("mapping --hidden 256 --density 0.1 --plot mapping.png", ["wrote mapping.png"],
     ["mapping.png"]),
    ("simulate --hidden 256 --batch 4 --density 0.3 --timesteps 8 --sample-steps 4 "
     "--layout optimal --plot timeline.png",
     ["breakdown per SM", "bank conflicts", "max_rel_err"], ["timeline.png"]),
    ("timeline --hidden 256 --density 0.1 --timesteps 4 --sample-steps 2 --plot sync.png",
     ["lamport", "barrier", "wrote sync.png"], ["sync.png"]),
    ("specs", ["v100", "h100", "h200"], []),
    ("specs --gpu h100", ["evidence: [D] documented", "docs/hardware_sources.md", "sm_count"], []),
    ("banks --hidden 512 --density 0.3 --batch 4 --wide-loads --layout all --plot banks.png",
     ["naive", "random", "greedy", "optimal", "wrote banks.png"], ["banks.png"]),
    ("crosscheck --every 30 --plot crosscheck.png",
     ["cases on NVIDIA H100", "MAPE", "Spearman", "bank conflicts"], ["crosscheck.png"]),
]


def test_the_readme_lists_these_commands():
    """Each command tested here is one the README shows (same subcommand and first options)."""
    readme = (ROOT / "README.md").read_text()
    for argv, _, _ in COMMANDS:
        words = argv.split()
        assert f"gpusim {words[0]}" in readme, words[0]


@pytest.mark.parametrize("argv,expect,files", COMMANDS, ids=[c[0].split()[0] + str(i)
                                                            for i, c in enumerate(COMMANDS)])
def test_readme_command_from_the_installed_wheel(installed, argv, expect, files):
    work = installed["work"]
    t0 = time.perf_counter()
    proc = _run([installed["gpusim"], *argv.split()], cwd=work)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, f"gpusim {argv} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    out = proc.stdout
    missing = [e for e in expect if e not in out]
    assert not missing, f"gpusim {argv}: output lacks {missing}:\n{out[-2000:]}"
    for f in files:
        path = work / f
        assert path.is_file() and path.stat().st_size > 1000, f"gpusim {argv} did not write {f}"
    assert seconds < 120, f"gpusim {argv} took {seconds:.0f} s"


def test_calibrate_reads_the_installed_records(installed):
    """``python -m gpusim.calibrate`` finds its default records in the installed package."""
    proc = _run([installed["python"], "-m", "gpusim.calibrate", "--help"], cwd=installed["work"])
    assert proc.returncode == 0 and "--data" in proc.stdout, proc.stderr
    code = ("from gpusim.data import measurement_dir, RECORDS; d = measurement_dir('h100'); "
            "print(sorted(p.name for p in d.iterdir() if p.suffix == '.json'))")
    proc = _run([installed["python"], "-c", code], cwd=installed["work"])
    assert proc.returncode == 0, proc.stderr
    for name in ("microbench.json", "l2_partition.json", "library_sweep.json",
                 "library_profile.json"):
        assert name in proc.stdout
