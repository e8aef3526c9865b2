"""The book's figures (fp8_tutorial/measure/plots.py): each returns a titled, labelled
figure."""


def test_07_ws_schematic():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.ws_schematic()
    assert fig.get_size_inches()[0] <= plots.WIDTH
    assert "not a measurement" in fig._suptitle.get_text()
    for ax in fig.axes:
        assert ax.get_title() and ax.get_ylabel()
    assert "time" in fig.axes[-1].get_xlabel()
    matplotlib.pyplot.close(fig)


def test_08_pingpong_timeline():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    bars = plots.pingpong_schedule(tiles=4, steps=3, stages=6)
    loops = {(row, kind): [] for row, _, _, kind in bars}
    for row, start, length, kind in bars:
        loops[row, kind].append((start, start + length))
    # one group's epilogue overlaps the other group's K loop
    epi0 = loops["consumer group 0", "epilogue"][0]
    mma1 = loops["consumer group 1", "wgmma K loop"]
    assert any(s < epi0[1] and e > epi0[0] for s, e in mma1)
    fig = plots.pingpong_timeline(bars)
    ax = fig.axes[0]
    assert fig.get_size_inches()[0] <= plots.WIDTH
    assert "schematic" in ax.get_title() and "time" in ax.get_xlabel() and ax.get_ylabel()
    matplotlib.pyplot.close(fig)


def _ch04_labelled(fig, plots):
    """At most the book's width, every axes (but a colorbar) titled and labelled; then closed."""
    import matplotlib.pyplot as plt

    assert fig.get_size_inches()[0] <= plots.WIDTH
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_04_tiled_gemm_diagram():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.ch04_tiled_gemm()
    _ch04_labelled(fig, plots)
    assert len(fig.axes) == 3 and fig._suptitle.get_text()


def test_04_tile_waves_and_bytes():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots, schedule

    fig = plots.ch04_tile_waves(1024, 2048, 128, 128, 24)
    _ch04_labelled(fig, plots)
    assert {ax.get_title() for ax in fig.axes} >= set(plots.CH04_ORDERS)
    loads = {name: schedule.waves_loads(1024, 2048, 512, 128, 128, g, 24)
             for name, g in plots.CH04_ORDERS.items()}
    fig = plots.ch04_wave_bytes(loads, None, "bytes per wave")
    _ch04_labelled(fig, plots)
    assert "MiB" in fig.axes[0].get_ylabel()
    assert any("H100" in text for text in fig.axes[0].get_legend_handles_labels()[1])


def test_04_against_cublas():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    records = [dict(shape="512x3072x12288", key="tiled/tensor/fast", ratio=0.85),
               dict(shape="512x3072x12288", key="tiled/row/fast", ratio=None),  # a wrong output
               dict(shape="8192x8192x8192", key="tiled/tensor/fast", ratio=0.9)]
    keys = ["tiled/tensor/fast", "tiled/row/fast"]
    fig = plots.ch04_against_cublas(records, ["512x3072x12288", "8192x8192x8192"], keys, "synthetic")
    _ch04_labelled(fig, plots)
    ax = fig.axes[0]
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0, 0, 0.85, 0.9]
    assert ax.get_legend_handles_labels()[1] == keys


def _labelled(fig, plots):
    assert fig.get_size_inches()[0] <= plots.WIDTH
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_05_waves():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import contenders as C, plots

    shapes = C.SEED_SHAPES + [(8192, 8192, 8192)]
    fig = plots.ch05_waves(shapes)
    _labelled(fig, plots)
    ax = fig.axes[0]
    assert len(ax.patches) == len(shapes) * len(plots.CH05_LAYOUTS)
    assert all(0 < p.get_height() <= 100 for p in ax.patches)
    assert "%" in ax.get_ylabel()


def test_05_small_m():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    small = [dict(shape=s, recipe=rc, name=n, tflops=1000.0, ratio=r)
             for s in ("512x3072x12288", "512x12288x3072") for rc in ("tensor", "row")
             for n, r in (("cuBLAS", 1.0), ("persistent", 0.9), ("stream-K", 0.6))]
    fig = plots.ch05_small_m(small, "row")
    _labelled(fig, plots)
    ax = fig.axes[0]
    assert "per row" in ax.get_title()
    assert ax.get_legend_handles_labels()[1] == ["persistent", "stream-K"]  # cuBLAS is the 1.0 line
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0.6, 0.6, 0.9, 0.9]


def test_06_against_cublas():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots, results, scoreboard

    data = scoreboard.load(results.RESULTS / "h200.json")
    ours = ["tiled", "persistent", "tma"]
    fig = plots.ch06_against_cublas(data, ours, "tensor", "recorded")
    _labelled(fig, plots)
    ax = fig.axes[0]
    assert "per tensor" in ax.get_title().lower() and "recorded" in ax.get_title()
    assert ax.get_legend_handles_labels()[1] == ours
    assert any(p.get_height() > 0.5 for p in ax.patches)


def test_95_step_cost():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    curves = {"128x128 tiles, 4 warps": [(12, 0.4, 1.0, 100), (132, 0.45, 9.6, 1000)],
              "128x256 tiles, 8 warps": [(12, 0.7, 1.0, 100), (132, 0.8, 8.1, 1000)]}
    fig = plots.a95_step_cost(curves)
    _labelled(fig, plots)
    assert len(fig.axes) == 2 and fig._suptitle.get_text()
    assert "µs" in fig.axes[0].get_ylabel() and "TB/s" in fig.axes[1].get_ylabel()
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def _ch01_03_labelled(fig, plots, xlabel=True):
    assert fig.get_size_inches()[0] <= plots.WIDTH
    for ax in fig.axes:
        assert ax.get_title()
        if xlabel:
            assert ax.get_xlabel()


