"""Warp specialization written out by hand, in Gluon.

Gluon (``triton.experimental.gluon``, part of Triton 3.6) is Triton one level down: the kernel
names its layouts, allocates its shared memory, and starts the TMA copies, the ``wgmma`` and the
waits on mbarriers itself; ``gl.warp_specialize`` runs one function per partition of warps, with
the registers of each. What ``tl.range(..., warp_specialize=True)`` leaves to the compiler is here
in the source:

- a producer of one warp (24 registers) walks the program's tiles and K blocks and issues the TMA
  loads of A and W into a ring of STAGES buffers; ``ready[s]`` says a buffer is full (TMA counts
  its bytes in), ``empty[s]`` that its consumer is done with it;
- consumers wait on ``ready``, issue the ``wgmma`` on the buffer, and hand back the one before as
  soon as ``warpgroup_mma_wait(1)`` says its product is done, so one ``wgmma`` is always in flight;
- the epilogue scales the tile (the shared ``scale_epilogue``) and stores it through TMA; the
  store is waited for only when its shared buffer is needed again, a tile later.

Two kernels, two ways to use more than one consumer warp group:

- ``gluon_ws_kernel`` (cooperative): ``num_warps`` consumer warps (4 or 8: one or two warp groups)
  share each tile's rows, the form the compiler gives ``ws_kernel``;
- ``gluon_pingpong_kernel``: two consumer warp groups, each on its own tiles (alternate ones), take
  turns through the one ring, so that one group's epilogue runs while the other's K loop does;
  ``turn`` barriers keep their K loops in order.

With PRECISE the compiler adds each block's product into the float32 accumulator right after its
``wgmma``, so the ``wgmma`` are waited for one by one, and with 128 x 256 tiles the two
accumulators spill some registers: ``launch_gluon`` times every configuration and keeps the fastest.

Gluon kernels run only on a GPU: Triton's interpreter cannot run them (``gemm.gluon_takes``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .common import grouped_tile, scale_epilogue


@gluon.jit
def _tile_origin(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def load_ring(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M: gl.constexpr):
    """The producer: every K block of every tile of this program, in order, into the ring."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    it = 0  # K blocks loaded so far: buffer it % STAGES, its (it // STAGES)-th filling
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        off_m, off_n = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kk in range(k_steps):
            s = it % STAGES
            # a new barrier counts as having completed the phase before phase 0: the first pass
            # through the ring does not wait
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kk * BLOCK_K], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [off_n, kk * BLOCK_K], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, PRECISE: gl.constexpr):
    """One tile's K loop, from ring position ``it``: the float32 product in ``acc`` and the next
    position. With PRECISE the compiler adds each block's product into ``acc`` in float32."""
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    if PRECISE:  # the promoted sums are added to acc whatever use_acc says: start from zeros
        acc = gl.zeros_like(acc)
    for kk in range(k_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        b = b_bufs.index(s).permute((1, 0))  # W's (BLOCK_N, BLOCK_K) block, read K-major as B
        if PRECISE:
            acc = warpgroup_mma(a_bufs.index(s), b, acc, is_async=True, max_num_imprecise_acc=BLOCK_K)
        else:
            acc = warpgroup_mma(a_bufs.index(s), b, acc, use_acc=kk > 0, is_async=True)
        # the wgmma before this one is done: its buffer goes back to the producer
        acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(s), b_bufs.index(s)))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
        it += 1
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
    return acc, it


@gluon.jit
def store_tile(acc, c_desc, c_smem, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N,
               ROW_A: gl.constexpr, ROW_B: gl.constexpr):
    """Scale the tile and start its TMA store, once the previous store from ``c_smem`` is done."""
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc.type.layout))
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc.type.layout))
    out = scale_epilogue(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, ROW_A, ROW_B)
    tma.store_wait(0)
    c_smem.store(out.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)


@gluon.constexpr_function
def accumulator_layout(BLOCK_N, num_warps):
    """wgmma's accumulator: warps stacked along M, 16 rows each per instruction, BLOCK_N wide."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 32])


@gluon.jit
def _cooperative_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_smem, scale_a_ptr, scale_b_ptr,
                          M, N, K, GROUP_M: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                          PRECISE: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, num_warps))
    k_steps = gl.cdiv(K, a_desc.block_type.shape[1])
    it = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):
        off_m, off_n = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc, it = mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, PRECISE)
        store_tile(acc, c_desc, c_smem, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B)
    tma.store_wait(0)


@gluon.jit
def gluon_ws_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                    GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                    PRECISE: gl.constexpr, num_warps: gl.constexpr):
    """C = scale(A @ W^T), persistent: one producer warp, ``num_warps`` consumer warps sharing each
    tile (BLOCK_M x BLOCK_N from ``c_desc``), STAGES buffers in the ring."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_smem, scale_a_ptr, scale_b_ptr,
                                 M, N, K, GROUP_M, ROW_A, ROW_B, PRECISE, num_warps)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M)),
    ], [1], [24])


@gluon.jit
def _pingpong_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr, scale_b_ptr,
                       M, N, K, GROUP_M: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                       PRECISE: gl.constexpr, GROUP: gl.constexpr):
    BLOCK_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, accumulator_layout(BLOCK_N, 4))
    k_steps = gl.cdiv(K, a_desc.block_type.shape[1])
    n = 0  # tiles this group has done; the program's tiles alternate between the groups
    for tile in range(gl.program_id(0) + GROUP * gl.num_programs(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N),
                      2 * gl.num_programs(0)):
        off_m, off_n = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # wait until the other group's previous K loop is done: without it, this group could wait
        # on a ring position two fillings ahead, and the barrier's parity would pass it at once
        mbarrier.wait(turn.index(GROUP), (n & 1) ^ (1 - GROUP))
        acc, _ = mma_tile(a_bufs, b_bufs, ready, empty, acc, (2 * n + GROUP) * k_steps, k_steps, PRECISE)
        mbarrier.arrive(turn.index(1 - GROUP))
        store_tile(acc, c_desc, c_bufs.index(GROUP), scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B)
        n += 1
    tma.store_wait(0)


@gluon.jit
def gluon_pingpong_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                          GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                          PRECISE: gl.constexpr, num_warps: gl.constexpr):
    """C = scale(A @ W^T), persistent: one producer warp and two consumer warp groups of 4 warps
    (the default partition, ``num_warps`` = 4, and a worker), each on alternate tiles."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    gl.warp_specialize([
        (_pingpong_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr,
                              scale_b_ptr, M, N, K, GROUP_M, ROW_A, ROW_B, PRECISE, 0)),
        (_pingpong_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, turn, c_bufs, scale_a_ptr,
                              scale_b_ptr, M, N, K, GROUP_M, ROW_A, ROW_B, PRECISE, 1)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M)),
    ], [4, 1], [232, 24])
