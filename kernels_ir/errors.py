"""Error types shared by every layer of the project.

Every error a user can provoke with bad input derives from :class:`InputError`; its message names
the offending value and what would be accepted, so the CLI can print it as one line and exit 2.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a size, density, name, file or kernel that cannot be accepted."""


class IRError(InputError):
    """A kernel IR that is malformed (raised by the builder or the verifier)."""


class VerifyError(IRError):
    """The verifier rejected a kernel; the message names the instruction."""


class CapacityError(InputError):
    """A layer does not fit on the target (registers, shared memory, co-residency)."""


class SpecError(InputError):
    """A GPU spec file with a missing, unknown or impossible value."""


class DeadlockError(RuntimeError):
    """No warp can make progress; the message says which warps wait on what."""

    def __init__(self, message: str, waiting: list[dict] | None = None):
        super().__init__(message)
        self.waiting = waiting or []


class ValueMismatchError(RuntimeError):
    """A kernel's values differ from the float64 reference (not bad input: a wrong result, which
    no command may report as a success); the message names the kernel and the error."""


class BackendUnavailable(InputError):
    """A backend (CuPy, a GPU) is not present on this machine."""

