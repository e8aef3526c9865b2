"""A persistent FP8 GEMM: one program per SM (or a few), each walking many output tiles.

The same tiles, loads and epilogue as ``tiled.py``; what changes is the schedule. The grid holds
``num_programs`` = min(tiles, SMs x PROGRAMS_PER_SM) programs, and program ``p`` computes tiles
``p``, ``p + num_programs``, ... in grouped order, so the GPU never launches, drains and refills a
wave: each program's pipeline runs from its first tile to its last.

Two more schedules of the same tiles live here: stream-K (``streamk_kernel``: the K steps of all
tiles shared equally by the programs, partial tiles fixed up) and split-K in step
(``split_kernel``: full waves of whole tiles, then the last tiles cut along K). Their
configurations and launchers follow the kernels.
"""

import functools

import torch
import triton
import triton.language as tl

from .common import accumulate_k, accumulate_k_tma, grouped_tile, operand_sources, scale_epilogue
from .host import (Launch, Operands, autotuned, ensure_allocator, forget_workspace, launch,
                   persistent_grid, pointer_safe, programs, prune_to_smallest, tile_count, workspace)
from .tma import tma_takes


@triton.jit
def _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, rows, cols, M, N, stride_cm, stride_cn,
                ROW_A: tl.constexpr, ROW_B: tl.constexpr):
    """Scale the float32 tile of C's ``rows`` and ``cols``, convert it to C's type and store it."""
    out = scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=(rows < M)[:, None] & (cols < N)[None, :])


@triton.jit
def persistent_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K, num_sms,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr, EVEN_K: tl.constexpr,
    PROGRAMS_PER_SM: tl.constexpr, FLATTEN: tl.constexpr,
):
    """C[M, N] = scale(A[M, K] @ B[K, N]); edges, K masks and accumulation as in ``tiled_kernel``
    (``accumulate_k`` holds its K loop).

    FLATTEN lets the compiler pipeline across tile boundaries: the loads of a program's next tile
    start while the current one finishes. The epilogue recomputes its tile's coordinates from its
    own counter (``tile_c``), so that it depends on nothing the next tile's loads change.
    """
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    num_programs = tl.minimum(num_tiles, num_sms * PROGRAMS_PER_SM)  # the grid's size, too
    k_blocks = tl.cdiv(K, BLOCK_K)
    tile_c = tl.program_id(0) - num_programs
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = accumulate_k(a_ptr, b_ptr, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                           0, k_blocks, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K)

        tile_c += num_programs
        pid_m, pid_n = grouped_tile(tile_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, rows, cols, M, N, stride_cm, stride_cn, ROW_A, ROW_B)


