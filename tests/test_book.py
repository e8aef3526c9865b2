"""The book: every chapter source has an executed copy with exactly its code, and the table of
contents lists every chapter."""

from pathlib import Path

import yaml

from fp8_tutorial import book


def test_book_is_in_sync_with_sources():
    problems = book.sync_problems()
    assert not problems, "\n".join(problems)


def test_toc_lists_every_chapter():
    toc = yaml.safe_load((book.ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    for md in book.chapters():
        assert f"book/{md.stem}" in files, f"_toc.yml does not list book/{md.stem}"


def test_executed_chapters_ran_on_a_gpu():
    """The book publishes GPU runs only: each executed chapter's first output names the GPU."""
    import nbformat

    for nb_path in sorted(book.BOOK.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        first = next(c for c in nb.cells if c.cell_type == "code")
        text = "".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", ""))
                       for o in first.outputs)
        assert "GPU" in text and "GPU           none" not in text, f"{nb_path.name}: not run on a GPU"
        assert "mode          hopper" in text, f"{nb_path.name}: not run on a Hopper GPU"
