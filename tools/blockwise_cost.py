"""What the block-wise kernel's scales cost: ``gluon_blockwise_kernel`` against the paired kernel
with precise accumulation per tensor (the same K loop, two tensor-core sums in turn, every K block
added into float32, but one scale for the whole product, applied as the tile goes out), and
against itself with the scales delivered in other ways (a Hopper GPU is needed).

The two loops differ only in the scales: two loads a K step in each thread (A's per row, W's per
block, started two steps ahead) and a multiply-add in place of the add. Variants, each timed in
one run of the kernel harness with cuBLAS block-wise and the paired kernel; those that compute the
product (every one but ``no scale loads``, ``ffma`` and the paired kernel, which runs other
scales) are checked against float64, output poisoned first:

- ``row-major``: the package's kernel that loads the scales (``gluon_blockwise_kernel``), A's
  scales (M, K/128) row-major (``quantize``'s layout);
- ``M-major``: the same kernel, A's scales with strides (1, M) (cuBLAS's layout; launched here
  with that kernel named, since ``BLOCK_SCALES_BY_TMA`` would send them to
  ``gluon_blockwise_tma_kernel``, which ``tools/tma_scales.py`` times);
- ``no scale loads``: the scales replaced by the constant 1.0: no load in the K loop, and the
  compiler folds the multiply-add into an add (timing only: its output is wrong on purpose);
- ``paired, per tensor``: ``gluon_paired_kernel`` with precise accumulation on the same operands
  with one scale each;
- ``ahead``: the scales loaded 4 or 6 K steps ahead in place of 2 (``blockwise_tile_ahead``);
- ``per_thread``: W's block scale loaded by every thread into its own registers
  (``block_scales_per_thread``): in the package's kernel ptxas moves it into a uniform register,
  which waits for the load;
- ``premul``: no global load in the consumers (``gluon_premul_kernel``): the producer copies each
  step's raw scales with ``cp.async`` and, two steps later, stores their products in the step's
  stage, which the consumers read (one float32 a row) before handing the stage back;
- ``pairs``: the stages handed back two at a time, once a turn, both steps' scales loaded right
  after (``blockwise_tile_pairs``);
- ``copied``: each consumer group copies its scales with ``cp.async`` four steps ahead into slots
  of its own and reads them into registers two steps ahead, where the package loads them
  (``gluon_copied_kernel``; each thread copies the values it reads, so its own ``wait_group``
  suffices if every thread issues its copies, repeated values included);
- ``ffma``: no load, A's scales 1.0 in registers the compiler cannot fold (``ones_in_registers``):
  the multiply-add by a value a row, alone (timing only);
- ``early``: both of a turn's next scales loaded in its first half, W's per thread
  (``blockwise_tile_early``);
- ``lean``: fewer instructions a step (``blockwise_tile_lean``): the ring's stage and phase carried
  from step to step in place of a division by STAGES, the scales read through pointers set once a
  tile, rows from M on clamped in place of masked, W's scale per thread. Its K loop is 240
  instructions a turn against the package's 258 (ffma's: 225).

    python3 tools/blockwise_cost.py [cells] [ahead] [per_thread] [premul] [pairs] [copied] [ffma] [early] [lean]
    # default: all cells, premul; a number: the first that many cells

Saves ``results/blockwise_cost_<gpu>.json``. On an H100, 2026-12-05 (this GPU only; 0 failed
checks in each), five runs are kept: ``results/blockwise_cost_h100.json`` (premul; it stopped at
the eighth cell, which cuBLAS refused, before cells were skipped on a refusal),
``blockwise_cost_ahead_h100.json``, ``blockwise_cost_per_thread_h100.json``,
``blockwise_cost_copied_h100.json`` (copied and pairs), ``blockwise_cost_ffma_h100.json``,
``blockwise_cost_early_h100.json`` (early and ffma) and ``blockwise_cost_lean_h100.json`` (lean and
ffma). Against
cuBLAS block-wise, GROUP_M 8, over three to seven cells (4608 x 12288 x 3072, DeepSeek-V3's and
Llama-3-8B's projections, M = 1000 to 16384), the lowest and highest ratio:

- the package's kernel 0.78 to 0.93x, M-major scales 0.79 to 0.93x;
- without scale loads 1.00 to 1.16x, as fast as the paired kernel per tensor (0.98 to 1.15x): the
  package's kernel runs at 0.73 to 0.93 of that speed, cell by cell;
- ffma 0.94 to 1.09x over the three runs that have it (ffma, early, lean), where the same runs had
  no scale loads at 1.05 to 1.16x: the multiply-add by a value a row costs 2 to 9%, and 17 to 19%
  on 16384 x 4096 x 28672; the package's kernel runs at 0.78 to 0.91 of ffma's speed: the rest
  comes with scales that change every K step;
- loading 4 or 6 steps ahead 0.77 to 0.93x, W's scale per thread 0.82 to 0.93x, stages back in
  pairs 0.78 to 0.91x, copied ahead 0.75 to 0.92x, early 0.83 to 0.91x (M-major 0.83 to 0.95x),
  lean 0.81 to 0.91x (M-major 0.79 to 0.90x): none faster than the package's kernel;
- products in the ring 0.63 to 0.85x row-major (a 4-byte ``cp.async`` a row, 4 a lane a step in
  the producer's one warp) and 0.85 to 0.91x M-major.

In the compiled code (``tools/sass_waits.py`` decodes each instruction's scoreboard waits from
``nvdisasm -hex``), ptxas waits for the scale loads in flight at the first branch after the K
loop's back edge (the ``ready`` barrier's wait loop), and the loop loads the second half-turn's
scales just before that back edge; all the scale loads count on one scoreboard, and a wait on it
is a wait for every load on it. W's scale, a uniform value, is moved into a uniform register
(``R2UR``) that waits for its load before the next branch too. Whether these waits are the cost is
not measured: row-major scales reuse a 128-byte line over 32 K steps, so most loads could hit L1
and wait little; ``tools/ncu_blockwise.sh`` profiles where the consumer warps stall. Written with
the loads two steps' work before the next branch (the loop unrolled to four steps a turn, one
branch point a half-turn), the kernel spilled and ptxas serialized its ``wgmma``; loading right
after each issue, or both of the next turn's scales in the first half, was serialized or left a
register move that waits; reading two scales from shared memory in the consumers and multiplying
them was serialized too. Those versions are not kept. ``early`` compiles without spills or
remarks, its loads first waited for a step after they are issued, and is no faster.

Nsight Compute on 4096 x 16384 x 7168 (H100, one launch each; ``tools/ncu_blockwise.sh``, raw
metrics in ``results/ncu/blockwise_{real,ffma}.csv``, and ``tools/ncu_blockwise_source.sh``, stall
samples per SASS instruction in ``results/ncu/source/blockwise_{real,ffma}.csv``): the package's
kernel took 1.14x ffma's time (1.20x its cycles) with 1.14x its instructions; the tensor pipe was
busy 79.5% of active cycles against 95.7%. In the consumers' K loops (two copies, 258 and 225
instructions a turn) the stall samples grow 1.22x; long-scoreboard samples barely change (the
``ready`` barrier's wait loop carries most in both), while ``dispatch`` grows from 8.5k to 14.0k
samples and ``wait`` from 4.4k to 7.2k, and the samples on waiting for a ``wgmma`` to finish
(``WARPGROUP.DEPBAR``) fall from 3.0k to 1.0k: with scales, the consumer warps are the bottleneck
and rarely wait for the tensor cores, where ffma's still do. The extra samples sit on the scale
path's instructions (register moves from uniform registers, address arithmetic, the loads, and the
two multiplies of ``sa * sb``, which ptxas places before the next step's last ``wgmma`` and which
wait for the loads there). ``lean`` removes 18 of the loop's instructions and is no faster, so the
count alone is not the cost either.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import fp8_tutorial as fp8
from fp8_tutorial.checks import rel_error, tolerance
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ablation import _rebound
from fp8_tutorial.kernels.ws_gluon import block_scales, blockwise_issue, blockwise_promote
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

CELLS = [(4608, 12288, 3072), (4096, 16384, 7168), (8192, 7168, 4096), (16384, 14336, 4096), (16384, 4096, 28672),
         (1024, 1536, 24576), (1000, 7168, 2048), (129, 1536, 24576), (77, 7168, 4096)]


@gluon.jit
def ones_for_scales(sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn):
    """``ws_gluon.block_scales`` without its loads: 1.0 for every scale (timing only)."""
    return gl.full(rows.shape, 1.0, gl.float32, layout=rows.type.layout), 1.0


@gluon.jit
def first_steps(a_bufs, b_bufs, ready, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M, stride_sam,
                stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                SCALES: gl.constexpr):
    """The start the variants below share with ``ws_gluon.blockwise_tile``: the group's rows, the
    tile's weight block and last K step, the first two steps' scales (loaded by SCALES, a function
    with ``ws_gluon.block_scales``'s parameters), the float32 total and the second accumulator at
    zero, and the first step's ``wgmma`` issued."""
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    nb = off_n // acc.type.shape[1]
    last = k_first + k_steps - 1
    sa0, sb0 = SCALES(sa_ptr, sb_ptr, rows, k_first, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
    sa1, sb1 = SCALES(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 1, last), nb, M, stride_sam, stride_sak, stride_sbk,
                      stride_sbn)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    return rows, nb, last, sa0, sb0, sa1, sb1, total, acc1, acc0


@gluon.jit
def last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP: gl.constexpr,
               GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile``'s end, for the variants below: two steps left (the first in
    flight in ``acc0``, their scales in ``sa0, sb0`` and ``sa1, sb1``), or one."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    if k_steps % 2 == 0:
        next1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + k_steps - 1, GROUP, GROUPS)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 2, sa0, sb0, STAGES)
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        total = blockwise_promote(empty, done1, total, it + k_steps - 1, sa1, sb1, STAGES)
    else:
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        total = blockwise_promote(empty, done0, total, it + k_steps - 1, sa0, sb0, STAGES)
    return total


