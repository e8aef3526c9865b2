"""Quantization to FP8 and back: ``quantize(x, granularity) -> (q, scale)`` and ``dequantize``.

Scales are float32 *dequantization* multipliers, as ``torch._scaled_mm`` takes them:
``x ~= q.float() * scale`` with the scale broadcast over its group.

| granularity | a scale per             | scale shape for x (M, K) |
|-------------|-------------------------|--------------------------|
| "tensor"    | the whole tensor        | ()                       |
| "row"       | row                     | (M, 1)                   |
| "1x128"     | 128 consecutive columns | (M, K/128), M-major      |
| "128x128"   | 128x128 block           | (M/128, K/128)           |

"1x128" scales are stored M-major, the layout cuBLAS's block-wise GEMM takes and the one the
Gluon block-wise kernel copies with TMA: strides ``(1, M)`` from the torch reference, ``(1, Mp)``
from the Triton kernel, ``Mp`` the multiple of 4 at or above M, so that each K block's scales
start on a 16-byte boundary whatever M is. cuBLAS block-wise takes exactly ``(1, M)``: where M is
not a multiple of 4, hand it ``exactly_m_major(scale)``. The others are row-major.

Rules, the same in the Triton kernels and the torch reference, bit for bit:

- ``amax`` is the group's largest magnitude; ``scale = amax / FP8_MAX`` and
  ``q = round_to_nearest_even(clamp(x * (FP8_MAX / amax), -FP8_MAX, FP8_MAX))``;
- groups whose ``amax`` is below ``AMAX_FLOOR`` (2^-100), all-zero groups among them, are scaled as
  if it were ``AMAX_FLOOR``: they quantize to zeros (or tiny values) with a finite scale, never NaN;
- a group that holds a NaN or +-Inf gets a NaN scale and NaN values (the code 0x7F), so the whole
  group dequantizes to NaN and the bad input cannot pass unnoticed; other groups are unaffected. Call
  ``torch.isfinite(x).all()`` first if you would rather raise.
"""

from __future__ import annotations

import torch
import triton

from .kernels import quantize as _k

GRANULARITIES = ("tensor", "row", "1x128", "128x128")
INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
#: Largest finite value of each FP8 format.
FP8_MAX = {dtype: float(torch.finfo(dtype).max) for dtype in FP8_DTYPES}
#: Smallest amax a scale is computed from (see the module docstring).
AMAX_FLOOR = 2.0**-100
GROUP = 128  # the width of "1x128" groups and the side of "128x128" blocks


def _check(x, granularity: str, dtype: torch.dtype) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(
            f"quantize expects a floating-point tensor (float32, bfloat16 or float16), got {x.dtype}")
    if x.layout != torch.strided:
        raise TypeError(f"quantize expects a dense (strided) tensor, got layout {x.layout}")
    if granularity not in GRANULARITIES:
        raise ValueError(
            f"unknown granularity {granularity!r}: expected one of {', '.join(map(repr, GRANULARITIES))}")
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}")
    if x.dim() != 2:
        raise ValueError(f"quantize expects a 2-D tensor (rows, K), got shape {tuple(x.shape)}; "
                         "reshape activations to (tokens, features) first")
    M, K = x.shape
    if M == 0 or K == 0:
        raise ValueError(f"quantize expects a non-empty tensor, got shape {tuple(x.shape)}")
    if granularity in ("1x128", "128x128") and K % GROUP:
        raise ValueError(f"granularity {granularity!r} needs the last dimension divisible by 128, "
                         f"got K = {K}")
    if granularity == "128x128" and M % GROUP:
        raise ValueError(f"granularity '128x128' needs the number of rows divisible by 128, got {M}")


def _group_shape(granularity: str, M: int, K: int) -> tuple[int, int]:
    return {"tensor": (M, K), "row": (1, K), "1x128": (1, GROUP), "128x128": (GROUP, GROUP)}[granularity]


