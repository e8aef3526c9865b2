"""The persistent TMA kernel with its tile loop warp-specialized.

``tl.range(..., warp_specialize=True)`` asks Triton to split the loop's work between warp groups:
a producer that issues the TMA loads of A and W into a ring of shared-memory buffers, and consumers
that wait for each buffer, issue the ``wgmma`` on it, hand it back and run the epilogue. On Hopper
(Triton 3.6) the compiler also cuts each tile's rows between two consumer groups and moves
registers from the producer to the consumers with ``setmaxnreg``. Chapter 07 shows how to tell from
the compiled code that this happened, and measures what it buys.

Only some forms of the loop come out of the compiler both specialized and right, on the H200 with
Triton 3.6 (chapter 07 measures each):

- 4 warps per program (the compiler adds the other two groups: 12 warps in all); with 8 the
  specialization is skipped without a word;
- descriptors built on the device, no ``flatten``, one TMA store of the whole tile;
- at most 4 pipeline stages: with 5 or more, results were wrong.

``ws_kernel`` fixes the second (device-side descriptors, no ``flatten``, the whole tile stored
at once); ``gemm.launch_ws`` refuses configurations that break the first or the third.
"""

import triton
import triton.language as tl

from .common import operand_sources
from .tma import tma_tiles


@triton.jit
def ws_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K, num_sms,
    stride_am, stride_bn, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr,
):
    """C[M, N] = scale(A[M, K] @ W[N, K]^T): ``tma_tiles`` with one program per SM, its tile loop
    warp-specialized, device-side descriptors and the tile stored whole."""
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, True)
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    # PROGRAMS_PER_SM = 1, FLATTEN = False, EPILOGUE_HALVES = False, WARP_SPECIALIZE = True
    tma_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, num_sms, BLOCK_M, BLOCK_N, BLOCK_K,
              GROUP_M, ROW_A, ROW_B, PRECISE, 1, False, False, True)
