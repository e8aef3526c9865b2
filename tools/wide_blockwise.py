"""An experiment for block-wise scales at large M: tiles 192 wide, built from two ``wgmma`` of 128
and 64 columns, each within one weight block (on a Hopper GPU; ``compile`` compiles for sm_90a
without one and prints ptxas's registers and spills).

The paired kernel's 128 x 128 tile loads 32 KiB per K step for 4.2 million operations; 128 x 256
would load 48 KiB for 8.4 million, but with block-wise scales each consumer group holds the
``wgmma``'s sum and the float32 total, two registers per output: 64 x 256 a group is 256 a thread,
more than there are. 64 x 192 a group takes 192, which fits when the second consumer group asks
for 232 (the producer 24, the default group the 248 left). Triton's blocks are powers of two, so
the tile is two blocks of W: 128 rows and 64 rows. Tile j covers columns [192 j, 192 j + 192):
for even j its first 128 are one weight block and its last 64 half of the next; for odd j the
first 64 are the second half of a block and the last 128 the block after. So the 128-row block
starts at 192 j + 64 (j odd), the 64-row one at 192 j + 128 (j even) or 192 j (odd), and each
``wgmma``'s sum has one weight scale per K step.

    python3 tools/wide_blockwise.py [compile]

Saves ``results/wide_blockwise_<gpu>.json``: per cell, cuBLAS block-wise, ``scaled_mm`` (the
paired kernel) and the wide kernel at 3 and 4 stages, each checked against float64 (output
poisoned first) and timed in the kernel harness in one run.

On the H200 (``results/wide_blockwise_h200.json``: 18 cells, 0 failed checks; the package's
kernel then waited for each K block's ``wgmma``) it was faster than ``scaled_mm`` on 5 of the
18 cells, by up to 5%, and up to 29% slower on the others: where N / 192 tiles leave the last wave
short (3072 or 4096 columns, M of 512 to 1152) and on 4096 x 16384 x 7168 (0.843x cuBLAS against
0.867x) too. Not kept.
"""
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from fp8_tutorial.kernels.ws_gluon import accumulator_layout, program_work, unit_origin, work_unit

SUB_M = 64  # rows of a consumer group
GROUPS = 2
BIG, SMALL = 128, 64  # the two blocks of W in a tile
WIDE = BIG + SMALL


@gluon.jit
def wide_origin(tile, M, N, GROUP: gl.constexpr, GROUP_M: gl.constexpr):
    """Group GROUP's first row of ``tile``, and where its 128-row and its 64-row block of W start."""
    off_m, off_n = unit_origin(tile, M, N, 64, 192, GROUP_M, GROUP, 2)
    odd = (off_n // 192) % 2
    return off_m, off_n + 64 * odd, off_n + 128 * (1 - odd)


@gluon.jit
def wide_load_ring(a_desc, bb_desc, bs_desc, a_bufs, bb_bufs, bs_bufs, ready, empty, M, N, K, TILES,
                   GROUP_M: gl.constexpr):
    """The producer: each K step of each of this program's tiles, A's two blocks of 64 rows and W's
    blocks of 128 and 64 rows."""
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    units, rest, k_steps = program_work(M, N, K, TILES, 1, 128, 192, BLOCK_K)
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + bb_desc.block_type.nbytes + bs_desc.block_type.nbytes
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, TILES, 1, rest, k_steps)
        off_m, off_big, off_small = wide_origin(tile, M, N, 0, GROUP_M)
        for kk in range(k_first, k_last):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            k = kk * BLOCK_K
            tma.async_copy_global_to_shared(a_desc, [off_m, k], bar, a_bufs.index(2 * s))
            tma.async_copy_global_to_shared(a_desc, [off_m + 64, k], bar, a_bufs.index(2 * s + 1))
            tma.async_copy_global_to_shared(bb_desc, [off_big, k], bar, bb_bufs.index(s))
            tma.async_copy_global_to_shared(bs_desc, [off_small, k], bar, bs_bufs.index(s))
            it += 1


