"""Three consumer groups with the registers they need: the stacked kernel (192 x 128 tiles, three
warp groups of 64 x 128 and the producer's warp) for precise accumulation, and the same tile for
block-wise scales.

ptxas compiles a warp-specialized kernel for ``maxnreg`` (64K over its 512 threads: 128), but each
partition's code after its ``setmaxnreg`` for the count that partition asks for. Compiled for
sm_90a with precise accumulation, the stacked kernel as first written (workers asking 128) spills
216 bytes per tensor and 272 per row (stores; ``compile`` prints them); the package's (``ws_gluon.gluon_stacked_kernel``: workers at 160, so 168 for the default
group and 24 for the producer, all 512 a lane has) spills nothing. This run measures what its tile
buys against the paired kernel (128 x 128) and cuBLAS precise, in the kernel harness, after checking
it, and ``gluon_blockwise3_kernel`` (the block-wise kernel on the same tile), against float64 and
bit for bit against the paired kernels (same K order, same promotion).

``results/precise_stacked_h200.json``'s block-wise cells were measured with the block-wise tile
of then, which waited for each K block's ``wgmma`` before promoting it. ``ws_gluon.blockwise_tile``
now keeps two accumulators in flight (192 registers a group, more than this tile's 160), so a run
now measures a different, spilling kernel (``tools/overlap_blockwise.py`` measured the change).

    python3 tools/stacked_precise.py [compile]      # compile: ptxas's registers and spills only
    python3 tools/stacked_precise.py turned         # also the paired kernel with two sums in turn,
                                                    # saved apart (results/precise_turned_<gpu>.json)
    python3 tools/stacked_precise.py overlap        # also the paired kernel with its earlier, waiting
                                                    # K loop, saved apart (results/precise_waiting_<gpu>.json;
                                                    # results/precise_overlap_<gpu>.json is the run made
                                                    # before the package took the loop, labelled as then)
    python3 tools/stacked_precise.py block          # the block-wise cells alone, unchecked, saved
                                                    # apart (results/precise_stacked_block_<gpu>.json)

Saves ``results/precise_stacked_<gpu>.json``: ``records`` in the form of ``precise_variants``'s
(one per cell and configuration, ``accuracy.variants_table`` summarizes them) and ``block_records``.
The recorded run's block-wise part stopped after 9 of its 15 cells (N x K of 24576 x 1536, 32768 x
512 and 7168 x 16384): the call it ran in had run out of time. The turned run (all 18 precise
cells, checks passed): 0.938x cuBLAS precise by the geometric mean against the paired kernel's
0.926x, but the best of all three variants per cell (0.968x) is no better than the package's best
of paired and stacked (0.966x): not kept.

The overlap run (``results/precise_overlap_h200.json``, 2026-12-04; all 18 precise cells, 0
failed checks, the same bits as the paired kernel unsplit), made before the package took the
loop: the paired kernel with the K loop now ``ws_gluon.overlapped_tile``, which keeps an
accumulator in flight across the loop's back edge (ptxas serializes nothing), ran at 0.974x
cuBLAS precise by the geometric mean (0.941x per tensor, 1.008x per row; 0.80 to 1.04x) against
the paired kernel's 0.930x in the same run (its records' "paired"), faster on 17 of the 18 cells;
the best per cell of paired, stacked and overlapped, 0.981x, against 0.967x without it; the
overlapped one the best on 11 of 18. The package's paired kernel now runs it; ``overlap`` on the
command line times the waiting loop beside it ("paired, waiting").
"""
import sys
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.kernels.ablation import _rebound
from fp8_tutorial.kernels.ws_gluon import (STACKED_GROUPS, STACKED_WORKERS, _blockwise_consumer, allocate_outputs,
                                           allocate_ring, load_ring)


def asking(kernel, registers: str, wanted: str, names: dict | None = None):
    """A copy of the package's Gluon ``kernel`` whose partitions ask for the registers ``wanted``
    where it asks for ``registers`` (the list ``gl.warp_specialize`` takes, as it stands in the
    source: a literal, which ``ablation._rebound`` cannot replace); its other global names from
    ``ws_gluon``, or ``names``."""
    copy = _rebound(kernel, dict(vars(W), **(names or {})))
    old, new = f"], {registers})", f"], {wanted})"
    if copy.src.count(old) != 1:
        raise ValueError(f"{kernel.fn.__name__} does not end its gl.warp_specialize with {old!r}")
    copy._unsafe_update_src(copy.src.replace(old, new))
    return copy


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


