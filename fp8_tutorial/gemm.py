"""``scaled_mm``: FP8 matrix multiplication with the conventions of ``torch._scaled_mm``.

``a`` (M, K) and ``b`` (K, N) are FP8 (e4m3fn or e5m2); ``b`` is normally the column-major
``w.t()`` of an (N, K) weight, and a row-major ``b`` is taken too (slower: its tiles are not
K-contiguous). ``scale_a`` and ``scale_b`` are float32 dequantization multipliers:

| recipe   | scale_a            | scale_b                |
|----------|--------------------|------------------------|
| tensor   | one element        | one element            |
| row      | (M, 1)             | (1, N)                 |
| block    | (M, K/128)         | (K/128, N/128)         |

(per-tensor and per-row may be mixed). This module is the whole path from a call to a launch:
the input checks, the registry of kernels (each family's module under ``kernels/`` holds its
kernels, configurations, refusals and launcher), a plan per problem signature, and the torch
operator that ``torch.compile`` traces. ``kernel="auto"`` takes the best kernel that can run
this input on this machine, and never refuses a valid input: the ``"reference"`` kernel
(dequantize and multiply in float32 with torch) takes everything.

The first call of a problem signature (shapes, strides, dtypes, 16-byte alignments, devices,
recipe, accumulation, output) checks everything, chooses the kernel and its configuration
(timing candidates, on a GPU), runs it, and keeps a plan. A later call with the same signature
has passed the same checks by construction: it looks the plan up and runs it, which for the Gluon
kernels and the swapped one (those "auto" takes on a Hopper GPU) launches the compiled kernel
directly, past Triton's dispatch; the other kernels go through their launchers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ._env import MODE
from .kernels import persistent, swapped, tiled, tma, ws, ws_gluon
from .kernels.host import Operands, epilogue_scales_only
from .quant import FP8_DTYPES, dequantize

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# ---- input checks --------------------------------------------------------------------------------

def _scale_kinds(scale, rows: int, cols: int, name: str, block_shape, no_block: str = "") -> set[str]:
    """What a scale's shape can mean: "tensor", "row" or "block" (more than one when K = 128 makes
    the per-row and block-wise shapes coincide); ``no_block`` says why block-wise is out, where it is."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{name} must be a float32 torch.Tensor, got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32 (a dequantization multiplier), got {scale.dtype}")
    kinds = set()
    if scale.numel() == 1:
        kinds.add("tensor")
    elif tuple(scale.shape) == (rows, cols):
        kinds.add("row")
    if block_shape is not None and tuple(scale.shape) == block_shape:
        kinds.add("block")
    if not kinds:
        expected = f"one element, or {(rows, cols)} per row"
        if block_shape is not None:
            expected += f", or {block_shape} block-wise"
        raise ValueError(f"{name} has shape {tuple(scale.shape)}: expected {expected}" + no_block)
    return kinds


def check_operands(a, b, scale_a, scale_b) -> Operands:
    """Validate the inputs of ``scaled_mm``; raise TypeError/ValueError that says what was expected."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in FP8_DTYPES:
            raise TypeError(f"{name} must be torch.float8_e4m3fn or torch.float8_e5m2, got {t.dtype} "
                            "(quantize it first: fp8_tutorial.quantize)")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns must equal b's rows "
                         "(b is (K, N), e.g. w.t() for a weight w of shape (N, K))")
    if M == 0 or N == 0 or K == 0:  # not min(): under torch.compile it would guard M against N and K
        raise ValueError(f"empty operands: a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} and b on {b.device}")
    block = K % 128 == 0 and N % 128 == 0
    no_block = "" if block else (f" (block-wise scales, (M, K/128) and (K/128, N/128), need K and N multiples of 128: "
                                 f"here K = {K} and N = {N})")
    kinds_a = _scale_kinds(scale_a, M, 1, "scale_a", (M, K // 128) if block else None, no_block)
    kinds_b = _scale_kinds(scale_b, 1, N, "scale_b", (K // 128, N // 128) if block else None, no_block)
    if "block" in kinds_a and "block" in kinds_b and (kinds_a == {"block"} or kinds_b == {"block"}):
        kind_a = kind_b = "block"  # one side can only be block-wise, so both are
    else:
        kind_a, kind_b = min(kinds_a - {"block"} or kinds_a), min(kinds_b - {"block"} or kinds_b)
    if (kind_a == "block") != (kind_b == "block"):
        raise ValueError(f"block-wise scaling needs both scales block-wise (scale_a {tuple(scale_a.shape)}, "
                         f"scale_b {tuple(scale_b.shape)}): (M, K/128) and (K/128, N/128)")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.device != a.device:
            raise ValueError(f"{name} is on {s.device}, the operands on {a.device}")
    return Operands(a, b, scale_a, scale_b, kind_a, kind_b)


def _overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of a 2-D tensor share memory (an expanded view, say)."""
    dims = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1)
    if not dims:
        return False
    if dims[0][0] == 0:
        return True
    return len(dims) == 2 and dims[1][0] < dims[0][0] * dims[0][1]