@gluon.jit
def blockwise_tile_ahead(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                         stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                         AHEAD: gl.constexpr):
    """``ws_gluon.blockwise_tile`` with each step's scales loaded AHEAD (4 or 6) steps ahead in
    place of two: AHEAD / 2 pairs of registers in a queue for each of the two accumulators' steps."""
    gl.static_assert((AHEAD == 4) | (AHEAD == 6), "scales are loaded 4 or 6 steps ahead")
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    nb = off_n // acc.type.shape[1]
    last = k_first + k_steps - 1
    sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, k_first, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
    sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 1, last), nb, M, stride_sam, stride_sak,
                            stride_sbk, stride_sbn)
    sa2, sb2 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 2, last), nb, M, stride_sam, stride_sak,
                            stride_sbk, stride_sbn)
    sa3, sb3 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 3, last), nb, M, stride_sam, stride_sak,
                            stride_sbk, stride_sbn)
    if AHEAD == 6:
        sa4, sb4 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 4, last), nb, M, stride_sam, stride_sak,
                                stride_sbk, stride_sbn)
        sa5, sb5 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 5, last), nb, M, stride_sam, stride_sak,
                                stride_sbk, stride_sbn)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, acc0, total, it + kk, sa0, sb0, STAGES)
        sa0, sb0 = sa2, sb2
        if AHEAD == 6:
            sa2, sb2 = sa4, sb4
            sa4, sb4 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 6, last), nb, M, stride_sam,
                                    stride_sak, stride_sbk, stride_sbn)
        else:
            sa2, sb2 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 4, last), nb, M, stride_sam,
                                    stride_sak, stride_sbk, stride_sbn)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = blockwise_promote(empty, acc1, total, it + kk + 1, sa1, sb1, STAGES)
        sa1, sb1 = sa3, sb3
        if AHEAD == 6:
            sa3, sb3 = sa5, sb5
            sa5, sb5 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 7, last), nb, M, stride_sam,
                                    stride_sak, stride_sbk, stride_sbn)
        else:
            sa3, sb3 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 5, last), nb, M, stride_sam,
                                    stride_sak, stride_sbk, stride_sbn)
    total = last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP, GROUPS)
    return total, it + k_steps


