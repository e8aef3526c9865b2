"""A faithful FP8 cast for Triton's interpreter.

Triton 3.6's interpreter converts float32, float16 and bfloat16 to FP8 with its own bit arithmetic,
which rounds half away from zero, loses the carry when rounding bumps the exponent (124.2 becomes
64 instead of 128 in e4m3fn) and wraps out-of-range values (1000 becomes 256). On a Hopper GPU
the same ``x.to(tl.float8e4nv)`` is one ``cvt.rn.satfinite`` instruction: round to nearest even,
values beyond the format's largest finite value saturate to it, NaN stays NaN.

Its conversion of bfloat16 to float32 also loses subnormals (1e-38 reads back as 8.27e-39), its
float32 to bfloat16 conversion truncates instead of rounding to nearest even, and its float ``maximum``/``minimum`` keep NaN where the GPU's (``max.f32``, what
``tl.maximum`` compiles to unless ``propagate_nan`` is set) return the other operand.

So that the interpreter computes what the GPU computes, and tests on a CPU can demand the same
bits and catch the same NaN mistakes, this module replaces those pieces with the hardware's
semantics: conversions to and from FP8 (the interpreter's ``tl.dot`` decodes FP8 operands to
float16 with the same bit arithmetic) and from 16-bit floats to float32 go through torch's casts, and the NaN-dropping max and min become numpy's ``fmax`` and ``fmin``. Everything
else is left as it was. It is installed only in interpreter mode, by ``fp8_tutorial/__init__.py``.
"""

from __future__ import annotations

import numpy as np
import torch

# Triton's names of the two OCP FP8 formats and their torch counterparts.
_FP8 = {"fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2}
# Wider float types an FP8 value decodes into: torch type, its raw integer view, numpy's unsigned view.
_WIDE = {"fp16": (torch.float16, torch.int16, np.uint16), "bf16": (torch.bfloat16, torch.int16, np.uint16),
         "fp32": (torch.float32, torch.int32, np.uint32)}
# How the interpreter holds each source type in numpy (bfloat16 has no numpy type: raw 16 bits).
_SOURCE = {"fp32": (np.float32, None), "fp16": (np.float16, None), "bf16": (np.int16, torch.bfloat16)}


def to_fp8_satfinite(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round to nearest even into ``dtype``, saturating to its largest finite value; NaN stays NaN."""
    fmax = torch.finfo(dtype).max
    return x.float().clamp(-fmax, fmax).to(dtype)


def install() -> None:
    import warnings

    from triton.runtime import interpreter

    # NumPy's complaints about NaN and Inf arithmetic inside the interpreter say nothing about the
    # kernels (the GPU computes the same values silently); keep them out of the chapters' outputs.
    for category in (RuntimeWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module="triton.runtime.interpreter")

    original = interpreter._convert_float
    if getattr(original, "_fp8_tutorial", False):
        return

    def convert_float(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype.name in _FP8 and output_dtype.name in _WIDE:  # decoding FP8: exact in torch
            x = torch.from_numpy(np.ascontiguousarray(input).view(np.uint8)).view(_FP8[input_dtype.name])
            torch_type, raw, np_raw = _WIDE[output_dtype.name]
            return x.to(torch_type).view(raw).numpy().view(np_raw).reshape(np.shape(input))
        if input_dtype.name == "fp32" and output_dtype.name == "bf16":  # round to nearest even, as the GPU
            x = torch.from_numpy(np.ascontiguousarray(input).view(np.float32))
            return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).reshape(np.shape(input))
        target = _FP8.get(output_dtype.name)
        source = _SOURCE.get(input_dtype.name)
        widening = input_dtype.name in ("bf16", "fp16") and output_dtype.name == "fp32"
        if source is None or (target is None and not widening):
            return original(input, input_dtype, output_dtype, rounding_mode)
        np_type, torch_view = source
        x = torch.from_numpy(np.ascontiguousarray(input).view(np_type))
        if torch_view is not None:
            x = x.view(torch_view)
        if widening:  # exact in torch
            return x.float().view(torch.int32).numpy().view(np.uint32).reshape(np.shape(input))
        out = to_fp8_satfinite(x, target).view(torch.uint8).numpy()
        return out.reshape(np.shape(input))

    convert_float._fp8_tutorial = True
    interpreter._convert_float = convert_float
    builder = interpreter.InterpreterBuilder
    builder.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)
    builder.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
