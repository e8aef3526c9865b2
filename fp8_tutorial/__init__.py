"""fp8_tutorial: FP8 matrix multiplication on NVIDIA Hopper with Triton, the package behind the book.

The execution mode is decided first, on import (see ``_env``), because Triton reads
``TRITON_INTERPRET`` when a kernel is defined.
"""

from ._env import DEVICE, MODE, ON_GPU, Environment, environment  # noqa: I001  (must come first)

if MODE == "interpreter":
    from . import _interpreter

    _interpreter.install()

from .quant import FP8_MAX, GRANULARITIES, dequantize, quantize  # noqa: E402
from .gemm import scaled_mm  # noqa: E402

# What measures the kernels (``fp8_tutorial.measure``) and checks them (``checks``) is loaded on
# first use only: a model that calls ``scaled_mm`` imports none of it, but for the timing harness
# (``measure.bench``) on a GPU, where the first call of a problem times its candidates.
_LAZY = {"benchmark": "measure.bench", "copy_bandwidth": "measure.bench", "copy_contender": "measure.bench",
         "Record": "measure.bench", "NoGPUError": "measure.bench",
         "api_benchmark": "measure.bench", "ApiRecord": "measure.bench",
         "poison": "checks", "reference_mm": "checks", "rel_error": "checks",
         "show_source": "show"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'fp8_tutorial' has no attribute {name!r}")


__all__ = [
    "DEVICE", "MODE", "ON_GPU", "Environment", "environment",
    "FP8_MAX", "GRANULARITIES", "quantize", "dequantize", "scaled_mm",
    "rel_error", "reference_mm", "poison",
    "benchmark", "copy_bandwidth", "copy_contender", "Record", "NoGPUError", "api_benchmark", "ApiRecord",
    "show_source",
]
