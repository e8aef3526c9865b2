"""Deeper rings for the kernels with promotion in the K loop: the block-wise kernel and the paired
and stacked precise kernels, each with one stage more than ``scaled_mm``'s candidates hold, made
room for by storing the output in column parts of 64 or 32 (two small buffers a group in place
of one tile-wide one), against cuBLAS and the candidates, in one run of the kernel harness (a
Hopper GPU is needed).

The candidates (``ws_gluon.GLUON_BLOCK_CONFIGS``, ``GLUON_PRECISE_CONFIGS``) kept, when this was
run, 5 stages of 128 x 128 tiles beside an output buffer of the whole tile (192 KiB of the 227 a
program may have) and 4 of the stacked 192 x 128 (208 KiB); ``GLUON_PRECISE_CONFIGS`` has since
taken three of the deeper ones, which a new run counts as candidates. With stores of 64 columns a 6-stage ring fits (224 KiB), with 32 one
at 208 KiB; the stacked tile takes 5 stages with stores of 32 columns (224 KiB). Whether the
deeper ring pays where the K loop waits on promotion is what this measures:

- ``block``: the block-wise recipe (cuBLAS's ``torch.nn.functional.scaled_mm`` with
  ``BlockWise1x128`` x ``BlockWise128x128``) on five of chapter 11's cells at M >= 1024 (0.94 to
  0.96x cuBLAS block-wise there) and on Llama-3-8B's four projections at 16384 tokens (chapter
  12's prefill);
- ``precise``: precise accumulation per tensor and per row (cuBLAS with ``use_fast_accum=False``)
  on the book's reference cells.

    python3 tools/ring_depth.py [block] [precise]        # default: both

Each output is poisoned first and checked against float64 on 512 of its rows. Saves
``results/ring_depth_<gpu>.json`` after each cell: per configuration its time and ratio to cuBLAS,
and whether ``scaled_mm`` times it (a candidate).

On an H100 (``results/ring_depth_h100.json``, 2026-12-05, 0 failed checks; not yet on the H200),
the best candidate against the best deeper configuration, as ratios to cuBLAS:

- precise per tensor: 512 x 3072 x 12288 0.989 / 1.034, 512 x 12288 x 3072 0.830 / 0.888,
  1152 x 3072 x 12288 1.040 / 1.071, 1152 x 12288 x 3072 0.879 / 0.928, 8192^3 0.977 / 0.990;
  at M = 2304 and 4608 no deeper one ahead. Over the nine cells the best of either 0.984x by the
  geometric mean (0.962x candidates alone), lowest 0.888x;
- precise per row: 512 x 3072 x 12288 1.045 / 1.090, 512 x 12288 x 3072 0.982 / 1.045,
  1152 x 3072 x 12288 1.089 / 1.099, 1152 x 12288 x 3072 1.027 / 1.056, none ahead from M = 2304:
  the best of either 1.095x (1.078x), lowest 1.045x;
- block-wise: at most 0.6% ahead of the best candidate, or slower, on every cell (the best of
  either 0.81 to 0.93x cuBLAS block-wise): the deeper ring does not reach what the block-wise loop
  loses (``tools/blockwise_cost.py``).

``ws_gluon.GLUON_PRECISE_CONFIGS`` takes three of them (the paired kernel at 6 stages with stores
of 64 columns, GROUP_M 8 and 16; the stacked at 5 with stores of 32).
"""
import sys

import torch
import triton

import fp8_tutorial as fp8
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.host import describe_config, sm_count
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem
from fp8_tutorial.measure.model import LLAMA3_8B

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from llama_gemms import checked_configs, timed_configs  # noqa: E402  (the same cut and checks)

NAME = "ring_depth"
# (M, K, N): chapter 11's lowest block-wise cells at M >= 1024, then Llama-3-8B's prefill at 16384
BLOCK_CELLS = [(8192, 7168, 4096), (4096, 2048, 7168), (4608, 12288, 3072), (4096, 16384, 7168),
               (4096, 1536, 24576)] + [(16384, K, N) for N, K in LLAMA3_8B.projections().values()]
PRECISE_CELLS = [(512, 3072, 12288), (512, 12288, 3072), (1152, 3072, 12288), (1152, 12288, 3072),
                 (2304, 3072, 12288), (2304, 12288, 3072), (4608, 3072, 12288), (4608, 12288, 3072),
                 (8192, 8192, 8192)]


