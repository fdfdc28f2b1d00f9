#!/usr/bin/env bash
# ../shared/GPU.md's checklist in one run, on a lent GPU machine with no package index, from the repository root:
#   bash benchmarks/gpu_checklist.sh        (OUT: where the log, the plots and the executed notebooks go)
# It expects the pure-Python packages that machine lacks as wheels in .whl/ (GPU.md says which and how).
# Steps that time the GPU run alone, first; each step has a time limit and its exit status is logged,
# so one failing step never hides the others. It reports; it does not gate.
set -u
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/checklist.log") 2>&1

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
else
    export PYTHONPATH=$PWD
fi
python3 -m ipykernel install --user --name resource-accounting --display-name "Python (resource accounting)" >/dev/null

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
step timers 150 python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import timers; timers.compare_cuda()'
# 4. every dtype of the spec table, with the plot
step mfu 150 python3 -m grader mfu --plot "$OUT/mfu.png"

# 2, 5, 7, 8. every solution notebook on the GPU, top to bottom (each asserts its checks pass); chapter 10's
# training runs on the CPU through gloo, so it runs beside the others. Executed copies come back with their plots.
step "notebook 10_ddp" 300 python3 -m grader execute solutions/10_ddp.ipynb > "$OUT/nb10.log" 2>&1 &
for nb in solutions/0*.ipynb; do
    step "notebook $(basename "$nb")" 120 python3 -m grader execute "$nb"
done
wait $!  # chapter 10 (a bare `wait` would also wait for the tee above)
cat "$OUT/nb10.log"
tar -czf "$OUT/executed.tar.gz" solutions/*.ipynb

# 1, 6. the tests CPU runs skip, the GPU chapter's answers, and the grading tests (the browser and lab tests need
# JupyterLab, which that machine lacks)
step tests 240 python3 -m pytest -q -rs -p no:cacheprovider -n 8 --dist loadfile \
    tests/test_bench.py tests/test_specs.py tests/test_mfu.py tests/test_memtrack.py tests/test_torch_range.py \
    tests/test_gpu_answers.py tests/test_scenarios.py tests/test_bridge.py \
    tests/test_grading.py tests/test_grading_objects.py tests/test_demo_grading.py
step "grade demo" 180 python3 -m grader grade --out "$OUT/grades" --workers 8
cp "$OUT/grades/grades.csv" "$OUT/grades.csv" 2>/dev/null
rm -rf "$OUT/grades"
