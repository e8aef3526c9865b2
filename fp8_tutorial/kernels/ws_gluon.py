"""Warp specialization written out by hand, in Gluon.

Gluon (``triton.experimental.gluon``, part of Triton 3.6) is Triton one level down: the kernel
names its layouts, allocates its shared memory, and starts the TMA copies, the ``wgmma`` and the
waits on mbarriers itself; ``gl.warp_specialize`` runs one function per partition of warps, with
the registers of each. What ``tl.range(..., warp_specialize=True)`` leaves to the compiler is here
in the source:

- a producer of one warp (24 registers) walks the program's tiles and K steps and issues the TMA
  loads of A and W into a ring of STAGES buffers; ``ready[s]`` says a buffer is full (TMA counts
  its bytes in), ``empty[s]`` that its consumers are done with it;
- consumers wait on ``ready``, issue the ``wgmma`` on the buffer, and hand back the one before as
  soon as ``warpgroup_mma_wait(1)`` says its product is done, so one ``wgmma`` is always in flight;
- the epilogue scales the tile (the shared ``load_scales`` and ``apply_scales``; where it pays,
  the scales are loaded before the K loop, which hides their latency) and stores it through TMA;
  a store is waited for only when its shared buffer is needed again. A tile can go out in column
  parts (C's descriptor block: a half or a quarter of BLOCK_N) through two buffers in turn: less
  shared memory for the output, so one more stage in the ring.

Three kernels, three ways to use more than one consumer warp group:

- ``gluon_ws_kernel`` (cooperative): ``num_warps`` consumer warps (4 or 8: one or two warp groups)
  share each tile's rows, the form the compiler gives ``ws_kernel``;
- ``gluon_stacked_kernel`` (stacked): three consumer warp groups, each its own partition, each on
  its own 64 rows of a 192-row tile. Triton's blocks must be powers of two; three blocks of A's
  descriptor stacked make a tile that is not. With 16 warps counted in warp groups (the producer's
  one warp is padded to a group), ptxas has 128 registers per thread for every partition
  (``setmaxnreg`` moves registers at run time, not at compile time), so each group's accumulator
  is 64 x 128;
- ``gluon_pingpong_kernel``: two consumer warp groups, each on its own tiles (alternate ones), take
  turns through the one ring, so that one group's epilogue runs while the other's K loop does;
  ``turn`` barriers keep their K loops in order, and a group hands the turn on once it has issued
  its tile's last ``wgmma``, not once that has finished (on the H200, up to 2.9% faster on the
  shapes with K = 3072, within 0.7% on the others).

All three walk the schedule of ``persistent.split_kernel`` (``program_work``): with SPLIT, the tiles
after the full waves are cut into pieces along K, so that the last wave keeps every SM busy; the
pieces' float32 partial tiles are written out, and ``persistent.sum_pieces_kernel``, launched
next, adds them up, scales them and stores the tiles. Adding them up in the kernel instead (the
last piece to finish, as ``split_kernel`` does) made ptxas spill the accumulator after every
tile's K loop, split or not, and cost 3 to 25% on the H200.

With PRECISE the compiler adds each block's product into the float32 accumulator right after its
``wgmma``, so the ``wgmma`` are waited for one by one, and with 128 x 256 tiles, or within the
stacked kernel's 128 registers, the two accumulators spill some registers: ``launch_gluon`` times
every configuration and keeps the fastest.

Gluon kernels run only on a GPU: Triton's interpreter cannot run them (``gemm.gluon_takes``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .common import apply_scales, grouped_tile, load_scales
from .persistent import split_unit

# The partitions of each kernel besides its default one (its ``num_warps`` consumer warps): their
# warps (``gemm.gluon_maxnreg`` counts them); the kernels give each its registers.
COOPERATIVE_WORKERS = gl.constexpr([1])  # the producer
PINGPONG_WORKERS = gl.constexpr([4, 1])  # the second consumer group, the producer
STACKED_WORKERS = gl.constexpr([4, 4, 1])  # the second and third consumer groups, the producer
STACKED_GROUPS = gl.constexpr(3)  # gluon_stacked_kernel's consumer groups, one partition each


@gluon.jit
def unit_origin(tile, M, N, SUB_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr,
                GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """Where consumer group GROUP's rows of ``tile`` (GROUPS blocks of SUB_M rows) start in C."""
    pid_m, pid_n = grouped_tile(tile, M, N, GROUPS * SUB_M, BLOCK_N, GROUP_M)
    return (pid_m * GROUPS + GROUP) * SUB_M, pid_n * BLOCK_N


