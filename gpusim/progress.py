"""Progress bars on stderr, through tqdm: one place that decides how they look.

``bar(...)`` returns a ``tqdm`` bar, or a do-nothing stand-in when disabled (tqdm is then not even
imported, so a quiet run pays nothing for it).
"""

from __future__ import annotations

import sys

__all__ = ["bar", "step_callback"]


class _Quiet:
    """The subset of tqdm's interface the package uses, doing nothing."""

    n = 0
    total = None

    def __init__(self, iterable=None):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n: int = 1) -> None:
        self.n += n

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def bar(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it",
        enabled: bool = True, stream=None):
    """A progress bar over ``iterable`` (or updated by hand up to ``total``) on ``stream``
    (default stderr); a silent stand-in when ``enabled`` is false."""
    if not enabled:
        return _Quiet(iterable)
    from tqdm import tqdm  # the text bar everywhere (tqdm.auto wants ipywidgets in Jupyter)

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=stream or sys.stderr,
                dynamic_ncols=True, leave=True)


def step_callback(desc: str = "simulating", unit: str = "step", stream=None):
    """A ``callback(done, total)`` that draws a bar, for code that reports progress as counts
    (the simulator's time loop); the bar closes when ``done`` reaches ``total``."""
    state: dict = {}

    def show(done: int, total: int) -> None:
        b = state.get("bar")
        if b is None:
            b = state["bar"] = bar(total=total, desc=desc, unit=unit, stream=stream)
        if b.total != total:
            b.total = total
        b.update(max(0, done - b.n))
        if done >= total:
            b.close()
            state.pop("bar")
    return show
