"""An experiment for the cells where 128 x 128 tiles leave the last wave short: tiles 96 wide,
built from two ``wgmma`` of 64 and 32 columns, in the paired kernel's design (two consumer groups
of 64 rows, a producer warp), per tensor or per row, fast or precise (on a Hopper GPU; ``compile``
compiles every variant for sm_90a without one and prints ptxas's registers and spills).

On the H200 the book's kernels ran 512 x 12288 x 3072 per tensor at 0.81x cuBLAS with precise
accumulation and 0.87x with fast (the scoreboard, ``results/h200.json``), and the paired kernel
without promotion at 0.83x cuBLAS precise (chapter 10's record): the promotion is not what is
missing there. Its 4 x 24 = 96 tiles of 128 x 128 leave 36 of the 132 SMs idle for the whole
K loop; tiles 96 wide make 4 x 32 = 128. On the other cells with K = 12288 and N = 3072, 128 x
128 tiles keep 82% of the SMs' turns busy (tiles over waves times SMs) at M = 1152 and 2304 and 94%
at 4608; 96-wide ones 73%, 87% and 97%. cuBLAS's per-tensor path, precise or fast, runs these cells at 1149 to 1463 TFLOP/s.

Triton's blocks are powers of two, so a tile is two blocks of W, 64 and 32 rows: tile j covers
columns [96 j, 96 j + 96), the 64-row block at 96 j, the 32-row one at 96 j + 64; each consumer
group holds a sum of each (48 registers a thread for both), and with precise accumulation the
next K step's pair of ``wgmma`` runs while the step before is added into float32 totals, as in
``ws_gluon.overlapped_tile`` (three pairs of accumulators: 144 registers). The scales are loaded
before the K loop and applied as the tile goes out, as ``ws_gluon._cooperative_consumer`` does.

    python3 tools/narrow_tiles.py [compile]

Saves ``results/narrow_tiles_<gpu>.json``: per cell, recipe and accumulation, cuBLAS,
``scaled_mm`` and the narrow kernel at 5, 6 and 7 stages and GROUP_M 8 and 16, each checked
against float64 (output poisoned first) and timed in the kernel harness in one run.

On an H100 (``results/narrow_tiles_h100.json``, 2026-12-05, 0 failed checks; not yet on the H200)
the narrow tiles win on 512 x 12288 x 3072 only, at 7 stages: per tensor 0.960x cuBLAS precise
(``scaled_mm`` 0.829x) and 0.967x fast (0.908x), per row 1.074x (0.947x) and 1.054x (0.996x).
Everywhere else they lose, to 0.68 to 0.91x cuBLAS where ``scaled_mm`` runs 0.87 to 1.13x (and
0.92 to 0.99x on 512 x 3072 x 12288). The design reads A's block from shared memory twice a K
step (a ``wgmma`` of 64 columns and one of 32) for three quarters of the columns of one 128 wide,
the likely cost (not profiled). Not in the package.
"""
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fp8_tutorial.kernels.ws_gluon import (accumulator_layout, allocate_ring, program_work, store_tile, tile_scales,
                                           unit_origin, work_unit)

SUB_M = gl.constexpr(64)  # rows of a consumer group
GROUPS = gl.constexpr(2)  # consumer groups in a tile
BIG = gl.constexpr(64)  # the two blocks of W in a tile
SMALL = gl.constexpr(32)
NARROW = gl.constexpr(96)


