"""One launch of the block-wise kernel for Nsight Compute (tools/ncu_blockwise.sh runs it) on
4096 x 16384 x 7168, block-wise scales, A's row-major: the package's kernel that loads the scales
(``gluon_blockwise_kernel``, VARIANT=real) or
``tools/blockwise_cost.py``'s variant without scale loads whose multiply-add by a value a row stays
(VARIANT=ffma), to see where the consumer warps stall in each (``tools/blockwise_cost.py``: the
package's kernel ran at 0.78 to 0.85 of the variant's speed on an H100). Three warm-up launches,
then one between cudaProfilerStart and Stop."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _ncu import profile_once  # noqa: E402
from blockwise_cost import LOADS, _variant, ones_in_registers  # noqa: E402

from fp8_tutorial.gemm import check_operands  # noqa: E402
from fp8_tutorial.kernels import ws_gluon as W  # noqa: E402
from fp8_tutorial.measure.contenders import make_problem  # noqa: E402

M, K, N = 4096, 16384, 7168
v = os.environ.get("VARIANT", "real")
if v not in ("real", "ffma"):
    raise SystemExit(f"VARIANT must be real or ffma, got {v!r}")
p = make_problem(M, K, N, "block", device="cuda", seed=0, reference_rows=64)
ops = check_operands(p.a, p.b, p.scale_a.contiguous(), p.scale_b)  # A's scales row-major, as profiled
out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
kernels = LOADS if v == "real" else _variant(block_scales=ones_in_registers)
cfg = W.GLUON_BLOCK_CONFIGS[0]
profile_once(lambda: W.launch_gluon(ops, out, True, config=cfg, kernels=kernels))
print(v, "done")
