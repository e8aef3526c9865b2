"""The host side that every kernel family's launcher shares: the checked operands, configurations
and how they are checked, fitted and pruned, grids, workspaces, autotuning, and the direct launch
of a compiled kernel that a plan (``fp8_tutorial.gemm``) calls on every call after its first.

Nothing here imports the entry module (``fp8_tutorial.gemm``) or what measures the kernels
(``fp8_tutorial.measure``, but for the timing of candidates on a problem's first call).
"""

from __future__ import annotations

import copy
import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch
import triton

from .._env import DEVICE, ON_GPU
from .compat import DIRECT_LAUNCH

#: Shared memory per SM of a Hopper GPU, and the most one program may have.
SMEM_PER_SM = 228 * 1024
SMEM_PER_PROGRAM_MAX = 227 * 1024


def pipeline_smem(block_m: int, block_n: int, block_k: int, stages: int, elem_bytes: int = 1) -> int:
    """Shared memory of the operand ring: one A and one B tile per stage (FP8: one byte each)."""
    return (block_m + block_n) * block_k * stages * elem_bytes


@dataclass(frozen=True)
class Operands:
    """Validated inputs (``fp8_tutorial.gemm.check_operands``): ``recipe_a``/``recipe_b`` are
    "tensor", "row" or "block"."""

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


@dataclass(frozen=True)
class Launch:
    """What ran: the configuration, and the compiled kernel (None in the interpreter), whose
    ``n_regs``, ``metadata.shared`` and ``asm`` show what the compiler made of it."""

    config: triton.Config
    kernel: object | None


# ---- configurations ------------------------------------------------------------------------------

def check_config(config: triton.Config) -> None:
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


def fit_stages(config: triton.Config, out_bytes: int, shared_bytes) -> triton.Config:
    """``config`` with its stages cut, down to 2, until ``shared_bytes(config, out_bytes)`` fits
    in a program's shared memory."""
    fitted = config
    while shared_bytes(fitted, out_bytes) > SMEM_PER_PROGRAM_MAX and fitted.num_stages > 2:
        fitted = triton.Config(dict(fitted.kwargs), num_warps=fitted.num_warps, num_stages=fitted.num_stages - 1)
    return fitted


def prune(configs, named_args, **kwargs):
    """Drop tiles far larger than the problem: a 128-row tile for M = 16 only wastes work."""
    M, N = named_args["M"], named_args["N"]
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= max(64, triton.next_power_of_2(M))
            and c.kwargs["BLOCK_N"] <= max(64, triton.next_power_of_2(N))]
    return kept or configs[-1:]


def prune_to_smallest(configs, named_args, **kwargs):
    """``prune`` for lists that do not end with their smallest tile (the tiled kernel's does):
    where no tile is small enough, the smallest one is kept, with the fewest stages."""
    largest_first = sorted(configs, key=lambda c: (c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"], c.num_stages),
                           reverse=True)
    return prune(largest_first, named_args)


def config_dict(config: triton.Config) -> dict:
    """A configuration as plain numbers, for results files."""
    return dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def describe_config(config: triton.Config | dict) -> str:
    if hasattr(config, "describe"):  # a kernel family's own configuration (swapped.SwappedConfig)
        return config.describe()
    k = config_dict(config) if isinstance(config, triton.Config) else config
    return ((f"{k['KIND']}, " if "KIND" in k else "") + f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} tiles, "
            f"GROUP_M {k['GROUP_M']}, {k['num_warps']} warps, {k['num_stages']} stages"
            + (", host-side descriptors" if k.get("host_descriptors") else "")
            + (", split tail" if k.get("SPLIT") else "")
            + (f", stores of {k['STORE_N']} columns" if k.get("STORE_N", k["BLOCK_N"]) != k["BLOCK_N"] else ""))


# ---- tuning --------------------------------------------------------------------------------------