@gluon.jit
def narrow_load_ring(a_desc, bb_desc, bs_desc, a_bufs, bb_bufs, bs_bufs, ready, empty, M, N, K, TILES,
                     GROUP_M: gl.constexpr):
    """The producer: each K step of each of this program's tiles, A's two blocks of 64 rows and W's
    blocks of 64 and 32 rows."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    units, rest, k_steps = program_work(M, N, K, TILES, 1, GROUPS * SUB_M, NARROW, BLOCK_K)
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + bb_desc.block_type.nbytes + bs_desc.block_type.nbytes
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, TILES, 1, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, NARROW, GROUP_M, 0, GROUPS)
        for kk in range(k_first, k_last):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            k = kk * BLOCK_K
            tma.async_copy_global_to_shared(a_desc, [off_m, k], bar, a_bufs.index(2 * s))
            tma.async_copy_global_to_shared(a_desc, [off_m + SUB_M, k], bar, a_bufs.index(2 * s + 1))
            tma.async_copy_global_to_shared(bb_desc, [off_n, k], bar, bb_bufs.index(s))
            tma.async_copy_global_to_shared(bs_desc, [off_n + BIG, k], bar, bs_bufs.index(s))
            it += 1


@gluon.jit
def narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, acc_b, acc_s, r, use_acc, GROUP: gl.constexpr):
    """Start ring step ``r``'s pair of ``wgmma`` (W's 64-row and 32-row blocks) into ``acc_b`` and
    ``acc_s`` once its stage is loaded; both are left in flight (two commit groups)."""
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    s = r % STAGES
    mbarrier.wait(ready.index(s), (r // STAGES) & 1)
    a = a_bufs.index(2 * s + GROUP)
    acc_b = warpgroup_mma(a, bb_bufs.index(s).permute((1, 0)), acc_b, use_acc=use_acc, is_async=True)
    acc_s = warpgroup_mma(a, bs_bufs.index(s).permute((1, 0)), acc_s, use_acc=use_acc, is_async=True)
    return acc_b, acc_s


@gluon.jit
def narrow_fast(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, it, k_steps, GROUP: gl.constexpr):
    """A tile's K loop with fast accumulation (``ws_gluon.mma_tile``'s): each step's pair issued
    while the step before finishes, whose stage then goes back to the producer."""
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    for kk in range(k_steps):
        acc_b, acc_s = narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, acc_b, acc_s, it, kk > 0, GROUP)
        acc_b, acc_s = warpgroup_mma_wait(2, deps=(acc_b, acc_s))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
        it += 1
    acc_b, acc_s = warpgroup_mma_wait(0, deps=(acc_b, acc_s))
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
    return acc_b, acc_s, it


@gluon.jit
def narrow_step_done(empty, acc_b, acc_s, tot_b, tot_s, r, PENDING: gl.constexpr, STAGES: gl.constexpr):
    """Ring step ``r``'s pair, once at most PENDING commit groups are left in flight: its stage
    handed back, its sums added into the float32 totals."""
    acc_b, acc_s = warpgroup_mma_wait(PENDING, deps=(acc_b, acc_s))
    mbarrier.arrive(empty.index(r % STAGES))
    return acc_b, acc_s, tot_b + acc_b, tot_s + acc_s


@gluon.jit
def narrow_precise(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, it, k_steps, GROUP: gl.constexpr):
    """A tile's K loop with every K step promoted (``ws_gluon.overlapped_tile``'s): two pairs of
    tensor-core sums take the steps in turn, step k + 1's pair issued before step k is waited for
    and added into the totals; two steps a turn, so the pairs never trade places."""
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    tot_b = gl.zeros_like(acc_b)
    tot_s = gl.zeros_like(acc_s)
    b1 = gl.zeros_like(acc_b)
    s1 = gl.zeros_like(acc_s)
    b0, s0 = narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, acc_b, acc_s, it, False, GROUP)
    for kk in range(0, k_steps - 2, 2):  # steps kk and kk + 1 added, kk + 2 left in flight
        b1, s1 = narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, b1, s1, it + kk + 1, False, GROUP)
        b0, s0, tot_b, tot_s = narrow_step_done(empty, b0, s0, tot_b, tot_s, it + kk, 2, STAGES)
        b0, s0 = narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, b0, s0, it + kk + 2, False, GROUP)
        b1, s1, tot_b, tot_s = narrow_step_done(empty, b1, s1, tot_b, tot_s, it + kk + 1, 2, STAGES)
    # (new names after the loop: a sum in flight and a sum waited for are of different types)
    if k_steps % 2 == 0:  # two steps left, the first in flight
        nb, ns = narrow_issue(a_bufs, bb_bufs, bs_bufs, ready, b1, s1, it + k_steps - 1, False, GROUP)
        _, _, tot_b, tot_s = narrow_step_done(empty, b0, s0, tot_b, tot_s, it + k_steps - 2, 2, STAGES)
        _, _, tot_b, tot_s = narrow_step_done(empty, nb, ns, tot_b, tot_s, it + k_steps - 1, 0, STAGES)
    else:  # one, in flight
        _, _, tot_b, tot_s = narrow_step_done(empty, b0, s0, tot_b, tot_s, it + k_steps - 1, 0, STAGES)
    return tot_b, tot_s, it + k_steps


@gluon.jit
def narrow_consumer(a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, scale_a_ptr,
                    scale_b_ptr, M, N, K, TILES, GROUP_M: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                    PRECISE: gl.constexpr, GROUP: gl.constexpr):
    """Consumer group GROUP: 64 rows of each tile, 96 columns as sums of 64 and 32, scaled as they
    go out (each part through the group's own output buffer)."""
    acc_b = gl.zeros((SUB_M, BIG), gl.float32, accumulator_layout(BIG, 4))
    acc_s = gl.zeros((SUB_M, SMALL), gl.float32, accumulator_layout(SMALL, 4))
    units, rest, k_steps = program_work(M, N, K, TILES, 1, GROUPS * SUB_M, NARROW, a_bufs.type.shape[2])
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, TILES, 1, rest, k_steps)
        off_m, off_n = unit_origin(tile, M, N, SUB_M, NARROW, GROUP_M, GROUP, GROUPS)
        # the scales' loads are under way while the K loop runs
        sa_b, sb_b = tile_scales(acc_b, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, True)
        sa_s, sb_s = tile_scales(acc_s, scale_a_ptr, scale_b_ptr, off_m, off_n + BIG, M, N, ROW_A, ROW_B, True)
        if PRECISE:
            acc_b, acc_s, it = narrow_precise(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, it,
                                              k_last - k_first, GROUP)
        else:
            acc_b, acc_s, it = narrow_fast(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, it,
                                           k_last - k_first, GROUP)
        store_tile(acc_b, sa_b, sb_b, cb_desc, cb_bufs, off_m, off_n, ROW_A, ROW_B, GROUP)
        store_tile(acc_s, sa_s, sb_s, cs_desc, cs_bufs, off_m, off_n + BIG, ROW_A, ROW_B, GROUP)
    tma.store_wait(0)


