"""Triton helpers shared by the GEMM kernels: the grouped tile order, the K loops (through pointers
or through TMA descriptors) and the scale epilogue."""

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
def operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, TMA: tl.constexpr):
    """What a K loop reads A (M, K) and W (N, K) from: with TMA, device-side descriptors of the two
    K-major tensors with boxes of one K step of the tile (for ``accumulate_k_tma``); otherwise the
    pointers themselves (for ``accumulate_k``)."""
    if TMA:
        return (tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]),
                tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K]))
    else:
        return a_ptr, b_ptr


@triton.jit
def scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N,
                   ROW_A: tl.constexpr, ROW_B: tl.constexpr):
    """Multiply an fp32 tile by its dequantization scales: one per tensor, or one per row of A
    (``rows``) and per column of the output (``cols``, the rows of the (N, K) weight)."""
    sa, sb = load_scales(scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
    return apply_scales(acc, sa, sb, ROW_A, ROW_B)


@triton.jit
def load_scales(scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A: tl.constexpr, ROW_B: tl.constexpr):
    """A tile's scales: A's for ``rows`` and W's for ``cols`` (rows past the edge get 0), or one each."""
    if ROW_A:
        sa = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
    else:
        sa = tl.load(scale_a_ptr)
    if ROW_B:
        sb = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
    else:
        sb = tl.load(scale_b_ptr)
    return sa, sb


@triton.jit
def apply_scales(acc, sa, sb, ROW_A: tl.constexpr, ROW_B: tl.constexpr):
    """``acc`` times the scales ``load_scales`` gave."""
    if ROW_A:
        acc = acc * sa[:, None]
    else:
        acc = acc * sa
    if ROW_B:
        acc = acc * sb[None, :]
    else:
        acc = acc * sb
    return acc


@triton.jit
def mma(a, b, acc, BLOCK_K: tl.constexpr, PRECISE: tl.constexpr):
    """acc + a @ b^T for one K block, a (BLOCK_M, BLOCK_K) and b (BLOCK_N, BLOCK_K) both K-major.

    Hopper's FP8 ``wgmma`` keeps its partial sums at less than float32 precision; PRECISE promotes
    them into the float32 ``acc`` after every block (``max_num_imprecise_acc=BLOCK_K``, as cuBLAS
    does without fast accumulation), where fast accumulation carries them across the whole K loop.
    """
    if PRECISE:
        return tl.dot(a, b.T, acc, max_num_imprecise_acc=BLOCK_K)
    else:
        return tl.dot(a, b.T, acc)


@triton.jit
def accumulate_k(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, k_first, k_last,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PRECISE: tl.constexpr, EVEN_K: tl.constexpr):
    """The float32 product of A's ``rows`` and W's ``cols`` over K blocks [k_first, k_last), loaded
    through pointers: rows and columns past the edge wrapped around (their results are never
    stored), the last K block masked unless EVEN_K, PRECISE promoting to float32 every block."""
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rows % M)[:, None].to(tl.int64) * stride_am + (k_first * BLOCK_K + ks)[None, :] * stride_ak
    b_ptrs = b_ptr + (cols % N)[:, None].to(tl.int64) * stride_bn + (k_first * BLOCK_K + ks)[None, :] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
        acc = mma(a, b, acc, BLOCK_K, PRECISE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def accumulate_k_tma(a_desc, b_desc, off_m, off_n, k_first, k_last,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISE: tl.constexpr):
    """The float32 product of A's rows [off_m, off_m + BLOCK_M) and W's rows [off_n, off_n + BLOCK_N)
    over K blocks [k_first, k_last), loaded through TMA descriptors of A (M, K) and W (N, K): boxes
    past an edge (in M, N or K) come back zero-filled, so there is nothing to mask."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_first, k_last):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = mma(a, b, acc, BLOCK_K, PRECISE)
    return acc
