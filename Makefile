# The course's commands. Only python3 (3.11+) and make are needed: everything else goes into .venv.
#   make lab      set up (once) and open JupyterLab on notebooks/
#   make test     set up (once) and run every test
#   make student  regenerate notebooks/ from solutions/
#   make release  build dist/student and dist/student.zip: notebooks and grader, without solutions or hidden checks
#                 (COURSE_URL=where the zip will be published: adds the Colab set-up cell and the README's Colab route;
#                 LANG=zh: in Simplified Chinese, into dist/student-zh and dist/student-zh.zip)
#   make gradescope  build dist/autograder.zip, Gradescope's autograder (CHAPTERS=... for one assignment)
#   make grade    grade SUBMISSIONS (default: the demo cohort) into OUT (default: grades/)
#   make bench    timer accuracy (and, on a GPU, MFU) report; grading cost and parallel speed-up

PYTHON ?= python3
# VENV= (empty) uses $(PYTHON) as it is, with its packages already installed (a machine with no package index).
VENV   ?= .venv
KERNEL := resource-accounting
ifeq ($(strip $(VENV)),)
PY     := $(PYTHON)
STAMP  := .system-python
else
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
endif

LAB_IP    ?= 127.0.0.1
LAB_PORT  ?= 8888
LAB_FLAGS ?=

# make grade SUBMISSIONS=dir OUT=dir [GRADE_FLAGS="--workers 4 --timeout 120 --memory 8G"]
SUBMISSIONS ?=
OUT         ?= grades
GRADE_FLAGS ?=

# make test [TEST_WORKERS=n] [PYTEST_ARGS="-k dtypes"]: three pytest workers on CI's two cores, since a third of
# the run is waiting (time limits, sleeps, pip's disk writes) while the rest keeps both cores busy; a fourth only
# adds contention (docs/measurements.md, "make test").
TEST_WORKERS ?= 3
PYTEST_ARGS  ?=

.PHONY: setup lab test grade student release gradescope demo bench mfu clean

setup: $(STAMP)

# Re-runs only when the requirements change (or the venv is new): `make setup` twice does nothing the second time.
ifeq ($(strip $(VENV)),)
# No venv: only register the kernel for this interpreter (re-done every time; it is cheap).
.PHONY: $(STAMP)
$(STAMP):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed")'
	@$(PYTHON) -m ipykernel install --user --name $(KERNEL) --display-name "Python (resource accounting)" >/dev/null
else
$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=/path/to/python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt -r requirements-test.txt -e .
	@# Bytecode for every installed module, compiled on every core (pip compiles one file at a time: half the
	@# install's time). Sandboxed grading kernels cannot write it where they import from. A file only a newer
	@# Python reads (torch ships some) fails to compile, and pip's own compiling skips those as well.
	@$(PY) -m compileall -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))') >/dev/null || true
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (resource accounting)" >/dev/null
	@touch $(STAMP)
	@echo "set up $(VENV) with kernel '$(KERNEL)'"
endif

# `python -m grader lab` does the same without make: it registers the kernel if missing and offers only it.
lab: $(STAMP)
	$(PY) -m grader lab $(if $(strip $(VENV)),--venv $(VENV),--no-venv) --ip $(LAB_IP) --port $(LAB_PORT) $(LAB_FLAGS)

# One pytest run: the grader's tests (tests/) and nbval over every solution notebook, in TEST_WORKERS
# processes, one file (a notebook's cells together) per worker at a time.
test: $(STAMP)
	$(PY) -m pytest tests solutions --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=300 -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

grade: $(STAMP)
	$(PY) -m grader grade $(if $(SUBMISSIONS),"$(SUBMISSIONS)",) --out "$(OUT)" $(GRADE_FLAGS)

student: $(STAMP)
	$(PY) -m grader student --solutions solutions --out notebooks

# make release COURSE_URL=https://github.com/ORG/REPO/releases/download/TAG/student.zip (or a file:// URL, a path);
# Colab badges for a GitHub address, whose repository holds the release folder (dist/student) at TAG.
COURSE_URL ?=
# make release LANG=zh: the release in a translation (translations/zh/). LANG counts only when given on make's command
# line: in the environment it is the locale (LANG=en_US.UTF-8), which must not pick the course's language.
# RELEASE_LANG=zh is the same from anywhere (the environment included).
ifeq ($(origin LANG),command line)
RELEASE_LANG := $(LANG)
unexport LANG  # so commands do not run under the locale "zh", which no system has (Python then uses UTF-8)
endif
RELEASE_LANG ?=
RELEASE_AS := $(filter-out en,$(strip $(RELEASE_LANG)))
release: $(STAMP)
	$(PY) -m grader release $(if $(RELEASE_AS),--lang $(RELEASE_AS) --out dist/student-$(RELEASE_AS),--out dist/student)$(if $(strip $(COURSE_URL)), --course-url "$(COURSE_URL)",)

# make gradescope [CHAPTERS=03_memory,04_flops]: Gradescope's autograder zip for an assignment (default: all chapters)
gradescope: $(STAMP)
	$(PY) -m grader gradescope --out dist/autograder.zip $(if $(CHAPTERS),--chapters $(CHAPTERS),)

demo: $(STAMP)
	$(PY) -m grader demo

bench: $(STAMP)
	$(PY) benchmarks/timers.py
	$(PY) benchmarks/grading.py

mfu: $(STAMP)
	$(PY) -m grader mfu

clean:
	rm -rf $(VENV) dist .pytest_cache grades