@gluon.jit
def wide_scales(sa_ptr, sb_ptr, rows_b, rows_s, kb, nb_big, nb_small, M, stride_sam, stride_sak, stride_sbk,
                stride_sbn):
    """K block ``kb``'s scales: A's for the group's rows (in each accumulator's layout) and W's for
    the two weight blocks."""
    sa_b = gl.load(sa_ptr + rows_b * stride_sam + kb * stride_sak, mask=rows_b < M, other=0.0)
    sa_s = gl.load(sa_ptr + rows_s * stride_sam + kb * stride_sak, mask=rows_s < M, other=0.0)
    return (sa_b, sa_s, gl.load(sb_ptr + kb * stride_sbk + nb_big * stride_sbn),
            gl.load(sb_ptr + kb * stride_sbk + nb_small * stride_sbn))


@gluon.jit
def wide_step(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, tot_b, tot_s, it, sa_b, sa_s, sbb, sbs,
              GROUP: gl.constexpr):
    """One K step: both ``wgmma``, waited for; the stage handed back; each sum into its total times
    its scales."""
    STAGES: gl.constexpr = bb_bufs.type.shape[0]
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    a = a_bufs.index(2 * s + GROUP)
    acc_b = warpgroup_mma(a, bb_bufs.index(s).permute((1, 0)), acc_b, use_acc=False, is_async=True)
    acc_s = warpgroup_mma(a, bs_bufs.index(s).permute((1, 0)), acc_s, use_acc=False, is_async=True)
    acc_b, acc_s, _, _, _ = warpgroup_mma_wait(0, deps=(acc_b, acc_s, a, bb_bufs.index(s), bs_bufs.index(s)))
    mbarrier.arrive(empty.index(s))
    tot_b = gl.fma(acc_b, (sa_b * sbb)[:, None], tot_b)
    tot_s = gl.fma(acc_s, (sa_s * sbs)[:, None], tot_s)
    return acc_b, acc_s, tot_b, tot_s


