"""Whether the swapped kernel should take M above 64 with more than one block of 64 tokens (on a
Hopper GPU). ``swapped.MAX_M`` stops it at 64 after its first run, whose candidates at M = 128
were one tile of 128 tokens (``results/swapped_first_h200.json``); here, at M = 128 and 256, its
candidates are those ``swapped.candidates`` gives, and each with 6 stages too (64 tokens a tile, so two or four token blocks
each reading the same weight rows, the second from L2 if it is still there), run directly past
``swapped_takes``, each checked against float64 with its output poisoned first, then timed in the
kernel harness beside cuBLAS and the Gluon kernel that ``scaled_mm`` runs there.

    python3 tools/swapped_m128.py

Cells: DeepSeek-V3's projections whose N block-wise scales cut, block-wise (precise), per row
fast and precise, per tensor fast at M = 128; block-wise at M = 256. Saves
``results/swapped_m128_<gpu>.json`` after each cell.

On the H200 (``results/swapped_m128_h200.json``, 25 cells, 0 failed checks) the best candidate
was ahead of the Gluon kernel on 8 of the 20 cells at M = 128 (0.73 to 1.19x: on N x K of 4096 x
7168 in every recipe, of 7168 x 2048 in all but block-wise (0.965x), and of 7168 x 16384 per row
precise; behind on 24576 x 1536 and 32768 x 512 by 13 to 27%) and of cuBLAS on 5 (0.67 to 1.12x);
at M = 256 behind both on all five (0.60 to 0.99x the Gluon kernel). So MAX_M stays 64. The Gluon
kernel's block-wise cells were measured with its K loop of then, which waited for each K block.
"""
import dataclasses

import torch

from fp8_tutorial import scaled_mm
from fp8_tutorial.checks import rel_error
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import swapped as S
from fp8_tutorial.kernels.host import sm_count
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.blockwise import DEEPSEEK_SHAPES
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

CELLS = [(128, "block", True), (128, "row", False), (128, "row", True), (128, "tensor", False), (256, "block", True)]
NAME = "swapped_m128"


def main():
    sweep = results.Sweep(NAME)
    log, records = sweep.log, sweep.records

    num_sms = sm_count(torch.device("cuda"))
    for M, recipe, precise in CELLS:
        acc = "precise" if precise else "fast"
        for N, K in DEEPSEEK_SHAPES:
            if N % 128:
                continue
            p = make_problem(M, K, N, recipe, device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            flags = S._flags(ops, precise)
            fns, errors = {}, {}
            cublas = REGISTRY[f"cublas/{recipe}/{acc}"].build(p)
            errors["cuBLAS"] = rel_error(p.checked(cublas()).float(), p.reference)
            fns["cuBLAS"] = cublas
            out_g = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            fns["gluon"] = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, kernel="gluon", precise=precise, out=out_g)
            errors["gluon"] = rel_error(p.checked(fns["gluon"]()).float(), p.reference)
            cands = S.candidates(M, N, K, num_sms, recipe == "block")
            cands += [dataclasses.replace(c, STAGES=6) for c in cands if c.BLOCK_N + c.BLOCK_T <= 192]
            for cfg in dict.fromkeys(cands):
                S.check_swapped_config(cfg, recipe == "block")
                out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                S._run(ops, out, cfg, flags)
                torch.cuda.synchronize()
                name = cfg.describe()
                errors[name] = rel_error(p.checked(out).float(), p.reference)
                if torch.isnan(out).any().item() or errors[name] > 1.5 * errors["cuBLAS"] + 1e-4:
                    sweep.fail(f"{p.shape} {recipe} {acc} {name}: error {errors[name]:.2e}")
                fns[name] = (lambda cfg, out: lambda: S._run(ops, out, cfg, flags))(cfg, out)
            timed = bench.benchmark(fns, flops=p.flops, reps=20)
            best = max((n for n in fns if n.startswith("swapped")), key=lambda n: timed[n].tflops)
            for n in fns:
                records.append(dict(shape=p.shape, M=M, K=K, N=N, recipe=recipe, accumulation=acc, contender=n,
                                    tflops=timed[n].tflops, median_us=timed[n].median_ms * 1e3,
                                    ratio=timed[n].tflops / timed["cuBLAS"].tflops, rel_error=errors[n],
                                    best_swapped=n == best))
            log(f"{p.shape:<17} {recipe:<6} {acc:<7} us: cuBLAS {timed['cuBLAS'].median_ms * 1e3:6.1f} "
                f"gluon {timed['gluon'].median_ms * 1e3:6.1f} swapped {timed[best].median_ms * 1e3:6.1f} "
                f"({best[9:70]}) x cuBLAS {timed[best].tflops / timed['cuBLAS'].tflops:.3f}, "
                f"x gluon {timed[best].tflops / timed['gluon'].tflops:.3f}")
            sweep.save()
            del p, fns
            torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    main()
