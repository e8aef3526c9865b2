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

Four kernels, four ways to use more than one consumer warp group:

- ``gluon_ws_kernel`` (cooperative): ``num_warps`` consumer warps (4 or 8: one or two warp groups)
  share each tile's rows, the form the compiler gives ``ws_kernel``;
- ``gluon_stacked_kernel`` (stacked): three consumer warp groups, each its own partition, each on
  its own 64 rows of a 192-row tile. Triton's blocks must be powers of two; three blocks of A's
  descriptor stacked make a tile that is not. With 16 warps counted in warp groups (the producer's
  one warp is padded to a group) every thread starts with 128 registers; ``setmaxnreg`` then
  gives the producer 24, the two worker groups 160 each and the default group the 168 left, and
  ptxas compiles each partition's code for its own count: room for precise accumulation's two
  64 x 128 accumulators (with 128 registers a group they spill);
- ``gluon_paired_kernel``: the stacked kernel with two groups, 128-row tiles; 12 warps in warp
  groups start with 168 registers a thread, and the consumer groups move up to 232 and 248:
  room for three accumulators, so that precise accumulation's next ``wgmma`` runs under its add
  (``overlapped_tile``);
- ``gluon_pingpong_kernel``: two consumer warp groups, each on its own tiles (alternate ones), take
  turns through the one ring, so that one group's epilogue runs while the other's K loop does;
  ``turn`` barriers keep their K loops in order, and a group hands the turn on once it has issued
  its tile's last ``wgmma``, not once that has finished (on the H200, up to 2.9% faster on the
  shapes with K = 3072, within 0.7% on the others).

All three walk the schedule of ``persistent.split_kernel`` (``program_work``): with SPLIT, the tiles
after the full waves are cut into pieces along K, so that the last wave keeps every SM busy. Each
piece's float32 partial tile is written out and counted in; the last piece of a tile to arrive adds
up all of them, in piece order, scales the sum and stores it (``add_up_pieces``), a few rows at a
time, so that what it holds beside the accumulator is small. One launch
does the whole product: on the host a split plan costs what an unsplit one does.

With PRECISE a consumer promotes the tensor cores' sum itself (``promoted_tile``): it waits for
each K step's ``wgmma`` and adds its sum into a float32 total, the interval cuBLAS uses (chapter
10). Two accumulators take twice the registers, so precise problems are timed over configurations
of their own (``GLUON_PRECISE_CONFIGS``): the paired and stacked kernels', 64 x 128 per consumer
group, each group waiting and adding on its own while the others' ``wgmma`` run.

Block-wise scales (DeepSeek-V3's recipe: A in 1 x 128 groups, W in 128 x 128 blocks, each with
its own scale) go to the paired kernel's tile and ring with a K loop that promotes every K block
(128 values of K) times its scales, with the next block's ``wgmma`` in flight; the tile then
leaves unscaled. ``gluon_blockwise_tma_kernel``'s producer copies each step's scales into the
ring with TMA (``tma_scales_take`` says when TMA can read them: A's scales M-major with rows of
whole 16-byte units, W's K- or N-major likewise); ``gluon_blockwise_kernel``'s consumers load
them through their strides, ahead of their use, in any layout. Their configurations are
``GLUON_BLOCK_CONFIGS``. ``scaled_mm`` runs the first wherever TMA can read the scales
(``BLOCK_SCALES_BY_TMA``), which ``quantize``'s are on a GPU.

Gluon kernels run only on a GPU: Triton's interpreter cannot run them (``gluon_takes``). The
configurations, what they refuse and the launcher follow the kernels.
"""

import dataclasses

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .._env import ON_GPU
from .common import apply_scales, grouped_tile, load_scales
from .compat import DIRECT_LAUNCH, cta_barrier
from .host import (Direct, Launch, Operands, PlanWorkspace, capability, check_config, describe_config,
                   epilogue_scales_only, fastest, fit_stages, pipeline_smem, programs, SMEM_PER_PROGRAM_MAX, tile_count,
                   workspace, _kept)
from .persistent import check_plan, cached_split_plan, split_unit
from .tma import tma_takes
from .ws import WS_KEYS

# The partitions of each kernel besides its default one (its ``num_warps`` consumer warps): their
# warps (``gluon_maxnreg`` counts them); the kernels give each its registers.
COOPERATIVE_WORKERS = gl.constexpr([1])  # the producer
PINGPONG_WORKERS = gl.constexpr([4, 1])  # the second consumer group, the producer
STACKED_WORKERS = gl.constexpr([4, 4, 1])  # the second and third consumer groups, the producer
STACKED_GROUPS = gl.constexpr(3)  # gluon_stacked_kernel's consumer groups, one partition each
PAIRED_WORKERS = gl.constexpr([4, 1])  # the second consumer group, the producer
PAIRED_GROUPS = gl.constexpr(2)  # gluon_paired_kernel's consumer groups, one partition each
# Registers a thread of the paired kernel's second consumer group and of its producer: two
# tensor-core accumulators and the float32 total take 192 (``overlapped_tile``; the block-wise
# kernel's ``blockwise_tile`` likewise); the default group keeps the 248 left.
PAIRED_REGISTERS = gl.constexpr([232, 24])
BLOCKWISE_REGISTERS = PAIRED_REGISTERS


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
             GROUPS: gl.constexpr, handoff=None, HANDOFF: gl.constexpr = False, PROMOTE: gl.constexpr = 1):
    """One tile's K loop, from ring position ``it``, on the rows of consumer group GROUP (of
    GROUPS): the float32 product in ``acc`` and the next position. With PRECISE the tensor cores'
    sum is promoted (``promoted_tile``) every PROMOTE K steps. With HANDOFF, arrive on the barrier
    ``handoff`` once the last ``wgmma`` is issued, before waiting for it."""
    if PRECISE:
        return promoted_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP, GROUPS, handoff, HANDOFF,
                             PROMOTE)
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    for kk in range(k_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = a_bufs.index(s * GROUPS + GROUP)
        b = b_bufs.index(s).permute((1, 0))  # W's (BLOCK_N, BLOCK_K) block, read K-major as B
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
def promoted_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                  handoff, HANDOFF: gl.constexpr, PROMOTE: gl.constexpr):
    """``mma_tile`` with precise accumulation: the tensor cores sum PROMOTE K steps at a time in
    ``acc``, in their own, shorter precision (the ``wgmma`` one behind the other, as in the fast
    loop), and each such sum is added into ``total``, a float32 accumulator on the CUDA cores. The
    add waits for its ``wgmma``; the other consumer groups' ``wgmma`` keep the tensor cores busy
    meanwhile. A stage goes back to the producer as soon as its ``wgmma`` is known to be done: at
    the end of a sum, its own (on the H200, 0.5 to 3% faster than one step later). The paired
    kernel's groups have the registers for a third accumulator: with PROMOTE 1 they run
    ``overlapped_tile``, whose next ``wgmma`` runs under the add."""
    if (PROMOTE == 1) and (GROUPS == PAIRED_GROUPS):
        return overlapped_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP, GROUPS, handoff, HANDOFF)
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    total = gl.zeros_like(acc)
    for kk in range(k_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = a_bufs.index(s * GROUPS + GROUP)
        b = b_bufs.index(s).permute((1, 0))
        acc = warpgroup_mma(a, b, acc, use_acc=kk % PROMOTE > 0, is_async=True)  # a new sum every PROMOTE steps
        if PROMOTE == 1:  # every step's sum is complete: wait for it, free its stage, promote it
            acc, _, _ = warpgroup_mma_wait(0, deps=(acc, a, b_bufs.index(s)))
            mbarrier.arrive(empty.index(s))
            total += acc
        else:
            # the step before is done; it is freed here if it belongs to this sum (a sum's last
            # step frees its own stage)
            acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a, b_bufs.index(s)))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk % PROMOTE > 0)
            if (kk % PROMOTE == PROMOTE - 1) | (kk == k_steps - 1):  # the sum is complete: promote it
                total += warpgroup_mma_wait(0, deps=(acc,))
                mbarrier.arrive(empty.index(s))
        it += 1
    if HANDOFF:
        mbarrier.arrive(handoff)
    return total, it


@gluon.jit
def overlapped_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                    handoff, HANDOFF: gl.constexpr):
    """``promoted_tile`` with PROMOTE 1, the next ``wgmma`` under the add: two tensor-core
    accumulators, ``acc0`` and ``acc1``, take the K steps in turn, and step k + 1's ``wgmma`` is
    issued before step k is waited for (all but one in flight, across the loop's back edge too),
    so it runs while step k is added into ``total``. Two steps a turn, so that the accumulators
    never trade places (ptxas would serialize the ``wgmma`` where they did). The same sums, added
    in the same order, as ``promoted_tile``'s loop: the same bits. ``blockwise_tile`` is this loop
    with each step's scales."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):  # steps kk and kk + 1 added, kk + 2 left in flight
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        mbarrier.arrive(empty.index((it + kk) % STAGES))
        total += acc0
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        mbarrier.arrive(empty.index((it + kk + 1) % STAGES))
        total += acc1
    if k_steps % 2 == 0:  # two steps left, the first in flight
        next1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + k_steps - 1, GROUP, GROUPS)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        mbarrier.arrive(empty.index((it + k_steps - 2) % STAGES))
        total += done0
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        mbarrier.arrive(empty.index((it + k_steps - 1) % STAGES))
        total += done1
    else:  # one, in flight
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        mbarrier.arrive(empty.index((it + k_steps - 1) % STAGES))
        total += done0
    if HANDOFF:
        mbarrier.arrive(handoff)
    return total, it + k_steps


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
def _part_buffer(c_bufs, j: gl.constexpr, FIRST: gl.constexpr, BUFS: gl.constexpr):
    """The output buffer of column part ``j``, FIRST + j % BUFS (a group's buffers in turn), once
    its last TMA store has read it."""
    buf = c_bufs.index(FIRST + j % BUFS)
    tma.store_wait(BUFS - 1)
    return buf


