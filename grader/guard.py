"""While a check calls the student's code: refuse what the exercise forbids, and record what the code did.

One module, the same in the notebook (`grader.guard`) and in the grading kernel, where the bridge installs a copy
from this file's text before any student code runs (as it installs grader/wire.py): so it imports torch and the
standard library only. An exercise declares what it forbids once (`exercise(..., forbid=...)`, dotted names); a
`Guard` refuses each of those objects *by identity*, whatever name, alias or route reaches it:

* a Python function: its code is swapped for code that refuses (closures too), so every alias, every caller (C
  code included) and every thread meets the refusal;
* a builtin (a C function, a bound C method such as the autograd engine's `run_backward`, a method descriptor such
  as `torch.Tensor.sum`): a profile hook (`sys.setprofile`, and `threading.setprofile` for threads started while it
  runs) is told of every call Python code makes of a builtin, with the builtin object, and refuses the forbidden
  ones whatever name reached them (an alias bound beforehand, a `getattr` string, a lambda, a class attribute);
* an aten operator (`torch.ops.aten.silu`): the profile hook refuses the builtin each of its overloads calls (an
  OpOverload bound beforehand included) and, while a trace is recorded, the dispatch mode refuses the operator itself,
  from Python or from C (its attribute stays: torch looks the operator up there while it dispatches);
* anything else (a class, a NumPy ufunc) and, again, every builtin: its attribute is replaced for the length of the
  call (a lookup then finds a refusing Python function, which C code calling it meets too), and the objects the
  student's code refers to (globals its code names, closures, defaults, `functools.partial`s, containers, its own
  classes and their instances) are searched for it before the call: C code calling an alias bound beforehand
  (`functools.partial(alias)`, `map(alias, ...)`) makes no Python call a profile hook could see.

A refusal raises the caller's error (CheckFailure in the notebook, the kernel's Forbidden when grading). The student
may catch it: the guard remembers every refusal, and `check()` raises the first after the call whatever it did.

A `Guard` with `trace` also records, with a dispatch mode, what the code did (`data()`, plain data): each aten
operator it ran (C code calling C code included: every tensor operation passes the dispatcher), the dtypes of the
tensors they made, how many backward passes it started (distinct autograd graph tasks among the operators: every
route into the engine), how many operators autograd recorded outside them (a graph being built), which of its
arguments' storages an operator wrote, and with `lineage` which operators (with the dtype each computed in) the
result's values came from, whether some came from outside the call's arguments and traced operators (UNSEEN), the
Python numbers they took in (NUMBERS), and which ordering comparisons pitted many values against many (THRESHOLDS:
a search through a table).

What escapes, and why. A profile hook sees calls *from Python code*: a builtin called by C code (`functools.partial`
made of an alias kept where the search does not look, such as inside a library module, or reached through `gc`)
is not seen; ctypes calls are not calls of builtins; threads started with `_thread.start_new_thread` get no hook.
An aten operator reached by C code (a C binding other than the forbidden ones, a composite operator) is refused only
while a trace runs, since a dispatch mode slows every operator down. The dispatch mode watches the calling thread
(and what torch hands its state to, such as the CPU autograd engine); operators run with Python dispatch turned off
(`torch._C._DisableTorchDispatch`) are neither traced nor refused there, and a backward pass that runs no operator
is not counted. Code that rewrites the guard's own hook or pops its dispatch mode is caught only when it leaves them
changed (the check after the call). These need a student who attacks the grader, which the grading kernel's tamper
probe and sandbox are for; the guard closes every route that uses the library as a library.

Cost: Python code runs slower under a profile hook (each call reports to it; about +16% on the SiLU scenario, with
gradcheck inside), and every operator under a trace passes through Python: checks trace only where they judge
the trace.
"""
from __future__ import annotations

import _thread
import functools
import importlib
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Guard", "resolve", "check_names", "refusing_code"]

