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


def finish(ax, title: str, xlabel: str, ylabel: str, *, grid: str = "y", legend: bool = True):
    """Title, labels, a light grid and (if anything is labelled) a legend: what every axes gets."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if grid:
        ax.grid(True, axis=grid, alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


# --- chapter 01 ---------------------------------------------------------------------------------

# --- chapter 02 ---------------------------------------------------------------------------------

# --- chapter 03 ---------------------------------------------------------------------------------

# --- chapter 04 ---------------------------------------------------------------------------------

# --- chapter 05 ---------------------------------------------------------------------------------

# --- chapter 06 ---------------------------------------------------------------------------------

# --- chapter 07 ---------------------------------------------------------------------------------

# --- chapter 08 ---------------------------------------------------------------------------------

# --- appendices ---------------------------------------------------------------------------------
