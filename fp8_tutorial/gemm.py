"""``scaled_mm``: FP8 matrix multiplication with the conventions of ``torch._scaled_mm``.

``a`` (M, K) and ``b`` (K, N) are FP8 (e4m3fn or e5m2); ``b`` is normally the column-major
``w.t()`` of an (N, K) weight, and a row-major ``b`` is taken too (slower: its tiles are not
K-contiguous). ``scale_a`` and ``scale_b`` are float32 dequantization multipliers:

| recipe   | scale_a            | scale_b                |
|----------|--------------------|------------------------|
| tensor   | one element        | one element            |
| row      | (M, 1)             | (1, N)                 |
| block    | (M, K/128)         | (K/128, N/128)         |

(per-tensor and per-row may be mixed). Kernels are registered by name; ``kernel="auto"`` takes
the best one that can run this input on this machine, and never refuses a valid input: the
``"reference"`` kernel (dequantize and multiply in float32 with torch) takes everything.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import triton

from . import schedule
from ._env import DEVICE, ON_GPU
from .kernels.persistent import sum_pieces_kernel, persistent_kernel, split_kernel, streamk_kernel
from .kernels.tiled import tiled_kernel
from .kernels.tma import tma_host_kernel, tma_kernel
from .kernels.ws import ws_kernel
from .kernels import ws_gluon
from .kernels.ws_gluon import gluon_pingpong_kernel, gluon_stacked_kernel, gluon_ws_kernel
from .quant import FP8_DTYPES, dequantize

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class Operands:
    """Validated inputs: ``recipe_a``/``recipe_b`` are "tensor", "row" or "block"."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    recipe_a: str
    recipe_b: str

    def flags(self, precise: bool) -> dict:
        """The kernels' recipe and accumulation switches for these operands, which every launch
        asks for: the kernels apply per-tensor and per-row scales only, so block-wise ones are
        refused here rather than read as something else."""
        for name, recipe in (("a", self.recipe_a), ("b", self.recipe_b)):
            if recipe not in ("tensor", "row"):
                raise ValueError(f"the GEMM kernels take per-tensor and per-row scales only, and scale_{name} is "
                                 f"{recipe}-wise: use scaled_mm (kernel='auto' or 'reference')")
        return dict(ROW_A=self.recipe_a == "row", ROW_B=self.recipe_b == "row", PRECISE=precise)

    @property
    def packed_scales(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The scales as the pointer kernels read them: contiguous, one value after another (a
        strided or expanded view of per-row scales would be read from the wrong places)."""
        return self.scale_a.reshape(-1).contiguous(), self.scale_b.reshape(-1).contiguous()

    @property
    def M(self) -> int:
        return self.a.shape[0]

    @property
    def K(self) -> int:
        return self.a.shape[1]

    @property
    def N(self) -> int:
        return self.b.shape[1]


def _scale_kinds(scale, rows: int, cols: int, name: str, block_shape) -> set[str]:
    """What a scale's shape can mean: "tensor", "row" or "block" (more than one when K = 128 makes
    the per-row and block-wise shapes coincide)."""
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
        raise ValueError(f"{name} has shape {tuple(scale.shape)}: expected {expected}")
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
    if min(M, N, K) == 0:
        raise ValueError(f"empty operands: a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} and b on {b.device}")
    block = K % 128 == 0 and N % 128 == 0
    kinds_a = _scale_kinds(scale_a, M, 1, "scale_a", (M, K // 128) if block else None)
    kinds_b = _scale_kinds(scale_b, 1, N, "scale_b", (K // 128, N // 128) if block else None)
    if "block" in kinds_a and "block" in kinds_b and (kinds_a == {"block"} or kinds_b == {"block"}):
        kind_a = kind_b = "block"  # one side can only be block-wise, so both are
    else:
        kind_a, kind_b = min(kinds_a - {"block"} or kinds_a), min(kinds_b - {"block"} or kinds_b)
    if (kind_a == "block") != (kind_b == "block"):
        raise ValueError(f"block-wise scaling needs both scales block-wise (scale_a {tuple(scale_a.shape)}, "
                         f"scale_b {tuple(scale_b.shape)}): (M, K/128) and (K/128, N/128)")
    if a.device.type == "meta":
        raise ValueError("a and b are meta tensors: they hold no data to multiply")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.device != a.device:
            raise ValueError(f"{name} is on {s.device}, the operands on {a.device}")
    return Operands(a, b, scale_a, scale_b, kind_a, kind_b)


# ---- the kernel registry ---------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    name: str
    run: Callable[[Operands, torch.Tensor, bool], None]  # (operands, out, precise) -> fills out
    refuses: Callable[[Operands, torch.Tensor], str | None]  # why it cannot take (operands, out), or None
    priority: int                                          # "auto" prefers higher


KERNELS: dict[str, Kernel] = {}


def register_kernel(name: str, refuses, priority: int):
    def wrap(run):
        KERNELS[name] = Kernel(name, run, refuses, priority)
        return run
    return wrap


def _reference_refuses(ops: Operands, out: torch.Tensor) -> str | None:
    return None


@register_kernel("reference", _reference_refuses, priority=0)
def _reference(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    """Dequantize both operands to float32 and multiply with torch: slow, simple, takes anything."""
    out.copy_(dequantize(ops.a, ops.scale_a) @ dequantize(ops.b, ops.scale_b))


# ---- the tiled kernel --------------------------------------------------------------------------

def _config(bm, bn, bk, warps, stages, group_m=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=warps, num_stages=stages)


# Measured on the H200 (a sweep of 42 tile shapes, warps and stages over the nine reference shapes):
# 128x128 tiles with 3 stages leave room for two programs per SM, whose K loops hide each other's
# prologue and epilogue; 6 stages, one program per SM, win when K is long; 256x128 wins on 8192^3.
# 128x256 tiles, the usual choice for persistent kernels, reached only 0.6-0.7x cuBLAS here.
TILED_CONFIGS = [_config(128, 128, 128, 4, 3), _config(128, 128, 128, 8, 3), _config(128, 128, 128, 4, 6),
                 _config(256, 128, 128, 8, 4), _config(64, 128, 128, 4, 4), _config(64, 64, 128, 4, 4)]
# Split-K lost to the unsplit kernel on every small-M shape (chapter 04): never chosen by "auto".
SPLIT_K_CONFIGS = [_config(128, 128, 128, 4, 6), _config(128, 128, 128, 4, 3)]
# _launch decides EVEN_K for K % 128 when autotuning: every tuned BLOCK_K must divide 128.
assert all(128 % c.kwargs["BLOCK_K"] == 0 for c in TILED_CONFIGS + SPLIT_K_CONFIGS)


def _prune(configs, named_args, **kwargs):
    """Drop tiles far larger than the problem: a 128-row tile for M = 16 only wastes work."""
    M, N = named_args["M"], named_args["N"]
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= max(64, triton.next_power_of_2(M))
            and c.kwargs["BLOCK_N"] <= max(64, triton.next_power_of_2(N))]
    return kept or configs[-1:]


def _prune_to_smallest(configs, named_args, **kwargs):
    """``_prune`` for lists that do not end with their smallest tile (the tiled kernel's does):
    where no tile is small enough, the smallest one is kept, with the fewest stages."""
    largest_first = sorted(configs, key=lambda c: (c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"], c.num_stages),
                           reverse=True)
    return _prune(largest_first, named_args)


def tma_shared_bytes(config: triton.Config, out_bytes: int) -> int:
    """Shared memory of a TMA kernel's program: the ring of operand tiles plus the staging buffer
    of the TMA store (half a tile with EPILOGUE_HALVES), plus 1 KiB for barriers. It matched what
    the compiler allocated on the H200 (224 KiB for 128x256x128, 4 stages, halves, bf16)."""
    k = config.kwargs
    staging = k["BLOCK_M"] * k["BLOCK_N"] * out_bytes // (2 if k.get("EPILOGUE_HALVES") else 1)
    return schedule.pipeline_smem(k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], config.num_stages) + staging + 1024


def _fit_stages(config: triton.Config, out_bytes: int, shared_bytes) -> triton.Config:
    """``config`` with its stages cut, down to 2, until ``shared_bytes(config, out_bytes)`` fits
    in a program's shared memory."""
    fitted = config
    while shared_bytes(fitted, out_bytes) > schedule.SMEM_PER_PROGRAM_MAX and fitted.num_stages > 2:
        fitted = triton.Config(dict(fitted.kwargs), num_warps=fitted.num_warps, num_stages=fitted.num_stages - 1)
    return fitted


def fit_tma_config(config: triton.Config, out_bytes: int) -> triton.Config:
    """``config`` with as many pipeline stages as fit in a program's shared memory for an output of
    ``out_bytes`` per element (a float32 output needs twice the staging buffer of bf16)."""
    return _fit_stages(config, out_bytes, tma_shared_bytes)


def _prune_tma(configs, named_args, **kwargs):
    """``_prune_to_smallest``, then each configuration cut to the stages that fit with this output's
    dtype."""
    out_bytes = named_args["c_ptr"].element_size()
    fitted = {}
    for c in _prune_to_smallest(configs, named_args):
        f = fit_tma_config(c, out_bytes)
        fitted.setdefault((tuple(sorted(f.kwargs.items())), f.num_warps, f.num_stages), f)
    return list(fitted.values())


def _tuning_bench(kernel_call, quantiles):
    """The autotuner's timing: 5 ms of warm-up and 20 ms of runs per configuration (L2 flushed)."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


def _fastest(candidates: list, run: Callable) -> Any:
    """The candidate for which ``run(candidate)`` is fastest, timed by ``bench.benchmark``: the
    candidates interleaved (so that the clock, which falls as the GPU warms to its power limit,
    weighs on all alike rather than on the last timed), the L2 flushed, the median of 20 runs."""
    from .bench import benchmark

    timed = benchmark({str(i): (lambda c=c: run(c)) for i, c in enumerate(candidates)}, reps=20, warmup=2)
    return candidates[min(range(len(candidates)), key=lambda i: timed[str(i)].median_ms)]


def _autotuned(kernel, configs, key: list[str], prune=_prune, **extra):
    """``kernel`` autotuned over ``configs`` (pruned to the problem's size), one choice per M, N, K,
    recipe, accumulation and the ``key`` switches; None without a GPU."""
    if not ON_GPU:
        return None
    return triton.autotune(configs=configs, key=["M", "N", "K", "ROW_A", "ROW_B", "PRECISE", *key],
                           prune_configs_by={"early_config_prune": prune}, do_bench=_tuning_bench, **extra)(kernel)


def _check_config(config: triton.Config) -> None:
    """A configuration given by hand, checked before Triton sees it: tile sizes must be powers of
    two of at least 16 (``tl.arange`` and ``tl.dot`` need them), GROUP_M and PROGRAMS_PER_SM at
    least 1, warps a power of two up to 16 and stages at least 1."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"config must be a triton.Config, got {type(config).__name__}")
    k = config.kwargs
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = k.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two of at least 16, got {v!r}")
    for name in ("GROUP_M", "PROGRAMS_PER_SM"):
        v = k.get(name, 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int of at least 1, got {v!r}")
    if config.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps!r}")
    if isinstance(config.num_stages, bool) or not isinstance(config.num_stages, int) or config.num_stages < 1:
        raise ValueError(f"num_stages must be an int of at least 1, got {config.num_stages!r}")


def _launch(kernel, tuned, interpreter_config: triton.Config, grid, args: tuple, flags: dict,
            config: triton.Config | None, K: int | None = None) -> Launch:
    """Launch ``kernel`` with ``config``; without one, through its autotuner ``tuned``, or with
    ``interpreter_config`` where there is none. ``grid(meta)`` sizes the grid. Given ``K``, EVEN_K
    is decided for the configuration's BLOCK_K (128 for every tuned one)."""
    if config is None and tuned is None:
        config = interpreter_config
    if config is not None:
        _check_config(config)
    if config is None:
        even_k = {} if K is None else {"EVEN_K": K % 128 == 0}
        compiled = tuned[grid](*args, **flags, **even_k)
        config = tuned.best_config
    else:
        meta = config.kwargs
        even_k = {} if K is None else {"EVEN_K": K % meta["BLOCK_K"] == 0}
        compiled = kernel[grid(meta)](*args, **flags, **meta, **even_k,
                                      num_warps=config.num_warps, num_stages=config.num_stages)
    return Launch(config, compiled if ON_GPU else None)


_tiled_tuned = _autotuned(tiled_kernel, TILED_CONFIGS, ["EVEN_K", "SPLIT_K"])
# Split-K programs add into C: every timed trial, and the final launch, must start from zeros.
_split_k_tuned = _autotuned(tiled_kernel, SPLIT_K_CONFIGS, ["EVEN_K", "SPLIT_K"], reset_to_zero=["c_ptr"])

# In the interpreter, one small configuration: autotuning needs a GPU, and the interpreter's cost
# grows with the tile size.
INTERPRETER_CONFIG = _config(32, 32, 32, 4, 1, group_m=4)


def _epilogue_scales_only(name: str):
    """The refusal of a kernel that applies per-tensor and per-row scales in its epilogue."""
    def refuses(ops: Operands, out: torch.Tensor) -> str | None:
        if "block" in (ops.recipe_a, ops.recipe_b):
            return f"the {name} kernel applies per-tensor and per-row scales only, once, after the K loop"
        if ops.a.is_cuda and torch.cuda.get_device_capability(ops.a.device) < (8, 9):
            return "FP8 tensor cores need compute capability 8.9 or newer"
        return None
    return refuses


_tiled_refuses = _epilogue_scales_only("tiled")


_INT32_MAX = 2**31 - 1


def _pointer_safe(ops: Operands, out: torch.Tensor) -> tuple[Operands, torch.Tensor]:
    """The pointer kernels step along K (in a and b) and along N (in out) with 32-bit offsets.
    Where a step times the length could pass 2^31 (a column-major ``a`` of 16 million rows, say),
    hand them a copy laid out with unit steps, and an output to copy back from."""
    a, b, c = ops.a, ops.b, out
    reach = ops.K + 256  # a program's offsets run a tile past the end before masking
    if reach * a.stride(1) > _INT32_MAX:
        a = a.contiguous()
    if reach * b.stride(0) > _INT32_MAX:
        b = b.t().contiguous().t()
    if (ops.N + 256) * out.stride(1) > _INT32_MAX:
        c = torch.empty(out.shape, dtype=out.dtype, device=out.device)
    if a is ops.a and b is ops.b:
        return ops, c
    return Operands(a, b, ops.scale_a, ops.scale_b, ops.recipe_a, ops.recipe_b), c


@dataclass(frozen=True)
class Launch:
    """What ran: the configuration, and the compiled kernel (None in the interpreter), whose
    ``n_regs``, ``metadata.shared`` and ``asm`` show what the compiler made of it."""

    config: triton.Config
    kernel: object | None


def launch_tiled(ops: Operands, out: torch.Tensor, precise: bool, split_k: int = 1,
                 config: triton.Config | None = None) -> Launch:
    """Run ``tiled_kernel`` into ``out``: autotuned on a GPU unless ``config`` is given.

    ``split_k`` > 1 splits the K loop over that many programs per tile; they add their partial
    tiles into a zeroed float32 buffer, which is then cast into ``out``.
    """
    M, N, K = ops.M, ops.N, ops.K
    if isinstance(split_k, bool) or not isinstance(split_k, int):
        raise TypeError(f"split_k must be an int, got {type(split_k).__name__}")
    if split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    ops, target = _pointer_safe(ops, out)
    c = target if split_k == 1 else torch.zeros((M, N), dtype=torch.float32, device=out.device)
    args = (ops.a, ops.b, c, *ops.packed_scales, M, N, K,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    flags = dict(ops.flags(precise), SPLIT_K=split_k)
    grid = lambda meta: (tile_count(M, N, meta), split_k)  # noqa: E731
    launch = _launch(tiled_kernel, _tiled_tuned if split_k == 1 else _split_k_tuned, INTERPRETER_CONFIG, grid,
                     args, flags, config, K)
    if c is not out:
        out.copy_(c)
    return launch


def config_dict(config: triton.Config) -> dict:
    """A configuration as plain numbers, for results files."""
    return dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def describe_config(config: triton.Config | dict) -> str:
    k = config_dict(config) if isinstance(config, triton.Config) else config
    return ((f"{k['KIND']}, " if "KIND" in k else "") + f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} tiles, GROUP_M {k['GROUP_M']}, "
            f"{k['num_warps']} warps, {k['num_stages']} stages"
            + (", host-side descriptors" if k.get("host_descriptors") else "")
            + (", split tail" if k.get("SPLIT") else "")
            + (f", stores of {k['STORE_N']} columns" if k.get("STORE_N", k["BLOCK_N"]) != k["BLOCK_N"] else ""))


def tuned_configs() -> list[dict]:
    """What the autotuners chose so far in this process: one entry per kernel and problem seen
    (``kernel``: tiled, split-k, persistent, streamk, streamk-tma, tma, ws or gluon); for the TMA kernel,
    ``launch_tma``'s choice (``host_descriptors`` says which route) comes first."""
    found = []
    for name, tuner in _tuners().items():
        if tuner is None:
            continue
        for key, config in tuner.cache.items():
            named = dict(zip(tuner.keys, key))
            found.append(dict(kernel=name, M=named["M"], N=named["N"], K=named["K"], row_a=named["ROW_A"],
                              row_b=named["ROW_B"], precise=named["PRECISE"],
                              split_k=named["SPLIT_K"] if name == "split-k" else 1,
                              dtypes=tuple(key[len(tuner.keys):]), config=config))

    def chosen(kernel, key, config, **extra):  # a launch_gluon or launch_tma choice, keyed as they key it
        M, N, K, row_a, row_b, precise, _, a_dtype, out_dtype = key
        return dict(kernel=kernel, M=M, N=N, K=K, row_a=row_a, row_b=row_b, precise=precise, split_k=1,
                    dtypes=(str(a_dtype), str(out_dtype)), config=config, **extra)
    found += [chosen("gluon", key, config) for key, config in _gluon_choice.items()]
    for key, (host, config) in _tma_routes.items():
        found.insert(0, chosen("tma", key, config, host_descriptors=host))
    return found


def _tuners() -> dict:
    return {"tiled": _tiled_tuned, "split-k": _split_k_tuned, "persistent": _persistent_tuned,
            "streamk": _streamk_tuned, "streamk-tma": _streamk_tma_tuned, "tma": _tma_tuned, "ws": _ws_tuned}


def attach_configs(records: list[dict]) -> None:
    """Give each benchmark record of one of our kernels (a bf16 output) the configuration its
    autotuner chose for that problem in this process (``record["config"]``), where there is one."""
    chosen = {}
    for t in tuned_configs():  # benchmark records are of bf16 outputs
        if t["split_k"] == 1 and "torch.bfloat16" in t["dtypes"]:
            config = dict(config_dict(t["config"]), **({"host_descriptors": True} if t.get("host_descriptors") else {}))
            chosen.setdefault((t["kernel"], t["M"], t["N"], t["K"], t["row_a"], t["precise"]), config)
    for r in records:
        names = ["streamk-tma", "streamk"] if r["contender"] == "streamk" else [r["contender"]]
        for name in names:
            config = chosen.get((name, r["M"], r["N"], r["K"], r["recipe"] == "row", r["accumulation"] == "precise"))
            if config is not None:
                r["config"] = config
                break


@register_kernel("tiled", _tiled_refuses, priority=10)
def _tiled(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_tiled(ops, out, precise)


# ---- the persistent kernel -----------------------------------------------------------------------

def _pconfig(bm, bn, bk, warps, stages, per_sm, group_m=8, flatten=True):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "PROGRAMS_PER_SM": per_sm, "FLATTEN": flatten}, num_warps=warps, num_stages=stages)


# From a sweep of 6 configurations on the nine shapes (H200): each is the best on some of them.
PERSISTENT_CONFIGS = [_pconfig(128, 128, 128, 4, 3, 2), _pconfig(128, 128, 128, 4, 6, 1),
                      _pconfig(128, 256, 128, 8, 3, 1)]
PERSISTENT_INTERPRETER_CONFIG = _pconfig(32, 32, 32, 4, 1, 1, group_m=4, flatten=False)
_persistent_tuned = _autotuned(persistent_kernel, PERSISTENT_CONFIGS, ["EVEN_K"], prune=_prune_to_smallest)


def _sm_count(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _programs(out: torch.Tensor, num_sms, config: triton.Config | None) -> int:
    """The SM count a persistent launch plans for (the GPU's, or 4 in the interpreter), checked,
    as is the configuration's programs per SM: an empty grid would leave ``out`` unwritten."""
    if config is not None:
        _check_config(config)
    if num_sms is None:
        return _sm_count(out.device) if out.is_cuda else 4
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
    return num_sms


def tile_count(M: int, N: int, meta: dict) -> int:
    """The output tiles of an M x N product in ``meta``'s BLOCK_M x BLOCK_N tiles."""
    return triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])


