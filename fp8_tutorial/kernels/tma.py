"""A persistent FP8 GEMM whose loads and stores go through TMA tensor descriptors.

Hopper's Tensor Memory Accelerator copies a whole box (a tile) between global and shared memory
from one instruction, computing addresses and bounds itself: boxes past the edge of the tensor are
zero-filled on load and clipped on store, so the kernel needs neither wrapped indices nor masks.
The descriptors are built on the device (``tl.make_tensor_descriptor``, which needs a scratch
allocator: ``triton.set_allocator``) or on the host (``TensorDescriptor.from_tensor``). TMA wants
every stride but the last to be a multiple of 16 bytes and the base 16-byte aligned;
``tma_refuses`` checks that before launching.
"""

import torch
import triton
import triton.language as tl

from .common import accumulate_k_tma, grouped_tile, operand_sources, scale_epilogue
from .host import (Launch, Operands, autotuned, capability, ensure_allocator, epilogue_scales_only, fastest,
                   fit_stages, launch, persistent_grid, pipeline_smem, programs, prune_to_smallest)


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


# ---- what TMA refuses ------------------------------------------------------------------------------

def tma_refuses(ops: Operands, out: torch.Tensor) -> str | None:
    """Why TMA cannot read these operands or write this output, or None: the 16-byte rule."""
    why = epilogue_scales_only("tma")(ops, out)
    if why:
        return why
    if ops.a.is_cuda and capability(ops.a.device) < (9, 0):
        return "TMA needs a Hopper GPU (compute capability 9.0) or newer"
    for name, t, row_stride in (("a", ops.a, ops.a.stride(0)), ("b.T", ops.b.t(), ops.b.stride(1)),
                                ("out", out, out.stride(0))):
        if t.stride(1) != 1:
            major = "K-major (b = w.t() of an (N, K) tensor w)" if name == "b.T" else "row-major"
            return f"TMA reads and writes by rows: {name} must be {major}, got strides {tuple(t.stride())}"
        if t.data_ptr() % 16:
            return f"TMA needs 16-byte aligned data: {name} starts {t.data_ptr() % 16} bytes past a 16-byte boundary"
        if (row_stride * t.element_size()) % 16:
            return f"TMA needs 16-byte aligned rows: {name} has rows {row_stride * t.element_size()} bytes apart"
    return None


def _zero_row_stride(ops: Operands) -> str | None:
    """An expanded operand (every row the same memory) is valid input, but not for TMA, which
    wants distinct rows: the kernels that load through pointers take it."""
    for name, stride in (("a", ops.a.stride(0)), ("b.T", ops.b.stride(1))):
        if stride == 0:
            return f"TMA needs distinct rows: {name} is an expanded view (row stride 0); .contiguous() makes it one"
    return None


def tma_takes(ops: Operands, out: torch.Tensor) -> str | None:
    return tma_refuses(ops, out) or _zero_row_stride(ops)


def tma_setup(ops: Operands, out: torch.Tensor, num_sms, config: triton.Config | None) -> int:
    """What every launch through TMA does first: refuse what the 16-byte rule refuses, give Triton
    the scratch allocator that device-side descriptors need, and return the SM count to plan for."""
    why = tma_refuses(ops, out)
    if why:
        raise ValueError(why)
    ensure_allocator()
    return programs(out, num_sms, config)


# ---- configurations and the launcher ---------------------------------------------------------------

def tma_config(bm, bn, bk, warps, stages, per_sm, group_m=8, flatten=True, halves=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "PROGRAMS_PER_SM": per_sm,
                          "FLATTEN": flatten, "EPILOGUE_HALVES": halves},
                         num_warps=warps, num_stages=stages)


# From a sweep of 14 configurations on the nine shapes (H200): each is the best on some of them.
# The first is the default for host-side descriptors.
TMA_CONFIGS = [tma_config(128, 256, 128, 8, 4, 1, halves=True), tma_config(128, 128, 128, 8, 6, 1),
               tma_config(128, 256, 128, 8, 3, 1, group_m=16)]
TMA_INTERPRETER_CONFIG = tma_config(32, 32, 32, 4, 1, 1, group_m=4, flatten=False)


def tma_shared_bytes(config: triton.Config, out_bytes: int) -> int:
    """Shared memory of a TMA kernel's program: the ring of operand tiles plus the staging buffer
    of the TMA store (half a tile with EPILOGUE_HALVES), plus 1 KiB for barriers. It matched what
    the compiler allocated on the H200 (224 KiB for 128x256x128, 4 stages, halves, bf16)."""
    k = config.kwargs
    staging = k["BLOCK_M"] * k["BLOCK_N"] * out_bytes // (2 if k.get("EPILOGUE_HALVES") else 1)
    return pipeline_smem(k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], config.num_stages) + staging + 1024


