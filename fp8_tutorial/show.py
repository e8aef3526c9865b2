"""What the chapters show of the package: its source, as code.

``show_source(obj)`` displays a function's, a class's or a kernel's source (``@triton.jit`` and
``@gluon.jit`` kernels hold their function in ``.fn``) read from the package itself, so that what a
reader reads is what runs. In Jupyter and in the rendered book it is highlighted Python; a listing
longer than ``FOLD_LINES`` lines starts folded under a line that names it, its file and its length.
As plain text (a terminal, a test) it is the source itself.
"""

from __future__ import annotations

import html
import inspect
import os
import re

#: Listings longer than this start folded (``collapse=None``).
FOLD_LINES = 40


class Source:
    """An object's source, displayed as code: Jupyter and the book render ``_repr_markdown_`` (a
    fenced Python block, in an HTML ``<details>`` when folded); anything else shows ``text``."""

    def __init__(self, text: str, name: str, where: str, collapse: bool):
        self.text, self.name, self.where, self.collapse = text, name, where, collapse

    @property
    def lines(self) -> int:
        return len(self.text.rstrip("\n").splitlines())

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        fence = "`" * max(3, 1 + max(map(len, re.findall("`+", self.text)), default=0))  # past any in the text
        block = f"{fence}python\n{self.text.rstrip()}\n{fence}"
        if not self.collapse:
            return block
        summary = f"<code>{html.escape(self.name)}</code>, {self.lines} lines ({html.escape(self.where)})"
        return f"<details>\n<summary>{summary}</summary>\n\n{block}\n\n</details>"


def source(obj, *, collapse: bool | None = None) -> Source:
    """``obj``'s source as a displayable ``Source``: folded if ``collapse``, or (None) if it is
    longer than FOLD_LINES lines. Raises TypeError for an object without Python source."""
    fn = obj
    while hasattr(fn, "fn"):  # a Triton or Gluon kernel keeps its Python function in .fn (an autotuner, its kernel)
        fn = fn.fn
    try:
        text = inspect.getsource(fn)
        path = inspect.getsourcefile(fn)
    except (TypeError, OSError) as e:
        raise TypeError(f"no Python source to show for {obj!r}: {e}") from e
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(obj)))
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inside = path is not None and os.path.commonpath([os.path.abspath(path), package]) == package
    where = os.path.relpath(path, package) if inside else (path or "?")
    made = Source(text, name, where.replace(os.sep, "/"), False)
    made.collapse = made.lines > FOLD_LINES if collapse is None else bool(collapse)
    return made


def show_source(obj, *, collapse: bool | None = None) -> None:
    """Display ``obj``'s source (``source``) in a notebook, or print it elsewhere."""
    made = source(obj, collapse=collapse)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(made.text, end="")
        return
    if get_ipython() is None:
        print(made.text, end="")
    else:
        display(made)
