"""Triton kernels, one module per family."""
