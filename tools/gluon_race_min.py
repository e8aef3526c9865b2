"""The smallest Gluon kernels that show (or not) racecheck's hazards in ``gluon_ws_kernel``.

How Triton 3.6 lowers ``gl.warp_specialize`` (ConvertWarpSpecializeToLLVM.cpp): the worker warps never
run the kernel body; at entry they go to a "switch loop": ``barrier.sync 1`` (every thread of the CTA),
read a one-byte state per warp from the end of shared memory, run their partition (or, padding warps,
pass two more barrier 1s), pass barrier 1 again, loop. The default warps write the states (one
``st.shared.b32`` for four worker warps) before the first barrier 1, and the exit state (3) before the
last, at the kernel's return. Captured kernel arguments and pure values are rematerialized, not stored.

compute-sanitizer 2025.3.1 (H200, driver 580) found 220 hazards in gluon_ws_kernel, every one on those
four state bytes: RAW between the default warps' state stores and the workers' state loads, which
barrier 1 orders (bar.sync orders shared memory among its participating threads, here all of them).
The kernels with such hazards, gluon_ws_kernel and ws-mbarrier (whose other hazards, of 502 in a
first run and 5 in a second, are on its buffer, ordered by an mbarrier; results/sanitize/README.md), are those whose default warps also pass ``bar.sync 0, N`` (N their
threads, not the CTA's), which Triton adds for gl.thread_barrier() and where its barrier analysis asks
(between the inits of an mbarrier array, before mbarrier.invalidate); in both, the state stores after
such a barrier are reported and those before it are not. The ws-bar0 ... asm-part2 variants test that
(racecheck then loses barrier 1's ordering for warps that passed a barrier the others did not: a tool
artefact, not a race), ws-race that racecheck reports a real one. The variants, by the question each
answers:

  ws-idle         warp_specialize, a worker that does nothing: is the state protocol alone enough?
  ws-store        (a) each partition stores to global memory, nothing else (pointer captures elided)
  ws-capture      ws-store with a loaded value captured: the capture path through shared memory
  ws-mbarrier     (b) a worker writes a shared buffer and arrives on an mbarrier; the default waits, reads
  single-mbarrier (c) the same buffer and mbarrier in one partition, without warp_specialize
  ws-tma          a worker TMA-loads a tile, its bytes counted in on an mbarrier; the default reads it
  asm-bar0        no Gluon shared memory: threads trade words of a static array across barrier.sync 0
  asm-bar1        the same across barrier.sync 1, the switch loop's barrier: does racecheck see it?
  ws-bar0         ws-idle, the default warps passing bar.sync 0, 128 before warp_specialize (no mbarrier)
  ws-bar0-late    the same barrier inside the default partition, before the exit state only
  ws-init         mbarrier.init by the default warps before warp_specialize, used by the worker only
  ws-init-fence   ws-init with fence_async_shared() after the init
  ws-init2        ws-init with two barriers: Triton's bar.sync 0, 128 between the inits (gluon_ws_kernel's entry)
  ws-race         a genuine race: the worker writes a buffer, the default reads it, nothing between
  asm-part0       asm-bar1 with 8 warps, warps 0-3 first passing bar.sync 0, 128 alone: no Gluon at all
  asm-part2       the same with bar.sync 2, 128: barrier 0 in particular, or any barrier of some warps?

On a Hopper GPU each variant launches once and checks its output (ws-race: the half not read in the
race); under racecheck, run one variant per process (tools/sanitize.sh does). ``--compile-only``
compiles them for sm_90a without a GPU and counts, in the PTX, the shared accesses and barriers;
``--sass`` prints the SASS with the offsets racecheck names.

    python3 tools/gluon_race_min.py [--variant ws-store ...] [--compile-only [--ptx] [--sass]]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

BLOCK = 128  # int32 elements each variant moves: one per thread of the 4-warp default partition
TILE = (16, 32)  # ws-tma's int32 tile (2 KiB, rows of 128 bytes)
MAXNREG = 128  # as in Triton's Gluon tutorial: without it, setmaxnreg plans for 256 registers a thread


@gluon.jit
def _store_lanes(out_ptr, base, value, WARPS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    offs = gl.arange(0, 32 * WARPS, layout=layout)
    gl.store(out_ptr + base + offs, value + offs)


@gluon.jit
def _idle():
    pass


@gluon.jit
def ws_idle_kernel(out_ptr, num_warps: gl.constexpr):
    gl.warp_specialize([(_store_lanes, (out_ptr, 0, 1000, num_warps)), (_idle, ())], [1], [24])


@gluon.jit
def ws_store_kernel(out_ptr, num_warps: gl.constexpr):
    gl.warp_specialize([(_store_lanes, (out_ptr, 0, 1000, num_warps)),
                        (_store_lanes, (out_ptr, 32 * num_warps, 2000, 1))], [1], [24])


@gluon.jit
def ws_capture_kernel(out_ptr, in_ptr, num_warps: gl.constexpr):
    value = gl.load(in_ptr)  # not pure: the compiler cannot recompute it in the worker, so it is stored
    gl.warp_specialize([(_store_lanes, (out_ptr, 0, 1000, num_warps)),
                        (_store_lanes, (out_ptr, 32 * num_warps, value, 1))], [1], [24])


@gluon.jit
def _fill(buf, bar, WARPS: gl.constexpr):
    n: gl.constexpr = buf.type.shape[0]
    layout: gl.constexpr = gl.BlockedLayout([n // (32 * WARPS)], [32], [WARPS], [0])
    buf.store(gl.arange(0, n, layout=layout) * 3 + 7)
    # mbarrier.arrive is issued by one thread: the barrier orders the other threads' stores before it
    gl.thread_barrier()
    mbarrier.arrive(bar)


@gluon.jit
def _drain(out_ptr, buf, bar, WARPS: gl.constexpr):
    n: gl.constexpr = buf.type.shape[0]
    mbarrier.wait(bar, 0)
    # another thread-to-element mapping than _fill's: each thread reads what others wrote
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    offs = gl.arange(0, n, layout=layout)
    gl.store(out_ptr + offs, buf.load(layout))


@gluon.jit
def ws_mbarrier_kernel(out_ptr, N: gl.constexpr, num_warps: gl.constexpr):
    buf = gl.allocate_shared_memory(gl.int32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    gl.warp_specialize([(_drain, (out_ptr, buf, bar, num_warps)), (_fill, (buf, bar, 1))], [1], [24])
    mbarrier.invalidate(bar)


@gluon.jit
def single_mbarrier_kernel(out_ptr, N: gl.constexpr, num_warps: gl.constexpr):
    # Here the compiler's own barrier analysis adds bar.sync 0 between the store and the load of the
    # buffer (Triton 3.6: three in all, _fill's thread_barrier one of them), which it cannot do
    # between two partitions: --compile-only counts them.
    buf = gl.allocate_shared_memory(gl.int32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    _fill(buf, bar, num_warps)
    _drain(out_ptr, buf, bar, num_warps)
    mbarrier.invalidate(bar)


@gluon.jit
def _tma_load(in_desc, buf, bar):
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(in_desc, [0, 0], bar, buf)


@gluon.jit
def _tma_drain(out_ptr, buf, bar, WARPS: gl.constexpr):
    R: gl.constexpr = buf.type.shape[0]
    C: gl.constexpr = buf.type.shape[1]
    mbarrier.wait(bar, 0)
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WARPS, 1], [1, 0])
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, layout))[:, None]
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, layout))[None, :]
    gl.store(out_ptr + rows * C + cols, buf.load(layout) + 1)


@gluon.jit
def ws_tma_kernel(in_desc, out_ptr, num_warps: gl.constexpr):
    buf = gl.allocate_shared_memory(in_desc.dtype, in_desc.block_type.shape, in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()  # the barrier's initialization, seen by the TMA unit (the async proxy)
    gl.warp_specialize([(_tma_drain, (out_ptr, buf, bar, num_warps)), (_tma_load, (in_desc, buf, bar))],
                       [1], [24])
    mbarrier.invalidate(bar)


# The barrier alone, without Gluon's shared memory or warp_specialize: each thread writes its word of
# a static shared array, syncs on barrier BAR (all the CTA's threads), reads its neighbour warp's word.
# The accesses are inline assembly, so the compiler adds no barrier of its own. Racecheck on
# asm-bar1 but not on asm-bar0 would mean it does not order accesses across named barriers, as the
# switch loop of every warp-specialized kernel uses them (the hazards are then false positives).
_BARRIER_ASM = """{
.shared .align 4 .b32 race_min_buf[128];
.reg .u32 a;
mov.u32 a, race_min_buf;
mad.lo.u32 a, $1, 4, a;
st.shared.b32 [a], $2;
barrier.sync BAR;
mov.u32 a, race_min_buf;
mad.lo.u32 a, $3, 4, a;
ld.shared.b32 $0, [a];
}"""
_ASM_BAR0 = gl.constexpr(_BARRIER_ASM.replace("BAR", "0"))  # constexpr: a jit function may read it
_ASM_BAR1 = gl.constexpr(_BARRIER_ASM.replace("BAR", "1"))


@gluon.jit
def asm_barrier_kernel(out_ptr, BAR: gl.constexpr, num_warps: gl.constexpr):
    gl.static_assert(num_warps == 4, "one word of the 128-word array per thread")
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    tid = gl.arange(0, 128, layout=layout)  # element i lives in thread i
    args = [tid, tid * 3 + 7, (tid + 32) % 128]
    if BAR == 0:
        got = gl.inline_asm_elementwise(_ASM_BAR0, "=r,r,r,r", args, dtype=gl.int32, is_pure=False, pack=1)
    else:
        got = gl.inline_asm_elementwise(_ASM_BAR1, "=r,r,r,r", args, dtype=gl.int32, is_pure=False, pack=1)
    gl.store(out_ptr + tid, got)


# --- The variants that test what the first GPU run suggested (racecheck 2025.3.1, H200): every hazard
# of gluon_ws_kernel is on the warp states (the last 4 bytes of its shared memory), and the kernels with
# hazards on them are those whose default warps run a barrier the worker warps do not: Triton's
# `bar.sync 0, N` (N the default partition's threads), from gl.thread_barrier() or from its own
# barrier analysis (between the inits of an mbarrier array, before mbarrier.invalidate, ...).


@gluon.jit
def ws_bar0_kernel(out_ptr, num_warps: gl.constexpr):
    # ws-idle, the default warps first passing barrier 0 alone (bar.sync 0, 128) while the worker warps
    # wait at barrier 1: the gluon kernel's entry without its mbarriers
    gl.thread_barrier()
    gl.warp_specialize([(_store_lanes, (out_ptr, 0, 1000, num_warps)), (_idle, ())], [1], [24])


@gluon.jit
def _barrier_then_store(out_ptr, base, value, WARPS: gl.constexpr):
    gl.thread_barrier()  # in the default partition: bar.sync 0, 128
    _store_lanes(out_ptr, base, value, WARPS)


@gluon.jit
def ws_bar0_late_kernel(out_ptr, num_warps: gl.constexpr):
    # the same barrier inside the default partition, after the workers started and before the exit
    # state is written (where ws-mbarrier's mbarrier.invalidate gets one)
    gl.warp_specialize([(_barrier_then_store, (out_ptr, 0, 1000, num_warps)), (_idle, ())], [1], [24])


@gluon.jit
def _arrive_wait_store(out_ptr, bars, base, value):
    # one warp arrives on and waits for each barrier that the default warps initialized (count 1: its
    # own arrival completes phase 0), then stores
    NBARS: gl.constexpr = bars.type.shape[0]
    for i in gl.static_range(NBARS):
        mbarrier.arrive(bars.index(i))
        mbarrier.wait(bars.index(i), 0)
    _store_lanes(out_ptr, base, value, 1)


@gluon.jit
def ws_init_kernel(out_ptr, NBARS: gl.constexpr, FENCE: gl.constexpr, num_warps: gl.constexpr):
    # mbarrier.init by the default warps before warp_specialize, the worker the only one to use the
    # barriers; no mbarrier.invalidate (it would add a barrier 0 before the exit state). NBARS 2: Triton
    # puts a bar.sync 0, 128 between the two inits, as between gluon_ws_kernel's ring barriers.
    bars = gl.allocate_shared_memory(gl.int64, [NBARS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NBARS):
        mbarrier.init(bars.index(i), count=1)
    if FENCE:
        fence_async_shared()
    gl.warp_specialize([(_store_lanes, (out_ptr, 0, 1000, num_warps)),
                        (_arrive_wait_store, (out_ptr, bars, 32 * num_warps, 2000))], [1], [24])


@gluon.jit
def _read_unsynchronized(out_ptr, buf, WARPS: gl.constexpr):
    n: gl.constexpr = buf.type.shape[0]
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    offs = gl.arange(0, n, layout=layout)
    gl.store(out_ptr + offs, buf.load(layout))  # while the worker may still be writing: a real race


@gluon.jit
def _write_and_store(out_ptr, buf):
    n: gl.constexpr = buf.type.shape[0]
    layout: gl.constexpr = gl.BlockedLayout([n // 32], [32], [1], [0])
    offs = gl.arange(0, n, layout=layout)
    buf.store(offs * 3 + 7)
    # the same values to global memory, from registers: the checked half of the output (a read-back
    # of the buffer would add intra-warp traffic that racecheck might count too)
    gl.store(out_ptr + n + offs, offs * 3 + 7)


@gluon.jit
def ws_race_kernel(out_ptr, N: gl.constexpr, num_warps: gl.constexpr):
    # a genuine race: the worker writes the buffer, the default warps read it, nothing between them
    buf = gl.allocate_shared_memory(gl.int32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    gl.warp_specialize([(_read_unsynchronized, (out_ptr, buf, num_warps)), (_write_and_store, (out_ptr, buf))],
                       [1], [24])


# asm-bar1 with 8 warps, warps 0-3 first passing barrier BAR alone (bar.sync BAR, 128), as the default
# warps of a warp-specialized kernel do, then every thread writes its word, syncs on barrier 1 (all 256
# threads, as the switch loop does) and reads the word of the thread 128 away (the other group's).
_PART_ASM = """{
.shared .align 4 .b32 race_part_buf[256];
.reg .u32 a;
.reg .pred p;
setp.lt.u32 p, $1, 128;
@p bar.sync BAR, 128;
mov.u32 a, race_part_buf;
mad.lo.u32 a, $1, 4, a;
st.shared.b32 [a], $2;
barrier.sync 1;
mov.u32 a, race_part_buf;
mad.lo.u32 a, $3, 4, a;
ld.shared.b32 $0, [a];
}"""
_ASM_PART0 = gl.constexpr(_PART_ASM.replace("BAR", "0"))
_ASM_PART2 = gl.constexpr(_PART_ASM.replace("BAR", "2"))


@gluon.jit
def asm_partial_kernel(out_ptr, BAR: gl.constexpr, num_warps: gl.constexpr):
    gl.static_assert(num_warps == 8, "two groups of 128 threads, one word of the 256-word array per thread")
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    tid = gl.arange(0, 256, layout=layout)
    args = [tid, tid * 3 + 7, (tid + 128) % 256]
    if BAR == 0:
        got = gl.inline_asm_elementwise(_ASM_PART0, "=r,r,r,r", args, dtype=gl.int32, is_pure=False, pack=1)
    else:
        got = gl.inline_asm_elementwise(_ASM_PART2, "=r,r,r,r", args, dtype=gl.int32, is_pure=False, pack=1)
    gl.store(out_ptr + tid, got)


def _ramp(n):
    return torch.arange(n, dtype=torch.int32)


def _stores_expected():
    return torch.cat([1000 + _ramp(BLOCK), 2000 + _ramp(32)])


# name: (kernel, its arguments but out_ptr: compile types or constexpr values, output elements (poisoned
# with -1 first), the expected output).
VARIANTS = {
    "ws-idle": (ws_idle_kernel, {}, BLOCK, lambda: 1000 + _ramp(BLOCK)),
    "ws-store": (ws_store_kernel, {}, BLOCK + 32, _stores_expected),
    "ws-capture": (ws_capture_kernel, {"in_ptr": "*i32"}, BLOCK + 32, _stores_expected),
    "ws-mbarrier": (ws_mbarrier_kernel, {"N": BLOCK}, BLOCK, lambda: _ramp(BLOCK) * 3 + 7),
    "single-mbarrier": (single_mbarrier_kernel, {"N": BLOCK}, BLOCK, lambda: _ramp(BLOCK) * 3 + 7),
    "asm-bar0": (asm_barrier_kernel, {"BAR": 0}, BLOCK, lambda: ((_ramp(BLOCK) + 32) % BLOCK) * 3 + 7),
    "asm-bar1": (asm_barrier_kernel, {"BAR": 1}, BLOCK, lambda: ((_ramp(BLOCK) + 32) % BLOCK) * 3 + 7),
    "ws-tma": (ws_tma_kernel, {"in_desc": "desc"}, TILE[0] * TILE[1], lambda: _ramp(TILE[0] * TILE[1]) + 1),
    "ws-bar0": (ws_bar0_kernel, {}, BLOCK, lambda: 1000 + _ramp(BLOCK)),
    "ws-bar0-late": (ws_bar0_late_kernel, {}, BLOCK, lambda: 1000 + _ramp(BLOCK)),
    "ws-init": (ws_init_kernel, {"NBARS": 1, "FENCE": False}, BLOCK + 32, _stores_expected),
    "ws-init-fence": (ws_init_kernel, {"NBARS": 1, "FENCE": True}, BLOCK + 32, _stores_expected),
    "ws-init2": (ws_init_kernel, {"NBARS": 2, "FENCE": False}, BLOCK + 32, _stores_expected),
    "ws-race": (ws_race_kernel, {"N": BLOCK}, 2 * BLOCK, lambda: (_ramp(2 * BLOCK) % BLOCK) * 3 + 7),
    "asm-part0": (asm_partial_kernel, {"BAR": 0}, 2 * BLOCK, lambda: ((_ramp(2 * BLOCK) + 128) % 256) * 3 + 7),
    "asm-part2": (asm_partial_kernel, {"BAR": 2}, 2 * BLOCK, lambda: ((_ramp(2 * BLOCK) + 128) % 256) * 3 + 7),
}
ALIASES = {"a": "ws-store", "b": "ws-mbarrier", "c": "single-mbarrier"}
WARPS = {"asm-part0": 8, "asm-part2": 8}  # num_warps where not 4 (the default partition's, with warp_specialize)
# Leading output elements that a variant reads in a genuine race: whatever they hold is right (the
# buffer's earlier contents or the worker's values); run() says how many already held the worker's.
RACY = {"ws-race": BLOCK}


def _tile_layout():
    return gl.NVMMASharedLayout.get_default_for(list(TILE), gl.int32)


def run(name: str) -> bool:
    """Launch variant ``name`` once on the GPU; say whether its output is right."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    kernel, extra, n, expected = VARIANTS[name]
    out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    named = {"out_ptr": out}
    for arg, kind in extra.items():
        if arg == "in_ptr":
            named[arg] = torch.tensor([2000], dtype=torch.int32, device="cuda")
        elif arg == "in_desc":
            src = _ramp(n).reshape(TILE).cuda()
            named[arg] = TensorDescriptor.from_tensor(src, list(TILE), _tile_layout())
        else:
            named[arg] = kind  # a constexpr
    kernel[(1,)](*[named[a] for a in kernel.arg_names if a != "num_warps"], num_warps=WARPS.get(name, 4),
                 maxnreg=MAXNREG)
    got, want, racy = out.cpu(), expected(), RACY.get(name, 0)
    bad = (got[racy:] != want[racy:]).sum().item()
    if racy:  # a line of its own: sanitize.sh counts the lines that end in " PASS"
        seen = (got[:racy] == want[:racy]).sum().item()
        print(f"{name:<16} racy reads: {seen} of {racy} saw the worker's values (not checked)")
    print(f"{name:<16} " + (f"FAIL  {bad} of {n - racy} elements wrong" if bad else "PASS"), flush=True)
    return bad == 0


