"""One launch per kernel for Nsight Compute (tools/ncu_kloop.sh and tools/ncu_row.sh run it), fast
accumulation, bf16 output, on one of two cells (CELL):
  kloop  4608 x 12288 x 12288 per tensor: chapter 07's long K loop
  row    4608 x 3072 x 12288 per row: where cuBLAS runs the Gluon kernels' 128 x 128 tile, in clusters
Three warm-up launches (compile, then steady clocks), then one between cudaProfilerStart and
cudaProfilerStop, which is all that ncu --profile-from-start off sees; its error against float64 is
printed last."""
import os
from _ncu import profile_once
from fp8_tutorial import checks
from fp8_tutorial.kernels import tma, ws_gluon
from fp8_tutorial.measure import contenders as C

CELLS = {"kloop": (4608, 12288, 12288, "tensor"), "row": (4608, 3072, 12288, "row")}
cell = os.environ.get("CELL", "kloop")
if cell not in CELLS:
    raise SystemExit(f"CELL must be one of {', '.join(CELLS)}, got {cell!r}")
M, K, N, recipe = CELLS[cell]
p = C.make_problem(M, K, N, recipe, device="cuda", seed=0)
fixed = C.fixed_launch  # into one preallocated bf16 output, which it returns
VARIANTS = {
    "cublas": lambda: C.REGISTRY[f"cublas/{recipe}/fast"].build(p),
    "gluon_128x256": lambda: fixed(ws_gluon.launch_gluon, p,
                                   config=ws_gluon.gluon_config(KIND="cooperative", BLOCK_N=256, num_stages=3)),
    "gluon_128x128": lambda: fixed(ws_gluon.launch_gluon, p,
                                   config=ws_gluon.gluon_config(KIND="cooperative", BLOCK_N=128, SPLIT=False)),
    "pingpong_128x128": lambda: fixed(ws_gluon.launch_gluon, p, config=ws_gluon.gluon_config(KIND="pingpong", GROUP_M=16)),
    "stacked_192x128": lambda: fixed(ws_gluon.launch_gluon, p, config=ws_gluon.gluon_config(KIND="stacked", GROUP_M=16)),
    "tma_128x256": lambda: fixed(tma.launch_tma, p, config=tma.TMA_CONFIGS[0], host_descriptors=True),
}
v = os.environ.get("VARIANT")
if v not in VARIANTS:
    raise SystemExit(f"VARIANT must be one of {', '.join(VARIANTS)}, got {v!r}")
result = profile_once(VARIANTS[v]())
print(cell, v, "error", checks.rel_error(result, p.reference))
