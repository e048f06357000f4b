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
        """float64 H (T+1, N, B) from :func:`models.reference.rnn_reference` (the layer's
        cell: :func:`~models.reference.lstm_reference` with c0 = 0, whose H it keeps, or
        :func:`~models.reference.gru_reference`)."""
        from models.reference import gru_reference, lstm_reference, rnn_reference

        cell = getattr(self.layer, "cell", "rnn")
        if cell == "lstm":
            return lstm_reference(self.layer.U, self.layer.x_proj, self.layer.h0)[0]
        if cell == "gru":
            return gru_reference(self.layer.U, self.layer.x_proj, self.layer.h0)
        return rnn_reference(self.layer.U, self.layer.x_proj, self.layer.h0)
