"""A GEMM whose promotion interval is a parameter: the measuring instrument of chapter 10.

Hopper's FP8 ``wgmma`` adds its products into the accumulator with fewer bits than float32 keeps.
``interval_kernel`` lets the tensor cores sum EVERY blocks of K at a time (``common.accumulate_k``
with fast accumulation, so one ``wgmma`` adds onto the last) and adds each such sum into a float32
accumulator held in registers, which is what "promoting" means; EVERY = 0 never promotes (fast
accumulation over the whole K loop). The interval in values of K is EVERY x BLOCK_K: BLOCK_K = 32
is one ``wgmma`` instruction, so EVERY = 1 with it promotes after every instruction.

It is written to be read and measured, not to be fast: one program per tile, no pipelining tricks.
Triton's interpreter computes the products exactly, so there every interval gives the same result;
only a GPU shows the difference.
"""

import torch
import triton
import triton.language as tl

from .common import accumulate_k, scale_epilogue
from .host import Operands, pointer_safe

# The intervals chapter 10 measures, as (BLOCK_K, EVERY): the promotion interval is their product.
INTERVALS = {32: (32, 1), 128: (128, 1), 256: (128, 2), 512: (128, 4), 1024: (128, 8)}


@triton.jit
def interval_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    ROW_A: tl.constexpr, ROW_B: tl.constexpr, EVERY: tl.constexpr):
    """One tile of C = scale(A @ B), the tensor cores' sums promoted to float32 every EVERY blocks
    of BLOCK_K (EVERY = 0: never)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    if EVERY == 0:  # fast accumulation: one sum in the tensor cores over all of K
        acc = accumulate_k(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                           0, k_blocks, BLOCK_M, BLOCK_N, BLOCK_K, False, False)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for first in range(0, k_blocks, EVERY):
            # a fresh sum in the tensor cores over EVERY blocks, added into acc on the CUDA cores
            acc += accumulate_k(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                first, tl.minimum(first + EVERY, k_blocks), BLOCK_M, BLOCK_N, BLOCK_K, False, False)
    acc = scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


def launch_interval(ops: Operands, out: torch.Tensor, interval: int | None) -> torch.Tensor:
    """``interval_kernel`` on checked operands (``gemm.check_operands``, per-tensor or per-row
    scales) into ``out``: the tensor cores' sums promoted every ``interval`` values of K (one of
    ``INTERVALS``), or never (None: fast accumulation)."""
    if interval is not None and interval not in INTERVALS:
        raise ValueError(f"interval must be None (never promote) or one of {sorted(INTERVALS)} values of K, "
                         f"got {interval!r}")
    flags = ops.flags(False)
    block_k, every = (128, 0) if interval is None else INTERVALS[interval]
    if not out.is_cuda:  # the interpreter: small tiles (its cost grows with them); the sums are exact anyway
        block_m = block_n = 32
    else:
        block_m = block_n = 64
    ops, target = pointer_safe(ops, out)
    M, N, K = ops.M, ops.N, ops.K
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    interval_kernel[grid](ops.a, ops.b, target, *ops.packed_scales, M, N, K,
                          ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1),
                          target.stride(0), target.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                          ROW_A=flags["ROW_A"], ROW_B=flags["ROW_B"], EVERY=every, num_warps=4, num_stages=2)
    if target is not out:
        out.copy_(target)
    return out