@gluon.jit
def narrow_kernel(a_desc, bb_desc, bs_desc, cb_desc, cs_desc, scale_a_ptr, scale_b_ptr, M, N, K, TILES,
                  GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr, ROW_B: gl.constexpr,
                  PRECISE: gl.constexpr, num_warps: gl.constexpr):
    """C = scale(A @ W^T), 128 x 96 tiles (two consumer groups of 64 rows, the producer warp),
    persistent over TILES tiles."""
    # the paired kernel's ring, with W's 64-row block for its W, and the 32-row one beside it
    a_bufs, bb_bufs, ready, empty = allocate_ring(a_desc, bb_desc, STAGES, GROUPS)
    bs_bufs = gl.allocate_shared_memory(bs_desc.dtype, [STAGES] + bs_desc.block_type.shape, bs_desc.layout)
    cb_bufs = gl.allocate_shared_memory(cb_desc.dtype, [GROUPS] + cb_desc.block_type.shape, cb_desc.layout)
    cs_bufs = gl.allocate_shared_memory(cs_desc.dtype, [GROUPS] + cs_desc.block_type.shape, cs_desc.layout)
    gl.warp_specialize([
        (narrow_consumer, (a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, scale_a_ptr,
                           scale_b_ptr, M, N, K, TILES, GROUP_M, ROW_A, ROW_B, PRECISE, 0)),
        (narrow_consumer, (a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, scale_a_ptr,
                           scale_b_ptr, M, N, K, TILES, GROUP_M, ROW_A, ROW_B, PRECISE, 1)),
        (narrow_load_ring, (a_desc, bb_desc, bs_desc, a_bufs, bb_bufs, bs_bufs, ready, empty, M, N, K, TILES,
                            GROUP_M)),
    ], [4, 1], [232, 24])


def blocks():
    fp8, bf16 = gl.float8e4nv, gl.bfloat16
    m, big, small = SUB_M.value, BIG.value, SMALL.value
    return {"a": ([m, 128], fp8), "bb": ([big, 128], fp8), "bs": ([small, 128], fp8), "cb": ([m, big], bf16),
            "cs": ([m, small], bf16)}