@gluon.jit
def program_work(M, N, K, WHOLE_TILES, PIECES, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 BLOCK_K: gl.constexpr):
    """The schedule of ``persistent.split_kernel`` (split-K in step): the first WHOLE_TILES tiles in
    grouped order whole, the K steps of each of the others cut at the same boundaries into PIECES
    pieces, handed out in K order; program p takes units p, p + P, ... Returns (this program's
    units, the tiles cut, K steps per tile)."""
    tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    rest = tiles - WHOLE_TILES
    units = gl.cdiv(WHOLE_TILES + rest * PIECES - gl.program_id(0), gl.num_programs(0))
    return units, rest, gl.cdiv(K, BLOCK_K)


@gluon.jit
def work_unit(u, WHOLE_TILES, PIECES, rest, k_steps):
    """This program's unit ``u``: (tile, piece, its K steps [k_first, k_last)), as
    ``persistent.split_unit`` numbers them."""
    tile, piece, _, k_first, k_last = split_unit(gl.program_id(0) + u * gl.num_programs(0), WHOLE_TILES, PIECES,
                                                 rest, k_steps)
    return tile, piece, k_first, k_last


@gluon.jit
def load_ring(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
              GROUPS: gl.constexpr):
    """The producer: every K step of every unit of this program, in order, into the ring. A tile's
    rows are GROUPS blocks of A's descriptor (one per consumer group: ``gluon_stacked_kernel``)."""
    SUB_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N, BLOCK_K)
    # K steps loaded so far: stage it % STAGES (W's buffer it % STAGES, A's GROUPS buffers from
    # (it % STAGES) * GROUPS), its (it // STAGES)-th filling
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)  # group 0: the tile's first row
        for kk in range(k_first, k_last):
            s = it % STAGES
            # a new barrier counts as having completed the phase before phase 0: the first pass
            # through the ring does not wait
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            load_stage(a_desc, b_desc, a_bufs, b_bufs, ready.index(s), s, off_m, off_n, kk * BLOCK_K, GROUPS)
            it += 1


@gluon.jit
def load_a(a_desc, a_bufs, bar, s, off_m, k, GROUPS: gl.constexpr):
    """Start the TMA loads of A's GROUPS blocks at (``off_m``, ``k``) into stage ``s``, on ``bar``."""
    for g in gl.static_range(GROUPS):
        tma.async_copy_global_to_shared(a_desc, [off_m + g * a_desc.block_type.shape[0], k], bar,
                                        a_bufs.index(s * GROUPS + g))


@gluon.jit
def load_stage(a_desc, b_desc, a_bufs, b_bufs, bar, s, off_m, off_n, k, GROUPS: gl.constexpr):
    """Fill stage ``s`` with the K step at column ``k``: A's blocks and W's, their bytes counted in
    on the stage's ``ready`` barrier ``bar``."""
    mbarrier.expect(bar, GROUPS * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    load_a(a_desc, a_bufs, bar, s, off_m, k, GROUPS)
    tma.async_copy_global_to_shared(b_desc, [off_n, k], bar, b_bufs.index(s))


@gluon.jit
def mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, PRECISE: gl.constexpr, GROUP: gl.constexpr,
             GROUPS: gl.constexpr, handoff=None, HANDOFF: gl.constexpr = False):
    """One tile's K loop, from ring position ``it``, on the rows of consumer group GROUP (of
    GROUPS): the float32 product in ``acc`` and the next position. With PRECISE the compiler adds
    each block's product into ``acc`` in float32. With HANDOFF, arrive on the barrier ``handoff``
    once the last ``wgmma`` is issued, before waiting for it."""
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    if PRECISE:  # the promoted sums are added to acc whatever use_acc says: start from zeros
        acc = gl.zeros_like(acc)
    for kk in range(k_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = a_bufs.index(s * GROUPS + GROUP)
        b = b_bufs.index(s).permute((1, 0))  # W's (BLOCK_N, BLOCK_K) block, read K-major as B
        if PRECISE:
            acc = warpgroup_mma(a, b, acc, is_async=True, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = warpgroup_mma(a, b, acc, use_acc=kk > 0, is_async=True)
        # the wgmma before this one is done: its buffer goes back to the producer (the last of the
        # GROUPS consumers to arrive frees it)
        acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a, b_bufs.index(s)))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
        it += 1
    if HANDOFF:
        mbarrier.arrive(handoff)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
    return acc, it


