"""An experiment for block-wise scales: each K step's scales delivered by TMA into the ring with
its operands, so that the consumer warps read them from shared memory and never wait for a global
load (on a Hopper GPU; ``compile`` compiles for sm_90a without one and prints ptxas's registers,
spills and remarks).

The package's block-wise kernel (``ws_gluon.gluon_blockwise_kernel``) loads each K step's scales
from global memory in the consumer warps, two steps ahead; ``tools/blockwise_cost.py`` and
Nsight Compute found those warps the bottleneck, waiting on the loads at branches and on the
product of the two scales. Here the producer warp adds two TMA copies to each stage: A's scales
for the tile's 128 rows (from the M-major layout cuBLAS asks for, one row of (K/128, M)) and W's
block scale (a box of 4 values of the (K/128, N/128) scales, starting at the tile's block), both
counted on the stage's ``ready`` barrier. Each consumer group reads its 64 rows' scales and the
block scale right after the stage is ready, multiplies them while the step's ``wgmma`` runs, and
hands the stage back after promoting it. TMA asks for 16-byte strides: M a multiple of 4 (A's
scales) and N a multiple of 512 (W's), which the cells below meet.

    python3 tools/tma_scales.py [compile]

Saves ``results/tma_scales_<gpu>.json``: per cell, cuBLAS block-wise, the package's kernel with
A's scales row-major and M-major, and this kernel at 4 and 5 stages, each with GROUP_M 8 and 16, each
checked against float64 (output poisoned first) and timed in the kernel harness in one run.
"""
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma_wait

from fp8_tutorial.kernels import ws_gluon as W

SCALE_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
# W's scales: a box of 4 (16 bytes, TMA's smallest) from the block 4 * (nb // 4), since TMA wants the
# innermost coordinate 16-byte aligned; the tile's block scale is its element nb % 4. Slots 8 boxes
# apart, so that each copy's destination is 128-byte aligned.
SB_BOX = gl.constexpr(4)
SB_SPREAD = gl.constexpr(8)


@gluon.jit
def scale_load_ring(a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, M, N, K,
                    WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, GROUPS: gl.constexpr):
    """``ws_gluon.load_ring`` that also copies each K step's scales into its stage: A's for the
    tile's rows (one row of the M-major scales) and W's block scale, on the same barrier."""
    SUB_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N, BLOCK_K)
    it = 0
    for u in range(units):
        tile, _, k_first, k_last = W.work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
        nb = off_n // BLOCK_N
        for kk in range(k_first, k_last):
            s = it % STAGES
            bar = ready.index(s)
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(bar, GROUPS * a_desc.block_type.nbytes + b_desc.block_type.nbytes
                            + sa_desc.block_type.nbytes + sb_desc.block_type.nbytes)
            W.load_a(a_desc, a_bufs, bar, s, off_m, kk * BLOCK_K, GROUPS)
            tma.async_copy_global_to_shared(b_desc, [off_n, kk * BLOCK_K], bar, b_bufs.index(s))
            tma.async_copy_global_to_shared(sa_desc, [kk, off_m], bar, sa_bufs.index(s))
            tma.async_copy_global_to_shared(sb_desc, [kk, nb - nb % SB_BOX], bar, sb_bufs.index(s * SB_SPREAD))
            it += 1


@gluon.jit
def stage_scales(sa_flat, sb_flat, s, nb, layout: gl.constexpr, GROUP: gl.constexpr, SUB_M: gl.constexpr):
    """Stage ``s``'s scales, read from shared memory: this group's SUB_M rows' A scales (in
    ``layout``, the accumulator's rows) times weight block ``nb``'s scale."""
    sa = sa_flat.index(s).slice(GROUP * SUB_M, SUB_M).load(layout)
    every: gl.constexpr = gl.BlockedLayout([SB_BOX], [32], [4], [0])
    sbv = sb_flat.index(s * SB_SPREAD).load(every)
    sb = gl.sum(gl.where(gl.arange(0, SB_BOX, layout=every) == nb % SB_BOX, sbv, 0.0), axis=0)
    return sa * sb


