"""Small M with the operands swapped: C^T = W @ A^T.

A ``wgmma`` is 64 rows tall: a kernel whose tile rows are the M rows of the activations wastes all
but M of them when M is 1 to 64, and its few tiles along N leave most SMs idle. Swapped, the
weight's N rows fill the instruction's 64-row side and the M tokens become its narrow side (8 to
256 wide). With so few tokens the product is a stream of the weight: each program reads a block of
BLOCK_N weight rows over a share of K, its tokens beside them, and the K loop is cut into SPLIT
pieces so that enough programs read at once to keep memory busy (the last piece of a tile to finish
adds the pieces up, as ``persistent.split_kernel`` does).

Scales are applied as everywhere else: per-tensor and per-row ones in the epilogue, block-wise ones
(DeepSeek-V3's recipe: ``scale_a`` (M, K/128), ``scale_b`` (K/128, N/128)) at every K block's
promotion, each block's product times its two scales, added in float32.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .._env import ON_GPU
from .common import mma
from .compat import DIRECT_LAUNCH
from .host import (Direct, Launch, Operands, PlanWorkspace, capability, fastest, fitting, forget_workspace,
                   sm_count, wide_offsets, workspace)


@triton.jit
def swapped_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr,
    M, N, K, SPLIT,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, BLOCKWISE: tl.constexpr, PRECISE: tl.constexpr,
    EVEN_K: tl.constexpr, STAGES: tl.constexpr,
):
    """Program (n, t, piece): output columns [n * BLOCK_N, + BLOCK_N) (W's rows) for tokens
    [t * BLOCK_T, + BLOCK_T) (A's rows), over piece ``piece`` of SPLIT equal shares of the K blocks.
    The float32 tile is held transposed, (BLOCK_N, BLOCK_T), and stored transposed into C.
    With SPLIT > 1 each piece's tile goes to its slot of ``partials`` (SPLIT slots per tile) and
    is counted in ``arrivals`` (one count per tile, zero before the launch and after it); the last
    piece to arrive sums the slots in piece order, so the result does not depend on who came last.
    BLOCKWISE: BLOCK_K is 128, one block of the scales, and BLOCK_N divides 128 (one weight block)."""
    pid_n = tl.program_id(0)
    pid_t = tl.program_id(1)
    piece = tl.program_id(2)
    k_blocks = tl.cdiv(K, BLOCK_K)
    k_first = piece * k_blocks // SPLIT
    k_last = (piece + 1) * k_blocks // SPLIT
    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # W's rows: the output's columns
    ts = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # A's rows: the output's rows
    ks = tl.arange(0, BLOCK_K)
    # rows past the edge wrap around (their results are never stored); K past the edge is masked
    w_ptrs = b_ptr + (ns % N)[:, None].to(tl.int64) * stride_bn + (k_first * BLOCK_K + ks)[None, :] * stride_bk
    x_ptrs = a_ptr + (ts % M)[:, None].to(tl.int64) * stride_am + (k_first * BLOCK_K + ks)[None, :] * stride_ak
    if BLOCKWISE:
        sx_ptrs = scale_a_ptr + (ts % M) * stride_sam + k_first * stride_sak  # the tokens' 1 x 128 groups
        sw_ptr = scale_b_ptr + (pid_n * BLOCK_N // 128) * stride_sbn + k_first * stride_sbk  # one block
    acc = tl.zeros((BLOCK_N, BLOCK_T), dtype=tl.float32)
    for k in tl.range(k_first, k_last, num_stages=STAGES):
        if EVEN_K:
            w = tl.load(w_ptrs)
            x = tl.load(x_ptrs)
        else:
            w = tl.load(w_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
            x = tl.load(x_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
        if BLOCKWISE:  # this block's sum, promoted with its scales
            scales = tl.load(sx_ptrs) * tl.load(sw_ptr)
            acc += tl.dot(w, x.T) * scales[None, :]
            sx_ptrs += stride_sak
            sw_ptr += stride_sbk
        else:
            acc = mma(w, x, acc, BLOCK_K, PRECISE)
        w_ptrs += BLOCK_K * stride_bk
        x_ptrs += BLOCK_K * stride_ak
    done = SPLIT == 1
    if SPLIT > 1:
        tile = pid_t * tl.num_programs(0) + pid_n
        offsets = tl.arange(0, BLOCK_N)[:, None] * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
        slots = partials_ptr + (tile * SPLIT).to(tl.int64) * (BLOCK_N * BLOCK_T) + offsets
        tl.store(slots + piece * (BLOCK_N * BLOCK_T), acc)
        tl.debug_barrier()  # every thread's part of the slot is written before the count
        done = tl.atomic_add(arrivals_ptr + tile, 1, sem="acq_rel") == SPLIT - 1
        if done:  # the last piece: sum all the slots, its own too, in piece order
            acc = tl.zeros((BLOCK_N, BLOCK_T), dtype=tl.float32)
            for q in range(SPLIT):
                acc += tl.load(slots + q * (BLOCK_N * BLOCK_T), cache_modifier=".cg")
            tl.atomic_xchg(arrivals_ptr + tile, 0)
    if done:
        if not BLOCKWISE:
            if ROW_A:
                acc = acc * tl.load(scale_a_ptr + ts, mask=ts < M, other=0.0)[None, :]
            else:
                acc = acc * tl.load(scale_a_ptr)
            if ROW_B:
                acc = acc * tl.load(scale_b_ptr + ns, mask=ns < N, other=0.0)[:, None]
            else:
                acc = acc * tl.load(scale_b_ptr)
        c_ptrs = c_ptr + ts[None, :].to(tl.int64) * stride_cm + ns[:, None] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(ts < M)[None, :] & (ns < N)[:, None])


# ---- configurations, plans and the launcher ------------------------------------------------------

#: The largest M the swapped kernel takes: its tokens are the ``wgmma``'s narrow side, one tile of
#: them. On the H200 (tools/swapped_sweep.py, results/swapped_h200.json), at M = 1, 16 and 64, it
#: was ahead of the Gluon kernels on all 60 cells timed and of cuBLAS on all but three per-tensor
#: fast ones (0.85 to 0.95x). At M = 128 it was behind both on most projections, with one tile of
#: 128 tokens (results/swapped_first_h200.json) and with two of 64 (tools/swapped_m128.py).
MAX_M = 64
#: Pieces per tile at most (keeps the slots' offsets far inside 32 bits).
MAX_SPLIT = 64


@dataclasses.dataclass(frozen=True)
class SwappedConfig:
    """One way to run ``swapped_kernel``: its tile (BLOCK_N weight rows by BLOCK_T tokens, BLOCK_K
    deep), the pieces each tile's K loop is cut into, the stages of its load pipeline and its warps."""

    BLOCK_N: int
    BLOCK_T: int
    BLOCK_K: int = 128
    SPLIT: int = 1
    STAGES: int = 4
    num_warps: int = 4

    def describe(self) -> str:
        return (f"swapped, {self.BLOCK_N}x{self.BLOCK_T}x{self.BLOCK_K} tiles (weight rows x tokens x K), "
                f"K cut in {self.SPLIT}, {self.STAGES} stages, {self.num_warps} warps")


def token_block(M: int) -> int:
    """The tokens of a tile: M rounded up to a power of two, from 16 (``tl.dot``'s least) to MAX_M."""
    return min(MAX_M, max(16, triton.next_power_of_2(M)))


def splits(tiles: int, k_blocks: int, programs: int) -> list[int]:
    """The pieces per tile worth timing: about one, two and four programs per SM in all, at most
    one K block per piece and MAX_SPLIT pieces."""
    top = min(k_blocks, MAX_SPLIT)
    return sorted({max(1, min(top, round(per_sm * programs / tiles))) for per_sm in (1, 2, 4)})


def candidates(M: int, N: int, K: int, num_sms: int, block: bool) -> list[SwappedConfig]:
    """The configurations a problem's first call times: 64 or 128 weight rows a tile, each with
    ``splits``, 4 stages, and 6 too for up to 32 tokens (on the H200 up to 10% faster there)."""
    T = token_block(M)
    out = []
    for BN in (64, 128):
        tiles = triton.cdiv(N, BN) * triton.cdiv(M, T)
        for s in splits(tiles, triton.cdiv(K, 128), num_sms):
            for stages in ((4, 6) if T <= 32 else (4,)):
                out.append(SwappedConfig(BN, T, 128, s, stages))
    return out


#: The configuration in the interpreter (small tiles; block-wise scales need K steps of 128).
def interpreter_config(M: int, N: int, K: int, block: bool) -> SwappedConfig:
    k_blocks = triton.cdiv(K, 128 if block else 32)
    return SwappedConfig(32, 16, 128 if block else 32, min(2, k_blocks), 1)


def check_swapped_config(config: SwappedConfig, block: bool) -> None:
    """A configuration given by hand, checked before Triton sees it."""
    if not isinstance(config, SwappedConfig):
        raise TypeError(f"config must be a swapped.SwappedConfig, got {type(config).__name__}")
    for name, low in (("BLOCK_N", 16), ("BLOCK_T", 16), ("BLOCK_K", 32)):  # an FP8 dot is 32 deep at least
        v = getattr(config, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < low or v & (v - 1):
            raise ValueError(f"{name} must be a power of two of at least {low}, got {v!r}")
    if config.BLOCK_T > MAX_M:
        raise ValueError(f"BLOCK_T must be at most {MAX_M}, got {config.BLOCK_T}")
    for name, low, high in (("SPLIT", 1, MAX_SPLIT), ("STAGES", 1, 8)):
        v = getattr(config, name)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"{name} must be an int from {low} to {high}, got {v!r}")
    if config.num_warps not in (4, 8):
        raise ValueError(f"num_warps must be 4 or 8, got {config.num_warps!r}")
    if block and (config.BLOCK_K != 128 or 128 % config.BLOCK_N):
        raise ValueError("with block-wise scales a K step is one 128-wide block of the scales (BLOCK_K = 128) "
                         f"and a tile lies within one weight block (BLOCK_N divides 128); got BLOCK_K "
                         f"{config.BLOCK_K}, BLOCK_N {config.BLOCK_N}")


def swapped_takes(ops: Operands, out: torch.Tensor) -> str | None:
    """Why the swapped kernel cannot take these operands, or None."""
    if ops.M > MAX_M:
        return (f"the swapped kernel is for M up to {MAX_M} (its tokens are the tensor cores' narrow side); "
                f"M is {ops.M}")
    if ops.a.is_cuda and capability(ops.a.device) < (8, 9):
        return "FP8 tensor cores need compute capability 8.9 or newer"
    wide = [name for name, w in zip(("a", "b", "out"), wide_offsets(ops, out)) if w]
    if wide:  # the other pointer kernels copy such tensors (host.pointer_safe); a plan could not
        return (f"the swapped kernel steps with 32-bit offsets, and {', '.join(wide)} "
                f"{'is' if len(wide) == 1 else 'are'} strided too widely for them (see host.wide_offsets)")
    return None


def _is_block(ops: Operands) -> bool:
    return ops.recipe_a == "block"  # check_operands makes both sides block-wise, or neither


def _flags(ops: Operands, precise: bool) -> dict:
    if _is_block(ops):  # promoted at every K block with its scales, whatever ``precise`` says
        return dict(ROW_A=False, ROW_B=False, BLOCKWISE=True, PRECISE=True)
    return dict(ops.flags(precise), BLOCKWISE=False)


def _arguments(ops: Operands, out: torch.Tensor, cfg: SwappedConfig, flags: dict):
    """The grid, the workspace's size (partial elements, counts) and the kernel's arguments but its
    tensors and workspace, as keywords."""
    grid = (triton.cdiv(ops.N, cfg.BLOCK_N), triton.cdiv(ops.M, cfg.BLOCK_T), cfg.SPLIT)
    tiles = grid[0] * grid[1]
    space = (tiles * cfg.SPLIT * cfg.BLOCK_N * cfg.BLOCK_T, tiles) if cfg.SPLIT > 1 else (0, 0)
    if _is_block(ops):
        (sam, sak), (sbk, sbn) = ops.scale_a.stride(), ops.scale_b.stride()
    else:
        sam = sak = sbk = sbn = 0
    fixed = dict(M=ops.M, N=ops.N, K=ops.K, SPLIT=cfg.SPLIT,
                 stride_am=ops.a.stride(0), stride_ak=ops.a.stride(1), stride_bk=ops.b.stride(0),
                 stride_bn=ops.b.stride(1), stride_cm=out.stride(0), stride_cn=out.stride(1),
                 stride_sam=sam, stride_sak=sak, stride_sbk=sbk, stride_sbn=sbn,
                 BLOCK_N=cfg.BLOCK_N, BLOCK_T=cfg.BLOCK_T, BLOCK_K=cfg.BLOCK_K, EVEN_K=ops.K % cfg.BLOCK_K == 0,
                 STAGES=cfg.STAGES, **flags)
    return grid, space, fixed


def _scales(ops: Operands) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise scales are read through their strides; the others one after another."""
    return (ops.scale_a, ops.scale_b) if _is_block(ops) else ops.packed_scales


def _run(ops: Operands, out: torch.Tensor, cfg: SwappedConfig, flags: dict):
    grid, space, fixed = _arguments(ops, out, cfg, flags)
    partials, arrivals = workspace(out.device, *space) if cfg.SPLIT > 1 else (out, out)
    try:
        return swapped_kernel[grid](ops.a, ops.b, out, *_scales(ops), partials, arrivals, **fixed,
                                    num_warps=cfg.num_warps)
    except BaseException:
        forget_workspace(out.device)  # a launch cut short may leave counts behind
        raise


# Which configuration was chosen for each bucket of problems seen on this GPU.
CHOICES: dict[tuple, SwappedConfig] = {}


def choose_swapped_config(ops: Operands, out: torch.Tensor, precise: bool) -> SwappedConfig:
    """The configuration kept for this problem's bucket (M rounded up as ``token_block`` does, N, K,
    recipe, accumulation, dtypes, SMs): on its bucket's first call every one of ``candidates`` that
    fits the GPU is timed and the fastest kept; in the interpreter, ``interpreter_config``."""
    block = _is_block(ops)
    if not out.is_cuda:
        return interpreter_config(ops.M, ops.N, ops.K, block)
    flags = _flags(ops, precise)
    key = choice_key(ops, out, precise)
    if key not in CHOICES:
        def run(c):
            return _run(ops, out, c, flags)
        CHOICES[key] = fastest(fitting(candidates(ops.M, ops.N, ops.K, sm_count(out.device), block), run), run)
    return CHOICES[key]


def choice_key(ops: Operands, out: torch.Tensor, precise: bool) -> tuple:
    """The bucket ``CHOICES`` keeps a problem's configuration under."""
    flags = _flags(ops, precise)
    return (token_block(ops.M), ops.N, ops.K, flags["ROW_A"], flags["ROW_B"], flags["BLOCKWISE"], flags["PRECISE"],
            sm_count(out.device), ops.a.dtype, ops.b.dtype, out.dtype)


def launch_swapped(ops: Operands, out: torch.Tensor, precise: bool, config: SwappedConfig | None = None) -> Launch:
    """Run ``swapped_kernel`` into ``out``: with ``config``, or the one chosen for the problem's
    bucket (``choose_swapped_config``). ValueError where ``swapped_takes`` says no or the
    configuration is wrong for these operands."""
    why = swapped_takes(ops, out)
    if why:
        raise ValueError(why)
    if config is None:
        config = choose_swapped_config(ops, out, precise)
    check_swapped_config(config, _is_block(ops))
    compiled = _run(ops, out, config, _flags(ops, precise))
    return Launch(config, compiled if ON_GPU else None)


def prepare_swapped(ops: Operands, out: torch.Tensor, precise: bool):
    """A problem's first call (``gemm.register_kernel``'s ``prepare``): run it, and return (its
    configuration, what later calls of the same signature run): the compiled kernel launched
    directly (``host.Direct``) where Triton's launcher is laid out as that expects."""
    done = launch_swapped(ops, out, precise)
    cfg, compiled, flags = done.config, done.kernel, _flags(ops, precise)
    recipes = ops.recipe_a, ops.recipe_b
    if not DIRECT_LAUNCH:
        def launch_jit(a, b, scale_a, scale_b, c):
            _run(Operands(a, b, scale_a, scale_b, *recipes), c, cfg, flags)
        return cfg, launch_jit
    grid, space, fixed = _arguments(ops, out, cfg, flags)
    kernel = Direct(swapped_kernel, compiled, out.device)
    # the scales as the first call read them: block-wise ones through the strides the plan's key
    # holds, the others contiguous (the plan packs them where they are not), so their addresses
    tensors = ["a_ptr", "b_ptr", "c_ptr", "scale_a_ptr", "scale_b_ptr"]
    if cfg.SPLIT == 1:  # the workspace is never touched
        launch = kernel.launcher(grid, dict(fixed, partials_ptr=0, arrivals_ptr=0), tensors)

        def launch_again(a, b, scale_a, scale_b, c):
            launch(a, b, c, scale_a, scale_b)
        return cfg, launch_again
    launch = kernel.launcher(grid, fixed, tensors + ["partials_ptr", "arrivals_ptr"])
    space_of = PlanWorkspace(out.device, *space)

    def launch_again(a, b, scale_a, scale_b, c):
        launch(a, b, c, scale_a, scale_b, *space_of())
    return cfg, launch_again
