"""gpusim: a cycle-approximate GPU model for persistent sparse RNN kernels.

Kept light on purpose: importing ``gpusim`` (or ``gpusim.specs``) does not import the simulator
engine, so ``models`` can read specs while staying an independent witness of the simulator.
"""

__version__ = "0.1.0"
