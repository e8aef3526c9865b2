"""Three consumer groups with the registers they need: the stacked kernel (192 x 128 tiles, three
warp groups of 64 x 128 and the producer's warp) for precise accumulation and for block-wise
scales, each group given 160 registers by ``gl.warp_specialize``.

ptxas compiles a warp-specialized kernel for ``maxnreg`` (64K over its 512 threads: 128), but each
partition's code after its ``setmaxnreg`` for the count that partition asks for: compiled for
sm_90a, the package's stacked kernel (workers at 128) spills 216 bytes with precise accumulation,
the same kernel with workers at 160 (so 168 for the default group, 24 for the producer, 512 in all)
spills nothing. This run measures what that tile buys against the paired kernel (128 x 128, the
package's precise and block-wise kernel) and cuBLAS, in the kernel harness, after checking both new
kernels against float64 and bit for bit against the paired kernel (same K order, same promotion).

    python3 tools/stacked_precise.py [compile]      # compile: ptxas's registers and spills only

Saves ``$OUT/stacked_precise.json`` (default /tmp/out).
"""
import json
import os
import sys
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ws_gluon import (STACKED_GROUPS, STACKED_WORKERS, _blockwise_consumer, _cooperative_consumer,
                                           allocate_outputs, allocate_ring, load_ring)


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_stacked160_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                            WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                            ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                            num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
    """``ws_gluon.gluon_stacked_kernel`` with 160 registers for each worker consumer group."""
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, STACKED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, STACKED_GROUPS)
    gl.warp_specialize([
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B, PRECISE, SPLIT, 0, STACKED_GROUPS, 4, PROMOTE)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B, PRECISE, SPLIT, 1, STACKED_GROUPS, 4, PROMOTE)),
        (_cooperative_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                 scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                 ROW_A, ROW_B, PRECISE, SPLIT, 2, STACKED_GROUPS, 4, PROMOTE)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     STACKED_GROUPS)),
    ], STACKED_WORKERS, [160, 160, 24])


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_blockwise3_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                            WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                            ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                            num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1, stride_sam=1, stride_sak=1,
                            stride_sbk=1, stride_sbn=1, ones_ptr=None):
    """``ws_gluon.gluon_blockwise_kernel`` with three consumer groups (192 x 128 tiles), 160
    registers for each worker group."""
    gl.static_assert(a_desc.block_type.shape[1] == 128, "a K step is one 128-wide block of the scales")
    gl.static_assert(b_desc.block_type.shape[0] == 128, "a tile is one weight block wide")
    a_bufs, b_bufs, ready, empty = allocate_ring(a_desc, b_desc, STAGES, STACKED_GROUPS)
    c_bufs = allocate_outputs(c_desc, b_desc, STACKED_GROUPS)
    gl.warp_specialize([
        (_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                               ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                               stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 0, STACKED_GROUPS, 4)),
        (_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                               ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                               stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 1, STACKED_GROUPS, 4)),
        (_blockwise_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                               ones_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, stride_sam,
                               stride_sak, stride_sbk, stride_sbn, GROUP_M, SPLIT, 2, STACKED_GROUPS, 4)),
        (load_ring, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                     STACKED_GROUPS)),
    ], STACKED_WORKERS, [160, 160, 24])


# the new kind, beside the package's: its groups and workers as the stacked kernel's
W.GLUON_KERNELS["blockwise3"] = gluon_blockwise3_kernel
W.GLUON_GROUPS["blockwise3"] = 3
W.GLUON_WORKERS["blockwise3"] = STACKED_WORKERS.value
W._OTHER_WARPS["blockwise3"] = 12
_check_kind = W.check_kind


def check_kind(config, ops):
    if config.kwargs["KIND"] == "blockwise3":
        if not W.is_block(ops):
            raise ValueError("blockwise3 takes block-wise scales only")
        return
    _check_kind(config, ops)


W.check_kind = check_kind
STACKED = {"stacked": gluon_stacked160_kernel}
G = W.make_gluon_config


def fit(c):
    return W.fit_gluon_config(c, 2)


PRECISE = [("paired", fit(c), None) for c in W.GLUON_PRECISE_CONFIGS] + [
    ("stacked160", fit(G("stacked", 192, 128, 128, 4, group_m=g, split=s)), STACKED)
    for g, s in ((8, False), (16, False), (16, True))]
BLOCK = [("paired", fit(c), None) for c in W.GLUON_BLOCK_CONFIGS] + [
    ("stacked160", fit(G("blockwise3", 192, 128, 128, 4, group_m=g, split=s)), None)
    for g, s in ((8, False), (16, False), (16, True))]


def compile_all():
    from fp8_tutorial.measure import compiled
    for label, cfg, kernels in PRECISE + BLOCK:
        kind = cfg.kwargs["KIND"]
        kernel = (kernels or W.GLUON_KERNELS)[kind]
        flag_sets = [dict(ROW_A=False, ROW_B=False, PRECISE=True)] if kind.startswith("blockwise") else [
            dict(ROW_A=False, ROW_B=False, PRECISE=True), dict(ROW_A=True, ROW_B=True, PRECISE=True)]
        for flags in flag_sets:
            k = compiled.compile_gluon_for(kernel, cfg, flags, maxnreg=W.gluon_maxnreg(cfg))
            r = compiled.ptxas_report(k)
            print(f"{label:<11} {W.describe_config(cfg):<70} row={flags['ROW_A']}: regs {r.registers} "
                  f"spills {r.spill_stores}/{r.spill_loads} smem {k.metadata.shared // 1024} KiB "
                  f"setmaxnreg {compiled.summary(k)['setmaxnreg_to']} {r.notes}", flush=True)


