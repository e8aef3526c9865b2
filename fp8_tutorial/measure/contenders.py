"""Problems and contenders: what the benchmark runs.

A *problem* is one shape and one scaling recipe, with its operands prepared once: random bf16
``x`` (M, K) and ``w`` (N, K), quantized as the recipe says, and the float64 product that every
contender's output is checked against. A *contender* turns a problem into a zero-argument callable
that computes the product. Contenders are registered, so a chapter that writes a kernel registers
it, and ``python -m fp8_tutorial bench`` times it against cuBLAS, the baseline of every recipe.

Recipes follow ``torch._scaled_mm``'s conventions (DESIGN.md): ``a`` (M, K) row-major FP8,
``b`` (K, N) column-major FP8, float32 dequantization scales

| recipe     | scale_a        | scale_b          |
|------------|----------------|------------------|
| "bf16"     | -              | -                |   (no quantization: torch.mm of the bf16 inputs)
| "tensor"   | ()             | ()               |
| "row"      | (M, 1)         | (1, N)           |
| "block"    | (M, K/128)     | (K/128, N/128)   |   (1x128 activation groups, 128x128 weight blocks)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .._env import DEVICE
from ..checks import reference_mm
from ..quant import quantize

RECIPES = ("bf16", "tensor", "row", "block")
ACCUMULATIONS = ("fast", "precise")
#: The eight reference shapes: M in 512, 1152, 2304, 4608 with (K, N) = (3072, 12288) and (12288, 3072).
SEED_SHAPES = [(M, K, N) for M in (512, 1152, 2304, 4608) for K, N in ((3072, 12288), (12288, 3072))]
BASELINE = "cublas"


def shape_name(M: int, K: int, N: int) -> str:
    return f"{M}x{K}x{N}"

_GRANULARITY = {"tensor": ("tensor", "tensor"), "row": ("row", "row"), "block": ("1x128", "128x128")}


@dataclass
class Problem:
    M: int
    K: int
    N: int
    recipe: str
    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor | None
    scale_b: torch.Tensor | None
    reference: torch.Tensor  # float64 (M, N), or (len(rows), N): the rows ``rows`` of it
    rows: torch.Tensor | None = None  # the rows of the output that ``reference`` holds; None: all

    def checked(self, out: torch.Tensor) -> torch.Tensor:
        """The rows of ``out`` that ``reference`` holds."""
        return out if self.rows is None else out[self.rows]

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def shape(self) -> str:
        return shape_name(self.M, self.K, self.N)


def make_problem(M: int, K: int, N: int, recipe: str, device=None, seed: int | None = None,
                 reference_rows: int | None = None) -> Problem:
    """Random inputs for one shape and recipe (fresh each call unless ``seed`` is given). With
    ``reference_rows``, the float64 reference holds at most that many rows of the output, evenly
    spread (``Problem.rows``): on the largest problems the full float64 product takes longer than
    everything else measured on them."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}: expected one of {', '.join(RECIPES)}")
    if recipe == "block" and (K % 128 or N % 128):
        raise ValueError(f"the block recipe needs K and N divisible by 128, got K={K}, N={N}")
    device = torch.device(device) if device is not None else DEVICE
    g = torch.Generator(device=device)
    g.manual_seed(seed) if seed is not None else g.seed()
    x = torch.randn(M, K, device=device, generator=g).to(torch.bfloat16)
    w = torch.randn(N, K, device=device, generator=g).to(torch.bfloat16)
    if recipe == "bf16":
        a, b = x, w.t()
        return Problem(M, K, N, recipe, a, b, None, None, reference_mm(a, b))
    gran_a, gran_b = _GRANULARITY[recipe]
    a, scale_a = quantize(x, gran_a)
    wq, scale_w = quantize(w, gran_b)
    b, scale_b = wq.t(), scale_w.t()  # (K, N) column-major; (1, N) or (K/128, N/128)
    if reference_rows is None or reference_rows >= M:
        return Problem(M, K, N, recipe, a, b, scale_a, scale_b, reference_mm(a, b, scale_a, scale_b))
    rows = torch.linspace(0, M - 1, reference_rows, device=device).round().long().unique()
    sub_a = scale_a if scale_a.numel() == 1 else scale_a[rows]
    return Problem(M, K, N, recipe, a, b, scale_a, scale_b, reference_mm(a[rows], b, sub_a, scale_b), rows)


