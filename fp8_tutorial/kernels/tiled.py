"""A tiled FP8 GEMM: one program per output tile, pointers and masks, any M, N, K >= 1.

C = (A @ B) * scales, A (M, K) and B (K, N) in FP8. B is read in (BLOCK_N, BLOCK_K) tiles, K-major,
the layout Hopper's FP8 wgmma wants for both operands, and ``tl.dot(a, b.T)`` multiplies them.
"""

import triton
import triton.language as tl

from .common import accumulate_k, grouped_tile, scale_epilogue


@triton.jit
def tiled_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr, EVEN_K: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
):
    """C[M, N] = scale(A[M, K] @ B[K, N]), accumulated in fp32, stored in C's dtype.

    Rows of A and columns of B past the edge are read wrapped around (``% M``, ``% N``) rather than
    masked, and their results are never stored; K is masked unless EVEN_K. PRECISE promotes the
    tensor cores' partial sums to fp32 after every BLOCK_K step (like cuBLAS without fast
    accumulation); otherwise they accumulate in the tensor cores' own precision across the K loop.

    With SPLIT_K > 1 the grid's second axis splits the K loop: each program takes an equal share
    of the K blocks and adds its scaled partial tile into C atomically, so C must be float32 and
    zeroed before the launch.
    """
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    k_first, k_last = 0, tl.cdiv(K, BLOCK_K)
    if SPLIT_K > 1:  # this program's share of the K blocks
        k_first, k_last = tl.program_id(1) * k_last // SPLIT_K, (tl.program_id(1) + 1) * k_last // SPLIT_K
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = accumulate_k(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       k_first, k_last, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K)

    acc = scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    in_c = (rows < M)[:, None] & (cols < N)[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_c)
    else:
        tl.atomic_add(c_ptrs, acc, mask=in_c, sem="relaxed")