# What the explanation in the docstring predicts, counted in the PTX: shared-memory stores and loads
# (the warp states and captures among them), the switch loop's barrier 1, the default partition's
# barrier 0 (bar.sync 0, 128 where warp_specialize rewrote it), mbarrier operations.
_PTX_COUNTS = {"shared stores": r"\bst\.shared\.|\bstmatrix\.",
               "shared loads": r"\bld\.shared\.|\bldmatrix\.",
               "barrier 1": r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+1\b",
               "barrier 0": r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+0\b",
               "counted bar.sync": r"\bbar(?:rier)?\.sync(?:\.aligned)?\s+(?:\d+|BAR),\s*\d+",
               "bar.warp.sync": r"\bbar\.warp\.sync", "mbarrier ops": r"\bmbarrier\."}


def _ptx_counts(ptx: str) -> str:
    return ", ".join(f"{k} {len(re.findall(p, ptx))}" for k, p in _PTX_COUNTS.items())


def _sass(cubin: bytes) -> str:
    """The SASS of ``cubin``, with the offsets racecheck reports (``kernel+0x...``), from the cuobjdump
    that ships with Triton."""
    import subprocess
    import tempfile

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        run = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=120)
    return run.stdout if run.returncode == 0 else f"cuobjdump failed: {run.stderr.strip()}"


