"""The package's two block-wise kernels against each other and against cuBLAS block-wise: the
scales copied by TMA into the ring (``ws_gluon.gluon_blockwise_tma_kernel``, what ``scaled_mm``
runs for ``quantize``'s layouts) and loaded from global memory by the consumer warps
(``ws_gluon.gluon_blockwise_kernel``, for layouts TMA cannot read), with the consumers' multiply-
add by a constant per row (``ffma``, from ``tools/blockwise_cost.py``: no scale loads, a wrong
product, timed only) as the mark of what the scales cost (a Hopper GPU is needed).

Per cell, configuration (GROUP_M 8 and 16, 5 stages) and kernel, one run of the kernel harness,
every real product checked against float64 with the output poisoned first:

- ``TMA``: A's scales as ``quantize(x, "1x128")`` makes them (M-major), W's the transpose of
  ``quantize(w, "128x128")``'s (K-major);
- ``loads, M-major`` and ``loads, row-major``: the kernel that loads them, on A's scales in both
  layouts (the first with the same scales as ``TMA``).

    python3 tools/tma_scales.py

Saves ``results/tma_scales_<gpu>.json``.
"""
import sys

import torch

import fp8_tutorial as fp8
from fp8_tutorial.checks import rel_error, tolerance
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

CELLS = [(4096, 16384, 7168), (4608, 12288, 3072), (4608, 3072, 12288), (1024, 7168, 4096), (4096, 7168, 4096),
         (1024, 1536, 24576), (4096, 1536, 24576), (4096, 2048, 7168), (8192, 7168, 4096), (16384, 4096, 28672),
         (1000, 16384, 7168)]
LOADS = {"blockwise": W.gluon_blockwise_kernel}  # launch_gluon's kernels=: the scales through their strides


def main():
    from blockwise_cost import _variant, ones_in_registers

    ffma = _variant(block_scales=ones_in_registers)
    sweep = results.Sweep("tma_scales")
    log, records = sweep.log, sweep.records
    for M, K, N in CELLS:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=512)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        rows = check_operands(p.a, p.b, p.scale_a.contiguous(), p.scale_b)
        if W.tma_scales_take(ops) is None:
            sweep.fail(f"{p.shape}: quantize's scales do not go by TMA")
            continue
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        fns = {"cuBLAS block-wise": REGISTRY["cublas/block/precise"].build(p)}
        try:
            fns["cuBLAS block-wise"]()
        except RuntimeError as e:
            log(f"{p.shape}: cuBLAS block-wise refused ({str(e).splitlines()[0][:80]}): left out")
            continue
        for cfg in W.GLUON_BLOCK_CONFIGS:
            if cfg.kwargs["SPLIT"]:
                continue
            g = cfg.kwargs["GROUP_M"]
            fns[f"TMA, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg)
            fns[f"loads, M-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg,
                                                                                 kernels=LOADS)
            fns[f"loads, row-major, GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(rows, out, True, config=cfg,
                                                                                   kernels=LOADS)
            fns[f"ffma (timing only), GROUP_M {g}"] = lambda cfg=cfg: W.launch_gluon(ops, out, True, config=cfg,
                                                                                     kernels=ffma)
        for n, fn in fns.items():  # the real ones checked against float64, output poisoned first
            if n.startswith(("TMA", "loads")):
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
        fns = p = None
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/tma_scales.py needs a GPU")
    main()
