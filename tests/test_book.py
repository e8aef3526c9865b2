"""The book: every chapter source has an executed copy with exactly its code, and the table of
contents lists every chapter."""

import yaml

from fp8_tutorial import book


def test_book_is_in_sync_with_sources():
    problems = book.sync_problems()
    assert not problems, "\n".join(problems)


def test_toc_lists_every_executed_chapter():
    """Every chapter is in the table of contents, but those still awaiting their GPU run, which
    the book leaves out."""
    toc = yaml.safe_load((book.ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    for md in book.chapters():
        listed = f"book/{md.stem}" in files
        if md.stem in book.AWAITING_GPU:
            assert not listed, f"_toc.yml lists book/{md.stem}, which has not been executed on a GPU yet"
        else:
            assert listed, f"_toc.yml does not list book/{md.stem}"
    assert book.AWAITING_GPU <= {md.stem for md in book.chapters()}, "AWAITING_GPU names a chapter that is not there"


def _empty_book(tmp_path, monkeypatch):
    """``book`` pointed at empty ``notebooks/`` and ``book/`` folders under ``tmp_path``: a
    chapter's front matter (jupytext's header), and the two folders."""
    header = (book.ROOT / "notebooks" / "90_scoreboard.md").read_text().split("---\n")[1].join(["---\n", "---\n"])
    src, out = tmp_path / "notebooks", tmp_path / "book"
    src.mkdir(), out.mkdir()
    monkeypatch.setattr(book, "SOURCES", src)
    monkeypatch.setattr(book, "BOOK", out)
    monkeypatch.setattr(book, "ROOT", tmp_path)
    return header, src, out


def test_a_chapter_awaiting_its_gpu_run_is_tested_but_not_published(tmp_path, monkeypatch):
    """A chapter of ``AWAITING_GPU`` needs no executed copy; once it has one, the sync check asks
    for it to leave the set and join the table of contents."""
    header, src, out = _empty_book(tmp_path, monkeypatch)
    monkeypatch.setattr(book, "AWAITING_GPU", {"12_x"})
    (src / "12_x.md").write_text(header + "\nWords.\n\n```{code-cell} ipython3\nprint(1)\n```\n")
    assert book.sync_problems() == []
    assert [p.name for p in book.convert(tmp_path / "nbval")] == ["12_x.ipynb"]
    import nbformat
    nbformat.write(book.read_source(src / "12_x.md"), out / "12_x.ipynb")
    assert any("take 12_x off book.AWAITING_GPU" in p for p in book.sync_problems())


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


# The names chapters use for the package's modules when they print a function's source.
PRINTED_MODULES = {"gemm": "fp8_tutorial.gemm", "quant": "fp8_tutorial.quant", "qk": "fp8_tutorial.kernels.quantize",
                   "common": "fp8_tutorial.kernels.common", "tiled": "fp8_tutorial.kernels.tiled",
                   "persistent": "fp8_tutorial.kernels.persistent", "tma": "fp8_tutorial.kernels.tma",
                   "ws": "fp8_tutorial.kernels.ws", "ws_gluon": "fp8_tutorial.kernels.ws_gluon",
                   "ablation": "fp8_tutorial.kernels.ablation", "host": "fp8_tutorial.kernels.host",
                   "contenders": "fp8_tutorial.measure.contenders", "C": "fp8_tutorial.measure.contenders",
                   "plots": "fp8_tutorial.measure.plots", "schedule": "fp8_tutorial.measure.schedule",
                   "scoreboard": "fp8_tutorial.measure.scoreboard"}


def test_printed_sources_are_the_package_s():
    """A chapter that prints a function of the package (``inspect.getsource``) or shows it
    (``show_source``) shows what the package holds now: changing shown code means executing the
    chapter again."""
    import importlib
    import inspect
    import re

    import nbformat

    from fp8_tutorial import show

    checked = 0
    for nb_path in sorted(book.BOOK.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in (c for c in nb.cells if c.cell_type == "code"):
            printed = "".join(o.get("text", "") if o.get("output_type") == "stream"
                              else o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            for how, expr in re.findall(r"(getsource|show_source)\(([\w.]+)", cell.source):
                head, *attrs = expr.split(".")
                if head not in PRINTED_MODULES:  # defined in the chapter itself
                    continue
                obj = importlib.import_module(PRINTED_MODULES[head])
                for attr in attrs:
                    obj = getattr(obj, attr)
                # a display keeps no trailing newline
                shown = inspect.getsource(obj) if how == "getsource" else show.source(obj).text.rstrip("\n")
                assert shown in printed, f"{nb_path.name} shows an older {expr}: execute it again"
                checked += 1
    assert checked >= 15


def test_refresh_prose_copies_prose_but_never_code(tmp_path, monkeypatch):
    import nbformat
    import pytest

    header, src, out = _empty_book(tmp_path, monkeypatch)
    md = src / "01_x.md"
    md.write_text(header + "\nOld words.\n\n```{code-cell} ipython3\nprint(1)\n```\n")
    nb = book.read_source(md)
    next(c for c in nb.cells if c.cell_type == "code").outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nbformat.write(nb, out / "01_x.ipynb")
    md.write_text(header + "\nNew words.\n\n```{code-cell} ipython3\nprint(1)\n```\n")
    assert book.sync_problems() and book.refresh_prose() == [out / "01_x.ipynb"]
    assert not book.sync_problems()
    kept = nbformat.read(out / "01_x.ipynb", as_version=4)
    assert [c.source for c in kept.cells if c.cell_type == "markdown"] == ["New words."]
    assert [c.outputs[0]["text"] for c in kept.cells if c.cell_type == "code"] == ["1\n"]
    md.write_text(header + "\nNew words.\n\n```{code-cell} ipython3\nprint(2)\n```\n")
    with pytest.raises(ValueError, match="re-execute"):
        book.refresh_prose()
