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

``waited_blockwise_kernel`` (the package's kernel rebound to ``waited_tile``) runs through ``launch_gluon(..., kernels={"blockwise": ...})`` (the
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

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ablation import _rebound
from fp8_tutorial.kernels.ws_gluon import block_scales


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
    """The package's ``blockwise_tile`` before it kept two accumulators: each K step is one block
    of 128 values of K, and its sum goes into ``total`` times its scales, one per row for A's 1 x
    128 groups and one for W's 128 x 128 block (the tile is 128 wide: one block). The loop takes two
    steps at a time, each with its own scales, loaded two steps ahead into the registers just
    used: their latency hides under two ``wgmma``, and nothing moves from one register to another
    (a move would wait for its load). K steps
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


def _waited() -> object:
    """The package's ``gluon_blockwise_kernel`` with ``waited_tile`` for its K loop and its second
    group at 168 registers, as it was: ``_blockwise_consumer`` and the kernel rebound
    (``kernels.ablation._rebound``), not copied."""
    names = dict(vars(W), blockwise_tile=waited_tile, BLOCKWISE_REGISTERS=gl.constexpr([168, 24]))
    names["_blockwise_consumer"] = _rebound(W._blockwise_consumer, names)
    return _rebound(W.gluon_blockwise_kernel, names)


waited_blockwise_kernel = _waited()


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
    from fp8_tutorial.measure import blockwise
    from fp8_tutorial.measure.contenders import REGISTRY, make_problem

    sweep = results.Sweep("overlap_blockwise")
    log, records = sweep.log, sweep.records

    kernels = {"blockwise": waited_blockwise_kernel}
    # chapter 11's cells (the reference shapes, then DeepSeek-V3's) that 128 x 128 blocks cut
    cells = [(M, K, N) for M, K, N in blockwise.cells((128, 1024, 4096)) if N % 128 == 0 and K % 128 == 0]
    for M, K, N in cells:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=1024)
        ops = check_operands(p.a, p.b, p.scale_a.contiguous(), p.scale_b)  # A's scales row-major, as recorded
        cublas = REGISTRY["cublas/block/precise"].build(p)
        fns = {"cuBLAS": cublas}
        errors = {"cuBLAS": rel_error(p.checked(cublas()).float(), p.reference)}
        for c in W.GLUON_BLOCK_CONFIGS:
            for name, ks in (("package", {"blockwise": W.gluon_blockwise_kernel}), ("waited", kernels)):
                n = f"{name}: {W.describe_config(c)}"
                out = poison(torch.empty(M, N, dtype=torch.bfloat16, device="cuda"))
                W.launch_gluon(ops, out, True, config=c, kernels=ks)
                torch.cuda.synchronize()
                errors[n] = rel_error(p.checked(out).float(), p.reference)
                if not errors[n] <= 1.5 * errors["cuBLAS"] + 1e-4:
                    sweep.fail(f"{p.shape} {n}: error {errors[n]:.2e} (cuBLAS {errors['cuBLAS']:.2e})")
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
        sweep.save()
        del p, fns
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    compile_only() if "compile" in sys.argv else main()