def fit_tma_config(config: triton.Config, out_bytes: int) -> triton.Config:
    """``config`` with as many pipeline stages as fit in a program's shared memory for an output of
    ``out_bytes`` per element (a float32 output needs twice the staging buffer of bf16)."""
    return fit_stages(config, out_bytes, tma_shared_bytes)


def prune_tma(configs, named_args, **kwargs):
    """``prune_to_smallest``, then each configuration cut to the stages that fit with this output's
    dtype."""
    out_bytes = named_args["c_ptr"].element_size()
    fitted = {}
    for c in prune_to_smallest(configs, named_args):
        f = fit_tma_config(c, out_bytes)
        fitted.setdefault((tuple(sorted(f.kwargs.items())), f.num_warps, f.num_stages), f)
    return list(fitted.values())


_tma_tuned = autotuned(tma_kernel, TMA_CONFIGS, [], prune=prune_tma)
TUNERS = {"tma": _tma_tuned}


def tma_args(ops: Operands, out: torch.Tensor, num_sms: int) -> tuple:
    """The arguments ``tma_kernel`` and ``ws_kernel`` take before their constexprs."""
    return (ops.a, ops.b, out, *ops.packed_scales, ops.M, ops.N, ops.K, num_sms, ops.a.stride(0), ops.b.stride(1),
            out.stride(0))


def tma_host_descriptors(ops: Operands, out: torch.Tensor, meta: dict) -> tuple:
    """Host-side descriptors of A, W and C for ``tma_host_kernel``, boxes of ``meta``'s tiles."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    slice_n = meta["BLOCK_N"] // 2 if meta["EPILOGUE_HALVES"] else meta["BLOCK_N"]
    return (TensorDescriptor.from_tensor(ops.a, [meta["BLOCK_M"], meta["BLOCK_K"]]),
            TensorDescriptor.from_tensor(ops.b.t(), [meta["BLOCK_N"], meta["BLOCK_K"]]),
            TensorDescriptor.from_tensor(out, [meta["BLOCK_M"], slice_n]))


# Which descriptors and configuration launch_tma chose for each problem seen on this GPU:
# key -> (host-side descriptors?, configuration).
ROUTES: dict[tuple, tuple[bool, triton.Config]] = {}


def launch_tma(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
               num_sms: int | None = None, host_descriptors: bool = False) -> Launch:
    """Run the TMA kernel into ``out``; raises ValueError where ``tma_refuses`` says TMA cannot
    take the operands. With ``config``, ``tma_kernel`` (descriptors built on the device) runs it,
    or ``tma_host_kernel`` (descriptors built here) with ``host_descriptors``; host-side
    descriptors without a configuration take the first one. With neither, on a GPU, the first
    launch for a problem times both routes (device-side descriptors with the autotuner's choice,
    host-side ones with each configuration) and keeps the faster for the problem."""
    num_sms = tma_setup(ops, out, num_sms, config)
    M, N, K = ops.M, ops.N, ops.K
    flags = ops.flags(precise)
    grid = persistent_grid(M, N, num_sms)

    def on_device(cfg):
        return launch(tma_kernel, _tma_tuned, TMA_INTERPRETER_CONFIG, grid, tma_args(ops, out, num_sms), flags, cfg)

    def on_host(cfg):
        descriptors = tma_host_descriptors(ops, out, cfg.kwargs)
        return launch(tma_host_kernel, None, cfg, grid, (*descriptors, *ops.packed_scales, M, N, K, num_sms),
                      flags, cfg)

    if host_descriptors:
        if config is None:
            config = fit_tma_config(TMA_CONFIGS[0], out.element_size()) if _tma_tuned is not None else TMA_INTERPRETER_CONFIG
        return on_host(config)
    if config is not None or _tma_tuned is None:
        return on_device(config)
    key = (M, N, K, *flags.values(), num_sms, ops.a.dtype, out.dtype)
    if key not in ROUTES:
        candidates = [(False, on_device(None).config)]  # the autotuner's choice, device-side descriptors
        candidates += [(True, c) for c in prune_tma(TMA_CONFIGS, dict(M=M, N=N, c_ptr=out))]
        ROUTES[key] = fastest(candidates, lambda route: (on_host if route[0] else on_device)(route[1]))
    host, chosen = ROUTES[key]
    return on_host(chosen) if host else on_device(chosen)
