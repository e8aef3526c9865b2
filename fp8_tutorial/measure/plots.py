"""The book's figures, so that a chapter cell that draws one is a line or two (as d2l keeps its
plotting helpers in one module). Each function takes what the chapter measured (or the recorded
results) and returns the matplotlib figure; none of them measures anything.

Every figure has a title, axis labels with units, and fits the book's width (``WIDTH`` inches).
The functions are grouped by the chapter that shows them.
"""

from __future__ import annotations

#: The book's column, in inches at matplotlib's default dpi: figures are made at most this wide.
WIDTH = 9.0


def _plt():
    import matplotlib.pyplot as plt

    return plt


def finish(ax, title: str, xlabel: str, ylabel: str, *, grid: str = "y", legend: bool | dict = True):
    """Title, labels, a light grid and (if anything is labelled) a legend: what every axes gets.
    ``legend`` a dict: the legend drawn with those options (``ax.legend``'s)."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if grid:
        ax.grid(True, axis=grid, alpha=0.3)
    labelled = bool(ax.get_legend_handles_labels()[0])
    if isinstance(legend, dict) and labelled:
        ax.legend(**legend)
    elif legend and labelled:
        ax.legend(fontsize=8)


def grouped_bars(ax, series: dict, labels=None, colors=None, **tick_kw) -> dict:
    """One bar per series (label -> one value per group) in each group, side by side and centred
    on the group, coloured by ``colors`` (label -> colour) where given; with ``labels``, the groups'
    tick labels (``tick_kw`` as ``set_xticks`` takes). Returns each series' bar positions."""
    import numpy as np

    width = 0.8 / max(len(series), 1)
    xs = np.arange(len(next(iter(series.values()), [])))
    placed = {}
    for i, (name, values) in enumerate(series.items()):
        placed[name] = xs + (i - (len(series) - 1) / 2) * width
        ax.bar(placed[name], values, width, label=name, **({"color": colors[name]} if colors else {}))
    if labels is not None:
        ax.set_xticks(np.arange(len(labels)), labels, **tick_kw)
    return placed


def k_sweep(M: int, N: int, Ks, fits: dict, recipe: str = "tensor"):
    """A K sweep (``scoreboard.k_sweep``): each contender's measured times against K as points,
    and the line ``time = intercept + K / rate`` fitted to them, whose slope is the K loop's rate
    and intercept the time that does not grow with K. Shown, and returned."""
    from . import scoreboard

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    scoreboard.plot_k_sweep(ax, M, N, Ks, fits, recipe)
    ax.set_xlabel("K (elements)")
    fig.tight_layout()
    plt.show()
    return fig


# --- chapter 01 ---------------------------------------------------------------------------------

_FORMAT_COLORS = {"e4m3fn": "#3d85c6", "e5m2": "#e07a5f"}


def fp8_bit_layouts():
    """The bit fields of e4m3fn and e5m2, side by side (bit 7 is the sign)."""
    from matplotlib.patches import Rectangle

    fig, axes = _plt().subplots(1, 2, figsize=(WIDTH, 2.0))
    for ax, (name, exponent_bits, mantissa_bits) in zip(
            axes, [("e4m3fn (bias 7)", 4, 3), ("e5m2 (bias 15)", 5, 2)]):
        fields = [("sign", 1, "#e07a5f"), ("exponent", exponent_bits, "#3d85c6"),
                  ("mantissa", mantissa_bits, "#81b29a")]
        x = 0
        for label, width, color in fields:
            for i in range(width):
                ax.add_patch(Rectangle((x + i, 0), 1, 1, facecolor=color, edgecolor="black"))
            ax.text(x + width / 2, -0.35, f"{label}\n{width} bit{'s' if width > 1 else ''}",
                    ha="center", va="top", fontsize=8)
            x += width
        for bit in range(8):
            ax.text(bit + 0.5, 0.5, str(7 - bit), ha="center", va="center", fontsize=9,
                    color="white")
        ax.set_title(name, fontsize=10)
        ax.set_xlim(-0.2, 8.2)
        ax.set_ylim(-1.4, 1.2)
        ax.axis("off")
    fig.suptitle("FP8 bit layouts (bit 7 is the sign)", fontsize=11, y=1.05)
    return fig


