"""FP8 inference layers: ``FP8Linear``, an ``nn.Linear`` whose product runs on ``scaled_mm``, and
``convert``, which puts it in place of a model's linear layers.

The weight is quantized once, when the layer is made; the input is quantized on every call, by
``quantize`` (one kernel on a GPU; under ``torch.compile``, torch operations that Inductor fuses
into the kernel that produced the input), and the two are multiplied by ``scaled_mm``:

| recipe    | weight scales          | input scales         | accumulation                        |
|-----------|------------------------|----------------------|-------------------------------------|
| "row"     | one per output row     | one per token        | fast (``precise=True``: promoted)   |
| "block"   | one per 128 x 128 block | one per 1 x 128 group | promoted at every K block (always) |

Inputs have any leading dimensions (batch, sequence, ...) and a last one of ``in_features``;
float32, bfloat16 or float16 in, ``out_dtype`` (bfloat16 by default) out. The layer is for
inference: with autograd recording and an input that wants a gradient, it raises rather than
return an output that no gradient could flow through. It traces under
``torch.compile(fullgraph=True)`` (``quantize`` and ``scaled_mm`` are torch operators) and can be
captured in CUDA graphs.
"""

from __future__ import annotations

from typing import Callable

import torch

from .gemm import OUT_DTYPES, choose, scaled_mm
from .quant import FP8_DTYPES, GROUP, INPUT_DTYPES, m_major_scales, quantize

#: The granularities of (input, weight) for each recipe (``quantize``'s names).
RECIPES = {"row": ("row", "row"), "block": ("1x128", "128x128")}


