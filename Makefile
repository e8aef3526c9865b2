# fp8_tutorial: the book and its tests.
#
#   make test      pytest over the package, nbval over every chapter (interpreter on a CPU,
#                  compiled on a GPU), the book/ <-> notebooks/ sync check, the book built with -W
#   make book      build the book into _build/html (no execution: it renders book/*.ipynb); needs
#                  only Jupyter Book, in its own .venv-book (no torch, no Triton)
#   make execute   execute notebooks/*.md into book/*.ipynb on a Hopper GPU (CHAPTERS="00 02" for some)
#   make test-newest  the package's tests (the offline compile test among them) against the newest
#                  torch and Triton that pip installs, in their own .venv-newest (requirements-newest.txt)
#
# Each target creates .venv from requirements.txt when missing. To use an existing environment
# instead (a GPU machine with its own torch and Triton, no network), pass PYTHON:
#   make execute PYTHON=python3

VENV := .venv
PYTHON ?= $(VENV)/bin/python
CHAPTERS ?=
NBVAL_DIR ?= $(or $(TMPDIR),/tmp)/fp8_tutorial_nbval
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONDONTWRITEBYTECODE := 1

# Only the default interpreter depends on .venv being built.
ifeq ($(PYTHON),$(VENV)/bin/python)
ENV := $(VENV)/.installed
else
ENV :=
endif

BOOK_VENV := .venv-book
JUPYTER_BOOK_IN = -c "import sys; from jupyter_book.cli.main import main; sys.argv[0] = 'jupyter-book'; sys.exit(main())"
JUPYTER_BOOK = $(PYTHON) $(JUPYTER_BOOK_IN)

.PHONY: test test-package test-notebooks test-book test-newest book execute env clean

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet --no-cache-dir -r requirements.txt
	touch $@

test: test-package test-notebooks test-book

test-package: $(ENV)
	$(PYTHON) -m pytest --durations=15 tests

test-notebooks: $(ENV)
	rm -rf $(NBVAL_DIR)
	$(PYTHON) -m fp8_tutorial convert $(NBVAL_DIR) $(CHAPTERS)
	$(PYTHON) -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=1200 \
		-p no:cacheprovider -c /dev/null --rootdir=$(NBVAL_DIR) $(NBVAL_DIR)

test-book: $(ENV)
	rm -rf _build
	$(JUPYTER_BOOK) build . --warningiserror --keep-going

NEWEST_VENV := .venv-newest

$(NEWEST_VENV)/.installed: requirements-newest.txt
	python3 -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_VENV)/bin/python -m pip install --quiet --no-cache-dir -r requirements-newest.txt
	touch $@

test-newest: $(NEWEST_VENV)/.installed
	$(NEWEST_VENV)/bin/python -m pip install --quiet --no-cache-dir --upgrade -r requirements-newest.txt  # still the newest
	$(NEWEST_VENV)/bin/python -c "import torch, triton, numpy; print('newest: torch', torch.__version__, '| Triton', triton.__version__, '| numpy', numpy.__version__)"
	$(NEWEST_VENV)/bin/python -m pytest --durations=15 -p no:cacheprovider tests

$(BOOK_VENV)/.installed: requirements-book.txt
	python3 -m venv $(BOOK_VENV)
	$(BOOK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BOOK_VENV)/bin/python -m pip install --quiet --no-cache-dir -r requirements-book.txt
	touch $@

book: $(BOOK_VENV)/.installed
	$(BOOK_VENV)/bin/python $(JUPYTER_BOOK_IN) build .
	@echo "open _build/html/index.html"

execute: $(ENV)
	$(PYTHON) -m fp8_tutorial execute $(CHAPTERS)

env: $(ENV)
	$(PYTHON) -m fp8_tutorial env

clean:
	rm -rf _build $(NBVAL_DIR)