def fp8_values():
    """Every positive finite value of e4m3fn and e5m2 on a log axis; dotted: the smallest normal."""
    import numpy as np
    import torch

    from .. import formats

    fig, ax = _plt().subplots(figsize=(WIDTH, 2.6))
    for i, dtype in enumerate((torch.float8_e4m3fn, torch.float8_e5m2)):
        info = formats.describe(dtype)
        v = formats.all_values(dtype)
        pos = v[torch.isfinite(v) & (v > 0)].unique().numpy()
        color = _FORMAT_COLORS[info.name]
        ax.scatter(pos, np.full_like(pos, i), marker="|", s=250, color=color,
                   label=f"{info.name}: {len(pos)} positive values")
        ax.axvline(info.min_normal, color=color, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["e4m3fn", "e5m2"])
    ax.set_ylim(-0.7, 1.9)
    finish(ax, "Every positive FP8 value (dotted: smallest normal; below it, subnormals)",
           "value (dimensionless, log scale)", "format", grid="x", legend=dict(loc="upper left", fontsize=8))
    return fig


def fp8_spacing():
    """The relative gap from each FP8 value to the next one up, for e4m3fn and e5m2."""
    import torch

    from .. import formats

    fig, ax = _plt().subplots(figsize=(WIDTH, 3.6))
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        name = formats.describe(dtype).name
        values, gaps = formats.relative_spacing(dtype)
        ax.step(values.numpy(), gaps.numpy(), where="post", color=_FORMAT_COLORS[name], label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish(ax, "Relative gap: a saw tooth over the normal range, growing among the subnormals",
           "value (dimensionless, log scale)", "gap to the next value / value (log scale)",
           grid="both")
    return fig


# --- chapter 02 ---------------------------------------------------------------------------------

def scale_or_not(sigmas, direct, scaled):
    """Round-trip error of Gaussian tensors cast to e4m3fn directly and after a per-tensor scale,
    against the tensor's standard deviation; shaded: the format's range."""
    import torch

    from .. import formats

    info = formats.describe(torch.float8_e4m3fn)
    fig, ax = _plt().subplots(figsize=(WIDTH, 3.8))
    ax.loglog(sigmas, direct, "o-", ms=3, label="cast directly")
    ax.loglog(sigmas, scaled, "o-", ms=3, label="scaled per tensor, then cast")
    ax.axvspan(info.min_subnormal, info.max, color="0.9", label="e4m3fn's range")
    finish(ax, "Casting to e4m3fn with and without a scale",
           "standard deviation of the tensor (dimensionless, log scale)",
           "relative error of the round trip", grid="both")
    return fig


def scale_groups(M: int, K: int, groups: dict):
    """Which values of an M x K tensor share a scale, one panel per granularity; ``groups`` maps a
    granularity's name to the (rows, columns) of one group."""
    import numpy as np

    fig, axes = _plt().subplots(1, len(groups), figsize=(WIDTH, 2.8), sharey=True)
    for ax, (name, (gm, gk)) in zip(axes, groups.items()):
        rows, cols = np.meshgrid(np.arange(M) // gm, np.arange(K) // gk, indexing="ij")
        group_id = rows * (K // gk) + cols
        ax.imshow((group_id * 0.618) % 1, cmap="tab20", interpolation="nearest", aspect="auto")
        ax.set_title(f'"{name}": {(M // gm) * (K // gk)} scale(s)', fontsize=9)
        ax.set_xlabel("K (column index)")
    axes[0].set_ylabel("M (row index)")
    fig.suptitle(f"Which values share a scale in a {M}x{K} tensor (one colour per group)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def outlier_errors(whole: dict, token_median: dict, token_p99: dict, shape: str):
    """Quantization error of activations with outlier channels, per granularity: of the whole
    tensor (left) and of a token's ordinary channels (right, median and 99th percentile)."""
    import numpy as np

    names = list(whole)
    xs = np.arange(len(names))
    fig, (ax1, ax2) = _plt().subplots(1, 2, figsize=(WIDTH, 3.6))
    ax1.bar(names, [whole[n] for n in names], color="#3d85c6")
    finish(ax1, "Whole tensor: dominated by the outliers", "granularity",
           "relative error (Frobenius)")
    ax2.bar(xs - 0.2, [token_median[n] for n in names], 0.4, color="#81b29a", label="median token")
    ax2.bar(xs + 0.2, [token_p99[n] for n in names], 0.4, color="#e07a5f",
            label="99th-percentile token")
    ax2.set_xticks(xs, names)
    ax2.set_yscale("log")
    finish(ax2, "Per token, ordinary channels only", "granularity",
           "relative error of a token (log scale)")
    fig.suptitle(f"Quantizing {shape} activations with outlier channels to e4m3fn", fontsize=10)
    fig.tight_layout()
    return fig


def quantize_bandwidth(records: list, sizes, granularities, label: str):
    """Quantization speed (GB/s moved once) of the Triton kernels and the eager torch reference,
    per granularity, against a copy of the same input (dashed); one panel per input size."""
    import numpy as np

    fig, axes = _plt().subplots(1, len(sizes), figsize=(WIDTH, 3.8), sharey=True, squeeze=False)
    xs = np.arange(len(granularities))
    for ax, (M, K) in zip(axes[0], sizes):
        here = {r["name"]: r for r in records if (r["M"], r["K"]) == (M, K)}
        for offset, impl, color, what in [(-0.2, "triton", "#3d85c6", "Triton kernels"),
                                          (0.2, "torch", "#bbbbbb", "torch reference (eager)")]:
            ax.bar(xs + offset, [here[f"{impl} {g}"]["gbps"] for g in granularities], 0.4,
                   color=color, label=what)
        ax.axhline(here["copy (bf16 input)"]["gbps"], color="black", ls="--", lw=1,
                   label="copy of the input")
        ax.set_xticks(xs, granularities)
        finish(ax, f"{M}x{K} bf16 -> e4m3fn", "granularity", "", legend=False)
    axes[0][0].set_ylabel("GB/s (input + output + scales, once)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, -0.08))
    fig.suptitle(f"Quantization speed against a copy of the same input\n({label})", fontsize=10)
    fig.tight_layout()
    return fig


# --- chapter 03 ---------------------------------------------------------------------------------

def timing_histogram(us, title: str):
    """A histogram of repeated timings of one call (microseconds); solid: the median, dotted: the
    10th and 90th percentiles."""
    import numpy as np

    fig, ax = _plt().subplots(figsize=(WIDTH * 0.8, 3.4))
    ax.hist(us, bins=40, color="#3d85c6")
    for q, style in [(50, "-"), (10, ":"), (90, ":")]:
        ax.axvline(np.percentile(us, q), color="black", ls=style, lw=1)
    finish(ax, title, "time per call (us)", "calls")
    return fig


def _baseline_bars(data: dict, field: str, ylabel: str, title: str, log: bool = False):
    from . import scoreboard

    base = [r for r in data["records"] if r["contender"] == "cublas" and "tflops" in r]
    keys = scoreboard._columns(base)
    shapes = scoreboard._shapes_in_order(base)
    by = {(r["shape"], r["key"]): r for r in base}
    fig, ax = _plt().subplots(figsize=(WIDTH, 4.2))
    grouped_bars(ax, {key.split("/", 1)[1]: [by[(s, key)][field] if (s, key) in by else 0 for s in shapes]
                      for key in keys}, shapes, rotation=30, ha="right")
    if log:
        ax.set_yscale("log")
    else:  # room for the legend above the bars
        ax.set_ylim(0, 1.25 * max(r[field] for r in base))
    finish(ax, title, "M x K x N", ylabel, legend=dict(fontsize=8, ncol=len(keys), loc="upper center"))
    fig.tight_layout()
    return fig


def baseline_speed(data: dict, label: str):
    """TFLOP/s of every cuBLAS baseline (recipe/accumulation) on every shape of ``data``."""
    return _baseline_bars(data, "tflops", "TFLOP/s (median)", f"cuBLAS baselines: speed\n({label})")


def baseline_error(data: dict, label: str):
    """Relative error against float64 of every cuBLAS baseline on every shape of ``data``."""
    return _baseline_bars(data, "rel_error", "relative error vs float64",
                          f"cuBLAS baselines: error against float64\n({label})")


def roofline(records: list, ceilings: dict, datasheet: dict, label: str):
    """The FP8 roofline (datasheet: dotted, measured: solid; TFLOP/s against FLOP per byte) with
    the bf16 ceiling and one point per record of ``records`` (one contender, recipe and
    accumulation). ``ceilings`` holds the measured ``fp8`` and ``bf16`` TFLOP/s and ``copy_gbps``;
    ``datasheet`` the same as ``fp8``, ``bf16`` and ``hbm_gbps``."""
    import numpy as np

    plt = _plt()
    intensity = np.logspace(1, 4, 200)
    fig, ax = plt.subplots(figsize=(WIDTH, 5))
    for peak, bw, style, name in [(datasheet["fp8"], datasheet["hbm_gbps"], ":", "datasheet"),
                                  (ceilings["fp8"], ceilings["copy_gbps"], "-", "measured")]:
        ax.plot(intensity, np.minimum(peak, intensity * bw / 1e3), style, color="#3d85c6",
                label=f"FP8 roofline, {name}")
    ax.axhline(ceilings["bf16"], color="#e07a5f", ls="-", lw=1, label="bf16 ceiling, measured")
    markers = {(3072, 12288): "o", (12288, 3072): "s", (8192, 8192): "^"}
    for i, r in enumerate(records):
        M, K, N = r["M"], r["K"], r["N"]
        ai = 2 * M * N * K / (M * K + K * N + 2 * M * N)
        ax.scatter(ai, r["tflops"], color=plt.get_cmap("viridis")(i / len(records)), zorder=3,
                   marker=markers.get((K, N), "o"), label=f"{r['shape']} ({ai:.0f} FLOP/B)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish(ax, f"Roofline; points: cuBLAS row-wise FP8, fast accumulation\n({label})",
           "arithmetic intensity (FLOP per byte moved, FP8 in, bf16 out)", "TFLOP/s",
           grid="both", legend=dict(fontsize=7, loc="lower right", ncol=2))
    return fig


# --- chapter 04 ---------------------------------------------------------------------------------

def _ch04_panel(ax, title, w, h, band, block, xlabel, ylabel):
    """A matrix w x h (in tiles, to scale) with a highlighted band and, in it, the current block."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((0, 0), w, h, fill=False, lw=1.5))
    ax.add_patch(Rectangle(band[:2], *band[2:], color="#9fc5e8", alpha=0.6))
    ax.add_patch(Rectangle(block[:2], *block[2:], color="#3d85c6"))
    ax.set_xlim(-0.5, w + 0.5)
    ax.set_ylim(h + 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks([])
    ax.set_yticks([])


def ch04_tiled_gemm():
    """The tiled GEMM drawn for a small problem, in units of one tile (M = 8, K = 10, N = 12):
    the output tile in row 2, column 3 reads a band of A and a band of W, one block per K step."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.2), gridspec_kw={"width_ratios": [10, 10, 12]})
    _ch04_panel(axes[0], "A (M x K), row-major:\nthe tile's BLOCK_M rows", 10, 8, (0, 2, 10, 1),
                (4, 2, 1, 1), "K (tiles of BLOCK_K)", "M (tiles of BLOCK_M)")
    _ch04_panel(axes[1], "W (N x K) = B transposed,\nK-major: the tile's BLOCK_N rows", 10, 12,
                (0, 3, 10, 1), (4, 3, 1, 1), "K (tiles of BLOCK_K)", "N (tiles of BLOCK_N)")
    _ch04_panel(axes[2], "C (M x N):\none program per tile", 12, 8, (0, 0, 0, 0), (3, 2, 1, 1),
                "N (tiles of BLOCK_N)", "M (tiles of BLOCK_M)")
    for ax, text, y in ((axes[0], "A tile, step k", 2.5), (axes[1], "B tile, step k", 3.5)):
        ax.annotate(text, (4.5, y), (5.5, 6.5), arrowprops=dict(arrowstyle="->"), fontsize=8)
    axes[2].annotate("acc += a @ b over k,\nthen scale, cast, store", (3.5, 2.5), (4.0, 6.0),
                     arrowprops=dict(arrowstyle="->"), fontsize=8)
    fig.suptitle("A tiled GEMM: each output tile reads a band of A and a band of W", fontsize=10)
    fig.tight_layout()
    return fig


#: The two tile orders chapter 04 compares, by name: their GROUP_M.
CH04_ORDERS = {"row-major": 1, "grouped, GROUP_M = 8": 8}


def ch04_tile_waves(M, N, block_m, block_n, slots, orders=CH04_ORDERS):
    """Which wave each output tile runs in, one panel per tile order (``orders``: GROUP_M by
    name), with ``slots`` programs per wave."""
    import numpy as np

    from . import schedule

    plt = _plt()
    fig, axes = plt.subplots(1, len(orders), figsize=(WIDTH, 3.6), layout="constrained")
    for ax, (name, group) in zip(np.atleast_1d(axes), orders.items()):
        wave_of = np.zeros((-(-M // block_m), -(-N // block_n)))
        for t, (pm, pn) in enumerate(schedule.tile_order(M, N, block_m, block_n, group)):
            wave_of[pm, pn] = t // slots
        im = ax.imshow(wave_of, cmap="viridis", aspect="auto", interpolation="nearest")
        finish(ax, f"{name}", f"tile column (N / {block_n})", f"tile row (M / {block_m})",
               grid="", legend=False)
    fig.colorbar(im, ax=axes, label="wave (launch order)")
    fig.suptitle(f"The wave of each tile: {M} x {N} output, {block_m} x {block_n} tiles, "
                 f"{slots} programs per wave", fontsize=10)
    return fig


def ch04_wave_bytes(loads: dict, l2: int | None, title: str):
    """Distinct bytes of A and B bands each wave reads, per tile order (``loads``: the
    ``schedule.waves_loads`` lists by name), against the L2 (``l2`` bytes, or None: an H100
    SXM's)."""
    from . import schedule

    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH * 0.75, 3.6))
    grouped_bars(ax, {name: [w.bytes / 2**20 for w in waves] for name, waves in loads.items()})
    label = f"L2 of this GPU ({l2 / 2**20:.0f} MiB)" if l2 else "L2 of an H100 SXM (50 MiB)"
    ax.axhline((l2 or schedule.L2_BYTES) / 2**20, color="k", ls="--", lw=1, label=label)
    finish(ax, title, "wave (in launch order)", "distinct A and B bytes read (MiB)")
    fig.tight_layout()
    return fig


def ch04_against_cublas(records: list, shape_names: list, keys: list, label: str):
    """Speed of the tiled kernel over cuBLAS's (same recipe and accumulation) per shape, one bar
    per contender key (``tiled/tensor/fast``, ...), from bench records; a missing record, or one
    with a wrong output, draws no bar."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2))
    by = {(r["shape"], r["key"]): r for r in records}
    grouped_bars(ax, {key: [(by.get((s, key)) or {}).get("ratio") or 0 for s in shape_names] for key in keys},
                 shape_names, rotation=30, ha="right", fontsize=8)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_ylim(0, 1.25)
    finish(ax, f"Tiled FP8 kernel against cuBLAS, same run, interleaved\n({label})", "M x K x N",
           "x cuBLAS (same recipe, accumulation)", legend=dict(fontsize=8, ncol=4, loc="upper left"))
    fig.tight_layout()
    return fig


# --- chapter 05 ---------------------------------------------------------------------------------

#: The three tilings chapter 05 compares: label, BLOCK_M, BLOCK_N, programs per SM.
CH05_LAYOUTS = [("128x128 tiles, 2 per SM", 128, 128, 2), ("128x128 tiles, 1 per SM", 128, 128, 1),
                ("128x256 tiles, 1 per SM", 128, 256, 1)]


def ch05_waves(shapes, layouts=CH05_LAYOUTS):
    """Wave quantization: the share of program slots busy over all waves, per shape (M, K, N) and
    tiling (``layouts``: label, BLOCK_M, BLOCK_N, programs per SM), on the H200's 132 SMs."""
    from . import contenders as C, schedule

    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2))
    grouped_bars(ax, {label: [100 * schedule.occupancy(M, N, bm, bn, per_sm).efficiency for M, K, N in shapes]
                      for label, bm, bn, per_sm in layouts},
                 [C.shape_name(*s) for s in shapes], rotation=30, ha="right")
    ax.set_ylim(0, 119)
    finish(ax, f"Wave quantization on {schedule.H200_SMS} SMs: program slots busy, all waves",
           "M x K x N", "slots busy (%)", legend=dict(fontsize=8, loc="upper center", ncol=3))
    fig.tight_layout()
    return fig


def ch05_small_m(small, recipe: str):
    """The small-M candidates of chapter 05 against cuBLAS, one recipe: ``small`` holds one dict
    per measurement (shape, recipe, name, tflops, ratio = cuBLAS's time over the candidate's)."""
    plt = _plt()
    rows = [r for r in small if r["recipe"] == recipe and r["name"] != "cuBLAS"]
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    ratio = {(r["shape"], r["name"]): r["ratio"] for r in rows}
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2))
    grouped_bars(ax, {name: [ratio.get((s, name), 0) for s in shapes] for name in names}, shapes)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylim(0, 1.45)
    finish(ax, f"Small M, per {recipe}, fast accumulation: throughput / cuBLAS (same run)",
           "M x K x N", "throughput / cuBLAS", legend=dict(fontsize=7, loc="upper center", ncol=4))
    fig.tight_layout()
    return fig


def ch05_against_cublas(data: dict, contenders, recipe: str, label: str = ""):
    """Throughput over cuBLAS's (same run, fast accumulation) per shape, one bar per contender
    (names), for one recipe, from a results dictionary (``scoreboard.measure_or_load``)."""
    from . import scoreboard

    plt = _plt()
    records = [r for r in data["records"] if r["recipe"] == recipe and r["accumulation"] == "fast"]
    shapes = scoreboard._shapes_in_order(records)
    fig, ax = plt.subplots(figsize=(WIDTH, 4.2))
    ratio = {(r["shape"], r["contender"]): r.get("ratio") for r in records}
    grouped_bars(ax, {name: [ratio.get((s, name)) or 0 for s in shapes] for name in contenders},
                 shapes, rotation=30, ha="right")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylim(0, 1.35)
    title = f"Per {recipe}, fast accumulation: throughput / cuBLAS" + (f"\n({label})" if label else "")
    finish(ax, title, "M x K x N", "throughput / cuBLAS (same run)",
           legend=dict(fontsize=8, loc="upper center", ncol=len(contenders)))
    fig.tight_layout()
    return fig


# --- chapter 06 ---------------------------------------------------------------------------------

#: Chapter 06's comparison is drawn as chapter 05's, with more contenders.
ch06_against_cublas = ch05_against_cublas


# --- chapter 07 ---------------------------------------------------------------------------------

_WS_COLORS = {"TMA load": "tab:blue", "wgmma": "tab:orange", "wait": "0.85", "epilogue": "tab:green"}


def _ws_bars(ax, y, spans, colors):
    """Draw ``spans`` (start, length, kind) as one row of bars at height ``y``."""
    for start, length, kind in spans:
        ax.broken_barh([(start, length)], (y - 0.35, 0.7), color=colors[kind], edgecolor="white")


def _ws_legend(fig, colors):
    handles = [_plt().Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, list(colors), loc="lower center", ncol=len(colors), fontsize=8,
               bbox_to_anchor=(0.5, -0.01))


def ws_schematic(steps: int = 4, tiles: int = 2, stages: int = 3):
    """Chapter 07's schematic: a software-pipelined program (one instruction stream for loads,
    ``wgmma`` and epilogue) above a warp-specialized one (a producer filling a ring of ``stages``
    buffers, two consumer groups sharing each tile's rows). Order of events, not measured lengths."""
    plt = _plt()
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 4.6), sharex=True)
    pipelined, t = [], 0.0
    for _ in range(tiles):
        for _ in range(steps):
            pipelined += [(t, 0.3, "TMA load"), (t + 0.3, 0.2, "wait"), (t + 0.5, 1.0, "wgmma")]
            t += 1.5
        pipelined.append((t, 1.4, "epilogue"))
        t += 1.4
    _ws_bars(axes[0], 0, pipelined, _WS_COLORS)
    axes[0].set_yticks([0], ["all 8 warps"])
    producer, consumers, mma_end = [], {1: [], 2: []}, []
    t = 0.3 * stages  # the first buffers fill while nothing else can run
    for _ in range(tiles):
        for _ in range(steps):
            for g in (1, 2):
                consumers[g].append((t, 1.0, "wgmma"))
            t += 1.0
            mma_end.append(t)
        for g in (1, 2):
            consumers[g].append((t, 1.4, "epilogue"))
        t += 1.4
    free = 0.0
    for i in range(tiles * steps):  # load i waits for its buffer, freed by the wgmma of step i - stages
        start = max(free, mma_end[i - stages] if i >= stages else 0.0)
        producer.append((start, 0.3, "TMA load"))
        free = start + 0.3
    _ws_bars(axes[1], 2, producer, _WS_COLORS)
    for g in (1, 2):
        _ws_bars(axes[1], 2 - g, consumers[g], _WS_COLORS)
    axes[1].set_yticks([2, 1, 0], ["producer", "consumer 1\n(rows 0-63)", "consumer 2\n(rows 64-127)"])
    finish(axes[0], "Software-pipelined (chapter 06): one stream issues loads, wgmma, epilogue",
           "", "warps", grid="x", legend=False)
    finish(axes[1], "Warp-specialized: the producer fills the ring ahead; consumers multiply, store",
           "time (schematic: order of events, not measured lengths)", "warp group", grid="x",
           legend=False)
    axes[0].set_ylim(-0.6, 0.6)
    axes[1].set_ylim(-0.6, 2.6)
    fig.suptitle("Schematic, not a measurement", fontsize=10)
    _ws_legend(fig, _WS_COLORS)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