def _tuning_bench(kernel_call, quantiles):
    """The autotuner's timing: 5 ms of warm-up and 20 ms of runs per configuration (L2 flushed)."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


def fastest(candidates: list, run: Callable) -> Any:
    """The candidate for which ``run(candidate)`` is fastest, timed by the book's harness
    (``measure.bench.benchmark``): the candidates interleaved (so that the clock, which falls as
    the GPU warms to its power limit, weighs on all alike rather than on the last timed), the L2
    flushed, the median of 20 runs. Only a problem's first call times anything."""
    from ..measure.bench import benchmark

    timed = benchmark({str(i): (lambda c=c: run(c)) for i, c in enumerate(candidates)}, reps=20, warmup=2)
    return candidates[min(range(len(candidates)), key=lambda i: timed[str(i)].median_ms)]


def fitting(candidates: list, run: Callable) -> list:
    """The candidates that this GPU has the shared memory and registers for: each run once, and
    left out where Triton raises OutOfResources (a stage count that the H200's 227 KiB hold and
    an Ada GPU's 99 KiB do not, say). RuntimeError where none fits."""
    fits = []
    for c in candidates:
        try:
            run(c)
        except triton.runtime.errors.OutOfResources:
            continue
        fits.append(c)
    if not fits:
        raise RuntimeError(f"none of the {len(candidates)} configurations fits this GPU's resources: {candidates}")
    return fits


def autotuned(kernel, configs, key: list[str], prune=prune, **extra):
    """``kernel`` autotuned over ``configs`` (pruned to the problem's size), one choice per M, N, K,
    recipe, accumulation and the ``key`` switches; None without a GPU."""
    if not ON_GPU:
        return None
    return _autotune(kernel, configs, ["M", "N", "K", "ROW_A", "ROW_B", "PRECISE", *key], prune, **extra)


def _autotune(kernel, configs, keys: list[str], prune, **extra):
    """Triton's autotuner over ``configs``, keyed by ``keys``, pruned by ``prune`` (None: not at
    all), timed by ``_tuning_bench``."""
    pruning = {"early_config_prune": prune} if prune else None
    return triton.autotune(configs=configs, key=keys, prune_configs_by=pruning, do_bench=_tuning_bench, **extra)(kernel)


def unflattened(config: triton.Config) -> triton.Config:
    """``config`` with FLATTEN off. What Triton 3.6 compiles for a flattened tile loop over pointers
    that do not step along K one element at a time is not safe: on the H200 the persistent
    kernel's 6-stage configuration, with a row-major b and K = 1040, read b far outside its memory
    in every process that ran it (an illegal memory access), where the same configuration
    unflattened, and every configuration with a K-major b, ran right. ``launch`` therefore runs
    operands that are not both K-major unflattened."""
    flat = copy.copy(config)  # num_ctas, maxnreg and hooks as they were
    flat.kwargs = {**config.kwargs, "FLATTEN": False}
    return flat


def _k_major(kernel, args: tuple) -> bool:
    """Whether a kernel that may flatten its tile loop (a FLATTEN parameter) reads a and b along K
    one element at a time (its ``stride_ak`` and ``stride_bk`` arguments are 1); True for others."""
    names = kernel.arg_names
    if "FLATTEN" not in names or "stride_ak" not in names or "stride_bk" not in names:
        return True
    return args[names.index("stride_ak")] == 1 and args[names.index("stride_bk")] == 1


_unflattened_tuners: dict = {}  # by autotuner


def unflattened_tuner(tuned):
    """An autotuner like ``tuned`` (the same kernel, keys and pruning) over its configurations
    unflattened, made once per autotuner."""
    if tuned not in _unflattened_tuners:
        _unflattened_tuners[tuned] = _autotune(tuned.fn, [unflattened(c) for c in tuned.configs], tuned.keys,
                                               tuned.early_config_prune)
    return _unflattened_tuners[tuned]


def launch(kernel, tuned, interpreter_config: triton.Config, grid, args: tuple, flags: dict,
           config: triton.Config | None, K: int | None = None) -> Launch:
    """Launch ``kernel`` with ``config``; without one, through its autotuner ``tuned``, or with
    ``interpreter_config`` where there is none. ``grid(meta)`` sizes the grid. Given ``K``, EVEN_K
    is decided for the configuration's BLOCK_K (128 for every tuned one). Operands that are not
    both K-major run with FLATTEN off, a given ``config`` too (``unflattened`` says why): the Launch
    returned names the configuration that ran."""
    if config is None and tuned is None:
        config = interpreter_config
    if config is not None:
        check_config(config)
    if not _k_major(kernel, args):
        if config is not None and config.kwargs.get("FLATTEN"):
            config = unflattened(config)
        elif config is None:
            tuned = unflattened_tuner(tuned)
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


