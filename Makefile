# A fresh Linux machine with Python 3.11+: `make venv`, then `make book` and `make test` (`make help` lists the targets).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BOOK_FLAGS := -W -n --keep-going
NOTEBOOKS := $(wildcard book/*.ipynb)
# Two pytest workers (CI has 2 cores). Unit tests are dealt out one by one (the slow ones are few and long), but
# those marked xdist_group stay on one worker (runs that share a cached cold start); notebooks one file per
# worker, so that each keeps one kernel. `make unit UNIT_PAR= NB_PAR=` runs serially.
UNIT_PAR ?= -n 2 --dist loadgroup
NB_PAR ?= -n 2 --dist loadfile
# One OpenMP thread per test process and kernel: two workers each spinning two threads on two cores made one
# notebook test 17x slower (316 s instead of 18 s) on a clean checkout.
ONE_THREAD := OMP_NUM_THREADS=1

.PHONY: help venv static book book-html book-then-browser lint unit nbval student browser lab test train clean min-test trl-test \
	conformance colab-test

# The pinned environment's transformers needs Python 3.11: an older one is refused in one line (make's $(error)),
# before pip's resolver would fail at length. An existing .venv is the Python checked (it may be an old one).
VENV_PY = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
PY_OK = $(shell ($(VENV_PY) -c 'import sys; print(sys.version_info >= (3, 11))') 2>/dev/null)
PY_SEEN = $(or $(shell ($(VENV_PY) -V) 2>/dev/null),not found)

$(STAMP): requirements.txt pyproject.toml
	$(if $(filter True,$(PY_OK)),,$(error make venv needs Python 3.11 or newer and $(VENV_PY) is $(PY_SEEN): \
	run make venv PYTHON=python3.11 (remove an old $(VENV) first)))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# One line per target a newcomer types; the times are an idle 2-core machine's.
help:
	@echo "make venv      .venv with the pinned versions and sapo_lab installed (about 7 min; Python 3.11+)"
	@echo "make book      execute every chapter and build the HTML book in _build/html (about 10 min)"
	@echo "make test      ruff, the unit tests, the executed book and the browser test (about 20 min)"
	@echo "make lab       open the chapters in JupyterLab, where the live sliders work"
	@echo "make student   write student/: the chapters with each solution replaced by a function to fill in"
	@echo "make unit      the unit tests alone"
	@echo "make nbval     every chapter executed and its outputs compared"
	@echo "make min-test  the compatibility leg: the lowest versions pyproject.toml allows (constraints-min.txt)"
	@echo "make clean     remove what the targets built (not .venv)"

static: venv
	$(BIN)/python tools/vendor_static.py

# Executes every chapter (SAPO_LAB_BOOK=1 makes figures use the book's own plotly.js).
book-html: static
	rm -rf _build/html _build/jupyter_execute
	SAPO_LAB_BOOK=1 PATH=$(abspath $(BIN)):$$PATH $(BIN)/jupyter-book build . $(BOOK_FLAGS)

book: book-html
	@echo "Book: $(abspath _build/html/index.html)"

# The chapters in JupyterLab, where the live explorers run (http://127.0.0.1:8888, printed with its token;
# allow_root: containers often run as root, where Jupyter otherwise refuses to start).
lab: venv
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=book --ServerApp.allow_root=True

lint: venv
	$(BIN)/ruff check .

unit: venv
	$(ONE_THREAD) $(BIN)/python -m pytest -q $(UNIT_PAR) -m "not browser"

nbval: venv
	$(ONE_THREAD) $(BIN)/python -m pytest -q $(NB_PAR) --nbval-lax --nbval-current-env $(NOTEBOOKS)

# Student notebooks in student/: solutions replaced by stubs, checks kept (tests/course/test_student.py checks that
# each runs up to its first stub and that the teacher notebooks survive the round trip unchanged).
student:
	$(PYTHON) tools/make_student.py

browser: venv
	$(BIN)/python -m pytest -q -m browser tests/book/test_browser.py tests/book/test_live_widgets.py

# Both cores stay busy: the book build executes its chapters one after another (-W: a cell that raises, an
# assert included, fails the build), so it runs beside the unit tests (two pytest workers); the browser test
# reads the built book and starts as soon as it is built, beside whatever unit tests are left. nbval runs each
# chapter alone in an empty folder in CI's Colab-like leg (tools/ci_colab.sh), and over every notebook here
# with `make nbval`.
test: lint static
	$(MAKE) -j2 --output-sync=target book-then-browser unit student

book-then-browser: book-html
	$(MAKE) browser

# Compatibility leg: the lowest versions pyproject.toml declares (constraints-min.txt), installed
# through pyproject.toml's own ranges so that a range and its pin cannot drift apart; the test
# tools keep requirements.txt's pins. Runs the unit tests of the layers that call those libraries, and the
# notebook that trains a task. Not rerun there: tests/book (the book's sources and built pages), tests/package
# (the import graph, docstrings, the README) and tests/course (the grader's processes, which call the objective
# and training code tested here): no declared range reaches them other than through those layers.
MIN_VENV := .venv-min
MIN_TESTS := $(filter-out tests/book tests/package tests/course tests/__pycache__,$(patsubst %/,%,$(wildcard tests/*/)))
MIN_STAMP := $(MIN_VENV)/.installed
MIN_NOTEBOOK := book/10a_bring_your_own_task.ipynb

$(MIN_STAMP): constraints-min.txt pyproject.toml requirements.txt
	test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	grep -E '^(pytest|pytest-xdist|execnet|hypothesis|sympy|nbval|ipykernel|matplotlib)==' requirements.txt > $(MIN_VENV)/test-tools.txt
	$(MIN_VENV)/bin/python -m pip install -q -c constraints-min.txt -e . -r $(MIN_VENV)/test-tools.txt pyyaml
	touch $(MIN_STAMP)

min-test: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pip check
	$(MIN_VENV)/bin/python tools/check_min_versions.py constraints-min.txt
	$(ONE_THREAD) $(MIN_VENV)/bin/python -m pytest -q $(UNIT_PAR) -m "not browser and not slow" $(MIN_TESTS)
	$(MIN_VENV)/bin/python -m pytest -q --nbval-lax --nbval-current-env $(MIN_NOTEBOOK)
# TRL in its own environment (benchmarks/.venv-trl), never in .venv
trl-test:
	bash tools/ci_trl.sh

# Colab-like leg: every chapter alone in an empty folder, at Colab's versions, from a clean clone
# (tools/ci_colab.sh; `make colab-test CHAPTERS="10c 12"` runs the chapters starting with those).
colab-test:
	bash tools/ci_colab.sh $(CHAPTERS)

# The SAPO conformance audit of every framework's own code, each in its own environment (framework_audit/):
# writes results/conformance/matrix.{json,md}. `make conformance CONFORMANCE=verl` reruns one framework.
conformance: venv
	bash framework_audit/run_all.sh $(CONFORMANCE)

train: venv
	$(BIN)/python -m sapo_lab train --config cpu-tiny

clean:
	rm -rf $(MIN_VENV) _build student book/_static/mathjax book/_static/plotly.min.js