@gluon.jit
def tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                EARLY: gl.constexpr):
    """Load the scales of the output block at (off_m, off_n) that ``acc`` holds. EARLY, before the
    K loop, spread over the threads one or two each, so that they hold few registers through it;
    else in the accumulator's layout."""
    if EARLY:
        spread: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
        rows = off_m + gl.arange(0, acc.type.shape[0], layout=spread)
        cols = off_n + gl.arange(0, acc.type.shape[1], layout=spread)
    else:
        rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
        cols = off_n + gl.arange(0, acc.type.shape[1], layout=gl.SliceLayout(0, acc.type.layout))
    return load_scales(scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)


@gluon.constexpr_function
def output_buffers(store_n, block_n):
    """Output buffers per consumer group: one for tiles stored whole, two for tiles stored in column
    parts of ``store_n`` (one part fills while the store of the one before is under way)."""
    return 1 if store_n == block_n else 2


@gluon.jit
def column_parts(x, PARTS: gl.constexpr):
    """``x``'s columns in PARTS equal parts (a power of two), left to right, as a tuple: its halves
    (column h * W + n of half h is column n: split off along a new axis of 2, moved last), the
    halves of those, and so on."""
    if PARTS == 1:
        return (x,)
    else:
        ROWS: gl.constexpr = x.type.shape[0]
        HALF: gl.constexpr = x.type.shape[1] // 2
        h0, h1 = gl.split(gl.permute(gl.reshape(x, [ROWS, 2, HALF]), [0, 2, 1]))
        return column_parts(h0, PARTS // 2) + column_parts(h1, PARTS // 2)


@gluon.jit
def _store_part(part, c_desc, c_bufs, j: gl.constexpr, off_m, off_n, FIRST: gl.constexpr, BUFS: gl.constexpr):
    """Start the TMA store of column part ``j`` through buffer FIRST + j % BUFS, once that buffer's
    last store has read it."""
    buf = c_bufs.index(FIRST + j % BUFS)
    tma.store_wait(BUFS - 1)
    buf.store(part)
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n + j * c_desc.block_type.shape[1]], buf)


@gluon.jit
def store_tile(acc, sa, sb, c_desc, c_bufs, off_m, off_n, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
               FIRST: gl.constexpr):
    """Scale the tile (``tile_scales``'s ``sa`` and ``sb``, in the accumulator's layout) and start
    its TMA stores: whole, or in 2 or 4 parts of C's block width, through the group's buffers
    ``c_bufs.index(FIRST)`` on (``output_buffers`` of them)."""
    if ROW_A:
        sa = gl.convert_layout(sa, gl.SliceLayout(1, acc.type.layout))
    if ROW_B:
        sb = gl.convert_layout(sb, gl.SliceLayout(0, acc.type.layout))
    out = apply_scales(acc, sa, sb, ROW_A, ROW_B).to(c_desc.dtype)
    STORE_N: gl.constexpr = c_desc.block_type.shape[1]
    PARTS: gl.constexpr = acc.type.shape[1] // STORE_N
    BUFS: gl.constexpr = output_buffers(STORE_N, acc.type.shape[1])
    gl.static_assert(PARTS == 1 or PARTS == 2 or PARTS == 4, "a tile goes out whole, in halves or in quarters")
    parts = column_parts(out, PARTS)
    for j in gl.static_range(PARTS):
        _store_part(parts[j], c_desc, c_bufs, j, off_m, off_n, FIRST, BUFS)


