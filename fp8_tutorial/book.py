"""The chapters as files: convert ``notebooks/*.md`` to notebooks, execute them into ``book/``,
and check that every executed notebook still holds exactly the code (and the prose) of its source.

``notebooks/NN_topic.md`` (jupytext MyST markdown) is what authors edit; ``book/NN_topic.ipynb`` is
the same chapter executed on a GPU, outputs kept, and is what the book renders.
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "notebooks"
BOOK = ROOT / "book"
#: Chapters written but not yet executed on a Hopper GPU. The tests run them (nbval, in the
#: interpreter) like the others; the book leaves them out until ``make execute`` has made their
#: copy in ``book/``, since it publishes GPU runs only. Once executed, a chapter leaves this set
#: and joins ``_toc.yml`` (``sync_problems`` says so).
AWAITING_GPU: set[str] = set()


def chapters(selection: list[str] | None = None) -> list[Path]:
    """The chapter sources, in order; ``selection`` picks by number ("02") or name ("02_scales...")."""
    found = sorted(SOURCES.glob("[0-9][0-9]_*.md"))
    if not selection:
        return found
    picked = []
    for want in selection:
        match = [p for p in found if p.stem == want or p.stem.split("_", 1)[0] == want]
        if not match:
            names = ", ".join(p.stem for p in found)
            raise ValueError(f"no chapter {want!r} in notebooks/ (have: {names})")
        picked += match
    return picked


def read_source(md: Path):
    import jupytext

    return jupytext.read(md)


def code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def markdown_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def convert(out_dir: Path, selection: list[str] | None = None) -> list[Path]:
    """Write each chapter as an unexecuted .ipynb into ``out_dir`` (for nbval)."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for md in chapters(selection):
        target = out_dir / f"{md.stem}.ipynb"
        nbformat.write(read_source(md), target)
        written.append(target)
    return written


def execute(selection: list[str] | None = None, out_dir: Path = BOOK, timeout: int = 1800) -> list[Path]:
    """Run each chapter top to bottom in a fresh kernel (working directory: the repository) and
    write it with its outputs to ``out_dir``. A cell that raises stops the chapter with an error."""
    import nbformat
    from nbclient import NotebookClient

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for md in chapters(selection):
        nb = read_source(md)
        print(f"executing {md.relative_to(ROOT)} ...", flush=True)
        start = time.time()
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}})
        client.execute()
        target = out_dir / f"{md.stem}.ipynb"
        nbformat.write(nb, target)
        print(f"  wrote {target} in {time.time() - start:.0f} s", flush=True)
        written.append(target)
    return written


def refresh_prose(selection: list[str] | None = None) -> list[Path]:
    """Copy the prose of ``notebooks/*.md`` into executed notebooks whose code is unchanged.

    Prose does not change what a cell prints, so a wording fix needs no GPU; any change to code,
    or to where the prose sits between code cells, still needs ``make execute``.
    """
    import nbformat

    updated = []
    for md in chapters(selection):
        executed = BOOK / f"{md.stem}.ipynb"
        if not executed.exists():
            continue
        source, book_nb = read_source(md), nbformat.read(executed, as_version=4)
        if [(c.cell_type, c.source) if c.cell_type == "code" else c.cell_type for c in source.cells] != \
                [(c.cell_type, c.source) if c.cell_type == "code" else c.cell_type for c in book_nb.cells]:
            raise ValueError(f"{executed.relative_to(ROOT)} holds other code, or other cells, than "
                             f"{md.relative_to(ROOT)}: re-execute it")
        if markdown_cells(source) == markdown_cells(book_nb):
            continue
        for mine, theirs in zip(source.cells, book_nb.cells):
            if mine.cell_type == "markdown":
                theirs.source = mine.source
        nbformat.write(book_nb, executed)
        updated.append(executed)
    return updated


def sync_problems() -> list[str]:
    """What keeps ``book/`` from being the executed copy of ``notebooks/``: one line per problem."""
    import nbformat

    problems = []
    sources = chapters()
    for md in sources:
        executed = BOOK / f"{md.stem}.ipynb"
        if md.stem in AWAITING_GPU:
            if executed.exists():
                problems.append(f"{executed.relative_to(ROOT)} exists: take {md.stem} off book.AWAITING_GPU and "
                                "list it in _toc.yml")
            continue
        if not executed.exists():
            problems.append(f"{md.relative_to(ROOT)} has no executed copy {executed.relative_to(ROOT)} "
                            "(run `make execute` on a Hopper GPU)")
            continue
        source, book_nb = read_source(md), nbformat.read(executed, as_version=4)
        if markdown_cells(source) != markdown_cells(book_nb):
            problems.append(f"{executed.relative_to(ROOT)} shows other prose than {md.relative_to(ROOT)}: "
                            "`python -m fp8_tutorial sync --prose` copies it over if the code is unchanged")
        want, have = code_cells(source), code_cells(book_nb)
        if want != have:
            first = next((i for i, (w, h) in enumerate(zip(want, have)) if w != h), min(len(want), len(have)))
            problems.append(f"{executed.relative_to(ROOT)} differs from {md.relative_to(ROOT)} from code cell "
                            f"{first + 1} on ({len(have)} cells executed, {len(want)} in the source): "
                            "re-execute it")
    stems = {md.stem for md in sources}
    for nb in sorted(BOOK.glob("[0-9][0-9]_*.ipynb")):
        if nb.stem not in stems:
            problems.append(f"{nb.relative_to(ROOT)} has no source in notebooks/")
    return problems
