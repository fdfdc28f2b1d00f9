"""The grading pool's workers (grader/autograde/cohort.py): each starts with what every notebook's grading imports,
imported once before the workers start, not once in each."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A fresh grading process: the pool's first task reports what a worker imported for a first backward() (reference
# checks call it) and for the font list each kernel's home gets (sandbox.prepare_home).
PROBE = """
import json, sys
from grader.autograde import cohort
from grader.autograde.kernel import Limits
from tests.test_pool import first_imports
pool = cohort._pool(1, sys.argv[1], Limits(cell_timeout=5, check_timeout=5), None, None)
print(json.dumps(pool.submit(first_imports).result()))
pool.shutdown()
"""


def first_imports() -> list[str]:
    """In a worker: the packages its first backward() and its first kernel home import (none, when preloaded)."""
    import torch

    from grader.autograde import sandbox

    before = set(sys.modules)
    x = torch.ones(3, requires_grad=True)
    (2 * x).sum().backward()
    sandbox._font_lists()
    return sorted({name.split(".")[0] for name in set(sys.modules) - before})


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_worker_starts_with_what_each_notebook_imports(method):
    """Caught: sympy (imported by torch's first backward()) and matplotlib (for the font list) imported in every
    worker, about a second of CPU each, before its first notebook: 15 seconds of a 16-worker run."""
    done = subprocess.run([sys.executable, "-c", PROBE, method], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert not {"sympy", "matplotlib"} & set(imported), imported
