#!/usr/bin/env bash
# ../shared/GPU.md's checklist in one run, on a lent GPU machine with no package index, from the repository root:
#   bash benchmarks/gpu_checklist.sh [STEP ...]   (steps: timers mfu notebooks tests grade class; all when none named)
# OUT: where the log, the plots, the executed notebooks and the gradebook go.
# It expects the pure-Python packages that machine lacks as wheels in .whl/ (GPU.md says which and how; add
# psutil, pytest-xdist and execnet for the tests), and takes bubblewrap from .whl/bwrap/ (the binary and its
# libraries, copied from a Debian machine) when that machine has none, so the sandbox tests run there too.
# Steps that time the GPU run alone, first; each step has a time limit and its exit status is logged,
# so one failing step never hides the others. It reports; it does not gate.
set -u
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/checklist.log") 2>&1

# The wheels go on the interpreter's own path (a .pth file in its site-packages), not only on PYTHONPATH: a
# sandboxed grading kernel's PYTHONPATH holds the public grader alone, and without them it dies at start.
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    echo /tmp/site > "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_course_wheels.pth"
    export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD
if ! command -v bwrap >/dev/null && [ -x .whl/bwrap/bwrap ] && [ "$(id -u)" = 0 ]; then
    cp .whl/bwrap/lib* /usr/local/lib/ && ldconfig && cp .whl/bwrap/bwrap /usr/local/bin/bwrap
fi
python3 -m ipykernel install --user --name resource-accounting --display-name "Python (resource accounting)" >/dev/null

STEPS=" ${*:-timers mfu notebooks tests grade class} "
wants() { [[ $STEPS == *" $1 "* ]]; }

step() {  # step NAME SECONDS COMMAND...: run it under a time limit, log how it ended and how long it took
    local name=$1 limit=$2; shift 2
    echo; echo "=== $name ($(date -u +%H:%M:%S))"
    local t0=$SECONDS
    timeout "$limit" "$@"
    echo "=== $name: exit $? in $((SECONDS - t0)) s"
}

step device 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u;
    python3 -c "import torch, triton; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"triton\", triton.__version__, torch.cuda.get_device_name())"'

# 3. time_fn against triton's do_bench, and bf16 8192^3 MFU (the GPU alone)
wants timers && step timers 150 python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import timers; timers.compare_cuda()'
# 4. every dtype of the spec table, with the plot
wants mfu && step mfu 150 python3 -m grader mfu --plot "$OUT/mfu.png"

# 2, 5, 7, 8. every solution notebook on the GPU, top to bottom (each asserts its checks pass); chapter 10's
# training runs on the CPU through gloo, so it runs beside the others. Executed copies come back with their plots.
if wants notebooks; then  # NOTEBOOKS="solutions/02_dtypes.ipynb ..." runs only those
    ddp=""
    for nb in ${NOTEBOOKS:-solutions/*.ipynb}; do
        if [[ $nb == *10_ddp* ]]; then
            step "notebook 10_ddp" 300 python3 -m grader execute "$nb" > "$OUT/nb10.log" 2>&1 &
            ddp=$!
        fi
    done
    for nb in ${NOTEBOOKS:-solutions/*.ipynb}; do
        [[ $nb == *10_ddp* ]] || step "notebook $(basename "$nb")" 120 python3 -m grader execute "$nb"
    done
    if [ -n "$ddp" ]; then wait "$ddp"; cat "$OUT/nb10.log"; fi  # (a bare `wait` would also wait for the tee)
    tar -czf "$OUT/executed.tar.gz" solutions/*.ipynb
fi

# 6. the demo cohort's grades, to compare with a CPU run's; then 1 (and 6's grading tests): every test, the CUDA
# ones CPU runs skip among them, but those that need JupyterLab, a browser or a package index, which that machine
# lacks. Ten workers on its 16 cores leave the grading tests' time limits some slack.
if wants grade; then  # --seed bench: the hidden inputs of a CPU run with the same seed, so grades.csv compares byte for byte
    step "grade demo" 150 python3 -m grader grade --out "$OUT/grades" --workers 8 --seed bench
    tar -czf "$OUT/grades.tar.gz" -C "$OUT" grades && rm -rf "$OUT/grades"
fi
# 8. a generated class on one worker and on every core (issue 29's 16-core figure): CLASS="STUDENTS:WORKERS ...".
# The same class both ways: with linear scaling its worker-seconds per notebook are the same. Students go solved,
# half solved, blank, hazardous in turn; a hazardous one's loop runs each of its notebooks to the 60 s cell limit,
# so a class of 4 or more costs minutes more. On the H200 machine of 2026-11-27 a notebook took 19 s on 16 workers.
if wants class; then
    for spec in ${CLASS:-2:1 2:16}; do
        step "class $spec" 300 python3 benchmarks/grading.py --students "${spec%:*}" --workers "${spec#*:}" \
            --no-whole-notebooks --no-sandbox-cost
    done
fi
wants tests && step tests 330 python3 -m pytest -q -rfEs -p no:cacheprovider -n 10 --dist loadfile --junitxml "$OUT/junit.xml" \
    --ignore tests/test_lab.py --ignore tests/test_browser.py --ignore tests/test_release.py tests