@gluon.jit
def blockwise_tile_lead4(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                         stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``blockwise_tile_ahead`` 4 steps ahead, with ``ws_gluon.blockwise_tile``'s parameters."""
    return blockwise_tile_ahead(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n,
                                M, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP, GROUPS, 4)


@gluon.jit
def blockwise_tile_lead6(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                         stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``blockwise_tile_ahead`` 6 steps ahead."""
    return blockwise_tile_ahead(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n,
                                M, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP, GROUPS, 6)


@gluon.jit
def blockwise_tile_early(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                         stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile`` loading both of the next turn's scales in the first half of a
    turn: the second step's scales are multiplied first (their product kept for its promotion), so
    that their registers take the next ones without a move, and W's scale is loaded by every thread
    (``block_scales_per_thread``: no uniform register waiting for it). ptxas waits for the loads in
    flight at the top of the loop; the package's loop loads the second step's scales just before it,
    this one a step earlier. In its compiled code (``tools/sass_waits.py``) the first wait for them
    is the next turn's first multiply, a step after they were issued."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    rows, nb, last, sa0, sb0, sa1, sb1, total, acc1, acc0 = first_steps(
        a_bufs, b_bufs, ready, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M, stride_sam, stride_sak,
        stride_sbk, stride_sbn, GROUP, GROUPS, block_scales_per_thread)
    for kk in range(0, k_steps - 2, 2):
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, acc0, total, it + kk, sa0, sb0, STAGES)
        s1 = sa1 * sb1
        sa0, sb0 = block_scales_per_thread(sa_ptr, sb_ptr, rows, k_first + kk + 2, nb, M, stride_sam, stride_sak,
                                           stride_sbk, stride_sbn)
        sa1, sb1 = block_scales_per_thread(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 3, last), nb, M,
                                           stride_sam, stride_sak, stride_sbk, stride_sbn)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = blockwise_promote(empty, acc1, total, it + kk + 1, s1, 1.0, STAGES)
    total = last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP, GROUPS)
    return total, it + k_steps


@gluon.jit
def next_stage(s, phase, STAGES: gl.constexpr):
    """The ring stage after ``s`` and its barriers' phase, without a division."""
    n = s + 1
    wrap = (n == STAGES).to(gl.int32)
    return n - wrap * STAGES, phase ^ wrap


@gluon.jit
def issue_at(a_bufs, b_bufs, ready, acc, s, phase, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_issue`` given the stage and its phase."""
    mbarrier.wait(ready.index(s), phase)
    return warpgroup_mma(a_bufs.index(s * GROUPS + GROUP), b_bufs.index(s).permute((1, 0)), acc, use_acc=False,
                         is_async=True)


@gluon.jit
def blockwise_tile_lean(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                        stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile`` with fewer instructions a step: the ring's stage and phase carried
    from step to step (no division by STAGES in the loop), and the scales read through pointers set
    once a tile, A's rows from M on reading row M - 1 (their sums are zeros, and the store leaves
    them out) rather than through a mask, and W's scale loaded by every thread
    (``block_scales_per_thread``'s ``rows // (M + 64)``)."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    pa = sa_ptr + gl.minimum(rows, M - 1) * stride_sam
    pb = sb_ptr + (off_n // acc.type.shape[1]) * stride_sbn + rows // (M + 64)  # per thread, as in early
    last = k_first + k_steps - 1
    sa0 = gl.load(pa + k_first * stride_sak)
    sb0 = gl.load(pb + k_first * stride_sbk)
    k1 = gl.minimum(k_first + 1, last)
    sa1 = gl.load(pa + k1 * stride_sak)
    sb1 = gl.load(pb + k1 * stride_sbk)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    s0 = it % STAGES
    p0 = (it // STAGES) & 1
    acc0 = issue_at(a_bufs, b_bufs, ready, acc, s0, p0, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):
        s1, p1 = next_stage(s0, p0, STAGES)
        acc1 = issue_at(a_bufs, b_bufs, ready, acc1, s1, p1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        mbarrier.arrive(empty.index(s0))
        total = gl.fma(acc0, (sa0 * sb0)[:, None], total)
        sa0 = gl.load(pa + (k_first + kk + 2) * stride_sak)
        sb0 = gl.load(pb + (k_first + kk + 2) * stride_sbk)
        s0, p0 = next_stage(s1, p1, STAGES)
        acc0 = issue_at(a_bufs, b_bufs, ready, acc0, s0, p0, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        mbarrier.arrive(empty.index(s1))
        total = gl.fma(acc1, (sa1 * sb1)[:, None], total)
        k3 = gl.minimum(k_first + kk + 3, last)
        sa1 = gl.load(pa + k3 * stride_sak)
        sb1 = gl.load(pb + k3 * stride_sbk)
    total = last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP, GROUPS)
    return total, it + k_steps


@gluon.jit
def blockwise_tile_pairs(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                         stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile`` handing its stages back in pairs, once a turn (two steps), and
    loading both steps' scales of the next turn right after: if the barrier before a hand-back
    waits for the loads in flight, they have two steps to land in place of one."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    rows, nb, last, sa0, sb0, sa1, sb1, total, acc1, acc0 = first_steps(
        a_bufs, b_bufs, ready, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M, stride_sam, stride_sak,
        stride_sbk, stride_sbn, GROUP, GROUPS, block_scales)
    for kk in range(0, k_steps - 2, 2):
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = gl.fma(acc0, (sa0 * sb0)[:, None], total)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        mbarrier.arrive(empty.index((it + kk) % STAGES))
        mbarrier.arrive(empty.index((it + kk + 1) % STAGES))
        total = gl.fma(acc1, (sa1 * sb1)[:, None], total)
        sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, k_first + kk + 2, nb, M, stride_sam, stride_sak, stride_sbk,
                                stride_sbn)
        sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 3, last), nb, M, stride_sam,
                                stride_sak, stride_sbk, stride_sbn)
    total = last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP, GROUPS)
    return total, it + k_steps


SCALE_SLOTS = gl.constexpr(4)  # a consumer group's slots for scales copied ahead


@gluon.jit
def copy_scales(sa_bufs, sb_bufs, base, c, sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk,
                stride_sbn):
    """Start copying K block ``kb``'s scales into the group's slot ``base + c % SCALE_SLOTS`` with
    ``cp.async`` (one commit group): no register waits on it, and no barrier does either. Each
    thread copies the values it will read (the rows' layout), so its own ``wait_group`` is all a
    read needs."""
    slot = base + c % SCALE_SLOTS
    async_copy.async_copy_global_to_shared(sa_bufs.index(slot), sa_ptr + rows * stride_sam + kb * stride_sak,
                                           mask=rows < M)
    async_copy.async_copy_global_to_shared(sb_bufs.index(slot), sb_ptr + kb * stride_sbk + nb * stride_sbn + rows * 0)
    async_copy.commit_group()


@gluon.jit
def read_scales(sa_bufs, sb_bufs, base, c, layout: gl.constexpr):
    """Slot ``base + c % SCALE_SLOTS``'s scales into registers, once at most one later copy is in
    flight."""
    async_copy.wait_group(1)
    slot = base + c % SCALE_SLOTS
    return sa_bufs.index(slot).load(layout), sb_bufs.index(slot).load(layout)


@gluon.jit
def blockwise_tile_copied(a_bufs, b_bufs, ready, empty, acc, it, c, k_first, k_steps, sa_bufs, sb_bufs, base, sa_ptr,
                          sb_ptr, off_m, off_n, M, stride_sam, stride_sak, stride_sbk, stride_sbn,
                          GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile`` with each step's scales copied by ``cp.async`` four steps ahead
    and read into registers two steps ahead (where the package loads them): the registers are
    carried through the loop as the loaded ones are, and no load is in flight at a barrier. ``c``
    counts the group's copies (one a step, the last repeated where the loop copies past the tile)."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    layout: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=layout)
    nb = off_n // acc.type.shape[1]
    last = k_first + k_steps - 1
    for j in gl.static_range(4):
        copy_scales(sa_bufs, sb_bufs, base, c + j, sa_ptr, sb_ptr, rows, gl.minimum(k_first + j, last), nb, M,
                    stride_sam,
                    stride_sak, stride_sbk, stride_sbn)
    async_copy.wait_group(2)
    s0 = base + c % SCALE_SLOTS
    s1 = base + (c + 1) % SCALE_SLOTS
    sa0, sb0 = sa_bufs.index(s0).load(layout), sb_bufs.index(s0).load(layout)
    sa1, sb1 = sa_bufs.index(s1).load(layout), sb_bufs.index(s1).load(layout)
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = blockwise_promote(empty, acc0, total, it + kk, sa0, sb0, STAGES)
        sa0, sb0 = read_scales(sa_bufs, sb_bufs, base, c + kk + 2, layout)
        copy_scales(sa_bufs, sb_bufs, base, c + kk + 4, sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 4, last), nb, M,
                    stride_sam, stride_sak, stride_sbk, stride_sbn)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = blockwise_promote(empty, acc1, total, it + kk + 1, sa1, sb1, STAGES)
        sa1, sb1 = read_scales(sa_bufs, sb_bufs, base, c + kk + 3, layout)
        copy_scales(sa_bufs, sb_bufs, base, c + kk + 5, sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 5, last), nb, M,
                    stride_sam, stride_sak, stride_sbk, stride_sbn)
    total = last_steps(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it, k_steps, sa0, sb0, sa1, sb1, GROUP, GROUPS)
    # the copies past the tile's last step are still in flight, into slots the next tile copies to
    # first: let them land (issued a step or more ago), so that none lands after the next tile's
    async_copy.wait_group(0)
    # copies issued: 4 before the loop and 2 a turn, so the next tile's start from here
    return total, it + k_steps, c + 4 + 2 * ((k_steps - 1) // 2)


@gluon.jit
def _copied_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, sa_bufs, sb_bufs, sa_ptr, sb_ptr, ones_ptr,
                     partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam, stride_sak, stride_sbk,
                     stride_sbn, GROUP_M: gl.constexpr, SPLIT: gl.constexpr, GROUP: gl.constexpr,
                     GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """``ws_gluon._blockwise_consumer`` with ``blockwise_tile_copied`` and the group's own slots."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = W.output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, W.accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                          a_desc.block_type.shape[1])
    it = 0
    c = 0
    for u in range(units):
        tile, piece, k_first, k_last = W.work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        acc, it, c = blockwise_tile_copied(a_bufs, b_bufs, ready, empty, acc, it, c, k_first, k_last - k_first,
                                           sa_bufs, sb_bufs, GROUP * SCALE_SLOTS, sa_ptr, sb_ptr, off_m, off_n, M,
                                           stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP, GROUPS)
        W.finish_unit(acc, 1.0, 1.0, c_desc, c_bufs, partials_ptr, arrivals_ptr, ones_ptr, ones_ptr, off_m, off_n,
                      M, N, tile, piece, WHOLE_TILES, PIECES, False, False, SPLIT, GROUP, GROUPS, GROUP * BUFS,
                      num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_copied_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                        WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                        ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                        num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1, stride_sam=1, stride_sak=1,
                        stride_sbk=1, stride_sbn=1, ones_ptr=None):
    """``ws_gluon.gluon_blockwise_kernel`` with ``_copied_consumer``: each group copies its scales
    into SCALE_SLOTS slots of shared memory of its own (64 of A's and 64 copies of W's a slot)."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    GROUPS: gl.constexpr = W.PAIRED_GROUPS
    a_bufs, b_bufs, ready, empty = W.allocate_ring(a_desc, b_desc, STAGES, GROUPS)
    c_bufs = W.allocate_outputs(c_desc, b_desc, GROUPS)
    slots: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])  # a slot: one row of SUB_M scales
    sa_bufs = gl.allocate_shared_memory(gl.float32, [GROUPS * SCALE_SLOTS, SUB_M], slots)
    sb_bufs = gl.allocate_shared_memory(gl.float32, [GROUPS * SCALE_SLOTS, SUB_M], slots)
    gl.warp_specialize([
        (_copied_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, sa_bufs, sb_bufs, scale_a_ptr,
                            scale_b_ptr, ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES,
                            stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 0, GROUPS, 4)),
        (_copied_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, sa_bufs, sb_bufs, scale_a_ptr,
                            scale_b_ptr, ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES,
                            stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 1, GROUPS, 4)),
        (W.load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M, GROUPS)),
    ], W.PAIRED_WORKERS, W.BLOCKWISE_REGISTERS)


@gluon.jit
def block_scales_per_thread(sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn):
    """``ws_gluon.block_scales`` with W's block scale loaded by every thread into its own registers,
    in the rows' layout: ``rows // (M + 64)`` is 0 (a group's rows end before M + 64), but the
    compiler cannot know it, so the value is not moved into a uniform register, which waits for the
    load."""
    sa = gl.load(sa_ptr + rows * stride_sam + kb * stride_sak, mask=rows < M, other=0.0)
    return sa, gl.load(sb_ptr + kb * stride_sbk + nb * stride_sbn + rows // (M + 64))


@gluon.jit
def product_tile(a_bufs, b_bufs, scale_bufs, ready, empty, acc, it, k_steps, GROUP: gl.constexpr,
                 GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile`` with each step's scales read from its stage of the ring, where
    the producer put them (``premul_load_ring``): no global load in the consumer."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc, it, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):
        acc1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + kk + 1, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = product_promote(empty, acc0, total, it + kk, scale_bufs, GROUP, GROUPS, STAGES)
        acc0 = blockwise_issue(a_bufs, b_bufs, ready, acc0, it + kk + 2, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = product_promote(empty, acc1, total, it + kk + 1, scale_bufs, GROUP, GROUPS, STAGES)
    if k_steps % 2 == 0:
        next1 = blockwise_issue(a_bufs, b_bufs, ready, acc1, it + k_steps - 1, GROUP, GROUPS)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = product_promote(empty, done0, total, it + k_steps - 2, scale_bufs, GROUP, GROUPS, STAGES)
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        total = product_promote(empty, done1, total, it + k_steps - 1, scale_bufs, GROUP, GROUPS, STAGES)
    else:
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        total = product_promote(empty, done0, total, it + k_steps - 1, scale_bufs, GROUP, GROUPS, STAGES)
    return total, it + k_steps


@gluon.jit
def _product_consumer(a_desc, c_desc, a_bufs, b_bufs, scale_bufs, ready, empty, c_bufs, ones_ptr, partials_ptr,
                     arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, SPLIT: gl.constexpr,
                     GROUP: gl.constexpr, GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """``ws_gluon._blockwise_consumer`` with ``product_tile``."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = W.output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, W.accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                          a_desc.block_type.shape[1])
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = W.work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        acc, it = product_tile(a_bufs, b_bufs, scale_bufs, ready, empty, acc, it, k_last - k_first, GROUP, GROUPS)
        W.finish_unit(acc, 1.0, 1.0, c_desc, c_bufs, partials_ptr, arrivals_ptr, ones_ptr, ones_ptr, off_m, off_n,
                      M, N, tile, piece, WHOLE_TILES, PIECES, False, False, SPLIT, GROUP, GROUPS, GROUP * BUFS,
                      num_warps)
    tma.store_wait(0)


PREMUL_REGISTERS = gl.constexpr([240, 32])  # the whole register file: 2 x 128 x 240 + 128 x 32
RAW_SLOTS = gl.constexpr(4)  # the producer's raw copies in flight: steps t - 2 .. t, and one spare


@gluon.jit
def _finish_scales(raw_bufs, scale_bufs, ready, t, PENDING: gl.constexpr, lanes: gl.constexpr):
    """The producer's second half for ring step ``t``: once its raw copies have landed (at most
    PENDING later commit groups in flight; each lane reads back only what it copied), the
    products of A's scales and W's into the stage's scale slot, and an arrival on the stage's
    ``ready`` barrier (after the warp's stores: Gluon puts a barrier before the one thread's
    arrival)."""
    WIDTH: gl.constexpr = raw_bufs.type.shape[1] // 2
    STAGES: gl.constexpr = scale_bufs.type.shape[0]
    async_copy.wait_group(PENDING)
    raw = raw_bufs.index(t % RAW_SLOTS)
    product = raw.slice(0, WIDTH).load(lanes) * raw.slice(WIDTH, WIDTH).load(lanes)
    scale_bufs.index(t % STAGES).store(product)
    mbarrier.arrive(ready.index(t % STAGES))


@gluon.jit
def premul_load_ring(a_desc, b_desc, a_bufs, b_bufs, raw_bufs, scale_bufs, ready, empty, sa_ptr, sb_ptr, M, N, K,
                     WHOLE_TILES, PIECES, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M: gl.constexpr,
                     GROUPS: gl.constexpr):
    """``ws_gluon.load_ring`` that also puts each K step's scale products (A's per row times W's
    block's) into its stage: it copies the raw scales with ``cp.async`` (no register waits on
    them) and, two steps later, multiplies them and stores the products, then arrives on the
    stage's ``ready`` barrier a second time. The consumers read one float32 a row."""
    SUB_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    WIDTH: gl.constexpr = GROUPS * SUB_M
    lanes: gl.constexpr = gl.BlockedLayout([WIDTH // 32], [32], [1], [0])
    i = gl.arange(0, WIDTH, layout=lanes)
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N, BLOCK_K)
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = W.work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
        rows = off_m + i
        a_src = sa_ptr + rows * stride_sam
        b_src = sb_ptr + (off_n // BLOCK_N) * stride_sbn + i * 0
        for kk in range(k_first, k_last):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            W.load_stage(a_desc, b_desc, a_bufs, b_bufs, ready.index(s), s, off_m, off_n, kk * BLOCK_K, GROUPS)
            raw = raw_bufs.index(it % RAW_SLOTS)
            async_copy.async_copy_global_to_shared(raw.slice(0, WIDTH), a_src + kk * stride_sak, mask=rows < M)
            async_copy.async_copy_global_to_shared(raw.slice(WIDTH, WIDTH), b_src + kk * stride_sbk)
            async_copy.commit_group()
            if it >= 2:
                _finish_scales(raw_bufs, scale_bufs, ready, it - 2, 2, lanes)
            it += 1
    if it >= 2:
        _finish_scales(raw_bufs, scale_bufs, ready, it - 2, 1, lanes)
    if it >= 1:
        _finish_scales(raw_bufs, scale_bufs, ready, it - 1, 0, lanes)


@gluon.jit
def product_promote(empty, acc, total, r, scale_bufs, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                    STAGES: gl.constexpr):
    """``ws_gluon.blockwise_promote`` with ring step ``r``'s scale products read from its stage
    (before the stage is handed back)."""
    SUB_M: gl.constexpr = acc.type.shape[0]
    s = scale_bufs.index(r % STAGES).slice(GROUP * SUB_M, SUB_M).load(gl.SliceLayout(1, acc.type.layout))
    mbarrier.arrive(empty.index(r % STAGES))
    return gl.fma(acc, s[:, None], total)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_premul_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                        WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                        ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                        num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1, stride_sam=1, stride_sak=1,
                        stride_sbk=1, stride_sbn=1, ones_ptr=None):
    """``ws_gluon.gluon_blockwise_kernel`` with each K step's scale products in its stage of the
    ring, put there by the producer (``premul_load_ring``): one shared-memory read a row and K
    step in the consumers, no global load."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    GROUPS: gl.constexpr = W.PAIRED_GROUPS
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * GROUPS] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    scale_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, GROUPS * SUB_M], flat)
    raw_bufs = gl.allocate_shared_memory(gl.float32, [RAW_SLOTS, 2 * GROUPS * SUB_M], flat)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=2)  # the TMA loads' expect, and the scale products
        mbarrier.init(empty.index(i), count=GROUPS)
    c_bufs = W.allocate_outputs(c_desc, b_desc, GROUPS)
    gl.warp_specialize([
        (_product_consumer, (a_desc, c_desc, a_bufs, b_bufs, scale_bufs, ready, empty, c_bufs, ones_ptr, partials_ptr,
                            arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, SPLIT, 0, GROUPS, 4)),
        (_product_consumer, (a_desc, c_desc, a_bufs, b_bufs, scale_bufs, ready, empty, c_bufs, ones_ptr, partials_ptr,
                            arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, SPLIT, 1, GROUPS, 4)),
        (premul_load_ring, (a_desc, b_desc, a_bufs, b_bufs, raw_bufs, scale_bufs, ready, empty, scale_a_ptr,
                            scale_b_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam, stride_sak, stride_sbk,
                            stride_sbn, GROUP_M, GROUPS)),
    ], W.PAIRED_WORKERS, PREMUL_REGISTERS)


def _variant(**replaced):
    """The block-wise kernel with some of its functions replaced (by name)."""
    names = dict(vars(W), **replaced)
    for name in ("blockwise_tile", "_blockwise_consumer"):
        if name not in replaced:
            names[name] = _rebound(getattr(W, name), names)
    return {"blockwise": _rebound(W.gluon_blockwise_kernel, names)}


@gluon.jit
def ones_in_registers(sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn):
    """No load either, but A's scales 1.0 in registers the compiler cannot fold away (``rows //
    (M + 64)`` is 0): the multiply-add by a scale a row stays a multiply-add (timing only)."""
    return (rows // (M + 64)).to(gl.float32) + 1.0, 1.0


def _without_scale_loads():
    return _variant(block_scales=ones_for_scales)


VARIANTS = ("ahead", "per_thread", "premul", "pairs", "copied", "ffma", "early", "lean")
# the package's kernel that loads the scales (launch_gluon would send M-major ones to the TMA kernel)
LOADS = {"blockwise": W.gluon_blockwise_kernel}


def check_and_time(sweep, p, out, fns: dict, checked: tuple) -> None:
    """One cell: each of ``fns`` whose name starts with one of ``checked`` run into ``out``,
    poisoned first, and checked against float64 (the others run once); then all timed in one run
    of the kernel harness against "cuBLAS block-wise", recorded, logged and saved."""
    for n, fn in fns.items():
        if n.startswith(checked):
            fp8.poison(out)
            fn()
            err = rel_error(p.checked(out).float(), p.reference)
            if not err < tolerance(torch.bfloat16, True):
                sweep.fail(f"{p.shape} {n}: rel. error {err:.2e}")
        else:
            fn()
    timed = bench.benchmark(fns, flops=p.flops, reps=20)
    base = timed["cuBLAS block-wise"].median_ms
    for n, r in timed.items():
        sweep.records.append(dict(shape=p.shape, M=p.M, K=p.K, N=p.N, variant=n, tflops=r.tflops,
                                  median_us=r.median_ms * 1e3, ratio=base / r.median_ms))
    sweep.log(f"{p.shape:>18}: " + "; ".join(f"{n} {r.tflops:5.0f} ({base / r.median_ms:.3f}x)"
                                             for n, r in timed.items()))
    sweep.save()


def main():
    no_loads = _without_scale_loads()
    ffma = _variant(block_scales=ones_in_registers)
    # each variant timed with A's scales in both layouts: its name in the records, its kernels
    both_layouts = {
        "premul": [("products in the ring", {"blockwise": gluon_premul_kernel})],
        "ahead": [("4 ahead", _variant(blockwise_tile=blockwise_tile_lead4)),
                  ("6 ahead", _variant(blockwise_tile=blockwise_tile_lead6))],
        "early": [("loaded a step earlier", _variant(blockwise_tile=blockwise_tile_early))],
        "lean": [("lean", _variant(blockwise_tile=blockwise_tile_lean))],
        "copied": [("copied ahead", {"blockwise": gluon_copied_kernel})],
        "pairs": [("stages back in pairs", _variant(blockwise_tile=blockwise_tile_pairs))],
        "per_thread": [("W's scale per thread", _variant(block_scales=block_scales_per_thread))],
    }
    sweep = results.Sweep("blockwise_cost")
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
    cells = CELLS[:counts[0]] if counts else CELLS
    variants = [a for a in sys.argv[1:] if a in VARIANTS] or ["premul"]
    log = sweep.log
    for M, K, N in cells:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=512)
        ops = check_operands(p.a, p.b, p.scale_a.contiguous(), p.scale_b)  # row-major
        ops_m = check_operands(p.a, p.b, p.scale_a.t().contiguous().t(), p.scale_b)  # M-major
        one = torch.ones((), dtype=torch.float32, device="cuda")
        ops_t = check_operands(p.a, p.b, one, one)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns = {"cuBLAS block-wise": REGISTRY["cublas/block/precise"].build(p)}
        try:
            fns["cuBLAS block-wise"]()
        except RuntimeError as e:  # cuBLAS refuses some small M (CUBLAS_STATUS_NOT_SUPPORTED)
            log(f"{p.shape}: cuBLAS block-wise refused ({str(e).splitlines()[0][:80]}): no baseline, left out")
            continue
        for cfg in W.GLUON_BLOCK_CONFIGS:
            g = f"{cfg.kwargs['GROUP_M']}{', split tail' if cfg.kwargs['SPLIT'] else ''}"
            fns[f"row-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg, kernels=LOADS)
            fns[f"M-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops_m, out, True, config=cfg, kernels=LOADS)
            for variant in variants:
                for name, kernels in both_layouts.get(variant, []):
                    for layout, operands in (("row-major", ops), ("M-major", ops_m)):
                        fns[f"{layout}, {name}, GROUP_M {g}"] = (
                            lambda cfg=cfg, k=kernels, o=operands: W.launch_gluon(o, out, True, config=cfg, kernels=k))
            if "ffma" in variants and not cfg.kwargs["SPLIT"]:
                fns[f"ones in registers, GROUP_M {g}"] = (
                    lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg, kernels=ffma))
            if not cfg.kwargs["SPLIT"]:
                fns[f"no scale loads, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg,
                                                                                       kernels=no_loads)
                paired = next(c for c in W.GLUON_PRECISE_CONFIGS if c.kwargs["KIND"] == "paired" and
                              c.num_stages == 5 and not c.kwargs["SPLIT"] and
                              c.kwargs["GROUP_M"] == cfg.kwargs["GROUP_M"])
                fns[f"paired, per tensor, GROUP_M {g}"] = (
                    lambda cfg=paired: W.launch_gluon(ops_t, out, True, config=cfg))
        check_and_time(sweep, p, out, fns, ("row-major", "M-major"))
        fns = p = None  # (the next cell rebinds the rest)
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/blockwise_cost.py needs a GPU")
    main()
