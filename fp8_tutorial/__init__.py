"""fp8_tutorial: FP8 matrix multiplication on NVIDIA Hopper with Triton, the package behind the book.

The execution mode is decided first, on import (see ``_env``), because Triton reads
``TRITON_INTERPRET`` when a kernel is defined.
"""

from ._env import DEVICE, MODE, ON_GPU, Environment, environment  # noqa: I001  (must come first)

if MODE == "interpreter":
    from . import _interpreter

    _interpreter.install()

from .bench import NoGPUError, Record, benchmark, copy_bandwidth, copy_contender  # noqa: E402
from .checks import poison, reference_mm, rel_error  # noqa: E402
from .quant import FP8_MAX, GRANULARITIES, dequantize, quantize  # noqa: E402
from .gemm import scaled_mm  # noqa: E402

__all__ = [
    "DEVICE", "MODE", "ON_GPU", "Environment", "environment",
    "FP8_MAX", "GRANULARITIES", "quantize", "dequantize", "scaled_mm",
    "rel_error", "reference_mm", "poison",
    "benchmark", "copy_bandwidth", "copy_contender", "Record", "NoGPUError",
]