# ---- what kernels refuse, and what they need -----------------------------------------------------

def epilogue_scales_only(name: str):
    """The refusal of a kernel that applies per-tensor and per-row scales in its epilogue."""
    def refuses(ops: Operands, out: torch.Tensor) -> str | None:
        if "block" in (ops.recipe_a, ops.recipe_b):
            return f"the {name} kernel applies per-tensor and per-row scales only, once, after the K loop"
        if ops.a.is_cuda and capability(ops.a.device) < (8, 9):
            return "FP8 tensor cores need compute capability 8.9 or newer"
        return None
    return refuses


@functools.lru_cache(maxsize=None)
def capability(device: torch.device) -> tuple[int, int]:
    """The compute capability of a CUDA device, asked of the driver once per device."""
    return torch.cuda.get_device_capability(device)


@functools.lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


INT32_MAX = 2**31 - 1


def wide_offsets(ops: Operands, out: torch.Tensor) -> tuple[bool, bool, bool]:
    """Which of a, b and out the pointer kernels cannot step through with 32-bit offsets: along K
    (in a and b) and along N (in out), a step times the length could pass 2^31 (a column-major
    ``a`` of 16 million rows, say). A program's offsets run a tile past the end before masking."""
    reach = ops.K + 256
    return (reach * ops.a.stride(1) > INT32_MAX, reach * ops.b.stride(0) > INT32_MAX,
            (ops.N + 256) * out.stride(1) > INT32_MAX)


def pointer_safe(ops: Operands, out: torch.Tensor) -> tuple[Operands, torch.Tensor]:
    """The operands as the pointer kernels can take them (``wide_offsets``): where a tensor is too
    widely strided, a copy laid out with unit steps, and an output to copy back from."""
    wide_a, wide_b, wide_c = wide_offsets(ops, out)
    a = ops.a.contiguous() if wide_a else ops.a
    b = ops.b.t().contiguous().t() if wide_b else ops.b
    c = torch.empty(out.shape, dtype=out.dtype, device=out.device) if wide_c else out
    if a is ops.a and b is ops.b:
        return ops, c
    return Operands(a, b, ops.scale_a, ops.scale_b, ops.recipe_a, ops.recipe_b), c


_allocator_set = False


def ensure_allocator() -> None:
    """Device-side descriptors live in a scratch buffer that Triton asks the program for."""
    global _allocator_set
    if not _allocator_set:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=DEVICE))
        _allocator_set = True


# ---- grids ---------------------------------------------------------------------------------------

def programs(out: torch.Tensor, num_sms, config: triton.Config | None) -> int:
    """The SM count a persistent launch plans for (the GPU's, or 4 in the interpreter), checked,
    as is the configuration's programs per SM: an empty grid would leave ``out`` unwritten."""
    if config is not None:
        check_config(config)
    if num_sms is None:
        return sm_count(out.device) if out.is_cuda else 4
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


# ---- workspaces ----------------------------------------------------------------------------------

_workspaces: dict = {}
_retired: list = []  # workspaces replaced or forgotten on a GPU, kept alive (see ``_retire``)
_changes = [0]  # how many times a workspace was replaced or forgotten (``PlanWorkspace`` looks)


def _indexed(device: torch.device) -> torch.device:
    """``device`` with its index ("cuda" means the current device)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _workspace_key(device: torch.device) -> tuple:
    device = _indexed(device)
    return device, torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0


def workspace(device: torch.device, partial_elems: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 partial tiles and zeroed arrival counts for kernels whose programs meet over a tile
    (stream-K, split-K in step, split tails), kept per device and stream and grown as needed (to
    twice the old size at least): the kernels leave every count at zero again, so one zeroing at
    allocation serves all later launches on that stream (launches on one stream run one after
    another). They are allocated outside any CUDA graph's memory pool (``_kept``), as they outlive
    the call; but for what a CUDA graph's capture must allocate (``_lookup``)."""
    return _lookup(device, partial_elems, tiles)[:2]


