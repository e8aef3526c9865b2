"""Two tensor-core accumulators a consumer group in the block-wise kernel, measured: the package's
``ws_gluon.gluon_blockwise_kernel`` against the same kernel with the K loop it had before
(``waited_tile``, kept here), on a Hopper GPU; ``compile`` compiles both for sm_90a without one
and prints ptxas's registers, spills and remarks.

``waited_tile`` waits for each K block's ``wgmma`` before it adds the sum into the float32 total,
so a group's tensor-core work drains at every K block and only the other group's fills the gap.
The package's ``blockwise_tile`` issues step k + 1 before it waits for step k (all but one in
flight) and promotes step k while step k + 1 runs: two accumulators and the total, 192 registers
a thread, so its second group asks for 232 (``BLOCKWISE_REGISTERS``; the producer keeps 24, the
default group the 248 left). Compiled for sm_90a: no spills and no ptxas remark either way.

``waited_blockwise_kernel`` runs through ``launch_gluon(..., kernels={"blockwise": ...})`` (the
package's launcher, plans and epilogue; ``kernels.ablation``'s way of rebinding a kernel).

    python3 tools/overlap_blockwise.py [compile]

Saves ``results/overlap_blockwise_<gpu>.json``: per cell, cuBLAS block-wise and both kernels in
each of ``GLUON_BLOCK_CONFIGS``, checked against float64 (output poisoned) and timed in the kernel
harness in one run. On the H200 (the file's records name the package's kernel "overlap": the run
was made with the overlapped tile in this file, before the package took it; 23 cells, 0 failed
checks) the overlapped tile was the faster on 21 of 23 cells: 0.93 to 1.14x cuBLAS block-wise
against 0.85 to 1.06x for the waited one, 1200 TFLOP/s against 1078 on 4096 x 16384 x 7168.
"""
import sys
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ws_gluon import (PAIRED_GROUPS, PAIRED_WORKERS, accumulator_layout, allocate_outputs,
                                           allocate_ring, block_scales, finish_unit, load_ring, output_buffers,
                                           program_work, unit_origin, work_unit)