@gluon.jit
def stash_piece(acc, c_bufs, FIRST: gl.constexpr, partials_ptr, slot, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                num_warps: gl.constexpr):
    """Write this piece's float32 partial tile (group GROUP's rows of it) to its slot of
    ``partials`` (``persistent.sum_pieces_kernel`` adds the pieces up after the launch). It goes out
    in column parts through the group's first output buffer, ``c_bufs.index(FIRST)``, seen as
    float32 (as many columns as its bytes hold), and from there 32 rows at a time in vectors of 4:
    from the accumulator's own layout each thread would form 64 addresses, and ptxas would spill the
    accumulator after every tile's K loop to hold them."""
    SUB_M: gl.constexpr = acc.type.shape[0]  # this group's rows of the GROUPS * SUB_M-row slot
    BLOCK_N: gl.constexpr = acc.type.shape[1]
    WIDTH: gl.constexpr = c_bufs.type.shape[2] * c_bufs.dtype.primitive_bitwidth // 32
    ROWS: gl.constexpr = 32
    LANES_N: gl.constexpr = min(32, WIDTH // 4)
    rows_of_4: gl.constexpr = gl.BlockedLayout([1, 4], [32 // LANES_N, LANES_N], [num_warps, 1], [1, 0])
    part_smem = c_bufs.index(FIRST)._reinterpret(gl.float32, [SUB_M, WIDTH], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    offsets = (gl.arange(0, ROWS, layout=gl.SliceLayout(1, rows_of_4))[:, None] * BLOCK_N
               + gl.arange(0, WIDTH, layout=gl.SliceLayout(0, rows_of_4))[None, :])
    base = partials_ptr + slot.to(gl.int64) * (GROUPS * SUB_M * BLOCK_N) + GROUP * SUB_M * BLOCK_N
    parts = column_parts(acc, BLOCK_N // WIDTH)
    tma.store_wait(0)  # the buffer may still be read by the last tile's TMA stores
    for h in gl.static_range(BLOCK_N // WIDTH):
        part_smem.store(parts[h])
        gl.thread_barrier()
        for r in gl.static_range(0, SUB_M, ROWS):
            gl.store(base + r * BLOCK_N + h * WIDTH + offsets, part_smem.slice(r, ROWS).load(rows_of_4))
        gl.thread_barrier()


@gluon.jit
def finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, off_m, off_n, tile, piece, WHOLE_TILES, PIECES,
                ROW_A: gl.constexpr, ROW_B: gl.constexpr, SPLIT: gl.constexpr, GROUP: gl.constexpr,
                GROUPS: gl.constexpr, FIRST: gl.constexpr, num_warps: gl.constexpr):
    """After a unit's K steps: store group GROUP's rows of its tile (from ``off_m, off_n``, scaled
    by ``sa`` and ``sb``) through its output buffers, ``c_bufs.index(FIRST)`` on, or with SPLIT,
    for a piece, stash them (through the first)."""
    if SPLIT:
        if (tile < WHOLE_TILES) | (PIECES == 1):
            store_tile(acc, sa, sb, c_desc, c_bufs, off_m, off_n, ROW_A, ROW_B, FIRST)
        else:
            stash_piece(acc, c_bufs, FIRST, partials_ptr, (tile - WHOLE_TILES) * PIECES + piece, GROUP, GROUPS,
                        num_warps)
    else:
        store_tile(acc, sa, sb, c_desc, c_bufs, off_m, off_n, ROW_A, ROW_B, FIRST)


@gluon.constexpr_function
def accumulator_layout(BLOCK_N, num_warps):
    """wgmma's accumulator: warps stacked along M, 16 rows each per instruction, BLOCK_N wide."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])


@gluon.jit
def allocate_ring(a_desc, b_desc, STAGES: gl.constexpr, GROUPS: gl.constexpr):
    """The ring: STAGES buffers of W's block and GROUPS of A's (stage s: ``a_bufs.index(s * GROUPS + g)``),
    and a ``ready`` and an ``empty`` barrier for each stage; ``empty`` completes when all GROUPS
    consumer groups have handed the stage back."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * GROUPS] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=GROUPS)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def allocate_outputs(c_desc, b_desc, GROUPS: gl.constexpr):
    """The output buffers of GROUPS consumer groups, ``output_buffers`` each, of C's descriptor block."""
    BUFS: gl.constexpr = output_buffers(c_desc.block_type.shape[1], b_desc.block_type.shape[0])
    return gl.allocate_shared_memory(c_desc.dtype, [GROUPS * BUFS] + c_desc.block_type.shape, c_desc.layout)


@gluon.jit
def _cooperative_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                          partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                          ROW_A: gl.constexpr, ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                          GROUP: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """Consumer group GROUP of GROUPS: rows [GROUP * SUB_M, + SUB_M) of every unit's tile, through
    the group's output buffers (``output_buffers`` of them, from ``c_bufs.index(GROUP * BUFS)``)."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                        a_desc.block_type.shape[1])
    # Scales loaded before the K loop, against after it, on seven shapes on the H200: per row 0.2%
    # slower to 4.3% faster; per tensor, with one group 0.2% slower to 1.6% faster, with three
    # (stacked) 0.5 to 1.2% slower on six of the seven.
    EARLY: gl.constexpr = ROW_A or ROW_B or GROUPS == 1
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        if EARLY:  # the scales' loads are under way while the K loop runs
            sa, sb = tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, True)
        acc, it = mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_last - k_first, PRECISE, GROUP, GROUPS)
        if not EARLY:
            sa, sb = tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, False)
        finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, off_m, off_n, tile, piece, WHOLE_TILES, PIECES,
                    ROW_A, ROW_B, SPLIT, GROUP, GROUPS, GROUP * BUFS, num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])  # one compilation serves every plan
def gluon_ws_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, M, N, K,
                    WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                    ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr):
    """C = scale(A @ W^T), persistent: one producer warp, ``num_warps`` consumer warps sharing each
    tile (BLOCK_M rows from ``c_desc``, BLOCK_N from ``b_desc``), STAGES buffers in the ring. The
    first WHOLE_TILES tiles are computed whole; with SPLIT the others are cut into PIECES pieces
    each (``program_work``), whose partial tiles go to ``partials`` for
    ``persistent.sum_pieces_kernel`` to add up. Without SPLIT, WHOLE_TILES must be all the tiles
    and PIECES 1."""
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, 1)
    c_bufs = allocate_outputs(c_desc, b_desc, 1)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                                 partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                                 PRECISE, SPLIT, 0, 1, num_warps)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, 1)),
    ], COOPERATIVE_WORKERS, [24])


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_stacked_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, M, N, K,
                         WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                         ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                         num_warps: gl.constexpr):
    """C = scale(A @ W^T), persistent, in tiles of three blocks of A's descriptor stacked along M
    (3 x 64 = 192 rows, a height that is not a power of two): one producer warp, and three consumer
    warp groups (the default partition, ``num_warps`` = 4, and two workers), each on its own block
    of rows of every tile, with its own output buffers; the rest as in ``gluon_ws_kernel``."""
    gl.static_assert(num_warps == 4, "each consumer group of the stacked kernel is one warp group")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, STACKED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, STACKED_GROUPS)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                                 PRECISE, SPLIT, 0, STACKED_GROUPS, 4)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                                 PRECISE, SPLIT, 1, STACKED_GROUPS, 4)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                                 PRECISE, SPLIT, 2, STACKED_GROUPS, 4)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     STACKED_GROUPS)),
    ], STACKED_WORKERS, [128, 128, 24])


@gluon.jit
def _pingpong_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                       partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                       ROW_A: gl.constexpr, ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                       GROUP: gl.constexpr):
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, 4))
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, BLOCK_M, BLOCK_N, a_desc.block_type.shape[1])
    it = 0  # the ring position of unit u: the K steps of the units before it, the other group's too
    for u in range(units):  # the program's units alternate between the groups
        tile, piece, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        if u % 2 == GROUP:
            # wait until the other group has issued its previous K loop: without it, this group could
            # wait on a ring position two fillings ahead, and the barrier's parity would pass it at once
            mbarrier.wait(turn.index(GROUP), ((u // 2) & 1) ^ (1 - GROUP))
            # the turn passes as soon as this tile's last wgmma is issued: the other group's first
            # ones queue behind it, and the tensor pipes do not wait for this one's to drain
            acc, _ = mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_last - k_first, PRECISE, 0, 1,
                              turn.index(1 - GROUP), True)
            # the scales are loaded now: before the K loop they would cost ptxas a spill (and this
            # epilogue runs while the other group's K loop does)
            off_m, off_n = unit_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M, 0, 1)
            sa, sb = tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, False)
            finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, off_m, off_n, tile, piece, WHOLE_TILES, PIECES,
                        ROW_A, ROW_B, SPLIT, 0, 1, GROUP * BUFS, 4)
        it += k_last - k_first
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_pingpong_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, M, N, K,
                          WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                          ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                          num_warps: gl.constexpr):
    """C = scale(A @ W^T), persistent: one producer warp and two consumer warp groups of 4 warps
    (the default partition, ``num_warps`` = 4, and a worker), each on alternate units of work;
    the rest as in ``gluon_ws_kernel``."""
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, 1)
    c_bufs = allocate_outputs(c_desc, b_desc, 2)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    gl.warp_specialize([
        (_pingpong_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                              partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                              PRECISE, SPLIT, 0)),
        (_pingpong_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                              partials_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                              PRECISE, SPLIT, 1)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, 1)),
    ], PINGPONG_WORKERS, [232, 24])