def run(ops, cfg, kernels, out, num_sms=None, plan=None):
    W.launch_gluon(ops, out, True, config=cfg, kernels=kernels, num_sms=num_sms, plan=plan)
    return out


def check(log):
    """Both new kernels against float64 and against the paired kernel's bits, outputs poisoned."""
    from fp8_tutorial.checks import rel_error
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure.contenders import make_problem
    bad = 0
    cases = [(1, 128, 128), (200, 1024, 1000), (777, 4096, 3000), (2048, 12288, 3072)]
    for M, K, N in cases:
        for recipe in ("tensor", "row", "block"):
            if recipe == "block" and N % 128:
                N2 = N // 128 * 128 or 128
            else:
                N2 = N
            p = make_problem(M, K, N2, recipe, device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            table = BLOCK if recipe == "block" else PRECISE
            base = next(c for lab, c, k in table if lab == "paired" and not c.kwargs["SPLIT"])
            ref_out = run(ops, base, None, torch.full((M, N2), float("nan"), dtype=torch.bfloat16, device="cuda"))
            ref_err = rel_error(ref_out.float(), p.reference)
            for label, cfg, kernels in table:
                if label == "paired":
                    continue
                for num_sms, plan in ((None, None), (3, None)) + (((None, (0, 3)),) if cfg.kwargs["SPLIT"] else ()):
                    out = torch.full((M, N2), float("nan"), dtype=torch.bfloat16, device="cuda")
                    try:
                        run(ops, cfg, kernels, out, num_sms, plan)
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 - reported and counted
                        log(f"FAIL {label} {M}x{K}x{N2} {recipe}: {type(e).__name__}: {str(e)[:300]}")
                        bad += 1
                        continue
                    err = rel_error(out.float(), p.reference)
                    same = bool(torch.equal(out, ref_out))
                    split = cfg.kwargs["SPLIT"] and (plan is not None or W.gluon_plan(cfg, M, N2, K, num_sms or 132)[1] > 1)
                    ok = not torch.isnan(out).any().item() and err <= max(2 * ref_err, 1e-2) and (same or split)
                    bad += not ok
                    log(f"{'ok  ' if ok else 'FAIL'} {label:<10} {W.describe_config(cfg)[:58]:<58} {M}x{K}x{N2} "
                        f"{recipe:<6} sms={num_sms} plan={plan} err {err:.2e} (paired {ref_err:.2e}) "
                        f"same bits: {same}")
    return bad


def measure(log, save, reps=20):
    from fp8_tutorial.checks import rel_error
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench
    from fp8_tutorial.measure.blockwise import DEEPSEEK_SHAPES
    from fp8_tutorial.measure.contenders import REGISTRY, SEED_SHAPES, make_problem
    rows = []
    cells = [(s, r) for s in SEED_SHAPES + [(8192, 8192, 8192)] for r in ("tensor", "row")]
    cells += [((M, K, N), "block") for N, K in DEEPSEEK_SHAPES for M in (128, 1024, 4096)]
    for (M, K, N), recipe in cells:
        p = make_problem(M, K, N, recipe, device="cuda", reference_rows=1024)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        base = "cuBLAS"
        fns = {base: REGISTRY[f"cublas/{recipe}/precise"].build(p)}
        for label, cfg, kernels in (BLOCK if recipe == "block" else PRECISE):
            if cfg.kwargs["SPLIT"] and W.gluon_plan(cfg, M, N, K, 132)[1] == 1:
                continue
            out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
            fns[f"{label}|{W.describe_config(cfg)}"] = (
                lambda cfg, kernels, out: lambda: run(ops, cfg, kernels, out))(cfg, kernels, out)
        errors = {}
        for name, fn in list(fns.items()):
            try:
                errors[name] = rel_error(p.checked(fn()).float(), p.reference)
            except Exception as e:  # noqa: BLE001
                log(f"{name} on {p.shape} {recipe}: {type(e).__name__}: {str(e)[:300]}")
                del fns[name]
        timed = bench.benchmark(fns, flops=p.flops, reps=reps)
        for name in fns:
            family, _, config = name.partition("|")
            rows.append(dict(shape=p.shape, recipe=recipe, family=family, config=config or family,
                             tflops=timed[name].tflops, ratio=timed[name].tflops / timed[base].tflops,
                             rel_error=errors[name]))
        best = {}
        for r in rows[-len(fns):]:
            best[r["family"]] = max(best.get(r["family"], 0), r["ratio"])
        log(f"{p.shape:<17} {recipe:<6} cuBLAS {timed[base].tflops:6.0f} TFLOP/s  "
            + "  ".join(f"{k} x{v:.3f}" for k, v in best.items() if k != base))
        save(rows)
        del p, fns
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    if "compile" in sys.argv:
        compile_all()
        sys.exit(0)
    out_dir = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out_dir, exist_ok=True)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)
    t = time.time()
    state = dict(environment=dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                                  triton=__import__("triton").__version__), failed_checks=None, records=[], log=lines)

    def save(rows):
        state["records"] = rows
        json.dump(state, open(os.path.join(out_dir, "stacked_precise.json"), "w"), indent=1)
    state["failed_checks"] = bad = check(log)
    log(f"checks: {bad} failed, {time.time() - t:.0f} s")
    save([])
    if bad == 0 or "anyway" in sys.argv:
        measure(log, save)
    log(f"done in {time.time() - t:.0f} s")
    save(state["records"])
