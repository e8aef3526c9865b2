"""A negative result of chapter 10's search for a precise kernel at cuBLAS's speed: the overlapped
kernel, kept here with the run that measures it rather than in the package.

``gluon_overlapped_kernel`` drops the producer: one partition of 8 warps (two warp groups on a
128 x 128 tile) issues the TMA loads itself, predicated, STAGES - 1 steps ahead across tiles. With
no producer's warp group each thread may hold 255 registers, room for two tensor-core accumulators
beside the float32 total, so step k's ``wgmma`` runs while step k - 1's sum is promoted. ptxas
compiles it with 240 registers, no spills and no serialized ``wgmma`` (remark C7514).

It is right (the same bits as the paired kernel, precise, on all 128 launches checked) and slow: on
the H200 it ran at 0.57x cuBLAS precise per tensor and 0.62x per row (geometric means over the
reference cells), where the paired kernel ran 0.89x and 0.95x in the same run. Unlike in the
warp-specialized kernels, the warps that issue the ``wgmma`` here also wait for every stage and pass
a CTA barrier each K step before they refill it; what each of those costs was not measured apart.

Saves ``results/overlapped_precise_<gpu>.json`` (a GPU is needed):

    python3 tools/overlapped_precise.py
"""
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.common import grouped_tile
from fp8_tutorial.kernels.compat import cta_barrier
from fp8_tutorial.kernels.ws_gluon import accumulator_layout, allocate_outputs, program_work, store_tile, tile_scales


