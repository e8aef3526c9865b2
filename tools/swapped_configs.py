"""How far the swapped kernel's candidates are from the best of a wider search, block-wise, at M = 16
and 64 (on a Hopper GPU). With so few tokens the product streams the weight: what it can gain is
the memory's bandwidth it does not reach. Each cell times, in one run of the kernel harness,
cuBLAS block-wise, every one of ``swapped.candidates`` and every configuration of a wider grid
(BLOCK_N 32, 64 and 128; 3, 4, 6 and 8 stages; 4 and 8 warps; the candidates' pieces and one,
two and four times the most of them), each checked against float64 with its output poisoned first.

    python3 tools/swapped_configs.py

Saves ``results/swapped_configs_<gpu>.json`` after each cell: per configuration its time, whether
it is a candidate, and the weight's bytes over the time (GB/s).

On the H200 (``results/swapped_configs_h200.json``: 10 cells, 72 to 168 configurations each, 0
failed checks, scaled_mm's own first call checked on each) the best of the grid was at most 4.7%
faster than the best candidate (0 to 4.7%), so the candidates stay as they are. The best streamed
the weight at 1.1 to 2.8 TB/s: at 10 to 50 us a call, these problems are short for the memory.
"""
import dataclasses

import torch
import triton

import fp8_tutorial as fp8
from fp8_tutorial.checks import rel_error
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import host
from fp8_tutorial.kernels import swapped as S
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.blockwise import DEEPSEEK_SHAPES
from fp8_tutorial.measure.contenders import REGISTRY, make_problem

NAME = "swapped_configs"


def wider(M, N, K, cands):
    T = S.token_block(M)
    pieces = sorted({c.SPLIT for c in cands} | {min(S.MAX_SPLIT, K // 128, f * max(c.SPLIT for c in cands))
                                                for f in (1, 2, 4)} | {1})
    return [S.SwappedConfig(BN, T, 128, s, stages, warps)
            for BN in (32, 64, 128) for s in pieces for stages in (3, 4, 6, 8) for warps in (4, 8)]


def main():
    sweep = results.Sweep(NAME)
    log, records = sweep.log, sweep.records

    num_sms = host.sm_count(torch.device("cuda"))
    for M in (16, 64):
        for N, K in DEEPSEEK_SHAPES:
            if N % 128:
                continue
            p = make_problem(M, K, N, "block", device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            flags = S._flags(ops, True)
            cublas = REGISTRY["cublas/block/precise"].build(p)
            fns = {"cuBLAS": cublas}
            errors = {"cuBLAS": rel_error(p.checked(cublas()).float(), p.reference)}
            cands = S.candidates(M, N, K, num_sms, True)
            outs = {}

            def run(cfg):
                return S._run(ops, outs[cfg], cfg, flags)
            grid = list(dict.fromkeys(cands + wider(M, N, K, cands)))
            for cfg in grid:
                outs[cfg] = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            compiled = []
            for cfg in grid:  # a configuration Triton cannot build is logged and left out
                try:
                    run(cfg)
                    compiled.append(cfg)
                except Exception as e:
                    if isinstance(e, triton.runtime.errors.OutOfResources):
                        compiled.append(cfg)  # host.fitting's to leave out
                    else:
                        log(f"{p.shape} {cfg.describe()}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            grid = host.fitting(compiled, run)
            # scaled_mm's own first call (candidates, fitting, fastest), checked too
            auto = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device="cuda"))
            fp8.scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=auto)
            errors["auto"] = rel_error(p.checked(auto).float(), p.reference)
            if errors["auto"] > 1.5 * errors["cuBLAS"] + 1e-4:
                sweep.fail(f"{p.shape} scaled_mm: error {errors['auto']:.2e}")
            for cfg in grid:
                out = outs[cfg].fill_(float("nan"))
                run(cfg)
                torch.cuda.synchronize()
                name = cfg.describe()
                errors[name] = rel_error(p.checked(out).float(), p.reference)
                if torch.isnan(out).any().item() or errors[name] > 1.5 * errors["cuBLAS"] + 1e-4:
                    sweep.fail(f"{p.shape} {name}: error {errors[name]:.2e}")
                fns[name] = (lambda cfg: lambda: run(cfg))(cfg)
            timed = bench.benchmark(fns, flops=p.flops, reps=20)
            weight = N * K  # bytes of the FP8 weight, which a small M streams
            for n in fns:
                records.append(dict(shape=p.shape, M=M, K=K, N=N, contender=n, median_us=timed[n].median_ms * 1e3,
                                    tflops=timed[n].tflops, ratio=timed[n].tflops / timed["cuBLAS"].tflops,
                                    weight_gbs=weight / timed[n].median_ms / 1e6, rel_error=errors[n],
                                    candidate=any(n == c.describe() for c in cands)))
            best_c = max((c.describe() for c in cands), key=lambda n: timed[n].tflops)
            best = max((n for n in fns if n != "cuBLAS"), key=lambda n: timed[n].tflops)
            log(f"{p.shape:<17} cuBLAS {timed['cuBLAS'].median_ms * 1e3:6.1f} us | candidates' best "
                f"{timed[best_c].median_ms * 1e3:6.1f} ({timed[best_c].tflops / timed['cuBLAS'].tflops:.3f}x) | "
                f"all {len(fns) - 1}' best {timed[best].median_ms * 1e3:6.1f} "
                f"({timed[best].tflops / timed['cuBLAS'].tflops:.3f}x, {weight / timed[best].median_ms / 1e6:.0f} GB/s): "
                f"{best[9:]}")
            sweep.save()
            del p, fns, outs
            torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    main()
