"""grader/guard.py: a forbidden callable is refused by identity, whatever name or route reaches it, only while the
student's code runs; a trace records what that code did (issue 26). The same module runs in the grading kernel
(tests/test_bridge.py checks it there)."""
from __future__ import annotations

import functools
import operator
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

from grader import guard, registry
from grader.expect import expect
from grader.runner import run_exercise
from grader.scenario import tracing

ALIAS = torch._C._is_alias_of            # bound before any guard, under another name
PARTIAL = functools.partial(torch._C._is_alias_of)
ENGINE = torch.autograd.Variable._execution_engine
RUN_BACKWARD = ENGINE.run_backward
PROPAGATE = torch.fx.passes.shape_prop.ShapeProp.propagate  # a closure (it calls super()): its code has free variables


class Refused(Exception):
    pass


def refused(dotted: str) -> Refused:
    return Refused(dotted)


class Holder:
    same = staticmethod(torch._C._is_alias_of)


def in_a_thread(x, y):
    out = []
    t = threading.Thread(target=lambda: out.append(_try(ALIAS, x, y)))
    t.start()
    t.join()
    if isinstance(out[0], Refused):
        raise out[0]
    return out[0]


def _try(fn, *args):
    try:
        return fn(*args)
    except Refused as e:
        return e


def caught_and_tried_again(x, y):
    try:
        return ALIAS(x, y)
    except Refused:
        return ALIAS(x, y)


ROUTES = {
    "attribute": lambda x, y: torch._C._is_alias_of(x, y),
    "alias": lambda x, y: ALIAS(x, y),
    "getattr_string": lambda x, y: getattr(torch._C, "_is_al" + "ias_of")(x, y),
    "partial_made_in_the_call": lambda x, y: functools.partial(ALIAS, x)(y),
    "partial_made_before": lambda x, y: PARTIAL(x, y),
    "map": lambda x, y: next(map(ALIAS, [x], [y])),
    "operator_call": lambda x, y: operator.call(ALIAS, x, y),
    "class_attribute": lambda x, y: Holder.same(x, y),
    "a_thread": in_a_thread,
    "caught_and_tried_again": caught_and_tried_again,
}


@pytest.mark.parametrize("route", ROUTES, ids=list(ROUTES))
def test_a_builtin_is_refused_whatever_reaches_it_and_restored_after(route):
    """Catches a refusal by attribute only (issue 26: `from torch._C import _is_alias_of as ALIAS` passed 7 of 7):
    the profile hook, the replaced attribute and the search of what the code holds refuse it on every route, the
    refusal is remembered when the code catches it, and everything is as it was after the block."""
    fn, x = ROUTES[route], torch.randn(4)
    before = (sys.getprofile(), threading.getprofile(), torch._C._is_alias_of)
    watching = guard.Guard(("torch._C._is_alias_of",), refused, (fn,))
    with pytest.raises(Refused, match="torch._C._is_alias_of"):
        with watching:
            fn(x, x[1:])
        watching.check()
    assert watching.refusals[0] == "torch._C._is_alias_of"
    assert (sys.getprofile(), threading.getprofile(), torch._C._is_alias_of) == before
    assert fn(x, x[1:]) is True and not guard._ACTIVE


def test_the_engine_is_refused_by_identity_and_only_inside_the_block():
    """Catches linear_loss_grad's private engine (issue 26: run_backward under its own name passed 4 of 4): its bound
    method, an alias of it, the method through the engine's class and torch.autograd.grad (which calls it) are
    refused; the same calls outside the block (the checks' own autograd) work."""
    w = torch.randn(3, requires_grad=True)

    def loss():
        return (w * w).sum()

    calls = [lambda: ENGINE.run_backward((loss(),), (torch.ones(()),), False, False, (w,), False),
             lambda: RUN_BACKWARD((loss(),), (torch.ones(()),), False, False, (w,), False),
             lambda: type(ENGINE).run_backward(ENGINE, (loss(),), (torch.ones(()),), False, False, (w,), False),
             lambda: torch.autograd.grad(loss(), w)]
    for call in calls:
        with pytest.raises(Refused, match="run_backward"):
            with guard.Guard(("torch.autograd.Variable._execution_engine.run_backward",), refused):
                call()
        assert torch.equal(call()[0], 2 * w)