def compile_only(name: str, verbose: bool, sass: bool = False) -> bool:
    """Compile variant ``name`` for sm_90a (no GPU needed); print whether it compiled."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    kernel, extra, _, _ = VARIANTS[name]
    warps = WARPS.get(name, 4)
    signature, constexprs = {"out_ptr": "*i32"}, {"num_warps": warps}
    for arg, kind in extra.items():
        if kind == "desc":
            signature[arg] = f"tensordesc<i32[{TILE[0]}, {TILE[1]}],{_tile_layout()!r}>"
        elif isinstance(kind, str):
            signature[arg] = kind
        else:
            constexprs[arg] = kind
    signature.update({k: "constexpr" for k in constexprs})
    signature = {k: signature[k] for k in kernel.arg_names}  # in the kernel's argument order
    attrs = {(i,): [["tt.divisibility", 16]] for i, k in enumerate(kernel.arg_names) if k.endswith("_ptr")}
    try:
        k = triton.compile(GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "maxnreg": MAXNREG})
    except Exception as e:  # report every variant, not only the first that fails
        print(f"{name:<16} FAILED to compile: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
        return False
    print(f"{name:<16} compiled: {k.metadata.shared} B shared; {_ptx_counts(k.asm['ptx'])}")
    if verbose:
        print(k.asm["ptx"])
    if sass:
        print(_sass(k.asm["cubin"]))
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", nargs="+", default=list(VARIANTS), metavar="NAME",
                        help=f"{', '.join(VARIANTS)}; a, b, c name ws-store, ws-mbarrier, single-mbarrier")
    parser.add_argument("--compile-only", action="store_true", help="compile for sm_90a, run nothing")
    parser.add_argument("--ptx", action="store_true", help="with --compile-only, print each variant's PTX")
    parser.add_argument("--sass", action="store_true",
                        help="with --compile-only, print each variant's SASS (the offsets racecheck names)")
    parser.add_argument("--list", action="store_true", help="print the variants' names, exit (sanitize.sh)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(VARIANTS))
        return 0
    names = [ALIASES.get(v, v) for v in args.variant]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("Triton's interpreter cannot run or compile Gluon: unset TRITON_INTERPRET")
    if args.compile_only:
        results = [compile_only(v, args.ptx, args.sass) for v in names]
    elif not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("the variants need a Hopper GPU (wgmma-era TMA and setmaxnreg): use --compile-only here")
        return 2
    else:
        results = [run(v) for v in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
