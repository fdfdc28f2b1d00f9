"""A generated cohort for the similarity check: chapter 01's release notebook with answers put in its stub cells.

- `independent`: one student per correct alternative of the chapter-01 answer tests (tests/test_tensors_answers.py),
  each written by someone else: none of them may be reported.
- `scaffold`: students who handed in the release notebook untouched: nothing of their own to compare.
- `Ada Pair` and `Ben <b>Pair` (a name to escape): the same two solutions with helpers, Ben's with every
  name changed, the functions in another order and other comments: they must be reported, for both exercises.
"""
from __future__ import annotations

import inspect
import random
import re
from pathlib import Path

import nbformat

from tests import test_tensors_answers as answers

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "notebooks" / "01_tensors.ipynb"

ADA_NAME, BEN_NAME = "Ada Pair", "Ben <b>Pair"
# The answer tests' named alternatives (lambdas have no source of their own to hand in).
INDEPENDENT = [(name, fn) for name, fn in answers.CORRECT if fn.__name__ != "<lambda>"]

ADA = {
    "element_offset": '''
def _normalise(i, size):
    # negative indices count from the end, like Python lists
    if i < 0:
        i = i + size
    if i < 0 or i >= size:
        raise IndexError(f"index {i} is out of range for a dimension of size {size}")
    return i


def _check_rank(x, index):
    # one index per dimension, no more and no fewer
    if len(index) != x.dim():
        raise IndexError(f"expected {x.dim()} indices, got {len(index)}")


def element_offset(x, index):
    """Storage position (in elements) of x[index]."""
    _check_rank(x, index)
    total = x.storage_offset()
    for dim, i in enumerate(index):
        total = total + _normalise(i, x.shape[dim]) * x.stride()[dim]
    return total
''',
    "broadcast_shape": '''
def _pad_left(shape, length):
    # prepend ones so both shapes have the same number of dimensions
    return (1,) * (length - len(shape)) + tuple(shape)


def broadcast_shape(a, b):
    """Shape of the result of broadcasting shapes a and b."""
    length = max(len(a), len(b))
    left, right = _pad_left(a, length), _pad_left(b, length)
    result = []
    for m, n in zip(left, right):
        if m == n or n == 1:
            result.append(m)
        elif m == 1:
            result.append(n)
        else:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast: {m} vs {n}")
    return tuple(result)
''',
}
# Ben's: every name of Ada's changed, her helpers moved after the function, her comments rewritten.
RENAMES = {"_normalise": "_wrap_index", "_check_rank": "_same_length", "total": "offset", "dim": "d", "size": "n",
           "_pad_left": "_ones_in_front", "length": "ndim", "left": "sa", "right": "sb", "result": "out",
           "m": "p", "n": "q"}
COMMENTS = {"# negative indices count from the end, like Python lists": "# wrap around below zero",
            "# one index per dimension, no more and no fewer": "# as many indices as dimensions",
            "# prepend ones so both shapes have the same number of dimensions": "# left-pad with 1s"}


def _renamed(code: str) -> str:
    for old, new in COMMENTS.items():
        code = code.replace(old, new)
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: RENAMES.get(m.group(0), m.group(0)), code)


def _reordered(code: str) -> str:
    """The cell's functions with the graded one first and the helpers after it, in reverse order."""
    blocks = [b.strip("\n") for b in re.split(r"\n(?=def )", code.strip("\n"))]
    helpers, main = blocks[:-1], blocks[-1]
    return "\n\n\n".join([main, *reversed(helpers)]) + "\n"


BEN = {name: _reordered(_renamed(code)) for name, code in ADA.items()}


def source_of(fn, name: str) -> str:
    """An alternative's source, as the student would have written it under the exercise's name."""
    code = inspect.getsource(fn)
    return re.sub(rf"\bdef {re.escape(fn.__name__)}\(", f"def {name}(", code, count=1)


def notebook(answers_by_name: dict[str, str]) -> nbformat.NotebookNode:
    """The release notebook with each named exercise's stub cell replaced by the answer."""
    nb = nbformat.read(RELEASE, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for name, code in answers_by_name.items():
            if re.search(rf"^def {name}\(", cell.source, re.M) and "raise NotImplementedError" in cell.source:
                cell.source = code.strip("\n")
    return nb


def write_cohort(folder: Path, scaffold: int = 2) -> dict[str, dict[str, str]]:
    """Write the cohort as SUBMISSIONS/<student>/01_tensors.ipynb; returns each student's answers by exercise."""
    cohort: dict[str, dict[str, str]] = {}
    for i, (name, fn) in enumerate(INDEPENDENT):
        cohort[f"Independent {i:02d} {fn.__name__}"] = {name: source_of(fn, name)}
    for i in range(scaffold):
        cohort[f"Scaffold {i}"] = {}
    cohort[ADA_NAME], cohort[BEN_NAME] = dict(ADA), dict(BEN)
    for student, answers_by_name in cohort.items():
        (folder / student).mkdir(parents=True)
        nbformat.write(notebook(answers_by_name), folder / student / "01_tensors.ipynb")
    return cohort


def variant(code: str, seed: int) -> str:
    """An independent-looking rewrite for the scale test: names changed at random (same structure)."""
    rng = random.Random(seed)
    names = sorted(set(re.findall(r"\b[a-z_][a-z0-9_]*\b", code)) - {"def", "return", "for", "in", "if", "else",
                                                                   "elif", "raise", "not", "or", "and", "range",
                                                                   "len", "zip", "tuple", "max", "enumerate"})
    new = {n: f"v{rng.randrange(10**6)}" for n in names}
    return re.sub(r"\b[a-z_][a-z0-9_]*\b", lambda m: new.get(m.group(0), m.group(0)), code)
