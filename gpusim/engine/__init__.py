"""The simulator engine: functional executor (values) and timing model (cycles).

Public surface:
- :func:`execute` -> :class:`ExecResult`: functional run of a kernel over all CTAs/warps/lanes;
- :func:`register_estimate`, :func:`residency`: registers per thread and co-resident CTAs;
- :data:`SEMANTICS`: the per-op numpy table that defines what every IR op computes.
The timing model (:func:`simulate`) is imported lazily so that a functional run stays light.
"""

from .executor import ExecResult, execute
from .residency import Residency, check_launch, register_estimate, residency
from .semantics import SEMANTICS

__all__ = ["execute", "ExecResult", "register_estimate", "residency", "Residency",
           "check_launch", "SEMANTICS", "simulate", "SimResult"]


def __getattr__(name: str):
    if name in ("simulate", "SimResult"):
        from . import timing

        return getattr(timing, name)
    raise AttributeError(name)
