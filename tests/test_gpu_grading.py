"""Chapter 09's grades do not depend on the grading machine's GPUs (issue 26).

On an H200 the demo cohort's correct `try_gpu` answers scored 0.67 instead of 1: a check counted the GPUs of the
grading process (one) while the sandboxed kernel, where the answer runs, saw none. Every chapter 09 check now sets
the machine it judges on inside the kernel. Here the solved student's chapter 09 is graded with a GPU **simulated**
in the grading process (this machine has none): before anything is imported, its `torch.cuda` reports one available
device, and the grading workers forked from it inherit that; the kernels, fresh processes, see this machine as it
is. Its rows must be those of the demo grading without one (the shared `demo_out` fixture), row for row.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"
ARGS = ["--chapters", "09_gpu", "--workers", "1", "--timeout", "120", "--check-timeout", "60"]
# `python -m grader`, with torch.cuda reporting one GPU in the grading process and in its workers, forked from it
# (whatever torch is built with: a forkserver's workers would start from a process without the simulation).
WITH_A_SIMULATED_GPU = ("import sys, torch; torch.cuda.device_count = lambda: 1; "
                        "torch.cuda.is_available = lambda: True; "
                        "from grader.autograde import cohort; cohort.start_method = lambda: 'fork'; "
                        "from grader.__main__ import main; sys.exit(main(sys.argv[1:]))")


def _rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_grades_are_the_same_with_a_gpu_in_the_grading_process(demo_out, tmp_path):
    cohort, simulated = tmp_path / "cohort", tmp_path / "simulated_gpu"
    (cohort / "Ada Lovelace").mkdir(parents=True)
    shutil.copy(DEMO / "Ada Lovelace" / "09_gpu (1).ipynb", cohort / "Ada Lovelace")
    run = subprocess.run([sys.executable, "-c", WITH_A_SIMULATED_GPU, "grade", str(cohort), *ARGS,
                          "--out", str(simulated)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    with_gpu = _rows(simulated)
    without = [r for r in _rows(demo_out) if r["chapter"] == "09_gpu" and r["student"] == "Ada Lovelace"]
    assert [r["exercise"] for r in without] == [r["exercise"] for r in with_gpu]
    assert {r["exercise"] for r in without} >= {"gpu.try_gpu", "gpu.time_fn", "gpu.transfer_bandwidth"}
    differ = [(a["exercise"], a["score"], b["score"], b["message"]) for a, b in zip(without, with_gpu) if a != b]
    assert not differ
    assert all(r["score"] == r["max_score"] for r in with_gpu), with_gpu  # her solutions pass either way
