"""The plainest Triton cast to FP8: what ``x.to(tl.float8e4nv)`` does on the GPU."""

import triton
import triton.language as tl


@triton.jit
def cast_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = x converted to y's element type (one ``cvt.rn.satfinite`` per pair on Hopper)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x.to(y_ptr.dtype.element_ty), mask=mask)
