"""The package's two block-wise kernels against each other and against cuBLAS block-wise: the
scales copied by TMA into the ring (``ws_gluon.gluon_blockwise_tma_kernel``) and loaded from
global memory by the consumer warps (``ws_gluon.gluon_blockwise_kernel``, what ``scaled_mm`` runs
while ``ws_gluon.BLOCK_SCALES_BY_TMA`` is off), with the consumers' multiply-add by a constant per
row (``ffma``, from ``tools/blockwise_cost.py``: no scale loads, a wrong product, timed only) as
the mark of what the scales cost (a Hopper GPU is needed).

Per cell, configuration (GROUP_M 8 and 16, 5 stages) and kernel, one run of the kernel harness,
every real product checked against float64 with the output poisoned first:

- ``TMA``: A's scales M-major, each K block's column padded to a multiple of 4 rows (16 bytes),
  W's the transpose of ``quantize(w, "128x128")``'s (K-major);
- ``loads, M-major`` and ``loads, row-major``: the kernel that loads them, on A's scales in both
  layouts (the first the same scales as ``TMA``; row-major is ``quantize(x, "1x128")``'s).

    python3 tools/tma_scales.py

Saves ``results/tma_scales_<gpu>.json``. ``results/tma_scales_h100.json`` holds a run of the
package's kernels on an H100 (2026-12-06, 0 failed checks). On the eleven cells, M = 1000 to
16384, the TMA kernel's best configuration ran at 1.016 to 1.104x the loading kernel's best
(either layout of A's scales), at 0.88 to 0.98x cuBLAS block-wise (0.88x on 16384 x 4096 x
28672, 0.95 to 0.98x on the others) and at 0.92 to 0.97x ffma's speed.
"""
import sys

import torch

import fp8_tutorial as fp8
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.measure import results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

CELLS = [(4096, 16384, 7168), (4608, 12288, 3072), (4608, 3072, 12288), (1024, 7168, 4096), (4096, 7168, 4096),
         (1024, 1536, 24576), (4096, 1536, 24576), (4096, 2048, 7168), (8192, 7168, 4096), (16384, 4096, 28672),
         (1000, 16384, 7168)]


def main():
    from blockwise_cost import LOADS, _variant, check_and_time, ones_in_registers

    ffma = _variant(block_scales=ones_in_registers)
    W.BLOCK_SCALES_BY_TMA = True  # launch_gluon sends the scales TMA can read to the TMA kernel
    sweep = results.Sweep("tma_scales")
    log = sweep.log
    for M, K, N in CELLS:
        p = make_problem(M, K, N, "block", device="cuda", reference_rows=512)
        M_pad = -(-M // 4) * 4
        m_major = torch.empty_strided(p.scale_a.shape, (1, M_pad), device="cuda").copy_(p.scale_a)
        ops = check_operands(p.a, p.b, m_major, p.scale_b)
        rows = check_operands(p.a, p.b, p.scale_a.contiguous(), p.scale_b)
        if W.tma_scales_take(ops) is None:
            sweep.fail(f"{p.shape}: these scales do not go by TMA")
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
        check_and_time(sweep, p, out, fns, ("TMA", "loads"))
        fns = p = None
        torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/tma_scales.py needs a GPU")
    main()