# Bound when the module is made (in the grading kernel: before any student code ran).
_Tensor = torch.Tensor
_Packet = torch._ops.OpOverloadPacket
_tree_leaves = torch.utils._pytree.tree_leaves
_graph_task = torch._C._current_graph_task_id
_grad_enabled = torch.is_grad_enabled
_push_dispatch = torch._C._push_on_torch_dispatch_stack
_pop_dispatch = torch._C._pop_torch_dispatch_stack
_dispatch_depth = torch._C._len_torch_dispatch_stack
_dispatch_at = torch._C._get_dispatch_stack_at
_setprofile, _getprofile = sys.setprofile, sys.getprofile
_set_thread_profile = threading.setprofile
_get_thread_profile = getattr(threading, "getprofile", lambda: getattr(threading, "_profile_hook", None))
_BUILTIN = type(len)                                  # a C function, or a C method bound to its object
_DESCRIPTOR = type(str.join)                          # a C method of a class, unbound (torch.Tensor.sum)
_HERE = (lambda: None).__code__.co_filename           # this module's code, whichever copy runs
_ACTIVE = []                                          # the guard watching now (one at a time: nested ones stand by)
# While a profile hook watches, calling these would switch it off: the hook refuses them too.
_UNHOOK = ("sys.setprofile", "_lsprof.Profiler.enable", "_lsprof.Profiler.disable")
_SEARCH_LIMIT = 20_000                                # objects looked at, at most, searching what the code holds
_PLAIN = (str, bytes, bytearray, int, float, complex, bool, type(None), types.ModuleType, types.CodeType)


def resolve(dotted: str) -> Any:
    """The object at a dotted path, importing its top module and any submodule on the way (torch.export._trace is
    imported only by what names it, since it costs seconds); None when it does not exist."""
    parts = dotted.split(".")
    try:
        obj = __import__(parts[0])
        for i, part in enumerate(parts[1:], 2):
            if isinstance(obj, types.ModuleType) and not hasattr(obj, part):
                try:  # a submodule its package deletes from its namespace (torch.optim.adagrad) is still one
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    return None
                continue
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj


def check_names(dotted_names: Iterable[str]) -> None:
    """Fail loudly on a `forbid` entry that cannot name anything (not a dotted path of identifiers, or a top module
    that is not installed). A name this torch lacks is allowed, and skipped when refusing: it cannot be called."""
    import importlib.util
    for dotted in dotted_names:
        parts = dotted.split(".") if isinstance(dotted, str) else []
        if len(parts) < 2 or not all(p.isidentifier() for p in parts):
            raise ValueError(f"forbid entry {dotted!r} is not a dotted name such as 'torch.broadcast_shapes'")
        if parts[0] not in sys.modules and importlib.util.find_spec(parts[0]) is None:
            raise ValueError(f"forbid entry {dotted!r} names module {parts[0]!r}, which is not installed")


def refusing_code(raise_expression: str, freevars: int = 0) -> types.CodeType:
    """The code of a function that raises `raise_expression` whatever it is called with, with `freevars` free
    variables so that it also replaces a closure's code (a swap needs as many as the closure holds)."""
    return _stand_in_code(f"raise {raise_expression}", freevars)


@functools.lru_cache(maxsize=1024)
def _stand_in_code(statement: str, freevars: int = 0) -> types.CodeType:
    """The code of a function that runs `statement` (a raise, or a return) whatever it is called with, with `freevars`
    free variables. Cached: a guard is entered at every call into the student's code, and compiling is what would
    cost."""
    names = [f"_free{i}" for i in range(freevars)]
    source = "def _outer():\n" + "".join(f"    {n} = None\n" for n in names)
    source += "    def refused(*args, **kwargs):\n"
    source += f"        ({', '.join(names)},)\n" if names else ""
    source += f"        {statement}\n    return refused\n"
    namespace = {}
    exec(compile(source, "<forbidden>", "exec"), namespace)
    return namespace["_outer"]().__code__


# Forbidden functions that torch itself calls on a student's legitimate path are made harmless for the length of the
# call instead of refused: what they would switch off stays on. Printing a tensor switches the dispatch modes off to
# format it (torch/_tensor_str.py): refused, a debugging print inside a traced exercise failed every check; as a
# no-op, the print runs traced like any other code, and so does a conversion a student hides in such a block.
_HARMLESS = {"torch.utils._python_dispatch._disable_current_modes": "__import__('contextlib').nullcontext()"}


def _refused(dotted: str) -> BaseException:
    """What a swapped-in function raises: the watching guard's error, the refusal remembered (see Guard.check)."""
    if _ACTIVE:
        return _ACTIVE[-1].refuse(dotted)
    return RuntimeError(f"{dotted} is forbidden here")