def test_01_bit_layouts():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.fp8_bit_layouts()
    _ch01_03_labelled(fig, plots, xlabel=False)
    assert [ax.get_title() for ax in fig.axes] == ["e4m3fn (bias 7)", "e5m2 (bias 15)"]
    assert "bit layouts" in fig._suptitle.get_text()
    assert [len(ax.patches) for ax in fig.axes] == [8, 8]  # one box per bit


def test_01_values_and_spacing():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.fp8_values()
    _ch01_03_labelled(fig, plots)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["e4m3fn: 126 positive values", "e5m2: 123 positive values"]
    fig = plots.fp8_spacing()
    _ch01_03_labelled(fig, plots)
    ax = fig.axes[0]
    assert ax.get_ylabel() and ax.get_xscale() == "log" and len(ax.lines) == 2


def test_02_scale_or_not_and_groups():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.scale_or_not([1e-3, 1.0, 1e3], [1.0, 0.03, 0.5], [0.03, 0.03, 0.03])
    _ch01_03_labelled(fig, plots)
    assert fig.axes[0].get_ylabel() and len(fig.axes[0].lines) == 2
    groups = {"tensor": (64, 256), "row": (1, 256), "1x128": (1, 128), "128x128": (128, 128)}
    fig = plots.scale_groups(64, 256, groups)
    _ch01_03_labelled(fig, plots)
    assert fig.axes[0].get_ylabel() and fig._suptitle.get_text()
    assert [ax.get_title() for ax in fig.axes][:2] == ['"tensor": 1 scale(s)', '"row": 64 scale(s)']


def test_02_outliers_and_bandwidth():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    names = ["tensor", "row", "1x128", "128x128"]
    whole = dict(zip(names, [0.03, 0.02, 0.01, 0.02]))
    fig = plots.outlier_errors(whole, whole, {n: 2 * v for n, v in whole.items()}, "64x256")
    _ch01_03_labelled(fig, plots)
    assert all(ax.get_ylabel() for ax in fig.axes) and len(fig.axes[1].patches) == 8
    records = [dict(name="copy (bf16 input)", M=64, K=256, gbps=4000.0)]
    records += [dict(name=f"{impl} {g}", M=64, K=256, gbps=gbps)
                for g in names for impl, gbps in (("triton", 3000.0), ("torch", 200.0))]
    fig = plots.quantize_bandwidth(records, [(64, 256)], names, "synthetic")
    _ch01_03_labelled(fig, plots)
    assert "GB/s" in fig.axes[0].get_ylabel() and "synthetic" in fig._suptitle.get_text()
    assert sorted(p.get_height() for p in fig.axes[0].patches) == [200.0] * 4 + [3000.0] * 4


def test_03_histogram_baselines_and_roofline():
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots, results, scoreboard

    fig = plots.timing_histogram(np.linspace(230.0, 240.0, 200), "200 timings")
    _ch01_03_labelled(fig, plots)
    assert "us" in fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel() == "calls"
    data = scoreboard.load(results.RESULTS / "h200.json")
    for draw, unit in ((plots.baseline_speed, "TFLOP/s"), (plots.baseline_error, "error")):
        fig = draw(data, "recorded")
        _ch01_03_labelled(fig, plots)
        ax = fig.axes[0]
        assert unit in ax.get_ylabel() and "recorded" in ax.get_title()
        assert "row/fast" in ax.get_legend_handles_labels()[1]
    row_fast = [r for r in data["records"] if r["key"] == "cublas/row/fast" and "tflops" in r]
    ceilings = {"fp8": 1500.0, "bf16": 800.0, "copy_gbps": 4200.0}
    datasheet = {"fp8": 1979.0, "bf16": 989.0, "hbm_gbps": 4800.0}
    fig = plots.roofline(row_fast, ceilings, datasheet, "recorded")
    _ch01_03_labelled(fig, plots)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_xscale() == "log"
    assert len(ax.collections) == len(row_fast)  # one point per shape


def test_07_ws_k_sweep():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    Ks = [768, 1536, 3072]
    sweep = {"kernel": {"times_ms": [0.1, 0.2, 0.4], "rate_tflops": 1000.0,
                        "intercept_us": 20.0}}
    fig = plots.ws_k_sweep(4608, 12288, Ks, sweep)
    ax = fig.axes[0]
    assert fig.get_size_inches()[0] <= plots.WIDTH
    assert ax.get_title() and "K" in ax.get_xlabel() and "ms" in ax.get_ylabel()
    matplotlib.pyplot.close(fig)


def test_05_against_cublas():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    records = [dict(M=512, K=3072, N=12288, shape="512x3072x12288", recipe="row", accumulation="fast",
                    contender=c, ratio=r) for c, r in (("tiled", 0.85), ("persistent", 0.9), ("cublas", 1.0))]
    records.append(dict(records[0], recipe="tensor"))  # another recipe: not drawn
    fig = plots.ch05_against_cublas({"records": records}, ["tiled", "persistent"], "row")
    _labelled(fig, plots)
    ax = fig.axes[0]
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0.85, 0.9]
    assert ax.get_legend_handles_labels()[1] == ["tiled", "persistent"]


def test_shared_k_sweep_draws_points_and_fitted_lines():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fits = {"a": {"times_ms": [1.0, 2.0, 4.0], "rate_tflops": 500.0, "intercept_us": 10.0}}
    fig = plots.k_sweep(512, 1024, [1024, 2048, 4096], fits)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel().startswith("K") and "ms" in ax.get_ylabel()
    assert len(ax.lines) == 2