def launch_narrow(ops, out, precise: bool, stages: int = 6, group_m: int = 8, num_sms: int | None = None):
    """out = the product of ``ops`` (``gemm.check_operands``'s, per tensor or per row)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from fp8_tutorial.kernels.ws_gluon import gluon_flags

    M, N, K = ops.M, ops.N, ops.K
    w = ops.b.t()  # (N, K) row-major
    lay = {n: gl.NVMMASharedLayout.get_default_for(shape, ty) for n, (shape, ty) in blocks().items()}
    descs = [TensorDescriptor.from_tensor(t, blocks()[n][0], lay[n]) for t, n in
             ((ops.a, "a"), (w, "bb"), (w, "bs"), (out, "cb"), (out, "cs"))]
    tiles = triton.cdiv(M, GROUPS.value * SUB_M.value) * triton.cdiv(N, NARROW.value)
    num_sms = num_sms or torch.cuda.get_device_properties(ops.a.device).multi_processor_count
    return narrow_kernel[(min(num_sms, tiles),)](*descs, *ops.packed_scales, M, N, K, tiles, GROUP_M=group_m,
                                                  STAGES=stages, **gluon_flags(ops, precise), num_warps=4,
                                                  maxnreg=168)


def compile_only():
    from fp8_tutorial.measure import compiled

    descriptors = {f"{n}_desc": block for n, block in blocks().items()}
    scalars = dict(scale_a_ptr="*fp32", scale_b_ptr="*fp32", M="i32", N="i32", K="i32", TILES="i32")
    for precise in (False, True):
        for row in (False, True):
            for stages in (5, 6, 7):
                values = dict(GROUP_M=8, STAGES=stages, ROW_A=row, ROW_B=row, PRECISE=precise, num_warps=4)
                k = compiled.compile_gluon(narrow_kernel, descriptors, scalars, values, num_warps=4, maxnreg=168)
                r = compiled.ptxas_report(k)
                print(f"{'precise' if precise else 'fast'}, {'row' if row else 'tensor'}, {stages} stages: shared "
                      f"{k.metadata.shared // 1024} KiB, {compiled.summary(k)['setmaxnreg_to']}, registers "
                      f"{r.registers}, spills {r.spill_stores + r.spill_loads}, wgmma "
                      f"{k.asm['ptx'].count('wgmma.mma_async')}, notes {r.notes[:3]}", flush=True)


CELLS = [(512, 12288, 3072), (1152, 12288, 3072), (2304, 12288, 3072), (4608, 12288, 3072), (512, 3072, 12288),
         (8192, 8192, 8192)]


def main():
    from fp8_tutorial import scaled_mm
    from fp8_tutorial.checks import poison, rel_error, tolerance
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench, results
    from fp8_tutorial.measure.contenders import REGISTRY, make_problem

    sweep = results.Sweep("narrow_tiles")
    log, records = sweep.log, sweep.records
    for M, K, N in CELLS:
        for recipe in ("tensor", "row"):
            p = make_problem(M, K, N, recipe, device="cuda", reference_rows=1024)
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            for mode in ("precise", "fast"):
                precise = mode == "precise"
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")  # one for all: they run in turn
                fns = {"cuBLAS": REGISTRY[f"cublas/{recipe}/{mode}"].build(p),
                       "scaled_mm": (lambda p=p, precise=precise, out=out:
                                     scaled_mm(p.a, p.b, p.scale_a, p.scale_b, precise=precise, out=out))}
                for stages in (5, 6, 7):
                    for group_m in (8, 16):
                        fns[f"narrow, {stages} stages, GROUP_M {group_m}"] = (
                            lambda s=stages, g=group_m, ops=ops, out=out, precise=precise:
                            launch_narrow(ops, out, precise, s, g))
                errors = {}
                for n, fn in fns.items():
                    if n == "cuBLAS":
                        errors[n] = rel_error(p.checked(fn()).float(), p.reference)
                        continue
                    poison(out)
                    fn()
                    errors[n] = rel_error(p.checked(out).float(), p.reference)
                    if not errors[n] < tolerance(torch.bfloat16, precise):
                        sweep.fail(f"{p.shape} {recipe} {mode} {n}: error {errors[n]:.2e} "
                                   f"(cuBLAS {errors['cuBLAS']:.2e})")
                timed = bench.benchmark(fns, flops=p.flops, reps=20)
                base = timed["cuBLAS"].tflops
                for n in fns:
                    records.append(dict(shape=p.shape, M=M, K=K, N=N, recipe=recipe, mode=mode, contender=n,
                                        tflops=timed[n].tflops, median_us=timed[n].median_ms * 1e3,
                                        ratio=timed[n].tflops / base, rel_error=errors[n]))
                best = max((n for n in fns if n.startswith("narrow")), key=lambda n: timed[n].tflops)
                log(f"{p.shape:<17} {recipe:<6} {mode:<7} TFLOP/s: cuBLAS {base:6.0f} scaled_mm "
                    f"{timed['scaled_mm'].tflops:6.0f} ({timed['scaled_mm'].tflops / base:.3f}x) narrow "
                    f"{timed[best].tflops:6.0f} ({timed[best].tflops / base:.3f}x, {best[8:]}); errors "
                    f"{errors[best]:.2e} against cuBLAS's {errors['cuBLAS']:.2e}")
                sweep.save()
            del p, ops, out, fns
            torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    compile_only() if "compile" in sys.argv else main()
