"""Chapter 10's experiment: ways to hide the promotion of precise accumulation, each timed against
cuBLAS precise on the reference cells and checked against float64, in one run on a Hopper GPU.

Built from the package's Gluon functions (``ws_gluon``), rebound with one part changed
(``kernels.ablation._rebound``):
- TURNS (1, 2): the consumer groups issue each K step's wgmma in turn, through mbarriers kept
  after the ring's ``empty`` ones; 1 passes the turn once the wgmma is issued, 2 once its sum is
  complete (so that a group's add runs under the next group's wgmma);
- HALVES: each group sums its columns in two halves, promoting one while the other is computed;
- the stacked kernel as first written, its worker groups at 128 registers (``stacked_precise``);
- ``gluon_folded_kernel``: three consumer groups and no producer warp; group 0 loads the ring
  STAGES - 1 steps ahead as it consumes (``load_next``). With TURNS=2 it would deadlock (group 0
  waits for a stage the other groups free only after their turn, which group 0 passes after the
  load), so it is timed without.

Saves ``results/precise_variants_<gpu>.json``; ``compile`` only compiles each variant for sm_90a
and prints ptxas's registers, spills and remarks. The recorded run had the paired kernel's groups
at 168 registers and its waiting K loop; the package's paired kernel now runs ``overlapped_tile``
with 232 and 248 (``ws_gluon.PAIRED_REGISTERS``), so a run now times its variants on those.

    python3 tools/precise_variants.py [compile]
"""
import os
import sys
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, warpgroup_mma, warpgroup_mma_init,
                                                             warpgroup_mma_wait)

from triton.experimental.gluon.language.nvidia.hopper import tma

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ablation import _rebound
from stacked_precise import STACKED128  # tools/, beside this script