def _recipe_of(weight_scale: torch.Tensor, N: int, K: int) -> str | None:
    """The recipe a weight scale's shape says: (N, 1) per row, (N/128, K/128) block-wise."""
    if tuple(weight_scale.shape) == (N, 1):
        return "row"
    if not block_refusal(N, K) and tuple(weight_scale.shape) == (N // GROUP, K // GROUP):
        return "block"
    return None


def block_refusal(N: int, K: int) -> str | None:
    """Why block-wise scales cannot take an (N, K) weight, or None."""
    if N % GROUP or K % GROUP:
        return (f"block-wise scales cut the weight into 128 x 128 blocks and the input rows into 1 x 128 "
                f"groups: out_features and in_features must be multiples of 128, got {N} and {K}")
    return None


class FP8Linear(torch.nn.Module):
    """``y = x @ W^T + bias`` with ``W`` kept in FP8 (``weight``, (out_features, in_features),
    row-major, and its float32 ``weight_scale``) and ``x`` quantized on every call.

    Made from an ``nn.Linear`` by ``from_linear`` (or ``convert``), or from an FP8 checkpoint's
    weight and scale directly: ``weight_scale`` (N, 1) means per-row scales, (N/128, K/128)
    block-wise ones (a dequantization multiplier, ``W ~= weight.float() * scale``, as DeepSeek-V3's
    ``weight_scale_inv``). ``precise=True`` asks per-row products for promoted accumulation
    (block-wise ones always have it).

    ``fuse_quantization`` (default True): under ``torch.compile``, the input is quantized with
    torch operations (``quantize(..., impl="torch")``, the same rule), which Inductor can fuse
    into the kernel that produced the input (a norm, SwiGLU's product): where it does, the
    quantization has no launch of its own and the bf16 input need not go to memory and back
    first. False keeps ``quantize``'s kernel there too: an operator of its own, which Inductor
    cannot fuse. Eager calls always run the kernel.
    """

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None, *,
                 precise: bool = False, out_dtype: torch.dtype = torch.bfloat16, fuse_quantization: bool = True):
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dtype not in FP8_DTYPES:
            raise TypeError("weight must be an FP8 tensor (torch.float8_e4m3fn or torch.float8_e5m2), got "
                            + (str(weight.dtype) if isinstance(weight, torch.Tensor) else type(weight).__name__)
                            + ": FP8Linear.from_linear quantizes a float weight")
        if weight.dim() != 2:
            raise ValueError(f"weight must be 2-D (out_features, in_features), got shape {tuple(weight.shape)}")
        if not weight.is_contiguous():
            raise ValueError(f"weight must be contiguous (row-major (out_features, in_features), strides "
                             f"{(weight.shape[1], 1)}), got strides {tuple(weight.stride())}: pass weight.contiguous(), "
                             "or, for a transpose of an (out_features, in_features) weight, that weight and its scales")
        N, K = weight.shape
        if not isinstance(weight_scale, torch.Tensor) or weight_scale.dtype != torch.float32:
            raise TypeError("weight_scale must be a float32 tensor (a dequantization multiplier)")
        recipe = _recipe_of(weight_scale, N, K)
        if recipe is None:
            expected = f"({N}, 1) per row"
            if not block_refusal(N, K):
                expected += f" or {(N // GROUP, K // GROUP)} block-wise"
            raise ValueError(f"weight_scale has shape {tuple(weight_scale.shape)}: expected {expected} for a "
                             f"{(N, K)} weight")
        if not bool(torch.isfinite(weight_scale).all()):
            raise ValueError("weight_scale holds NaN or infinite values: every output that uses them would be NaN")
        if bias is not None:
            if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (N,) or not bias.is_floating_point():
                raise ValueError(f"bias must be a floating-point tensor of shape ({N},), got "
                                 + (f"{tuple(bias.shape)} {bias.dtype}" if isinstance(bias, torch.Tensor)
                                    else type(bias).__name__))
        if out_dtype not in OUT_DTYPES:
            raise TypeError(f"out_dtype must be one of {', '.join(map(str, OUT_DTYPES))}, got {out_dtype}")
        for name, flag in (("precise", precise), ("fuse_quantization", fuse_quantization)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        for name, t in (("weight_scale", weight_scale), ("bias", bias)):
            if t is not None and t.device != weight.device:
                raise ValueError(f"{name} is on {t.device}, the weight on {weight.device}")
        self.in_features, self.out_features = K, N
        self.recipe, self.precise, self.out_dtype = recipe, precise, out_dtype
        self.fuse_quantization = fuse_quantization
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale.contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().to(out_dtype))

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: str = "row", *, precise: bool = False,
                    out_dtype: torch.dtype | None = None, dtype: torch.dtype = torch.float8_e4m3fn,
                    fuse_quantization: bool = True) -> "FP8Linear":
        """The FP8 layer of ``linear``: its weight quantized (``recipe``: "row" or "block"), its
        output and bias in ``out_dtype``, by default the dtype of ``linear``'s weight (so that the
        layers after it get what they got before)."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"from_linear takes a torch.nn.Linear, got {type(linear).__name__}")
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}: expected one of {', '.join(map(repr, RECIPES))}")
        w = linear.weight.detach()
        if w.dtype not in INPUT_DTYPES:
            raise TypeError(f"the layer's weight must be float32, bfloat16 or float16, got {w.dtype}")
        why = block_refusal(*w.shape) if recipe == "block" else None
        if why:
            raise ValueError(why)
        q, s = quantize(w, RECIPES[recipe][1], dtype)
        out_dtype = w.dtype if out_dtype is None else out_dtype
        return cls(q, s, linear.bias, precise=precise, out_dtype=out_dtype, fuse_quantization=fuse_quantization)

    def _scale_b(self) -> torch.Tensor:
        """The weight's scales as ``scaled_mm`` takes them for ``b = weight.t()``: (1, N) per row,
        and (K/128, N/128) block-wise (the ``.t()`` view of the (N/128, K/128) scales)."""
        return self.weight_scale.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"FP8Linear takes a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"FP8Linear expects inputs whose last dimension is in_features = {self.in_features}, "
                             f"got shape {tuple(x.shape)}")
        if x.dtype not in INPUT_DTYPES:
            raise TypeError(f"FP8Linear takes float32, bfloat16 or float16 inputs, got {x.dtype}")
        if x.device != self.weight.device:
            raise ValueError(f"the input is on {x.device}, the layer on {self.weight.device}")
        if torch.is_grad_enabled() and x.requires_grad:
            raise RuntimeError("FP8Linear is for inference and has no backward: its input requires grad while "
                               "autograd records. Call the model under torch.inference_mode() or torch.no_grad()")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] == 0:
            return x.new_empty((*lead, self.out_features), dtype=self.out_dtype)
        fused = self.fuse_quantization and torch.compiler.is_compiling()
        a, scale_a = quantize(x2, RECIPES[self.recipe][0], self.weight.dtype, impl="torch" if fused else "auto")
        out = scaled_mm(a, self.weight.t(), scale_a, self._scale_b(), out_dtype=self.out_dtype, precise=self.precise)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*lead, self.out_features)

    def choose(self, tokens: int) -> tuple[str, dict[str, str]]:
        """The kernel ``scaled_mm`` runs for an input of ``tokens`` rows, and why each kernel ranked
        above it refused (``gemm.choose``)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"tokens must be an int of at least 1 (no kernel runs for an empty input), got {tokens!r}")
        a = torch.empty((tokens, self.in_features), dtype=self.weight.dtype, device=self.weight.device)
        rows = self.in_features // GROUP if self.recipe == "block" else 1
        if self.recipe == "block":  # M-major, as quantize's Triton kernel lays them out
            scale_a = m_major_scales(tokens, rows, self.weight.device).fill_(1.0)
        else:
            scale_a = torch.ones((tokens, rows), dtype=torch.float32, device=self.weight.device)
        return choose(a, self.weight.t(), scale_a, self._scale_b(), out_dtype=self.out_dtype)

    def _apply(self, fn, recurse=True):
        """Moves (``.to(device)``, ``.cuda()``) move the buffers; conversions of dtype
        (``model.to(torch.bfloat16)``, ``.half()``, which convert every floating-point tensor, FP8
        ones among them) leave them as they are: the FP8 weight, its float32 scales and the bias
        in the output's dtype, which stays too (cast a model first, then convert it)."""
        before = dict(self._buffers)
        super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers[name]
            if old is not None and new.dtype != old.dtype:
                self._buffers[name] = old.to(new.device)
        return self

    def extra_repr(self) -> str:
        """As ``nn.Linear``'s, with the recipe, and what differs from the defaults."""
        text = (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"recipe={self.recipe!r}")
        if self.weight.dtype != torch.float8_e4m3fn:
            text += f", weight={str(self.weight.dtype).removeprefix('torch.')}"
        if self.precise:
            text += ", precise=True"
        if self.out_dtype != torch.bfloat16:
            text += f", out_dtype={str(self.out_dtype).removeprefix('torch.')}"
        if not self.fuse_quantization:
            text += ", fuse_quantization=False"
        return text