def test_a_closure_is_refused_through_an_alias_bound_before():
    """Catches a forbidden Python closure (ShapeProp.propagate calls super(): its code has a free variable) refused
    by attribute only, as before issue 26: its code is swapped too, so an alias taken before refuses; restored after."""
    graph = torch.fx.symbolic_trace(torch.nn.Linear(2, 3))
    code = PROPAGATE.__code__
    with pytest.raises(Refused, match="ShapeProp.propagate"):
        with guard.Guard(("torch.fx.passes.shape_prop.ShapeProp.propagate",), refused):
            PROPAGATE(torch.fx.passes.shape_prop.ShapeProp(graph), torch.randn(1, 2))
    assert PROPAGATE.__code__ is code
    PROPAGATE(torch.fx.passes.shape_prop.ShapeProp(graph), torch.randn(1, 2))
    assert graph.graph.find_nodes(op="output")[0].meta["tensor_meta"].shape == (1, 3)


def test_an_aten_operator_is_refused_however_it_is_reached():
    """Catches the library's operator reached under a name the forbid list does not spell: an OpOverload bound before
    the check, or a partial of one (the hook knows the builtin each overload calls); and, while a trace is recorded,
    C code reaching the operator (F.silu through torch._C._nn.silu, a partial of that): the dispatch mode refuses it."""
    x = torch.randn(5)
    silu = torch.ops.aten.silu.default
    routes = [(lambda: silu(x), None), (lambda: functools.partial(silu)(x), None),
              (lambda: torch.ops.aten.silu(x), None),
              (lambda: F.silu(x), {}), (lambda: functools.partial(torch._C._nn.silu)(x), {})]
    for call, trace in routes:
        with pytest.raises(Refused, match="torch.ops.aten.silu"):
            with guard.Guard(("torch.ops.aten.silu",), refused, trace=trace):
                call()
        assert torch.allclose(call(), x * torch.sigmoid(x))


def test_switching_the_hook_off_is_refused(monkeypatch):
    """Catches a student who turns the profile hook off, then calls the builtin kept where the search of what the code
    holds does not look (a library module's attribute): without the hook, nothing would refuse it."""
    monkeypatch.setattr(torch.nn, "_kept_by_a_student", ALIAS, raising=False)

    def sneaky(x, y):
        sys.setprofile(None)
        return torch.nn._kept_by_a_student(x, y)

    x = torch.randn(3)
    with pytest.raises(Refused, match="sys.setprofile"):
        with guard.Guard(("torch._C._is_alias_of",), refused, (sneaky,)) as watching:
            sneaky(x, x)
    assert watching.refusals == ["sys.setprofile"]
    with pytest.raises(Refused, match="torch._C._is_alias_of"):
        with guard.Guard(("torch._C._is_alias_of",), refused, (sneaky,)):
            torch.nn._kept_by_a_student(x, x)  # the same call with the hook on


def test_a_refusal_the_code_catches_still_counts(monkeypatch):
    """Catches a student who catches the refusal and calls again: CPython switches a profile hook off when it raises,
    so the second call runs; the guard remembers the first refusal and check() raises it all the same."""
    monkeypatch.setattr(torch.nn, "_kept_by_a_student", ALIAS, raising=False)

    def retry(x, y):
        try:
            return torch.nn._kept_by_a_student(x, y)
        except Refused:
            return torch.nn._kept_by_a_student(x, y)

    x = torch.randn(3)
    with guard.Guard(("torch._C._is_alias_of",), refused, (retry,)) as watching:
        assert retry(x, x) is True  # the second call went through
    with pytest.raises(Refused, match="torch._C._is_alias_of"):
        watching.check()