@dataclass(frozen=True)
class Contender:
    name: str
    recipe: str
    accumulation: str  # "fast", "precise", or "fp32" for bf16
    build: Callable[[Problem], Callable[[], torch.Tensor]]
    description: str = ""

    @property
    def key(self) -> str:
        return f"{self.name}/{self.recipe}/{self.accumulation}"


REGISTRY: dict[str, Contender] = {}


def register(name: str, recipes, accumulations=ACCUMULATIONS, description: str = ""):
    """Decorator: ``build(problem, precise) -> callable`` becomes one contender per recipe and
    accumulation mode (bf16 has one, fp32)."""
    def wrap(build):
        for recipe in recipes:
            for acc in (("fp32",) if recipe == "bf16" else accumulations):
                c = Contender(name, recipe, acc, (lambda p, build=build, acc=acc: build(p, acc == "precise")),
                              description)
                REGISTRY[c.key] = c
        return build
    return wrap


def select(names=None, recipes=None, accumulations=None) -> list[Contender]:
    """Registered contenders filtered by name, recipe and accumulation, with the cuBLAS baseline of
    every (recipe, accumulation) chosen always included: ratios come from the same run."""
    names, recipes, accumulations = ([v] if isinstance(v, str) else v for v in (names, recipes, accumulations))
    for what, given, known in [("contender", names, {c.name for c in REGISTRY.values()}),
                               ("recipe", recipes, set(RECIPES)), ("accumulation", accumulations, set(ACCUMULATIONS))]:
        unknown = set(given or ()) - known
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(sorted(unknown))}: expected one of {', '.join(sorted(known))}")
    chosen = [c for c in REGISTRY.values()
              if (not names or c.name in names) and (not recipes or c.recipe in recipes)
              and (not accumulations or c.accumulation in accumulations or c.accumulation == "fp32")]
    for c in list(chosen):
        base = REGISTRY.get(f"{BASELINE}/{c.recipe}/{c.accumulation}")
        if base is not None and base not in chosen:
            chosen.append(base)
    return sorted(chosen, key=lambda c: (RECIPES.index(c.recipe), c.accumulation, c.name != BASELINE, c.name))


# ---- the baselines: cuBLAS through torch ----------------------------------------------------

@register(BASELINE, ["bf16"], description="torch.mm on the bf16 inputs (cuBLAS)")
def _cublas_bf16(p: Problem, precise: bool):
    return lambda: torch.mm(p.a, p.b)


@register(BASELINE, ["tensor", "row"], description="torch._scaled_mm (cuBLAS / CUTLASS)")
def _cublas_scaled(p: Problem, precise: bool):
    return lambda: torch._scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out_dtype=torch.bfloat16,
                                    use_fast_accum=not precise)


@register(BASELINE, ["block"], description="torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128")
def _cublas_block(p: Problem, precise: bool):
    from torch.nn.functional import ScalingType, scaled_mm

    # cuBLAS wants the activation scales M-major: strides (1, M).
    scale_a = p.scale_a.t().contiguous().t()
    return lambda: scaled_mm(p.a, p.b, scale_a, ScalingType.BlockWise1x128, p.scale_b, ScalingType.BlockWise128x128,
                             output_dtype=torch.bfloat16, use_fast_accum=not precise)


# ---- the book's kernels as contenders --------------------------------------------------------------

