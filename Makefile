# The course's commands. Only python3 (3.11+) and make are needed: everything else goes into .venv.
#   make lab      set up (once) and open JupyterLab on notebooks/
#   make test     set up (once) and run every test
#   make student  regenerate notebooks/ from solutions/
#   make release  build dist/student: notebooks and grader, without solutions or hidden checks
#   make grade    grade SUBMISSIONS (default: the demo cohort) into OUT (default: grades/)
#   make bench    timer accuracy (and, on a GPU, MFU) report; grading cost and parallel speed-up

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
KERNEL := resource-accounting

LAB_IP    ?= 127.0.0.1
LAB_PORT  ?= 8888
LAB_FLAGS ?=
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
LAB_ROOT  := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)

# make grade SUBMISSIONS=dir OUT=dir [GRADE_FLAGS="--workers 4 --timeout 120 --memory 8G"]
SUBMISSIONS ?=
OUT         ?= grades
GRADE_FLAGS ?=

.PHONY: setup lab test grade student release demo bench mfu clean

setup: $(STAMP)

# Re-runs only when the requirements change (or the venv is new): `make setup` twice does nothing the second time.
$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (resource accounting)" >/dev/null
	@touch $(STAMP)
	@echo "set up .venv with kernel '$(KERNEL)'"

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(LAB_ROOT) $(LAB_FLAGS)

# One pytest run: the grader's tests (tests/), then nbval over every solution notebook.
test: $(STAMP)
	$(BIN)/python -m pytest tests solutions --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300 -p no:cacheprovider

grade: $(STAMP)
	$(BIN)/python -m grader grade $(if $(SUBMISSIONS),"$(SUBMISSIONS)",) --out "$(OUT)" $(GRADE_FLAGS)

student: $(STAMP)
	$(BIN)/python -m grader student --solutions solutions --out notebooks

release: $(STAMP)
	$(BIN)/python -m grader release --out dist/student

demo: $(STAMP)
	$(BIN)/python -m grader demo

bench: $(STAMP)
	$(BIN)/python benchmarks/timers.py
	$(BIN)/python benchmarks/grading.py

mfu: $(STAMP)
	$(BIN)/python -m grader mfu

clean:
	rm -rf $(VENV) dist .pytest_cache grades
