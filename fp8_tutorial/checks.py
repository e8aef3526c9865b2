"""Correctness checks: relative error against a float64 reference, and poisoned outputs."""

from __future__ import annotations

import torch

from ._env import DEVICE, ON_GPU
from .quant import dequantize, quantize


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ``||out - ref|| / ||ref||``, computed in float64.

    NaN or Inf anywhere in ``out`` gives ``inf``, so an unwritten (poisoned) element can never
    pass a tolerance check.
    """
    if out.shape != ref.shape:
        raise ValueError(f"shapes differ: {tuple(out.shape)} vs {tuple(ref.shape)}")
    out64 = out.detach().to(device=ref.device, dtype=torch.float64)
    ref64 = ref.detach().to(dtype=torch.float64)
    if not torch.isfinite(ref64).all():
        raise ValueError("the reference holds NaN or Inf: there is nothing to measure the error against")
    if not torch.isfinite(out64).all():
        return float("inf")
    big = ref64.abs().max() if ref64.numel() else 0
    if big > 0:  # keep the squares in the norms from overflowing or underflowing
        out64, ref64 = out64 / big, ref64 / big
    den = torch.linalg.vector_norm(ref64)
    num = torch.linalg.vector_norm(out64 - ref64)
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return float(num / den)


def reference_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                 scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """float64 product of the dequantized operands: what an FP8 GEMM should compute.

    It is computed where ``a`` lives (a GPU's float64 matrix product is exact IEEE arithmetic too,
    and far faster than the CPU's for the book's shapes).

    ``a`` is (M, K) and ``b`` is (K, N), as in ``torch._scaled_mm``; a scale may be per-tensor
    (one element), per-row ((M, 1) for a, (1, N) for b) or block-wise ((M, K/128) for a,
    (K/128, N/128) for b). Without scales the operands are taken as they are.
    """
    def dq(q, s):
        if s is not None and not isinstance(s, torch.Tensor):
            s = torch.tensor(float(s))
        if s is None:
            return q.detach().to(device=a.device, dtype=torch.float64)
        return dequantize(q.to(a.device), s.detach().to(a.device).float(), torch.float64)

    return dq(a, scale_a) @ dq(b, scale_b)


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with NaN (or the largest value for dtypes without NaN) so unwritten elements show."""
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    return t.fill_(torch.iinfo(t.dtype).max)


def random_operands(M: int, K: int, N: int, recipe_a: str, recipe_b: str, gen: torch.Generator, device=None,
                    fp8_dtype: torch.dtype = torch.float8_e4m3fn):
    """Quantized random operands ``(a, b, scale_a, scale_b)`` for ``scaled_mm``: x (M, K) and w (N, K)
    with rows scaled by powers of two from 2^-4 to 2^3, so that a scale applied to the wrong row or
    column shows as a large error (and float16 outputs stay finite); ``b`` is ``w.t()``, K-major."""
    device = DEVICE if device is None else device
    x = torch.randn(M, K, generator=gen) * torch.exp2(torch.randint(-4, 4, (M, 1), generator=gen).float())
    w = torch.randn(N, K, generator=gen) * torch.exp2(torch.randint(-4, 4, (N, 1), generator=gen).float())
    a, sa = quantize(x.to(device), recipe_a, fp8_dtype)
    wq, sw = quantize(w.to(device), recipe_b, fp8_dtype)
    return a, wq.t(), sa, sw.t()


def block_operands(M: int, K: int, N: int, gen: torch.Generator, device=None,
                   fp8_dtype: torch.dtype = torch.float8_e4m3fn):
    """Block-wise operands ``(a, b, scale_a, scale_b)`` in which every scale is its own: x's 1 x 128
    groups and w's 128 x 128 blocks scaled by powers of two from 2^-6 to 2^5 (a scale applied to
    the wrong group or block shows as a large error), one group of x and one block of w all
    zeros (their scales are the floor's); ``b`` is ``w.t()``. K and N must be multiples of 128."""
    if K % 128 or N % 128:
        raise ValueError(f"block-wise operands need K and N multiples of 128, got K={K}, N={N}")
    device = DEVICE if device is None else device
    groups = torch.exp2(torch.randint(-6, 6, (M, K // 128), generator=gen).float())
    blocks = torch.exp2(torch.randint(-6, 6, (N // 128, K // 128), generator=gen).float())
    x = torch.randn(M, K, generator=gen) * groups.repeat_interleave(128, 1)
    w = torch.randn(N, K, generator=gen) * blocks.repeat_interleave(128, 0).repeat_interleave(128, 1)
    x[M // 2, :128] = 0
    w[-128:, -128:] = 0
    a, sa = quantize(x.to(device), "1x128", fp8_dtype)
    wq, sw = quantize(w.to(device), "128x128", fp8_dtype)
    return a, wq.t(), sa, sw.t()


# Rounding to the output dtype alone moves each element by up to half an ulp: 2^-8 of it in bf16,
# 2^-11 in fp16. A single-element product can sit at that bound, so every tolerance starts from it.
OUTPUT_ROUNDING = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def tolerance(out_dtype: torch.dtype, precise: bool) -> float:
    """The relative error a right FP8 GEMM stays under: the output's rounding plus what the
    accumulation adds. In the interpreter the FP8 products are exact and summed in float32; on a
    GPU, Hopper's tensor cores add about 3e-3 with fast accumulation at K = 12288 and 1.7e-3
    precise, bf16's rounding included (chapter 03)."""
    if not ON_GPU:
        return OUTPUT_ROUNDING[out_dtype] + 1e-6
    return OUTPUT_ROUNDING[out_dtype] + (2e-3 if precise else 4e-3)