@gluon.jit
def allocate_ring_turns(a_desc, b_desc, STAGES: gl.constexpr, GROUPS: gl.constexpr):
    """``allocate_ring`` with GROUPS more ``empty`` barriers, of count 1: the groups' turns."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * GROUPS] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES + GROUPS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=GROUPS)
    for i in gl.static_range(GROUPS):
        mbarrier.init(empty.index(STAGES + i), count=1)
    return a_bufs, b_bufs, ready, empty


@gluon.jit
def wait_turn(empty, it, GROUP: gl.constexpr, STAGES: gl.constexpr):
    if GROUP == 0:  # the first turn is group 0's without waiting
        mbarrier.wait(empty.index(STAGES), (it & 1) ^ 1)
    else:
        mbarrier.wait(empty.index(STAGES + GROUP), it & 1)


@gluon.jit
def pass_turn(empty, GROUP: gl.constexpr, GROUPS: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.arrive(empty.index(STAGES + (GROUP + 1) % GROUPS))


@gluon.jit
def variant_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, PRECISE: gl.constexpr, GROUP: gl.constexpr,
                 GROUPS: gl.constexpr, handoff=None, HANDOFF: gl.constexpr = False, PROMOTE: gl.constexpr = 1):
    if not PRECISE:
        return W.mma_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, PRECISE, GROUP, GROUPS, handoff, HANDOFF,
                          PROMOTE)
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    if HALVES:
        ROWS: gl.constexpr = acc.type.shape[0]
        HALF: gl.constexpr = acc.type.shape[1] // 2
        half: gl.constexpr = W.accumulator_layout(HALF, 4)
        t0 = gl.zeros((ROWS, HALF), gl.float32, half)
        t1 = warpgroup_mma_init(gl.zeros((ROWS, HALF), gl.float32, half))  # carried in flight
        tot0 = gl.zeros((ROWS, HALF), gl.float32, half)
        tot1 = gl.zeros((ROWS, HALF), gl.float32, half)
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            if TURNS:
                wait_turn(empty, it, GROUP, STAGES)
            a = a_bufs.index(s * GROUPS + GROUP)
            w = b_bufs.index(s)
            t0 = warpgroup_mma(a, w.slice(0, HALF).permute((1, 0)), t0, use_acc=False, is_async=True)
            t1 = warpgroup_mma_wait(1, deps=(t1,))  # the last step's second half is done
            tot1 += t1
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            t1 = warpgroup_mma(a, w.slice(HALF, HALF).permute((1, 0)), t1, use_acc=False, is_async=True)
            if TURNS:
                pass_turn(empty, GROUP, GROUPS, STAGES)
            t0, _, _ = warpgroup_mma_wait(1, deps=(t0, a, w))
            tot0 += t0
            it += 1
        tot1 += warpgroup_mma_wait(0, deps=(t1,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        both = gl.reshape(gl.permute(gl.join(tot0, tot1), [0, 2, 1]), [ROWS, 2 * HALF])
        return gl.convert_layout(both, acc.type.layout), it
    else:
        total = gl.zeros_like(acc)
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            if TURNS > 0:
                wait_turn(empty, it, GROUP, STAGES)
            a = a_bufs.index(s * GROUPS + GROUP)
            b = b_bufs.index(s).permute((1, 0))
            acc = warpgroup_mma(a, b, acc, use_acc=kk % PROMOTE > 0, is_async=True)
            if TURNS == 1:
                pass_turn(empty, GROUP, GROUPS, STAGES)
            acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a, b_bufs.index(s)))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            if (kk % PROMOTE == PROMOTE - 1) | (kk == k_steps - 1):
                acc = warpgroup_mma_wait(0, deps=(acc,))
                if TURNS == 2:  # the next group's wgmma start once this one's have finished
                    pass_turn(empty, GROUP, GROUPS, STAGES)
                total += acc
            elif TURNS == 2:
                pass_turn(empty, GROUP, GROUPS, STAGES)
            it += 1
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        return total, it


@gluon.jit
def start_cursor(units, WHOLE_TILES, PIECES, rest, k_steps, M, N, SUB_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 GROUP_M: gl.constexpr, GROUPS: gl.constexpr):
    """Where the loads start: unit 0's first K step (its tile's origin), position 0."""
    tile, _, k_first, k_last = W.work_unit(0, WHOLE_TILES, PIECES, rest, k_steps)
    off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
    return 0, k_first, k_last, off_m, off_n, 0


@gluon.jit
def load_next(a_desc, b_desc, a_bufs, b_bufs, ready, empty, lu, lk, lk_last, l_m, l_n, lp, units, WHOLE_TILES,
              PIECES, rest, k_steps, M, N, GROUP_M: gl.constexpr, GROUPS: gl.constexpr):
    """Load the next K step of the program's work (unit lu, step lk, ring position lp) once its
    stage is free, and move the cursor on; past the last unit, nothing."""
    SUB_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    if lu < units:
        s = lp % STAGES
        mbarrier.wait(empty.index(s), ((lp // STAGES) & 1) ^ 1)
        W.load_stage(a_desc, b_desc, a_bufs, b_bufs, ready.index(s), s, l_m, l_n, lk * BLOCK_K, GROUPS)
        lp += 1
        lk += 1
        if lk == lk_last:
            lu += 1
            tile, _, k_first, k_last = W.work_unit(lu, WHOLE_TILES, PIECES, rest, k_steps)
            lk = k_first
            lk_last = k_last
            l_m, l_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
    return lu, lk, lk_last, l_m, l_n, lp


@gluon.jit
def _loading_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                      partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M: gl.constexpr,
                      ROW_A: gl.constexpr, ROW_B: gl.constexpr, SPLIT: gl.constexpr, GROUPS: gl.constexpr,
                      PROMOTE: gl.constexpr):
    """Consumer group 0, which also loads the ring: STAGES - 1 K steps ahead, one load per K step
    it consumes (the stage the step before used, once every group has handed it back)."""
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    acc = gl.zeros((SUB_M, BLOCK_N), gl.float32, W.accumulator_layout(BLOCK_N, 4))
    units, rest, k_steps = W.program_work(M, N, K, WHOLE_TILES, PIECES, GROUPS * SUB_M, BLOCK_N,
                                          a_desc.block_type.shape[1])
    lu, lk, lk_last, l_m, l_n, lp = start_cursor(units, WHOLE_TILES, PIECES, rest, k_steps, M, N, SUB_M, BLOCK_N,
                                                 GROUP_M, GROUPS)
    for _p in gl.static_range(STAGES - 1):
        lu, lk, lk_last, l_m, l_n, lp = load_next(a_desc, b_desc, a_bufs, b_bufs, ready, empty, lu, lk, lk_last, l_m,
                                                  l_n, lp, units, WHOLE_TILES, PIECES, rest, k_steps, M, N, GROUP_M,
                                                  GROUPS)
    it = 0
    for u in range(units):
        tile, piece, k_first, k_last = W.work_unit(u, WHOLE_TILES, PIECES, rest, k_steps)
        off_m, off_n = W.unit_origin(tile, M, N, SUB_M, BLOCK_N, GROUP_M, 0, GROUPS)
        sa, sb = W.tile_scales(acc, scale_a_ptr, scale_b_ptr, off_m, off_n, M, N, ROW_A, ROW_B, True)
        total = gl.zeros_like(acc)
        for kk in range(k_last - k_first):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a = a_bufs.index(s * GROUPS)
            b = b_bufs.index(s).permute((1, 0))
            if TURNS > 0:
                wait_turn(empty, it, 0, STAGES)
            acc = warpgroup_mma(a, b, acc, use_acc=kk % PROMOTE > 0, is_async=True)
            if TURNS == 1:
                pass_turn(empty, 0, GROUPS, STAGES)
            acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a, b_bufs.index(s)))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            lu, lk, lk_last, l_m, l_n, lp = load_next(a_desc, b_desc, a_bufs, b_bufs, ready, empty, lu, lk, lk_last,
                                                      l_m, l_n, lp, units, WHOLE_TILES, PIECES, rest, k_steps, M, N,
                                                      GROUP_M, GROUPS)
            if (kk % PROMOTE == PROMOTE - 1) | (kk == k_last - k_first - 1):
                acc = warpgroup_mma_wait(0, deps=(acc,))
                if TURNS == 2:
                    pass_turn(empty, 0, GROUPS, STAGES)
                total += acc
            elif TURNS == 2:
                pass_turn(empty, 0, GROUPS, STAGES)
            it += 1
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        W.finish_unit(total, sa, sb, c_desc, c_bufs, partials_ptr, arrivals_ptr, scale_a_ptr, scale_b_ptr, off_m,
                      off_n, M, N, tile, piece, WHOLE_TILES, PIECES, ROW_A, ROW_B, SPLIT, 0, GROUPS, 0, 4)
    tma.store_wait(0)


FOLDED_WORKERS = gl.constexpr([4, 4])


@gluon.jit(do_not_specialize=["WHOLE_TILES", "PIECES"])
def gluon_folded_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K,
                        WHOLE_TILES, PIECES, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROW_A: gl.constexpr,
                        ROW_B: gl.constexpr, PRECISE: gl.constexpr, SPLIT: gl.constexpr,
                        num_warps: gl.constexpr, PROMOTE: gl.constexpr = 1):
    """The stacked kernel (three consumer groups of 64 rows) without a producer warp: group 0 loads
    the ring as it goes, and 12 warps have 168 registers each. Precise only."""
    gl.static_assert(PRECISE, "the folded kernel is precise only")
    a_bufs, b_bufs, ready, empty = allocate_ring_turns(a_desc, b_desc, STAGES, 3)
    c_bufs = W.allocate_outputs(c_desc, b_desc, 3)
    gl.warp_specialize([
        (_loading_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr, scale_b_ptr,
                             partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M, ROW_A, ROW_B, SPLIT,
                             3, PROMOTE)),
        (_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                   scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                   ROW_A, ROW_B, PRECISE, SPLIT, 1, 3, 4, PROMOTE)),
        (_consumer, (a_desc, c_desc, a_bufs, b_bufs, ready, empty, c_bufs, scale_a_ptr,
                                   scale_b_ptr, partials_ptr, arrivals_ptr, M, N, K, WHOLE_TILES, PIECES, GROUP_M,
                                   ROW_A, ROW_B, PRECISE, SPLIT, 2, 3, 4, PROMOTE)),
    ], FOLDED_WORKERS, [168, 168])


_consumer = W._cooperative_consumer
TURNS = gl.constexpr(0)
W.GLUON_KERNELS["folded"] = gluon_folded_kernel
W.GLUON_GROUPS["folded"] = 3
W.GLUON_WORKERS["folded"] = [4, 4]
W._OTHER_WARPS["folded"] = 8


def variant(kind: str, turns: bool, halves: bool):
    """Kernels by KIND (for launch_gluon's ``kernels``) with variant_tile as the K loop."""
    here = dict(globals(), TURNS=gl.constexpr(int(turns)), HALVES=gl.constexpr(halves))
    tile = _rebound(variant_tile, here)
    names = dict(vars(W), mma_tile=tile, allocate_ring=allocate_ring_turns)
    names["_cooperative_consumer"] = _rebound(W._cooperative_consumer, names)
    if kind == "folded":
        here = dict(here, _consumer=names["_cooperative_consumer"])
        here["_loading_consumer"] = _rebound(_loading_consumer, here)
        return {kind: _rebound(gluon_folded_kernel, here)}
    return {kind: _rebound(W.GLUON_KERNELS[kind], names)}


def contenders():
    """(family, configuration, kernels) of what is timed; a family's split configuration is timed
    only where its plan cuts tiles, and the table keeps the better of the two."""
    G = W.make_gluon_config
    out = [("cooperative (one partition of 8 warps)", W.make_gluon_config("cooperative", 128, 128, 128, 6, warps=8),
            None),
           # the stacked kernel as first written (the package's gives its groups 160: tools/stacked_precise.py)
           ("stacked (3 groups, 128 registers)", W.fit_gluon_config(G("stacked", 192, 128, 128, 4, group_m=16), 2),
            STACKED128)]
    for family, kind, turns, halves, splits in [("paired", "paired", 0, False, True),
                                                ("paired, turns at issue", "paired", 1, False, False),
                                                ("paired, turns after the sum", "paired", 2, False, True),
                                                ("paired, halves", "paired", 0, True, False),
                                                ("folded", "folded", 0, False, True)]:
        rows = 128 if kind == "paired" else 192
        stages = 5 if kind == "paired" else 4
        for split in (False, True) if splits else (False,):
            c = W.fit_gluon_config(G(kind, rows, 128, 128, stages, group_m=16, split=split), 2)
            package = kind == "paired" and not turns and not halves  # the package's own kernel
            out.append((family, c, None if package else variant(kind, turns, halves)))
    return out


def compile_all():
    from fp8_tutorial.measure import compiled
    for label, cfg, kernels in contenders():
        label = label[:20] + (" split" if cfg.kwargs["SPLIT"] else "")
        kind = cfg.kwargs["KIND"]
        kernel = (kernels or W.GLUON_KERNELS)[kind]
        for flags in (dict(ROW_A=False, ROW_B=False, PRECISE=True), dict(ROW_A=True, ROW_B=True, PRECISE=True)):
            k = compiled.compile_gluon_for(kernel, cfg, flags, maxnreg=W.gluon_maxnreg(cfg))
            r = compiled.ptxas_report(k)
            print(f"{label:<22} row={flags['ROW_A']}: regs {r.registers} spills {r.spill_stores}/{r.spill_loads} "
                  f"smem {k.metadata.shared} {r.notes}", flush=True)


def measure(shapes, recipes=("tensor", "row"), reps=20):
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench
    from fp8_tutorial.measure.accuracy import rel_error
    from fp8_tutorial.measure.contenders import make_problem
    rows = []
    for M, K, N in shapes:
        for recipe in recipes:
            p = make_problem(M, K, N, recipe, device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            fns = {"cuBLAS precise": lambda: torch._scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out_dtype=torch.bfloat16,
                                                              use_fast_accum=False),
                   "cuBLAS fast": lambda: torch._scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out_dtype=torch.bfloat16,
                                                           use_fast_accum=True)}
            for family, cfg, kernels in contenders():
                if cfg.kwargs["SPLIT"] and W.gluon_plan(cfg, M, N, K, 132)[1] == 1:
                    continue
                label = family + (" split" if cfg.kwargs["SPLIT"] else "")
                out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
                fns[label] = (lambda cfg, kernels, out: lambda: (
                    W.launch_gluon(ops, out, True, config=cfg, kernels=kernels), out)[1])(cfg, kernels, out)
            errors = {}
            for k, fn in fns.items():
                try:
                    out = fn()
                    errors[k] = rel_error(out, p.reference)
                except Exception as e:  # noqa: BLE001 - a variant that fails is reported, not fatal
                    print(f"{k}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            fns = {k: v for k, v in fns.items() if k in errors}
            timed = bench.benchmark(fns, flops=p.flops, reps=reps)
            base = timed["cuBLAS precise"].tflops
            for k in fns:
                rows.append(dict(shape=p.shape, recipe=recipe, variant=k.removesuffix(" split"),
                                 split=k.endswith(" split"), tflops=timed[k].tflops, ratio=timed[k].tflops / base,
                                 rel_error=errors[k]))
            print(p.shape, recipe, "  ".join(f"{k}={timed[k].tflops / base:.3f}({errors[k]:.1e})" for k in fns),
                  flush=True)
    return rows


if __name__ == "__main__":
    if "compile" in sys.argv:
        compile_all()
        sys.exit(0)
    out = os.environ.get("OUT", "/tmp/out")
    t = time.time()
    from fp8_tutorial.measure import contenders as C
    shapes = C.SEED_SHAPES + [(8192, 8192, 8192)]
    rows = measure(shapes)
    from fp8_tutorial.measure import accuracy, results
    print("saved to", results.save(accuracy.VARIANTS, rows))
    print(f"done in {time.time() - t:.0f} s")
