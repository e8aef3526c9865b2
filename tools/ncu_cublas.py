"""What cuBLAS runs on each cell of the scoreboard, for Nsight Compute (tools/ncu_cublas.sh runs it):
the eight seed shapes and 8192 x 8192 x 8192, each per tensor then per row, fast accumulation, bf16
output, in that order. For each: three warm-up calls, then one between cudaProfilerStart and
cudaProfilerStop, which is all that ncu --profile-from-start off sees; the cells and their errors
against float64 are printed last."""
from _ncu import profile_once
from fp8_tutorial import checks
from fp8_tutorial.measure import contenders as C

CELLS = [(shape, recipe) for shape in C.SEED_SHAPES + [(8192, 8192, 8192)] for recipe in ("tensor", "row")]

for (M, K, N), recipe in CELLS:
    p = C.make_problem(M, K, N, recipe, device="cuda", seed=0)
    out = profile_once(C.REGISTRY[f"cublas/{recipe}/fast"].build(p))
    print(C.shape_name(M, K, N), recipe, "error", checks.rel_error(out, p.reference))