def persistent_grid(M: int, N: int, num_sms: int):
    """The grid of a persistent launch: num_sms x PROGRAMS_PER_SM programs (1 per SM where the
    configuration does not say), never more than there are tiles."""
    def grid(meta):
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(tiles, num_sms * meta.get("PROGRAMS_PER_SM", 1)),)
    return grid


def launch_persistent(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                      num_sms: int | None = None) -> Launch:
    """Run ``persistent_kernel`` into ``out``: autotuned on a GPU unless ``config`` is given.

    ``num_sms`` (default: the GPU's, 4 in the interpreter) sets the grid: min(tiles, num_sms x
    PROGRAMS_PER_SM) programs.
    """
    M, N, K = ops.M, ops.N, ops.K
    num_sms = _programs(out, num_sms, config)
    ops, c = _pointer_safe(ops, out)
    args = (ops.a, ops.b, c, *ops.packed_scales, M, N, K, num_sms,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    launch = _launch(persistent_kernel, _persistent_tuned, PERSISTENT_INTERPRETER_CONFIG,
                     persistent_grid(M, N, num_sms), args, ops.flags(precise), config, K)
    if c is not out:
        out.copy_(c)
    return launch


# Above the tiled kernel: ahead of it on 6 (per tensor) and 7 (per row) of the nine shapes in the
# sweep behind PERSISTENT_CONFIGS; chapter 05 measures both.
@register_kernel("persistent", _epilogue_scales_only("persistent"), priority=11)
def _persistent(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_persistent(ops, out, precise)


# ---- stream-K ----------------------------------------------------------------------------------

def _skconfig(bm, bn, bk, warps, stages, group_m=8, data_parallel=False, tma=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "DATA_PARALLEL": data_parallel, "TMA": tma}, num_warps=warps, num_stages=stages)


# From a sweep on the nine shapes (H200): the best of 6 through pointers (128x256 tiles spill there
# with 8 warps) and of 14 with TMA loads (chapter 06), where the 16-byte rule holds.
STREAMK_CONFIGS = [_skconfig(128, 128, 128, 4, 4, data_parallel=True), _skconfig(128, 128, 128, 4, 6)]
STREAMK_TMA_CONFIGS = [_skconfig(128, 128, 128, 8, 6, data_parallel=True, tma=True),
                       _skconfig(128, 256, 128, 8, 4, data_parallel=True, tma=True),
                       _skconfig(128, 128, 128, 8, 6, tma=True)]
STREAMK_INTERPRETER_CONFIG = _skconfig(32, 32, 32, 4, 1, group_m=4)
STREAMK_TMA_INTERPRETER_CONFIG = _skconfig(32, 32, 32, 4, 1, group_m=4, tma=True)
_streamk_tuned = _autotuned(streamk_kernel, STREAMK_CONFIGS, ["EVEN_K"], prune=_prune_to_smallest)
_streamk_tma_tuned = _autotuned(streamk_kernel, STREAMK_TMA_CONFIGS, ["EVEN_K"], prune=_prune_to_smallest)


_workspaces: dict = {}


def _workspace_key(device: torch.device) -> tuple:
    return device, torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def _streamk_workspace(device: torch.device, partial_elems: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream-K's float32 partial tiles and zeroed arrival counts, kept per device and stream and
    grown as needed: the kernel leaves every count at zero again, so one zeroing at allocation
    serves all later launches on that stream (launches on one stream run one after another)."""
    key = _workspace_key(device)
    partials, arrivals = _workspaces.get(key, (None, None))
    if partials is None or partials.numel() < partial_elems:
        partials = torch.empty(partial_elems, dtype=torch.float32, device=device)
    if arrivals is None or arrivals.numel() < tiles:
        arrivals = torch.zeros(tiles, dtype=torch.int32, device=device)
    _workspaces[key] = (partials, arrivals)
    return partials, arrivals


def _launch_meeting(kernel, tuned, interpreter_config: triton.Config | None, grid, ops: Operands, out: torch.Tensor,
                    precise: bool, workspace: tuple[int, int], schedule_args: tuple,
                    config: triton.Config | None) -> Launch:
    """Launch a kernel whose programs meet over partial tiles (stream-K, split-K in step): the
    workspace of ``workspace`` = (partial elements, counts), the usual operands, then
    ``schedule_args`` and the strides. C is stored through pointers, TMA or not."""
    flags = ops.flags(precise)
    partials, arrivals = _streamk_workspace(out.device, *workspace)
    ops, c = _pointer_safe(ops, out)
    args = (ops.a, ops.b, c, *ops.packed_scales, partials, arrivals, ops.M, ops.N, ops.K, *schedule_args,
            ops.a.stride(0), ops.a.stride(1), ops.b.stride(0), ops.b.stride(1), c.stride(0), c.stride(1))
    try:
        launch = _launch(kernel, tuned, interpreter_config, grid, args, flags, config, ops.K)
    except BaseException:  # a launch cut short may leave arrival counts behind: start afresh next time
        _workspaces.pop(_workspace_key(out.device), None)
        raise
    if c is not out:
        out.copy_(c)
    return launch


def launch_streamk(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                   num_sms: int | None = None, tma: bool | None = None, lanes: bool = False) -> Launch:
    """Run ``streamk_kernel`` into ``out`` with one program per SM (``num_sms``: default the GPU's,
    4 in the interpreter), never more programs than K iterations in all. Without ``config``, the
    loads go through TMA where ``tma_refuses`` allows it (``tma`` True or False forces the choice;
    True raises ValueError where TMA cannot take the operands). With ``lanes``, one lane of programs
    per row of tiles (as many programs in each as ``num_sms`` allows for all): it needs a
    ``config`` without DATA_PARALLEL and at least as many programs as rows of tiles, else
    ValueError."""
    M, N, K = ops.M, ops.N, ops.K
    num_sms = _programs(out, num_sms, config)
    count = 1  # lanes of programs
    if lanes:
        if config is None or config.kwargs.get("DATA_PARALLEL"):
            raise ValueError("lanes need a configuration without DATA_PARALLEL (gemm._skconfig(...))")
        count = triton.cdiv(M, config.kwargs["BLOCK_M"])  # one per row of tiles
        if count > num_sms:
            raise ValueError(f"lanes need a program per row of tiles at least: {count} rows of "
                             f"{config.kwargs['BLOCK_M']}, {num_sms} programs")
    why = _tma_takes(ops, ops.a)  # only A and W go through TMA: A stands in for C
    if config is not None:
        if tma is not None and bool(tma) != bool(config.kwargs.get("TMA")):
            raise ValueError(f"tma={tma} contradicts the configuration's TMA={config.kwargs.get('TMA')}")
        tma = bool(config.kwargs.get("TMA"))
    elif tma is None:
        tma = why is None
    if tma and why:
        raise ValueError(why)
    if tma:
        _ensure_allocator()
    tuned, interpreter_config = (_streamk_tma_tuned, STREAMK_TMA_INTERPRETER_CONFIG) if tma \
        else (_streamk_tuned, STREAMK_INTERPRETER_CONFIG)
    if config is not None:
        configs = [config]
    else:  # whichever the launch may pick: size the buffers for all of them
        configs = tuned.configs if tuned is not None else [interpreter_config]

    def grid(meta):  # as many programs in each lane, never more than its K iterations in all
        return (count * min(num_sms // count, tile_count(M, N, meta) // count * triton.cdiv(K, meta["BLOCK_K"])),)

    largest = max(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] for c in configs)
    programs = max(grid(c.kwargs)[0] for c in configs)
    workspace = (2 * programs * largest, max(tile_count(M, N, c.kwargs) for c in configs))
    return _launch_meeting(streamk_kernel, tuned, interpreter_config, grid, ops, out, precise, workspace,
                           (num_sms, count), config)


# Below every other kernel: behind them on every shape measured (chapters 05 and 06).
@register_kernel("streamk", _epilogue_scales_only("streamk"), priority=4)
def _streamk(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_streamk(ops, out, precise)


# ---- split-K in step ---------------------------------------------------------------------------

#: What a split piece costs beyond its K steps, in K steps: chapter 05 measured about 10 us per
#: piece on the H200 with 128 x 128 tiles, whose K step takes 0.42 us.
PIECE_STEPS = 24


def split_plan(tiles: int, k_blocks: int, programs: int, max_split: int = 8) -> tuple[int, int]:
    """(whole tiles, pieces per other tile) for ``split_kernel``, whichever makes the least time by
    a count of K steps per program: some full waves of whole tiles, then the other tiles cut into
    SPLIT pieces, ceil(rest * SPLIT / programs) rounds of ceil(k_blocks / SPLIT) steps. Every unit
    costs about two steps more to fill the pipeline, and every piece of a split tile PIECE_STEPS more
    (its float32 partial tile, written, counted and summed). Ties go to fewer pieces and to more
    whole tiles."""
    for name, v in (("tiles", tiles), ("k_blocks", k_blocks), ("programs", programs), ("max_split", max_split)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"split_plan: {name} must be an int of at least 1, got {v!r}")
    best = None
    for waves in range((tiles - 1) // programs, -1, -1):  # at least one tile left to split
        whole = waves * programs
        rest = tiles - whole
        for split in range(1, min(max_split, k_blocks) + 1):
            per_unit = -(-k_blocks // split) + 2 + (PIECE_STEPS if split > 1 else 0)
            steps = waves * (k_blocks + 2) + -(-rest * split // programs) * per_unit
            if best is None or steps < best[0]:
                best = (steps, whole, split)
    return best[1], best[2]


def _spconfig(bm, bn, bk, warps, stages, group_m=8, tma=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "TMA": tma},
                         num_warps=warps, num_stages=stages)


# The defaults: through pointers, and with TMA loads where the 16-byte rule holds. Chapter 05
# measures the first (it won no shape), so no autotuner is built for them.
SPLIT_CONFIGS = [_spconfig(128, 128, 128, 4, 6), _spconfig(128, 128, 128, 8, 6, tma=True)]
SPLIT_INTERPRETER_CONFIG = _spconfig(32, 32, 32, 4, 1, group_m=4)


_split_plan = functools.lru_cache(maxsize=1024)(split_plan)  # the same few shapes, launched again and again
_SPLIT_KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "TMA"}
#: Pieces per tile at most: keeps piece * k_blocks and the slots' offsets far inside 32 bits.
MAX_PIECES = 64


def check_plan(plan, tiles: int, k_blocks: int) -> tuple[int, int]:
    """``plan`` = (whole tiles, pieces per other tile), checked against a problem's tiles and K blocks."""
    if not isinstance(plan, (tuple, list)) or len(plan) != 2:
        raise TypeError(f"plan must be (whole tiles, pieces per other tile), got {plan!r}")
    whole, split = plan
    for name, v, low, high in (("whole tiles", whole, 0, tiles - 1),
                               ("pieces", split, 1, min(k_blocks, MAX_PIECES))):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"plan: {name} must be an int from {low} to {high}, got {v!r}")
    return whole, split


def launch_split(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                 num_sms: int | None = None, plan: tuple[int, int] | None = None) -> Launch:
    """Run ``split_kernel`` into ``out``. ``plan`` is (whole tiles, pieces per other tile); by
    default ``split_plan``'s for the configuration's tile and ``num_sms`` (the GPU's SMs). Without
    ``config``, TMA loads where they can take A and W (on a GPU)."""
    M, N, K = ops.M, ops.N, ops.K
    num_sms = _programs(out, num_sms, config)
    why = _tma_takes(ops, ops.a)  # only A and W go through TMA: A stands in for C
    if config is None:
        config = SPLIT_INTERPRETER_CONFIG if not ON_GPU else SPLIT_CONFIGS[1] if why is None else SPLIT_CONFIGS[0]
    meta = config.kwargs
    if set(meta) != _SPLIT_KEYS:
        raise ValueError(f"launch_split takes configurations with exactly {sorted(_SPLIT_KEYS)} (gemm._spconfig), "
                         f"got {sorted(meta)}")
    tiles = tile_count(M, N, meta)
    k_blocks = triton.cdiv(K, meta["BLOCK_K"])
    if plan is None:
        plan = _split_plan(tiles, k_blocks, num_sms)
    whole, split = check_plan(plan, tiles, k_blocks)
    if meta["TMA"]:
        if why:
            raise ValueError(why)
        _ensure_allocator()
    rest = tiles - whole
    # one float32 slot per piece of each split tile, one count per split tile; none used unsplit
    workspace = (rest * split * meta["BLOCK_M"] * meta["BLOCK_N"], rest) if split > 1 else (1, 1)
    return _launch_meeting(split_kernel, None, config, lambda m: (min(num_sms, whole + rest * split),), ops, out,
                           precise, workspace, (num_sms, whole, split), config)


# ---- the TMA kernel ----------------------------------------------------------------------------

def _tconfig(bm, bn, bk, warps, stages, per_sm, group_m=8, flatten=True, halves=False):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "PROGRAMS_PER_SM": per_sm,
                          "FLATTEN": flatten, "EPILOGUE_HALVES": halves},
                         num_warps=warps, num_stages=stages)


