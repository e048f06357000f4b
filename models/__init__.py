"""Float64 reference recurrences, sparse/random weights, analytical and capacity models."""

from .reference import gru_reference, lstm_reference, rnn_reference
from .sparse import Layer, prune_magnitude, random_layer, random_sparse

__all__ = ["rnn_reference", "lstm_reference", "gru_reference", "prune_magnitude",
           "random_sparse", "random_layer", "Layer"]
