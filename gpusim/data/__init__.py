"""Where the recorded GPU measurements are, in a source checkout and in an installed package.

The measurements are recorded under ``measurements/<gpu>/`` of the repository (written by
``measurements/campaign.py`` and its companions; ``measurements/README.md`` describes them). A
source checkout reads them there. A wheel (``pip install .``) carries the files that the package
itself reads, :data:`RECORDS`, as package data in ``gpusim/data/<gpu>/`` (``pyproject.toml``
maps those package folders onto ``measurements/<gpu>/``), so ``gpusim crosscheck`` and
``python -m gpusim.calibrate`` work without the checkout. The raw profiler exports, the PC
samples and the ``archive_*`` folders stay in the repository only.

:func:`measurement_dir` looks in the checkout first, then in the installed package data.
"""

from __future__ import annotations

from pathlib import Path

from kernels_ir.errors import InputError

__all__ = ["RECORDS", "measurement_dir", "available_gpus", "CHECKOUT_DIR", "PACKAGE_DIR"]

# The measurement files the package reads (crosscheck: campaign, microbench, ncu; calibrate:
# microbench, l2_partition, pipes, fence, stage_bar, library_profile, library_sweep; calibration:
# the last fit's report).
RECORDS = ("campaign.json", "microbench.json", "ncu.json", "calibration.json",
           "l2_partition.json", "pipes.json", "fence.json", "stage_bar.json",
           "library_profile.json", "library_sweep.json")
# the fresh draws (gpusim.samples: out-of-sample evidence) that crosscheck reads too
# (kept xz-compressed in the repository: measurements/README.md, "Files")
FRESH_RECORDS = ("fresh_*/campaign.json", "fresh_*/ncu.json", "fresh_*/campaign.json.gz",
                 "fresh_*/ncu.json.gz", "fresh_*/campaign.json.xz", "fresh_*/ncu.json.xz")
# ``measurements/`` of a source checkout (next to the ``gpusim`` package folder)
CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "measurements"
# the installed copy: ``gpusim/data/<gpu>/``
PACKAGE_DIR = Path(__file__).resolve().parent


def _recorded(root: Path) -> list[str]:
    """GPU folders under ``root`` that hold a campaign."""
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/campaign.json"))


def available_gpus() -> list[str]:
    """Names of the GPUs with recorded measurements (checkout or installed), e.g. h100, h200."""
    return sorted(set(_recorded(CHECKOUT_DIR)) | set(_recorded(PACKAGE_DIR)))


def measurement_dir(gpu: str = "h100", *, required: bool = True) -> Path:
    """The folder of ``gpu``'s recorded measurements (``campaign.json``, ``microbench.json``,
    ``ncu.json``, ...).

    The checkout's ``measurements/<gpu>`` wins; otherwise the copy installed with the package.
    With neither, :class:`InputError` names both places and how to get the data (with
    ``required=False`` the installed location is returned instead, for a default value that must
    not raise when a module is imported).
    """
    name = str(gpu).strip().lower()
    for root in (CHECKOUT_DIR, PACKAGE_DIR):
        d = root / name
        if (d / "campaign.json").is_file():
            return d
    if not required:
        return PACKAGE_DIR / name
    known = available_gpus()
    if known:
        raise InputError(f"no recorded measurements for gpu={gpu!r}; accepted: "
                         f"{', '.join(known)} (or pass a measurement folder with --data)")
    raise InputError(f"no recorded measurements found: neither {CHECKOUT_DIR / name} (a source "
                     f"checkout) nor {PACKAGE_DIR / name} (installed package data) holds "
                     f"campaign.json; install the package from a checkout of the repository "
                     f"(pip install .) or pass a measurement folder with --data")
