"""One launch per kernel for Nsight Compute (tools/ncu_kloop.sh runs it): 4608 x 12288 x 12288, per
tensor, fast accumulation, bf16 output. Three warm-up launches (compile, then steady clocks), then one
between cudaProfilerStart and cudaProfilerStop, which is all that ncu --profile-from-start off sees;
its error against float64 is printed last."""
import os
from _ncu import profile_once
from fp8_tutorial import checks, gemm
from fp8_tutorial import contenders as C

M, K, N = 4608, 12288, 12288
p = C.make_problem(M, K, N, "tensor", device="cuda", seed=0)
fixed = gemm.fixed_launch  # into one preallocated bf16 output, which it returns
VARIANTS = {
    "cublas": C.REGISTRY["cublas/tensor/fast"].build(p),
    "gluon_128x256": fixed(gemm.launch_gluon, p, config=gemm.GLUON_CONFIGS[0]),
    "pingpong_128x128": fixed(gemm.launch_gluon, p, config=gemm.GLUON_CONFIGS[3]),
    "tma_128x256": fixed(gemm.launch_tma, p, config=gemm.TMA_CONFIGS[0], host_descriptors=True),
}
v = os.environ.get("VARIANT")
if v not in VARIANTS:
    raise SystemExit(f"VARIANT must be one of {', '.join(VARIANTS)}, got {v!r}")
result = profile_once(VARIANTS[v])
print(v, "error", checks.rel_error(result, p.reference))
