"""fp8_tutorial.kernels.tiled's minimal kernel: against float64 at many shapes, its input
checks, and its compilation for Hopper (sm_90a) without a GPU."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial import checks
from fp8_tutorial.kernels import tiled

# Odd shapes, primes, sizes under one tile and across several; larger ones only on a GPU.
SHAPES = [(1, 1, 1), (1, 16, 1), (7, 13, 5), (33, 100, 65), (97, 257, 131), (130, 300, 260),
          (256, 128, 129)]
if fp8.ON_GPU:
    SHAPES += [(512, 3072, 1536), (1000, 1000, 1000), (4097, 512, 257)]


def check(a, b, sa, sb, **kw):
    """minimal_scaled_mm's output, poisoned (NaN) before the kernel writes it, against float64
    of its inputs: an element the kernel leaves unwritten cannot pass."""
    empty = torch.empty

    def poisoned(*args, **kw):
        return checks.poison(empty(*args, **kw))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiled.torch, "empty", poisoned)  # the output the wrapper allocates
        out = tiled.minimal_scaled_mm(a, b, sa, sb, **kw)
    assert out.shape == (a.shape[0], b.shape[1]) and out.dtype == torch.bfloat16
    err = checks.rel_error(out, checks.reference_mm(a, b, sa, sb))
    assert err < checks.tolerance(torch.bfloat16, False), (tuple(a.shape), b.shape[1], kw, err)


@pytest.mark.parametrize("M,K,N", SHAPES)
def test_minimal_matches_float64(M, K, N, gen, device):
    a, b, sa, sb = checks.random_operands(M, K, N, "tensor", "tensor", gen, device)
    check(a, b, sa, sb)


@pytest.mark.parametrize("blocks", [dict(block_m=16, block_n=32, block_k=16),
                                    dict(block_m=64, block_n=16, block_k=32, num_warps=4, num_stages=2)])
def test_minimal_other_tiles(blocks, gen, device):
    a, b, sa, sb = checks.random_operands(97, 131, 75, "tensor", "tensor", gen, device)
    check(a, b, sa, sb, **blocks)


def test_minimal_checks_its_inputs(gen, device):
    a, b, sa, sb = checks.random_operands(8, 32, 16, "tensor", "tensor", gen, device)
    _, _, row_a, row_b = checks.random_operands(8, 32, 16, "row", "row", gen, device)
    cases = [
        ((a.float(), b, sa, sb), {}, TypeError, "float8_e4m3fn"),
        ((a, b.to(torch.float8_e5m2), sa, sb), {}, TypeError, "b must be torch.float8_e4m3fn"),
        ((a, b[:16], sa, sb), {}, ValueError, "a's columns must be b's rows"),
        ((a.t().contiguous().t(), b, sa, sb), {}, ValueError, "a must be row-major"),
        ((a, b.contiguous(), sa, sb), {}, ValueError, "b must be column-major"),
        ((a, b, row_a, sb), {}, ValueError, "scale_a must be one float32 element"),
        ((a, b, sa, row_b), {}, ValueError, "scale_b must be one float32 element"),
        ((a, b, sa.double(), sb), {}, ValueError, "scale_a must be one float32 element"),
        ((a, b, 1.0, sb), {}, TypeError, "scale_a must be a torch.Tensor"),
        ((a[:0], b, sa, sb), {}, ValueError, "non-empty"),
        ((a, b, sa, sb), dict(block_k=24), ValueError, "BLOCK_K must be a power of two"),
        ((a, b, sa, sb), dict(num_warps=3), ValueError, "num_warps"),
    ]
    if fp8.ON_GPU:
        cases.append(((a, b, sa.cpu(), sb), {}, ValueError, "scale_a is on cpu"))
    for args, kw, error, words in cases:
        with pytest.raises(error, match=words):
            tiled.minimal_scaled_mm(*args, **kw)


SCRIPT = textwrap.dedent("""
    import json
    import fp8_tutorial as fp8
    from fp8_tutorial.kernels import tiled
    from fp8_tutorial.measure import compiled

    assert fp8.MODE == "compile"
    k = compiled.compile_for(tiled.minimal_kernel, dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128),
                             num_warps=8, num_stages=3)
    ptxas = compiled.ptxas_report(k)
    print(json.dumps(dict(compiled.summary(k), spills=ptxas.spill_stores + ptxas.spill_loads)))
""")


def test_minimal_compiles_for_hopper():
    """The wrapper's default configuration, compiled for sm_90a as test_compile compiles the
    others: FP8 wgmma, cp.async loads, shared memory that fits, no spills."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["FP8_TUTORIAL_MODE"] = "compile"
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["wgmma"] > 0 and r["cp_async"] > 0 and r["tma"] == 0, r
    assert r["shared_kib"] <= 227 and r["spills"] == 0, r