def _key(t: torch.Tensor) -> int | None:
    """A tensor's storage as a number, the same for every view of it; None where there is none."""
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return None


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors among an operator's arguments or results (a tensor, or a list or tuple of them, one level deep:
    what aten schemas take); quicker than a pytree walk, which every operator would pay for."""
    if isinstance(x, _Tensor):
        return [x]
    if type(x) in (tuple, list):
        found = []
        for v in x:
            if isinstance(v, _Tensor):
                found.append(v)
            elif type(v) in (tuple, list):
                found.extend(t for t in v if isinstance(t, _Tensor))
        return found
    return []


class _Watch(TorchDispatchMode):
    """A guard's dispatch mode: every aten operator passes here, whoever called it; it refuses the forbidden ones
    and records what the operator did."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # else torch wraps __torch_dispatch__ in dynamo's disable: 800 modules imported (5 s), slower ops

    def __init__(self, guard, ops, lineage, given=()):
        super().__init__()
        self.guard, self.refused_ops, self.lineage = guard, ops, lineage
        self.given = {_key(t) for t in given}  # the call's own tensors: their values came with it
        self.counts, self.dtypes, self.tasks, self.written = {}, {}, set(), set()
        self.graph_ops = self.made = 0
        self.sources, self.kept = {}, []
        self._names, self._writes, self._slots = {}, {}, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in self.refused_ops:
            raise self.guard.refuse(self.refused_ops[packet])
        ins = _tensors(args)
        if kwargs:
            ins += _tensors(list(kwargs.values()))
        # judged before the call: an in-place comparison (x.ge_(table)) leaves 0s and 1s where x's values were
        searched = self.lineage and packet in _COMPARING and _against_table(ins)
        out = func(*args, **kwargs) if kwargs else func(*args)
        self._note(func, packet, args, kwargs or {}, out, ins, searched)
        return out

    def _note(self, func, packet, args, kwargs, out, ins, searched):
        name = self._names.get(packet)
        if name is None:
            name = self._names[packet] = str(packet)
        self.counts[name] = self.counts.get(name, 0) + 1
        task = _graph_task()
        if task != -1:
            self.tasks.add(task)
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = [(i, a.name) for i, a in enumerate(func._schema.arguments)
                                           if a.alias_info is not None and a.alias_info.is_write]
        written = set()
        for i, arg_name in writes:
            for t in _tensors(args[i] if i < len(args) else kwargs.get(arg_name)):
                key = _key(t)
                if key is not None:
                    written.add(key)
        self.written |= written
        if task == -1 and any(t.requires_grad for t in ins) and _grad_enabled():
            self.graph_ops += 1  # autograd records this operator: a graph is being built
        outs = _tensors(out)
        for t in outs:
            self.dtypes[t.dtype] = None
            self.made += _numel(t)
        if self.lineage:
            came = set()
            for t in ins:
                k = _key(t)
                source = self.sources.get(k)
                if source is not None:
                    came |= source
                    if _GIVEN not in source and _numel(t) == 1:  # computed from Python numbers alone: one too
                        came.add(_number_of(t))
                elif k in self.given:
                    came.add(_GIVEN)
                elif _empty(t):
                    pass  # no values to bring
                elif _numel(t) > 1 or _stored(t) > 1:  # made before the call, or where no operator ran (or a view)
                    came.add(f"{UNSEEN}:{str(t.dtype).removeprefix('torch.')}")
                else:  # a tensor of one number from Python (torch.tensor(v), x[i] = v): the number counts
                    came.add(_number_of(t))
            came.update(self._numbers(func, args, kwargs))
            made = outs[0].dtype if outs else (ins[0].dtype if ins else None)
            if packet in _ACCUMULATING and _accumulates(args, kwargs):
                name += "(accumulate=True)"  # adds into what is there: arithmetic, unlike the plain index_put
            elif searched:
                name += THRESHOLDS  # values ordered against many different values: a search, not a NaN or inf test
            came.add(f"{name}:{str(made).removeprefix('torch.')}")
            read = {_key(t) for t in ins}
            for t in outs:
                k = _key(t)
                if k is None:
                    continue
                if k in written:      # in place (or out=): what was there, and what went in
                    self.sources[k] = self.sources.get(k, set()) | came
                elif k not in read:   # a new storage (a view keeps its base's history)
                    self.sources[k] = set(came)
                    self.kept.append(t.untyped_storage())  # alive to the end: no later storage reuses its number

    def _numbers(self, func, args: tuple, kwargs: dict) -> list[str]:
        """The Python numbers an operator takes as values (`x * 0.5`, `torch.full((), v)`), each as a lineage entry;
        sizes, dims and indices (int arguments) are not values."""
        slots = self._slots.get(func)
        if slots is None:
            slots = self._slots[func] = [(i, a.name) for i, a in enumerate(func._schema.arguments)
                                         if str(a.type) in _VALUE_TYPES]
        found = []
        for i, arg_name in slots:
            v = args[i] if i < len(args) else kwargs.get(arg_name)
            if type(v) in (int, float, complex, bool):
                found.append(_number(v))
        return found