def deeper(kind: str) -> list[triton.Config]:
    """The deeper rings for the kernels of ``kind`` ("block" or "precise")."""
    kinds = ["blockwise"] if kind == "block" else ["paired"]
    grid = [W.make_gluon_config(k, 128, 128, 128, 6, group_m=g, store_n=s) for k in kinds for g in (8, 16)
            for s in (64, 32)]
    if kind == "precise":
        grid += [W.make_gluon_config("stacked", 192, 128, 128, 5, group_m=g, store_n=32) for g in (8, 16)]
    return grid


def sweep_cells(sweep, kind: str, recipe: str, cells) -> None:
    log, records = sweep.log, sweep.records
    num_sms = sm_count(torch.device("cuda"))
    base_configs = W.GLUON_BLOCK_CONFIGS if kind == "block" else W.GLUON_PRECISE_CONFIGS
    for M, K, N in cells:
        p = make_problem(M, K, N, recipe, device="cuda", reference_rows=512)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        candidates = timed_configs(base_configs, M, N, K, num_sms)
        extra = {k: c for k, c in timed_configs(deeper(kind), M, N, K, num_sms).items() if k not in candidates}
        fns = {"cuBLAS": REGISTRY[f"cublas/{recipe}/precise"].build(p)}
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")  # one output for all: they run in turn
        checked, names = checked_configs(sweep, p, ops, {**candidates, **extra}, candidates, True, out)
        fns.update(checked)
        timed = bench.benchmark(fns, flops=p.flops, reps=20)
        base = timed["cuBLAS"].median_ms
        for n, r in timed.items():
            records.append(dict(kind=kind, recipe=recipe, shape=p.shape, M=M, N=N, K=K, config=n, tflops=r.tflops,
                                median_us=r.median_ms * 1e3, ratio=base / r.median_ms, candidate=names.get(n, False)))
        ranked = sorted(((base / timed[n].median_ms, n) for n in names), reverse=True)
        if not ranked:
            log(f"{recipe:>6} {p.shape:>18}: no configuration ran and passed its check")
            continue
        best_candidate = max((ratio for ratio, n in ranked if names[n]), default=float("nan"))
        best_deeper = max((ratio for ratio, n in ranked if not names[n]), default=float("nan"))
        log(f"{recipe:>6} {p.shape:>18}: cuBLAS {timed['cuBLAS'].tflops:6.0f} TFLOP/s; best candidate "
            f"{best_candidate:.3f}x; best deeper {best_deeper:.3f}x; best {ranked[0][0]:.3f}x {ranked[0][1]}")
        sweep.save()
        del fns, p, ops, out
        torch.cuda.empty_cache()


def main():
    kinds = [a for a in sys.argv[1:] if a in ("block", "precise")] or ["block", "precise"]
    sweep = results.Sweep(NAME)
    if "block" in kinds:
        sweep_cells(sweep, "block", "block", BLOCK_CELLS)
    if "precise" in kinds:
        for recipe in ("tensor", "row"):
            sweep_cells(sweep, "precise", recipe, PRECISE_CELLS)
    sweep.done()


def compile_only():
    """Compile each deeper configuration for sm_90a here (no GPU): shared memory, registers, spills."""
    from fp8_tutorial.measure import compiled

    for kind in ("block", "precise"):
        for cfg in deeper(kind):
            why = W.gluon_refuses(cfg, 2)
            if why:
                print(f"{describe_config(cfg)}: refused: {why}")
                continue
            row = kind == "precise"  # per row, the heavier epilogue; block-wise scales are not rows
            flags = dict(ROW_A=row, ROW_B=row, PRECISE=True)
            k = compiled.compile_gluon_for(W.GLUON_KERNELS[cfg.kwargs["KIND"]], cfg, flags,
                                           maxnreg=W.gluon_maxnreg(cfg))
            r = compiled.ptxas_report(k)
            print(f"{describe_config(cfg)}: shared {k.metadata.shared // 1024} KiB, registers {r.registers}, "
                  f"spills {r.spill_stores + r.spill_loads}, notes {r.notes[:2]}", flush=True)


if __name__ == "__main__":
    if "compile" in sys.argv:
        compile_only()
    elif not fp8.ON_GPU:
        sys.exit("tools/ring_depth.py needs a GPU")
    else:
        main()
