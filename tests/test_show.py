"""``show_source``: the package's source, displayed as code."""

import inspect

import pytest

import fp8_tutorial as fp8
from fp8_tutorial import show
from fp8_tutorial.kernels import common, persistent


def test_a_kernel_s_source_is_its_function_s():
    """A Triton kernel shows its Python function's source, decorator included, as a fenced block."""
    made = show.source(common.mma)
    assert made.text == inspect.getsource(common.mma.fn) and repr(made) == made.text
    assert made.name == "mma" and made.where == "fp8_tutorial/kernels/common.py"
    md = made._repr_markdown_()
    assert md.startswith("```python\n@triton.jit\ndef mma(") and md.endswith("\n```")
    assert not made.collapse and "<details>" not in md


def test_a_long_listing_starts_folded_and_says_what_it_holds():
    made = show.source(persistent.streamk_kernel)
    assert made.lines > show.FOLD_LINES and made.collapse
    md = made._repr_markdown_()
    assert md.startswith("<details>\n<summary><code>streamk_kernel</code>, "
                         f"{made.lines} lines (fp8_tutorial/kernels/persistent.py)</summary>\n\n```python\n")
    assert md.endswith("```\n\n</details>") and inspect.getsource(persistent.streamk_kernel.fn).rstrip() in md
    assert not show.source(persistent.streamk_kernel, collapse=False).collapse
    assert show.source(common.mma, collapse=True).collapse


def test_a_fence_is_longer_than_any_backticks_in_the_source():
    def quoted():
        """A docstring with ```a fence``` of its own."""
    md = show.source(quoted)._repr_markdown_()
    assert md.startswith("````python\n") and md.endswith("\n````")


def test_show_source_prints_outside_a_notebook(capsys):
    fp8.show_source(fp8.quantize)
    assert capsys.readouterr().out == inspect.getsource(fp8.quantize)


def test_an_object_without_source_is_refused():
    with pytest.raises(TypeError, match="no Python source"):
        show.source(len)


def test_an_autotuned_kernel_shows_its_function_and_names_are_escaped():
    import triton

    tuned = triton.autotune(configs=[triton.Config({})], key=[])(common.mma)
    assert show.source(tuned).text == inspect.getsource(common.mma.fn)

    def outer():
        def inner():
            return 1
        return inner
    made = show.source(outer(), collapse=True)
    assert "<code>test_an_autotuned_kernel_shows_its_function_and_names_are_escaped.&lt;locals&gt;." in \
        made._repr_markdown_()
