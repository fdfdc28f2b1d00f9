"""Spot a notebook that replaces the grader, torch's comparisons or IPython's traceback display.

Grading does not depend on this (the verdict is reached in another process), but an instructor
should know. Two looks: this static one reads the cells' source, so code that never ran is caught
too; the kernel's probe (kernel_side.probe) catches what was done in ways the source hides.
"""
from __future__ import annotations

import ast
import functools

from IPython.core.inputtransformer2 import TransformerManager

# What a notebook must not replace: the comparisons a grader would use, the machinery scenarios drive
# (autograd, modules, saving), and how errors are shown.
PROTECTED = (
    "torch.allclose", "torch.equal", "torch.isclose", "torch.testing.assert_close",
    "torch.Tensor.__eq__", "torch.Tensor.allclose", "torch.Tensor.equal", "torch.Tensor.__bool__",
    "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward", "torch.autograd.gradcheck",
    "torch.autograd.gradgradcheck", "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
    "torch.nn.Module.__call__", "torch.nn.Module.parameters", "torch.nn.Module.named_parameters",
    "torch.nn.Module.state_dict", "torch.nn.Module.load_state_dict", "torch.nn.Module.register_forward_hook",
    "torch.save", "torch.load", "torch.optim.Optimizer.zero_grad", "os.replace", "os.fsync",
    "numpy.allclose", "numpy.array_equal", "numpy.testing.assert_allclose",
    "builtins.isinstance", "builtins.type",
    "IPython.core.interactiveshell.InteractiveShell.showtraceback",
    "IPython.core.interactiveshell.InteractiveShell._showtraceback",
    "IPython.core.interactiveshell.InteractiveShell.showsyntaxerror",
)

_ROOTS = ("torch", "numpy", "grader", "IPython", "sys", "builtins")
_SHELL_ATTRS = ("showtraceback", "_showtraceback", "showsyntaxerror")


def _protected(dotted: str) -> bool:
    if dotted in PROTECTED or dotted.startswith("grader."):
        return True
    return dotted.startswith("get_ipython().") and dotted.split(".", 1)[1] in _SHELL_ATTRS


class _Scan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {"get_ipython": "get_ipython"}
        self.found: list[str] = []

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name.split(".")[0] in _ROOTS:
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0 and node.module.split(".")[0] in _ROOTS:
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def dotted(self, node: ast.AST) -> str | None:
        """`torch.testing.assert_close` for that attribute chain, through import aliases; None if not ours."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "get_ipython":
            root = "get_ipython()"
        elif isinstance(node, ast.Name) and node.id in self.aliases:
            root = self.aliases[node.id]
        else:
            return None
        return ".".join([root, *reversed(parts)])

    def _target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t)
        elif isinstance(target, ast.Attribute):
            name = self.dotted(target)
            if name and _protected(name):
                self.found.append(name)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._target(t)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            owner = self.dotted(node.args[0])
            if owner:
                attr = node.args[1] if len(node.args) > 1 else None
                name = f"{owner}.{attr.value}" if isinstance(attr, ast.Constant) and isinstance(attr.value, str) else None
                if name is None or _protected(name):
                    self.found.append(name or f"an attribute of {owner}")
        elif isinstance(func, ast.Attribute) and func.attr == "set_custom_exc":
            self.found.append("get_ipython().set_custom_exc")
        elif (isinstance(func, ast.Attribute) and func.attr == "run_cell_magic" and len(node.args) >= 3
              and isinstance(node.args[2], ast.Constant) and isinstance(node.args[2].value, str)):
            self.visit_source(node.args[2].value)  # %%needs, %%capture...: the body is Python too
        self.generic_visit(node)

    def visit_source(self, source: str) -> None:
        tree = _parse(source)
        if tree is not None:
            self.visit(tree)


@functools.lru_cache(maxsize=512)
def _parse(source: str) -> ast.Module | None:
    """A cell as IPython runs it, parsed; None if it is not Python. Kept: a class's notebooks share most cells (the
    ones given: some 300 in ten chapters), and a worker grades many of them (the scan only reads the tree)."""
    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError, RecursionError):
        return None


def scan(sources: list[str], numbers: list[int]) -> list[str]:
    """`cell N replaces X` for every protected name the code cells assign, delete or setattr.

    `numbers` are the cells' positions in the notebook as Jupyter shows them (from 1, counting markdown).
    """
    found = []
    aliases: dict[str, str] = {}
    for i, source in zip(numbers, sources):
        visitor = _Scan()
        visitor.aliases.update(aliases)
        visitor.visit_source(source)
        aliases = visitor.aliases  # imports carry over to later cells, as in the kernel
        found += [f"cell {i} replaces {name}" for name in dict.fromkeys(visitor.found)]
    return found
