"""The persistent TMA kernel with its tile loop warp-specialized.

``tl.range(..., warp_specialize=True)`` asks Triton to split the loop's work between warp groups:
a producer that issues the TMA loads of A and W into a ring of shared-memory buffers, and consumers
that wait for each buffer, issue the ``wgmma`` on it, hand it back and run the epilogue. On Hopper
(Triton 3.6) the compiler also cuts each tile's rows between two consumer groups and moves
registers from the producer to the consumers with ``setmaxnreg``. Chapter 07 shows how to tell from
the compiled code that this happened, and measures what it buys.

Only some forms of the loop come out of the compiler both specialized and right, on the H200 with
Triton 3.6 (chapter 07 measures each):

- 4 warps per program (the compiler adds the other two groups: 12 warps in all); with 8 the
  specialization is skipped without a word;
- descriptors built on the device, no ``flatten``, one TMA store of the whole tile;
- at most 4 pipeline stages: with 5 or more, results were wrong.

``ws_kernel`` fixes the second (device-side descriptors, no ``flatten``, the whole tile stored
at once); ``launch_ws`` refuses configurations that break the first or the third.
"""

import torch
import triton
import triton.language as tl

from .common import operand_sources
from .host import Launch, Operands, autotuned, epilogue_scales_only, launch, persistent_grid
from .tma import fit_tma_config, prune_tma, tma_args, tma_setup, tma_takes, tma_tiles


@triton.jit
def ws_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
    M, N, K, num_sms,
    stride_am, stride_bn, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROW_A: tl.constexpr, ROW_B: tl.constexpr, PRECISE: tl.constexpr,
):
    """C[M, N] = scale(A[M, K] @ W[N, K]^T): ``tma_tiles`` with one program per SM, its tile loop
    warp-specialized, device-side descriptors and the tile stored whole."""
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, True)
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    # PROGRAMS_PER_SM = 1, FLATTEN = False, EPILOGUE_HALVES = False, WARP_SPECIALIZE = True
    tma_tiles(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K, num_sms, BLOCK_M, BLOCK_N, BLOCK_K,
              GROUP_M, ROW_A, ROW_B, PRECISE, 1, False, False, True)


# ---- configurations, what it refuses, and its launcher ---------------------------------------------

def ws_config(bm, bn, bk, stages, group_m=8):
    """A configuration of ``ws_kernel``: always 4 warps (the compiler adds the other groups)."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=4, num_stages=stages)


# Warp specialization (chapter 07): forms that came out of Triton 3.6 specialized and right on the
# H200. Wrong there: 5 or more stages.
WS_CONFIGS = [ws_config(128, 256, 128, 3), ws_config(128, 256, 128, 3, group_m=16), ws_config(256, 128, 128, 3),
              ws_config(128, 128, 128, 4)]
WS_INTERPRETER_CONFIG = ws_config(32, 32, 32, 1, group_m=4)
WS_MAX_STAGES = 4
WS_KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}
_ws_tuned = autotuned(ws_kernel, WS_CONFIGS, [], prune=prune_tma)
TUNERS = {"ws": _ws_tuned}


def ws_refuses(config: triton.Config) -> str | None:
    """Why ``ws_kernel`` should not run with ``config``, or None: the forms that Triton 3.6 does not
    specialize, or specializes wrong, on the H200 (chapter 07)."""
    if not isinstance(config, triton.Config):
        return f"config must be a triton.Config, got {type(config).__name__}"
    if set(config.kwargs) != WS_KEYS:
        return f"a ws_kernel configuration has the keys {sorted(WS_KEYS)}, got {sorted(config.kwargs)}"
    if config.num_warps != 4:
        return (f"warp specialization needs num_warps=4 (the compiler adds a producer and a second consumer "
                f"group); with {config.num_warps} Triton 3.6 does not specialize the loop")
    if isinstance(config.num_stages, int) and config.num_stages > WS_MAX_STAGES:
        return (f"warp-specialized loops with more than {WS_MAX_STAGES} stages gave wrong results on the H200 "
                f"(Triton 3.6); got num_stages={config.num_stages}")
    return None


def ws_takes(ops: Operands, out: torch.Tensor) -> str | None:
    """Why ``ws_kernel`` cannot take these operands, or None: what the TMA kernel refuses, said of
    this kernel."""
    return epilogue_scales_only("ws")(ops, out) or tma_takes(ops, out)


def launch_ws(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
              num_sms: int | None = None) -> Launch:
    """Run ``ws_kernel`` into ``out``: autotuned over ``WS_CONFIGS`` on a GPU unless ``config``
    is given, which ``ws_refuses`` checks. Raises ValueError where TMA cannot take the operands."""
    why = ws_refuses(config) if config is not None else None
    if why:
        raise ValueError(why)
    num_sms = tma_setup(ops, out, num_sms, config)
    if config is not None:
        config = fit_tma_config(config, out.element_size())
    return launch(ws_kernel, _ws_tuned, WS_INTERPRETER_CONFIG, persistent_grid(ops.M, ops.N, num_sms),
                  tma_args(ops, out, num_sms), ops.flags(precise), config)