def test_a_guard_inside_another_stands_by():
    """Catches a scenario's guard and the guard of the student's function it calls both watching (double refusals,
    a trace counted twice): the inner one does nothing, the outer one records everything."""
    x = torch.randn(3)
    outer = guard.Guard((), refused, trace={})
    with outer:
        inner = guard.Guard(("torch._C._is_alias_of",), refused, trace={})
        with inner:
            x.mul(2)
    assert inner.data() is None and outer.data()["ops"] == {"aten.mul": 1}


def _rounds(x):
    bits = x.view(torch.int32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return torch.where(torch.isnan(x), x, rounded.view(torch.float32))


def _rows(x):
    xr = x.detach().requires_grad_()
    y = xr * xr
    rows = torch.stack([torch.autograd.grad(y[i], xr, retain_graph=True)[0] for i in range(y.numel())])
    x.add_(0)
    return rows


def test_the_trace_says_what_the_code_did():
    """Catches a trace that misses what a check judges: the operators and the dtypes they made, each backward pass
    (one per autograd.grad here), the operators recorded while a graph was built, the argument written in place, and
    where the result's values came from."""
    x = torch.randn(3)
    with guard.Guard((), refused, trace={"lineage": True}) as watching:
        out = _rounds(x)
    data = watching.data((x,), out)
    assert {"aten.bitwise_and", "aten.__rshift__", "aten.where"} <= set(data["ops"])
    assert data["dtypes"] == ["int32", "bool", "float32"] or set(data["dtypes"]) == {"int32", "bool", "float32"}
    assert "aten.bitwise_and:int32" in data["lineage"] and "aten.where:float32" in data["lineage"]
    assert data["backward_passes"] == 0 and data["written"] == [] and data["graph_ops"] == 0
    with guard.Guard((), refused, trace={}) as watching:
        _rows(x)
    data = watching.data((x,))
    assert data["backward_passes"] == 3 and data["written"] == [0] and data["graph_ops"] >= 1
    assert data["lineage"] is None


def test_a_lineage_marks_values_from_outside_the_call_and_adds_by_index_put():
    """Catches a lineage that launders values: a tensor the traced operators did not make and the call was not given
    (a table made before the call, Python numbers or NumPy turned into a tensor, another thread's work) is marked
    unseen where it enters; a wrapped Python scalar (one element) and the arguments' own values are not; an
    index_put that adds (accumulate=True) is named apart from one that writes."""
    x, table = torch.randn(6), torch.randn(6)

    def lineage(fn, given=None):
        with guard.Guard((), refused, trace={"lineage": True}, given=(x,) if given is None else given) as watching:
            out = fn(x)
        return watching.data((x,), out)["lineage"]

    assert not [e for e in lineage(lambda v: torch.where(v > 0, v, 0.0) * 2) if e.startswith("unseen")]
    assert "unseen:float32" in lineage(lambda v: torch.where(v > 0, v, table))
    assert "unseen:float32" in lineage(lambda v: v + 0 * torch.tensor(v.tolist()))  # rebuilt from Python numbers
    assert "unseen:float32" in lineage(lambda v: v * 1, given=())  # not given: the argument counts as outside
    assert "unseen:float32" not in lineage(lambda v: v * torch.tensor(2.0))  # a one-element constant
    assert "unseen:int64" in lineage(lambda v: torch.where(v > 0, v, torch.tensor([1, 2, 3, 4, 5, 6])))
    idx = torch.arange(6)
    added = lineage(lambda v: v.clone().index_put_((idx,), v, accumulate=True))
    assert "aten.index_put_(accumulate=True):float32" in added
    assert "aten.index_put_:float32" in lineage(lambda v: v.clone().index_put_((idx,), v))


def test_a_lineage_lists_python_numbers_and_marks_comparisons_with_tables():
    """Catches a lineage that lets Python numbers in unnoticed (torch.tensor(v), torch.full((), v), an operand torch
    wraps, or a 0-dim tensor computed from such numbers alone; listed once per different value), that counts a tensor
    of no elements as one, that lets a 0-dim view of a storage no traced operator made pass as a number, or that
    cannot tell a search (values ordered against many different values, floats or integers, in place too) from a
    NaN, inf or equality test."""
    x = torch.randn(6)

    def lineage(fn):
        with guard.Guard((), refused, trace={"lineage": True}, given=(x,)) as watching:
            out = fn(x)
        return watching.data((x,), out)["lineage"]

    def numbers(fn):
        return [e for e in lineage(fn) if e.startswith(f"{guard.NUMBERS}:")]

    assert numbers(lambda v: torch.where(v > 0, v, 0.0) * 0.0) == ["numbers:0.0"]  # 0 and 0.0: one number
    stacked = numbers(lambda v: torch.stack([torch.tensor(1.5), torch.full((), 2.5), v[0] * 0 + 3.5]))
    assert stacked == ["numbers:0.0", "numbers:1.5", "numbers:2.5", "numbers:3.5"]
    # a 0-dim tensor computed from numbers alone is a number too (2.5 - 1.0 = 1.5; then 0.75, halved), not one
    # computed from the arguments (v[0] * 2.0)
    assert "numbers:0.75" in numbers(lambda v: torch.stack([(torch.tensor(2.5) - 1.0) / 2, v[0] * 2.0]))
    assert not numbers(lambda v: v[0] + v[1])  # indices are not values
    assert not numbers(lambda v: torch.cat([v, torch.empty(0)]))  # no elements: no number
    outside = torch.randn(3)
    assert "unseen:float32" in lineage(lambda v: torch.stack(outside.unbind()) + v[:3])  # 0-dim views of it
    tests = lineage(lambda v: torch.where((v != v) | (v.abs() == float("inf")) | torch.isinf(v), v, v * 2))
    assert not [e for e in tests if guard.THRESHOLDS in e]
    equal = lineage(lambda v: torch.where((v == v.clone()) & ((v * 2) != v), v, v * 2))  # equality: no search
    assert not [e for e in equal if guard.THRESHOLDS in e]
    table = torch.randn(6)
    assert f"aten.lt{guard.THRESHOLDS}:bool" in lineage(lambda v: torch.where(v < table * 1, 1.0, v))
    # in place: judged before the 0s and 1s overwrite v's copy
    assert f"aten.ge_{guard.THRESHOLDS}:float32" in lineage(lambda v: v.clone().ge_(table * 1))
    # a float's bits ordered against a table of bit patterns: a search too; against one bound (NaN's), a test
    bits = lineage(lambda v: torch.where(v.view(torch.int32) < table.view(torch.int32) + 0, v, v * 2))
    assert f"aten.lt{guard.THRESHOLDS}:bool" in bits
    nan_test = lineage(lambda v: torch.where((v.view(torch.int32) & 0x7FFFFFFF) > 0x7F800000, v, v * 2))
    assert not [e for e in nan_test if guard.THRESHOLDS in e]
    # the low bits against a bound of two values (0x7FFF plus the kept bit): rounding's own test, no search
    lsb = torch.tensor([0, 1, 1, 0, 1, 0], dtype=torch.int32)
    ties = lineage(lambda v: torch.where((v.view(torch.int32) & 0xFFFF) > 0x7FFF + lsb, v, v * 2))
    assert not [e for e in ties if guard.THRESHOLDS in e]


TRACED = registry.exercise("testing.traced", points=1, needs=("f",), forbid=("torch._C._is_alias_of",))


@TRACED.check
def counts_backward_passes(f):
    """runs f twice under a trace, and autograd itself around it"""
    w = torch.randn(3, requires_grad=True)
    (g,) = torch.autograd.grad((w * w).sum(), w)  # the check's own backward pass: not the student's
    with tracing() as trace:
        f(torch.randn(2))
        f(torch.randn(2))
    expect(trace.backward_passes == 4, f"counted {trace.backward_passes} backward passes")
    expect(trace.written == {0}, f"written: {trace.written}")
    expect(torch.equal(g, 2 * w), "the check's own autograd")


def test_a_check_reads_the_trace_of_the_students_calls_only():
    """Catches a trace that counts the check's own autograd, or misses a call: two calls of two passes each."""
    r = run_exercise("testing.traced", _rows, hidden=True)
    assert r.status == "passed", r.checks[0].message
