"""Run an exercise's checks against any implementation and return structured results.

This is the one entry point: the notebook call and grading both go through it.
Each check runs with fixed seeds, the float32 default dtype, gradients enabled and an
optional time limit, and whatever it raises becomes a status, never an exception.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import random
import signal
import threading
import time
import zlib
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch

from grader import guard, registry, wire
from grader.expect import CheckFailure, describe, expect_no_model_run
from grader.registry import Check, Exercise, Registry
from grader.results import (CRASHED, ERROR, FAILED, MEMORY, MISSING, NOT_IMPLEMENTED, PASSED, TIMEOUT,
                            CheckResult, ExerciseResult)
from grader.scenario import current_trace, tracing

_GRADER_DIR = os.path.dirname(os.path.abspath(__file__))
_LIB_DIRS = tuple({os.path.dirname(os.path.abspath(torch.__file__)), os.path.dirname(os.__file__),
                   os.path.dirname(os.path.abspath(np.__file__))})
DEFAULT_CHECK_TIMEOUT = 60.0


class CheckTimeout(BaseException):
    """Raised inside a check when its time is up (a BaseException, so student `except Exception` can't eat it).

    The optional argument is the limit in seconds (or the whole message), when whoever raised it knows better.
    """


class CheckMemory(BaseException):
    """Raised by grading when the student's code ran out of one of the kernel's limits: the first argument says
    what the limit was, the optional second what ran out ("memory" unless said: "file space", "processes")."""


class CheckCrashed(BaseException):
    """Raised by grading when the kernel running the student's code died; the argument says how."""


def forbidden_message(exercise: Exercise, dotted: str) -> str:
    """What the student reads when their code calls a forbidden function."""
    return f"{exercise.name} must do this itself, not call {dotted}"


def guarding(exercise: Exercise, roots: tuple[Any, ...] = (), given: Any = ()) -> guard.Guard:
    """The guard of one call into the student's code (grader/guard.py): the exercise's forbidden calls refused with
    a CheckFailure that names them, and the trace a check asked for (`scenario.tracing`) recorded. `roots` are the
    student's objects, searched for forbidden ones they hold; `given`, the call's arguments."""
    trace = current_trace()
    return guard.Guard(exercise.forbid, lambda dotted: CheckFailure(forbidden_message(exercise, dotted)), roots,
                       trace.request if trace is not None else None, given)


def guarded_call(exercise: Exercise, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 roots: tuple[Any, ...]) -> Any:
    """fn(*args, **kwargs) under the exercise's guard, as the grading kernel runs it (kernel_side._run): a refusal
    the code caught (or turned into another error) still fails the check, and the call's trace joins the check's."""
    g = guarding(exercise, roots, (args, kwargs))
    result = None
    try:
        with g:
            result = fn(*args, **kwargs)
    except BaseException:
        g.check()
        raise
    finally:
        trace = current_trace()
        if trace is not None:
            trace.add(g.data(args, result))
    g.check()
    return result


_CHECKING: contextvars.ContextVar[Exercise | None] = contextvars.ContextVar("grader_checking", default=None)
_NOTHING_FORBIDDEN = Exercise("any.scenario", 0, ())


def guarded_scenario(scenario: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """A scenario run in the notebook under the guard of the exercise whose check runs it, as the grading kernel runs
    one: the student's classes are driven inside it, so their methods meet the refusals and the trace too."""
    roots = tuple(getattr(a, "_grader_student_", a) for a in (*args, *kwargs.values()))
    return guarded_call(_CHECKING.get() or _NOTHING_FORBIDDEN, scenario, args, kwargs, roots)


def _forbid_during(obj: Any, exercise: Exercise) -> Any:
    """The student's function, called under the exercise's guard; its frame holds the arguments, for an error's
    message (`_inputs`)."""
    if not callable(obj) or isinstance(obj, type):  # classes stay classes (scenarios)
        return obj

    def guarded(*args: Any, **kwargs: Any) -> Any:
        return guarded_call(exercise, obj, args, kwargs, (obj,))
    guarded.__name__ = getattr(obj, "__name__", "student_function")
    guarded._grader_student_ = obj  # what a scenario's guard searches, instead of this wrapper
    return guarded


_GUARDED = _forbid_during(len, Exercise("any.function", 0, ())).__code__  # the wrapper's frame: a call into the student


def seed_for(exercise_id: str, check_name: str, salt: str = "") -> int:
    """The check's seed: fixed for a public check (the notebook and grading draw the same inputs), and for a
    hidden one mixed with the grading run's secret `salt`, so each run draws new hidden inputs."""
    return zlib.crc32(f"{salt}:{exercise_id}:{check_name}".encode() if salt else f"{exercise_id}:{check_name}".encode())


@contextlib.contextmanager
def _isolated(seed: int) -> Iterator[None]:
    """Seeded RNGs and default torch settings for one check; the student's state is restored after."""
    py_state, np_state = random.getstate(), np.random.get_state()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    with torch.random.fork_rng(devices=[]):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        wire.seed(seed)
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        try:
            yield
        finally:
            torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)
            random.setstate(py_state)
            np.random.set_state(np_state)


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[list[bool]]:
    """Interrupt Python code after `seconds`, and again every half second after that (main thread on POSIX
    only; elsewhere no limit). Python swallows an exception raised inside a `__del__`, so a hung destructor
    would survive one alarm: the repeats reach it again, and the yielded flag tells the caller it fired."""
    fired: list[bool] = []
    usable = (seconds and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield fired
        return

    def _alarm(signum, frame):
        fired.append(True)
        raise CheckTimeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def student_frames(tb, limit: int = 3) -> str:
    """The last frames of a traceback that are the student's own code, without file paths."""
    return wire.student_frames(tb, (_GRADER_DIR, *_LIB_DIRS), limit=limit)


def _inputs(tb: Any) -> str:
    """'; called with (float32 tensor of shape (4, 6), int 2)': the arguments of the check's call into the student's
    code that raised (through a grading kernel's handle, or the notebook's function), as failures name theirs."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is _GUARDED or (frame.f_code.co_name == "__call__"
                                        and getattr(frame.f_locals.get("self"), "_grader_remote_", False)):
            args, kwargs = frame.f_locals.get("args", ()), frame.f_locals.get("kwargs", {})
            shown = ", ".join([describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()])
            return f"; called with ({shown if len(shown) <= 200 else shown[:199] + '…'})"
        tb = tb.tb_next
    return ""


def _error_message(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    head = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    if len(head) > 300:
        head = head[:297] + "..."
    where = getattr(e, "grader_where", None)  # set on errors raised in the grading kernel
    if where is None:
        where = student_frames(e.__traceback__)
    return (f"{head} ({where})" if where else head) + _inputs(e.__traceback__)


def run_check(exercise: Exercise, check: Check, objs: tuple[Any, ...], timeout: float | None,
              salt: str = "") -> CheckResult:
    """One check on the student's objects, its inputs drawn from its seed (a hidden one's mixed with `salt`)."""
    limit = check.timeout if check.timeout is not None else timeout
    start = time.perf_counter()
    status, message = PASSED, ""
    checking = _CHECKING.set(exercise)
    try:
        with _isolated(seed_for(exercise.id, check.name, salt if check.hidden else "")), _time_limit(limit) as fired:
            if exercise.counts:  # every call of this check traced: a count runs no model, at any size
                with tracing() as trace:
                    check.fn(*objs)
                expect_no_model_run(trace.ops, f"{exercise.name}, called by this check,")
            else:
                check.fn(*objs)
        if fired:  # the alarm went off inside code that swallowed it (a __del__): still a timeout
            raise CheckTimeout(limit)
    except CheckTimeout as e:
        given = e.args[0] if e.args else limit
        status, message = TIMEOUT, (given if isinstance(given, str) else
                                    f"stopped after {given:g} s (an infinite loop, or far too slow)")
    except CheckMemory as e:
        limit = e.args[0] if e.args else "the kernel limit"
        status, message = MEMORY, (f"ran out of {e.args[1]}: {limit}" if len(e.args) > 1
                                   else f"ran out of memory (the limit is {limit})")
    except CheckCrashed as e:
        status, message = CRASHED, f"the kernel died ({e.args[0] if e.args else 'it crashed'})"
    except CheckFailure as e:
        status, message = FAILED, str(e)
    except NotImplementedError as e:  # the stub's own raise; torch's (a meta tensor's data) is an error
        from_kernel = hasattr(e, "grader_where")  # the kernel told a stub's from torch's already (kernel_side._error)
        stub = getattr(e, "grader_stub", False)  # reported for a stub elsewhere (course.distributed: a rank's)
        if from_kernel or stub or wire.raised_by_own_code(e.__traceback__, (_GRADER_DIR, *_LIB_DIRS)):
            status, message = NOT_IMPLEMENTED, "not implemented yet"
        else:
            status, message = ERROR, _error_message(e)
    except KeyboardInterrupt:
        status, message = ERROR, "interrupted"
    except BaseException as e:  # SystemExit, RecursionError, student exceptions: all become a status
        status, message = ERROR, _error_message(e)
    finally:
        _CHECKING.reset(checking)
    return CheckResult(check.name, check.description, status, message, check.hidden, check.weight,
                       round(time.perf_counter() - start, 3))


def run_exercise(exercise_id: str, *objs: Any, hidden: bool = False,
                 timeout: float | None = DEFAULT_CHECK_TIMEOUT, course: Registry | None = None,
                 salt: str = "") -> ExerciseResult:
    """Run the public checks (and the hidden ones when `hidden`) of one exercise on `objs`.

    `objs` are the student's objects in the order of the exercise's `needs`; `course` is the loaded registry
    (loaded here when not given); `salt` changes the hidden checks' inputs (seed_for).
    """
    course = course or registry.load(hidden)
    if hidden and not course.hidden:
        raise ValueError("hidden checks asked of a registry loaded without them")
    ex = course.get(exercise_id)
    if len(objs) != len(ex.needs):
        names = ", ".join(ex.needs)
        return ExerciseResult(ex.id, ex.points, [], ERROR,
                              f"the check needs {len(ex.needs)} argument(s): {names}; got {len(objs)}")
    run = course.checks(ex) if hidden else ex.public_checks()
    objs = tuple(_forbid_during(o, ex) for o in objs)
    return ExerciseResult(ex.id, ex.points, [run_check(ex, c, objs, timeout, salt) for c in run])


def run_namespace(namespace: Mapping[str, Any], chapter: str | None = None, hidden: bool = True,
                  timeout: float | None = DEFAULT_CHECK_TIMEOUT) -> list[ExerciseResult]:
    """Grade every exercise of `chapter` from the names a notebook defined (missing names: `missing`)."""
    course = registry.load(hidden)
    results = []
    for ex in course.of(chapter):
        absent = [n for n in ex.needs if n not in namespace]
        if absent:
            results.append(ExerciseResult(ex.id, ex.points, [], MISSING,
                                          f"the notebook defines no {', '.join(absent)}"))
            continue
        results.append(run_exercise(ex.id, *(namespace[n] for n in ex.needs), hidden=hidden, timeout=timeout,
                                    course=course))
    return results


def assert_all_pass(namespace: Mapping[str, Any], chapter: str) -> None:
    """For the solution notebooks' last cell: every exercise of `chapter` passes every public and hidden check."""
    results = run_namespace(namespace, chapter=chapter, hidden=True)
    if not results:  # a misspelled chapter, or a kernel that imported another grader, would pass without a check
        known = sorted({e.chapter for e in registry.load(hidden=True).exercises})
        raise AssertionError(f"chapter {chapter!r} has no exercise in this grader ({registry.__file__}); "
                             f"its chapters: {', '.join(known)}")
    failing = {r.exercise: [f"{c.name}: {c.message}" for c in r.checks if not c.passed] or r.message
               for r in results if r.status != PASSED}
    if failing:
        raise AssertionError(f"checks that fail on the solutions: {failing}")
    checks = sum(len(r.checks) for r in results)
    print(f"{chapter}: all {len(results)} exercises pass all {checks} checks (public and hidden)")


__all__ = ["run_exercise", "run_namespace", "assert_all_pass", "run_check", "CheckTimeout", "CheckMemory", "CheckCrashed",
           "guarded_call", "FAILED", "NOT_IMPLEMENTED"]