# Where a check judges what the code did (its trace), the ways to work out of the trace's sight, for an exercise to
# forbid: Python dispatch switched off for a while (torch's own helper, which printing a tensor calls, is made
# harmless instead: _HARMLESS), leaving torch for NumPy (a view of the tensor's memory, or DLPack's), writing a
# tensor's memory through its storage or swapping the storage under it, and another thread or process (a dispatch
# mode watches one thread; a process writes shared memory).
NUMPY_EXITS = ("torch.Tensor.numpy", "torch.Tensor.__dlpack__")  # a NumPy view of a tensor's memory, directly or not
UNTRACED = ("torch._C._DisableTorchDispatch", "torch._C._ExcludeDispatchKeyGuard", "torch._C._pop_torch_dispatch_stack",
            "torch.utils._python_dispatch._disable_current_modes", *NUMPY_EXITS,
            "torch.UntypedStorage.copy_", "torch.UntypedStorage.fill_", "torch.UntypedStorage.__setitem__",
            "torch.UntypedStorage._set_from_file", "torch.ops.aten.set_",
            *(f"_thread.{name}" for name in ("start_new_thread", "start_joinable_thread") if hasattr(_thread, name)),
            *(f"os.{name}" for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
              if hasattr(os, name)),
            "subprocess.Popen._execute_child", "multiprocessing.util.spawnv_passfds")
# In a lineage, values that reached the traced operators from outside them: not the call's arguments, not made by
# an operator it traced (Python numbers or NumPy turned into a tensor, a table made before the call, another thread's
# work, a one-element view of any of these). A tensor of one element with no history of its own is a Python number
# (torch.tensor(v), or torch's own wrapping of `x[i] = v`), listed with the numbers operators take as values.
UNSEEN = "unseen"
# The Python numbers the result's values took in, one entry each ("numbers:0.5"): those operators take as values
# (`x * 0.5`, torch.full((), v)), those in tensors of one element (torch.tensor(v)), and the value of each
# one-element tensor computed from such numbers alone, without the call's arguments (torch.tensor(a) - b). A program
# that computes its values takes in constants; one that worked them out in Python (.tolist(), .item()) and put them
# back one by one has result values equal to its numbers. At most _MAX_NUMBERS of them, the smallest.
NUMBERS = "numbers"
_MAX_NUMBERS = 4096
_GIVEN = "@given"  # within a lineage only: the call's arguments' values reached here
# Marks a comparison of two tensors that both hold many different values, floats or integers (`x >= midpoints[i]`,
# `maximum(x, table)`, a float's bits against a table of bit patterns): a search through a table of thresholds orders
# x among them, where a test for NaN or inf compares x with itself or with one value. Equality is no search (it cannot
# place x between two thresholds): r == x, x == x.clone() are tests.
THRESHOLDS = "(against many thresholds)"
_ACCUMULATING = {torch.ops.aten.index_put, torch.ops.aten.index_put_, torch.ops.aten._index_put_impl_}
_COMPARING = {getattr(torch.ops.aten, name) for base in ("lt", "le", "gt", "ge", "maximum", "minimum", "fmax", "fmin",
                                                          "clamp", "clamp_min", "clamp_max")
              for name in (base, f"{base}_") if hasattr(torch.ops.aten, name)}  # x.ge_(table) in place too
