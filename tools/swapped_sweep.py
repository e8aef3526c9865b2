"""The swapped kernel (``kernels/swapped.py``: C^T = W @ A^T, K cut into pieces) at small M, on a
Hopper GPU: every configuration a problem's first call would time, checked against float64 with
its output poisoned first, then timed in the kernel harness beside cuBLAS and the Gluon kernel
that ``scaled_mm`` runs there today; then, with the swapped kernel registered for this run,
``scaled_mm`` back to back against cuBLAS.

    python3 tools/swapped_sweep.py [quick]     # quick: M = 16 and 64 only

Beside the candidates (``swapped.candidates``) it times a few configurations no first call times
(6 stages; twice the most pieces), recorded with ``candidate`` False.

Cells: DeepSeek-V3's projections whose N block-wise scales cut (measure.blockwise.DEEPSEEK_SHAPES)
for M = 1, 16 and 64 (the kernel takes up to ``swapped.MAX_M``), block-wise (precise: cuBLAS takes
nothing else), per row fast and precise, per tensor fast. Saves ``results/swapped_<gpu>.json``
after each cell (``records``: one per cell and contender; ``failed_checks``).

``results/swapped_first_h200.json`` is the first run, which set MAX_M: M = 1, 16, 64 and 128, no
per-tensor cells, with the candidates of then (128 tokens a tile at M = 128; 4 stages only, 6 among
the extras), the kernel registered for that run only. ``results/swapped_tma_h200.json`` is a quick
run of the kernel with TMA loads as an option (commit 2740e34): the best TMA configuration per cell
was within -4.4% to +3.3% of the best through pointers, so the kernel loads through pointers only.
"""
import dataclasses
import sys

import torch

from fp8_tutorial import gemm, scaled_mm
from fp8_tutorial.checks import rel_error
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import swapped as S
from fp8_tutorial.kernels.host import sm_count
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.blockwise import DEEPSEEK_SHAPES
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

MS = [16, 64] if "quick" in sys.argv else [1, 16, 64]
RECIPES = [("block", True), ("row", False), ("row", True), ("tensor", False)]
NAME = "swapped"


def main():
    sweep = results.Sweep(NAME)
    log, records = sweep.log, sweep.records

    num_sms = sm_count(torch.device("cuda"))
    for recipe, precise in RECIPES:
        acc = "precise" if precise else "fast"
        for N, K in DEEPSEEK_SHAPES:
            if N % 128:
                continue
            for M in MS:
                p = make_problem(M, K, N, recipe, device="cuda")
                ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
                fns, errors = {}, {}
                cublas = REGISTRY[f"cublas/{recipe}/{acc}"].build(p)
                try:
                    errors["cuBLAS"] = rel_error(p.checked(cublas()).float(), p.reference)
                    fns["cuBLAS"] = cublas
                except (RuntimeError, ValueError) as e:
                    log(f"{p.shape} {recipe} {acc}: cuBLAS refuses: {str(e).splitlines()[0][:120]}")
                out_g = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                fns["gluon"] = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, kernel="gluon", precise=precise,
                                                 out=out_g)
                cands = S.candidates(M, N, K, num_sms, recipe == "block")
                top = max(cands, key=lambda c: c.SPLIT)
                # beyond what a first call times: 6 stages, and twice the most pieces
                extra = [dataclasses.replace(c, STAGES=6) for c in cands if c.BLOCK_N + c.BLOCK_T <= 192]
                extra += [dataclasses.replace(top, SPLIT=min(S.MAX_SPLIT, K // 128, 2 * top.SPLIT))]
                extra = [c for c in dict.fromkeys(extra) if c not in cands]
                for cfg in cands + extra:
                    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                    S.launch_swapped(ops, out, precise, config=cfg)
                    torch.cuda.synchronize()
                    name = cfg.describe()
                    errors[name] = rel_error(p.checked(out).float(), p.reference)
                    ok = not torch.isnan(out).any().item() and errors[name] <= 1.5 * errors.get("cuBLAS", 2e-3) + 1e-4
                    if not ok:
                        sweep.fail(f"{p.shape} {recipe} {acc} {name}: error {errors[name]:.2e}")
                    fns[name] = (lambda cfg, out: lambda: S.launch_swapped(ops, out, precise, config=cfg))(cfg, out)
                errors["gluon"] = rel_error(p.checked(fns["gluon"]()).float(), p.reference)
                timed = bench.benchmark(fns, flops=p.flops, reps=20)
                base = timed["cuBLAS"].tflops if "cuBLAS" in timed else None
                swapped = [n for n in fns if n.startswith("swapped")]
                best = max(swapped, key=lambda n: timed[n].tflops)
                # scaled_mm back to back: "auto" (the swapped kernel) and the Gluon kernel
                api = {"scaled_mm swapped": lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, precise=precise),
                       "scaled_mm gluon": lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, precise=precise,
                                                            kernel="gluon")}
                if "cuBLAS" in fns:
                    api["cuBLAS"] = cublas
                api_timed = bench.api_benchmark(api, flops=p.flops, calls=50, rounds=5)
                plan = gemm.plan_of(p.a, p.b, p.scale_a, p.scale_b, precise=precise)
                assert plan.kernel == "swapped", plan.kernel
                chosen = plan.config
                for n in fns:
                    records.append(dict(shape=p.shape, M=M, K=K, N=N, recipe=recipe, accumulation=acc, contender=n,
                                        tflops=timed[n].tflops, median_us=timed[n].median_ms * 1e3,
                                        ratio=timed[n].tflops / base if base else None, rel_error=errors[n],
                                        best_swapped=n == best,
                                        candidate=any(n == c.describe() for c in cands) if n in swapped else None))
                for n, r in api_timed.items():
                    records.append(dict(shape=p.shape, M=M, K=K, N=N, recipe=recipe, accumulation=acc,
                                        contender="api " + n, median_us=r.median_us, host_us=r.host_us,
                                        chosen=chosen.describe() if n == "scaled_mm swapped" else None))
                cub_us = f"{timed['cuBLAS'].median_ms * 1e3:6.1f}" if base else "   -  "
                log(f"{p.shape:<17} {recipe:<5} {acc:<7} us: cuBLAS {cub_us} gluon {timed['gluon'].median_ms * 1e3:6.1f} "
                    f"swapped {timed[best].median_ms * 1e3:6.1f} ({best[9:60]}) | api us: "
                    + " ".join(f"{n.split()[-1]} {r.median_us:.1f}" for n, r in api_timed.items()))
                sweep.save()
                del p, fns
                torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    main()