@triton.jit
def _streamk_first_program(it, total, num_programs):
    """The program whose share of the iterations holds iteration ``it``: shares are
    [p * total // P, (p + 1) * total // P), so it is the largest p with p * total // P <= it.
    Computed in int64, so that the products cannot overflow."""
    return (((it.to(tl.int64) + 1) * num_programs + total - 1) // total - 1).to(tl.int32)


@triton.jit
def _streamk_product(a_src, b_src, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, k_first, k_last,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PRECISE: tl.constexpr, EVEN_K: tl.constexpr, TMA: tl.constexpr):
    """Tile (pid_m, pid_n)'s product over K blocks [k_first, k_last): through descriptors (TMA) or
    pointers."""
    if TMA:
        return accumulate_k_tma(a_src, b_src, pid_m * BLOCK_M, pid_n * BLOCK_N, k_first, k_last,
                                BLOCK_M, BLOCK_N, BLOCK_K, PRECISE)
    else:
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        return accumulate_k(a_src, b_src, rows, cols, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            k_first, k_last, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K)


@triton.jit
def streamk_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr,
    M, N, K, num_sms, LANES,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr, EVEN_K: tl.constexpr,
    DATA_PARALLEL: tl.constexpr = False, TMA: tl.constexpr = False,
):
    """Stream-K: the K iterations of all tiles, laid end to end, shared equally by the programs.

    A program's share starts and ends anywhere inside a tile. A tile computed by one program is
    stored directly. A tile split between programs is fixed up by the last of them to finish: each
    writes its float32 partial tile to its own slot of ``partials`` (slot 2p for the first tile of
    program p's share, 2p + 1 for its last), then counts itself in ``arrivals[tile]``; the one that
    completes the count sums the slots of all the tile's programs in order (the sum is the same
    whichever arrives last), applies the epilogue, stores, and resets the count to zero.
    ``arrivals`` must be zero before the launch.

    DATA_PARALLEL first hands out whole tiles, one per program, for all full waves but the last;
    only the tiles left after them (between one and two waves' worth) are shared by K iterations.
    TMA loads A and W through descriptors built here (A and W K-major, rows 16-byte aligned).

    With LANES > 1 (one per row of tiles, without DATA_PARALLEL) the programs form lanes: program
    p is in lane p % LANES, and each lane shares out the K iterations of its own row of tiles
    alone, so the programs at one place of every lane are neighbours that read the same block of W
    at the same time.
    """
    k_blocks = tl.cdiv(K, BLOCK_K)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    lane_tiles = num_tiles // LANES  # with LANES > 1, one row of tiles
    in_lane = tl.minimum(num_sms // LANES, lane_tiles * k_blocks)  # programs per lane: none without work
    num_programs = in_lane * LANES  # the grid's size
    pid = tl.program_id(0)
    lane = pid % LANES
    a_src, b_src = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, TMA)
    dp_tiles = 0
    if DATA_PARALLEL:
        dp_tiles = tl.maximum(num_tiles // num_programs - 1, 0) * num_programs
        for tile in range(pid, dp_tiles, num_programs):
            pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc = _streamk_product(a_src, b_src, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                   0, k_blocks, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K, TMA)
            _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, rows, cols, M, N, stride_cm, stride_cn, ROW_A, ROW_B)

    # the rest: the lane's iterations, numbered from its first tile after the data-parallel ones
    total = (lane_tiles - dp_tiles).to(tl.int64) * k_blocks
    place = pid // LANES  # this program's place in its lane
    start = (place * total // in_lane).to(tl.int32)
    end = ((place + 1) * total // in_lane).to(tl.int32)
    tile_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    it = start
    while it < end:
        tile = it // k_blocks  # counted from dp_tiles, in the lane
        k_first = it % k_blocks
        k_last = tl.minimum(k_blocks, k_first + end - it)
        if LANES == 1:
            pid_m, pid_n = grouped_tile(dp_tiles + tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        else:
            pid_m, pid_n = lane, tile
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = _streamk_product(a_src, b_src, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               k_first, k_last, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K, TMA)

        whole = (k_first == 0) & (k_last == k_blocks)
        if not whole:
            slot = 2 * pid + (it != start).to(tl.int32)
            tl.store(partials_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + tile_offsets, acc)
            tl.debug_barrier()  # every thread's part of the slot is written before the count
            first = _streamk_first_program(tile * k_blocks, total, in_lane)  # places in the lane
            last = _streamk_first_program((tile + 1) * k_blocks - 1, total, in_lane)
            arrivals = arrivals_ptr + tile * LANES + lane
            arrived = tl.atomic_add(arrivals, 1, sem="acq_rel")
            whole = arrived == last - first
            if whole:  # the last to finish: sum every program's slot, in program order
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(first, last + 1):
                    q_first_tile = ((q * total // in_lane) // k_blocks).to(tl.int32)
                    q_slot = 2 * (q * LANES + lane) + (tile != q_first_tile).to(tl.int32)
                    acc += tl.load(partials_ptr + q_slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + tile_offsets,
                                   cache_modifier=".cg")
                tl.atomic_xchg(arrivals, 0)
        if whole:
            _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, rows, cols, M, N, stride_cm, stride_cn, ROW_A, ROW_B)
        it += k_last - k_first


@triton.jit
def split_unit(unit, WHOLE_TILES, SPLIT, rest, k_blocks):
    """Unit ``unit`` of split-K in step (``split_kernel``): a whole tile below WHOLE_TILES, else
    piece (unit - WHOLE_TILES) // rest of tile WHOLE_TILES + (unit - WHOLE_TILES) % rest, one of
    SPLIT cut at the same K boundaries in every tile. Returns (tile, piece, pieces, first K block,
    last K block + 1)."""
    whole = unit < WHOLE_TILES
    cut = tl.maximum(unit - WHOLE_TILES, 0)  # no tile is cut where rest is 0
    piece = tl.where(whole, 0, cut // tl.maximum(rest, 1))
    pieces = tl.where(whole, 1, SPLIT)
    tile = tl.where(whole, unit, WHOLE_TILES + cut % tl.maximum(rest, 1))
    return tile, piece, pieces, piece * k_blocks // pieces, (piece + 1) * k_blocks // pieces


@triton.jit(do_not_specialize=["WHOLE_TILES", "SPLIT"])  # one compilation serves every plan
def split_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr,
    M, N, K, num_sms, WHOLE_TILES, SPLIT,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr, EVEN_K: tl.constexpr,
    TMA: tl.constexpr = False,
):
    """Split-K in step: the first WHOLE_TILES tiles (in grouped order) computed whole, then every
    other tile's K blocks cut into SPLIT pieces at the same boundaries, the pieces handed out in K
    order (the first piece of each of those tiles, then each second piece, ...). Units of work (a
    whole tile or a piece) go to the programs in turn, program p taking units p, p + P, ...

    Programs that run together thus read one or two K slices of A and W, where stream-K's shares
    start anywhere in K (chapter 05 measures what that buys, and what the pieces cost). A piece's
    float32 partial tile goes to
    its own slot of ``partials``; the last piece of a tile to finish (counted in ``arrivals``, which
    it resets to zero) sums the tile's slots in piece order, its own included, so the result does
    not depend on the order of arrival. ``arrivals`` must be zero before the launch, and at least
    one tile must be left to split (WHOLE_TILES < tiles).
    """
    k_blocks = tl.cdiv(K, BLOCK_K)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    rest = num_tiles - WHOLE_TILES
    units = WHOLE_TILES + rest * SPLIT
    num_programs = tl.minimum(num_sms, units)  # the grid's size
    a_src, b_src = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, TMA)
    tile_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    for unit in range(tl.program_id(0), units, num_programs):
        tile, piece, pieces, k_first, k_last = split_unit(unit, WHOLE_TILES, SPLIT, rest, k_blocks)
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _streamk_product(a_src, b_src, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               k_first, k_last, BLOCK_M, BLOCK_N, BLOCK_K, PRECISE, EVEN_K, TMA)
        done = pieces == 1
        if pieces > 1:
            split_tile = tile - WHOLE_TILES
            slots = partials_ptr + (split_tile * SPLIT).to(tl.int64) * (BLOCK_M * BLOCK_N) + tile_offsets
            tl.store(slots + piece * (BLOCK_M * BLOCK_N), acc)
            tl.debug_barrier()  # every thread's part of the slot is written before the count
            done = tl.atomic_add(arrivals_ptr + split_tile, 1, sem="acq_rel") == SPLIT - 1
            if done:  # the last piece to finish: sum all the slots, its own too, in piece order
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(SPLIT):
                    acc += tl.load(slots + q * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
                tl.atomic_xchg(arrivals_ptr + split_tile, 0)
        if done:
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, rows, cols, M, N, stride_cm, stride_cn, ROW_A, ROW_B)


# ---- the persistent kernel's configurations and launcher -------------------------------------------

def persistent_config(bm, bn, bk, warps, stages, per_sm, group_m=8, flatten=True):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "PROGRAMS_PER_SM": per_sm, "FLATTEN": flatten}, num_warps=warps, num_stages=stages)


# From a sweep of 6 configurations on the nine shapes (H200): each is the best on some of them.
PERSISTENT_CONFIGS = [persistent_config(128, 128, 128, 4, 3, 2), persistent_config(128, 128, 128, 4, 6, 1),
                      persistent_config(128, 256, 128, 8, 3, 1)]
PERSISTENT_INTERPRETER_CONFIG = persistent_config(32, 32, 32, 4, 1, 1, group_m=4, flatten=False)
_persistent_tuned = autotuned(persistent_kernel, PERSISTENT_CONFIGS, ["EVEN_K"], prune=prune_to_smallest)


def launch_persistent(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                      num_sms: int | None = None) -> Launch:
    """Run ``persistent_kernel`` into ``out``: autotuned on a GPU unless ``config`` is given.

    ``num_sms`` (default: the GPU's, 4 in the interpreter) sets the grid: min(tiles, num_sms x
    PROGRAMS_PER_SM) programs.
    """
    M, N, K = ops.M, ops.N, ops.K
    num_sms = programs(out, num_sms, config)
    ops, c = pointer_safe(ops, out)
    args = (ops.a, ops.b, c, *ops.packed_scales, M, N, K, num_sms,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    done = launch(persistent_kernel, _persistent_tuned, PERSISTENT_INTERPRETER_CONFIG,
                  persistent_grid(M, N, num_sms), args, ops.flags(precise), config, K)
    if c is not out:
        out.copy_(c)
    return done


# ---- stream-K ------------------------------------------------------------------------------------

def streamk_config(bm, bn, bk, warps, stages, group_m=8, data_parallel=False, tma=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "DATA_PARALLEL": data_parallel, "TMA": tma}, num_warps=warps, num_stages=stages)


# From a sweep on the nine shapes (H200): the best of 6 through pointers (128x256 tiles spill there
# with 8 warps) and of 14 with TMA loads (chapter 06), where the 16-byte rule holds.
STREAMK_CONFIGS = [streamk_config(128, 128, 128, 4, 4, data_parallel=True), streamk_config(128, 128, 128, 4, 6)]
STREAMK_TMA_CONFIGS = [streamk_config(128, 128, 128, 8, 6, data_parallel=True, tma=True),
                       streamk_config(128, 256, 128, 8, 4, data_parallel=True, tma=True),
                       streamk_config(128, 128, 128, 8, 6, tma=True)]
STREAMK_INTERPRETER_CONFIG = streamk_config(32, 32, 32, 4, 1, group_m=4)
STREAMK_TMA_INTERPRETER_CONFIG = streamk_config(32, 32, 32, 4, 1, group_m=4, tma=True)
_streamk_tuned = autotuned(streamk_kernel, STREAMK_CONFIGS, ["EVEN_K"], prune=prune_to_smallest)
_streamk_tma_tuned = autotuned(streamk_kernel, STREAMK_TMA_CONFIGS, ["EVEN_K"], prune=prune_to_smallest)
TUNERS = {"persistent": _persistent_tuned, "streamk": _streamk_tuned, "streamk-tma": _streamk_tma_tuned}


def _launch_meeting(kernel, tuned, interpreter_config: triton.Config | None, grid, ops: Operands, out: torch.Tensor,
                    precise: bool, space: tuple[int, int], schedule_args: tuple,
                    config: triton.Config | None) -> Launch:
    """Launch a kernel whose programs meet over partial tiles (stream-K, split-K in step): the
    workspace of ``space`` = (partial elements, counts), the usual operands, then
    ``schedule_args`` and the strides. C is stored through pointers, TMA or not."""
    flags = ops.flags(precise)
    partials, arrivals = workspace(out.device, *space)
    ops, c = pointer_safe(ops, out)
    args = (ops.a, ops.b, c, *ops.packed_scales, partials, arrivals, ops.M, ops.N, ops.K, *schedule_args,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    try:
        done = launch(kernel, tuned, interpreter_config, grid, args, flags, config, ops.K)
    except BaseException:
        forget_workspace(out.device)
        raise
    if c is not out:
        out.copy_(c)
    return done


def launch_streamk(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                   num_sms: int | None = None, tma: bool | None = None, lanes: bool = False) -> Launch:
    """Run ``streamk_kernel`` into ``out`` with one program per SM (``num_sms``: default the GPU's,
    4 in the interpreter), never more programs than K iterations in all. Without ``config``, the
    loads go through TMA where ``tma_refuses`` allows it (``tma`` True or False forces the choice;
    True raises ValueError where TMA cannot take the operands). With ``lanes``, one lane of programs
    per row of tiles (as many programs in each as ``num_sms`` allows for all): it needs a
    ``config`` without DATA_PARALLEL and at least as many programs as rows of tiles, else
    ValueError."""
    M, N, K = ops.M, ops.N, ops.K
    num_sms = programs(out, num_sms, config)
    count = 1  # lanes of programs
    if lanes:
        if config is None or config.kwargs.get("DATA_PARALLEL"):
            raise ValueError("lanes need a configuration without DATA_PARALLEL (persistent.streamk_config(...))")
        count = triton.cdiv(M, config.kwargs["BLOCK_M"])  # one per row of tiles
        if count > num_sms:
            raise ValueError(f"lanes need a program per row of tiles at least: {count} rows of "
                             f"{config.kwargs['BLOCK_M']}, {num_sms} programs")
    why = tma_takes(ops, ops.a)  # only A and W go through TMA: A stands in for C
    if config is not None:
        if tma is not None and bool(tma) != bool(config.kwargs.get("TMA")):
            raise ValueError(f"tma={tma} contradicts the configuration's TMA={config.kwargs.get('TMA')}")
        tma = bool(config.kwargs.get("TMA"))
    elif tma is None:
        tma = why is None
    if tma and why:
        raise ValueError(why)
    if tma:
        ensure_allocator()
    tuned, interpreter_config = (_streamk_tma_tuned, STREAMK_TMA_INTERPRETER_CONFIG) if tma \
        else (_streamk_tuned, STREAMK_INTERPRETER_CONFIG)
    if config is not None:
        configs = [config]
    else:  # whichever the launch may pick: size the buffers for all of them
        configs = tuned.configs if tuned is not None else [interpreter_config]

    def grid(meta):  # as many programs in each lane, never more than its K iterations in all
        return (count * min(num_sms // count, tile_count(M, N, meta) // count * triton.cdiv(K, meta["BLOCK_K"])),)

    largest = max(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] for c in configs)
    programs_ = max(grid(c.kwargs)[0] for c in configs)
    space = (2 * programs_ * largest, max(tile_count(M, N, c.kwargs) for c in configs))
    return _launch_meeting(streamk_kernel, tuned, interpreter_config, grid, ops, out, precise, space,
                           (num_sms, count), config)


# ---- split-K in step -----------------------------------------------------------------------------

#: What a split piece costs beyond its K steps, in K steps: chapter 05 measured about 10 us per
#: piece on the H200 with 128 x 128 tiles, whose K step takes 0.42 us.
PIECE_STEPS = 24


def split_plan(tiles: int, k_blocks: int, programs: int, max_split: int = 8) -> tuple[int, int]:
    """(whole tiles, pieces per other tile) for ``split_kernel``, whichever makes the least time by
    a count of K steps per program: some full waves of whole tiles, then the other tiles cut into
    SPLIT pieces, ceil(rest * SPLIT / programs) rounds of ceil(k_blocks / SPLIT) steps. Every unit
    costs about two steps more to fill the pipeline, and every piece of a split tile PIECE_STEPS more
    (its float32 partial tile, written, counted and summed). Ties go to fewer pieces and to more
    whole tiles."""
    for name, v in (("tiles", tiles), ("k_blocks", k_blocks), ("programs", programs), ("max_split", max_split)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"split_plan: {name} must be an int of at least 1, got {v!r}")
    best = None
    for waves in range((tiles - 1) // programs, -1, -1):  # at least one tile left to split
        whole = waves * programs
        rest = tiles - whole
        for split in range(1, min(max_split, k_blocks) + 1):
            per_unit = -(-k_blocks // split) + 2 + (PIECE_STEPS if split > 1 else 0)
            steps = waves * (k_blocks + 2) + -(-rest * split // programs) * per_unit
            if best is None or steps < best[0]:
                best = (steps, whole, split)
    return best[1], best[2]


def split_config(bm, bn, bk, warps, stages, group_m=8, tma=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "TMA": tma},
                         num_warps=warps, num_stages=stages)


# The defaults: through pointers, and with TMA loads where the 16-byte rule holds. Chapter 05
# measures the first (it won no shape), so no autotuner is built for them.
SPLIT_CONFIGS = [split_config(128, 128, 128, 4, 6), split_config(128, 128, 128, 8, 6, tma=True)]
SPLIT_INTERPRETER_CONFIG = split_config(32, 32, 32, 4, 1, group_m=4)


cached_split_plan = functools.lru_cache(maxsize=1024)(split_plan)  # the same few shapes, again and again
_SPLIT_KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "TMA"}
#: Pieces per tile at most: keeps piece * k_blocks and the slots' offsets far inside 32 bits.
MAX_PIECES = 64


def check_plan(plan, tiles: int, k_blocks: int) -> tuple[int, int]:
    """``plan`` = (whole tiles, pieces per other tile), checked against a problem's tiles and K blocks."""
    if not isinstance(plan, (tuple, list)) or len(plan) != 2:
        raise TypeError(f"plan must be (whole tiles, pieces per other tile), got {plan!r}")
    whole, split = plan
    for name, v, low, high in (("whole tiles", whole, 0, tiles - 1),
                               ("pieces", split, 1, min(k_blocks, MAX_PIECES))):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"plan: {name} must be an int from {low} to {high}, got {v!r}")
    return whole, split


def launch_split(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                 num_sms: int | None = None, plan: tuple[int, int] | None = None) -> Launch:
    """Run ``split_kernel`` into ``out``. ``plan`` is (whole tiles, pieces per other tile); by
    default ``split_plan``'s for the configuration's tile and ``num_sms`` (the GPU's SMs). Without
    ``config``, TMA loads where they can take A and W (on a GPU)."""
    M, N, K = ops.M, ops.N, ops.K
    num_sms = programs(out, num_sms, config)
    why = tma_takes(ops, ops.a)  # only A and W go through TMA: A stands in for C
    if config is None:
        config = SPLIT_INTERPRETER_CONFIG if not out.is_cuda else SPLIT_CONFIGS[1] if why is None else SPLIT_CONFIGS[0]
    meta = config.kwargs
    if set(meta) != _SPLIT_KEYS:
        raise ValueError(f"launch_split takes configurations with exactly {sorted(_SPLIT_KEYS)} "
                         f"(persistent.split_config), got {sorted(meta)}")
    tiles = tile_count(M, N, meta)
    k_blocks = triton.cdiv(K, meta["BLOCK_K"])
    if plan is None:
        plan = cached_split_plan(tiles, k_blocks, num_sms)
    whole, split = check_plan(plan, tiles, k_blocks)
    if meta["TMA"]:
        if why:
            raise ValueError(why)
        ensure_allocator()
    rest = tiles - whole
    # one float32 slot per piece of each split tile, one count per split tile; none used unsplit
    space = (rest * split * meta["BLOCK_M"] * meta["BLOCK_N"], rest) if split > 1 else (1, 1)
    return _launch_meeting(split_kernel, None, config, lambda m: (min(num_sms, whole + rest * split),), ops, out,
                           precise, space, (num_sms, whole, split), config)