def _capturing(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def _lookup(device: torch.device, partial_elems: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``workspace``'s tensors, and whether they are the ones kept for later calls. What must be
    allocated while a CUDA graph is captured comes from that graph's pool, its zeroing a part of
    that graph only: it serves this capture alone and is not kept (a later graph, or a call after
    the capture, would find counts that only this graph's replays set to zero)."""
    device = _indexed(device)  # the helper thread's current device is its own
    key = _workspace_key(device)
    partials, arrivals = _workspaces.get(key, (None, None))
    grow_partials = partials is None or partials.numel() < partial_elems
    grow_arrivals = arrivals is None or arrivals.numel() < tiles
    if (grow_partials or grow_arrivals) and _capturing(device):
        if grow_partials:
            partials = torch.empty(partial_elems, dtype=torch.float32, device=device)
        if grow_arrivals:
            arrivals = torch.zeros(tiles, dtype=torch.int32, device=device)
        return partials, arrivals, False
    if grow_partials:
        size = max(partial_elems, 2 * partials.numel() if partials is not None else 0)
        _retire(partials)
        partials = _kept(device, lambda: torch.empty(size, dtype=torch.float32, device=device))
    if grow_arrivals:
        size = max(tiles, 2 * arrivals.numel() if arrivals is not None else 0)
        _retire(arrivals)
        arrivals = _kept(device, lambda: torch.zeros(size, dtype=torch.int32, device=device))
    _workspaces[key] = (partials, arrivals)
    return partials, arrivals, True


def _kept(device: torch.device, allocate: Callable[[], torch.Tensor]) -> torch.Tensor:
    """A tensor that outlives the call that makes it, allocated by a helper thread: while a CUDA
    graph is warmed up or recorded (``torch.compile``'s "reduce-overhead" does both), what this
    thread allocates comes from the graph's private pool, which must hold nothing but the graph's
    own tensors. The helper works on the device's default stream, and the current stream waits for
    it (so never during a capture, where that wait cannot be recorded: ``_lookup``). A normal tensor
    either way, also for a first call under ``torch.inference_mode`` (an inference tensor could not
    be written in place by a later call outside it: the interpreter writes its arguments back)."""
    if device.type != "cuda":
        with torch.inference_mode(False):
            return allocate()
    made: list = []

    def work():
        try:
            made.append(allocate())
        except BaseException as e:  # raised again below, in the caller's thread
            made.append(e)
    helper = threading.Thread(target=work)
    helper.start()
    helper.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    torch.cuda.current_stream(device).wait_stream(torch.cuda.default_stream(device))
    return made[0]


def _retire(t: torch.Tensor | None) -> None:
    """A workspace let go: on a GPU it is kept alive, never freed, as a CUDA graph recorded with it
    replays into its memory (and kernels queued on the stream may still use it)."""
    _changes[0] += 1
    if t is not None and t.is_cuda:
        _retired.append(t)


class PlanWorkspace:
    """``workspace(device, partial_elems, tiles)`` for every call of one plan: looked up again only
    when the current stream has changed or a workspace was replaced or forgotten since (what the
    lookup costs, a few microseconds of a call's host time, is then paid once). What it keeps is
    one tuple, replaced whole, so that threads calling the plan on their own streams never pair one
    stream with another's workspace; a workspace made for one capture is not kept (nor held)."""

    __slots__ = ("device", "sizes", "kept")

    def __init__(self, device: torch.device, partial_elems: int, tiles: int):
        self.device, self.sizes = _indexed(device), (partial_elems, tiles)
        self.kept = (None, -1, None)  # (stream, changes, (partials, arrivals))

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        stream = torch._C._cuda_getCurrentRawStream(self.device.index)
        kept = self.kept
        if kept[0] != stream or kept[1] != _changes[0]:
            partials, arrivals, lasting = _lookup(self.device, *self.sizes)
            if not lasting:  # a capture's own: held here, it would outlive the graph's tensors
                return partials, arrivals
            kept = self.kept = (stream, _changes[0], (partials, arrivals))
        return kept[2]


def forget_workspace(device: torch.device) -> None:
    """A launch cut short may leave arrival counts behind: the next one starts afresh."""
    _changes[0] += 1
    for t in _workspaces.pop(_workspace_key(device), ()):
        _retire(t)


# ---- the direct launch ---------------------------------------------------------------------------

class Box:
    """What Triton's launcher reads of a host-side TMA descriptor (it encodes the TMA descriptor
    from these at each launch): a plan fixes shape and strides and swaps in each call's tensor."""

    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, base, shape, strides):
        self.base, self.shape, self.strides, self.padding = base, shape, strides, "zero"


def _raw_launch(launcher):
    """The C function beneath Triton 3.6's launcher and the TMA metadata of each host-side
    descriptor argument (by position), or None where the launcher does more than call it
    (scratch memory to allocate) or is laid out otherwise (another Triton): then the plan goes
    through the launcher itself."""
    if getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1):
        return None
    fn = getattr(launcher, "launch", None)
    code = getattr(fn, "__code__", None)
    if code is None:  # no descriptors: the launcher calls the C function as it is
        return (fn, {}) if callable(fn) else None
    free = dict(zip(code.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))
    needed = {"launcher", "tensordesc_indices", "tensordesc_meta"}
    if not needed <= free.keys() or not free["tensordesc_meta"]:
        return None
    return free["launcher"], dict(zip(sorted(free["tensordesc_indices"]), free["tensordesc_meta"]))


class Direct:
    """A compiled kernel launched without Triton's JIT dispatch (binding and specializing the
    arguments, hashing them into its cache key, checking globals, building launch metadata): what
    ``kernel[grid](...)`` costs on every call beyond the launch itself.

    The caller promises arguments that specialize as the first launch's did (the plan's key holds
    every shape, stride, dtype and 16-byte alignment). ``binder`` fixes all the kernel's parameters
    but the few that change from call to call (the tensors), constexprs included (the launcher
    skips them). ``descriptors`` names the host-side TMA descriptor parameters, with the shape and
    strides a plan fixes: each call passes their base tensors, and the encoded descriptor of each
    base address is kept (a weight's never changes; an activation's comes back with the caching
    allocator's blocks), so that the driver encodes a descriptor once, not at every launch. That
    holds where ``_raw_launch`` finds Triton 3.6's C launch function and no profiler's hooks are
    set; otherwise the call goes through Triton's launcher, which encodes them at every launch."""

    _KEPT = 16  # encoded descriptors kept per parameter

    def __init__(self, jit_fn, compiled, device: torch.device, descriptors: dict | None = None):
        if not DIRECT_LAUNCH:
            raise RuntimeError(f"host.Direct lays out a launch's arguments as Triton 3.6's launcher takes them; this "
                               f"is Triton {triton.__version__} (compat.DIRECT_LAUNCH)")
        from triton import knobs
        from triton.backends.nvidia.driver import make_tensordesc_arg
        from triton.runtime.driver import driver

        self.names = list(jit_fn.arg_names)
        self.defaults = {p.name: p.default for p in jit_fn.params if p.has_default}
        self._knobs = knobs.runtime
        self._stream = driver.active.get_current_stream
        self._device = device.index if device.index is not None else torch.cuda.current_device()
        launcher = compiled.run  # loads the module and builds the launcher now
        self._run, self._function, self._packed = launcher, compiled.function, compiled.packed_metadata
        self._compiled = compiled
        self._descriptors = dict(sorted((self.names.index(n), shape)
                                        for n, shape in (descriptors or {}).items()))
        raw = _raw_launch(launcher)
        if raw is not None and set(raw[1]) != set(self._descriptors):
            raw = None  # descriptors the plan does not know of: let the launcher encode them
        self._raw, self._metas = raw if raw is not None else (None, {})
        self._encoded = {i: {} for i in self._descriptors}
        self._make = make_tensordesc_arg
        self._flags = (getattr(launcher, "launch_cooperative_grid", False),
                       getattr(launcher, "launch_pdl", False))

    def binder(self, fixed: dict, changing: list[str]) -> Callable[..., list]:
        """``bind(*values)``: the arguments in the kernel's order, ``changing`` (names) given and
        the others taken from ``fixed`` or the parameters' defaults."""
        template = [fixed[n] if n in fixed else self.defaults.get(n) for n in self.names]
        missing = [n for n in self.names if n not in fixed and n not in changing and n not in self.defaults]
        if missing:
            raise ValueError(f"no values for {missing}")
        at = [self.names.index(n) for n in changing]

        def bind(*values):
            args = template[:]
            for i, v in zip(at, values):
                args[i] = v
            return args
        return bind

    def launcher(self, grid: tuple, fixed: dict, changing: list[str]) -> Callable[..., None]:
        """``launch(*tensors)``: one launch on ``grid``, ``changing`` (names, each given a tensor on
        every call) and the other parameters as ``binder`` takes them. Where the C launch function is
        at hand, the arguments are laid out once as it takes them, and a call fills in its few
        places: each descriptor's encoded tensor map, shape and strides (``_encode``), each other
        tensor's address as an integer (which the launcher takes without asking the driver what it
        points at: the plan's key holds every tensor's device). Otherwise, or while a profiler's
        hooks are set, each call goes through ``__call__``."""
        bind = self.binder(fixed, changing)
        grid = (tuple(grid) + (1, 1))[:3]
        if self._raw is None:
            def launch(*values):
                self(grid, bind(*values))
            return launch
        template, start = [], []
        for i, v in enumerate(bind(*[None] * len(changing))):  # each parameter's place in the flat list
            start.append(len(template))
            if i in self._descriptors:
                shape, strides = self._descriptors[i]
                template += [None] * (1 + len(shape) + len(strides))
            else:
                template.append(v)
        start.append(len(template))
        slots = []
        for n in changing:
            i = self.names.index(n)
            slots.append((start[i], start[i + 1], i if i in self._descriptors else None))
        raw, function, packed, (cooperative, pdl) = self._raw, self._function, self._packed, self._flags
        stream, device, knobs, encode = self._stream, self._device, self._knobs, self._encode

        def launch(*values):
            if _hooked(knobs.launch_enter_hook) or _hooked(knobs.launch_exit_hook):
                return self(grid, bind(*values))
            flat = template[:]
            for (first, end, i), v in zip(slots, values):
                if i is None:
                    flat[first] = v.data_ptr()
                else:
                    flat[first:end] = encode(i, v)
            raw(grid[0], grid[1], grid[2], stream(device), function, cooperative, pdl, None, None, packed,
                None, None, None, *flat)
        return launch

    def _encode(self, i: int, base: torch.Tensor) -> list:
        kept = self._encoded[i]
        ptr = base.data_ptr()
        found = kept.get(ptr)
        if found is None:
            found = self._make(Box(base, *self._descriptors[i]), self._metas[i])
            if any(isinstance(x, torch.Tensor) for x in found):
                return found  # no tensor map, the tensor itself: keeping it would keep the tensor alive
            if len(kept) >= self._KEPT:
                kept.clear()
            kept[ptr] = found
        return found

    def __call__(self, grid: tuple, args: list) -> None:
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = self._stream(self._device)
        enter, leave = self._knobs.launch_enter_hook, self._knobs.launch_exit_hook
        hooked = _hooked(enter) or _hooked(leave)
        if self._raw is not None and not hooked:
            flat, last = [], 0
            for i in self._descriptors:  # in the order of the parameters
                flat += args[last:i]
                flat += self._encode(i, args[i])
                last = i + 1
            flat += args[last:]
            self._raw(grid[0], g1, g2, stream, self._function, *self._flags, None, None, self._packed,
                      None, None, None, *flat)
            return
        for i, shape in self._descriptors.items():
            args[i] = Box(args[i], *shape)
        if not hooked:
            self._run(grid[0], g1, g2, stream, self._function, self._packed, None, None, None, *args)
        else:  # a profiler's hooks (Proton, say) see the launch as they would see the JIT's
            metadata = self._compiled.launch_metadata(grid, stream, *args)
            self._run(grid[0], g1, g2, stream, self._function, self._packed, metadata, enter, leave, *args)


def _hooked(hook) -> bool:
    """Whether a Triton launch hook would do anything: None, or (Triton 3.6) an empty chain, not."""
    return bool(getattr(hook, "calls", hook))
