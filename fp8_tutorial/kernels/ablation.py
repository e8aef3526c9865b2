"""The Gluon kernels with one part changed, on purpose, to measure what that part costs.

``without_odd_w`` leaves part of the loads out: its results are wrong, and it exists to be timed
against the real kernels, never to be used. ``compiler_promotion`` is right, and slower: the precise
kernels with the promotion left to the compiler (chapter 10).

``without_odd_w`` is each Gluon kernel with a producer that loads W's block only on the even K
steps (counted in BLOCK_K). On the odd ones it loads A's blocks alone, and the consumers multiply
by whatever W's buffer held. Half of W is then never read, from DRAM or from L2. Each stage an SM
takes in shrinks by W's block every other step: by a quarter with 128 x 128 tiles (W's block is half
a stage), a third with 128 x 256, a fifth with the stacked 192 x 128. The rest of each kernel (the
ring, the barriers, the wgmma, the epilogue) is the package's own: the variants are the same
functions, with ``load_stage`` bound to ``load_stage_without_odd_w``.
"""

import types

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from . import ws_gluon
from .ws_gluon import load_a, load_stage


@gluon.jit
def load_stage_without_odd_w(a_desc, b_desc, a_bufs, b_bufs, bar, s, off_m, off_n, k, GROUPS: gl.constexpr):
    """``ws_gluon.load_stage`` on even K steps; on odd ones A's blocks only (W's buffer keeps its data)."""
    if (k // a_desc.block_type.shape[1]) % 2 == 0:
        load_stage(a_desc, b_desc, a_bufs, b_bufs, bar, s, off_m, off_n, k, GROUPS)
    else:
        mbarrier.expect(bar, GROUPS * a_desc.block_type.nbytes)
        load_a(a_desc, a_bufs, bar, s, off_m, k, GROUPS)


def _rebound(jitted, names: dict):
    """A new Gluon function from ``jitted``'s code, its global names looked up in ``names``."""
    fn = jitted.fn
    copy = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__module__, copy.__qualname__, copy.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    copy.__annotations__, copy.__kwdefaults__ = dict(fn.__annotations__), fn.__kwdefaults__  # the constexprs
    return gluon.jit(copy, do_not_specialize=jitted.do_not_specialize)


def _without_odd_w() -> dict:
    names = dict(vars(ws_gluon), load_stage=load_stage_without_odd_w)
    names["load_ring"] = _rebound(ws_gluon.load_ring, names)
    return {kind: _rebound(kernel, names) for kind, kernel in ws_gluon.GLUON_KERNELS.items()}


# by KIND, as ws_gluon.GLUON_KERNELS: ws_gluon.launch_gluon(..., config=..., kernels=without_odd_w)
without_odd_w = _without_odd_w()


@gluon.jit
def promoted_by_compiler(a_bufs, b_bufs, ready, empty, acc, it, k_steps, GROUP: gl.constexpr, GROUPS: gl.constexpr,
                         handoff, HANDOFF: gl.constexpr, PROMOTE: gl.constexpr):
    """``ws_gluon.promoted_tile`` left to the compiler: ``max_num_imprecise_acc=BLOCK_K`` makes it
    add each block's product into ``acc`` right after its ``wgmma``, which it waits for there
    (PROMOTE is 1 by construction)."""
    BLOCK_K: gl.constexpr = a_bufs.type.shape[2]
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    acc = gl.zeros_like(acc)  # the promoted sums are added to acc whatever use_acc says
    for kk in range(k_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = a_bufs.index(s * GROUPS + GROUP)
        b = b_bufs.index(s).permute((1, 0))
        acc = warpgroup_mma(a, b, acc, is_async=True, max_num_imprecise_acc=BLOCK_K)
        acc, _, _ = warpgroup_mma_wait(1, deps=(acc, a, b_bufs.index(s)))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
        it += 1
    if HANDOFF:
        mbarrier.arrive(handoff)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
    return acc, it


def _compiler_promotion() -> dict:
    names = dict(vars(ws_gluon), promoted_tile=promoted_by_compiler)
    for name in ("mma_tile", "_cooperative_consumer", "_pingpong_consumer"):
        names[name] = _rebound(getattr(ws_gluon, name), names)
    return {kind: _rebound(kernel, names) for kind, kernel in ws_gluon.GLUON_KERNELS.items()}


# by KIND: ws_gluon.launch_gluon(..., precise=True, config=..., kernels=compiler_promotion)
compiler_promotion = _compiler_promotion()