@gluon.jit
def _send_part(c_desc, buf, j: gl.constexpr, off_m, off_n):
    """Start the TMA store of column part ``j`` from ``buf``, which the threads have filled."""
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n + j * c_desc.block_type.shape[1]], buf)


@gluon.jit
def _store_part(part, c_desc, c_bufs, j: gl.constexpr, off_m, off_n, FIRST: gl.constexpr, BUFS: gl.constexpr):
    """Start the TMA store of column part ``j`` through its buffer (``_part_buffer``)."""
    buf = _part_buffer(c_bufs, j, FIRST, BUFS)
    buf.store(part)
    _send_part(c_desc, buf, j, off_m, off_n)


@gluon.constexpr_function
def rows_of_4(width, num_warps):
    """A layout of rows ``width`` wide in vectors of 4 values a thread, a warp's lanes across a row
    (or several rows, where it is narrower than 128), the warps down the rows."""
    lanes_n = min(32, width // 4)
    return gl.BlockedLayout([1, 4], [32 // lanes_n, lanes_n], [num_warps, 1], [1, 0])


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
def stash_piece(acc, c_bufs, FIRST: gl.constexpr, partials_ptr, slot, off_m, M, GROUP: gl.constexpr,
                GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """Write this piece's float32 partial tile (group GROUP's rows of it, from row ``off_m``) to its
    slot of ``partials``. It goes out in column parts through the group's first output buffer,
    ``c_bufs.index(FIRST)``, seen as float32 (as many columns as its bytes hold), and from there 32
    rows at a time in vectors of 4 (rows from M on are never read, and not written): from the
    accumulator's own layout each thread would form 64 addresses, and ptxas would spill the
    accumulator after every tile's K loop to hold them."""
    SUB_M: gl.constexpr = acc.type.shape[0]  # this group's rows of the GROUPS * SUB_M-row slot
    BLOCK_N: gl.constexpr = acc.type.shape[1]
    WIDTH: gl.constexpr = c_bufs.type.shape[2] * c_bufs.dtype.primitive_bitwidth // 32
    ROWS: gl.constexpr = 32
    vectors: gl.constexpr = rows_of_4(WIDTH, num_warps)
    part_smem = c_bufs.index(FIRST)._reinterpret(gl.float32, [SUB_M, WIDTH], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    offsets = (gl.arange(0, ROWS, layout=gl.SliceLayout(1, vectors))[:, None] * BLOCK_N
               + gl.arange(0, WIDTH, layout=gl.SliceLayout(0, vectors))[None, :])
    base = partials_ptr + slot.to(gl.int64) * (GROUPS * SUB_M * BLOCK_N) + GROUP * SUB_M * BLOCK_N
    parts = column_parts(acc, BLOCK_N // WIDTH)
    tma.store_wait(0)  # the buffer may still be read by the last tile's TMA stores
    for h in gl.static_range(BLOCK_N // WIDTH):
        part_smem.store(parts[h])
        cta_barrier()
        for r in gl.static_range(0, SUB_M, ROWS):
            if off_m + r < M:
                gl.store(base + r * BLOCK_N + h * WIDTH + offsets, part_smem.slice(r, ROWS).load(vectors))
        cta_barrier()


@gluon.jit
def add_up_pieces(c_desc, c_bufs, FIRST: gl.constexpr, partials_ptr, split_tile, scale_a_ptr, scale_b_ptr, off_m,
                  off_n, M, N, PIECES, ROW_A: gl.constexpr, ROW_B: gl.constexpr, GROUP: gl.constexpr,
                  GROUPS: gl.constexpr, BLOCK_N: gl.constexpr, num_warps: gl.constexpr):
    """The last piece of split tile ``split_tile`` to finish: add up the PIECES partial tiles of group
    GROUP's rows (``stash_piece``'s slots), in piece order, so that the sum does not depend on the
    order of arrival; scale it and store it through TMA, STORE_N columns at a time, each part built
    in one of the group's output buffers a few rows at a time (rows from M on are skipped: TMA clips
    them). The accumulator is live through it, so what it holds beside must be small: 16 rows at a
    time, or 8 in the kernels of several groups (chosen when the stacked kernel's groups had 128
    registers each, and ptxas spilled with 16 there; the cooperative kernel spilled with 8 or 32;
    8 rows is the least a slice of the swizzled buffer may have)."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    STORE_N: gl.constexpr = c_desc.block_type.shape[1]
    ROWS: gl.constexpr = 16 if GROUPS == 1 else 8
    vectors: gl.constexpr = rows_of_4(STORE_N, num_warps)
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, vectors))
    cols = gl.arange(0, STORE_N, layout=gl.SliceLayout(0, vectors))
    SLOT: gl.constexpr = GROUPS * SUB_M * BLOCK_N
    base = partials_ptr + (split_tile * PIECES).to(gl.int64) * SLOT + GROUP * SUB_M * BLOCK_N
    offsets = rows[:, None] * BLOCK_N + cols[None, :]
    BUFS: gl.constexpr = output_buffers(STORE_N, BLOCK_N)
    for j in gl.static_range(BLOCK_N // STORE_N):
        buf = _part_buffer(c_bufs, j, FIRST, BUFS)  # in turn, as ``_store_part`` takes them
        for r in gl.static_range(0, SUB_M, ROWS):
            if off_m + r < M:
                part = base + (r * BLOCK_N + j * STORE_N)
                acc = gl.load(part + offsets, cache_modifier=".cg")
                for q in range(1, PIECES):
                    acc += gl.load((part + q * SLOT) + offsets, cache_modifier=".cg")
                sa, sb = load_scales(scale_a_ptr, scale_b_ptr, off_m + r + rows, off_n + j * STORE_N + cols, M, N,
                                     ROW_A, ROW_B)
                buf.slice(r, ROWS).store(apply_scales(acc, sa, sb, ROW_A, ROW_B).to(c_desc.dtype))
        _send_part(c_desc, buf, j, off_m, off_n)


@gluon.jit
def finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, arrivals_ptr, scale_a_ptr, scale_b_ptr, off_m, off_n,
                M, N, tile, piece, WHOLE_TILES, PIECES, ROW_A: gl.constexpr, ROW_B: gl.constexpr, SPLIT: gl.constexpr,
                GROUP: gl.constexpr, GROUPS: gl.constexpr, FIRST: gl.constexpr, num_warps: gl.constexpr):
    """After a unit's K steps: store group GROUP's rows of its tile (from ``off_m, off_n``, scaled
    by ``sa`` and ``sb``) through its output buffers, ``c_bufs.index(FIRST)`` on; or with SPLIT,
    for a piece, stash them (through the first) and count the piece in (the group's counter of
    the tile in ``arrivals``): the last to arrive adds the pieces up, stores the tile and sets the
    counter back to zero for the next launch."""
    if SPLIT:
        if (tile < WHOLE_TILES) | (PIECES == 1):
            store_tile(acc, sa, sb, c_desc, c_bufs, off_m, off_n, ROW_A, ROW_B, FIRST)
        else:
            split_tile = tile - WHOLE_TILES
            stash_piece(acc, c_bufs, FIRST, partials_ptr, split_tile * PIECES + piece, off_m, M, GROUP, GROUPS,
                        num_warps)  # ends with every thread's stores issued (a barrier)
            counter = arrivals_ptr + split_tile * GROUPS + GROUP
            if gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == PIECES - 1:
                add_up_pieces(c_desc, c_bufs, FIRST, partials_ptr, split_tile, scale_a_ptr, scale_b_ptr, off_m, off_n,
                              M, N, PIECES, ROW_A, ROW_B, GROUP, GROUPS, acc.type.shape[1], num_warps)
                gl.atomic_xchg(counter, 0)
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
                          partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                          ROW_A: gl.constexpr, ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                          GROUP: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr, PROMOTE: gl.constexpr):
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
        acc, it = mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_last - k_first, PRECISE, GROUP, GROUPS,
                           PROMOTE=PROMOTE)
        if not EARLY:
            sa, sb = tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, False)
        finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, arrivals_ptr, scale_a_ptr, scale_b_ptr, off_m, off_n,
                    M, N, tile, piece, WHOLE_TILES, PIECES, ROW_A, ROW_B, SPLIT, GROUP, GROUPS, GROUP * BUFS, num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])  # one compilation serves every plan
def gluon_ws_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                    WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                    ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr,
                    PROMOTE: gl.constexpr = 1):
    """C = scale(A @ W^T), persistent: one producer warp, ``num_warps`` consumer warps sharing each
    tile (BLOCK_M rows from ``c_desc``, BLOCK_N from ``b_desc``), STAGES buffers in the ring. The
    first WHOLE_TILES tiles are computed whole; with SPLIT the others are cut into PIECES pieces
    each (``program_work``), whose partial tiles go to ``partials`` and are counted in ``arrivals``
    (one int32 per split tile and consumer group, zero before the launch and after it): the last
    piece of each tile adds them up. Without SPLIT, WHOLE_TILES must be all the tiles and PIECES 1."""
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, 1)
    c_bufs = allocate_outputs(c_desc, b_desc, 1)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                                 partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                                 PRECISE, SPLIT, 0, 1, num_warps, PROMOTE)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, 1)),
    ], COOPERATIVE_WORKERS, [24])


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_stacked_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                         WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                         ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                         num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
    """C = scale(A @ W^T), persistent, in tiles of three blocks of A's descriptor stacked along M
    (3 x 64 = 192 rows, a height that is not a power of two): one producer warp, and three consumer
    warp groups (the default partition, ``num_warps`` = 4, and two workers), each on its own block
    of rows of every tile, with its own output buffers; the rest as in ``gluon_ws_kernel``. The
    workers ask for 160 registers a thread (the default group gets the 168 left): with 128, the
    two accumulators of precise accumulation spill."""
    gl.static_assert(num_warps == 4, "each consumer group of the stacked kernel is one warp group")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, STACKED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, STACKED_GROUPS)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B,
                                 PRECISE, SPLIT, 0, STACKED_GROUPS, 4, PROMOTE)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B,
                                 PRECISE, SPLIT, 1, STACKED_GROUPS, 4, PROMOTE)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B,
                                 PRECISE, SPLIT, 2, STACKED_GROUPS, 4, PROMOTE)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     STACKED_GROUPS)),
    ], STACKED_WORKERS, [160, 160, 24])


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_paired_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                        WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                        ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                        num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
    """``gluon_stacked_kernel`` with two consumer groups: tiles of 2 x 64 = 128 rows, and 12 warps
    in warp groups. The second consumer group asks for 232 registers a thread and the first keeps
    248 (``PAIRED_REGISTERS``): room for precise accumulation's three accumulators
    (``overlapped_tile``). The cooperative kernel's 8 consumer warps hold the same tile, but as one
    partition: its two warp groups wait for their ``wgmma`` and promote together; here each group
    does on its own."""
    gl.static_assert(num_warps == 4, "each consumer group of the paired kernel is one warp group")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, PAIRED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, PAIRED_GROUPS)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B, PRECISE, SPLIT, 0, PAIRED_GROUPS, 4, PROMOTE)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B, PRECISE, SPLIT, 1, PAIRED_GROUPS, 4, PROMOTE)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     PAIRED_GROUPS)),
    ], PAIRED_WORKERS, PAIRED_REGISTERS)


@gluon.jit
def block_scales(sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn):
    """Start loading K block ``kb``'s scales: A's for the group's ``rows`` (its 1 x 128 groups; 0 for
    rows from M on) and W's for weight block ``nb`` (one 128 x 128 block across the tile). They are
    multiplied only where they are used: a product here would wait for the loads at once."""
    sa = gl.load(sa_ptr + rows * stride_sam + kb * stride_sak, mask=rows < M, other=0.0)
    return sa, gl.load(sb_ptr + kb * stride_sbk + nb * stride_sbn)


@gluon.jit
def blockwise_issue(a_bufs, b_bufs, ready, acc, r, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """Start the ``wgmma`` of ring step ``r`` (a K block) into ``acc`` once its stage is loaded; it
    is left in flight."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    s = r % STAGES
    mbarrier.wait(ready.index(s), (r // STAGES) & 1)
    return warpgroup_mma(a_bufs.index(s * GROUPS + GROUP), b_bufs.index(s).permute((1, 0)), acc, use_acc=False,
                         is_async=True)


@gluon.jit
def blockwise_promote(empty, acc, total, r, sa, sb, STAGES: gl.constexpr):
    """Ring step ``r``'s sum ``acc``, complete: its stage handed back, the sum added into the float32
    ``total`` times its scales ``sa`` (per row) and ``sb``, in one multiply-add per value."""
    mbarrier.arrive(empty.index(r % STAGES))
    return gl.fma(acc, (sa * sb)[:, None], total)


@gluon.jit
def blockwise_tile(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                   stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``promoted_tile`` with block-wise scales (DeepSeek-V3's recipe): each K step is one block of
    128 values of K, and its sum goes into ``total`` times its scales, one per row for A's 1 x 128
    groups and one for W's 128 x 128 block (the tile is 128 wide: one block). Two tensor-core
    accumulators, ``acc0`` and ``acc1``, take the steps in turn: step k + 1's ``wgmma`` is issued
    before step k is waited for (all but one in flight), so it runs while step k is promoted. The
    loop takes two steps a turn, so the accumulators never trade places, each step's scales loaded
    two steps ahead into the registers just used; no branch while a ``wgmma`` is in flight but
    the one after the loop. K steps [k_first, k_first + k_steps) of the tile, ring steps from ``it``."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    nb = off_n // acc.type.shape[1]
    last = k_first + k_steps - 1
    sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, k_first, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
    sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 1, last), nb, M, stride_sam, stride_sak,
                            stride_sbk, stride_sbn)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):  # steps kk and kk + 1 promoted, kk + 2 left in flight
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, acc0, total, it + kk, sa0, sb0, STAGES)
        sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, k_first + kk + 2, nb, M, stride_sam, stride_sak, stride_sbk,
                                stride_sbn)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = blockwise_promote(empty, acc1, total, it + kk + 1, sa1, sb1, STAGES)
        sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 3, last), nb, M, stride_sam,
                                stride_sak, stride_sbk, stride_sbn)
    if k_steps % 2 == 0:  # two steps left, the first in flight
        next1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + k_steps - 1, GROUP, GROUPS)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 2, sa0, sb0, STAGES)
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        total = blockwise_promote(empty, done1, total, it + k_steps - 1, sa1, sb1, STAGES)
    else:  # one, in flight
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 1, sa0, sb0, STAGES)
    return total, it + k_steps


