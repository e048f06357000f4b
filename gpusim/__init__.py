"""gpusim: a cycle-approximate GPU model for persistent sparse RNN kernels.

The public Python API (the same code paths as the ``gpusim`` commands; see docs/API.md)::

    import gpusim
    p = gpusim.predict(gpu="v100", hidden=2304, batch=4, density=0.1)
    p.speedup, p.to_frame()

:func:`predict`, :func:`simulate`, :func:`capacity`, :func:`banks` and :func:`crosscheck` each
return a frozen record with ``to_dict()`` (the command's ``--json``) and, where the answer is a
table, ``to_frame()`` (a pandas DataFrame). They live in :mod:`gpusim.api`.

Kept light on purpose: importing ``gpusim`` (or ``gpusim.specs``) imports neither the API's
dependencies nor the simulator engine (the names above are resolved on first use), so ``models``
can read specs while staying an independent witness of the simulator.
"""

from __future__ import annotations

__all__ = ["predict", "simulate", "capacity", "banks", "crosscheck", "__version__"]

_API = ("predict", "simulate", "capacity", "banks", "crosscheck", "Prediction", "Simulation",
        "Capacity", "CapacityRow", "BankAnalysis", "LayoutResult", "CrossCheck")


def _version() -> str:
    """The installed distribution's version, else the one in the source tree's pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("gpusim-prnn")
    except metadata.PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        with pyproject.open("rb") as fh:
            return str(tomllib.load(fh)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def __getattr__(name: str):
    if name == "__version__":
        value = _version()
        globals()["__version__"] = value
        return value
    if name in _API:
        from gpusim import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpusim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API) | {"__version__"})
