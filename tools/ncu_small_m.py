"""One launch per schedule for Nsight Compute (tools/ncu_small_m.sh runs it): 512 x 12288 x 3072
(or x 4224), per tensor, fast, 128x128x128 tiles through pointers, 4 warps, 6 stages; the kernel runs
twice (compile, then profiled), and its error against float64 is printed."""
import os
import torch
from fp8_tutorial import gemm, checks
from fp8_tutorial.kernels import persistent

v = os.environ["VARIANT"]
if v not in ("persistent", "whole132", "split4", "streamk132", "streamk132lanes"):
    raise SystemExit(f"VARIANT must be persistent, whole132, split4, streamk132 or streamk132lanes, got {v!r}")
N = 4224 if v == "whole132" else 3072
gen = torch.Generator(); gen.manual_seed(0)
a, b, sa, sb = checks.random_operands(512, 12288, N, "tensor", "tensor", gen, device="cuda")
ops = gemm.check_operands(a, b, sa, sb)
out = torch.empty(512, N, dtype=torch.bfloat16, device="cuda")
for _ in range(2):
    if v in ("persistent", "whole132"):
        persistent.launch_persistent(ops, out, False, config=persistent.persistent_config(128, 128, 128, 4, 6, 1))
    elif v == "split4":
        persistent.launch_split(ops, out, False, config=persistent.split_config(128, 128, 128, 4, 6), plan=(0, 4))
    else:  # streamk132, streamk132lanes
        persistent.launch_streamk(ops, out, False, config=persistent.streamk_config(128, 128, 128, 4, 6), lanes=v.endswith("lanes"))
    torch.cuda.synchronize()
print(v, "error", checks.rel_error(out, checks.reference_mm(a, b, sa, sb)))