@gluon.jit
def _blockwise_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, sa_ptr, sb_ptr, ones_ptr,
                        partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam, stride_sak, stride_sbk,
                        stride_sbn, GROUP_M: gl.constexpr, SPLIT: gl.constexpr, GROUP: gl.constexpr,
                        GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """``_cooperative_consumer`` for block-wise scales: ``blockwise_tile`` applies them in the K
    loop, so the tile leaves scaled by ones (``ones_ptr``: one float32 1.0), whole or as a piece."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                        a_desc.block_type.shape[1])
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        acc, it = blockwise_tile(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_last - k_first, sa_ptr, sb_ptr,
                                 off_m, off_n, M, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP, GROUPS)
        finish_unit(acc, 1.0, 1.0, c_desc, c_bufs, partials_ptr, arrivals_ptr, ones_ptr, ones_ptr, off_m, off_n,
                    M, N, tile, piece, WHOLE_TILES, PIECES, False, False, SPLIT, GROUP, GROUPS, GROUP * BUFS, num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_blockwise_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                           WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                           ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                           num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1, stride_sam=1, stride_sak=1,
                           stride_sbk=1, stride_sbn=1, ones_ptr=None):
    """C = A @ W^T with block-wise scales: ``scale_a`` (M, K/128) for A's 1 x 128 groups and
    ``scale_b`` (K/128, N/128) for W's 128 x 128 blocks, read through their strides. The paired
    kernel's structure (two consumer groups of 64 x 128, the producer warp), with
    ``_blockwise_consumer`` and BLOCKWISE_REGISTERS; the other kernels' parameters, so that one
    launcher serves all (ROW_A and ROW_B are False, PRECISE True and PROMOTE 1: every K block is
    promoted with its scales)."""
    gl.static_assert(num_warps == 4, "each consumer group of the block-wise kernel is one warp group")
    gl.static_assert(PRECISE and not ROW_A and not ROW_B and PROMOTE == 1,
                     "block-wise scales are applied at every K block's promotion")
    gl.static_assert(a_desc.block_type.shape[1] == 128, "a K step is one 128-wide block of the scales")
    gl.static_assert(b_desc.block_type.shape[0] == 128, "a tile is one weight block wide")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, PAIRED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, PAIRED_GROUPS)
    gl.warp_specialize([
        (_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                               ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                               stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 0, PAIRED_GROUPS, 4)),
        (_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                               ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                               stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 1, PAIRED_GROUPS, 4)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     PAIRED_GROUPS)),
    ], PAIRED_WORKERS, BLOCKWISE_REGISTERS)



# ---- block-wise scales through TMA -----------------------------------------------------------------
# The kernel above loads each K step's scales from global memory in the consumer warps, which
# then wait for those loads at their branches; here the producer copies them into the ring with the
# operands, on the same ``ready`` barrier, and the consumers read them from shared memory. TMA's
# rules decide when: a global row stride and an innermost box coordinate of whole 16-byte units
# (``tma_scales_take``); other layouts go to ``gluon_blockwise_kernel``.
SCALE_ROWS = gl.constexpr(128)  # A's scales of a tile's rows: one box of one K block, M-major
SB_BOX = gl.constexpr(4)  # W's scales: a box of 4 (16 bytes, TMA's smallest), from a multiple of 4
SB_SPREAD = gl.constexpr(8)  # W's scale slots 8 boxes apart: each copy lands on a 128-byte boundary
SCALE_SLOT_BYTES = (SCALE_ROWS.value + SB_BOX.value * SB_SPREAD.value) * 4  # per stage
#: Whether launches send block-wise scales that TMA can read to ``gluon_blockwise_tma_kernel`` (on
#: an H100: every check passed, 1.02 to 1.10x the kernel that loads the scales on eleven cells,
#: ``results/tma_scales_h100.json``). Tests turn it off to reach the other kernel through the API.
BLOCK_SCALES_BY_TMA = True


@gluon.jit
def w_scale_box(kb, nb, SB_K_MAJOR: gl.constexpr):
    """Where the box holding W's scale of K block ``kb`` and weight block ``nb`` starts, and the
    scale's place in it: along K for K-major scales ((N/128, K/128) rows), else along N."""
    if SB_K_MAJOR:
        return [nb, kb - kb % SB_BOX], kb % SB_BOX
    else:
        return [kb, nb - nb % SB_BOX], nb % SB_BOX