# From a sweep of 14 configurations on the nine shapes (H200): each is the best on some of them.
# The first is the default for host-side descriptors.
TMA_CONFIGS = [_tconfig(128, 256, 128, 8, 4, 1, halves=True), _tconfig(128, 128, 128, 8, 6, 1),
               _tconfig(128, 256, 128, 8, 3, 1, group_m=16)]
TMA_INTERPRETER_CONFIG = _tconfig(32, 32, 32, 4, 1, 1, group_m=4, flatten=False)


def _wsconfig(bm, bn, bk, stages, group_m=8):
    """A configuration of ``ws_kernel``: always 4 warps (the compiler adds the other groups)."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m},
                         num_warps=4, num_stages=stages)


# Warp specialization (chapter 07): forms that came out of Triton 3.6 specialized and right on the
# H200. Wrong there: 5 or more stages.
WS_CONFIGS = [_wsconfig(128, 256, 128, 3), _wsconfig(128, 256, 128, 3, group_m=16), _wsconfig(256, 128, 128, 3),
              _wsconfig(128, 128, 128, 4)]
WS_INTERPRETER_CONFIG = _wsconfig(32, 32, 32, 1, group_m=4)
WS_MAX_STAGES = 4
_WS_KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}


_tma_tuned = _autotuned(tma_kernel, TMA_CONFIGS, [], prune=_prune_tma)
_ws_tuned = _autotuned(ws_kernel, WS_CONFIGS, [], prune=_prune_tma)


def tma_refuses(ops: Operands, out: torch.Tensor) -> str | None:
    """Why TMA cannot read these operands or write this output, or None: the 16-byte rule."""
    why = _epilogue_scales_only("tma")(ops, out)
    if why:
        return why
    if ops.a.is_cuda and torch.cuda.get_device_capability(ops.a.device) < (9, 0):
        return "TMA needs a Hopper GPU (compute capability 9.0) or newer"
    for name, t, row_stride in (("a", ops.a, ops.a.stride(0)), ("b.T", ops.b.t(), ops.b.stride(1)), ("out", out, out.stride(0))):
        if t.stride(1) != 1:
            major = "K-major (b = w.t() of an (N, K) tensor w)" if name == "b.T" else "row-major"
            return f"TMA reads and writes by rows: {name} must be {major}, got strides {tuple(t.stride())}"
        if t.data_ptr() % 16:
            return f"TMA needs 16-byte aligned data: {name} starts {t.data_ptr() % 16} bytes past a 16-byte boundary"
        if (row_stride * t.element_size()) % 16:
            return f"TMA needs 16-byte aligned rows: {name} has rows {row_stride * t.element_size()} bytes apart"
    return None


_allocator_set = False


def _ensure_allocator() -> None:
    """Device-side descriptors live in a scratch buffer that Triton asks the program for."""
    global _allocator_set
    if not _allocator_set:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=DEVICE))
        _allocator_set = True


def _tma_setup(ops: Operands, out: torch.Tensor, num_sms, config: triton.Config | None) -> int:
    """What every launch through TMA does first: refuse what the 16-byte rule refuses, give Triton
    the scratch allocator that device-side descriptors need, and return the SM count to plan for."""
    why = tma_refuses(ops, out)
    if why:
        raise ValueError(why)
    _ensure_allocator()
    return _programs(out, num_sms, config)


def tma_args(ops: Operands, out: torch.Tensor, num_sms: int) -> tuple:
    """The arguments ``tma_kernel`` and ``ws_kernel`` take before their constexprs."""
    return (ops.a, ops.b, out, *ops.packed_scales, ops.M, ops.N, ops.K, num_sms, ops.a.stride(0), ops.b.stride(1),
            out.stride(0))


# Which descriptors and configuration launch_tma chose for each problem seen on this GPU:
# key -> (host-side descriptors?, configuration).
_tma_routes: dict[tuple, tuple[bool, triton.Config]] = {}


def launch_tma(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
               num_sms: int | None = None, host_descriptors: bool = False) -> Launch:
    """Run the TMA kernel into ``out``; raises ValueError where ``tma_refuses`` says TMA cannot
    take the operands. With ``config``, ``tma_kernel`` (descriptors built on the device) runs it,
    or ``tma_host_kernel`` (descriptors built here) with ``host_descriptors``; host-side
    descriptors without a configuration take the first one. With neither, on a GPU, the first
    launch for a problem times both routes (device-side descriptors with the autotuner's choice,
    host-side ones with each configuration) and keeps the faster for the problem."""
    num_sms = _tma_setup(ops, out, num_sms, config)
    M, N, K = ops.M, ops.N, ops.K
    flags = ops.flags(precise)
    grid = persistent_grid(M, N, num_sms)

    def on_device(cfg):
        return _launch(tma_kernel, _tma_tuned, TMA_INTERPRETER_CONFIG, grid, tma_args(ops, out, num_sms), flags, cfg)

    def on_host(cfg):
        from triton.tools.tensor_descriptor import TensorDescriptor

        meta = cfg.kwargs
        slice_n = meta["BLOCK_N"] // 2 if meta["EPILOGUE_HALVES"] else meta["BLOCK_N"]
        descriptors = (TensorDescriptor.from_tensor(ops.a, [meta["BLOCK_M"], meta["BLOCK_K"]]),
                       TensorDescriptor.from_tensor(ops.b.t(), [meta["BLOCK_N"], meta["BLOCK_K"]]),
                       TensorDescriptor.from_tensor(out, [meta["BLOCK_M"], slice_n]))
        return _launch(tma_host_kernel, None, cfg, grid, (*descriptors, *ops.packed_scales, M, N, K, num_sms),
                       flags, cfg)

    if host_descriptors:
        if config is None:
            config = fit_tma_config(TMA_CONFIGS[0], out.element_size()) if ON_GPU else TMA_INTERPRETER_CONFIG
        return on_host(config)
    if config is not None or _tma_tuned is None:
        return on_device(config)
    key = (M, N, K, *flags.values(), num_sms, ops.a.dtype, out.dtype)
    if key not in _tma_routes:
        candidates = [(False, on_device(None).config)]  # the autotuner's choice, device-side descriptors
        candidates += [(True, c) for c in _prune_tma(TMA_CONFIGS, dict(M=M, N=N, c_ptr=out))]
        _tma_routes[key] = _fastest(candidates, lambda route: (on_host if route[0] else on_device)(route[1]))
    host, chosen = _tma_routes[key]
    return on_host(chosen) if host else on_device(chosen)


def _zero_row_stride(ops: Operands) -> str | None:
    """An expanded operand (every row the same memory) is valid input, but not for TMA, which
    wants distinct rows: the kernels that load through pointers take it."""
    for name, stride in (("a", ops.a.stride(0)), ("b.T", ops.b.stride(1))):
        if stride == 0:
            return f"TMA needs distinct rows: {name} is an expanded view (row stride 0); .contiguous() makes it one"
    return None


def _tma_takes(ops: Operands, out: torch.Tensor) -> str | None:
    return tma_refuses(ops, out) or _zero_row_stride(ops)


# First where TMA can take the operands: ahead of the persistent kernel on 7 of the nine shapes,
# per tensor and per row, in the sweep behind TMA_CONFIGS (chapter 06 measures it).
@register_kernel("tma", _tma_takes, priority=12)
def _tma(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_tma(ops, out, precise)


def ws_refuses(config: triton.Config) -> str | None:
    """Why ``ws_kernel`` should not run with ``config``, or None: the forms that Triton 3.6 does not
    specialize, or specializes wrong, on the H200 (chapter 07)."""
    if not isinstance(config, triton.Config):
        return f"config must be a triton.Config, got {type(config).__name__}"
    if set(config.kwargs) != _WS_KEYS:
        return f"a ws_kernel configuration has the keys {sorted(_WS_KEYS)}, got {sorted(config.kwargs)}"
    if config.num_warps != 4:
        return (f"warp specialization needs num_warps=4 (the compiler adds a producer and a second consumer "
                f"group); with {config.num_warps} Triton 3.6 does not specialize the loop")
    if isinstance(config.num_stages, int) and config.num_stages > WS_MAX_STAGES:
        return (f"warp-specialized loops with more than {WS_MAX_STAGES} stages gave wrong results on the H200 "
                f"(Triton 3.6); got num_stages={config.num_stages}")
    return None


def launch_ws(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
              num_sms: int | None = None) -> Launch:
    """Run ``ws_kernel`` into ``out``: autotuned over ``WS_CONFIGS`` on a GPU unless ``config``
    is given, which ``ws_refuses`` checks. Raises ValueError where TMA cannot take the operands."""
    why = ws_refuses(config) if config is not None else None
    if why:
        raise ValueError(why)
    num_sms = _tma_setup(ops, out, num_sms, config)
    if config is not None:
        config = fit_tma_config(config, out.element_size())
    return _launch(ws_kernel, _ws_tuned, WS_INTERPRETER_CONFIG, persistent_grid(ops.M, ops.N, num_sms),
                   tma_args(ops, out, num_sms), ops.flags(precise), config)


# Below the tiled kernel: chapter 07 measured it at 0.80 to 0.99x the best kernel without it.
@register_kernel("ws", _tma_takes, priority=7)
def _ws(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_ws(ops, out, precise)


# ---- warp specialization by hand, in Gluon (chapter 07) ------------------------------------------

def _gluonconfig(kind, bm, bn, bk, stages, group_m=8, warps=4, split=False, store_n=None):
    return triton.Config({"KIND": kind, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m,
                          "SPLIT": split, "STORE_N": bn if store_n is None else store_n},
                         num_warps=warps, num_stages=stages)


# num_warps counts the consumer warps of the default partition (the producer's warp group, and the
# other consumer groups of ping-pong and of the stacked kernel, come on top: _GLUON_OTHER_WARPS);
# num_stages is the ring's depth; a stacked BLOCK_M is three groups' rows; STORE_N the columns of
# each TMA store of the output (two buffers of them, where less than BLOCK_N, make room for one more
# stage). From sweeps on the nine shapes on the H200 (chapter 07), each the best of the Gluon
# kernels on some shape in one of them; launch_gluon times them all for each new problem, and where
# two are within the noise of each other, which one wins changes from run to run.
GLUON_CONFIGS = [_gluonconfig("cooperative", 128, 256, 128, 3, group_m=16, warps=8),
                 _gluonconfig("cooperative", 128, 256, 64, 6, warps=8),
                 _gluonconfig("cooperative", 128, 128, 128, 6),
                 _gluonconfig("pingpong", 128, 128, 128, 6, group_m=16, store_n=32),
                 _gluonconfig("pingpong", 128, 128, 128, 6, store_n=32),
                 _gluonconfig("stacked", 192, 128, 128, 4),
                 _gluonconfig("stacked", 192, 128, 128, 4, group_m=16),
                 _gluonconfig("cooperative", 128, 256, 128, 4, group_m=16, warps=8, store_n=64),
                 # with a split tail, timed only where split_plan cuts tiles: each won some of the
                 # shapes with K = 12288 and N = 3072 in a sweep on the H200 (chapter 07)
                 _gluonconfig("cooperative", 128, 256, 128, 4, group_m=16, warps=8, store_n=64, split=True),
                 _gluonconfig("cooperative", 128, 128, 128, 6, split=True),
                 _gluonconfig("stacked", 192, 128, 128, 4, split=True)]
GLUON_KERNELS = {"cooperative": gluon_ws_kernel, "pingpong": gluon_pingpong_kernel, "stacked": gluon_stacked_kernel}
# Consumer groups stacked along M in each tile (each its own partition, BLOCK_M // groups rows); the
# warps of the partitions beside the default one; and those warps counted in whole warp groups, as
# the registers are: the producer's warp is padded to a warp group.
GLUON_GROUPS = {"cooperative": 1, "pingpong": 1, "stacked": ws_gluon.STACKED_GROUPS.value}
GLUON_WORKERS = {"cooperative": ws_gluon.COOPERATIVE_WORKERS.value, "pingpong": ws_gluon.PINGPONG_WORKERS.value,
                 "stacked": ws_gluon.STACKED_WORKERS.value}
_GLUON_OTHER_WARPS = {kind: sum(-(-w // 4) * 4 for w in workers) for kind, workers in GLUON_WORKERS.items()}
_GLUON_KEYS = _WS_KEYS | {"KIND", "SPLIT", "STORE_N"}


def gluon_config(**wanted) -> triton.Config:
    """The one entry of GLUON_CONFIGS with the values ``wanted`` of its keys (``KIND="pingpong"``,
    ``BLOCK_N=256``, ...) and of ``num_warps`` and ``num_stages``: a configuration named by what it
    is, not by its place in the list. Raises ValueError unless exactly one matches."""
    def fields(c):
        return {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    names = sorted(fields(GLUON_CONFIGS[0]))
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"a Gluon configuration has no {unknown}: name some of {names}")
    found = [c for c in GLUON_CONFIGS if all(fields(c)[k] == v for k, v in wanted.items())]
    if len(found) != 1:
        raise ValueError(f"{len(found)} of GLUON_CONFIGS have {wanted}, not one: "
                         + "; ".join(describe_config(c) for c in found))
    return found[0]


def gluon_shared_bytes(config: triton.Config, out_bytes: int) -> int:
    """Shared memory of a Gluon kernel: the ring, the output buffers (``ws_gluon.output_buffers``
    for each consumer group: the whole tile's rows in a cooperative kernel, a third of them in each
    of the stacked kernel's groups, all of them in each of ping-pong's two; STORE_N columns) and
    the barriers (counting ping-pong's two ``turn`` barriers for every kind)."""
    k = config.kwargs
    ring = schedule.pipeline_smem(k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], config.num_stages)
    buffers = ws_gluon.output_buffers(k["STORE_N"], k["BLOCK_N"]) * (2 if k["KIND"] == "pingpong" else 1)
    outs = buffers * k["BLOCK_M"] * k["STORE_N"] * out_bytes
    return ring + outs + 8 * (2 * config.num_stages + 2)


