"""Checks on live objects: a *scenario* exercises the student's classes and functions where they live.

Most checks call a student's function on plain data and judge what comes back. Checks of classes,
modules, autograd, optimizers, files and processes need live objects instead: an `nn.Module` built
from the student's class, gradients flowing through their `autograd.Function`, an optimizer stepped.
Such a check runs a scenario:

    out = run_scenario(scenarios.modules.sequential_report, MySequential, specs, x, g, seed)
    expect_tensor(out["output"], reference, ...)

A scenario is a plain function in a module of `grader/scenarios/`. It builds what it needs from
plain specs and seeds, drives the student's objects, and returns plain data only: tensors, numbers,
strings, None and containers of them (never a live module or graph). The check then judges that
data in its own process, computing every expected value there.

* In a notebook, `run_scenario` calls the scenario in the same process, under the guard of the exercise
  whose check runs it (its forbidden calls refused, a trace recorded if the check asked: grader/guard.py),
  then passes its result through `to_data`, which keeps exactly what the grading bridge can carry (detached
  tensor copies, plain values; anything else becomes an `Opaque` that equals nothing).
* When grading, the student's objects are handles to the notebook's kernel, and `run_scenario`
  sends the scenario's name and its plain arguments there; the kernel runs the scenario module's own
  copy (installed from source before any student cell ran), under its copy of the same guard, and returns
  the same plain data (and the trace, when one was asked for).

So one check reads the same data in both places, and the verdict is always reached outside the
student's reach when grading. Rules for a scenario module: import only torch, numpy and the standard
library (never `grader`, whose copy in the kernel the student could have changed); bind any torch
function the scenario relies on at import (`_grad = torch.autograd.grad`), before student code runs;
draw random numbers only from the seeds it is given; compute no expected value; release what it
built (`del`, then `gc.collect()` runs after it) so a misbehaving `__del__` shows up in its own check.
Plain data nests at most MAX_DEPTH (8) levels of tuples, lists and dicts, counting the call's own two
levels (the argument tuple and list): flatten deeper specs (an optimizer's state_dict inside a checkpoint)
into several arguments or records.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import secrets
from collections.abc import Iterator
from typing import Any, Callable

from grader import wire
from grader.wire import MAX_DEPTH

__all__ = ["run_scenario", "to_data", "Opaque", "SCENARIO_PACKAGE", "MAX_DEPTH", "tracing", "Trace"]

SCENARIO_PACKAGE = "grader.scenarios"


class Opaque:
    """Stands for a value that is not plain data (a student's own class, a live module...): equal to nothing."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


_CLASSES: dict[tuple[str, str], type] = {}


def opaque_class(module: str, qualname: str, base: type = Opaque) -> type:
    """A local class named like the student's, so messages read `got MyTensor` or `raised ShapeError`."""
    key = (module + "." + qualname, base.__name__)
    if key not in _CLASSES:
        name = qualname.rsplit(".", 1)[-1] or "object"
        _CLASSES[key] = type(name, (base,), {"__module__": module or "student"})
    return _CLASSES[key]


def to_data(x: Any) -> Any:
    """What the grading bridge would deliver for `x`, by the same round trip through `grader.wire`: detached
    copies of plain CPU tensors (views of one storage stay views of one copy), sizes, dtypes, devices, plain
    values and containers; anything else an Opaque named like its class."""
    token = "\0grader-local-" + secrets.token_hex(8) + "-"  # as the bridge's: no student string can forge it
    storages: dict = {}
    opaque: dict = {}
    packed = wire.pack(x, token, storages, opaque)
    return _opened(wire.unpack(packed, token, wire.storages_from(wire.storage_list(storages))), opaque)


def _opened(x: Any, opaque: dict) -> Any:
    """Opaque tokens replaced by the Opaque objects they stand for (what the bridge's decoding does)."""
    if type(x) is str and x in opaque:
        module, qualname, text = opaque[x]
        return opaque_class(module, qualname)(text)
    if type(x) in (tuple, list):
        return type(x)(_opened(v, opaque) for v in x)
    if type(x) is dict:
        return {k: _opened(v, opaque) for k, v in x.items()}
    return x


def _check_scenario(scenario: Callable[..., Any]) -> tuple[str, str]:
    """The scenario's module (short name) and function name; it must be a top-level function of grader/scenarios."""
    module, name = getattr(scenario, "__module__", ""), getattr(scenario, "__name__", "")
    if not module.startswith(SCENARIO_PACKAGE + ".") or "." in name:
        raise ValueError(f"{module}.{name} is not a scenario: scenarios are functions in {SCENARIO_PACKAGE}.*")
    if getattr(importlib.import_module(module), name, None) is not scenario:
        raise ValueError(f"{module}.{name} is not a top-level function of its module")
    return module.removeprefix(SCENARIO_PACKAGE + "."), name


def _remote(args: Any, depth: int = 0) -> Any:
    """The first grading handle among the arguments (a student's object living in a kernel), else None."""
    if getattr(type(args), "_grader_remote_", False):
        return args
    if depth < MAX_DEPTH and type(args) in (tuple, list):
        for a in args:
            found = _remote(a, depth + 1)
            if found is not None:
                return found
    if depth < MAX_DEPTH and type(args) is dict:
        return _remote(list(args.values()), depth + 1)
    return None


def run_scenario(scenario: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `scenario(*args, **kwargs)` where the student's objects among the arguments live; return plain data."""
    module, name = _check_scenario(scenario)
    handle = _remote((args, kwargs))
    if handle is not None:
        return handle._grader_scenario_(module, name, args, kwargs)
    from grader.runner import guarded_scenario  # the runner imports torch; this module stays light
    return to_data(guarded_scenario(scenario, args, kwargs))


# ---------------------------------------------------------------- what the student's code did

class Trace:
    """What the student's code did in a `tracing()` block, recorded where it ran (this process in a notebook, the
    student's kernel when grading: grader/guard.py, sent back as plain data) and summed over the block's calls.

    ops: aten operator -> times run ("aten.bitwise_and"); dtypes: the dtypes of the tensors they made, in order;
    made: the elements of every tensor the operators returned (views included), a measure of the work done;
    backward_passes: autograd backward passes started (by any route into the engine); graph_ops: operators autograd
    recorded outside them (on a tensor that requires grad, grad mode on: a graph being built); written: the positions
    of a call's tensor arguments whose storage an operator wrote (a scenario's own arguments, for a scenario);
    lineage (when asked): the operators the results' values came from, each with its dtype ("aten.add:int32")."""

    def __init__(self, lineage: bool = False) -> None:
        self.request = {"lineage": bool(lineage)}
        self.calls: list[dict] = []

    def add(self, data: Any) -> None:
        """One call's record, as the guard made it; anything that is not that shape is refused, never half read."""
        if data is None:
            return
        if not isinstance(data, dict):
            raise RuntimeError("the trace of the student's call could not be read")
        ops, dtypes, passes, made = data.get("ops"), data.get("dtypes"), data.get("backward_passes"), data.get("made")
        graph_ops, written, lineage = data.get("graph_ops"), data.get("written"), data.get("lineage")
        if not (isinstance(ops, dict) and all(type(k) is str and type(v) is int for k, v in ops.items())
                and isinstance(dtypes, list) and all(type(d) is str for d in dtypes) and type(passes) is int
                and type(made) is int
                and type(graph_ops) is int
                and isinstance(written, list) and all(type(i) is int for i in written)
                and (lineage is None or isinstance(lineage, list) and all(type(e) is str for e in lineage))):
            raise RuntimeError("the trace of the student's call could not be read")
        self.calls.append({"ops": ops, "dtypes": dtypes, "made": made, "backward_passes": passes,
                           "graph_ops": graph_ops, "written": written, "lineage": lineage})

    @property
    def ops(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for c in self.calls:
            for name, n in c["ops"].items():
                total[name] = total.get(name, 0) + n
        return total

    @property
    def dtypes(self) -> list[str]:
        return list(dict.fromkeys(d for c in self.calls for d in c["dtypes"]))

    @property
    def made(self) -> int:
        return sum(c["made"] for c in self.calls)

    @property
    def backward_passes(self) -> int:
        return sum(c["backward_passes"] for c in self.calls)

    @property
    def graph_ops(self) -> int:
        return sum(c["graph_ops"] for c in self.calls)

    @property
    def written(self) -> set[int]:
        return {i for c in self.calls for i in c["written"]}

    @property
    def lineage(self) -> set[str]:
        return {e for c in self.calls for e in c["lineage"] or ()}


_TRACE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("grader_trace", default=None)


@contextlib.contextmanager
def tracing(lineage: bool = False) -> Iterator[Trace]:
    """`with tracing() as trace: got = call(fn, x)`: every call into the student's code in the block (a function
    of theirs, or a scenario driving their objects) is recorded, the same in a notebook and in a grading kernel.
    `lineage` also records where the results' values came from (it keeps every intermediate tensor alive)."""
    trace = Trace(lineage)
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


def current_trace() -> Trace | None:
    """The trace of the `tracing()` block running, if any: where a call into the student's code reports."""
    return _TRACE.get()
