"""What Triton makes of a kernel for a Hopper GPU, read without one.

Triton compiles for a target named in advance: no GPU, no driver. Start Python with
``FP8_TUTORIAL_MODE=compile`` (the kernels are then compiled, not interpreted), then

    from fp8_tutorial.measure import compiled
    from fp8_tutorial.kernels.tiled import tiled_kernel
    k = compiled.compile_for(tiled_kernel, dict(BLOCK_M=128, ...), num_warps=4, num_stages=3)
    compiled.summary(k)        # shared memory, wgmma, TMA and cp.async counts, warp specialization
    compiled.ptxas_report(k)   # registers, spills and ptxas's warnings, from the bundled ptxas

On a GPU the same functions work too (and ``k.n_regs`` is filled in once a kernel has run).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field

import triton

from .._env import MODE

#: The package's pointer arguments, by name, and what they point to by default.
POINTER_TYPES = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "scale_a_ptr": "*fp32",
                 "scale_b_ptr": "*fp32", "partials_ptr": "*fp32", "arrivals_ptr": "*i32"}
#: Strides that are 1 in the layouts scaled_mm is built for: Triton specializes them to constants.
UNIT_STRIDES = {"stride_ak": 1, "stride_bk": 1, "stride_cn": 1}


def compile_for(kernel, constexprs: dict, *, num_warps: int, num_stages: int, pointer_types: dict | None = None,
                capability: int = 90):
    """Compile ``kernel`` for a CUDA GPU of ``capability`` (90: Hopper) as a launch on the usual
    layouts would: every other integer argument divisible by 16, pointers 16-byte aligned.
    ``pointer_types`` adds or overrides argument types, e.g. ``{"c_ptr": "*fp32"}``, or a host
    descriptor's ``{"a_desc": "tensordesc<fp8e4nv[128, 128]>"}``."""
    if not isinstance(kernel, triton.runtime.JITFunction):
        raise TypeError(f"{getattr(kernel, '__name__', kernel)} is not compiled in this process (mode {MODE!r}): "
                        "start Python with FP8_TUTORIAL_MODE=compile, or use a GPU")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    types = {**POINTER_TYPES, **(pointer_types or {})}
    given = {**UNIT_STRIDES, **constexprs}
    signature, values, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in given:
            signature[name], values[name] = "constexpr", given[name]
        elif name in types:
            signature[name] = types[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif i in kernel.constexprs:
            raise ValueError(f"{kernel.__name__} needs a value for {name}")
        else:
            signature[name] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource(fn=kernel, signature=signature, constexprs=values, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def compile_gluon(kernel, descriptors: dict, scalars: dict, constexprs: dict, *, num_warps: int, maxnreg: int,
                  capability: int = 90):
    """Compile a Gluon kernel without a GPU: ``descriptors`` (argument name -> (block shape, Gluon
    dtype), or (block shape, Gluon dtype, shared layout)) as host-side TMA descriptors, by default in
    the NVMMA shared layout of their block, ``scalars`` (argument name -> Triton type, "*fp32",
    "i32", ...), ``constexprs`` (name -> value); pointer arguments (names ending in ``_ptr``) 16-byte
    aligned."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    names = {gl.float8e4nv: "fp8e4nv", gl.bfloat16: "bf16", gl.float16: "fp16", gl.float32: "fp32"}
    signature = {name: f"tensordesc<{names[d[1]]}[{d[0][0]}, {d[0][1]}],"
                       f"{(d[2] if len(d) > 2 else gl.NVMMASharedLayout.get_default_for(d[0], d[1]))!r}>"
                 for name, d in descriptors.items()}
    signature.update(scalars)
    signature.update({name: "constexpr" for name in constexprs})
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if name.endswith("_ptr")}
    source = GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": num_warps, "maxnreg": maxnreg})


def compile_gluon_for(kernel, config, flags: dict, *, maxnreg: int, out: str = "bf16", capability: int = 90,
                      scales_by_tma: bool | None = None):
    """Compile one of the Gluon kernels (``ws_gluon.GLUON_CONFIGS``: tile sizes, GROUP_M,
    warps, ring depth) for fp8 e4m3 operands, host-side descriptors and an output of dtype ``out``
    ("bf16", "fp16" or "fp32"), with ``flags`` (ROW_A, ROW_B, PRECISE). ``scales_by_tma`` (True or
    False: SB_K_MAJOR) compiles ``gluon_blockwise_tma_kernel`` for a blockwise configuration, its
    scales' descriptors in place of their pointers."""
    from triton.experimental.gluon import language as gl

    from ..kernels.ws_gluon import gluon_blocks, gluon_refuses

    why = gluon_refuses(config, 4 if out == "fp32" else 2)
    if why:
        raise ValueError(why)
    k = config.kwargs
    out_ty = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}[out]
    a_block, b_block, c_block = gluon_blocks(config)
    descriptors = {"a_desc": (a_block, gl.float8e4nv), "b_desc": (b_block, gl.float8e4nv), "c_desc": (c_block, out_ty)}
    scalars = dict(scale_a_ptr="*fp32", scale_b_ptr="*fp32", partials_ptr="*fp32", arrivals_ptr="*i32",
                   M="i32", N="i32", K="i32", WHOLE_TILES="i32", PIECES="i32")
    values = dict(GROUP_M=k["GROUP_M"], STAGES=config.num_stages, **flags, SPLIT=k["SPLIT"],
                  num_warps=config.num_warps, PROMOTE=k["PROMOTE"])
    if k["KIND"].startswith("blockwise") and scales_by_tma is not None:  # the scales' descriptors
        from ..kernels.ws_gluon import SB_BOX, SCALE_ROWS, _SCALE_LAYOUT

        del scalars["scale_a_ptr"], scalars["scale_b_ptr"]
        descriptors.update(scale_a_desc=([1, SCALE_ROWS.value], gl.float32, _SCALE_LAYOUT),
                           scale_b_desc=([1, SB_BOX.value], gl.float32, _SCALE_LAYOUT))
        scalars.update(ones_ptr="*fp32")
        values.update(SB_K_MAJOR=scales_by_tma)
    elif k["KIND"].startswith("blockwise"):  # the block scales' strides, and the epilogue's ones
        scalars.update(stride_sam="i32", stride_sak="i32", stride_sbk="i32", stride_sbn="i32", ones_ptr="*fp32")
    return compile_gluon(kernel, descriptors, scalars, values, num_warps=config.num_warps, maxnreg=maxnreg,
                         capability=capability)


def summary(k) -> dict:
    """Counted from the compiled code: static instruction counts, not executions."""
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    # the worker partitions of a ttg.warp_specialize (beside its default region), with their warps
    worker_warps = [int(w) for w in re.findall(r"^\s*partition\d+\(.*\) num_warps\((\d+)\)", ttgir, flags=re.M)]
    return {"shared_kib": k.metadata.shared // 1024, "wgmma": ptx.count("wgmma.mma_async"),
            "cp_async": ptx.count("cp.async.cg"), "tma": ptx.count("cp.async.bulk.tensor"),
            "setmaxnreg": ptx.count("setmaxnreg"),
            "setmaxnreg_to": sorted({(op, int(n)) for op, n in  # ("dec" or "inc", registers)
                                     re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}),
            "workers": len(worker_warps), "worker_warps": worker_warps,
            "threads": int(re.findall(r"\.reqntid\s+(\d+)", ptx)[0])}


@dataclass
class PtxasReport:
    registers: int
    spill_stores: int
    spill_loads: int
    notes: list[str] = field(default_factory=list)  # ptxas's numbered remarks, e.g. "C7514 ... serialized"


def ptxas_report(k, arch: str = "sm_90a") -> PtxasReport:
    """Assemble ``k``'s PTX with the ptxas that ships with Triton, verbosely."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(k.asm["ptx"])
        run = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "kernel.cubin")],
                             capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise RuntimeError(f"ptxas failed: {run.stderr.strip()[-2000:]}")
    text = run.stderr
    number = lambda pattern: int(m.group(1)) if (m := re.search(pattern, text)) else 0  # noqa: E731
    notes = [f"{code} {message.strip()}" for code, message in re.findall(r"\((C\d+)\)\s*(.*)", text)]
    return PtxasReport(number(r"Used (\d+) registers"), number(r"(\d+) bytes spill stores"),
                       number(r"(\d+) bytes spill loads"), notes)