@gluon.jit
def load_ring_with_scales(a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, M, N,
                          K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, GROUPS: gl.constexpr,
                          SB_K_MAJOR: gl.constexpr):
    """``load_ring`` that also copies each K step's scales into its stage, counted on the same
    barrier: A's for the tile's rows (one row of A's M-major scales, (K/128, M)) and the box of
    W's that holds the tile's block scale."""
    SUB_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    BYTES: gl.constexpr = (GROUPS * a_desc.block_type.nbytes + b_desc.block_type.nbytes + sa_desc.block_type.nbytes
                           + sb_desc.block_type.nbytes)
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N, BLOCK_K)
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
        for kk in range(k_first, k_last):
            s = it % STAGES
            bar = ready.index(s)
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(bar, BYTES)
            load_a(a_desc, a_bufs, bar, s, off_m, kk * BLOCK_K, GROUPS)
            tma.async_copy_global_to_shared(b_desc, [off_n, kk * BLOCK_K], bar, b_bufs.index(s))
            tma.async_copy_global_to_shared(sa_desc, [kk, off_m], bar, sa_bufs.index(s))
            box, _ = w_scale_box(kk, off_n // BLOCK_N, SB_K_MAJOR)
            tma.async_copy_global_to_shared(sb_desc, box, bar, sb_bufs.index(s * SB_SPREAD))
            it += 1


@gluon.jit
def staged_scales(sa_flat, sb_flat, r, kb, nb, layout: gl.constexpr, GROUP: gl.constexpr, SUB_M: gl.constexpr,
                  SB_K_MAJOR: gl.constexpr):
    """Ring step ``r``'s scales (K block ``kb``), read from its stage: group GROUP's SUB_M rows of
    A's (in ``layout``, the accumulator's rows) times weight block ``nb``'s, picked from its box.
    (Multiplied here, not at the promotion: there ptxas serialized the ``wgmma``, remark C7514.)"""
    STAGES: gl.constexpr = sa_flat.type.shape[0]
    s = r % STAGES
    sa = sa_flat.index(s).slice(GROUP * SUB_M, SUB_M).load(layout)
    every: gl.constexpr = gl.BlockedLayout([SB_BOX], [32], [gl.num_warps()], [0])
    box = sb_flat.index(s * SB_SPREAD).load(every)
    _, at = w_scale_box(kb, nb, SB_K_MAJOR)
    return sa * gl.sum(gl.where(gl.arange(0, SB_BOX, layout=every) == at, box, 0.0), axis=0)



@gluon.jit
def staged_blockwise_tile(a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, acc, it, k_first, k_steps, nb,
                          GROUP: gl.constexpr, GROUPS: gl.constexpr, SB_K_MAJOR: gl.constexpr):
    """``blockwise_tile`` with each step's scales read from its stage of the ring right after its
    ``wgmma`` is issued (the stage is ready, and handed back only once promoted), already
    multiplied (``blockwise_promote`` takes W's scale as 1.0): no global load and no wait on one
    in the consumer."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    SUB_M: gl.constexpr = acc.type.shape[0]
    rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    f0 = staged_scales(sa_flat, sb_flat, it, k_first, nb, rows, GROUP, SUB_M, SB_K_MAJOR)
    for kk in range(0, k_steps - 2, 2):  # steps kk and kk + 1 promoted, kk + 2 left in flight
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        f1 = staged_scales(sa_flat, sb_flat, it + kk + 1, k_first + kk + 1, nb, rows, GROUP, SUB_M, SB_K_MAJOR)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, acc0, total, it + kk, f0, 1.0, STAGES)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        f0 = staged_scales(sa_flat, sb_flat, it + kk + 2, k_first + kk + 2, nb, rows, GROUP, SUB_M, SB_K_MAJOR)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = blockwise_promote(empty, acc1, total, it + kk + 1, f1, 1.0, STAGES)
    if k_steps % 2 == 0:  # two steps left, the first in flight
        next1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + k_steps - 1, GROUP, GROUPS)
        f1 = staged_scales(sa_flat, sb_flat, it + k_steps - 1, k_first + k_steps - 1, nb, rows, GROUP, SUB_M,
                           SB_K_MAJOR)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 2, f0, 1.0, STAGES)
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        total = blockwise_promote(empty, done1, total, it + k_steps - 1, f1, 1.0, STAGES)
    else:  # one, in flight
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 1, f0, 1.0, STAGES)
    return total, it + k_steps


@gluon.jit
def _staged_blockwise_consumer(a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr,
                               partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                               SPLIT: gl.constexpr, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                               SB_K_MAJOR: gl.constexpr, num_warps: gl.constexpr):
    """``_blockwise_consumer`` with ``staged_blockwise_tile``."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                        a_desc.block_type.shape[1])
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        acc, it = staged_blockwise_tile(a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, acc, it, k_first,
                                        k_last - k_first, off_n // BLOCK_N, GROUP, GROUPS, SB_K_MAJOR)
        finish_unit(acc, 1.0, 1.0, c_desc, c_bufs, partials_ptr, arrivals_ptr, ones_ptr, ones_ptr, off_m, off_n,
                    M, N, tile, piece, WHOLE_TILES, PIECES, False, False, SPLIT, GROUP, GROUPS, GROUP * BUFS, num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_blockwise_tma_kernel(a_desc, b_desc, c_desc, scale_a_desc, scale_b_desc, partials_ptr, arrivals_ptr, M, N,
                               K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                               ROW_A: gl.constexpr, ROW_B: gl.constexpr, PRECISE: gl.constexpr,
                               SPLIT: gl.constexpr, num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1,
                               SB_K_MAJOR: gl.constexpr = True, ones_ptr=None):
    """``gluon_blockwise_kernel`` with the scales copied by TMA into the ring: ``scale_a_desc`` over
    A's scales M-major, (K/128, M), a box of one K block's 128 rows; ``scale_b_desc`` over W's,
    (N/128, K/128) if SB_K_MAJOR else (K/128, N/128), a box of 4 from a multiple of 4."""
    gl.static_assert(num_warps == 4, "each consumer group of the block-wise kernel is one warp group")
    gl.static_assert(PRECISE and not ROW_A and not ROW_B and PROMOTE == 1,
                     "block-wise scales are applied at every K block's promotion")
    gl.static_assert(a_desc.block_type.shape[1] == 128, "a K step is one 128-wide block of the scales")
    gl.static_assert(b_desc.block_type.shape[0] == 128, "a tile is one weight block wide")
    gl.static_assert(scale_a_desc.block_type.shape[1] == PAIRED_GROUPS * a_desc.block_type.shape[0],
                     "a box of A's scales covers the tile's rows")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, PAIRED_GROUPS)
    sa_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + scale_a_desc.block_type.shape, scale_a_desc.layout)
    sb_bufs = gl.allocate_shared_memory(gl.float32, [STAGES * SB_SPREAD] + scale_b_desc.block_type.shape,
                                        scale_b_desc.layout)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # the boxes' rows, read as vectors
    sa_flat = sa_bufs._reinterpret(gl.float32, [STAGES, SCALE_ROWS], flat)
    sb_flat = sb_bufs._reinterpret(gl.float32, [STAGES * SB_SPREAD, SB_BOX], flat)
    c_bufs = allocate_outputs(c_desc, b_desc, PAIRED_GROUPS)
    gl.warp_specialize([
        (_staged_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr,
                                      partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, SPLIT, 0,
                                      PAIRED_GROUPS, SB_K_MAJOR, 4)),
        (_staged_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr,
                                      partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, SPLIT, 1,
                                      PAIRED_GROUPS, SB_K_MAJOR, 4)),
        (load_ring_with_scales, (a_desc, b_desc, scale_a_desc, scale_b_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready,
                                 empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, PAIRED_GROUPS, SB_K_MAJOR)),
    ], PAIRED_WORKERS, BLOCKWISE_REGISTERS)

