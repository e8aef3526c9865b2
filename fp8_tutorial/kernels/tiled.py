"""A tiled FP8 GEMM: one program per output tile, pointers and masks, any M, N, K >= 1; its
configurations and its launcher. First, the same idea at its smallest (``minimal_kernel`` and
``minimal_scaled_mm``: per-tensor scales, no switches), which chapter 04 builds before the real one.

C = (A @ B) * scales, A (M, K) and B (K, N) in FP8. B is read in (BLOCK_N, BLOCK_K) tiles, K-major,
the layout Hopper's FP8 wgmma wants for both operands, and ``tl.dot(a, b.T)`` multiplies them.
"""

import torch
import triton
import triton.language as tl

from .._env import DEVICE
from .common import accumulate_k, grouped_tile, scale_epilogue
from .host import (Launch, Operands, autotuned, check_config, epilogue_scales_only, launch, pointer_safe,
                   tile_count)


# ---- the smallest FP8 GEMM: per-tensor scales, masks, one program per tile -----------

@triton.jit
def minimal_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) tile of C = (A @ B) * scale_a * scale_b, stored in bf16."""
    # which tile of C this program computes, and the rows and columns it covers
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # the K loop: a (BLOCK_M, BLOCK_K) tile of A times a (BLOCK_K, BLOCK_N) tile of B
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    # the epilogue: dequantize, round to bf16, store the part of the tile inside C
    acc = acc * tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(rows[:, None] < M) & (cols[None, :] < N))


def minimal_scaled_mm(a, b, scale_a, scale_b, block_m=128, block_n=128, block_k=128,
                      num_warps=8, num_stages=3) -> torch.Tensor:
    """``(a @ b) * scale_a * scale_b`` in bf16 by ``minimal_kernel``: ``a`` (M, K)
    row-major and ``b`` (K, N) column-major in float8_e4m3fn, one-element float32 scales,
    all on the device the package runs on (the GPU, or the CPU under the interpreter)."""
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != DEVICE.type:
            raise ValueError(f"{name} is on {t.device}; kernels run on {DEVICE.type} here")
    if len({t.device for t in (a, b, scale_a, scale_b)}) > 1:
        raise ValueError(f"a, b and the scales must be on one device, got {a.device}, "
                         f"{b.device}, {scale_a.device} and {scale_b.device}")
    for name, t in (("a", a), ("b", b)):
        if t.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{name} must be torch.float8_e4m3fn, got {t.dtype}")
        if t.dim() != 2 or 0 in t.shape:
            raise ValueError(f"{name} must be a non-empty matrix, got {tuple(t.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: "
                         "a's columns must be b's rows (K)")
    if not a.is_contiguous():
        raise ValueError(f"a must be row-major (contiguous), got strides {a.stride()}")
    if not b.t().is_contiguous():
        raise ValueError("b must be column-major (the .t() of a contiguous (N, K) weight), "
                         f"got strides {b.stride()}")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.dtype != torch.float32 or s.numel() != 1:
            raise ValueError(f"{name} must be one float32 element (per-tensor), got "
                             f"{s.dtype} of shape {tuple(s.shape)}")
    (M, K), N = a.shape, b.shape[1]
    if max(a.numel(), b.numel(), M * N) >= 2**31:
        raise ValueError(f"{M}x{K}x{N} is too large for the kernel's 32-bit offsets")
    check_config(tiled_config(block_m, block_n, block_k, num_warps, num_stages))
    c = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    minimal_kernel[grid](a, b, c, scale_a, scale_b, M, N, K,
                         a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1),
                         BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                         num_warps=num_warps, num_stages=num_stages)
    return c


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


# ---- configurations, what it refuses, and its launcher ---------------------------------------------

def tiled_config(bm, bn, bk, warps, stages, group_m=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=warps, num_stages=stages)


# Measured on the H200 (a sweep of 42 tile shapes, warps and stages over the nine reference shapes):
# 128x128 tiles with 3 stages leave room for two programs per SM, whose K loops hide each other's
# prologue and epilogue; 6 stages, one program per SM, win when K is long; 256x128 wins on 8192^3.
# 128x256 tiles, the usual choice for persistent kernels, reached only 0.6-0.7x cuBLAS here.
TILED_CONFIGS = [tiled_config(128, 128, 128, 4, 3), tiled_config(128, 128, 128, 8, 3),
                 tiled_config(128, 128, 128, 4, 6), tiled_config(256, 128, 128, 8, 4),
                 tiled_config(64, 128, 128, 4, 4), tiled_config(64, 64, 128, 4, 4)]
# Split-K lost to the unsplit kernel on every small-M shape (chapter 04): never chosen by "auto".
SPLIT_K_CONFIGS = [tiled_config(128, 128, 128, 4, 6), tiled_config(128, 128, 128, 4, 3)]
# launch decides EVEN_K for K % 128 when autotuning: every tuned BLOCK_K must divide 128.
assert all(128 % c.kwargs["BLOCK_K"] == 0 for c in TILED_CONFIGS + SPLIT_K_CONFIGS)
# In the interpreter, one small configuration: autotuning needs a GPU, and the interpreter's cost
# grows with the tile size.
INTERPRETER_CONFIG = tiled_config(32, 32, 32, 4, 1, group_m=4)

_tiled_tuned = autotuned(tiled_kernel, TILED_CONFIGS, ["EVEN_K", "SPLIT_K"])
# Split-K programs add into C: every timed trial, and the final launch, must start from zeros.
_split_k_tuned = autotuned(tiled_kernel, SPLIT_K_CONFIGS, ["EVEN_K", "SPLIT_K"], reset_to_zero=["c_ptr"])
TUNERS = {"tiled": _tiled_tuned, "split-k": _split_k_tuned}

tiled_refuses = epilogue_scales_only("tiled")


def launch_tiled(ops: Operands, out: torch.Tensor, precise: bool, split_k: int = 1,
                 config: triton.Config | None = None) -> Launch:
    """Run ``tiled_kernel`` into ``out``: autotuned on a GPU unless ``config`` is given.

    ``split_k`` > 1 splits the K loop over that many programs per tile; they add their partial
    tiles into a zeroed float32 buffer, which is then cast into ``out``.
    """
    M, N, K = ops.M, ops.N, ops.K
    if isinstance(split_k, bool) or not isinstance(split_k, int):
        raise TypeError(f"split_k must be an int, got {type(split_k).__name__}")
    if split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    ops, target = pointer_safe(ops, out)
    c = target if split_k == 1 else torch.zeros((M, N), dtype=torch.float32, device=out.device)
    args = (ops.a, ops.b, c, *ops.packed_scales, M, N, K,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    flags = dict(ops.flags(precise), SPLIT_K=split_k)
    grid = lambda meta: (tile_count(M, N, meta), split_k)  # noqa: E731
    done = launch(tiled_kernel, _tiled_tuned if split_k == 1 else _split_k_tuned, INTERPRETER_CONFIG, grid,
                  args, flags, config, K)
    if c is not out:
        out.copy_(c)
    return done
