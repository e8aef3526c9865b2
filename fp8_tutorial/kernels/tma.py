"""A persistent FP8 GEMM whose loads and stores go through TMA tensor descriptors.

Hopper's Tensor Memory Accelerator copies a whole box (a tile) between global and shared memory
from one instruction, computing addresses and bounds itself: boxes past the edge of the tensor are
zero-filled on load and clipped on store, so the kernel needs neither wrapped indices nor masks.
The descriptors are built on the device (``tl.make_tensor_descriptor``, which needs a scratch
allocator: ``triton.set_allocator``) or on the host (``TensorDescriptor.from_tensor``). TMA wants
every stride but the last to be a multiple of 16 bytes and the base 16-byte aligned;
``fp8_tutorial.gemm`` checks that before launching.
"""

import triton
import triton.language as tl

from .common import accumulate_k_tma, grouped_tile, operand_sources, scale_epilogue


@triton.jit
def tma_tiles(
    a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, num_sms,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr, FLATTEN: tl.constexpr, EPILOGUE_HALVES: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """This program's share of C = scale(A @ W^T), given descriptors of A (M, K), W (N, K) and C.

    EPILOGUE_HALVES stores each tile as two column halves (C's descriptor then has boxes of
    BLOCK_N / 2 columns), so that the epilogue's staging buffer in shared memory is half as large
    and may leave room for another pipeline stage. WARP_SPECIALIZE asks the compiler to split each
    program's warps into a producer that issues the TMA loads and consumers that issue the
    ``wgmma`` and the epilogue (``ws.ws_kernel``, chapter 07).
    """
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    num_programs = tl.minimum(num_tiles, num_sms * PROGRAMS_PER_SM)
    tile_c = tl.program_id(0) - num_programs
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = accumulate_k_tma(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, tl.cdiv(K, BLOCK_K),
                               BLOCK_M, BLOCK_N, BLOCK_K, PRECISE)

        tile_c += num_programs
        pid_m, pid_n = grouped_tile(tile_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
        c = acc.to(c_desc.dtype)
        if EPILOGUE_HALVES:
            left, right = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right)
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c)


@triton.jit
def tma_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K, num_sms,
    stride_am, stride_bn, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr, FLATTEN: tl.constexpr, EPILOGUE_HALVES: tl.constexpr,
):
    """C[M, N] = scale(A[M, K] @ B[K, N]) with A and W = B^T both K-major: the descriptors are
    built here, on the device, from pointers, shapes and strides."""
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, True)
    SLICE_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_HALVES else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, SLICE_N])
    tma_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, num_sms, BLOCK_M, BLOCK_N, BLOCK_K,
              GROUP_M, ROW_A, ROW_B, PRECISE, PROGRAMS_PER_SM, FLATTEN, EPILOGUE_HALVES, False)


@triton.jit
def tma_host_kernel(
    a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr,
    M, N, K, num_sms,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr, FLATTEN: tl.constexpr, EPILOGUE_HALVES: tl.constexpr,
):
    """The same, with descriptors built on the host (``TensorDescriptor.from_tensor``) and passed
    in as arguments: their box shapes must match the tile sizes, fixed before the launch."""
    tma_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, num_sms, BLOCK_M, BLOCK_N, BLOCK_K,
              GROUP_M, ROW_A, ROW_B, PRECISE, PROGRAMS_PER_SM, FLATTEN, EPILOGUE_HALVES, False)