@gluon.jit
def _pingpong_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                       partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                       ROW_A: gl.constexpr, ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                       GROUP: gl.constexpr, PROMOTE: gl.constexpr):
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
                              turn.index(1 - GROUP), True, PROMOTE)
            # the scales are loaded now: before the K loop they would cost ptxas a spill (and this
            # epilogue runs while the other group's K loop does)
            off_m, off_n = unit_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M, 0, 1)
            sa, sb = tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, False)
            finish_unit(acc, sa, sb, c_desc, c_bufs, partials_ptr, arrivals_ptr, scale_a_ptr, scale_b_ptr, off_m,
                        off_n, M, N, tile, piece, WHOLE_TILES, PIECES, ROW_A, ROW_B, SPLIT, 0, 1, GROUP * BUFS, 4)
        it += k_last - k_first
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_pingpong_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                          WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                          ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                          num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
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
                              partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                              PRECISE, SPLIT, 0, PROMOTE)),
        (_pingpong_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                              partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B,
                              PRECISE, SPLIT, 1, PROMOTE)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, 1)),
    ], PINGPONG_WORKERS, [232, 24])


# ---- configurations --------------------------------------------------------------------------------

def make_gluon_config(kind, bm, bn, bk, stages, group_m=8, warps=4, split=False, store_n=None, promote=None):
    """PROMOTE, the K steps between two promotions with precise accumulation, is by default the
    steps of 128 values of K (cuBLAS's interval, chapter 10)."""
    return triton.Config({"KIND": kind, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "SPLIT": split, "STORE_N": bn if store_n is None else store_n,
                          "PROMOTE": max(1, 128 // bk) if promote is None else promote},
                         num_warps=warps, num_stages=stages)


# num_warps counts the consumer warps of the default partition (the producer's warp group, and the
# other consumer groups of ping-pong and of the stacked kernel, come on top: _OTHER_WARPS);
# num_stages is the ring's depth; a stacked BLOCK_M is three groups' rows; STORE_N the columns of
# each TMA store of the output (two buffers of them, where less than BLOCK_N, make room for one more
# stage). From sweeps on the nine shapes on the H200 (chapter 08), each the best of the Gluon
# kernels on some shape in one of them; launch_gluon times them all for each new problem, and where
# two are within the noise of each other, which one wins changes from run to run.
GLUON_CONFIGS = [make_gluon_config("cooperative", 128, 256, 128, 3, group_m=16, warps=8),
                 make_gluon_config("cooperative", 128, 256, 64, 6, warps=8),
                 make_gluon_config("cooperative", 128, 128, 128, 6),
                 make_gluon_config("pingpong", 128, 128, 128, 6, group_m=16, store_n=32),
                 make_gluon_config("pingpong", 128, 128, 128, 6, store_n=32),
                 make_gluon_config("stacked", 192, 128, 128, 4),
                 make_gluon_config("stacked", 192, 128, 128, 4, group_m=16),
                 make_gluon_config("cooperative", 128, 256, 128, 4, group_m=16, warps=8, store_n=64),
                 # with a split tail, timed only where split_plan cuts tiles: each won some of the
                 # shapes with K = 12288 and N = 3072 in a sweep on the H200 (chapter 08)
                 make_gluon_config("cooperative", 128, 256, 128, 4, group_m=16, warps=8, store_n=64, split=True),
                 make_gluon_config("cooperative", 128, 128, 128, 6, split=True),
                 make_gluon_config("stacked", 192, 128, 128, 4, split=True)]
# With precise accumulation each consumer group holds two accumulators (the tensor cores' sum and
# the float32 total), three where the next wgmma runs under the add: 64 x 128 of each per warp
# group, three in the paired kernel's 232 registers, two in the stacked kernel's 160. PROMOTE is 1 (128 values of K): chapter 10 measures that cuBLAS's
# precise error is that interval's, and a longer one's is larger; it also times the other ways of
# hiding the promotion that were tried (tools/precise_variants.py, tools/stacked_precise.py), on the
# H200: the paired kernel was the faster where M is 512 and on 1152 x 12288 x 3072, the stacked
# kernel's 192-row tiles on the other reference shapes.
# The last three hold one stage more, made room for by storing the output in column parts of 64 or
# 32 (tools/ring_depth.py): on an H100 they were the best where M is 512 and 1152 (up to 7% ahead of
# the 5-stage paired ones) and per tensor on 8192^3. On the H200 (chapter 10's table of
# 2026-12-05) the 6-stage paired ones were the fastest on 8 of the 18 reference cells, the
# 5-stage stacked one on none.
GLUON_PRECISE_CONFIGS = [make_gluon_config("paired", 128, 128, 128, 5),
                         make_gluon_config("paired", 128, 128, 128, 5, group_m=16),
                         make_gluon_config("paired", 128, 128, 128, 5, group_m=16, split=True),
                         make_gluon_config("stacked", 192, 128, 128, 4),
                         make_gluon_config("stacked", 192, 128, 128, 4, group_m=16),
                         make_gluon_config("stacked", 192, 128, 128, 4, group_m=16, split=True),
                         make_gluon_config("paired", 128, 128, 128, 6, store_n=64),
                         make_gluon_config("paired", 128, 128, 128, 6, group_m=16, store_n=64),
                         make_gluon_config("stacked", 192, 128, 128, 5, store_n=32)]
# Block-wise scales (1 x 128 groups of A, 128 x 128 blocks of W): the paired kernel's tile and ring,
# each K block promoted with its scales (``gluon_blockwise_kernel``).
GLUON_BLOCK_CONFIGS = [make_gluon_config("blockwise", 128, 128, 128, 5),
                       make_gluon_config("blockwise", 128, 128, 128, 5, group_m=16),
                       make_gluon_config("blockwise", 128, 128, 128, 5, group_m=16, split=True)]
GLUON_KERNELS = {"cooperative": gluon_ws_kernel, "pingpong": gluon_pingpong_kernel, "stacked": gluon_stacked_kernel,
                 "paired": gluon_paired_kernel, "blockwise": gluon_blockwise_kernel}
# Consumer groups stacked along M in each tile (each its own partition, BLOCK_M // groups rows); the
# warps of the partitions beside the default one; and those warps counted in whole warp groups, as
# the registers are: the producer's warp is padded to a warp group.
GLUON_GROUPS = {"cooperative": 1, "pingpong": 1, "stacked": STACKED_GROUPS.value, "paired": PAIRED_GROUPS.value,
                "blockwise": PAIRED_GROUPS.value}
GLUON_WORKERS = {"cooperative": COOPERATIVE_WORKERS.value, "pingpong": PINGPONG_WORKERS.value,
                 "stacked": STACKED_WORKERS.value, "paired": PAIRED_WORKERS.value, "blockwise": PAIRED_WORKERS.value}
_OTHER_WARPS = {kind: sum(-(-w // 4) * 4 for w in workers) for kind, workers in GLUON_WORKERS.items()}
# The consumer warps each kernel takes, per group (4, a warp group, where a kind is not listed).
GLUON_WARPS = {"cooperative": (4, 8)}
_KEYS = WS_KEYS | {"KIND", "SPLIT", "STORE_N", "PROMOTE"}


def gluon_config(**wanted) -> triton.Config:
    """The one entry of GLUON_CONFIGS with the values ``wanted`` of its keys (``KIND="pingpong"``,
    ``BLOCK_N=256``, ...) and of ``num_warps`` and ``num_stages``: a configuration named by what it
    is, not by its place in the list. Raises ValueError unless exactly one matches."""
    def fields(c):
        return {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    names = sorted(fields(GLUON_CONFIGS[0]))
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"a Gluon configuration has no {unknown}: name some of {names}")
    found = [c for c in GLUON_CONFIGS if all(fields(c)[k] == v for k, v in wanted.items())]
    if len(found) != 1:
        raise ValueError(f"{len(found)} of GLUON_CONFIGS have {wanted}, not one: "
                         + "; ".join(describe_config(c) for c in found))
    return found[0]


def gluon_shared_bytes(config: triton.Config, out_bytes: int) -> int:
    """Shared memory of a Gluon kernel: the ring, the output buffers (``output_buffers`` for each
    consumer group: the whole tile's rows in a cooperative kernel, a third of them in each of the
    stacked kernel's groups, all of them in each of ping-pong's two; STORE_N columns), the block-wise
    scales' slots (``gluon_blockwise_tma_kernel``'s, counted for either block-wise kernel) and the
    barriers (counting ping-pong's two ``turn`` barriers for every kind)."""
    k = config.kwargs
    ring = pipeline_smem(k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], config.num_stages)
    buffers = output_buffers(k["STORE_N"], k["BLOCK_N"]) * (2 if k["KIND"] == "pingpong" else 1)
    outs = buffers * k["BLOCK_M"] * k["STORE_N"] * out_bytes
    scales = SCALE_SLOT_BYTES * config.num_stages if k["KIND"] == "blockwise" else 0  # the TMA kernel's slots
    return ring + outs + scales + 8 * (2 * config.num_stages + 2)


def gluon_maxnreg(config: triton.Config) -> int:
    """The registers per thread to compile for: the register file (64K) is shared by the default
    partition's consumer warps, the producer's warp group and the other consumer groups (ping-pong:
    one, stacked: two). Every thread starts with this count; each partition then moves to its own
    with setmaxnreg (the producer down, the consumers up), and ptxas compiles each partition's code
    for the count it moves to."""
    warps = config.num_warps + _OTHER_WARPS[config.kwargs["KIND"]]
    return min(255, 65536 // (32 * warps) // 8 * 8)


def gluon_blocks(config: triton.Config) -> tuple[list[int], list[int], list[int]]:
    """The blocks of A's, W's and C's descriptors: one consumer group's rows of a tile for A and C,
    and STORE_N columns, one store's, for C."""
    k = config.kwargs
    rows = k["BLOCK_M"] // GLUON_GROUPS[k["KIND"]]
    return [rows, k["BLOCK_K"]], [k["BLOCK_N"], k["BLOCK_K"]], [rows, k["STORE_N"]]


def fit_gluon_config(config: triton.Config, out_bytes: int) -> triton.Config:
    """``config`` with as many ring buffers as fit beside an output tile of ``out_bytes`` per element
    (at least 2: ``gluon_refuses`` says when even those do not fit)."""
    return fit_stages(config, out_bytes, gluon_shared_bytes)


# ---- what they refuse ------------------------------------------------------------------------------

def gluon_refuses(config: triton.Config, out_bytes: int = 2) -> str | None:
    """Why the Gluon kernels cannot run ``config`` (for an output of ``out_bytes`` per element), or None."""
    if not isinstance(config, triton.Config):
        return f"config must be a triton.Config, got {type(config).__name__}"
    k = config.kwargs
    if set(k) != _KEYS or k["KIND"] not in GLUON_KERNELS or not isinstance(k["SPLIT"], bool):
        return (f"a Gluon configuration has the keys {sorted(_KEYS)}, KIND one of {sorted(GLUON_KERNELS)} "
                f"and SPLIT a bool; got {k}")
    groups = GLUON_GROUPS[k["KIND"]]
    try:  # a stacked tile's BLOCK_M is checked below; the rest as for every kernel
        check_config(config if groups == 1 else
                     triton.Config({**k, "BLOCK_M": 16}, num_warps=config.num_warps, num_stages=config.num_stages))
    except (TypeError, ValueError) as e:
        return str(e)
    if isinstance(k["PROMOTE"], bool) or not isinstance(k["PROMOTE"], int) or k["PROMOTE"] < 1:
        return f"PROMOTE, the K steps between two promotions, must be a positive int, got {k['PROMOTE']!r}"
    if k["KIND"] == "blockwise" and (k["BLOCK_K"], k["BLOCK_N"], k["PROMOTE"]) != (128, 128, 1):
        return ("the blockwise kernel's K step is one 128-wide block of the scales and its tile one weight block "
                f"wide: BLOCK_K = BLOCK_N = 128 and PROMOTE = 1, got BLOCK_K={k['BLOCK_K']}, BLOCK_N={k['BLOCK_N']}, "
                f"PROMOTE={k['PROMOTE']}")
    if k["STORE_N"] not in [k["BLOCK_N"] // parts for parts in (1, 2, 4)] or isinstance(k["STORE_N"], bool):
        return (f"STORE_N, the columns of each store of the output, must be BLOCK_N ({k['BLOCK_N']!r}), "
                f"a half or a quarter of it; got {k['STORE_N']!r}")
    if k["STORE_N"] * out_bytes % 16:
        return (f"a TMA store moves rows of a multiple of 16 bytes: STORE_N x {out_bytes}-byte outputs is "
                f"{k['STORE_N'] * out_bytes} bytes")
    m = k["BLOCK_M"]
    if groups > 1 and (isinstance(m, bool) or not isinstance(m, int) or m % groups or m // groups < 16
                       or (m // groups) & (m // groups - 1)):
        return (f"the {k['KIND']} kernel stacks {groups} consumer groups, each on BLOCK_M / {groups} rows (a block of "
                f"A's descriptor): BLOCK_M must be {groups} times a power of two of at least 16, got {m!r}")
    warps = GLUON_WARPS.get(k["KIND"], (4,))
    if config.num_warps not in warps:
        return (f"the {k['KIND']} kernel takes {' or '.join(map(str, warps))} consumer warps"
                + (f" in each of its {groups} groups" if groups > 1 else "") + f", got num_warps={config.num_warps}")
    rows = gluon_blocks(config)[0][0]
    if rows % (16 * config.num_warps) or k["BLOCK_N"] > 256 or k["BLOCK_K"] < 32:
        return ("wgmma needs " + (f"each consumer group's rows (BLOCK_M / {groups})" if groups > 1 else "BLOCK_M")
                + f" a multiple of 16 x num_warps ({16 * config.num_warps}), BLOCK_N at most 256 and BLOCK_K at "
                f"least 32; got {k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}")
    per_thread = rows * k["BLOCK_N"] // (32 * config.num_warps)
    # every consumer partition gets at least gluon_maxnreg's count (setmaxnreg moves them up from it),
    # so room counted from it is on the safe side; 40 beside the accumulator are what the cooperative
    # 128 x 256 configuration has at 168 (128 + 40), and it does not spill
    room = gluon_maxnreg(config) - 40
    if per_thread > min(128, room):
        return (f"the accumulator would take {per_thread} registers per thread (at most {min(128, room)} of the "
                f"{gluon_maxnreg(config)} that ptxas has leave room for the rest): use "
                + ("more warps or " if len(warps) > 1 else "") + "a smaller tile")
    if config.num_stages < 2:
        return f"the ring needs at least 2 buffers, got num_stages={config.num_stages}"
    need = gluon_shared_bytes(config, out_bytes)
    if need > SMEM_PER_PROGRAM_MAX:
        return (f"{need // 1024} KiB of shared memory with {out_bytes}-byte outputs, more than the "
                f"{SMEM_PER_PROGRAM_MAX // 1024} KiB a program may have: "
                + ("fewer stages" if config.num_stages > 2 else "smaller tiles"))
    return None


_OUT = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def is_block(ops: Operands) -> bool:
    return ops.recipe_a == "block"  # check_operands makes both sides block-wise, or neither


def gluon_flags(ops: Operands, precise: bool) -> dict:
    """The kernels' ROW_A, ROW_B and PRECISE for these operands (``Operands.flags``); block-wise
    scales are applied at every K block's promotion, so they are precise whatever ``precise`` says."""
    return dict(ROW_A=False, ROW_B=False, PRECISE=True) if is_block(ops) else ops.flags(precise)


def check_kind(config: triton.Config, ops: Operands) -> None:
    """Block-wise scales go with the blockwise kernel, and only there; ValueError otherwise."""
    if (config.kwargs["KIND"] == "blockwise") != is_block(ops):
        raise ValueError(f"the {config.kwargs['KIND']} kernel takes " + (
            "block-wise scales only" if config.kwargs["KIND"] == "blockwise" else "per-tensor and per-row scales only")
            + f", and these are {ops.recipe_a}-wise (ws_gluon.GLUON_BLOCK_CONFIGS are for block-wise scales)")


_ONES: dict[torch.device, torch.Tensor] = {}


def _block_arguments(ops: Operands) -> dict:
    """What the blockwise kernel takes beyond the others' parameters: the scales' strides, and a
    float32 1.0 (kept per device) for the epilogue, whose scales are ones. The 1.0 outlives the
    call that makes it, so it is allocated outside any CUDA graph's memory pool (``host._kept``):
    a first call under ``torch.compile``'s "reduce-overhead" runs while its graph is warmed up."""
    device = ops.a.device
    if device not in _ONES:
        _ONES[device] = _kept(device, lambda: torch.ones(1, dtype=torch.float32, device=device))
    (sam, sak), (sbk, sbn) = ops.scale_a.stride(), ops.scale_b.stride()
    return dict(stride_sam=sam, stride_sak=sak, stride_sbk=sbk, stride_sbn=sbn, ones_ptr=_ONES[device])


def _tma_view(t: torch.Tensor, dims: tuple[int, int]) -> tuple[list[int], list[int]] | None:
    """(shape, strides) of ``t`` (2-D, float32) with its dimensions in the order ``dims`` if TMA can
    read it so: the last one contiguous, the other's stride a whole number of 16-byte units, the base
    16-byte aligned; else None."""
    shape, strides = [t.shape[d] for d in dims], [t.stride(d) for d in dims]
    if strides[1] != 1 and shape[1] > 1 or strides[0] * 4 % 16 or t.data_ptr() % 16:
        return None
    return shape, [strides[0], 1]


def tma_scales_take(ops: Operands) -> dict | None:
    """How ``gluon_blockwise_tma_kernel`` reads these block-wise scales, or None where TMA cannot
    (``gluon_blockwise_kernel`` takes them then): A's (M, K/128) M-major, as (K/128, M), its row
    stride a multiple of 4 (``quantize`` makes them so on a GPU, M padded in the stride; cuBLAS's
    layout where M is a multiple of 4); W's (K/128, N/128) as (N/128, K/128) rows (K-major: the
    transpose of ``quantize``'s "128x128" scales of the (N, K) weight, when K is a multiple of
    512) or as they are (N-major). Returns each one's (shape, strides) and SB_K_MAJOR."""
    sa = _tma_view(ops.scale_a, (1, 0))
    if sa is None:
        return None
    for k_major, dims in ((True, (1, 0)), (False, (0, 1))):
        sb = _tma_view(ops.scale_b, dims)
        if sb is not None:
            return dict(scale_a=sa, scale_b=sb, SB_K_MAJOR=k_major)
    return None


_SCALE_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)


def _scale_descriptors(ops: Operands, how: dict) -> list:
    """The host-side TMA descriptors of A's and W's scales, as ``tma_scales_take`` reads them."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return [TensorDescriptor(t, *how[name], block, _SCALE_LAYOUT) for t, name, block in
            ((ops.scale_a, "scale_a", [1, SCALE_ROWS.value]), (ops.scale_b, "scale_b", [1, SB_BOX.value]))]


def gluon_takes(ops: Operands, out: torch.Tensor) -> str | None:
    """Why the Gluon kernels cannot take this problem, or None: they need a Hopper GPU (Triton's
    interpreter cannot run Gluon) and what TMA needs."""
    if not is_block(ops):  # block-wise scales: gluon_blockwise_kernel
        why = epilogue_scales_only("gluon")(ops, out)
        if why:
            return why
    if ops.a.dtype != torch.float8_e4m3fn or ops.b.dtype != torch.float8_e4m3fn:
        return (f"the Gluon kernels take float8_e4m3fn operands (the ones chapter 08 checks), got "
                f"{ops.a.dtype} and {ops.b.dtype}")
    if out.dtype not in _OUT:
        return f"the Gluon kernels write bfloat16, float16 or float32, got {out.dtype}"
    if not ON_GPU or not out.is_cuda:
        return ("the Gluon kernels run on a Hopper GPU only, on CUDA tensors: Triton's interpreter cannot run "
                "Gluon, and FP8_TUTORIAL_MODE=compile only compiles")
    if capability(out.device)[0] != 9:
        return "the Gluon kernels use Hopper's wgmma and setmaxnreg: they need compute capability 9.x"
    # TMA's rules are about a, b and out (the TMA kernels' refusal of block-wise scales is theirs)
    return tma_takes(dataclasses.replace(ops, recipe_a="tensor", recipe_b="tensor") if is_block(ops) else ops, out)


# ---- the launcher ----------------------------------------------------------------------------------

def gluon_plan(config: triton.Config, M: int, N: int, K: int, num_sms: int) -> tuple[int, int]:
    """(whole tiles, pieces per other tile) for a Gluon launch: ``split_plan``'s with SPLIT, else all
    the tiles whole."""
    k = config.kwargs
    tiles = tile_count(M, N, k)
    return cached_split_plan(tiles, triton.cdiv(K, k["BLOCK_K"]), num_sms) if k["SPLIT"] else (tiles, 1)


def _layouts(config: triton.Config, out_dtype: torch.dtype) -> tuple:
    """The shared-memory layouts of A's, W's and C's descriptor blocks (``gluon_takes`` refuses
    e5m2 operands)."""
    a_block, b_block, c_block = gluon_blocks(config)
    fp8 = gl.float8e4nv
    return (gl.NVMMASharedLayout.get_default_for(a_block, fp8), gl.NVMMASharedLayout.get_default_for(b_block, fp8),
            gl.NVMMASharedLayout.get_default_for(c_block, getattr(gl, _OUT[out_dtype])))


def _run(ops: Operands, out: torch.Tensor, flags: dict, cfg: triton.Config, num_sms: int, plan, kernels):
    """One launch of ``cfg``'s kernel: returns the compiled kernel and the values of the launch."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    k = cfg.kwargs
    M, N, K = ops.M, ops.N, ops.K
    blocks = gluon_blocks(cfg)
    descriptors = [TensorDescriptor.from_tensor(t, block, layout)
                   for t, block, layout in zip((ops.a, ops.b.t(), out), blocks, _layouts(cfg, out.dtype))]
    tiles = tile_count(M, N, k)
    whole, pieces = gluon_plan(cfg, M, N, K, num_sms) if plan is None else \
        check_plan(plan, tiles, triton.cdiv(K, k["BLOCK_K"]))
    rest = tiles - whole
    # one float32 slot per piece of each split tile, and a counter per split tile and consumer group;
    # unsplit, neither is touched, and both pointers are scale_a's
    slots = rest * pieces * k["BLOCK_M"] * k["BLOCK_N"] if pieces > 1 else 0
    counters = rest * GLUON_GROUPS[k["KIND"]] if pieces > 1 else 0
    block = is_block(ops)  # the blockwise kernels read the scales through TMA, or through their strides
    kernel = (kernels or GLUON_KERNELS)[k["KIND"]]
    how = tma_scales_take(ops) if block and kernels is None and BLOCK_SCALES_BY_TMA else None
    if how is not None:
        kernel, scales = gluon_blockwise_tma_kernel, _scale_descriptors(ops, how)
        extra = dict(SB_K_MAJOR=how["SB_K_MAJOR"], ones_ptr=_block_arguments(ops)["ones_ptr"])
    else:
        scales = (ops.scale_a, ops.scale_b) if block else ops.packed_scales
        extra = _block_arguments(ops) if block else {}
    unused = ops.scale_a if how is not None else scales[0]  # a float32 tensor: the pointers' type is kept
    partials, arrivals = workspace(out.device, slots, counters) if pieces > 1 else (unused, unused)
    grid = (min(num_sms, whole + rest * pieces),)
    compiled = kernel[grid](
        *descriptors, *scales, partials, arrivals, M, N, K, whole, pieces, k["GROUP_M"], cfg.num_stages,
        **flags, SPLIT=k["SPLIT"], num_warps=cfg.num_warps, PROMOTE=k["PROMOTE"], maxnreg=gluon_maxnreg(cfg), **extra)
    return compiled, dict(whole=whole, pieces=pieces, grid=grid, slots=slots, counters=counters, scales_by_tma=how)


# Which configuration launch_gluon chose for each problem seen on this GPU.
CHOICES: dict[tuple, triton.Config] = {}


def launch_gluon(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                 num_sms: int | None = None, plan: tuple[int, int] | None = None,
                 kernels: dict | None = None) -> Launch:
    """Run a Gluon kernel (``config``'s KIND: one of ``GLUON_KERNELS``) into ``out``, descriptors
    built here; without ``config``, the first launch for a problem times each of GLUON_CONFIGS
    (cut to the stages that fit) and keeps the fastest. A SPLIT configuration cuts the tiles of
    the last wave by ``plan`` (default ``gluon_plan``'s), and the last piece of each tile to finish
    adds them up. ``kernels`` (by KIND, with a ``config``) replaces
    GLUON_KERNELS: ``kernels.ablation``'s variants, which time what part of the work costs. Raises
    ValueError where ``gluon_takes`` or ``gluon_refuses`` says no, or for a plan without a SPLIT
    configuration."""
    why = gluon_takes(ops, out)
    if why:
        raise ValueError(why)
    num_sms = programs(out, num_sms, None)
    if config is not None:
        why = gluon_refuses(config, out.element_size())
        if why:
            raise ValueError(why)
        check_kind(config, ops)
    if kernels is not None and config is None:
        raise ValueError("kernels replace GLUON_KERNELS for one configuration: pass config= too")
    if plan is not None and (config is None or not config.kwargs["SPLIT"]):
        raise ValueError("a plan needs a configuration with SPLIT=True (ws_gluon.make_gluon_config(..., split=True))")
    flags = gluon_flags(ops, precise)

    def run(cfg):
        return Launch(cfg, _run(ops, out, flags, cfg, num_sms, plan, kernels)[0])

    if config is not None:
        return run(config)
    return run(choose_gluon_config(ops, out, flags, num_sms, run))


def choose_gluon_config(ops: Operands, out: torch.Tensor, flags: dict, num_sms: int, run) -> triton.Config:
    """The configuration kept for this problem: on its first launch, every one of GLUON_CONFIGS
    that fits is timed with ``run`` and the fastest kept."""
    M, N, K = ops.M, ops.N, ops.K
    key = (M, N, K, *flags.values(), num_sms, ops.a.dtype, out.dtype) + (
        (True, BLOCK_SCALES_BY_TMA and tma_scales_take(ops) is not None) if is_block(ops) else ())
    if key not in CHOICES:
        configs = GLUON_BLOCK_CONFIGS if is_block(ops) else GLUON_PRECISE_CONFIGS if flags["PRECISE"] else GLUON_CONFIGS
        candidates = [fit_gluon_config(c, out.element_size()) for c in configs]
        # a SPLIT configuration whose plan cuts no tile is its plain one: not timed twice
        candidates = [c for c in candidates if gluon_refuses(c, out.element_size()) is None
                      and (not c.kwargs["SPLIT"] or gluon_plan(c, M, N, K, num_sms)[1] > 1)]
        CHOICES[key] = fastest(candidates, run)
    return CHOICES[key]


def prepare_gluon(ops: Operands, out: torch.Tensor, precise: bool):
    """The first call of a problem: choose its configuration (timing them, once per problem), run
    it into ``out``, and return (the configuration, what later calls of the same problem signature
    run instead): the compiled kernels launched directly (``host.Direct``), with new descriptors'
    bases only, on the Triton that layout is checked against (``compat.DIRECT_LAUNCH``)."""
    why = gluon_takes(ops, out)
    if why:
        raise ValueError(why)
    num_sms = programs(out, None, None)
    flags = gluon_flags(ops, precise)
    cfg = choose_gluon_config(ops, out, flags, num_sms,
                              lambda c: _run(ops, out, flags, c, num_sms, None, None))
    compiled, shape = _run(ops, out, flags, cfg, num_sms, None, None)
    if not DIRECT_LAUNCH:  # another Triton: later calls launch as the first did
        recipes = ops.recipe_a, ops.recipe_b

        def launch_jit(a, b, scale_a, scale_b, c):
            _run(Operands(a, b, scale_a, scale_b, *recipes), c, flags, cfg, num_sms, None, None)
        return cfg, launch_jit
    k = cfg.kwargs
    w = ops.b.t()  # the (N, K) weight, K-major
    descriptors = dict(a_desc=(list(ops.a.shape), list(ops.a.stride())), b_desc=(list(w.shape), list(w.stride())),
                       c_desc=(list(out.shape), list(out.stride())))
    fixed = dict(M=ops.M, N=ops.N, K=ops.K, WHOLE_TILES=shape["whole"], PIECES=shape["pieces"],
                 GROUP_M=k["GROUP_M"], STAGES=cfg.num_stages, SPLIT=k["SPLIT"], num_warps=cfg.num_warps,
                 PROMOTE=k["PROMOTE"], **flags)
    how = shape["scales_by_tma"]
    if how is not None:  # the scales' descriptors too (each call passes the tensors as bases)
        descriptors.update(scale_a_desc=how["scale_a"], scale_b_desc=how["scale_b"])
        fixed.update(SB_K_MAJOR=how["SB_K_MAJOR"], ones_ptr=_block_arguments(ops)["ones_ptr"].data_ptr())
        jit_fn, tensors = gluon_blockwise_tma_kernel, ["a_desc", "b_desc", "c_desc", "scale_a_desc", "scale_b_desc"]
    else:
        jit_fn, tensors = GLUON_KERNELS[k["KIND"]], ["a_desc", "b_desc", "c_desc", "scale_a_ptr", "scale_b_ptr"]
    if is_block(ops) and how is None:  # the strides, and the ones' address (kept alive in _ONES)
        fixed.update({n: v.data_ptr() if isinstance(v, torch.Tensor) else v for n, v in _block_arguments(ops).items()})
    kernel = Direct(jit_fn, compiled, out.device, descriptors=descriptors)
    if shape["pieces"] == 1:  # unsplit: the workspace is never touched, and its pointers are none
        launch = kernel.launcher(shape["grid"], dict(fixed, partials_ptr=0, arrivals_ptr=0), tensors)

        def launch_again(a, b, scale_a, scale_b, c):
            launch(a, b, c, scale_a, scale_b)
        return cfg, launch_again
    launch = kernel.launcher(shape["grid"], fixed, tensors + ["partials_ptr", "arrivals_ptr"])
    space = PlanWorkspace(out.device, shape["slots"], shape["counters"])

    def launch_again(a, b, scale_a, scale_b, c):
        launch(a, b, c, scale_a, scale_b, *space())
    return cfg, launch_again