def convert(model: torch.nn.Module, recipe: str = "row", *,
            filter: Callable[[str, torch.nn.Linear], bool] | None = None, precise: bool = False,
            out_dtype: torch.dtype | None = None, fuse_quantization: bool = True) -> torch.nn.Module:
    """Put an ``FP8Linear`` (``FP8Linear.from_linear``) in place of every ``nn.Linear`` of ``model``
    for which ``filter(name, linear)`` is true (all, without a filter), in place; returns the model
    (the new layer, where ``model`` is itself an ``nn.Linear``). A layer that the recipe cannot
    take (block-wise: a side not a multiple of 128) raises ValueError with its name: leave it out
    with ``filter``. The other keywords are ``FP8Linear.from_linear``'s: each layer's output keeps
    its linear's dtype unless ``out_dtype`` says otherwise."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}: expected one of {', '.join(map(repr, RECIPES))}")
    return replace_linears(model, lambda m: FP8Linear.from_linear(m, recipe, precise=precise, out_dtype=out_dtype,
                                                                  fuse_quantization=fuse_quantization),
                           filter, block_refusal if recipe == "block" else None)


def replace_linears(model: torch.nn.Module, make: Callable[[torch.nn.Linear], torch.nn.Module],
                    filter: Callable[[str, torch.nn.Linear], bool] | None = None,
                    refusal: Callable[[int, int], str | None] | None = None) -> torch.nn.Module:
    """Put ``make(linear)`` in place of every ``nn.Linear`` of ``model`` that ``filter(name,
    linear)`` accepts (``convert``'s walk, for any kind of layer); a linear layer held under
    several names gets one replacement, set under each. ``refusal(out_features, in_features)``
    says why a layer cannot be made, and is asked of every layer before any is replaced; so is
    whether its parent calls it (``nn.MultiheadAttention`` reads its ``out_proj``'s weight
    directly: a replacement would never run)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
    chosen = [(name, m) for name, m in model.named_modules(remove_duplicate=False)
              if isinstance(m, torch.nn.Linear) and (filter is None or filter(name, m))]
    for name, m in chosen:
        parent = model.get_submodule(name.rpartition(".")[0]) if name else None
        why = (refusal and refusal(m.out_features, m.in_features)) or (
            isinstance(parent, torch.nn.MultiheadAttention)
            and "nn.MultiheadAttention reads this projection's weight directly, without calling it")
        if why:
            raise ValueError(f"layer {name or 'the model'!r} (weight {m.out_features} x {m.in_features}): {why}; "
                             "leave it out with filter=")
    made: dict[int, torch.nn.Module] = {}
    for name, m in chosen:
        if id(m) not in made:
            made[id(m)] = make(m)
        new = made[id(m)]
        if not name:
            return new
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, new)
    return model
