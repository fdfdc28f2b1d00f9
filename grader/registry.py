"""The exercise registry: every graded exercise, its points and its checks.

A check is a plain function that takes the student's objects (in the order the
exercise names them) and raises `grader.expect.CheckFailure` when something is
wrong. Its docstring's first line is what the student sees next to it.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

CheckFn = Callable[..., None]


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    fn: CheckFn
    hidden: bool = False
    weight: float = 1.0
    timeout: float | None = None


@dataclass
class Exercise:
    """One graded exercise: `id` is `<chapter>.<name>`, `needs` the names the student defines."""

    id: str
    points: float
    needs: tuple[str, ...]
    title: str = ""
    forbid: tuple[str, ...] = ()  # dotted names the student's code may not call, e.g. "torch.broadcast_shapes"
    counts: bool = False  # an accounting exercise: arithmetic on sizes, so every call is traced for a model run
    checks: list[Check] = field(default_factory=list)
    module: str = ""  # the module that declared it: the course's own exercises are held to the chapter rules

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    def public_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.hidden]

    def hidden_checks(self) -> list[Check]:
        return [c for c in self.checks if c.hidden]

    def _add(self, fn: CheckFn, hidden: bool, weight: float, timeout: float | None) -> CheckFn:
        doc = inspect.getdoc(fn) or fn.__name__.replace("_", " ")
        name = fn.__name__
        if any(c.name == name for c in self.checks):
            raise ValueError(f"{self.id}: two checks named {name!r}")
        # The student's line is the docstring's first paragraph, however many lines it wraps onto.
        self.checks.append(Check(name, " ".join(doc.split("\n\n", 1)[0].split()), fn, hidden, weight, timeout))
        return fn

    def check(self, fn: CheckFn | None = None, *, weight: float = 1.0, timeout: float | None = None):
        """Register a public check (runs in the student's notebook and at grading)."""
        if fn is None:
            return lambda f: self._add(f, False, weight, timeout)
        return self._add(fn, False, weight, timeout)

    def hidden(self, fn: CheckFn | None = None, *, weight: float = 1.0, timeout: float | None = None):
        """Register a hidden check (runs only at grading; its inputs are never shown)."""
        if fn is None:
            return lambda f: self._add(f, True, weight, timeout)
        return self._add(fn, True, weight, timeout)


_DECLARED: dict[str, Exercise] = {}  # filled by exercise() as the check modules are imported; read through load()


def exercise(id: str, points: float, needs: tuple[str, ...] | str | None = None, title: str = "",
             forbid: tuple[str, ...] = (), counts: bool = False) -> Exercise:
    """Declare an exercise; `needs` defaults to the part of the id after the chapter.

    `forbid` names library functions that would do the exercise for the student; calling one fails the check, under
    any name or route (grader/guard.py refuses each by identity). A malformed entry is an error here; one this torch
    lacks is skipped when checking (it cannot be called). `counts` marks a count (FLOPs, bytes): a check whose calls
    ran a model, at any size, fails (runner.run_check).
    """
    if id.count(".") != 1:
        raise ValueError(f"exercise id must be '<chapter>.<name>', got {id!r}")
    if id in _DECLARED:
        raise ValueError(f"exercise {id!r} declared twice")
    if needs is None:
        needs = (id.split(".", 1)[1],)
    elif isinstance(needs, str):
        needs = (needs,)
    if isinstance(forbid, str):
        raise ValueError(f"{id}: forbid must be a tuple of dotted names, got the string {forbid!r}")
    if forbid:
        from grader.guard import check_names  # imports torch: only where an exercise forbids something
        try:
            check_names(forbid)
        except ValueError as e:
            raise ValueError(f"{id}: {e}") from None
    ex = Exercise(id=id, points=points, needs=tuple(needs), title=title or id.split(".", 1)[1],
                  forbid=tuple(forbid), counts=counts, module=sys._getframe(1).f_globals.get("__name__", ""))
    _DECLARED[id] = ex
    return ex


class RegistryError(RuntimeError):
    """The course's checks are not what its chapters declare: a bug of the course, never of a student."""


def import_chapters(package: str) -> None:
    """Import `package.<key>` for every chapter, in chapter order; a chapter without its module is an error."""
    from grader.chapters import NOTEBOOKS, key
    for stem in NOTEBOOKS:
        name = f"{package}.{key(stem)}"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            raise RegistryError(f"chapter {stem} has no module {name}: each chapter declares its checks in "
                                f"{package.replace('.', '/')}/{key(stem)}.py") from None


_checked: set[str] = set()


def _check(stage: str) -> None:
    """Fail loudly, once per stage, where the course's own exercises break the chapter rules: an id whose prefix
    names no chapter, a chapter that declares none, and (once hidden checks are loaded) an exercise without one."""
    if stage in _checked:
        return
    from grader.chapters import NOTEBOOKS, key
    keys = [key(s) for s in NOTEBOOKS]
    course = [e for e in _DECLARED.values() if e.module.startswith("grader.")]
    problems = [f"{e.id} (declared in {e.module}) names no chapter; chapters: {', '.join(keys)}"
                for e in course if e.chapter not in keys]
    problems += [f"chapter {s} declares no exercise" for s in NOTEBOOKS if not any(e.chapter == key(s) for e in course)]
    if stage == "hidden":
        problems += [f"{e.id} has no hidden check" for e in course if not e.hidden_checks()]
    if problems:
        raise RegistryError("the course's checks are inconsistent:\n  " + "\n  ".join(problems))
    _checked.add(stage)


def hidden_available() -> bool:
    """Whether this grader holds the hidden checks (the student release leaves them out)."""
    return os.path.isfile(os.path.join(os.path.dirname(__file__), "hidden", "__init__.py"))


@dataclass(frozen=True)
class Registry:
    """The course's exercises as loaded, handed to whatever runs or counts checks (runner, grading, Gradescope)."""

    exercises: tuple[Exercise, ...]
    hidden: bool  # whether the hidden checks are part of it

    def get(self, id: str) -> Exercise:
        for e in self.exercises:
            if e.id == id:
                return e
        known = ", ".join(sorted(e.id for e in self.exercises)) or "none"
        raise KeyError(f"no exercise {id!r}; known: {known}")

    def of(self, chapter: str | None = None) -> list[Exercise]:
        """The exercises of one chapter key (all when None), in declaration order: the order of the notebook."""
        return [e for e in self.exercises if chapter is None or e.chapter == chapter]

    def forbidden(self, chapter: str | None = None) -> tuple[str, ...]:
        """Every name the exercises of one chapter key (all when None) forbid, once each: what a grading kernel
        imports at set-up, before the notebook runs (bridge.py)."""
        return tuple(dict.fromkeys(name for e in self.of(chapter) for name in e.forbid))

    def checks(self, ex: Exercise) -> list[Check]:
        """What runs for `ex`: every check with the hidden ones loaded, else the public ones."""
        return list(ex.checks) if self.hidden else ex.public_checks()


def load(hidden: bool = False) -> Registry:
    """Import every chapter's public checks (and hidden ones when asked), held to the chapter rules.

    Asking for hidden checks where the release left them out is an error, never a quiet public-only grade."""
    import grader.exercises  # noqa: F401  (registers every chapter's exercises)
    _check("public")
    if hidden:
        if not hidden_available():  # decided by this package's own files, not by whatever else is on sys.path
            raise RuntimeError("hidden checks are not part of the student release")
        import grader.hidden  # noqa: F401  (a chapter without its hidden module is a RegistryError)
        _check("hidden")
    return Registry(tuple(_DECLARED.values()), hidden)
