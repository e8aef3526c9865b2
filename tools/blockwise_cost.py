"""What the block-wise kernel's scales cost: ``gluon_blockwise_kernel`` against the paired kernel
with precise accumulation per tensor (the same K loop, two tensor-core sums in turn, every K block
added into float32, but one scale for the whole product, applied as the tile goes out), and
against itself with its scales' loads changed (a Hopper GPU is needed).

On an H100 (``results/ring_depth_h100.json``) the block-wise kernel ran 0.81 to 0.93x cuBLAS
block-wise where the paired kernel ran 0.97x cuBLAS precise per tensor on 4608 x 12288 x 3072:
the two loops differ only in the scales (two loads a K step in each thread, A's per row and W's
per block, started two steps ahead, and a multiply-add in place of the add). The variants, each
timed in one run of the kernel harness with cuBLAS block-wise and the paired kernel:

- ``row-major``: the package's kernel, A's scales (M, K/128) row-major (``quantize``'s layout);
- ``M-major``: the same kernel, A's scales with strides (1, M) (cuBLAS's layout): a group's 64
  scales of a K block in 256 contiguous bytes, in place of 64 rows' worth of cache lines;
- ``no scale loads``: the scales replaced by 1.0 (no load in the K loop; the multiply-add stays).
  Its output is wrong on purpose (it is timed, never used);
- ``paired, per tensor``: ``gluon_paired_kernel`` with precise accumulation on the same FP8
  operands with one scale each.

    python3 tools/blockwise_cost.py

Saves ``results/blockwise_cost_<gpu>.json``: per cell the time of each, and its ratio to cuBLAS
block-wise.
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
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

CELLS = [(4608, 12288, 3072), (4096, 16384, 7168), (8192, 7168, 4096), (16384, 14336, 4096), (16384, 4096, 28672),
         (1024, 1536, 24576)]


@gluon.jit
def ones_for_scales(sa_ptr, sb_ptr, rows, kb, nb, M, stride_sam, stride_sak, stride_sbk, stride_sbn):
    """``ws_gluon.block_scales`` without its loads: 1.0 for every scale (timing only)."""
    return gl.full(rows.shape, 1.0, gl.float32, layout=rows.type.layout), 1.0


def _without_scale_loads():
    names = dict(vars(W), block_scales=ones_for_scales)
    for name in ("blockwise_tile", "_blockwise_consumer"):
        names[name] = _rebound(getattr(W, name), names)
    return {"blockwise": _rebound(W.gluon_blockwise_kernel, names)}


def main():
    no_loads = _without_scale_loads()
    sweep = results.Sweep("blockwise_cost")
    log, records = sweep.log, sweep.records
    for M, K, N in CELLS:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=512)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        m_major = p.scale_a.t().contiguous().t()
        ops_m = check_operands(p.a, p.b, m_major, p.scale_b)
        one = torch.ones((), dtype=torch.float32, device="cuda")
        ops_t = check_operands(p.a, p.b, one, one)
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns = {"cuBLAS block-wise": REGISTRY["cublas/block/precise"].build(p)}
        for cfg in W.GLUON_BLOCK_CONFIGS[:2]:
            g = cfg.kwargs["GROUP_M"]
            fns[f"row-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg)
            fns[f"M-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops_m, out, True, config=cfg)
            fns[f"no scale loads, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg,
                                                                                   kernels=no_loads)
            paired = W.make_gluon_config("paired", 128, 128, 128, 5, group_m=g)
            fns[f"paired, per tensor, GROUP_M {g}"] = lambda cfg=paired: W.launch_gluon(ops_t, out, True, config=cfg)
        for n, fn in fns.items():  # the real ones checked against float64, output poisoned first
            if n.startswith(("row-major", "M-major")):
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
            records.append(dict(shape=p.shape, M=M, K=K, N=N, variant=n, tflops=r.tflops, median_us=r.median_ms * 1e3,
                                ratio=base / r.median_ms))
        log(f"{p.shape:>18}: " + "; ".join(f"{n} {r.tflops:5.0f} ({base / r.median_ms:.3f}x)" for n, r in timed.items()))
        sweep.save()
        del fns, p, ops, ops_m, out
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/blockwise_cost.py needs a GPU")
    main()
