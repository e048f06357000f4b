"""Result records of the timing model (immutable; ``to_json`` gives the CLI's JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["SimResult", "CATEGORIES"]

# Breakdown categories: where a warp's time between two issues went (see timing.py).
CATEGORIES = ("issue", "shared_memory", "waiting_for_data", "barrier")


@dataclass(frozen=True, slots=True, eq=False)
class SimResult:
    """Cycles and counters of one simulated launch.

    ``cycles``: total cycles of the launch (extrapolated to ``total_steps`` when
    ``sample_steps`` was used; ``simulated_cycles`` is what was simulated). ``time_s`` =
    ``cycles / clock_hz + launch_overhead_s`` (one launch). ``per_step_s``: mean step time (over
    the steady state, see timing.steady_step_cycles, when extrapolating).
    ``step_cycles``: duration of each simulated step (the latest SM's end of step k minus that of
    step k-1). ``breakdown``: cycles per category (:data:`CATEGORIES`) summed over warps, as
    ``{"total": {...}, "per_step": [{...}], "per_sm": [{...}]}``, divided by the warps per SM so
    that one SM's categories add up to about its busy time. ``timeline``: per step and SM
    ``(start_cycle, end_cycle, {category: cycles})``.
    """

    gpu: str
    kernel: str
    cycles: float
    simulated_cycles: float
    time_s: float
    per_step_s: float
    steps: int
    total_steps: int
    step_cycles: tuple[float, ...]
    breakdown: dict
    smem_wavefronts: dict
    bank_conflicts: dict
    l2_transactions: dict
    warp_instructions: int
    timeline: tuple
    clock_hz: float
    launch_overhead_s: float
    max_rel_err: float | None = None
    globals: dict = field(default_factory=dict, repr=False)

    @property
    def extrapolated(self) -> bool:
        return self.steps != self.total_steps

    def with_error(self, err: float) -> SimResult:
        return replace(self, max_rel_err=float(err))

    def to_json(self, timeline: bool = False) -> dict:
        out = {
            "gpu": self.gpu, "kernel": self.kernel, "cycles": self.cycles,
            "simulated_cycles": self.simulated_cycles, "time_s": self.time_s,
            "per_step_s": self.per_step_s, "steps": self.steps,
            "total_steps": self.total_steps, "extrapolated": self.extrapolated,
            "step_cycles": list(self.step_cycles), "breakdown": self.breakdown,
            "smem_wavefronts": self.smem_wavefronts, "bank_conflicts": self.bank_conflicts,
            "l2_transactions": self.l2_transactions,
            "warp_instructions": self.warp_instructions, "max_rel_err": self.max_rel_err,
        }
        if timeline:
            out["timeline"] = [[{"start": s, "end": e, **b} for s, e, b in step]
                               for step in self.timeline]
        return _plain(out)


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    return x