#: Chapters 07 and 08 draw their K sweeps as every chapter does.
ws_k_sweep = k_sweep


# --- chapter 08 ---------------------------------------------------------------------------------

def pingpong_schedule(tiles: int = 4, steps: int = 4, stages: int = 6, load: float = 0.3,
                      mma: float = 1.0, epilogue: float = 2.5) -> list[tuple[str, float, float, str]]:
    """The ping-pong schedule of chapter 08 in a few lines of pure Python, as (row, start, length,
    kind) bars. The producer loads K step i once its buffer is free (the ``wgmma`` of step
    i - ``stages`` is done); the groups take the tiles in turns: a group's K loop starts once the
    other has issued its last ``wgmma`` and its own previous epilogue is over, and its epilogue
    follows its K loop. The lengths are made up: order of events, not a measurement."""
    bars, load_end, mma_end = [], [], []
    free, turn, epilogue_end = 0.0, 0.0, [0.0, 0.0]
    for u in range(tiles):
        g = u % 2
        t = max(turn, epilogue_end[g])
        for _ in range(steps):
            i = len(load_end)  # the producer: load i as soon as the ring has room for it
            start = max(free, mma_end[i - stages] if i >= stages else 0.0)
            free = start + load
            load_end.append(free)
            bars.append(("producer", start, load, "TMA load"))
            t = max(t, load_end[i])  # the consumer waits on ready[i % stages]
            bars.append((f"consumer group {g}", t, mma, "wgmma K loop"))
            t += mma
            mma_end.append(t)
        turn = t  # the turn passes once this tile's last wgmma is issued
        bars.append((f"consumer group {g}", t, epilogue, "epilogue"))
        epilogue_end[g] = t + epilogue
    return bars