# Operators that make, copy, move or select values without computing any (a lineage entry's name without "aten." and
# in-place marks, entry_operator): a history made of these alone did no arithmetic. A conversion (to_copy) may round,
# and abs computes: each exercise adds what it counts as no computation.
MOVES = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "zero", "scalar_tensor", "eye",
    "lift_fresh", "lift_fresh_copy", "clone", "copy", "contiguous", "view", "unsafe_view", "reshape", "reshape_alias",
    "alias", "detach", "expand", "as_strided", "t", "transpose", "permute", "squeeze", "unsqueeze", "flatten",
    "unflatten", "select", "slice", "narrow", "unbind", "split", "split_with_sizes", "chunk", "index", "index_select",
    "gather", "take", "masked_select", "cat", "stack", "flip", "roll", "repeat", "resize", "where", "masked_fill",
    "masked_scatter", "scatter", "index_put", "index_put_impl", "index_copy", "index_fill", "set"})
_VALUE_TYPES = ("number", "Tensor", "Optional[number]", "Optional[Tensor]")  # a Python number there is a value
_FEW = 2  # distinct values a tensor compared with may hold and still be a constant (inf and -inf, a bound)


def _stored(t: torch.Tensor) -> int:
    """How many elements its storage holds (more than the tensor for a view), 0 for a tensor that cannot say."""
    try:
        return t.untyped_storage().nbytes() // t.element_size()
    except Exception:
        return 0


def _number(v: Any) -> str:
    """A Python number as a lineage entry, the same for 2 and 2.0."""
    try:
        v = float(v) if type(v) is not complex else v
    except OverflowError:
        pass
    return f"#{v!r}"


def entry_operator(entry: str) -> tuple[str, str]:
    """'aten.__rshift__:int32' -> ('rshift', 'int32'): a lineage entry's operator without namespace or in-place marks,
    and its dtype (for NUMBERS, the number)."""
    op, _, dtype = entry.rpartition(":")
    return op.removeprefix("aten.").strip("_"), dtype


def lineage_text(lineage: Iterable[str], most: int) -> str:
    """The first `most` entries of a lineage, sorted, without aten's namespace: what a message says values came
    from ("bitwise_and:int32, mm:float32")."""
    return ", ".join(e.removeprefix("aten.") for e in sorted(lineage)[:most])


def unseen_values(lineage: Iterable[str]) -> str:
    """What a check's message says of values that reached the result from outside the trace (UNSEEN entries), or ""
    where none did."""
    unseen = sorted({dtype for op, dtype in map(entry_operator, lineage) if op == UNSEEN})
    if not unseen:
        return ""
    return (f"the result's values include {' and '.join(unseen)} values that no traced torch operation made during "
            "the call: a tensor built from Python numbers or NumPy (torch.tensor(...), torch.from_numpy), or one made "
            "before the call or in another thread")


def _empty(t: torch.Tensor) -> bool:
    """Whether it holds no element (not: cannot say, as a nested tensor may not)."""
    try:
        return t.numel() == 0
    except Exception:
        return False


def _numbers_entries(numbers: set[str]) -> list[str]:
    """The "#v" entries as NUMBERS entries, the smallest _MAX_NUMBERS real ones (a complex or unreadable one left
    out)."""
    values = set()
    for e in numbers:
        try:
            values.add(float(e[1:]))
        except (ValueError, OverflowError):
            continue
    ordered = sorted(values, key=lambda v: (v != v, v))  # NaN last: it sorts with nothing
    return [f"{NUMBERS}:{v!r}" for v in ordered[:_MAX_NUMBERS]]


def _number_of(t: torch.Tensor) -> str:
    """The number a one-element tensor holds, as a lineage entry (one entry for all it cannot read: meta tensors)."""
    try:
        return _number(t.item())
    except Exception:
        return "#?"


def _against_table(ins: list[torch.Tensor]) -> bool:
    """Whether two of a comparison's operands (floats, or integers such as a float's bits), not one tensor compared
    with itself, each hold more than a few different values (NaNs left out): a table of thresholds, not a constant."""
    candidates = {}
    for t in ins:
        if _numel(t) > _FEW and (t.is_floating_point() or not (t.is_complex() or t.dtype == torch.bool)):
            candidates.setdefault(_key(t), t)
    if len(candidates) < 2:
        return False
    many = 0
    for t in candidates.values():
        try:
            values = t.detach().reshape(-1)
            if t.is_floating_point():
                values = values[values == values]
            many += values.unique().numel() > _FEW
        except Exception:
            continue
    return many > 1


