"""A persistent FP8 GEMM: one program per SM (or a few), each walking many output tiles.

The same tiles, loads and epilogue as ``tiled.py``; what changes is the schedule. The grid holds
``num_programs`` = min(tiles, SMs x PROGRAMS_PER_SM) programs, and program ``p`` computes tiles
``p``, ``p + num_programs``, ... in grouped order, so the GPU never launches, drains and refills a wave: each program's pipeline runs
from its first tile to its last.
"""

import triton
import triton.language as tl

from .common import accumulate_k, accumulate_k_tma, grouped_tile, operand_sources, scale_epilogue


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


@triton.jit
def sum_pieces_kernel(partials_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, WHOLE_TILES, PIECES, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
                      ROW_A: tl.constexpr, ROW_B: tl.constexpr, SUB_M: tl.constexpr):
    """Sum the pieces of split tile program_id(0) (slots split_tile * PIECES + q, in piece order),
    rows [program_id(1) * SUB_M, + SUB_M) of it, scale and store them."""
    split_tile = tl.program_id(0)
    sub = tl.program_id(1)
    pid_m, pid_n = grouped_tile(WHOLE_TILES + split_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    r = sub * SUB_M + tl.arange(0, SUB_M)
    c = tl.arange(0, BLOCK_N)
    offsets = r[:, None] * BLOCK_N + c[None, :]
    acc = tl.zeros((SUB_M, BLOCK_N), dtype=tl.float32)
    for q in range(PIECES):
        acc += tl.load(partials_ptr + (split_tile * PIECES + q).to(tl.int64) * (BLOCK_M * BLOCK_N) + offsets)
    _store_tile(acc, c_ptr, scale_a_ptr, scale_b_ptr, pid_m * BLOCK_M + r, pid_n * BLOCK_N + c, M, N,
                stride_cm, stride_cn, ROW_A, ROW_B)