def pingpong_timeline(bars=None):
    """Chapter 08's schematic of ping-pong: producer warp, consumer group 0 and consumer group 1
    over time (``pingpong_schedule``): one group's epilogue runs while the other's K loop does."""
    plt = _plt()
    bars = pingpong_schedule() if bars is None else bars
    colors = {"TMA load": "tab:blue", "wgmma K loop": "tab:orange", "epilogue": "tab:green"}
    rows = ["producer", "consumer group 0", "consumer group 1"]
    fig, ax = plt.subplots(figsize=(WIDTH, 3.2))
    for row, start, length, kind in bars:
        y = len(rows) - 1 - rows.index(row)
        ax.broken_barh([(start, length)], (y - 0.35, 0.7), color=colors[kind], edgecolor="white")
    ax.set_yticks(range(len(rows)), rows[::-1])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    finish(ax, "Ping-pong, a schematic (not a measurement): one group's epilogue runs under the "
           "other's K loop", "time (schematic: order of events, not measured lengths)", "warps",
           grid="x", legend=False)
    _ws_legend(fig, colors)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


# --- appendices ---------------------------------------------------------------------------------

# appendix 95

def a95_step_cost(curves: dict, M: int = 512, K: int = 12288):
    """One K step as more SMs work at once (appendix 95): ``curves`` maps a label (the tiling) to
    points (programs, µs per K step, TB/s of tiles loaded, TFLOP/s); time per step on the left,
    the tiles' bandwidth on the right."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    for (label, points), marker in zip(curves.items(), "os^v"):
        xs = [q[0] for q in points]
        ax1.plot(xs, [q[1] for q in points], marker=marker, label=label)
        ax2.plot(xs, [q[2] for q in points], marker=marker, label=label)
    finish(ax1, "Time per K step", "programs (one whole tile each)", "time per K step (µs)", grid="both")
    finish(ax2, "Tiles loaded, all programs", "programs (one whole tile each)", "bandwidth (TB/s)",
           grid="both")
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
    fig.suptitle(f"{M} x {K} x N, per tensor, fast accumulation: whole tiles, one per SM", fontsize=10)
    fig.tight_layout()
    return fig


# ---- chapter 10: accumulation precision -------------------------------------------------------------

ACCUMULATION_STYLES = {"FP8 quantization": dict(color="0.6", linestyle=":", linewidth=2),
                       "fast (never promoted)": dict(color="tab:red"),
                       "cuBLAS fast": dict(color="tab:red", linestyle="--", marker="x"),
                       "promoted every 32": dict(color="tab:purple"),
                       "promoted every 128": dict(color="tab:blue"),
                       "promoted every 256": dict(color="tab:cyan"),
                       "promoted every 512": dict(color="tab:olive"),
                       "promoted every 1024": dict(color="tab:brown"),
                       "cuBLAS precise": dict(color="black", linestyle="--", marker="+", markersize=9),
                       "scaled_mm fast": dict(color="tab:orange", linestyle="-.", marker="."),
                       "scaled_mm precise": dict(color="tab:green", linestyle="-.", marker=".")}


def error_vs_k(records: list, recipe: str, label: str):
    """Relative error against float64 against K, one line per way of summing (chapter 10's
    ``accuracy.error_vs_k`` records), a panel per kind of input, for one recipe."""
    plt = _plt()
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    fig, axes = plt.subplots(1, len(kinds), figsize=(WIDTH, 4.2), sharey=True, squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        mine = [r for r in records if r["kind"] == kind and r["recipe"] == recipe]
        for method in dict.fromkeys(r["method"] for r in mine):
            pts = sorted((r["K"], r["rel_error"]) for r in mine if r["method"] == method)
            ax.plot([k for k, _ in pts], [e for _, e in pts], label=method,
                    **ACCUMULATION_STYLES.get(method, {}))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        finish(ax, f"{kind} inputs", "K", "relative error vs float64", grid="both", legend=False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Error of each way of summing, {recipe} scales ({label})", fontsize=10)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    return fig


def probe_bits(probes: dict, label: str, methods=None):
    """The fraction of the small products that a sum kept (chapter 10's ``accuracy.probe``), against
    how far below the first product they are (2^-j), one line per way of summing."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    for name in methods or probes:
        pts = probes[name]
        ax.plot([p["shift"] for p in pts], [p["kept"] for p in pts], label=name, **ACCUMULATION_STYLES.get(name, {}))
    finish(ax, f"What a sum of one 1 and 127 products of 2^-j keeps ({label})",
           "j: the small products are 2^-j of the first", "fraction of the small products kept",
           grid="both", legend=dict(fontsize=8, loc="lower left"))
    return fig


def blockwise_ratios(rows: list, shapes, label: str):
    """Chapter 11: ``scaled_mm`` against cuBLAS block-wise on the weight shapes ``shapes`` ((N, K)
    pairs), one line each, against M; the kernel harness (left) and calls back to back (right)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.8), sharey=True)
    for ax, key, title in [(axes[0], "ratio", "kernel harness (L2 flushed)"),
                           (axes[1], "api_ratio", "back to back, as a model calls it")]:
        for n, k in shapes:
            pts = sorted((r["M"], r[key]) for r in rows if (r["N"], r["K"]) == (n, k) and key in r)
            if len(pts) > 1:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"N x K = {n} x {k}")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        plain_numbers(ax.xaxis)
        finish(ax, title, "M (tokens)", "speed, x cuBLAS block-wise" if ax is axes[0] else "",
               grid="both", legend=dict(fontsize=7) if ax is axes[0] else False)
    fig.suptitle(f"Block-wise scaled_mm against cuBLAS block-wise ({label})", fontsize=10)
    fig.tight_layout()
    return fig


def plain_numbers(axis) -> None:
    """A log axis labelled 1024 and 200 rather than 2^10 and 2 x 10^2."""
    from matplotlib import ticker

    axis.set_major_formatter(ticker.StrMethodFormatter("{x:.0f}"))


#: Chapter 12's layers: a colour per route (bf16's has none), a line style per recipe.
ROUTE_COLORS = {None: "black", "torch": "tab:blue", "fp8_tutorial": "tab:red"}
RECIPE_LINES = {None: "-", "row": "--", "block": "-"}
RECIPE_MARKERS = {None: "o", "row": "s", "block": "^"}


def layer_times(records: list, label: str):
    """Chapter 12: time per decoder-layer call against tokens, one line per layer (``measure.model``'s
    records), decode (left) and prefill (right), log-log."""
    from matplotlib import ticker

    from .model import VARIANTS

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    for ax, phase in zip(axes, ("decode", "prefill")):
        for name, (route, recipe) in VARIANTS.items():
            pts = sorted((r["tokens"], r["us"]) for r in records if r["phase"] == phase and r["layer"] == name)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=RECIPE_MARKERS[recipe], ms=4, label=name,
                        color=ROUTE_COLORS[route], ls=RECIPE_LINES[recipe])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 7.0)))
        plain_numbers(ax.yaxis)
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        plain_numbers(ax.xaxis)
        finish(ax, f"{phase}: " + ("one new token per sequence" if phase == "decode" else "whole sequences"),
               "M (tokens)", "microseconds per layer call", grid="both",
               legend=dict(fontsize=7, handlelength=3) if phase == "decode" else False)
    fig.suptitle(f"A Llama-3-8B decoder layer under torch.compile ({label})", fontsize=10)
    fig.tight_layout()
    return fig
