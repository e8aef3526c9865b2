"""Triton helpers shared by the GEMM kernels: the grouped tile order and the scale epilogue."""

import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile ``tile_id`` in grouped order.

    Tiles are numbered down columns of GROUP_M tile-rows at a time, so that consecutive programs
    share the same few row-blocks of A and walk along B: fewer distinct tiles in flight, more L2 hits.
    """
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    group = tile_id // per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % per_group) % group_rows
    pid_n = (tile_id % per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N,
                   ROW_A: tl.constexpr, ROW_B: tl.constexpr):
    """Multiply an fp32 tile by its dequantization scales: one per tensor, or one per row of A
    (``rows``) and per column of the output (``cols``, the rows of the (N, K) weight)."""
    if ROW_A:
        sa = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
        acc = acc * sa[:, None]
    else:
        acc = acc * tl.load(scale_a_ptr)
    if ROW_B:
        sb = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
        acc = acc * sb[None, :]
    else:
        acc = acc * tl.load(scale_b_ptr)
    return acc