def _given_tensors(given: Any) -> list[torch.Tensor]:
    """The tensors among a call's arguments (any nesting pytree knows)."""
    try:
        return [t for t in _tree_leaves(given) if isinstance(t, _Tensor)]
    except Exception:
        return []


def _numel(t: torch.Tensor) -> int:
    """Its number of elements, 0 for a tensor that cannot say (nested, sizes still symbolic)."""
    try:
        n = t.numel()
    except Exception:
        return 0
    return n if type(n) is int else 0


def _accumulates(args: tuple, kwargs: dict) -> bool:
    """Whether an index_put call adds into its target (accumulate=True, the fourth argument) instead of writing."""
    return bool(kwargs.get("accumulate", args[3] if len(args) > 3 else False))


_LIBRARY_DIRS = []  # filled on first use: the grader package may be imported after this module


def _library(filename: str) -> bool:
    """Whether code from `filename` is a library's (the standard library, site-packages, torch, the grader, a text the
    grader compiled): the search for what the student's code holds stops there."""
    if not filename:
        return False
    if not _LIBRARY_DIRS:
        dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        dirs.add(os.path.dirname(os.path.dirname(torch.__file__)))
        grader = getattr(sys.modules.get("grader"), "__file__", None)
        if grader:
            dirs.add(os.path.dirname(grader))
        _LIBRARY_DIRS.extend(d for d in dirs if d)
    return filename.startswith(("<grader", "<forbidden>", *_LIBRARY_DIRS))


def _module_file(module_name: str) -> str:
    """The file a module was loaded from ("" for one made in memory, such as a notebook's __main__)."""
    return getattr(sys.modules.get(module_name), "__file__", None) or ""


def _held(roots: Iterable[Any], wanted: dict[int, tuple[Any, str]]) -> str | None:
    """The dotted name of the first forbidden object the student's code refers to, or None. Looked at: the globals its
    code names, closures, defaults, partials, bound methods, containers, the student's own classes and instances.
    `wanted` maps id(object) to (object, dotted name); a builtin bound to an object is a new object at each lookup, so
    builtins are also compared by equality (the same C function bound to the same object)."""
    bound = [(obj, dotted) for obj, dotted in wanted.values() if type(obj) is _BUILTIN]
    seen, stack, looked = set(), list(roots), 0
    while stack and looked < _SEARCH_LIMIT:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        looked += 1
        hit = wanted.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        try:
            t = type(obj)
            if t is _BUILTIN:
                for f, dotted in bound:
                    if obj == f:
                        return dotted
            elif t in _PLAIN or isinstance(obj, _Tensor):
                pass
            elif t in (list, tuple, set, frozenset):
                stack.extend(obj)
            elif t is dict:
                stack.extend(obj.values())
            elif t is functools.partial:
                stack.extend((obj.func, obj.args, obj.keywords))
            elif t in (staticmethod, classmethod, types.MethodType):
                stack.extend((obj.__func__, getattr(obj, "__self__", None)))
            elif t is types.FunctionType:
                if not _library(obj.__code__.co_filename):
                    stack.extend(_function_refs(obj))
            elif isinstance(obj, type):
                if not _library(_module_file(obj.__module__)):
                    stack.extend(vars(obj).values())
            elif not _library(_module_file(t.__module__)):
                stack.extend(object.__getattribute__(obj, "__dict__").values())
        except Exception:
            continue  # an object that does not let itself be looked into holds nothing the search can find
    return None


def _function_refs(fn: types.FunctionType) -> list[Any]:
    """What a function refers to: its closure's contents, its defaults, and the globals its code names."""
    refs = []
    for cell in fn.__closure__ or ():
        try:
            refs.append(cell.cell_contents)
        except ValueError:
            pass
    refs += [fn.__defaults__, fn.__kwdefaults__]
    names, codes = set(), [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if type(c) is types.CodeType)
    space = fn.__globals__
    return refs + [space[n] for n in names if n in space]


def _same(called: Any, forbidden: Any) -> bool:
    """Whether the builtin a profile hook reports is the forbidden one: the same C function bound to the same object,
    or, for a method descriptor (torch.Tensor.sum), that method bound to an instance of its class."""
    if type(forbidden) is _BUILTIN:
        return called == forbidden
    owner = getattr(called, "__self__", None)
    return forbidden.__objclass__ in type(owner).__mro__ and forbidden.__get__(owner, type(owner)) == called


