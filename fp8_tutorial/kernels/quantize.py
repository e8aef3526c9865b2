"""Triton kernels that quantize a 2-D tensor to FP8: amax, scale, clamp and cast, fused.

Every granularity is a grid of *groups* that share one scale: a whole row (``"row"``), 1x128
slices of a row (``"1x128"``), 128x128 blocks (``"128x128"``) or the whole tensor (``"tensor"``).
Where a program can see its whole group it reads the data once (``quantize_groups_kernel``); the
per-tensor scale needs every element first, so ``"tensor"`` takes two kernels (partial amax, then
quantize), and rows too long to hold in registers are read twice by the same program (the second
read mostly hits L2).

The semantics are those of ``fp8_tutorial.quant._quantize_torch``, bit for bit:
``scale = amax / FP8_MAX`` and ``q = cast(clamp(x * (FP8_MAX / amax)))``, both divisions
correctly rounded (``div_rn``: Triton's plain ``/`` on float32 is an approximate division);
``amax`` is floored at ``AMAX_FLOOR`` so all-zero groups give zeros; a group holding NaN or
+-Inf gets a NaN scale and NaN values. On the GPU ``tl.max``, ``tl.maximum`` and ``tl.clamp`` drop
NaN unless told otherwise, so NaN is tracked explicitly rather than left to propagate.
"""

import triton
import triton.language as tl


@triton.jit
def group_amax(x, axis):
    """Largest magnitude along ``axis``; NaN where a NaN is present (``tl.max`` would skip it)."""
    amax = tl.max(tl.abs(x), axis=axis)
    nans = tl.sum((x != x).to(tl.int32), axis=axis)
    return tl.where(nans > 0, float("nan"), amax)


@triton.jit
def scales_from_amax(amax, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    """(scale, 1/scale) of groups whose largest magnitude is ``amax``; NaN scale and a zero
    inverse (the mark ``cast_fp8`` reads) if it is not finite."""
    finite = amax < float("inf")  # false for +Inf and NaN
    a = tl.maximum(amax, AMAX_FLOOR)
    scale = tl.where(finite, tl.math.div_rn(a, FP8_MAX), float("nan"))
    inv = tl.where(finite, tl.math.div_rn(FP8_MAX, a), 0.0)
    return scale, inv


@triton.jit
def cast_fp8(x, inv, FP8_MAX: tl.constexpr, dtype: tl.constexpr):
    """Scale, clamp to the format's range and round to nearest even; NaN in non-finite groups."""
    y = tl.where(inv > 0, tl.clamp(x * inv, -FP8_MAX, FP8_MAX), float("nan"))
    return y.to(dtype)


@triton.jit
def quantize_groups_kernel(
    x_ptr, q_ptr, s_ptr,
    M, K, GROUP_K,
    stride_xm, stride_xk, stride_qm, stride_sm, stride_sk,
    FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    SHARED_ROWS: tl.constexpr, ONE_PASS: tl.constexpr,
):
    """Quantize ``x`` (M, K) in groups of GROUP_K columns and one row (or BLOCK_M rows if SHARED_ROWS).

    Program (i, j) takes rows ``i*BLOCK_M ...`` and the j-th group of columns. With ONE_PASS the
    group fits one (BLOCK_M, BLOCK_K) tile, read once; otherwise the program sweeps the group twice
    in BLOCK_K chunks, for the amax and then for the cast.
    """
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < M
    k_start = pid_k * GROUP_K
    k_end = tl.minimum(k_start + GROUP_K, K)
    x_rows = x_ptr + rows[:, None] * stride_xm
    q_rows = q_ptr + rows[:, None] * stride_qm
    dtype = q_ptr.dtype.element_ty

    if ONE_PASS:
        cols = k_start + tl.arange(0, BLOCK_K)
        mask = row_ok[:, None] & (cols < k_end)[None, :]
        x = tl.load(x_rows + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
        amax = group_amax(x, 1)
    else:
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for k in range(k_start, k_end, BLOCK_K):
            cols = k + tl.arange(0, BLOCK_K)
            mask = row_ok[:, None] & (cols < k_end)[None, :]
            x = tl.load(x_rows + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, group_amax(x, 1), propagate_nan=tl.PropagateNan.ALL)
    if SHARED_ROWS:
        amax = group_amax(tl.where(row_ok, amax, 0.0), 0)

    scale, inv = scales_from_amax(amax, FP8_MAX, AMAX_FLOOR)
    if SHARED_ROWS:
        tl.store(s_ptr + pid_m * stride_sm + pid_k * stride_sk, scale)
    else:
        tl.store(s_ptr + rows * stride_sm + pid_k * stride_sk, scale, mask=row_ok)
        inv = inv[:, None]

    if ONE_PASS:
        tl.store(q_rows + cols[None, :], cast_fp8(x, inv, FP8_MAX, dtype), mask=mask)
    else:
        for k in range(k_start, k_end, BLOCK_K):
            cols = k + tl.arange(0, BLOCK_K)
            mask = row_ok[:, None] & (cols < k_end)[None, :]
            x = tl.load(x_rows + cols[None, :] * stride_xk, mask=mask, other=0.0).to(tl.float32)
            tl.store(q_rows + cols[None, :], cast_fp8(x, inv, FP8_MAX, dtype), mask=mask)


@triton.jit
def partial_amax_kernel(x_ptr, partial_ptr, M, K, stride_xm, stride_xk,
                        BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Per-tile amax of ``x`` (M, K), NaN-aware, into ``partial[pid_m * num_k_tiles + pid_k]``."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    amax = group_amax(group_amax(x.to(tl.float32), 1), 0)
    tl.store(partial_ptr + pid_m * tl.num_programs(1) + pid_k, amax)


@triton.jit
def quantize_tensor_kernel(x_ptr, q_ptr, s_ptr, partial_ptr, num_partials, M, K,
                           stride_xm, stride_xk, stride_qm,
                           FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr):
    """Quantize one (BLOCK_M, BLOCK_K) tile with the scale of the whole tensor.

    Every program reduces the (few thousand at most) partial amaxes itself, so no third launch
    and no grid-wide barrier are needed; program (0, 0) stores the scale.
    """
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    p = tl.arange(0, BLOCK_P)
    partials = tl.load(partial_ptr + p, mask=p < num_partials, other=0.0)
    scale, inv = scales_from_amax(group_amax(partials, 0), FP8_MAX, AMAX_FLOOR)
    if (pid_m == 0) & (pid_k == 0):
        tl.store(s_ptr, scale)

    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk, mask=mask, other=0.0)
    q = cast_fp8(x.to(tl.float32), inv, FP8_MAX, q_ptr.dtype.element_ty)
    tl.store(q_ptr + rows[:, None] * stride_qm + cols[None, :], q, mask=mask)