@gluon.jit
def turned_step(a_bufs, b_bufs, ready, empty, cur, prev, total, it, kk, GROUP: gl.constexpr, GROUPS: gl.constexpr):
    """Ring position ``it`` (K step ``kk`` of a tile) into ``cur`` while step kk - 1's sum, in
    ``prev``, is promoted: its ``wgmma`` is done once ``warpgroup_mma_wait(1)`` returns, and its
    stage goes back to the producer (at a tile's first step prev holds zeros, no stage to free)."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    a = a_bufs.index(s * GROUPS + GROUP)
    cur = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), cur, use_acc=False, is_async=True)
    cur, prev, _, _ = warpgroup_mma_wait(1, deps=(cur, prev, a, b_bufs.index(s)))
    total += prev
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
    return cur, gl.zeros_like(prev), total


@gluon.jit
def turned_tile(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                handoff, HANDOFF: gl.constexpr, PROMOTE: gl.constexpr):
    """``ws_gluon.promoted_tile`` with two tensor-core sums in turn, as ``tools/overlapped_precise.py``
    has them: step k's ``wgmma`` runs while step k - 1's sum is added into ``total``, so a group's
    tensor-core work does not drain at each promotion. Two steps a turn, both waited for at its end
    (no accumulator in flight across the loop's back edge: ptxas would serialize, C7514); an odd
    last step alone. The same sums in the same order as ``promoted_tile`` (PROMOTE is 1)."""
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    acc0 = gl.zeros_like(acc)  # the even steps' sums
    acc1 = gl.zeros_like(acc)  # the odd steps'
    total = gl.zeros_like(acc)
    for kk in range(0, k_steps - 1, 2):
        acc0, acc1, total = turned_step(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it + kk, kk, GROUP,
                                        GROUPS)
        acc1, acc0, total = turned_step(a_bufs, b_bufs, ready, empty, acc1, acc0, total, it + kk + 1, kk + 1,
                                        GROUP, GROUPS)
        acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
    if k_steps % 2 == 1:  # the odd last step: its sum moves to acc1, where a turn leaves the last
        acc0, acc1, total = turned_step(a_bufs, b_bufs, ready, empty, acc0, acc1, total, it + k_steps - 1,
                                        k_steps - 1, GROUP, GROUPS)
        acc1 = warpgroup_mma_wait(0, deps=(acc0,))
    total += acc1  # the tile's last step
    it += k_steps
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
    if HANDOFF:
        mbarrier.arrive(handoff)
    return total, it


def _waiting() -> dict:
    """The paired kernel with ``ws_gluon.promoted_tile``'s waiting loop (each step's ``wgmma``
    waited for before its add), the loop it had before ``ws_gluon.overlapped_tile``, though at
    the package's registers of now (``PAIRED_REGISTERS``: 232 and 248, where it had 168):
    promoted_tile takes the overlapped loop for the paired kernel's two groups, and here it is
    told of none."""
    names = dict(vars(W), promoted_tile=_rebound(W.promoted_tile, dict(vars(W), PAIRED_GROUPS=gl.constexpr(0))))
    names["mma_tile"] = _rebound(W.mma_tile, names)
    names["_cooperative_consumer"] = _rebound(W._cooperative_consumer, names)
    return {"paired": _rebound(W.gluon_paired_kernel, names)}


def _turned() -> dict:
    """The paired kernel with ``turned_tile`` for its precise K loop (its worker group at 232
    registers, ``ws_gluon.PAIRED_REGISTERS``, the default one at 248: room for three 64 x 128
    accumulators a group)."""
    names = dict(vars(W), promoted_tile=turned_tile)
    names["mma_tile"] = _rebound(W.mma_tile, names)
    names["_cooperative_consumer"] = _rebound(W._cooperative_consumer, names)
    return {"paired": _rebound(W.gluon_paired_kernel, names)}


def register_blockwise3():
    """Make ``blockwise3`` a kind ``ws_gluon.launch_gluon`` takes (its groups and workers the
    stacked kernel's), for this run only: ``tools/precise_variants.py`` imports this module
    without it."""
    W.GLUON_KERNELS["blockwise3"] = gluon_blockwise3_kernel
    W.GLUON_GROUPS["blockwise3"] = 3
    W.GLUON_WORKERS["blockwise3"] = STACKED_WORKERS.value
    W._OTHER_WARPS["blockwise3"] = 12
    package_check = W.check_kind

    def check_kind(config, ops):
        if config.kwargs["KIND"] == "blockwise3":
            if not W.is_block(ops):
                raise ValueError("blockwise3 takes block-wise scales only")
            return
        package_check(config, ops)
    W.check_kind = check_kind


# the stacked kernel as first written: 128 registers for each worker group (precise accumulation spills)
STACKED128 = {"stacked": asking(W.gluon_stacked_kernel, "STACKED_WORKERS, [160, 160, 24]",
                                "STACKED_WORKERS, [128, 128, 24]")}
PAIRED, STACKED, SPILLING = "paired", "stacked, 160 registers a group", "stacked, 128 registers a group"
G = W.make_gluon_config


def fit(c):
    return W.fit_gluon_config(c, 2)


PRECISE = [(PAIRED if c.kwargs["KIND"] == "paired" else STACKED, fit(c), None) for c in W.GLUON_PRECISE_CONFIGS] + [
    (SPILLING, fit(G("stacked", 192, 128, 128, 4, group_m=g)), STACKED128) for g in (8, 16)]
# with ``turned`` on the command line (not in the recorded run): the paired kernel, two sums in turn
TURNED = [("paired, two sums in turn", fit(G("paired", 128, 128, 128, 5, group_m=g)), _turned()) for g in (8, 16)]
# with ``overlap`` on the command line: the paired kernel with the waiting K loop it had before
# ws_gluon.overlapped_tile (the recorded run, made before, labels it "paired" and the package's of
# now "paired, overlapped")
OVERLAP = [("paired, waiting", fit(G("paired", 128, 128, 128, 5, group_m=g, split=sp)), _waiting())
           for g, sp in ((8, False), (16, False), (16, True))]


def extra():
    """The variants the command line adds to the precise ones."""
    return (TURNED if "turned" in sys.argv else []) + (OVERLAP if "overlap" in sys.argv else [])
BLOCK = [(PAIRED, fit(c), None) for c in W.GLUON_BLOCK_CONFIGS] + [
    ("stacked", fit(G("blockwise3", 192, 128, 128, 4, group_m=g, split=s)), None)
    for g, s in ((8, False), (16, False), (16, True))]


def compile_all():
    from fp8_tutorial.measure import compiled
    register_blockwise3()
    for label, cfg, kernels in PRECISE + TURNED + OVERLAP + BLOCK:
        kind = cfg.kwargs["KIND"]
        kernel = (kernels or W.GLUON_KERNELS)[kind]
        flag_sets = [dict(ROW_A=False, ROW_B=False, PRECISE=True)] if kind.startswith("blockwise") else [
            dict(ROW_A=False, ROW_B=False, PRECISE=True), dict(ROW_A=True, ROW_B=True, PRECISE=True)]
        for flags in flag_sets:
            k = compiled.compile_gluon_for(kernel, cfg, flags, maxnreg=W.gluon_maxnreg(cfg))
            r = compiled.ptxas_report(k)
            print(f"{label:<30} {W.describe_config(cfg):<70} row={flags['ROW_A']}: regs {r.registers} "
                  f"spills {r.spill_stores}/{r.spill_loads} smem {k.metadata.shared // 1024} KiB "
                  f"setmaxnreg {compiled.summary(k)['setmaxnreg_to']} {r.notes}", flush=True)


def run(ops, cfg, kernels, out, num_sms=None, plan=None):
    W.launch_gluon(ops, out, True, config=cfg, kernels=kernels, num_sms=num_sms, plan=plan)
    return out


def check(log):
    """The stacked kernel (precise) and the block-wise one on its tile, against float64 and against
    the paired kernels' bits (unsplit: the same sums in the same order), outputs poisoned, with
    all SMs, with 3 (programs walk many tiles) and with a split plan forced. Returns the failures."""
    from fp8_tutorial.checks import rel_error
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure.contenders import make_problem
    bad = 0
    for M, K, N in [(1, 256, 256), (200, 1024, 1000), (777, 4096, 3000), (2048, 12288, 3072)]:
        for recipe in ("tensor", "row") if "overlap" in sys.argv else ("tensor", "row", "block"):
            N2 = max(128, N // 128 * 128) if recipe == "block" else N  # block-wise: N a multiple of 128
            p = make_problem(M, K, N2, recipe, device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            table = BLOCK if recipe == "block" else PRECISE + extra()
            base = next(c for label, c, _ in table if label == PAIRED and not c.kwargs["SPLIT"])
            paired = run(ops, base, None, torch.full((M, N2), float("nan"), dtype=torch.bfloat16, device="cuda"))
            paired_error = rel_error(paired.float(), p.reference)
            for label, cfg, kernels in table:
                if label == PAIRED:
                    continue
                forced = ((None, (0, 3)),) if cfg.kwargs["SPLIT"] and K >= 384 else ()
                for num_sms, plan in ((None, None), (3, None)) + forced:
                    out = torch.full((M, N2), float("nan"), dtype=torch.bfloat16, device="cuda")
                    try:
                        run(ops, cfg, kernels, out, num_sms, plan)
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 - reported and counted
                        log(f"FAIL {label} {M}x{K}x{N2} {recipe}: {type(e).__name__}: {str(e)[:300]}")
                        bad += 1
                        continue
                    err = rel_error(out.float(), p.reference)
                    same = bool(torch.equal(out, paired))
                    split = plan is not None or (cfg.kwargs["SPLIT"]
                                                 and W.gluon_plan(cfg, M, N2, K, num_sms or 132)[1] > 1)
                    # unsplit, the paired kernel's bits; split, its error (the recorded run: equal)
                    ok = not torch.isnan(out).any().item() and err <= 2 * paired_error and (same or split)
                    bad += not ok
                    log(f"{'ok  ' if ok else 'FAIL'} {label[:20]:<20} {W.describe_config(cfg)[:58]:<58} "
                        f"{M}x{K}x{N2} {recipe:<6} sms={num_sms} plan={plan} err {err:.2e} (paired {paired_error:.2e}) "
                        f"same bits: {same}")
    return bad


def measure(log, save, reps=20, precise=True):
    """Every configuration on the reference cells (precise) and on DeepSeek-V3's projections at M =
    128, 1024 and 4096 (block-wise), interleaved with cuBLAS in the kernel harness; ``save`` gets
    the records after each cell."""
    from fp8_tutorial.checks import rel_error
    from fp8_tutorial.gemm import check_operands
    from fp8_tutorial.measure import bench
    from fp8_tutorial.measure.blockwise import DEEPSEEK_SHAPES
    from fp8_tutorial.measure.contenders import REGISTRY, SEED_SHAPES, make_problem
    records, block_records = [], []
    cells = [(s, r) for s in SEED_SHAPES + [(8192, 8192, 8192)] for r in ("tensor", "row")] if precise else []
    # block-wise needs N a multiple of 128 (2112 is not)
    cells += [((M, K, N), "block") for N, K in DEEPSEEK_SHAPES if N % 128 == 0 for M in (128, 1024, 4096)]
    for (M, K, N), recipe in cells:
        p = make_problem(M, K, N, recipe, device="cuda", reference_rows=1024)
        ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
        base = "cuBLAS precise"
        fns = {base: REGISTRY[f"cublas/{recipe}/precise"].build(p)}
        for label, cfg, kernels in (BLOCK if recipe == "block" else
                                    PRECISE + extra()):
            if cfg.kwargs["SPLIT"] and W.gluon_plan(cfg, M, N, K, 132)[1] == 1:
                continue  # its plan cuts no tile: the unsplit configuration
            out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
            fns[f"{label}|{W.describe_config(cfg)}"] = (
                lambda cfg, kernels, out: lambda: run(ops, cfg, kernels, out))(cfg, kernels, out)
        errors = {}
        for name, fn in list(fns.items()):
            try:
                errors[name] = rel_error(p.checked(fn()).float(), p.reference)
            except Exception as e:  # noqa: BLE001 - reported, left out
                log(f"{name} on {p.shape} {recipe}: {type(e).__name__}: {str(e)[:300]}")
                del fns[name]
        timed = bench.benchmark(fns, flops=p.flops, reps=reps)
        rows = []
        for name in fns:
            variant, _, config = name.partition("|")
            rows.append(dict(shape=p.shape, recipe=recipe, variant=variant, config=config or variant,
                             split=" split tail" in config, tflops=timed[name].tflops,
                             ratio=timed[name].tflops / timed[base].tflops, rel_error=errors[name]))
        (block_records if recipe == "block" else records).extend(rows)
        best = {}
        for r in rows:
            best[r["variant"]] = max(best.get(r["variant"], 0), r["ratio"])
        log(f"{p.shape:<17} {recipe:<6} cuBLAS {timed[base].tflops:6.0f} TFLOP/s  "
            + "  ".join(f"{k} x{v:.3f}" for k, v in best.items() if k != base))
        save(records, block_records)
        del p, fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    if "compile" in sys.argv:
        compile_all()
        sys.exit(0)
    from fp8_tutorial.measure import results
    t = time.time()
    lines = []

    def log(line):
        print(line, flush=True)
        lines.append(line)

    register_blockwise3()
    block_only = "block" in sys.argv
    name = ("precise_stacked_block" if block_only else "precise_turned" if "turned" in sys.argv
            else "precise_waiting" if "overlap" in sys.argv else "precise_stacked")

    def save(records, block_records):
        return results.save(name, records, block_records=block_records, failed_checks=bad, log=lines)
    bad = None if block_only else check(log)  # None: not checked
    log(f"checks: {bad} failed, {time.time() - t:.0f} s")
    if not bad:
        measure(log, save, precise=not block_only)
    print("saved to", save([], []) if bad else results.path(name, results.gpu_slug()), f"in {time.time() - t:.0f} s")
