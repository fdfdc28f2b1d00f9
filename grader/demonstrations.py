"""Demonstration cells: the cells of a chapter that grading can skip (timing sweeps, plots, profiler traces, real
process launches that grade nothing), marked when the student notebook is generated.

A code cell is needed for grading when it imports, writes a file, sets global state (seeds, default dtype,
threads, determinism), or binds a name that a needed cell or a `grader.check` cell reads (a function's body
included): the exercises, the helpers they call, the data they use. Everything else is a demonstration, a
function or class it defines for itself included (a timing helper, a model to measure), and the check cells
themselves (grading runs the checks, not the cell). The mark is a tag plus the digest of the cell's source as
generated: grading skips a marked cell only while its source is unchanged, so any cell a student edits or adds
runs. One declaration here, used by the generator (authoring/student.py) and by grading (autograde/notebook.py).
"""
from __future__ import annotations

import ast
import hashlib
import symtable
from collections.abc import Sequence
from typing import Any

TAG = "demonstration"          # the cell tag a person sees in JupyterLab's property inspector
DIGEST_KEY = "grader_digest"   # cell metadata: the digest of the source the tag was given to
# Calls that change state every later cell sees: a cell making one is needed wherever it stands.
_GLOBAL_STATE = ("manual_seed", "seed", "set_default_dtype", "set_default_device", "set_num_threads",
                 "use_deterministic_algorithms", "set_flush_denormal", "set_printoptions", "filterwarnings",
                 "chdir", "setrecursionlimit", "set_float32_matmul_precision")


# Scopes that run while the cell runs (comprehensions): a global they read that the cell binds is the cell's own.
_IMMEDIATE = ("listcomp", "setcomp", "dictcomp", "genexpr")


def digest(source: str) -> str:
    """What a demonstration's mark holds: a short digest of its source, to see whether the student changed it."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def is_marked(cell: Any) -> bool:
    """Whether grading may skip `cell` (a notebook cell dict): tagged a demonstration, its source unchanged."""
    metadata = cell.get("metadata") or {}
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    tags = metadata.get("tags") or []
    return (isinstance(tags, list) and TAG in tags and isinstance(metadata.get(DIGEST_KEY), str)
            and metadata[DIGEST_KEY] == digest(source))


class _Cell:
    """What one cell binds in the notebook's namespace, the names it reads from it, and whether it must run
    whatever it binds."""

    def __init__(self, source: str) -> None:
        self.binds: set[str] = set()
        self.reads: set[str] = set()
        self.essential = False
        self.checks = False  # it calls grader.check: what it reads (the exercise) is needed, the cell is not
        python = _python(source)
        try:
            tree = ast.parse(python) if python is not None else None
            table = symtable.symtable(python, "<cell>", "exec") if python is not None else None
        except (SyntaxError, ValueError, RecursionError):
            tree = table = None
        if tree is None or table is None:  # not Python we can read (a magic we do not know): run it
            self.essential = True
            return
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global)):
                self.essential = True
            elif isinstance(node, ast.Call) and _callee(node.func) in _GLOBAL_STATE:
                self.essential = True
            elif isinstance(node, ast.Call) and _is_check(node.func):
                self.checks = True
        top = table.get_symbols()
        self.binds = {s.get_name() for s in top if s.is_assigned() or s.is_imported()}
        self.reads = {s.get_name() for s in top if s.is_referenced() and not s.is_assigned()}
        stack = [(child, True) for child in table.get_children()]
        while stack:  # the globals read inside: a comprehension's as the cell runs, a function's whenever it is called
            scope, now = stack.pop()
            now = now and scope.get_name() in _IMMEDIATE
            self.reads |= {s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced()
                           and not (now and s.get_name() in self.binds)}
            stack.extend((child, now) for child in scope.get_children())


def _python(source: str) -> str | None:
    """The cell as Python: line magics become calls, `%%needs` keeps its body; another cell magic is None."""
    first, _, body = source.lstrip().partition("\n")
    if first.startswith("%%"):
        if not first.startswith("%%needs"):
            return None
        source = body
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _is_check(func: ast.AST) -> bool:
    """`grader.check`: the call after an exercise, which reads the exercise's name."""
    return (isinstance(func, ast.Attribute) and func.attr == "check" and isinstance(func.value, ast.Name)
            and func.value.id == "grader")


def _callee(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def needed(sources: Sequence[str]) -> list[bool]:
    """For each code cell (in order), whether grading must run it: essential cells, and, until nothing changes,
    every cell that binds a name a needed cell or a check cell reads."""
    cells = [_Cell(s) for s in sources]
    keep = [c.essential for c in cells]
    wanted: set[str] = set().union(*(c.reads for c, k in zip(cells, keep) if k or c.checks))
    changed = True
    while changed:
        changed = False
        for i, cell in enumerate(cells):
            if not keep[i] and cell.binds & wanted:
                keep[i] = changed = True
                wanted |= cell.reads
    return keep


def mark(cells: list[Any]) -> None:
    """Tag every demonstration among `cells` (a student notebook's, in place) with its source's digest."""
    code = [c for c in cells if c.get("cell_type") == "code"]
    for cell, keep in zip(code, needed(["".join(c.source) if isinstance(c.source, list) else c.source
                                          for c in code])):
        tags = [t for t in cell.metadata.get("tags", []) if t != TAG]
        cell.metadata.pop(DIGEST_KEY, None)
        if not keep:
            tags.append(TAG)
            cell.metadata[DIGEST_KEY] = digest(cell.source)
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
