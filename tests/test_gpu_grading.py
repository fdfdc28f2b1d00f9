"""Chapter 09's grades do not depend on the grading machine's GPUs (issue 26).

On an H200 the demo cohort's correct `try_gpu` answers scored 0.67 instead of 1: a check counted the GPUs of the
grading process (one) while the sandboxed kernel, where the answer runs, saw none. Every chapter 09 check now sets
the machine it judges on inside the kernel. Here the demo cohort's chapter 09 is graded twice, at the same time:
as it is, and with a GPU **simulated** in the grading process (this machine has none): before anything is imported,
its `torch.cuda` reports one available device, and the grading workers forked from it inherit that; the kernels,
fresh processes, see this machine as it is. The two grades.csv files must be the same, row for row.
"""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "submissions"
ARGS = ["grade", str(DEMO), "--chapters", "09_gpu", "--workers", "1", "--timeout", "120", "--check-timeout", "60"]
# `python -m grader`, with torch.cuda reporting one GPU in the grading process and in its workers, forked from it
# (whatever torch is built with: a forkserver's workers would start from a process without the simulation).
WITH_A_SIMULATED_GPU = ("import sys, torch; torch.cuda.device_count = lambda: 1; "
                        "torch.cuda.is_available = lambda: True; "
                        "from grader.autograde import cohort; cohort.start_method = lambda: 'fork'; "
                        "from grader.__main__ import main; sys.exit(main(sys.argv[1:]))")


def _rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_grades_are_the_same_with_a_gpu_in_the_grading_process(tmp_path):
    plain, simulated = tmp_path / "plain", tmp_path / "simulated_gpu"
    runs = [subprocess.Popen([sys.executable, "-m", "grader", *ARGS, "--out", str(plain)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            subprocess.Popen([sys.executable, "-c", WITH_A_SIMULATED_GPU, *ARGS, "--out", str(simulated)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    for run in runs:
        _, err = run.communicate(timeout=900)
        assert run.returncode == 0, err[-3000:]
    with_gpu, without = _rows(simulated), _rows(plain)
    assert [(r["student"], r["exercise"]) for r in without] == [(r["student"], r["exercise"]) for r in with_gpu]
    assert {r["student"] for r in without} == {"Ada Lovelace", "Ben Bitdiddle", "Chloé Dubois"}
    assert {r["exercise"] for r in without} >= {"gpu.try_gpu", "gpu.time_fn", "gpu.transfer_bandwidth"}
    differ = [(a["student"], a["exercise"], a["score"], b["score"], b["message"]) for a, b in zip(without, with_gpu)
              if a != b]
    assert not differ
    solved = {r["exercise"]: r["score"] == r["max_score"] for r in without if r["student"] == "Ada Lovelace"}
    assert solved and all(solved.values()), solved  # her solutions pass either way
