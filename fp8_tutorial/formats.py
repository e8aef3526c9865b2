"""The two FP8 formats, decoded: every representable value, the numbers that describe a format,
and Triton's cast next to torch's."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from .kernels.cast import cast_kernel

FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_NAMES = {dtype: name for name, dtype in FORMATS.items()}


@dataclass(frozen=True)
class FormatInfo:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    min_normal: float
    min_subnormal: float
    eps: float  # the gap between 1 and the next value: relative spacing is eps to eps/2
    finite_values: int  # distinct finite values, +0 and -0 counted once
    nan_codes: int
    inf: bool


def all_values(dtype: torch.dtype) -> torch.Tensor:
    """The 256 bit patterns of an FP8 format decoded to float32, in code order 0x00 ... 0xFF."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()


def describe(dtype: torch.dtype) -> FormatInfo:
    """Read a format's numbers off its 256 decoded codes (nothing here is typed in by hand): the
    gap above 1 gives the mantissa's bits, the smallest subnormal times 2^mantissa_bits the
    smallest normal value, and that the bias; the exponent has the bits the sign and the mantissa
    leave of the byte."""
    if dtype not in FORMATS.values():
        raise TypeError(f"dtype must be one of {list(FORMATS.values())}, got {dtype}")
    v = all_values(dtype)
    finite = v[torch.isfinite(v)]
    positive = finite[finite > 0].unique()
    one = int((positive == 1).nonzero())
    eps = float(positive[one + 1] - 1)
    mantissa_bits = int(round(-math.log2(eps)))
    min_subnormal = float(positive.min())
    min_normal = min_subnormal * 2.0 ** mantissa_bits  # 2^(1 - bias)
    return FormatInfo(
        name=_NAMES[dtype],
        exponent_bits=7 - mantissa_bits,
        mantissa_bits=mantissa_bits,
        bias=int(round(1 - math.log2(min_normal))),
        max=float(positive.max()),
        min_normal=min_normal,
        min_subnormal=min_subnormal,
        eps=eps,
        finite_values=int(finite.unique().numel()),
        nan_codes=int(torch.isnan(v).sum()),
        inf=bool(torch.isinf(v).any()),
    )


def triton_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Convert a float tensor to FP8 with a Triton kernel (compiled on a GPU, else interpreted)."""
    if dtype not in FORMATS.values():
        raise TypeError(f"dtype must be one of {list(FORMATS.values())}, got {dtype}")
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"triton_cast converts a float32, float16 or bfloat16 tensor, got "
                        f"{x.dtype if isinstance(x, torch.Tensor) else type(x).__name__}")
    flat = x.contiguous().reshape(-1)
    out = torch.empty(flat.shape, dtype=dtype, device=x.device)
    BLOCK = 1024
    cast_kernel[(triton.cdiv(flat.numel(), BLOCK),)](flat, out, flat.numel(), BLOCK=BLOCK)
    return out.reshape(x.shape)


def relative_spacing(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive finite values and the relative gap to the next one, (next - v) / v."""
    v = all_values(dtype)
    pos = v[torch.isfinite(v) & (v > 0)].unique()
    return pos[:-1], (pos[1:] - pos[:-1]) / pos[:-1]


def dynamic_range_binades(dtype: torch.dtype) -> float:
    """log2(max / smallest subnormal): how many powers of two the format spans."""
    info = describe(dtype)
    return math.log2(info.max / info.min_subnormal)
