"""Where the host's time goes in one ``scaled_mm`` call after the first (a GPU is needed).

Per problem, the host's microseconds per call of the whole call and of each step on its path,
each timed as ``measure.bench.api_benchmark`` times the host (a batch of calls queued behind a GPU
spin, the median over rounds, the steps interleaved round by round), beside ``torch._scaled_mm``:

    python3 tools/host_cost.py [MxKxN:recipe ...]
"""
import sys

import torch

import fp8_tutorial as fp8
from fp8_tutorial import gemm
from fp8_tutorial.kernels import host
from fp8_tutorial.measure import contenders as C
from fp8_tutorial.measure.bench import api_benchmark

PROBLEMS = ["4096x4096x4096:row", "1x7168x2112:row", "128x7168x2112:row", "64x7168x4096:row",
            "16x14336x4096:row", "4608x12288x3072:tensor"]


def steps(p) -> dict:
    """The call and each step of its path, as zero-argument callables."""
    a, b, sa, sb = p.a, p.b, p.scale_a, p.scale_b
    bf16 = torch.bfloat16
    fp8.scaled_mm(a, b, sa, sb)  # the first call: chooses, times, compiles, keeps the plan
    key = gemm._signature(a, b, sa, sb, None, bf16, "auto", False)
    plan = gemm.PLANS[key]
    out = torch.empty(p.M, p.N, dtype=bf16, device=a.device)
    from torch._C._dynamo.guards import TensorGuards
    guards = TensorGuards(a, b, sa, sb, dynamic_dims_sizes=None, dynamic_dims_strides=None)
    small = {(a.shape, b.shape, bf16, "auto", False): plan}
    found = {
        "torch._scaled_mm": lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=bf16,
                                                     use_fast_accum=True),
        "scaled_mm": lambda: fp8.scaled_mm(a, b, sa, sb),
        "scaled_mm(out=)": lambda: fp8.scaled_mm(a, b, sa, sb, out=out),
        "  _scaled_mm": lambda: gemm._scaled_mm(a, b, sa, sb, bf16, "auto", False, None),
        "  _signature": lambda: gemm._signature(a, b, sa, sb, None, bf16, "auto", False),
        "  PLANS.get": lambda: gemm.PLANS.get(key),
        "  torch.empty((M, N))": lambda: torch.empty((p.M, p.N), dtype=bf16, device=a.device),
        "  torch.empty(M, N)": lambda: torch.empty(p.M, p.N, dtype=bf16, device=a.device),
        "  plan.launch": lambda: plan.launch(a, b, sa, sb, out),
        "  current stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "  workspace": lambda: host.workspace(a.device, 1 << 20, 1),
        # a candidate for a cheaper key: Dynamo's tensor guards (C++) and the alignments
        "  (TensorGuards.check)": lambda: guards.check(a, b, sa, sb),
        "  (alignments)": lambda: (a.data_ptr() | b.data_ptr() | sa.data_ptr() | sb.data_ptr()) & 15,
        "  (shapes key)": lambda: small.get((a.shape, b.shape, bf16, "auto", False)),
    }
    return plan, found


def main(argv):
    rows = {}
    kernels = {}
    for spec in argv or PROBLEMS:
        shape, recipe = spec.split(":")
        M, K, N = map(int, shape.split("x"))
        p = C.make_problem(M, K, N, recipe, device="cuda")
        plan, found = steps(p)
        split = getattr(plan.config, "kwargs", {}).get("SPLIT", False)
        kernels[spec] = f"{plan.kernel}{', split' if split else ''}"
        got = api_benchmark(found, calls=100, rounds=15)
        rows[spec] = {name: r.host_us for name, r in got.items()}
        print(spec, kernels[spec], {n: round(v, 2) for n, v in rows[spec].items()}, flush=True)
    names = list(next(iter(rows.values())))
    print("\nhost us per call (median of 15 rounds of 100 calls, behind a GPU spin)\n")
    print("| step | " + " | ".join(f"{s} ({kernels[s]})" for s in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for n in names:
        print(f"| {n.strip()}{' (a step)' if n.startswith('  ') else ''} | "
              + " | ".join(f"{rows[s][n]:.2f}" for s in rows) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