@gluon.jit
def waited_step(a_bufs, b_bufs, ready, empty, acc, total, it, sa, sb, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """One K step of ``waited_tile``: its ``wgmma``, waited for; its stage handed back; its sum
    added into ``total`` times its scales ``sa`` (per row) and ``sb``."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    a = a_bufs.index(s * GROUPS + GROUP)
    acc = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), acc, use_acc=False, is_async=True)
    acc, _, _ = warpgroup_mma_wait(0, deps=(acc, a, b_bufs.index(s)))
    mbarrier.arrive(empty.index(s))
    return acc, gl.fma(acc, (sa * sb)[:, None], total)


@gluon.jit
def waited_tile(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_steps, sa_ptr, sb_ptr, off_m, off_n, M,
                   stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """The package's ``blockwise_tile`` as it was before this experiment: ``promoted_tile`` with block-wise scales (DeepSeek-V3's recipe): each K step is one block of
    128 values of K, and its sum goes into ``total`` times its scales, one per row for A's 1 x 128
    groups and one for W's 128 x 128 block (the tile is 128 wide: one block). The loop takes two
    steps at a time, each with its own scales, loaded two steps ahead into the registers just
    used: their latency hides under two ``wgmma``, and nothing moves from one register to another
    (a move would wait for its load; on the H200, 2 to 4% faster than one step at a time). K steps
    [k_first, k_first + k_steps) of the tile."""
    rows = off_m + gl.arange(0, acc.type.shape[0], layout=gl.SliceLayout(1, acc.type.layout))
    nb = off_n // acc.type.shape[1]
    last = k_first + k_steps - 1
    sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, k_first, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn)
    sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + 1, last), nb, M, stride_sam, stride_sak,
                            stride_sbk, stride_sbn)
    total = gl.zeros_like(acc)
    for kk in range(0, k_steps, 2):
        acc, total = waited_step(a_bufs, b_bufs, ready, empty, acc, total, it, sa0, sb0, GROUP, GROUPS)
        sa0, sb0 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 2, last), nb, M, stride_sam,
                                stride_sak, stride_sbk, stride_sbn)
        it += 1
        if kk + 1 < k_steps:
            acc, total = waited_step(a_bufs, b_bufs, ready, empty, acc, total, it, sa1, sb1, GROUP, GROUPS)
            sa1, sb1 = block_scales(sa_ptr, sb_ptr, rows, gl.minimum(k_first + kk + 3, last), nb, M, stride_sam,
                                    stride_sak, stride_sbk, stride_sbn)
            it += 1
    return total, it


@gluon.jit
def _waited_consumer(a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, sa_ptr, sb_ptr, ones_ptr,
                      partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam, stride_sak, stride_sbk,
                      stride_sbn, GROUP_M: gl.constexpr, SPLIT: gl.constexpr, GROUP: gl.constexpr,
                      GROUPS: gl.constexpr, num_warps: gl.constexpr):
    """``ws_gluon._blockwise_consumer`` with ``waited_tile``."""
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
        acc, it = waited_tile(a_bufs, b_bufs, ready, empty, acc, it, k_first, k_last - k_first, sa_ptr, sb_ptr,
                               off_m, off_n, M, stride_sam, stride_sak, stride_sbk, stride_sbn, GROUP, GROUPS)
        finish_unit(acc, 1.0, 1.0, c_desc, c_bufs, partials_ptr, arrivals_ptr, ones_ptr, ones_ptr, off_m, off_n,
                    M, N, tile, piece, WHOLE_TILES, PIECES, False, False, SPLIT, GROUP, GROUPS, GROUP * BUFS, num_warps)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def waited_blockwise_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                             WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                             ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                             num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1, stride_sam=1, stride_sak=1,
                             stride_sbk=1, stride_sbn=1, ones_ptr=None):
    """``ws_gluon.gluon_blockwise_kernel`` as it was: ``_waited_consumer``, its second group at 168."""
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, PAIRED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, PAIRED_GROUPS)
    gl.warp_specialize([
        (_waited_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                             ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                             stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 0, PAIRED_GROUPS, 4)),
        (_waited_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                             ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                             stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 1, PAIRED_GROUPS, 4)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     PAIRED_GROUPS)),
    ], PAIRED_WORKERS, [168, 24])


def compile_only():
    from fp8_tutorial.measure import compiled

    flags = dict(ROW_A=False, ROW_B=False, PRECISE=True)
    for c in W.GLUON_BLOCK_CONFIGS:
        for name, kernel in (("package", W.gluon_blockwise_kernel), ("waited", waited_blockwise_kernel)):
            k = compiled.compile_gluon_for(kernel, c, flags, maxnreg=W.gluon_maxnreg(c))
            r = compiled.ptxas_report(k)
            print(f"{name:<8} {W.describe_config(c)}: {compiled.summary(k)['setmaxnreg_to']}, registers "
                  f"{r.registers}, spills {r.spill_stores + r.spill_loads}, notes {r.notes[:4]}", flush=True)


def main():
    from fp8_tutorial.checks import poison, rel_error
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench, results
    from fp8_tutorial.measure.contenders import REGISTRY, SEED_SHAPES, make_problem

    t0 = time.time()
    lines, records, bad = [], [], 0

    def log(line):
        print(line, flush=True)
        lines.append(line)

    kernels = {"blockwise": waited_blockwise_kernel}
    cells = [(M, K, N) for (M, K, N) in SEED_SHAPES if N % 128 == 0 and K % 128 == 0]
    cells += [(M, K, N) for N, K in [(24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
              for M in (128, 1024, 4096)]
    for M, K, N in cells:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=1024)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        cublas = REGISTRY["cublas/block/precise"].build(p)
        fns = {"cuBLAS": cublas}
        errors = {"cuBLAS": rel_error(p.checked(cublas()).float(), p.reference)}
        for c in W.GLUON_BLOCK_CONFIGS:
            for name, ks in (("package", None), ("waited", kernels)):
                n = f"{name}: {W.describe_config(c)}"
                out = poison(torch.empty(M, N, dtype=torch.bfloat16, device="cuda"))
                W.launch_gluon(ops, out, True, config=c, kernels=ks)
                torch.cuda.synchronize()
                errors[n] = rel_error(p.checked(out).float(), p.reference)
                if not errors[n] <= 1.5 * errors["cuBLAS"] + 1e-4:
                    bad += 1
                    log(f"FAIL {p.shape} {n}: error {errors[n]:.2e} (cuBLAS {errors['cuBLAS']:.2e})")
                fns[n] = (lambda c, ks, out: lambda: W.launch_gluon(ops, out, True, config=c, kernels=ks))(c, ks, out)
        timed = bench.benchmark(fns, flops=p.flops, reps=20)
        base = timed["cuBLAS"].tflops
        for n in fns:
            records.append(dict(shape=p.shape, M=M, K=K, N=N, contender=n, tflops=timed[n].tflops,
                                median_us=timed[n].median_ms * 1e3, ratio=timed[n].tflops / base,
                                rel_error=errors[n]))
        best = {name: max((n for n in fns if n.startswith(name)), key=lambda n: timed[n].tflops)
                for name in ("package", "waited")}
        log(f"{p.shape:<17} TFLOP/s: cuBLAS {base:6.0f} " + " ".join(
            f"{name} {timed[n].tflops:6.0f} ({timed[n].tflops / base:.3f}x)" for name, n in best.items()))
        results.save("overlap_blockwise", records, failed_checks=bad, log=lines)
        del p, fns
        torch.cuda.empty_cache()
    log(f"done: {bad} failed checks, {time.time() - t0:.0f} s")
    results.save("overlap_blockwise", records, failed_checks=bad, log=lines)


if __name__ == "__main__":
    compile_only() if "compile" in sys.argv else main()