def _scales_from_amax(amax: torch.Tensor, fp8_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of ``kernels.quantize.scales_from_amax``."""
    finite = torch.isfinite(amax)
    a = amax.clamp_min(AMAX_FLOOR)
    # Tensor / tensor: torch computes ``python_scalar / tensor`` as a reciprocal times the scalar,
    # which is not correctly rounded; the kernels use div_rn.
    fmax = torch.full_like(a, fp8_max)
    nan = torch.full_like(a, float("nan"))
    scale = torch.where(finite, a / fmax, nan)
    inv = torch.where(finite, fmax / a, torch.zeros_like(a))
    return scale, inv


def _quantize_torch(x: torch.Tensor, granularity: str, dtype: torch.dtype):
    """Reference implementation in plain torch: the definition the Triton kernels must match."""
    M, K = x.shape
    gm, gk = _group_shape(granularity, M, K)
    xg = x.float().reshape(M // gm, gm, K // gk, gk)
    amax = xg.abs().amax(dim=(1, 3))  # NaN propagates
    scale, inv = _scales_from_amax(amax, FP8_MAX[dtype])
    fmax = FP8_MAX[dtype]
    inv = inv[:, None, :, None]
    y = torch.where(inv > 0, (xg * inv).clamp(-fmax, fmax), float("nan"))  # no host tensor: no sync
    q = y.to(dtype).reshape(M, K)
    if granularity == "1x128":  # M-major, strides (1, M) at any M (as the fake implementation says)
        return q, m_major_scales(M, K // GROUP, x.device, align=1).copy_(scale)
    return q, scale.reshape(scale_shape(granularity, M, K))


def m_major_scales(M: int, groups: int, device, empty=torch.empty_strided, align: int = 4) -> torch.Tensor:
    """An uninitialized (M, groups) float32 tensor laid out M-major, each column (a K block's
    scales) ``align`` floats apart or a multiple of it: 4, the Triton kernel's "1x128" scales, each
    column on a 16-byte boundary; 1, strides exactly (1, M), the torch reference's and cuBLAS's
    (``empty``: ``torch.empty_strided`` or a tensor's ``new_empty_strided``)."""
    rows = -(-M // align) * align
    return empty((M, groups), (1, rows), dtype=torch.float32, device=device)


def exactly_m_major(s: torch.Tensor) -> torch.Tensor:
    """(M, K/128) block scales as cuBLAS block-wise takes them, strides (1, M): ``s`` itself where
    they are (``quantize``'s where M is a multiple of 4), else an M-major copy."""
    if s.stride() == (1, s.shape[0]):
        return s
    return m_major_scales(*s.shape, s.device, align=1).copy_(s)


def _quantize_triton(x: torch.Tensor, granularity: str, dtype: torch.dtype):
    M, K = x.shape
    q = torch.empty((M, K), dtype=dtype, device=x.device)
    fmax = FP8_MAX[dtype]
    if granularity == "tensor":
        BLOCK_M, BLOCK_K = 32, 512
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(K, BLOCK_K))
        partial = torch.empty(grid[0] * grid[1], dtype=torch.float32, device=x.device)
        scale = torch.empty((), dtype=torch.float32, device=x.device)
        _k.partial_amax_kernel[grid](x, partial, M, K, x.stride(0), x.stride(1),
                                     BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K, num_warps=8)
        _k.quantize_tensor_kernel[grid](
            x, q, scale, partial, partial.numel(), M, K, x.stride(0), x.stride(1), q.stride(0),
            FP8_MAX=fmax, AMAX_FLOOR=AMAX_FLOOR, BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K,
            BLOCK_P=triton.next_power_of_2(partial.numel()), num_warps=8)
        return q, scale

    if granularity == "row":
        scale = torch.empty((M, 1), dtype=torch.float32, device=x.device)
        group_k, shared_rows = K, False
        block_k = min(triton.next_power_of_2(K), 8192)
        block_m = max(1, min(16, 4096 // block_k))
    elif granularity == "1x128":
        scale = m_major_scales(M, K // GROUP, x.device)
        group_k, shared_rows, block_k, block_m = GROUP, False, GROUP, 32
    else:  # "128x128"
        scale = torch.empty((M // GROUP, K // GROUP), dtype=torch.float32, device=x.device)
        group_k, shared_rows, block_k, block_m = GROUP, True, GROUP, GROUP
    # A problem seen before is launched directly, without Triton's per-call dispatch (_direct)
    key = (granularity, dtype, x.dtype, M, K, x.stride(), x.data_ptr() % 16, x.device)
    launch = _DIRECT.get(key)
    if launch is not None:
        launch(x, q, scale)
        return q, scale
    grid = (triton.cdiv(M, block_m), triton.cdiv(K, group_k))
    args = dict(M=M, K=K, GROUP_K=group_k, stride_xm=x.stride(0), stride_xk=x.stride(1), stride_qm=q.stride(0),
                stride_sm=scale.stride(0), stride_sk=scale.stride(1), FP8_MAX=fmax, AMAX_FLOOR=AMAX_FLOOR,
                BLOCK_M=block_m, BLOCK_K=block_k, SHARED_ROWS=shared_rows, ONE_PASS=group_k <= block_k)
    compiled = _k.quantize_groups_kernel[grid](x, q, scale, **args, num_warps=8 if shared_rows else 4)
    _direct(key, compiled, grid, args)
    return q, scale


#: Direct launches of the group kernel by problem (granularity, dtypes, shape, strides, the input's
#: alignment, device): everything its compiled code was specialized on, the output tensors being new
#: allocations of fixed shapes (aligned as the caching allocator aligns every block).
_DIRECT: dict = {}
_DIRECT_KEPT = 256


def _direct(key, compiled, grid, args) -> None:
    """Keep a direct launch (``kernels.host.Direct``) of the kernel just compiled for ``key``: the
    next call of the same problem skips Triton's dispatch (binding, specializing and hashing the
    arguments), the larger part of a small quantization's host time. Only on a GPU with the Triton
    whose launch layout ``Direct`` knows (``compat.DIRECT_LAUNCH``)."""
    from .kernels.compat import DIRECT_LAUNCH
    from .kernels.host import Direct

    if not (DIRECT_LAUNCH and key[-1].type == "cuda" and hasattr(compiled, "run")):
        return
    if len(_DIRECT) >= _DIRECT_KEPT:
        _DIRECT.clear()
    _DIRECT[key] = Direct(_k.quantize_groups_kernel, compiled, key[-1]).launcher(grid, args,
                                                                               ["x_ptr", "q_ptr", "s_ptr"])


def quantize(x: torch.Tensor, granularity: str = "tensor", dtype: torch.dtype = torch.float8_e4m3fn,
             *, impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a 2-D float tensor to FP8; return ``(q, scale)`` with ``x ~= q.float() * scale``.

    ``granularity`` is one of ``"tensor"``, ``"row"``, ``"1x128"``, ``"128x128"`` (module docstring);
    ``dtype`` is ``torch.float8_e4m3fn`` (default) or ``torch.float8_e5m2``. ``impl="auto"`` runs
    the Triton kernels for CUDA tensors and the torch reference for CPU tensors (the same bits,
    without the interpreter's slowness); ``"triton"`` or ``"torch"`` forces one. Under
    ``torch.compile`` the call is the operator ``torch.ops.fp8_tutorial.quantize``, but with
    ``impl="torch"``, whose torch operations are traced one by one.
    """
    _check(x, granularity, dtype)
    if impl not in ("auto", "triton", "torch"):
        raise ValueError(f"impl must be 'auto', 'triton' or 'torch', got {impl!r}")
    if torch.compiler.is_compiling() and impl != "torch":
        # one operator in the graph (its fake implementation gives the shapes); the torch
        # reference is traced as it is, torch operations that the compiler may fuse with others
        return torch.ops.fp8_tutorial.quantize(x, granularity, dtype, impl)
    return _quantize(x, granularity, dtype, impl)


def _quantize(x: torch.Tensor, granularity: str, dtype: torch.dtype, impl: str):
    # Not differentiable; and a lazily negated view (x.is_neg()) must be materialised, since the
    # kernels read raw memory.
    x = x.detach().resolve_neg()
    if impl == "auto":
        impl = "triton" if x.is_cuda else "torch"
    if impl == "torch":
        return _quantize_torch(x, granularity, dtype)
    return _quantize_triton(x, granularity, dtype)


def scale_shape(granularity: str, M: int, K: int) -> tuple[int, ...]:
    """The shape of ``quantize``'s scale for an (M, K) input (module docstring)."""
    return {"tensor": (), "row": (M, 1), "1x128": (M, K // GROUP), "128x128": (M // GROUP, K // GROUP)}[granularity]


@torch.library.custom_op("fp8_tutorial::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, granularity: str, dtype: torch.dtype, impl: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize(x, granularity, dtype, impl)


@_quantize_op.register_fake
def _(x, granularity, dtype, impl):
    _check(x, granularity, dtype)  # the checks that need no data, at trace time
    M, K = x.shape
    if granularity == "1x128":  # the real one's strides, M-major (the Triton kernel's padded)
        exact = impl == "torch" or impl == "auto" and x.device.type != "cuda"
        scale = m_major_scales(M, K // GROUP, x.device, x.new_empty_strided, align=1 if exact else 4)
    else:
        scale = x.new_empty(scale_shape(granularity, M, K), dtype=torch.float32)
    return x.new_empty((M, K), dtype=dtype), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``q * scale`` in ``dtype`` (float32, or float64 for exact products), the scale broadcast
    over its groups: any of the four layouts, or (1, N) / (K/128, N/128) for a (K, N) operand."""
    if not isinstance(q, torch.Tensor) or q.dtype not in FP8_DTYPES:
        raise TypeError(f"dequantize expects an FP8 tensor, got "
                        f"{q.dtype if isinstance(q, torch.Tensor) else type(q).__name__}")
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError("scale must be a float32 tensor")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dequantize computes in torch.float32 or torch.float64, got {dtype}")
    if scale.numel() == 0 or q.numel() == 0:
        raise ValueError(f"dequantize expects non-empty q and scale, got shapes {tuple(q.shape)} and {tuple(scale.shape)}")
    if q.dim() != 2:
        raise ValueError(f"dequantize expects a 2-D tensor, got shape {tuple(q.shape)}")
    M, K = q.shape
    if scale.dim() == 0 or scale.numel() == 1:
        return q.to(dtype) * scale.reshape(()).to(dtype)
    if scale.dim() != 2:
        raise ValueError(f"scale must have 0 or 2 dimensions, got shape {tuple(scale.shape)}")
    sm, sk = scale.shape
    if M % sm or K % sk:
        raise ValueError(f"a scale of shape {tuple(scale.shape)} does not tile a tensor of shape {(M, K)}")
    gm, gk = M // sm, K // sk
    return (q.to(dtype).reshape(sm, gm, sk, gk) * scale.to(dtype)[:, None, :, None]).reshape(M, K)