def fixed_launch(launch: Callable, p: Problem, precise: bool = False, **kw) -> Callable[[], torch.Tensor]:
    """A timed callable for ``bench.benchmark``: ``launch`` (``tiled.launch_tiled``,
    ``tma.launch_tma``, ...) on problem ``p`` with fixed keywords, such as ``config=`` to skip the
    autotuner, into one preallocated bfloat16 output, which it returns."""
    from ..gemm import check_operands

    ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
    out = torch.empty((p.M, p.N), dtype=torch.bfloat16, device=p.a.device)

    def run():
        launch(ops, out, precise, **kw)
        return out
    return run


def _register_kernels() -> None:
    from ..gemm import scaled_mm

    def contender(name: str, description: str, recipes=("tensor", "row")):
        @register(name, list(recipes), description=description)
        def build(p, precise: bool):
            out = torch.empty((p.M, p.N), dtype=torch.bfloat16, device=p.a.device)
            return lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, kernel=name, precise=precise, out=out)

    contender("tiled", "fp8_tutorial.kernels.tiled: one program per tile")
    contender("persistent", "fp8_tutorial.kernels.persistent: one program per SM, walking tiles")
    contender("tma", "fp8_tutorial.kernels.tma: persistent, TMA loads and stores")
    contender("ws", "fp8_tutorial.kernels.ws: the TMA kernel warp-specialized (a TMA producer, wgmma consumers)")
    contender("gluon", "fp8_tutorial.kernels.ws_gluon: warp specialization written in Gluon (a TMA producer warp, "
                       "cooperative or ping-pong wgmma consumers; block-wise scales in its blockwise kernel)",
              ("tensor", "row", "block"))
    contender("streamk", "fp8_tutorial.kernels.persistent.streamk_kernel: K iterations shared equally, "
                         "TMA loads where the 16-byte rule holds")


_register_kernels()


def _tuners() -> dict:
    from ..kernels import persistent, tiled, tma, ws

    return {**tiled.TUNERS, **persistent.TUNERS, **tma.TUNERS, **ws.TUNERS}


def tuned_configs() -> list[dict]:
    """What the autotuners chose so far in this process: one entry per kernel and problem seen
    (``kernel``: tiled, split-k, persistent, streamk, streamk-tma, tma, ws or gluon); for the TMA kernel,
    ``launch_tma``'s choice (``host_descriptors`` says which route) comes first."""
    from ..kernels import tma, ws_gluon

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
        M, N, K, row_a, row_b, precise, _, a_dtype, out_dtype, *block = key  # block-wise: a True at the end
        return dict(kernel=kernel, M=M, N=N, K=K, row_a=row_a, row_b=row_b, precise=precise, split_k=1,
                    dtypes=(str(a_dtype), str(out_dtype)), config=config, **extra, **({"block": True} if block else {}))
    found += [chosen("gluon", key, config) for key, config in ws_gluon.CHOICES.items()]
    for key, (host, config) in tma.ROUTES.items():
        found.insert(0, chosen("tma", key, config, host_descriptors=host))
    return found


def attach_configs(records: list[dict]) -> None:
    """Give each benchmark record of one of our kernels (a bf16 output) the configuration its
    autotuner chose for that problem in this process (``record["config"]``), where there is one."""
    from ..kernels.host import config_dict

    chosen = {}
    for t in tuned_configs():  # benchmark records are of bf16 outputs
        if t["split_k"] == 1 and "torch.bfloat16" in t["dtypes"]:
            config = dict(config_dict(t["config"]), **({"host_descriptors": True} if t.get("host_descriptors") else {}))
            chosen.setdefault((t["kernel"], t["M"], t["N"], t["K"], "block" if t.get("block") else t["row_a"],
                               t["precise"]), config)
    for r in records:
        names = ["streamk-tma", "streamk"] if r["contender"] == "streamk" else [r["contender"]]
        for name in names:
            recipe = "block" if r["recipe"] == "block" else r["recipe"] == "row"
            config = chosen.get((name, r["M"], r["N"], r["K"], recipe, r["accumulation"] == "precise"))
            if config is not None:
                r["config"] = config
                break