def _output(ops: Operands, out_dtype: torch.dtype, out: torch.Tensor | None) -> torch.Tensor:
    """``out`` checked against the operands and ``out_dtype``, or a new (M, N) tensor of it."""
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
    if out is None:
        return torch.empty((ops.M, ops.N), dtype=out_dtype, device=ops.a.device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != (ops.M, ops.N) or out.dtype != out_dtype or out.device != ops.a.device:
        raise ValueError(f"out must be a {(ops.M, ops.N)} {out_dtype} tensor on {ops.a.device}, "
                         f"got {tuple(out.shape)} {out.dtype} on {out.device}")
    if _overlaps(out):
        raise ValueError(f"out has elements that share memory (strides {tuple(out.stride())}): "
                         "each output needs its own place")
    if out.requires_grad:
        raise ValueError("out requires grad: scaled_mm writes into it outside autograd")
    return out


# ---- the kernel registry -------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    name: str
    run: Callable[[Operands, torch.Tensor, bool], None]    # (operands, out, precise) -> fills out
    refuses: Callable[[Operands, torch.Tensor], str | None]  # why it cannot take (operands, out), or None
    priority: int                                          # "auto" prefers higher
    # (operands, out, precise) -> (configuration, launch_again(a, b, scale_a, scale_b, out)): runs the
    # first call and returns what the plan runs on the next ones; None: the plan calls ``run``
    prepare: Callable | None = None


KERNELS: dict[str, Kernel] = {}
PLANS: dict[tuple, "Plan"] = {}  # by problem signature (below)


def register_kernel(name: str, run, refuses, priority: int, prepare=None) -> None:
    if name != "reference":
        refuses = _where_triton_runs(refuses)
    KERNELS[name] = Kernel(name, run, refuses, priority, prepare)
    PLANS.clear()  # a plan chose among the kernels registered when it was made


def _where_triton_runs(refuses):
    """``refuses`` that first refuses CPU tensors where Triton compiles for a GPU rather than
    interpreting (a GPU machine, or FP8_TUTORIAL_MODE=compile): its kernels cannot read them."""
    def check(ops: Operands, out: torch.Tensor) -> str | None:
        if MODE != "interpreter" and not (ops.a.is_cuda and out.is_cuda):
            return ("the tensors are not on a CUDA GPU, and Triton here compiles its kernels for the GPU (it "
                    "interprets them only on a machine without one): move them to the GPU, or the reference "
                    "kernel takes them")
        return refuses(ops, out)
    return check


def _reference(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    """Dequantize both operands to float32 and multiply with torch: slow, simple, takes anything."""
    out.copy_(dequantize(ops.a, ops.scale_a) @ dequantize(ops.b, ops.scale_b))


register_kernel("reference", _reference, lambda ops, out: None, priority=0)
# Above the tiled kernel: ahead of it on 6 (per tensor) and 7 (per row) of the nine shapes in the
# sweep behind PERSISTENT_CONFIGS; chapter 05 measures both.
register_kernel("tiled", tiled.launch_tiled, tiled.tiled_refuses, priority=10)
register_kernel("persistent", persistent.launch_persistent, epilogue_scales_only("persistent"), priority=11)
# Below every other kernel: behind them on every shape measured (chapters 05 and 06).
register_kernel("streamk", persistent.launch_streamk, epilogue_scales_only("streamk"), priority=4)
# First where TMA can take the operands and Gluon cannot: ahead of the persistent kernel on 7 of
# the nine shapes, per tensor and per row, in the sweep behind TMA_CONFIGS (chapter 06).
register_kernel("tma", tma.launch_tma, tma.tma_takes, priority=12)
# Below the tiled kernel: behind the best kernel without specialization on every reference cell
# (chapter 07's table).
register_kernel("ws", ws.launch_ws, ws.ws_takes, priority=7)
# First where it can run (a Hopper GPU, e4m3 operands, what TMA takes; block-wise scales through its
# blockwise kernel): ahead of the best kernel without specialization on most reference cells and
# within a percent on the others (chapter 08's table). Elsewhere it refuses, and "auto" says why.
register_kernel("gluon", ws_gluon.launch_gluon, ws_gluon.gluon_takes, priority=13,
                prepare=ws_gluon.prepare_gluon)
# First of all where M is at most 64 (it refuses more): the operands swapped, the weight's rows on
# the tensor cores' tall side, K cut into pieces; ahead of cuBLAS and the Gluon kernels on every
# such cell timed on the H200, block-wise and per row, fast and precise (chapter 11's table).
register_kernel("swapped", swapped.launch_swapped, swapped.swapped_takes, priority=14,
                prepare=swapped.prepare_swapped)


def _choose(ops: Operands, out: torch.Tensor) -> tuple[str, dict[str, str]]:
    refused = {}
    for k in sorted(KERNELS.values(), key=lambda k: -k.priority):
        why = k.refuses(ops, out)
        if why is None:
            return k.name, refused
        refused[k.name] = why
    raise AssertionError("the reference kernel takes every valid input")


def choose(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
           out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None) -> tuple[str, dict[str, str]]:
    """The kernel ``scaled_mm(..., kernel="auto")`` runs for these arguments, and why each kernel
    ranked above it refused them: ``(name, {refused name: reason})``."""
    ops = check_operands(a, b, scale_a, scale_b)
    return _choose(ops, _output(ops, out_dtype, out))


# ---- a plan per problem --------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What a problem signature's first call decided: the kernel, its configuration (the Gluon
    kernels' and the swapped one's; None for the others, whose launchers choose theirs on every
    call, from their autotuner or their own cache) and what later calls run."""

    kernel: str
    config: object
    launch: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
    pack_scales: bool  # scales that are not contiguous are packed on every call
    M: int  # the output's shape and device, for a new output on every call
    N: int
    device: torch.device



def _signature(a, b, scale_a, scale_b, out, out_dtype, kernel, precise) -> tuple:
    """Everything the checks, the choice of kernel and the compiled kernel's specialization depend
    on; an input that is not a strided tensor raises TypeError (or AttributeError) here, and the
    full checks then say why."""
    try:
        sig = (kernel, precise.__class__, precise, out_dtype,
               a.__class__, a.dtype, a.shape, a.stride(), a.device, a.data_ptr() & 15,
               b.__class__, b.dtype, b.shape, b.stride(), b.device, b.data_ptr() & 15,
               scale_a.__class__, scale_a.dtype, scale_a.shape, scale_a.stride(), scale_a.device,
               scale_a.data_ptr() & 15,
               scale_b.__class__, scale_b.dtype, scale_b.shape, scale_b.stride(), scale_b.device,
               scale_b.data_ptr() & 15,
               # inputs that want a gradient: refused while autograd records (no backward here)
               torch.is_grad_enabled()
               and (a.requires_grad or b.requires_grad or scale_a.requires_grad or scale_b.requires_grad))
        if out is None:
            return sig
        return sig + (out.__class__, out.dtype, out.shape, out.stride(), out.device, out.data_ptr() & 15,
                      out.requires_grad, _shares_memory(out, a, b, scale_a, scale_b))
    except RuntimeError as e:  # a tensor without strides or storage (sparse, a wrapper subclass)
        raise TypeError(str(e)) from e


def _shares_memory(out: torch.Tensor, *inputs: torch.Tensor) -> bool:
    """Whether ``out`` is a view of the same memory as one of the inputs (the kernels would read
    what other tiles already wrote)."""
    base = out.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == base for t in inputs)


def _plan(a, b, scale_a, scale_b, out, out_dtype, kernel, precise) -> tuple[Plan, torch.Tensor]:
    """Check everything, choose the kernel, run it into ``out`` (new where None) and return the plan
    for the calls after this one."""
    ops = check_operands(a, b, scale_a, scale_b)
    if a.device.type == "meta":
        raise ValueError("a and b are meta tensors: they hold no data to multiply")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (a, b, scale_a, scale_b)):
        raise ValueError("scaled_mm has no backward (inference only): an input requires grad; call it under "
                         "torch.no_grad() or pass detached tensors")
    if out is not None and isinstance(out, torch.Tensor) and _shares_memory(out, a, b, scale_a, scale_b):
        raise ValueError("out shares memory with an input: the kernels would read what they already wrote")
    out = _output(ops, out_dtype, out)
    if not isinstance(precise, bool):
        raise TypeError(f"precise must be True or False, got {precise!r}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a name (a str), got {type(kernel).__name__}")
    if kernel == "auto":
        chosen = KERNELS[_choose(ops, out)[0]]
    elif kernel in KERNELS:
        chosen = KERNELS[kernel]
        why = chosen.refuses(ops, out)
        if why:
            raise ValueError(f"kernel {kernel!r} cannot take these operands: {why}")
    else:
        raise ValueError(f"unknown kernel {kernel!r}: expected 'auto' or one of {', '.join(KERNELS)}")
    # block-wise scales are read through their strides, which the plan's signature holds
    pack = not (scale_a.is_contiguous() and scale_b.is_contiguous()) and ops.recipe_a != "block"
    if chosen.prepare is not None and out.is_cuda:
        config, launch = chosen.prepare(ops, out, precise)
    else:
        config = None
        recipes = ops.recipe_a, ops.recipe_b

        def launch(a, b, scale_a, scale_b, out):
            chosen.run(Operands(a, b, scale_a, scale_b, *recipes), out, precise)
        launch(a, b, scale_a, scale_b, out)
        pack = False  # the launchers pack the scales themselves
    return Plan(chosen.name, config, launch, pack, ops.M, ops.N, out.device), out


def plan_of(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, kernel="auto", precise=False, out=None):
    """The plan that ``scaled_mm`` keeps for these arguments' signature, or None before its first call."""
    return PLANS.get(_signature(a, b, scale_a, scale_b, out, out_dtype, kernel, precise))


def _scaled_mm(a, b, scale_a, scale_b, out_dtype, kernel, precise, out):
    try:
        key = _signature(a, b, scale_a, scale_b, out, out_dtype, kernel, precise)
        plan = PLANS.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable: the checks say what is wrong
        key = plan = None
    if plan is None:
        plan, out = _plan(a, b, scale_a, scale_b, out, out_dtype, kernel, precise)
        if key is not None:
            PLANS[key] = plan
        return out
    if out is None:  # sizes given one by one: torch parses them faster than a tuple
        out = torch.empty(plan.M, plan.N, dtype=out_dtype, device=plan.device)
    if plan.pack_scales:
        scale_a, scale_b = scale_a.reshape(-1).contiguous(), scale_b.reshape(-1).contiguous()
    plan.launch(a, b, scale_a, scale_b, out)
    return out


# ---- the public entry point, and the torch operator ----------------------------------------------

def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              out_dtype: torch.dtype = torch.bfloat16, kernel: str = "auto", precise: bool = False,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a.float() * scale_a) @ (b.float() * scale_b)`` in ``out_dtype`` (module docstring).

    ``precise=True`` promotes partial sums to float32 every 128 values of K (cuBLAS's
    ``use_fast_accum=False``); the default accumulates in the tensor cores' own precision.
    ``kernel`` names a registered kernel (``fp8_tutorial.gemm.KERNELS``) or is "auto"; ``out``,
    if given, is an (M, N) tensor of ``out_dtype`` to write into. Under ``torch.compile`` the call
    is one operator, ``torch.ops.fp8_tutorial.scaled_mm`` (``scaled_mm_out`` with ``out``).
    """
    if torch.compiler.is_compiling():
        if out is not None and isinstance(out, torch.Tensor) and out.dtype != out_dtype:
            raise ValueError(f"out is {out.dtype}, out_dtype {out_dtype}: they must agree")
        if out is None:
            return torch.ops.fp8_tutorial.scaled_mm(a, b, scale_a, scale_b, out_dtype, kernel, precise)
        torch.ops.fp8_tutorial.scaled_mm_out(a, b, scale_a, scale_b, out, kernel, precise)
        return out
    return _scaled_mm(a, b, scale_a, scale_b, out_dtype, kernel, precise, out)


@torch.library.custom_op("fp8_tutorial::scaled_mm", mutates_args=())
def _scaled_mm_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  out_dtype: torch.dtype, kernel: str, precise: bool) -> torch.Tensor:
    return _scaled_mm(a, b, scale_a, scale_b, out_dtype, kernel, precise, None)


@_scaled_mm_op.register_fake
def _(a, b, scale_a, scale_b, out_dtype, kernel, precise):
    ops = check_operands(a, b, scale_a, scale_b)  # the checks that need no data, at trace time
    return _output(ops, out_dtype, None)


@torch.library.custom_op("fp8_tutorial::scaled_mm_out", mutates_args=("out",))
def _scaled_mm_out_op(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      out: torch.Tensor, kernel: str, precise: bool) -> None:
    _scaled_mm(a, b, scale_a, scale_b, out.dtype, kernel, precise, out)


@_scaled_mm_out_op.register_fake
def _(a, b, scale_a, scale_b, out, kernel, precise):
    _output(check_operands(a, b, scale_a, scale_b), out.dtype, out)
