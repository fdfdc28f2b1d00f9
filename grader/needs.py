"""`%%needs NAME ...`: a notebook cell that uses the student's exercises runs only once they are written.

An untouched student notebook must run to its last cell under "Run All". A cell that demonstrates
or measures with `same_storage` starts with `%%needs same_storage`; while that exercise is still the
stub the generator wrote (`raise NotImplementedError`), the cell prints one line saying what it
waits for and does nothing else, so no traceback stops the run and no plot is drawn from empty data.
Once the exercise is written the cell runs as plain Python: its errors show as usual.
`import grader` registers the magic in IPython.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Any, Mapping

__all__ = ["unwritten", "waiting_for", "raised_by", "register"]


def _raises_not_implemented(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _returns(body: list[ast.stmt]) -> bool:
    """Whether the statements return or yield anywhere (nested functions and classes aside)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _function_unwritten(fn: types.FunctionType) -> bool:
    """A stub: its own body has a top-level `raise NotImplementedError` and no way to return before it."""
    if "NotImplementedError" not in fn.__code__.co_names:
        return False
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return True  # it names NotImplementedError and we cannot read it: treat as unwritten
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return False
    body = defs[0].body
    return any(_raises_not_implemented(stmt) for stmt in body) and not _returns(body)


def unwritten(obj: Any) -> bool:
    """True while `obj` is still an exercise stub: a function, or a class with a method, that raises NotImplementedError."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return _function_unwritten(obj)
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, property):
                if any(unwritten(f) for f in (value.fget, value.fset) if f is not None):
                    return True
            elif isinstance(value, (types.FunctionType, staticmethod, classmethod)) and unwritten(value):
                return True
    return False


def waiting_for(names: list[str], namespace: Mapping[str, Any]) -> list[str]:
    """The names that are not defined yet or are still stubs, in the order given."""
    return [n for n in names if n not in namespace or unwritten(namespace[n])]


def _message(waiting: list[str]) -> str:
    """The one line every skip prints, whether a name is a stub or a partly written class."""
    listed = ", ".join(f"`{n}`" for n in waiting)
    them = "it is" if len(waiting) == 1 else "they are"
    return f"Skipped: this cell uses {listed}, not written yet. Run it again once {them} written."


def _codes(obj: Any) -> set[types.CodeType]:
    """The code objects of a function, or of a class's methods, static and class methods and properties."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return {obj.__code__}
    codes: set[types.CodeType] = set()
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, property):
                for f in (value.fget, value.fset):
                    codes |= _codes(f) if f is not None else set()
            elif isinstance(value, (types.FunctionType, staticmethod, classmethod)):
                codes |= _codes(value)
    return codes


def raised_by(names: list[str], namespace: Mapping[str, Any], error: BaseException) -> list[str]:
    """Which of `names` raised `error` (the innermost of their frames in its traceback); all of them if none did."""
    codes = {n: _codes(namespace.get(n)) for n in names}
    tb, found = error.__traceback__, None
    while tb is not None:
        found = next((n for n, c in codes.items() if tb.tb_frame.f_code in c), found)
        tb = tb.tb_next
    return [found] if found is not None else list(names)


def needs(line: str, cell: str) -> None:
    """Cell magic: run the cell only when every exercise named on the magic's line is written."""
    from IPython import get_ipython

    shell = get_ipython()
    names = line.replace(",", " ").split()
    waiting = waiting_for(names, shell.user_ns)
    if waiting:
        print(_message(waiting))
        return
    # Run the cell as the shell would (transformed, compiled with its source kept for tracebacks).
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source)
    code = shell.compile(ast.parse(source, filename=filename), filename, "exec")
    try:
        exec(code, shell.user_ns)
    except NotImplementedError as e:  # a partly written exercise (e.g. one method of a class still a stub)
        print(_message(raised_by(names, shell.user_ns, e)))


def register(shell: Any = None) -> None:
    """Register `%%needs` in the running IPython shell (nothing outside IPython)."""
    if shell is None:
        import sys

        if "IPython" not in sys.modules:
            return
        from IPython import get_ipython

        shell = get_ipython()
    if shell is not None and hasattr(shell, "register_magic_function"):
        shell.register_magic_function(needs, magic_kind="cell", magic_name="needs")