def gluon_refuses(config: triton.Config, out_bytes: int = 2) -> str | None:
    """Why the Gluon kernels cannot run ``config`` (for an output of ``out_bytes`` per element), or None."""
    if not isinstance(config, triton.Config):
        return f"config must be a triton.Config, got {type(config).__name__}"
    k = config.kwargs
    if set(k) != _GLUON_KEYS or k["KIND"] not in GLUON_KERNELS or not isinstance(k["SPLIT"], bool):
        return (f"a Gluon configuration has the keys {sorted(_GLUON_KEYS)}, KIND one of {sorted(GLUON_KERNELS)} "
                f"and SPLIT a bool; got {k}")
    groups = GLUON_GROUPS[k["KIND"]]
    try:  # a stacked tile's BLOCK_M is checked below; the rest as for every kernel
        _check_config(config if groups == 1 else
                      triton.Config({**k, "BLOCK_M": 16}, num_warps=config.num_warps, num_stages=config.num_stages))
    except (TypeError, ValueError) as e:
        return str(e)
    if k["STORE_N"] not in [k["BLOCK_N"] // parts for parts in (1, 2, 4)] or isinstance(k["STORE_N"], bool):
        return (f"STORE_N, the columns of each store of the output, must be BLOCK_N ({k['BLOCK_N']!r}), "
                f"a half or a quarter of it; got {k['STORE_N']!r}")
    if k["STORE_N"] * out_bytes % 16:
        return (f"a TMA store moves rows of a multiple of 16 bytes: STORE_N x {out_bytes}-byte outputs is "
                f"{k['STORE_N'] * out_bytes} bytes")
    m = k["BLOCK_M"]
    if groups > 1 and (isinstance(m, bool) or not isinstance(m, int) or m % groups or m // groups < 16
                       or (m // groups) & (m // groups - 1)):
        return (f"the {k['KIND']} kernel stacks {groups} consumer groups, each on BLOCK_M / {groups} rows (a block of "
                f"A's descriptor): BLOCK_M must be {groups} times a power of two of at least 16, got {m!r}")
    warps = (4, 8) if k["KIND"] == "cooperative" else (4,)
    if config.num_warps not in warps:
        return (f"the {k['KIND']} kernel takes {' or '.join(map(str, warps))} consumer warps"
                + (f" in each of its {groups} groups" if groups > 1 else "") + f", got num_warps={config.num_warps}")
    rows = gluon_blocks(config)[0][0]
    if rows % (16 * config.num_warps) or k["BLOCK_N"] > 256 or k["BLOCK_K"] < 32:
        return (f"wgmma needs " + (f"each consumer group's rows (BLOCK_M / {groups})" if groups > 1 else "BLOCK_M")
                + f" a multiple of 16 x num_warps ({16 * config.num_warps}), BLOCK_N at most 256 and BLOCK_K at "
                f"least 32; got {k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}")
    per_thread = rows * k["BLOCK_N"] // (32 * config.num_warps)
    # ptxas compiles every partition for gluon_maxnreg's count; 40 beside the accumulator are what the
    # cooperative 128 x 256 configuration has (128 + 40 = 168), and it does not spill
    room = gluon_maxnreg(config) - 40
    if per_thread > min(128, room):
        return (f"the accumulator would take {per_thread} registers per thread (at most {min(128, room)} of the "
                f"{gluon_maxnreg(config)} that ptxas has leave room for the rest): use "
                + ("more warps or " if len(warps) > 1 else "") + "a smaller tile")
    if config.num_stages < 2:
        return f"the ring needs at least 2 buffers, got num_stages={config.num_stages}"
    need = gluon_shared_bytes(config, out_bytes)
    if need > schedule.SMEM_PER_PROGRAM_MAX:
        return (f"{need // 1024} KiB of shared memory with {out_bytes}-byte outputs, more than the "
                f"{schedule.SMEM_PER_PROGRAM_MAX // 1024} KiB a program may have: "
                + ("fewer stages" if config.num_stages > 2 else "smaller tiles"))
    return None


def gluon_maxnreg(config: triton.Config) -> int:
    """The registers per thread to compile for: the register file (64K) is shared by the default
    partition's consumer warps, the producer's warp group and the other consumer groups (ping-pong:
    one, stacked: two); the partitions then move registers among themselves with setmaxnreg, but
    ptxas compiles every one of them for this count."""
    warps = config.num_warps + _GLUON_OTHER_WARPS[config.kwargs["KIND"]]
    return min(255, 65536 // (32 * warps) // 8 * 8)


def fit_gluon_config(config: triton.Config, out_bytes: int) -> triton.Config:
    """``config`` with as many ring buffers as fit beside an output tile of ``out_bytes`` per element
    (at least 2: ``gluon_refuses`` says when even those do not fit)."""
    return _fit_stages(config, out_bytes, gluon_shared_bytes)


_GLUON_OUT = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def gluon_takes(ops: Operands, out: torch.Tensor) -> str | None:
    """Why the Gluon kernels cannot take this problem, or None: they need a Hopper GPU (Triton's
    interpreter cannot run Gluon) and what TMA needs."""
    why = _epilogue_scales_only("gluon")(ops, out)
    if why:
        return why
    if ops.a.dtype != torch.float8_e4m3fn or ops.b.dtype != torch.float8_e4m3fn:
        return (f"the Gluon kernels take float8_e4m3fn operands (the ones chapter 07 checks), got "
                f"{ops.a.dtype} and {ops.b.dtype}")
    if out.dtype not in _GLUON_OUT:
        return f"the Gluon kernels write bfloat16, float16 or float32, got {out.dtype}"
    if not ON_GPU or not out.is_cuda:
        return ("the Gluon kernels run on a Hopper GPU only, on CUDA tensors: Triton's interpreter cannot run "
                "Gluon, and FP8_TUTORIAL_MODE=compile only compiles")
    if torch.cuda.get_device_capability(out.device)[0] != 9:
        return "the Gluon kernels use Hopper's wgmma and setmaxnreg: they need compute capability 9.x"
    return _tma_takes(ops, out)


# Which configuration launch_gluon chose for each problem seen on this GPU.
_gluon_choice: dict[tuple, triton.Config] = {}


def gluon_blocks(config: triton.Config) -> tuple[list[int], list[int], list[int]]:
    """The blocks of A's, W's and C's descriptors: one consumer group's rows of a tile for A and C,
    and STORE_N columns, one store's, for C."""
    k = config.kwargs
    rows = k["BLOCK_M"] // GLUON_GROUPS[k["KIND"]]
    return [rows, k["BLOCK_K"]], [k["BLOCK_N"], k["BLOCK_K"]], [rows, k["STORE_N"]]


def gluon_plan(config: triton.Config, M: int, N: int, K: int, num_sms: int) -> tuple[int, int]:
    """(whole tiles, pieces per other tile) for a Gluon launch: ``split_plan``'s with SPLIT, else all
    the tiles whole."""
    k = config.kwargs
    tiles = tile_count(M, N, k)
    return _split_plan(tiles, triton.cdiv(K, k["BLOCK_K"]), num_sms) if k["SPLIT"] else (tiles, 1)


def launch_gluon(ops: Operands, out: torch.Tensor, precise: bool, config: triton.Config | None = None,
                 num_sms: int | None = None, plan: tuple[int, int] | None = None,
                 kernels: dict | None = None) -> Launch:
    """Run a Gluon kernel (``config``'s KIND: one of ``GLUON_KERNELS``) into ``out``, descriptors
    built here; without ``config``, the first launch for a problem times each of GLUON_CONFIGS
    (cut to the stages that fit) and keeps the fastest. A SPLIT configuration cuts the tiles of
    the last wave by ``plan`` (default ``gluon_plan``'s) and adds up the pieces with
    ``sum_pieces_kernel`` after the launch. ``kernels`` (by KIND, with a ``config``) replaces
    GLUON_KERNELS: ``kernels.ablation``'s variants, which time what part of the work costs. Raises
    ValueError where ``gluon_takes`` or ``gluon_refuses`` says no, or for a plan without a SPLIT
    configuration."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    why = gluon_takes(ops, out)
    if why:
        raise ValueError(why)
    num_sms = _programs(out, num_sms, None)
    if config is not None:
        why = gluon_refuses(config, out.element_size())
        if why:
            raise ValueError(why)
    if kernels is not None and config is None:
        raise ValueError("kernels replace GLUON_KERNELS for one configuration: pass config= too")
    if plan is not None and (config is None or not config.kwargs["SPLIT"]):
        raise ValueError("a plan needs a configuration with SPLIT=True (gemm._gluonconfig(..., split=True))")
    flags = ops.flags(precise)
    M, N, K = ops.M, ops.N, ops.K

    def run(cfg):
        k = cfg.kwargs
        a_block, b_block, c_block = gluon_blocks(cfg)
        fp8 = gl.float8e4nv  # gluon_takes refuses e5m2
        descriptors = (
            TensorDescriptor.from_tensor(ops.a, a_block, gl.NVMMASharedLayout.get_default_for(a_block, fp8)),
            TensorDescriptor.from_tensor(ops.b.t(), b_block, gl.NVMMASharedLayout.get_default_for(b_block, fp8)),
            TensorDescriptor.from_tensor(out, c_block, gl.NVMMASharedLayout.get_default_for(
                c_block, getattr(gl, _GLUON_OUT[out.dtype]))))
        tiles = tile_count(M, N, k)
        if plan is None:
            whole, pieces = gluon_plan(cfg, M, N, K, num_sms)
        else:
            whole, pieces = check_plan(plan, tiles, triton.cdiv(K, k["BLOCK_K"]))
        rest = tiles - whole
        # one float32 slot per piece of each split tile, none used unsplit (no counts: the pieces are
        # added up by sum_pieces_kernel, after the launch)
        partials, _ = _streamk_workspace(out.device, rest * pieces * k["BLOCK_M"] * k["BLOCK_N"] if pieces > 1 else 1, 1)
        programs = min(num_sms, whole + rest * pieces)
        compiled = (kernels or GLUON_KERNELS)[k["KIND"]][(programs,)](
            *descriptors, *ops.packed_scales, partials, M, N, K, whole, pieces, k["GROUP_M"], cfg.num_stages,
            **flags, SPLIT=k["SPLIT"], num_warps=cfg.num_warps, maxnreg=gluon_maxnreg(cfg))
        if pieces > 1:
            sum_pieces_kernel[(rest, k["BLOCK_M"] // 32)](
                partials, out, *ops.packed_scales, M, N, whole, pieces, out.stride(0), out.stride(1),
                k["BLOCK_M"], k["BLOCK_N"], k["GROUP_M"], flags["ROW_A"], flags["ROW_B"], 32, num_warps=4)
        return Launch(cfg, compiled)

    if config is not None:
        return run(config)
    key = (M, N, K, *flags.values(), num_sms, ops.a.dtype, out.dtype)
    if key not in _gluon_choice:
        candidates = [fit_gluon_config(c, out.element_size()) for c in GLUON_CONFIGS]
        # a SPLIT configuration whose plan cuts no tile is its plain one: not timed twice
        candidates = [c for c in candidates if gluon_refuses(c, out.element_size()) is None
                      and (not c.kwargs["SPLIT"] or gluon_plan(c, M, N, K, num_sms)[1] > 1)]
        _gluon_choice[key] = _fastest(candidates, run)
    return run(_gluon_choice[key])


# First where it can run (a Hopper GPU, e4m3 operands, scales per tensor or per row, what TMA takes):
# chapter 07 measured it at 0.997 to 1.157x the best kernel without specialization, and ahead of the
# TMA kernel, the next choice, on 17 of its 18 cells. Elsewhere it refuses, and "auto" says why.
@register_kernel("gluon", gluon_takes, priority=13)
def _gluon(ops: Operands, out: torch.Tensor, precise: bool) -> None:
    launch_gluon(ops, out, precise)


# ---- the public entry point --------------------------------------------------------------------

def _overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of a 2-D tensor share memory (an expanded view, say)."""
    dims = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1)
    if not dims:
        return False
    if dims[0][0] == 0:
        return True
    return len(dims) == 2 and dims[1][0] < dims[0][0] * dims[0][1]


def _check_out(out, ops: Operands, out_dtype) -> None:
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


def _output(ops: Operands, out_dtype: torch.dtype, out: torch.Tensor | None) -> torch.Tensor:
    """``out`` checked against the operands and ``out_dtype``, or a new (M, N) tensor of it."""
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
    if out is None:
        return torch.empty((ops.M, ops.N), dtype=out_dtype, device=ops.a.device)
    _check_out(out, ops, out_dtype)
    return out


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              out_dtype: torch.dtype = torch.bfloat16, kernel: str = "auto", precise: bool = False,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a.float() * scale_a) @ (b.float() * scale_b)`` in ``out_dtype`` (module docstring).

    ``precise=True`` promotes partial sums to float32 every 128 values of K (cuBLAS's
    ``use_fast_accum=False``); the default accumulates in the tensor cores' own precision.
    ``kernel`` names a registered kernel (``fp8_tutorial.gemm.KERNELS``) or is "auto"; ``out``,
    if given, is an (M, N) tensor of ``out_dtype`` to write into.
    """
    ops = check_operands(a, b, scale_a, scale_b)
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
    chosen.run(ops, out, precise)
    return out


# ---- as a benchmark contender ----------------------------------------------------------------

def fixed_launch(launch: Callable, p, precise: bool = False, **kw) -> Callable[[], torch.Tensor]:
    """A timed callable for ``bench.benchmark``: ``launch`` (``launch_tiled``, ``launch_tma``, ...)
    on problem ``p`` (``contenders.make_problem``) with fixed keywords, such as ``config=`` to skip
    the autotuner, into one preallocated bfloat16 output, which it returns."""
    ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
    out = torch.empty((p.M, p.N), dtype=torch.bfloat16, device=p.a.device)

    def run():
        launch(ops, out, precise, **kw)
        return out
    return run


def _register_contenders() -> None:
    from .contenders import register

    def contender(name: str, description: str):
        @register(name, ["tensor", "row"], description=description)
        def build(p, precise: bool):
            out = torch.empty((p.M, p.N), dtype=torch.bfloat16, device=p.a.device)
            return lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, kernel=name, precise=precise, out=out)

    contender("tiled", "fp8_tutorial.kernels.tiled: one program per tile")
    contender("persistent", "fp8_tutorial.kernels.persistent: one program per SM, walking tiles")
    contender("tma", "fp8_tutorial.kernels.tma: persistent, TMA loads and stores")
    contender("ws", "fp8_tutorial.kernels.ws: the TMA kernel warp-specialized (a TMA producer, wgmma consumers)")
    contender("gluon", "fp8_tutorial.kernels.ws_gluon: warp specialization written in Gluon (a TMA producer warp, "
                       "cooperative or ping-pong wgmma consumers)")
    contender("streamk", "fp8_tutorial.kernels.persistent.streamk_kernel: K iterations shared equally, "
                         "TMA loads where the 16-byte rule holds")


_register_contenders()