@gluon.jit
def wide_consumer(a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, sa_ptr, sb_ptr,
                  M, N, K, TILES, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M: gl.constexpr,
                  GROUP: gl.constexpr):
    """Consumer group GROUP: 64 rows of each tile, 192 columns as sums of 128 and 64; the scales of
    each K step loaded two steps ahead (two steps a turn, as ``ws_gluon.blockwise_tile``)."""
    lb: gl.constexpr = accumulator_layout(128, 4)
    ls: gl.constexpr = accumulator_layout(64, 4)
    acc_b = gl.zeros((64, 128), gl.float32, lb)
    acc_s = gl.zeros((64, 64), gl.float32, ls)
    units, rest, k_steps = program_work(M, N, K, TILES, 1, 128, 192, 128)
    blocks_n = gl.cdiv(N, 128)
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = work_unit(u, TILES, 1, rest, k_steps)
        off_m, off_big, off_small = wide_origin(tile, M, N, GROUP, GROUP_M)
        nb_big = gl.minimum(off_big // 128, blocks_n - 1)  # past N: its sums are zeros, never stored
        nb_small = gl.minimum(off_small // 128, blocks_n - 1)
        rows_b = off_m + gl.arange(0, 64, layout=gl.SliceLayout(1, lb))
        rows_s = off_m + gl.arange(0, 64, layout=gl.SliceLayout(1, ls))
        last = k_last - 1
        sa_b0, sa_s0, sbb0, sbs0 = wide_scales(sa_ptr, sb_ptr, rows_b, rows_s, k_first, nb_big, nb_small, M,
                                               stride_sam, stride_sak, stride_sbk, stride_sbn)
        sa_b1, sa_s1, sbb1, sbs1 = wide_scales(sa_ptr, sb_ptr, rows_b, rows_s, gl.minimum(k_first + 1, last),
                                               nb_big, nb_small, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
        tot_b = gl.zeros_like(acc_b)
        tot_s = gl.zeros_like(acc_s)
        for kk in range(k_first, k_last, 2):
            acc_b, acc_s, tot_b, tot_s = wide_step(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, tot_b,
                                                   tot_s, it, sa_b0, sa_s0, sbb0, sbs0, GROUP)
            sa_b0, sa_s0, sbb0, sbs0 = wide_scales(sa_ptr, sb_ptr, rows_b, rows_s, gl.minimum(kk + 2, last), nb_big,
                                                   nb_small, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
            it += 1
            if kk + 1 < k_last:
                acc_b, acc_s, tot_b, tot_s = wide_step(a_bufs, bb_bufs, bs_bufs, ready, empty, acc_b, acc_s, tot_b,
                                                       tot_s, it, sa_b1, sa_s1, sbb1, sbs1, GROUP)
                sa_b1, sa_s1, sbb1, sbs1 = wide_scales(sa_ptr, sb_ptr, rows_b, rows_s, gl.minimum(kk + 3, last),
                                                       nb_big, nb_small, M, stride_sam, stride_sak, stride_sbk,
                                                       stride_sbn)
                it += 1
        # the epilogue: each part through its buffer, once the last store from it has read it
        tma.store_wait(0)
        cb = cb_bufs.index(GROUP)
        cs = cs_bufs.index(GROUP)
        cb.store(tot_b.to(cb_desc.dtype))
        cs.store(tot_s.to(cs_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(cb_desc, [off_m, off_big], cb)
        tma.async_copy_shared_to_global(cs_desc, [off_m, off_small], cs)
    tma.store_wait(0)


@gluon.jit
def wide_blockwise_kernel(a_desc, bb_desc, bs_desc, cb_desc, cs_desc, sa_ptr, sb_ptr, M, N, K, TILES,
                          stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M: gl.constexpr,
                          STAGES: gl.constexpr, REGS: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ W^T with block-wise scales, 128 x 192 tiles (two consumer groups of 64 rows, the
    producer warp), persistent over TILES tiles."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * 2] + a_desc.block_type.shape, a_desc.layout)
    bb_bufs = gl.allocate_shared_memory(bb_desc.dtype, [STAGES] + bb_desc.block_type.shape, bb_desc.layout)
    bs_bufs = gl.allocate_shared_memory(bs_desc.dtype, [STAGES] + bs_desc.block_type.shape, bs_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    cb_bufs = gl.allocate_shared_memory(cb_desc.dtype, [2] + cb_desc.block_type.shape, cb_desc.layout)
    cs_bufs = gl.allocate_shared_memory(cs_desc.dtype, [2] + cs_desc.block_type.shape, cs_desc.layout)
    gl.warp_specialize([
        (wide_consumer, (a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, sa_ptr, sb_ptr,
                         M, N, K, TILES, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M, 0)),
        (wide_consumer, (a_bufs, bb_bufs, bs_bufs, ready, empty, cb_desc, cs_desc, cb_bufs, cs_bufs, sa_ptr, sb_ptr,
                         M, N, K, TILES, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP_M, 1)),
        (wide_load_ring, (a_desc, bb_desc, bs_desc, a_bufs, bb_bufs, bs_bufs, ready, empty, M, N, K, TILES,
                          GROUP_M)),
    ], [4, 1], [REGS, 24])


def layouts():
    fp8, bf16 = gl.float8e4nv, gl.bfloat16
    return {"a": ([64, 128], fp8), "bb": ([128, 128], fp8), "bs": ([64, 128], fp8), "cb": ([64, 128], bf16),
            "cs": ([64, 64], bf16)}


def launch_wide(a, b, scale_a, scale_b, out, stages=3, group_m=8, regs=232, num_sms=None):
    """out = the block-wise product; a (M, K) and b (K, N) column-major as scaled_mm takes them."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    M, K = a.shape
    N = b.shape[1]
    w = b.t()
    lay = {n: gl.NVMMASharedLayout.get_default_for(shape, ty) for n, (shape, ty) in layouts().items()}
    blk = {n: shape for n, (shape, _) in layouts().items()}
    descs = [TensorDescriptor.from_tensor(t, blk[n], lay[n]) for t, n in
             ((a, "a"), (w, "bb"), (w, "bs"), (out, "cb"), (out, "cs"))]
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, WIDE)
    num_sms = num_sms or torch.cuda.get_device_properties(a.device).multi_processor_count
    (sam, sak), (sbk, sbn) = scale_a.stride(), scale_b.stride()
    return wide_blockwise_kernel[(min(num_sms, tiles),)](
        *descs, scale_a, scale_b, M, N, K, tiles, sam, sak, sbk, sbn, GROUP_M=group_m, STAGES=stages, REGS=regs,
        num_warps=4, maxnreg=168)


def compile_only():
    from fp8_tutorial.measure import compiled

    descriptors = {f"{n}_desc": block for n, block in layouts().items()}
    scalars = dict(sa_ptr="*fp32", sb_ptr="*fp32", M="i32", N="i32", K="i32", TILES="i32", stride_sam="i32",
                   stride_sak="i32", stride_sbk="i32", stride_sbn="i32")
    for stages in (3, 4):
        for regs in (224, 232):
            values = dict(GROUP_M=8, STAGES=stages, REGS=regs, num_warps=4)
            k = compiled.compile_gluon(wide_blockwise_kernel, descriptors, scalars, values, num_warps=4, maxnreg=168)
            r = compiled.ptxas_report(k)
            print(f"stages {stages} regs {regs}: shared {k.metadata.shared // 1024} KiB, "
                  f"{compiled.summary(k)['setmaxnreg_to']}, registers {r.registers}, spills "
                  f"{r.spill_stores + r.spill_loads}, notes {r.notes[:3]}", flush=True)


def main():
    from fp8_tutorial import scaled_mm
    from fp8_tutorial.checks import rel_error
    from fp8_tutorial.measure import bench, results
    from fp8_tutorial.measure import blockwise
    from fp8_tutorial.measure.contenders import REGISTRY, make_problem

    sweep = results.Sweep("wide_blockwise")
    log, records = sweep.log, sweep.records

    # chapter 11's cells (the reference shapes, then DeepSeek-V3's) that 128 x 128 blocks cut
    cells = [(M, K, N) for M, K, N in blockwise.cells((1024, 4096)) if N % 128 == 0 and K % 128 == 0]
    for M, K, N in cells:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=1024)
        cublas = REGISTRY["cublas/block/precise"].build(p)
        fns = {"cuBLAS": cublas}
        out_p = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns["scaled_mm"] = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=out_p)
        for stages in (3, 4):
            for group_m in (8, 16):
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                name = f"wide, {stages} stages, GROUP_M {group_m}"
                fns[name] = (lambda s, g, o: lambda: launch_wide(p.a, p.b, p.scale_a, p.scale_b, o, s, g))(
                    stages, group_m, out)
        errors = {}
        for n in fns:
            if n.startswith("wide"):
                out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                s, g = int(n.split(",")[1].split()[0]), int(n.split()[-1])
                launch_wide(p.a, p.b, p.scale_a, p.scale_b, out, s, g)
                torch.cuda.synchronize()
                errors[n] = rel_error(p.checked(out).float(), p.reference)
            elif n == "cuBLAS":
                errors[n] = rel_error(p.checked(cublas()).float(), p.reference)
            else:
                errors[n] = rel_error(p.checked(fns[n]()).float(), p.reference)
        for n, e in errors.items():
            if n.startswith("wide") and not e <= 1.5 * errors["cuBLAS"] + 1e-4:
                sweep.fail(f"{p.shape} {n}: error {e:.2e} (cuBLAS {errors['cuBLAS']:.2e})")
        timed = bench.benchmark(fns, flops=p.flops, reps=20)
        base = timed["cuBLAS"].tflops
        for n in fns:
            records.append(dict(shape=p.shape, M=M, K=K, N=N, contender=n, tflops=timed[n].tflops,
                                median_us=timed[n].median_ms * 1e3, ratio=timed[n].tflops / base,
                                rel_error=errors[n]))
        wide = max((n for n in fns if n.startswith("wide")), key=lambda n: timed[n].tflops)
        log(f"{p.shape:<17} TFLOP/s: cuBLAS {base:6.0f} scaled_mm {timed['scaled_mm'].tflops:6.0f} "
            f"({timed['scaled_mm'].tflops / base:.3f}x) wide {timed[wide].tflops:6.0f} "
            f"({timed[wide].tflops / base:.3f}x, {wide[6:]})")
        sweep.save()
        del p, fns
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    compile_only() if "compile" in sys.argv else main()
