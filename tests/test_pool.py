"""The grading pool's workers (grader/autograde/cohort.py): each starts with what every notebook's grading imports,
imported once before the workers start, not once in each."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A fresh grading process, grading the chapters named: the pool's first task reports what a worker imported for a
# first backward() and a first optimizer (reference checks make both) and for the font list each kernel's home
# gets (sandbox.prepare_home); then whether this process imported torch._dynamo.
PROBE = """
import json, sys
from grader.autograde import cohort
from grader.autograde.kernel import Limits
from tests.test_pool import first_imports
pool = cohort._pool(1, sys.argv[1], Limits(cell_timeout=5, check_timeout=5), None, None, set(sys.argv[2:]))
print(json.dumps(pool.submit(first_imports).result()))
print(json.dumps("torch._dynamo" in sys.modules))
pool.shutdown()
"""


def first_imports() -> list[str]:
    """In a worker: the packages its first backward(), its first optimizer and its first kernel home import (none,
    when preloaded); torch._dynamo by its own name, as torch is imported already."""
    import torch

    from grader.autograde import sandbox

    before = set(sys.modules)
    x = torch.ones(3, requires_grad=True)
    (2 * x).sum().backward()
    torch.optim.SGD([x], lr=0.1).step()
    sandbox._font_lists()
    new = set(sys.modules) - before
    return sorted({name.split(".")[0] for name in new} | ({"torch._dynamo"} & new))


def probe(method: str, *chapters: str) -> tuple[list[str], bool]:
    done = subprocess.run([sys.executable, "-c", PROBE, method, *chapters], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    worker, main = done.stdout.strip().splitlines()[-2:]
    return json.loads(worker), json.loads(main)


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_worker_starts_with_what_each_notebook_imports(method):
    """Caught: sympy (imported by torch's first backward()) and matplotlib (for the font list) imported in every
    worker, about a second of CPU each, before its first notebook: 15 seconds of a 16-worker run; and torch._dynamo
    (by the first torch.optim optimizer: 1.4 CPU-seconds here) imported in every worker again."""
    imported, _ = probe(method, "01_tensors", "05_autograd")
    assert not {"sympy", "matplotlib", "torch._dynamo"} & set(imported), imported


def test_a_run_whose_checks_build_no_optimizer_does_not_import_dynamo():
    """Chapters 01 and 07's checks never import torch._dynamo: preloading it for them would cost each such run 1.4
    CPU-s (the probe's own optimizer then imports it in the worker)."""
    imported, main = probe("fork", "01_tensors", "07_initialization")
    assert not main and "torch._dynamo" in imported
