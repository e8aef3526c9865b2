"""Correctness checks: relative error against a float64 reference, and poisoned outputs."""

from __future__ import annotations

import torch

from .quant import dequantize


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
