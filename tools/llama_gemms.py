"""The GEMMs of chapter 12's prefill, per row with fast accumulation, against cuBLAS: every Gluon
configuration that ``scaled_mm`` times for them, a wider grid around them, and ``scaled_mm``'s own
choice (a Hopper GPU is needed).

The first H200 run of chapter 12's layers (``results/model_reduce_overhead_h200.json``, not in
the book) had the book's per-row layer at 0.98x the torch route's at M = 4096 and 16384 in prefill, the two layers alike but for
their GEMMs (and, then, the quantization). The GEMMs are the four projections of Llama-3-8B (N x
K: 6144 x 4096, 4096 x 4096, 28672 x 4096, 4096 x 14336) at M = 1024, 4096 and 16384. For each
cell, in one run of the kernel harness (``bench.benchmark``, interleaved, L2 flushed): cuBLAS
(``torch._scaled_mm``, per row, fast accumulation), ``scaled_mm``'s first call (its choice among
``ws_gluon.GLUON_CONFIGS``), each of those configurations, and a wider grid (``wider``); each
output poisoned first and checked against float64 on 512 of its rows.

    python3 tools/llama_gemms.py [M ...]          # default: 1024 4096 16384

Saves ``results/llama_gemms_<gpu>.json`` after each cell: per configuration its time and ratio to
cuBLAS, and whether ``scaled_mm`` times it (a candidate).

On the H200 (``results/llama_gemms_h200.json``, M = 16384 only, 0 failed checks): cuBLAS at 1468
to 1554 TFLOP/s; ``scaled_mm`` 0.962x (qkv_proj), 0.970x (o_proj), 0.981x (gate_up_proj) and
0.988x (down_proj), each within 1% of the best of 20 or 21 configurations (ping-pong 128 x 128
tiles on the first three, the stacked 192 x 128 on down_proj, its own choice there at 1.008x).
"""
import sys

import torch
import triton

import fp8_tutorial as fp8
from fp8_tutorial import gemm
from fp8_tutorial.checks import rel_error, tolerance
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.host import describe_config, sm_count
from fp8_tutorial.measure import bench, results
from fp8_tutorial.measure.contenders import REGISTRY, make_problem
from fp8_tutorial.measure.model import LLAMA3_8B

NAME = "llama_gemms"


def wider() -> list[triton.Config]:
    """Configurations beside GLUON_CONFIGS: the cooperative 128 x 256 tiles with other depths,
    groupings and stores, ping-pong with other depths, groupings and stores, the stacked 192-row
    tiles with another depth. ``timed_configs`` leaves out those that do not fit."""
    grid = [W.make_gluon_config("cooperative", 128, 256, 128, stages, group_m=g, warps=8, store_n=s)
            for stages in (3, 4) for g in (8, 16, 32) for s in (64, 128)]
    grid += [W.make_gluon_config("pingpong", 128, 128, 128, stages, group_m=g, store_n=s)
             for stages in (5, 6, 7) for g in (8, 16) for s in (32, 64)]
    grid += [W.make_gluon_config("stacked", 192, 128, 128, stages, group_m=g) for stages in (4, 5) for g in (8, 16)]
    return grid


def key(cfg: triton.Config) -> tuple:
    return (tuple(sorted(cfg.kwargs.items())), cfg.num_warps, cfg.num_stages)


def timed_configs(configs, M: int, N: int, K: int, num_sms: int) -> dict:
    """``configs`` as ``ws_gluon.choose_gluon_config`` times them, by ``key``: cut to the stages
    that fit, those that still do not left out, and a SPLIT one only where its plan cuts tiles."""
    fitted = [W.fit_gluon_config(c, 2) for c in configs]
    return {key(c): c for c in fitted if W.gluon_refuses(c, 2) is None
            and (not c.kwargs["SPLIT"] or W.gluon_plan(c, M, N, K, num_sms)[1] > 1)}


def checked_configs(sweep, p, ops, configs: dict, candidates: dict, precise: bool, out):
    """Each of ``configs`` (by ``key``) launched into ``out``, poisoned first, and checked against
    ``p``'s float64 reference: the timed callables of those that build and pass, by label, and for
    each label whether it is one of ``candidates``. One that does not build is logged and left out;
    one that fails its check is counted as a failed check of ``sweep``."""
    fns, names = {}, {}
    for k, cfg in configs.items():
        label = describe_config(cfg)
        fp8.poison(out)
        try:
            W.launch_gluon(ops, out, precise, config=cfg)
        except Exception as e:  # a configuration that does not build is logged and left out
            sweep.log(f"{p.shape} {label}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            continue
        err = rel_error(p.checked(out).float(), p.reference)
        if not err < tolerance(torch.bfloat16, precise):
            sweep.fail(f"{p.shape} {label}: rel. error {err:.2e}")
            continue
        names[label] = k in candidates
        fns[label] = lambda cfg=cfg: W.launch_gluon(ops, out, precise, config=cfg)
    return fns, names


def main():
    Ms = [int(a) for a in sys.argv[1:]] or [1024, 4096, 16384]
    sweep = results.Sweep(NAME)
    log, records = sweep.log, sweep.records
    num_sms = sm_count(torch.device("cuda"))
    for M in Ms:
        for name, (N, K) in LLAMA3_8B.projections().items():
            p = make_problem(M, K, N, "row", device="cuda", reference_rows=512)
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            candidates = timed_configs(W.GLUON_CONFIGS, M, N, K, num_sms)
            configs = {**candidates, **timed_configs(wider(), M, N, K, num_sms)}
            fns = {"cuBLAS": REGISTRY["cublas/row/fast"].build(p)}
            # scaled_mm's first call chooses (timing its candidates), checked like the others
            auto = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device="cuda"))
            fp8.scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=auto)
            err = rel_error(p.checked(auto).float(), p.reference)
            if not err < tolerance(torch.bfloat16, False):
                sweep.fail(f"{p.shape} scaled_mm: rel. error {err:.2e}")
            plan = gemm.plan_of(p.a, p.b, p.scale_a, p.scale_b, out=auto)
            chosen = plan.kernel + (f" {describe_config(plan.config)}" if plan.config is not None else "")
            fns["scaled_mm"] = lambda p=p, auto=auto: fp8.scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=auto)
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")  # one output for all: they run in turn
            checked, names = checked_configs(sweep, p, ops, configs, candidates, False, out)
            fns.update(checked)
            timed = bench.benchmark(fns, flops=p.flops, reps=20)
            base = timed["cuBLAS"].median_ms
            for n, r in timed.items():
                records.append(dict(projection=name, shape=p.shape, M=M, N=N, K=K, config=n, tflops=r.tflops,
                                    median_us=r.median_ms * 1e3, ratio=base / r.median_ms,
                                    candidate=names.get(n, False), chosen=n == "scaled_mm"))
            ranked = sorted(((base / timed[n].median_ms, n) for n in names), reverse=True)
            best_candidate = max((ratio for ratio, n in ranked if names[n]), default=float("nan"))
            log(f"{name:>20} {p.shape:>18}: cuBLAS {timed['cuBLAS'].tflops:6.0f} TFLOP/s; scaled_mm "
                f"{base / timed['scaled_mm'].median_ms:.3f}x ({chosen}); best candidate {best_candidate:.3f}x; "
                f"best of {len(ranked)}: {ranked[0][0]:.3f}x {ranked[0][1]}")
            sweep.save()
            del fns, p, ops, out, auto
            torch.cuda.empty_cache()
    sweep.done()


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/llama_gemms.py needs a GPU")
    main()