@gluon.jit
def staged_issue(a_bufs, b_bufs, sa_flat, sb_flat, ready, acc, r, nb, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """Start ring step ``r``'s ``wgmma`` into ``acc`` once its stage is loaded, and read its scales
    from the stage: returns the ``wgmma`` in flight and this group's rows' products of A's scale
    and W's (weight block ``nb``'s)."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    SUB_M: gl.constexpr = acc.type.shape[0]
    rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    acc = W.blockwise_issue(a_bufs, b_bufs, ready, acc, r, GROUP, GROUPS)
    return acc, stage_scales(sa_flat, sb_flat, r % STAGES, nb, rows, GROUP, SUB_M)


@gluon.jit
def staged_promote(empty, acc, total, r, f, STAGES: gl.constexpr):
    """Ring step ``r``'s sum ``acc``, complete: its stage handed back, ``acc`` times the products
    ``f`` (per row) added into ``total``."""
    mbarrier.arrive(empty.index(r % STAGES))
    return gl.fma(acc, f[:, None], total)


@gluon.jit
def staged_tile(a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, acc, it, k_steps, nb, GROUP: gl.constexpr,
                GROUPS: gl.constexpr):
    """``ws_gluon.blockwise_tile``'s loop (two sums in turn, every step promoted), with each step's
    scales read from its stage when it is issued."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    total = gl.zeros_like(acc)
    acc1 = gl.zeros_like(acc)
    acc0, f0 = staged_issue(a_bufs, b_bufs, sa_flat, sb_flat, ready, acc, it, nb, GROUP, GROUPS)
    for kk in range(0, k_steps - 2, 2):
        acc1, f1 = staged_issue(a_bufs, b_bufs, sa_flat, sb_flat, ready, acc1, it + kk + 1, nb, GROUP, GROUPS)
        acc0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = staged_promote(empty, acc0, total, it + kk, f0, STAGES)
        acc0, f0 = staged_issue(a_bufs, b_bufs, sa_flat, sb_flat, ready, acc0, it + kk + 2, nb, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(1, deps=(acc1,))
        total = staged_promote(empty, acc1, total, it + kk + 1, f1, STAGES)
    if k_steps % 2 == 0:
        next1, f1 = staged_issue(a_bufs, b_bufs, sa_flat, sb_flat, ready, acc1, it + k_steps - 1, nb, GROUP, GROUPS)
        done0 = warpgroup_mma_wait(1, deps=(acc0,))
        total = staged_promote(empty, done0, total, it + k_steps - 2, f0, STAGES)
        done1 = warpgroup_mma_wait(0, deps=(next1,))
        total = staged_promote(empty, done1, total, it + k_steps - 1, f1, STAGES)
    else:
        done0 = warpgroup_mma_wait(0, deps=(acc0,))
        total = staged_promote(empty, done0, total, it + k_steps - 1, f0, STAGES)
    return total, it + k_steps


@gluon.jit
def _staged_consumer(a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr, M, N, K,
                     WHOLE_TILES, GROUP_M: gl.constexpr, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                     num_warps: gl.constexpr):
    """``ws_gluon._blockwise_consumer`` with ``staged_tile``, whole tiles only."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BUFS: gl.constexpr = W.output_buffers(c_desc.block_type.shape[1], BLOCK_N)
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, W.accumulator_layout(BLOCK_N, num_warps))
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, 1, GROUPS * SUB_M, BLOCK_N,
                                          a_desc.block_type.shape[1])
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = W.work_unit(u, WHOLE_TILES, 1, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, GROUP, GROUPS)
        acc, it = staged_tile(a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, acc, it, k_last - k_first,
                              off_n // BLOCK_N, GROUP, GROUPS)
        W.store_tile(acc, 1.0, 1.0, c_desc, c_bufs, off_m, off_n, False, False, GROUP * BUFS)
    tma.store_wait(0)


@gluon.jit
def tma_scales_kernel(a_desc, b_desc, c_desc, sa_desc, sb_desc, ones_ptr, M, N, K, WHOLE_TILES,
                      GROUP_M: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ W^T with block-wise scales read through TMA descriptors: ``sa_desc`` over A's scales
    M-major ((K/128, M), a box of one K block's 128 rows) and ``sb_desc`` over W's (K/128, N/128),
    a box of 4 from the tile's block. The paired kernel's structure otherwise."""
    GROUPS: gl.constexpr = W.PAIRED_GROUPS
    a_bufs, b_bufs, ready, empty = W.allocate_ring(a_desc, b_desc, STAGES, GROUPS)
    sa_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + sa_desc.block_type.shape, sa_desc.layout)
    sb_bufs = gl.allocate_shared_memory(gl.float32, [STAGES * SB_SPREAD] + sb_desc.block_type.shape, sb_desc.layout)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sa_flat = sa_bufs._reinterpret(gl.float32, [STAGES, sa_desc.block_type.shape[1]], flat)
    sb_flat = sb_bufs._reinterpret(gl.float32, [STAGES * SB_SPREAD, sb_desc.block_type.shape[1]], flat)
    c_bufs = W.allocate_outputs(c_desc, b_desc, GROUPS)
    gl.warp_specialize([
        (_staged_consumer, (a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr, M, N,
                            K, WHOLE_TILES, GROUP_M, 0, GROUPS, 4)),
        (_staged_consumer, (a_desc, c_desc, a_bufs, b_bufs, sa_flat, sb_flat, ready, empty, c_bufs, ones_ptr, M, N,
                            K, WHOLE_TILES, GROUP_M, 1, GROUPS, 4)),
        (scale_load_ring, (a_desc, b_desc, sa_desc, sb_desc, a_bufs, b_bufs, sa_bufs, sb_bufs, ready, empty, M, N, K,
                           WHOLE_TILES, 1, GROUP_M, GROUPS)),
    ], W.PAIRED_WORKERS, W.BLOCKWISE_REGISTERS)


def m_major_scales(scale_a: torch.Tensor) -> torch.Tensor:
    """A's (M, K/128) scales as the (K/128, M) view TMA reads: M-major, rows 16-byte aligned."""
    M, kb = scale_a.shape
    if M % 4:
        raise ValueError(f"TMA needs A's scales' rows 16-byte aligned: M a multiple of 4, got {M}")
    return scale_a.t().contiguous()


def launch_tma_scales(a, b, scale_a_t, scale_b, out, group_m=8, stages=5, num_sms=None):
    """Run ``tma_scales_kernel`` (128 x 128 x 128 tiles, no split) into ``out``: ``scale_a_t`` from
    ``m_major_scales``, ``scale_b`` (K/128, N/128) contiguous with N a multiple of 512."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    M, K = a.shape
    N = b.shape[1]
    if N % 512 or not scale_b.is_contiguous():
        raise ValueError(f"TMA needs W's scales contiguous with N a multiple of 512, got {N}")
    cfg = W.make_gluon_config("blockwise", 128, 128, 128, stages, group_m=group_m)
    layouts = W._layouts(cfg, out.dtype)
    blocks = W.gluon_blocks(cfg)
    descs = [TensorDescriptor.from_tensor(t, block, layout)
             for t, block, layout in zip((a, b.t(), out), blocks, layouts)]
    sa_desc = TensorDescriptor.from_tensor(scale_a_t, [1, 128], SCALE_LAYOUT)
    sb_desc = TensorDescriptor.from_tensor(scale_b, [1, SB_BOX.value], SCALE_LAYOUT)
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    num_sms = num_sms or torch.cuda.get_device_properties(a.device).multi_processor_count
    ones = torch.ones(1, dtype=torch.float32, device=a.device)
    tma_scales_kernel[(min(num_sms, tiles),)](*descs, sa_desc, sb_desc, ones, M, N, K, tiles, group_m, stages,
                                              num_warps=4, maxnreg=W.gluon_maxnreg(cfg))
    return out


def compile_only():
    from fp8_tutorial.measure import compiled
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = W.make_gluon_config("blockwise", 128, 128, 128, 5)
    a_block, b_block, c_block = W.gluon_blocks(cfg)
    sig = {}
    for name, shape, dtype, ty in (("a_desc", a_block, gl.float8e4nv, "fp8e4nv"), ("b_desc", b_block, gl.float8e4nv,
                                   "fp8e4nv"), ("c_desc", c_block, gl.bfloat16, "bf16")):
        sig[name] = f"tensordesc<{ty}[{shape[0]}, {shape[1]}],{gl.NVMMASharedLayout.get_default_for(shape, dtype)!r}>"
    sig["sa_desc"] = f"tensordesc<fp32[1, 128],{SCALE_LAYOUT!r}>"
    sig["sb_desc"] = f"tensordesc<fp32[1, {SB_BOX.value}],{SCALE_LAYOUT!r}>"
    sig.update(ones_ptr="*fp32", M="i32", N="i32", K="i32", WHOLE_TILES="i32")
    values = dict(GROUP_M=8, STAGES=5, num_warps=4)
    src = GluonASTSource(fn=tma_scales_kernel, signature=dict(sig, **{n: "constexpr" for n in values}),
                         constexprs=values, attrs={(5,): [["tt.divisibility", 16]]})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": W.gluon_maxnreg(cfg)})
    r = compiled.ptxas_report(k)
    print(f"shared {k.metadata.shared // 1024} KiB, {compiled.summary(k)['setmaxnreg_to']}, registers {r.registers}, "
          f"spills {r.spill_stores + r.spill_loads}, notes {r.notes[:3]}", flush=True)
    return k


CELLS = [(4096, 16384, 7168), (4608, 12288, 3072), (4608, 3072, 12288), (1024, 7168, 4096), (4096, 7168, 4096),
         (1024, 1536, 24576), (4096, 1536, 24576), (4096, 2048, 7168), (8192, 7168, 4096), (16384, 4096, 28672),
         (1000, 16384, 7168)]


def main():
    from fp8_tutorial.checks import rel_error, tolerance
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench, results
    from fp8_tutorial.measure.contenders import REGISTRY, make_problem
    import fp8_tutorial as fp8

    from blockwise_cost import _variant, ones_in_registers

    ffma = _variant(block_scales=ones_in_registers)  # no scale loads, a multiply-add by a value a row
    sweep = results.Sweep("tma_scales")
    log, records = sweep.log, sweep.records
    for M, K, N in CELLS:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=512)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        ops_m = check_operands(p.a, p.b, p.scale_a.t().contiguous().t(), p.scale_b)
        sa_t = m_major_scales(p.scale_a)
        sb_c = p.scale_b.contiguous()
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns = {"cuBLAS block-wise": REGISTRY["cublas/block/precise"].build(p)}
        try:
            fns["cuBLAS block-wise"]()
        except RuntimeError as e:
            log(f"{p.shape}: cuBLAS block-wise refused ({str(e).splitlines()[0][:80]}): left out")
            continue
        for group_m in (8, 16):
            cfg = next(c for c in W.GLUON_BLOCK_CONFIGS if c.kwargs["GROUP_M"] == group_m and not c.kwargs["SPLIT"])
            fns[f"package, row-major, GROUP_M {group_m}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg)
            fns[f"package, M-major, GROUP_M {group_m}"] = lambda cfg=cfg: W.launch_gluon(ops_m, out, True, config=cfg)
            for stages in (4, 5):
                fns[f"TMA scales, {stages} stages, GROUP_M {group_m}"] = (
                    lambda g=group_m, s=stages: launch_tma_scales(p.a, p.b, sa_t, sb_c, out, g, s))
            fns[f"ffma (timing only), GROUP_M {group_m}"] = (
                lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg, kernels=ffma))
        for n, fn in fns.items():  # every one of ours checked against float64, output poisoned first
            if n.startswith(("package", "TMA")):
                fp8.poison(out)
                print("checking", n, flush=True)
                fn()
                torch.cuda.synchronize()
                err = rel_error(p.checked(out).float(), p.reference)
                if not err < tolerance(torch.bfloat16, True):
                    sweep.fail(f"{p.shape} {n}: rel. error {err:.2e}")
            else:
                fn()
        timed = bench.benchmark(fns, flops=p.flops, reps=20)
        base = timed["cuBLAS block-wise"].median_ms
        for n, r in timed.items():
            records.append(dict(shape=p.shape, M=M, K=K, N=N, variant=n, tflops=r.tflops, median_us=r.median_ms * 1e3,
                                ratio=base / r.median_ms))
        log(f"{p.shape:>18}: " + "; ".join(f"{n} {r.tflops:5.0f} ({base / r.median_ms:.3f}x)" for n, r in timed.items()))
        sweep.save()
        fns = p = None
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if "compile" in sys.argv:
        compile_only()
    else:
        main()
