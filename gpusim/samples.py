"""Which recorded measurements are in sample and which are out of sample.

A GPU's measurement directory (``measurements/h100``) holds its campaign (``campaign.json``: the
layers the project's mechanisms were developed and judged on) and any number of fresh draws
(``fresh_<date>_s<seed>/campaign.json``, written by ``measurements/campaign.py --fresh N --seed
S``: random layers no earlier file held). A fresh draw records the fingerprint of the model at the
time it was measured (:func:`gpusim.measurements.model_fingerprint`).

- **out of sample**: a fresh draw whose recorded fingerprint equals today's model for its GPU:
  nothing in the model that prices that GPU has changed since it was measured, so it cannot
  have guided any change (a draw records ``model_fingerprint(gpu=...)`` and its
  ``fingerprint_gpu``; draws measured before the fingerprint was per GPU recorded the one of
  every spec, read through :func:`gpusim.measurements.fingerprint_is_current`);
- **in sample**: the campaign, and every fresh draw measured before the last model change (it may
  have been looked at while the model was changed).

The label is computed, never declared, so a draw moves to in sample by itself as soon as the
model changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernels_ir.errors import InputError

__all__ = ["Draw", "draws", "IN_SAMPLE", "OUT_OF_SAMPLE", "family"]

IN_SAMPLE = "in sample"
OUT_OF_SAMPLE = "out of sample"


@dataclass(frozen=True, slots=True)
class Draw:
    path: Path
    name: str            # "campaign" or the fresh directory's name
    sample: str          # IN_SAMPLE or OUT_OF_SAMPLE
    why: str             # the reason for the label
    fresh: dict | None   # the campaign.json "fresh" record (None for the campaign)


def _fresh_record(path: Path) -> tuple[dict | None, str]:
    """The campaign file's ``fresh`` record and the spec name of the GPU that measured it."""
    from gpusim.measurements import load_json, spec_name_for_gpu
    from gpusim.specs import available

    data = load_json(path / "campaign.json")
    fresh = data.get("fresh")
    if fresh is not None and not (isinstance(fresh, dict) and
                                  isinstance(fresh.get("model_fingerprint"), str)):
        raise InputError(f"measurement file {path / 'campaign.json'}: 'fresh' must be an object "
                         f"with a model_fingerprint string")
    scope = fresh.get("fingerprint_gpu") if fresh is not None else None
    if scope is not None and scope not in available():
        raise InputError(f"measurement file {path / 'campaign.json'}: fresh.fingerprint_gpu="
                         f"{scope!r} is not a GPU spec; accepted: {', '.join(available())}")
    return fresh, spec_name_for_gpu(data["provenance"]["gpu_name"])


def draws(data: Path | str, *, include_fresh: bool = True, fingerprint: str | None = None
          ) -> list[Draw]:
    """The campaign directories under ``data`` with their sample labels.

    ``data`` is a campaign directory (``campaign.json``); its ``fresh_*`` subdirectories are the
    fresh draws (left out with ``include_fresh=False``). A directory that is itself a fresh draw
    is labelled by its fingerprint. ``fingerprint``: compare every draw's recorded fingerprint
    with this one instead of today's model's.
    """
    from gpusim.measurements import fingerprint_is_current, record_exists

    d = Path(data)
    if not d.is_dir():
        raise InputError(f"measurement directory {d} does not exist")
    paths = [d] if record_exists(d / "campaign.json") else []
    if include_fresh:
        paths += sorted(p for p in d.glob("fresh_*") if record_exists(p / "campaign.json"))
    if not paths:
        raise InputError(f"measurement directory {d} has no campaign.json and no fresh_*/ "
                         f"draws")
    out = []
    for p in paths:
        fresh, gpu = _fresh_record(p)
        name = "campaign" if p == d and fresh is None else p.name
        if fresh is None:
            out.append(Draw(p, name, IN_SAMPLE, "the campaign the mechanisms were judged on",
                            None))
        elif (fresh["model_fingerprint"] == fingerprint if fingerprint else
              fingerprint_is_current(fresh["model_fingerprint"], fresh.get("fingerprint_gpu"),
                                     gpu)):
            out.append(Draw(p, name, OUT_OF_SAMPLE,
                            "measured with today's model (no model change since)", fresh))
        else:
            out.append(Draw(p, name, IN_SAMPLE, "the model changed after it was measured",
                            fresh))
    return out


def family(case: dict) -> str:
    """The kernel family of a recorded case, as the error bands are kept."""
    kind = case["kind"]
    if kind == "sparse_persistent":
        return f"sparse {case['sync']}"
    if kind == "dense_persistent":
        return "dense persistent"
    return {"csr": "csr-row-per-warp"}.get(kind, kind)
