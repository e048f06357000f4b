"""What every host-side program around a recurrent kernel shares: the layer and its reference."""

from __future__ import annotations

import numpy as np


class LayerProgram:
    """Mixin for program records that carry a ``layer`` (a :class:`models.sparse.Layer`)."""

    layer: object

    @property
    def hidden(self) -> int:
        return self.layer.hidden

    @property
    def batch(self) -> int:
        return self.layer.batch

    @property
    def timesteps(self) -> int:
        return self.layer.timesteps

    def reference(self) -> np.ndarray:
        """float64 H (T+1, N, B) from :func:`models.reference.rnn_reference`."""
        from models.reference import rnn_reference

        return rnn_reference(self.layer.U, self.layer.x_proj, self.layer.h0)
