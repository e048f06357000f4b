"""Kernels written in the IR: persistent RNNs, the CSR baseline, microbenchmarks."""

from .sparse_rnn import RNNProgram, build_dense_rnn, build_sparse_rnn, make_layer, max_rel_err

__all__ = ["RNNProgram", "build_sparse_rnn", "build_dense_rnn", "make_layer", "max_rel_err"]