def _put_back(owner: Any, attr: str, original: Any, own: bool) -> None:
    if own or not isinstance(owner, type):
        setattr(owner, attr, original)
    else:  # inherited (Tensor.__getitem__ comes from TensorBase): leave no copy on the subclass
        delattr(owner, attr)


class Guard:
    """For the length of a `with` block: the callables `forbid` names refuse (raising `error(dotted)`), and with
    `trace` ({"lineage": bool}) what the code does is recorded (`data()`). `roots` are the student's objects, searched
    for forbidden ones they hold; `given` are the call's arguments, whose tensors a lineage starts from. A guard
    entered while another watches stands by: the outer one refuses and records."""

    def __init__(self, forbid: Iterable[str] = (), error: Callable[[str], BaseException] | None = None,
                 roots: Iterable[Any] = (), trace: dict | None = None, given: Any = ()) -> None:
        self.forbid = tuple(forbid)
        self.given = given
        self.error = error or (lambda dotted: RuntimeError(f"{dotted} is forbidden here"))
        self.roots = tuple(roots)
        self.trace = trace
        self.refusals = []   # the dotted names refused, in order (kept when the student catches the error)
        self.watching = False
        self._undo, self._unhook, self._hook, self._watch, self._depth = [], None, None, None, 0

    def refuse(self, dotted: str) -> BaseException:
        """The error for a forbidden call, the refusal remembered."""
        self.refusals.append(dotted)
        return self.error(dotted)

    def check(self) -> None:
        """Raise the first refusal, if any: catching the error does not get a student past the check."""
        if self.refusals:
            raise self.error(self.refusals[0])

    def __enter__(self) -> Guard:
        if _ACTIVE:
            return self
        builtins, ops, wanted = {}, {}, {}
        for dotted in self.forbid:
            obj = resolve(dotted)
            if obj is None:
                continue  # a function this torch lacks (older or newer than the pin) cannot be called
            if isinstance(obj, _Packet):
                ops[obj] = dotted
                for overload in (obj, *(getattr(obj, name, None) for name in obj.overloads())):
                    op = getattr(overload, "_op", None)  # what OpOverload.__call__ calls, a builtin
                    if type(op) is _BUILTIN:
                        builtins.setdefault(op.__name__, []).append((op, dotted))
                    wanted.setdefault(id(overload), (overload, dotted))
            elif type(obj) in (_BUILTIN, _DESCRIPTOR):
                builtins.setdefault(obj.__name__, []).append((obj, dotted))
            if not isinstance(obj, types.FunctionType):
                wanted.setdefault(id(obj), (obj, dotted))  # one object under two names: the first one declared
        _ACTIVE.append(self)
        self.watching = True
        try:
            found = _held(self.roots, wanted) if wanted else None
            if found is not None:
                raise self.refuse(found)
            if builtins:  # first: what follows calls threading and torch functions the swap below may refuse
                for dotted in _UNHOOK:
                    obj = resolve(dotted)
                    if type(obj) in (_BUILTIN, _DESCRIPTOR):
                        builtins.setdefault(obj.__name__, []).append((obj, dotted))
                self._install(builtins)
            if self.trace is not None:  # a Python dispatch mode slows every operator down: only when a check asks
                lineage = bool(self.trace.get("lineage"))
                self._watch = _Watch(self, ops, lineage, _given_tensors(self.given) if lineage else ())
                self._depth = _dispatch_depth()
                _push_dispatch(self._watch)  # the C call itself: a notebook may have replaced torch's Python helpers
            self._replace()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _replace(self) -> None:
        """Each forbidden name's attribute refuses for the length of the block, and each forbidden Python function's
        code too (so an alias bound before, or C code calling it, meets the refusal)."""
        swapped = set()
        for dotted in self.forbid:
            owner_path, attr = dotted.rsplit(".", 1)
            owner = resolve(owner_path)
            if owner is None or not hasattr(owner, attr):
                continue
            original = getattr(owner, attr)
            if isinstance(original, _Packet):
                continue  # the dispatch mode refuses the operator; torch looks its packet up while dispatching
            harmless = _HARMLESS.get(dotted)
            statement = (f"return {harmless}" if harmless is not None
                         else f"raise __import__({__name__!r}, fromlist=['_'])._refused({dotted!r})")
            refusing = types.FunctionType(_stand_in_code(statement), {"__builtins__": __builtins__}, attr)
            own = attr in getattr(owner, "__dict__", {})
            try:
                setattr(owner, attr, refusing)
            except (AttributeError, TypeError):
                pass  # an object that takes no attributes (the autograd engine): the profile hook refuses its methods
            else:
                self._undo.append(functools.partial(_put_back, owner, attr, original, own))
            # The function and what it wraps (functools.wraps leaves it as __wrapped__: torch's registered FLOP
            # formulas are wrappers of the raw formula, reachable through it without the wrapper's name).
            while type(original) is types.FunctionType and id(original) not in swapped:
                swapped.add(id(original))
                code = original.__code__
                original.__code__ = _stand_in_code(statement, len(code.co_freevars))
                self._undo.append(functools.partial(setattr, original, "__code__", code))
                original = original.__dict__.get("__wrapped__")

    def _install(self, builtins: dict[str, list[tuple[Any, str]]]) -> None:
        """The profile hook: each builtin that Python code calls is compared with the forbidden ones of its name."""
        refuse, candidates_of = self.refuse, builtins.get

        def hook(frame, event, arg):
            if event == "c_call":
                candidates = candidates_of(arg.__name__)
                if candidates is not None and frame.f_code.co_filename != _HERE:
                    for obj, dotted in candidates:
                        if _same(arg, obj):
                            raise refuse(dotted)

        previous, previous_threads = _getprofile(), _get_thread_profile()
        _set_thread_profile(hook)
        _setprofile(hook)
        self._hook = (hook, hook.__code__)
        self._unhook = lambda: (_setprofile(previous), _set_thread_profile(previous_threads))

    def __exit__(self, *exc: Any) -> bool:
        if not self.watching:
            return False
        self.watching = False
        try:
            if self._hook is not None and not self.refusals:
                hook, code = self._hook
                if _getprofile() is not hook or hook.__code__ is not code:
                    self.refusals.append("sys.setprofile")  # the code switched the guard's hook off, or rewrote it
            for undo in reversed(self._undo):
                undo()
            self._undo = []
            if self._watch is not None:
                intact = _dispatch_depth() == self._depth + 1 and _dispatch_at(self._depth) is self._watch
                if not intact and not self.refusals:
                    self.refusals.append("torch._C._pop_torch_dispatch_stack")  # the code moved the guard's mode
                while _dispatch_depth() > self._depth + 1:
                    _pop_dispatch(None)   # a mode the student's code left behind
                if _dispatch_depth() == self._depth + 1 and _dispatch_at(self._depth) is self._watch:
                    _pop_dispatch(None)
        finally:
            if self._unhook is not None:
                self._unhook()
                self._unhook = None
            _ACTIVE.remove(self)
        return False

    def data(self, args: tuple = (), result: Any = None) -> dict | None:
        """The trace as plain data (None when none was asked for, or an outer guard watched): the operators run and how
        often, the dtypes they made and how many values (their results' elements, views included), the backward
        passes started, how many operators outside them autograd recorded (an input requires grad, grad mode on),
        which positional arguments' storages an operator wrote and, with lineage, the operators the result's values
        came from ("aten.bitwise_and:int32"), and the Python numbers they took in ("numbers:0.5", guard.NUMBERS)."""
        watch = self._watch
        if watch is None:
            return None
        written = [i for i, a in enumerate(args) if isinstance(a, _Tensor) and _key(a) in watch.written]
        lineage = None
        if watch.lineage:
            came = set()
            try:
                leaves = _tree_leaves(result)
            except Exception:
                leaves = []
            for t in leaves:
                if isinstance(t, _Tensor):
                    came |= watch.sources.get(_key(t), set())
            numbers = {e for e in came if e.startswith("#")}
            lineage = sorted(came - numbers - {_GIVEN}) + _numbers_entries(numbers)
        return {"ops": dict(watch.counts), "dtypes": [str(d).removeprefix("torch.") for d in watch.dtypes],
                "made": watch.made, "backward_passes": len(watch.tasks),
                "graph_ops": watch.graph_ops, "written": written, "lineage": lineage}