@gluon.jit
def overlapped_load(a_desc, b_desc, a_bufs, b_bufs, ready, g, steps, k_steps, M, N, GROUP_M: gl.constexpr, pred=True):
    """Start the TMA loads of this program's K step ``g`` (counted over all its tiles, ``k_steps``
    each, ``steps`` in all; none past the last, nor where ``pred`` is false) into stage g % STAGES.
    Predicated, not branched: a branch where a ``wgmma`` is in flight costs the overlapped kernel
    its overlap (``gluon_overlapped_kernel``)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    pred = pred & (g < steps)
    tile = gl.program_id(0) + (g // k_steps) * gl.num_programs(0)
    pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    s = g % b_bufs.type.shape[0]
    bar = ready.index(s)
    k = (g % k_steps) * a_desc.block_type.shape[1]
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k], bar, a_bufs.index(s), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k], bar, b_bufs.index(s), pred=pred)


@gluon.jit
def overlapped_step(a_desc, b_desc, a_bufs, b_bufs, ready, cur, prev, total, g, kk, steps, k_steps, M, N,
                    GROUP_M: gl.constexpr):
    """K step ``kk`` of a tile (the program's step ``g``): its ``wgmma`` into ``cur`` starts, and
    while it runs step kk - 1's sum (``prev``, done once ``warpgroup_mma_wait(1)`` returns) is
    added into ``total``. Step kk - 1's stage is free once both warp groups are past that, and is
    refilled with step g - 1 + STAGES."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    s = g % STAGES
    mbarrier.wait(ready.index(s), (g // STAGES) & 1)
    cur = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), cur, use_acc=False, is_async=True)
    q = (g + STAGES - 1) % STAGES
    # step kk - 1's sum is done; step kk's runs on (its accumulator passes through, not read)
    cur, prev, _, _ = warpgroup_mma_wait(1, deps=(cur, prev, a_bufs.index(q), b_bufs.index(q)))
    # at a tile's first step prev holds zeros and there is no stage to free (no branch: see the kernel)
    total += prev
    cta_barrier()  # both warp groups are done with step kk - 1's stage
    overlapped_load(a_desc, b_desc, a_bufs, b_bufs, ready, g - 1 + STAGES, steps, k_steps, M, N, GROUP_M, kk > 0)
    # prev's registers are free: the next wgmma starts from zero (use_acc=False)
    return cur, gl.zeros_like(prev), total


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_overlapped_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                            WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                            ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                            num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
    """C = scale(A @ W^T) with precise accumulation, persistent, in one partition of 8 warps (two
    warp groups on a 128-row tile) and no producer: without a producer's warp group the register
    file holds 255 registers a thread, room for two tensor-core accumulators beside the float32
    total. Step k's ``wgmma`` goes into one while step k - 1's sum, in the other, is promoted
    (``overlapped_step``): the tensor cores do not wait for the promotion. The same warps keep
    the ring filled STAGES - 1 steps ahead, across tiles. Whole tiles only: WHOLE_TILES must be
    all of them, PIECES 1.

    ptxas serializes every ``wgmma`` of a kernel (its remark C7514) where it cannot tell that an
    accumulator the CUDA cores read is done: where one is in flight across a loop's back edge, or
    where a branch joins, or where registers run short and it spills. So the K loop takes two
    steps a turn, the two accumulators in turn, with no branch, and waits for both at the end of a
    turn; an odd last step goes alone, waited for."""
    gl.static_assert(num_warps == 8, "the overlapped kernel is two warp groups")
    gl.static_assert(PRECISE and PROMOTE == 1 and not SPLIT, "the overlapped kernel promotes every K step, unsplit")
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    c_bufs = allocate_outputs(c_desc, b_desc, 1)
    units, _, k_steps = program_work(M, N, K, WHOLE_TILES, 1, BLOCK_M, BLOCK_N, a_desc.block_type.shape[1])
    steps = units * k_steps
    for g in gl.static_range(STAGES):  # step g refills step g - 1's stage: the ring starts full
        overlapped_load(a_desc, b_desc, a_bufs, b_bufs, ready, g, steps, k_steps, M, N, GROUP_M)
    layout: gl.constexpr = accumulator_layout(BLOCK_N, num_warps)
    g0 = 0  # the program's K steps before this tile's
    for u in range(units):
        acc0 = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout)  # the even steps' sums
        acc1 = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout)  # the odd steps'
        total = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout)
        for kk in range(0, k_steps - 1, 2):
            acc0, acc1, total = overlapped_step(a_desc, b_desc, a_bufs, b_bufs, ready, acc0, acc1, total, g0 + kk,
                                                kk, steps, k_steps, M, N, GROUP_M)
            acc1, acc0, total = overlapped_step(a_desc, b_desc, a_bufs, b_bufs, ready, acc1, acc0, total,
                                                g0 + kk + 1, kk + 1, steps, k_steps, M, N, GROUP_M)
            acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
        if k_steps % 2 == 1:  # the odd last step: its sum moves to acc1, where a turn leaves the last
            acc0, acc1, total = overlapped_step(a_desc, b_desc, a_bufs, b_bufs, ready, acc0, acc1, total,
                                                g0 + k_steps - 1, k_steps - 1, steps, k_steps, M, N, GROUP_M)
            acc1 = warpgroup_mma_wait(0, deps=(acc0,))
        total += acc1  # the tile's last step
        cta_barrier()
        g0 += k_steps
        overlapped_load(a_desc, b_desc, a_bufs, b_bufs, ready, g0 - 1 + STAGES, steps, k_steps, M, N, GROUP_M)
        pid_m, pid_n = grouped_tile(gl.program_id(0) + u * gl.num_programs(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
        sa, sb = tile_scales(total, scale_a_ptr, scale_b_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, ROW_A, ROW_B,
                             False)
        store_tile(total, sa, sb, c_desc, c_bufs, pid_m * BLOCK_M, pid_n * BLOCK_N, ROW_A, ROW_B, 0)
    tma.store_wait(0)


# registered beside the package's kinds, in this process only (as tools/precise_variants.py's)
W.GLUON_KERNELS["overlapped"] = gluon_overlapped_kernel
W.GLUON_GROUPS["overlapped"] = 1
W.GLUON_WORKERS["overlapped"] = []
W._OTHER_WARPS["overlapped"] = 0
W.GLUON_WARPS["overlapped"] = (8,)
CONFIGS = [W.make_gluon_config("overlapped", 128, 128, 128, 5, group_m=g, warps=8) for g in (8, 16)]
PAIRED = W.make_gluon_config("paired", 128, 128, 128, 5, group_m=16)  # the package's precise kernel
# odd shapes: one K step, two, odd counts; a single row; many tiles a program (num_sms=3)
CHECKS = [(128, 128, 128), (128, 256, 128), (200, 384, 296), (1, 1152, 136), (700, 1008, 2944),
          (97, 4096, 520), (1000, 1040, 1000), (4097, 512, 264)]


def launch(ops, out, cfg, num_sms=None):
    W.launch_gluon(ops, out, True, config=W.fit_gluon_config(cfg, out.element_size()), num_sms=num_sms)
    return out


def check():
    """Against float64 into poisoned outputs, and against the paired kernel's bits; returns records."""
    import fp8_tutorial as fp8
    from fp8_tutorial import gemm
    from fp8_tutorial.measure.contenders import make_problem
    rows = []
    for M, K, N in CHECKS:
        for recipe in ("tensor", "row"):
            p = make_problem(M, K, N, recipe, device="cuda")
            ops = gemm.check_operands(p.a, p.b, p.scale_a, p.scale_b)
            for num_sms in (None, 3):
                for dtype in (torch.bfloat16, torch.float32):
                    fresh = lambda: fp8.poison(torch.empty(M, N, dtype=dtype, device="cuda"))  # noqa: E731
                    paired = launch(ops, fresh(), PAIRED, num_sms)
                    for cfg in CONFIGS:
                        out = launch(ops, fresh(), cfg, num_sms)
                        err = fp8.rel_error(p.checked(out), p.reference)
                        rows.append(dict(shape=p.shape, recipe=recipe, num_sms=num_sms, dtype=str(dtype),
                                         group_m=cfg.kwargs["GROUP_M"], rel_error=err,
                                         paired_rel_error=fp8.rel_error(p.checked(paired), p.reference),
                                         same_bits=bool(torch.equal(out, paired))))
                        ok = err < (1e-2 if dtype == torch.bfloat16 else 2e-3)
                        assert ok and rows[-1]["same_bits"], rows[-1]
    print(f"checked: {len(rows)} launches right against float64, each the paired kernel's bits", flush=True)
    return rows


def measure(reps=20):
    """The overlapped kernel, the paired kernel and cuBLAS precise on the reference cells, timed
    together (``bench.benchmark``); returns records with TFLOP/s and the ratio to cuBLAS precise."""
    from fp8_tutorial import gemm
    from fp8_tutorial.measure import bench
    from fp8_tutorial.measure import contenders as C
    rows = []
    for M, K, N in C.SEED_SHAPES + [(8192, 8192, 8192)]:
        for recipe in ("tensor", "row"):
            p = C.make_problem(M, K, N, recipe, device="cuda", reference_rows=512)
            ops = gemm.check_operands(p.a, p.b, p.scale_a, p.scale_b)
            fns = {"cuBLAS precise": lambda: torch._scaled_mm(p.a, p.b, p.scale_a, p.scale_b,
                                                              out_dtype=torch.bfloat16, use_fast_accum=False)}
            for cfg in [PAIRED] + CONFIGS:
                name = f"{cfg.kwargs['KIND']}, GROUP_M {cfg.kwargs['GROUP_M']}"
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                fns[name] = (lambda cfg, out: lambda: launch(ops, out, cfg))(cfg, out)
            timed = bench.benchmark(fns, flops=p.flops, reps=reps)
            base = timed["cuBLAS precise"].tflops
            rows += [dict(shape=p.shape, recipe=recipe, kernel=k, tflops=timed[k].tflops,
                          ratio=timed[k].tflops / base) for k in fns]
            print(p.shape, recipe, f"cuBLAS precise {base:.0f} TFLOP/s;",
                  "  ".join(f"{k} {timed[k].tflops / base:.3f}x" for k in list(fns)[1:]), flush=True)
    return rows


if __name__ == "__main__":
    from fp8_tutorial.measure import results
    t = time.time()
    checks = check()
    print("saved to", results.save("overlapped_precise", measure(), checks=checks))
    print(f"done in {time.time() - t:.0f} s")
